/* config/config.c: the typed configuration from torchrun's command line (through the launcher's parser and
 * a detected platform), its checks and their messages. Each worker's argv and environment from it:
 * test_worker_env.c. */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli.h"
#include "config.h"
#include "config_parse.h"
#include "platform.h"
#include "rdzv.h"
#include "store_acl.h"

static void parse_err(const char *want, char **envp, const char *const *args) {
  trun_config cfg;
  char err[512] = "";
  ck_assert_int_eq(parse(&cfg, err, args, envp), -1);
  ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
}

START_TEST(defaults_single_node) {
  trun_config c;
  PARSE_OK(&c, "train.py");
  ck_assert_int_eq(c.min_nodes, 1);
  ck_assert_int_eq(c.max_nodes, 1);
  ck_assert_str_eq(c.nproc_spec, "1");
  ck_assert_int_eq(c.backend, TRUN_RDZV_STATIC);
  /* One node and no port asked for: a private store on a free port with a fresh run id. */
  ck_assert_int_eq(c.endpoint_port, 0);
  ck_assert_int_eq((int)strlen(c.run_id), 36);
  ck_assert_int_eq(c.max_restarts, 0);
  ck_assert_double_eq_tol(c.shutdown_timeout, 30, 1e-9);
  ck_assert_int_eq(c.nsignals, 4);
  ck_assert_str_eq(c.role, "default");
  ck_assert_str_eq(c.script, "train.py");
}
END_TEST

START_TEST(static_multi_node) {
  trun_config c;
  PARSE_OK(&c, "--nnodes", "3", "--node-rank", "2", "--master-addr", "10.0.0.1", "--master-port", "1234",
           "--nproc_per_node=4", "t.py", "--lr", "0.1");
  ck_assert_int_eq(c.max_nodes, 3);
  ck_assert_int_eq(c.node_rank, 2);
  ck_assert_str_eq(c.endpoint_host, "10.0.0.1");
  ck_assert_int_eq(c.endpoint_port, 1234);
  ck_assert_str_eq(c.run_id, "none");
  ck_assert_int_eq(c.nscript_args, 2);
  ck_assert_str_eq(c.script_args[0], "--lr");
}
END_TEST

START_TEST(standalone_and_endpoints) {
  trun_config c;
  /* issue 38: --standalone with several nodes asked for is refused, not silently run as one node */
  parse_err("--standalone runs one node, but --nnodes 2 asks for more", NULL,
            (const char *const[]){"--standalone", "--nnodes", "2", "t.py", NULL});
  parse_err("--nnodes 1:4 asks for more", NULL,
            (const char *const[]){"--standalone", "--nnodes", "1:4", "t.py", NULL});
  PARSE_OK(&c, "--standalone", "--nnodes", "1", "t.py");
  PARSE_OK(&c, "--standalone", "t.py");
  ck_assert_int_eq(c.backend, TRUN_RDZV_C10D);
  ck_assert_int_eq(c.max_nodes, 1);
  ck_assert_str_eq(c.endpoint_host, "localhost");
  ck_assert_int_eq(c.endpoint_port, 0);
  PARSE_OK(&c, "--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1]:29411", "--nnodes", "1:4", "t.py");
  ck_assert_str_eq(c.endpoint_host, "::1");
  ck_assert_int_eq(c.endpoint_port, 29411);
  ck_assert_int_eq(c.min_nodes, 1);
  ck_assert_int_eq(c.max_nodes, 4);
  PARSE_OK(&c, "--rdzv-backend", "c10d", "--rdzv-endpoint", "head.example", "t.py");
  ck_assert_int_eq(c.endpoint_port, 29400);
  PARSE_OK(&c, "--master-addr", "[fe80::1]", "--master-port", "5000", "--nnodes", "2", "t.py");
  ck_assert_str_eq(c.endpoint_host, "fe80::1");
}
END_TEST

/* c10d without --rdzv-endpoint: localhost (torchrun's rule), unless a platform detected the master. */
START_TEST(dynamic_endpoint_from_platform) {
  char *env[] = {"SLURM_JOB_ID=5",
                 "SLURM_NNODES=3",
                 "SLURM_NODEID=2",
                 "SLURM_JOB_NODELIST=n[1-3]",
                 "SLURM_PROCID=2",
                 "SLURM_STEP_NUM_TASKS=3",
                 NULL};
  static char *argv[] = {"trun", "--nnodes", "2:3", "--rdzv-backend", "c10d", "t.py", NULL};
  static trun_settings cl;
  char err[512] = "";
  trun_config c;
  ck_assert_msg(trun_cli_parse(6, argv, env, &cl, err, sizeof(err)) == 0, "%s", err);
  trun_platform plat;
  trun_platform_host h = {.hostname = "n3", .fqdn = "n3", .mpi_hostfile = "/nonexistent"};
  ck_assert_msg(trun_platform_detect(env, &h, &plat, err, sizeof(err)) == 0, "%s", err);
  trun_platform_apply(&plat, &cl);
  ck_assert_msg(trun_config_from_settings(&cl, env, &c, err, sizeof(err)) == 0, "%s", err);
  ck_assert_str_eq(c.endpoint_host, "n1");
  ck_assert_int_eq(c.endpoint_port, 29400);
  ck_assert_str_eq(c.run_id, "5");
  trun_platform_free(&plat);
  PARSE_OK(&c, "--nnodes", "2:3", "--rdzv-backend", "c10d", "--master-addr", "head", "t.py");
  ck_assert_str_eq(c.endpoint_host, "localhost");
}
END_TEST

/* --rdzv-status reads the backend and size from the store: it knows which of them the command line gave, and
 * a command line that names a job without its backend (a range, an endpoint without a port) still names it.
 */
START_TEST(rdzv_status_command_line) {
  trun_config c;
  PARSE_OK(&c, "t.py");
  ck_assert(!c.nnodes_given && !c.backend_given);
  PARSE_OK(&c, "--nnodes", "2", "--rdzv-backend", "static", "--master-port", "5", "t.py");
  ck_assert(c.nnodes_given && c.backend_given);
  PARSE_OK(&c, "--rdzv-status", "--rdzv-endpoint", "head", "--rdzv-id", "j");
  ck_assert(!c.nnodes_given && !c.backend_given);
  ck_assert_str_eq(c.endpoint_host, "head");
  ck_assert_int_eq(c.endpoint_port, 29400);
  PARSE_OK(&c, "--rdzv-status", "--nnodes", "1:2", "--rdzv-endpoint", "head:7");
  ck_assert(c.nnodes_given);
  ck_assert_int_eq(c.min_nodes, 1);
  ck_assert_int_eq(c.max_nodes, 2);
  /* Starting a job, those stay errors. */
  parse_err("a range needs --rdzv-backend c10d", NULL,
            (const char *const[]){"--nnodes", "1:2", "--rdzv-endpoint", "head:7", "t.py", NULL});
  parse_err("needs a port with the static backend", NULL,
            (const char *const[]){"--rdzv-endpoint", "head", "t.py", NULL});
  parse_err(
      "needs a port with the static backend", NULL,
      (const char *const[]){"--rdzv-status", "--rdzv-backend", "static", "--rdzv-endpoint", "head", NULL});
}
END_TEST

START_TEST(redirects_tee_filter) {
  trun_config c;
  PARSE_OK(&c, "--redirects", "0:3,1:1", "-t", "2", "--local-ranks-filter", "0,2", "t.py");
  ck_assert_int_eq(trun_config_redirects(&c, 0), 3);
  ck_assert_int_eq(trun_config_redirects(&c, 1), 1 | 2); /* tee 2 implies the stderr file */
  ck_assert_int_eq(trun_config_redirects(&c, 5), 2);
  ck_assert_int_eq(trun_config_tee(&c, 1), 2);
  ck_assert_int_eq(trun_config_console_shows(&c, 0), 1);
  ck_assert_int_eq(trun_config_console_shows(&c, 1), 0);
  ck_assert_int_eq(trun_config_console_shows(&c, 2), 1);
}
END_TEST

START_TEST(signals_and_timeouts) {
  trun_config c;
  PARSE_OK(&c, "--signals-to-handle", "SIGTERM, SIGUSR1", "--shutdown-timeout", "2.5", "t.py");
  ck_assert_int_eq(c.nsignals, 2);
  ck_assert_int_eq(c.signals[1], SIGUSR1);
  ck_assert_double_eq_tol(c.shutdown_timeout, 2.5, 1e-9);
  char *env[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=7", NULL};
  static const char *const a[] = {"t.py", NULL};
  char err[512];
  ck_assert_int_eq(parse(&c, err, a, env), 0);
  ck_assert_double_eq_tol(c.shutdown_timeout, 7, 1e-9);
}
END_TEST

/* --exit-barrier-timeout (pytorch#157318): option > PET_ / TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT > 300; torch's
 * event log handler and logs specs names, others exit 2. */
START_TEST(exit_barrier_and_names) {
  trun_config c;
  PARSE_OK(&c, "t.py");
  ck_assert_double_eq_tol(c.exit_barrier_timeout, 300, 1e-9);
  PARSE_OK(&c, "--exit-barrier-timeout", "2.5", "--event-log-handler", "console", "--logs-specs", "default",
           "t.py");
  ck_assert_double_eq_tol(c.exit_barrier_timeout, 2.5, 1e-9);
  PARSE_OK(&c, "--exit_barrier_timeout=0", "--event_log_handler", "dynamic_rendezvous", "t.py");
  ck_assert_double_eq_tol(c.exit_barrier_timeout, 0, 1e-9);
  char *env[] = {"TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT=7", NULL};
  static const char *const a[] = {"t.py", NULL};
  static const char *const b[] = {"--exit-barrier-timeout", "9", "t.py", NULL};
  char err[512];
  ck_assert_int_eq(parse(&c, err, a, env), 0);
  ck_assert_double_eq_tol(c.exit_barrier_timeout, 7, 1e-9);
  ck_assert_int_eq(parse(&c, err, b, env), 0);
  ck_assert_double_eq_tol(c.exit_barrier_timeout, 9, 1e-9);
  char *badenv[] = {"TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT=soon", NULL};
  ck_assert_int_lt(parse(&c, err, a, badenv), 0);
  ck_assert_ptr_nonnull(strstr(err, "TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT 'soon'"));
  parse_err("--exit-barrier-timeout '-1'", NULL,
            (const char *const[]){"--exit-barrier-timeout", "-1", "t.py", NULL});
  parse_err("--exit-barrier-timeout 'nan'", NULL,
            (const char *const[]){"--exit-barrier-timeout", "nan", "t.py", NULL});
  parse_err("--event-log-handler 'file' is not an event log handler", NULL,
            (const char *const[]){"--event-log-handler", "file", "t.py", NULL});
  parse_err("--logs-specs 'mine' is not a torchrun.logs_specs entry point", NULL,
            (const char *const[]){"--logs-specs", "mine", "t.py", NULL});
}
END_TEST

/* An unknown --rdzv-conf key, as the rendezvous hears of it (it warns). */
static void count_unknown(void *arg, const char *key) {
  ck_assert_str_eq(key, "bogus");
  (*(int *)arg)++;
}

/* --rdzv-conf values: checked with the rest of the configuration (exit 2 before anything starts). */
START_TEST(rdzv_conf_values) {
  parse_err("--rdzv-conf join_timeout=abc: must be a positive whole number of seconds", NULL,
            (const char *const[]){"--rdzv-conf", "join_timeout=abc", "t.py", NULL});
  parse_err("--rdzv-conf keep_alive_max_attempt=0: must be a positive whole number of attempts", NULL,
            (const char *const[]){"--rdzv-conf", "keep_alive_max_attempt=0", "t.py", NULL});
  parse_err("--rdzv-conf is_host=maybe: use true or false", NULL,
            (const char *const[]){"--rdzv-conf", "is_host=maybe", "t.py", NULL});
  parse_err("--rdzv-conf trun_heartbeat_interval=0.01: give seconds between 0.05 and 3600", NULL,
            (const char *const[]){"--rdzv-conf", "trun_heartbeat_interval=0.01", "t.py", NULL});
  parse_err("--rdzv-conf store_type=file: trun supports the tcp store only", NULL,
            (const char *const[]){"--rdzv-conf", "store_type=file", "t.py", NULL});
  parse_err("--rdzv-conf 'x': 'x' is not key=value", NULL,
            (const char *const[]){"--rdzv-conf", "x", "t.py", NULL});
  trun_config c;
  PARSE_OK(&c, "--rdzv-conf", "join_timeout=30, is_host=no,bogus=1,torch_version=1.13", "t.py");
  char err[256] = "", v[16];
  int unknown = 0;
  ck_assert_int_eq(trun_config_rdzv_conf_check(c.rdzv_conf, count_unknown, &unknown, err, sizeof(err)), 0);
  ck_assert_int_eq(unknown, 1);
  ck_assert_int_eq(trun_config_conf_get(c.rdzv_conf, "is_host", v, sizeof(v)), 1);
  ck_assert_str_eq(v, "no");
  ck_assert_int_eq(trun_config_conf_bool(c.rdzv_conf, "is_host"), 0);
  ck_assert_int_eq(trun_config_conf_bool(c.rdzv_conf, "absent"), -1);
  /* trun_token values masked in place, whatever surrounds them; other keys kept */
  char m[] = "join_timeout=30, trun_token = abc-def ,x=1,--rdzv-conf=trun_token=zz";
  ck_assert_int_eq(trun_config_conf_mask(m), 2);
  ck_assert_str_eq(m, "join_timeout=30, trun_token = ******* ,x=1,--rdzv-conf=trun_token=**");
  char none[] = "trun_tokens,trun_token";
  ck_assert_int_eq(trun_config_conf_mask(none), 0);
  ck_assert_int_eq(trun_config_conf_mask(NULL), 0);
}
END_TEST

START_TEST(bad_inputs) {
  parse_err("--nnodes '0'", NULL, (const char *const[]){"--nnodes", "0", "t.py", NULL});
  parse_err("--warm-start-modules 'torch,,x'", NULL,
            (const char *const[]){"--warm-start-modules", "torch,,x", "t.py", NULL});
  parse_err("--warm-start-modules 'os;rm'", NULL,
            (const char *const[]){"--warm-start-modules", "os;rm", "t.py", NULL});
  parse_err("--warm-start-modules 'a.'", NULL,
            (const char *const[]){"--warm-start-modules", "a.", "t.py", NULL});
  parse_err("--warm-start-modules '1a'", NULL,
            (const char *const[]){"--warm-start-modules", "1a", "t.py", NULL});
  parse_err("--warm-start-cuda needs --warm-start", NULL,
            (const char *const[]){"--warm-start-cuda", "t.py", NULL});
  parse_err("--warm-start-nccl needs --warm-start --warm-start-cuda", NULL,
            (const char *const[]){"--warm-start", "--warm-start-nccl", "t.py", NULL});
  {
    trun_config ok;
    PARSE_OK(&ok, "--warm-start", "--warm-start-modules", "torch,numpy.linalg,_x1", "t.py");
    ck_assert(ok.warm_start);
    ck_assert_str_eq(ok.warm_modules, "torch,numpy.linalg,_x1");
    ck_assert(!ok.warm_cuda);
    PARSE_OK(&ok, "--warm-start", "--warm-start-cuda", "t.py");
    ck_assert(ok.warm_start && ok.warm_cuda && !ok.warm_nccl);
    PARSE_OK(&ok, "--warm-start", "--warm-start-cuda", "--warm-start-nccl", "t.py");
    ck_assert(ok.warm_start && ok.warm_cuda && ok.warm_nccl);
    PARSE_OK(&ok, "t.py");
    ck_assert(!ok.warm_start);
    ck_assert_str_eq(ok.warm_modules, "torch,torch.distributed");
  }
  parse_err("--nnodes '3:2'", NULL, (const char *const[]){"--nnodes", "3:2", "t.py", NULL});
  parse_err("--node-rank 2 must be below --nnodes 2", NULL,
            (const char *const[]){"--nnodes", "2", "--node-rank", "2", "t.py", NULL});
  parse_err("--nproc-per-node '0'", NULL, (const char *const[]){"--nproc-per-node", "0", "t.py", NULL});
  parse_err("--redirects '7'", NULL, (const char *const[]){"--redirects", "7", "t.py", NULL});
  parse_err("--rdzv-backend 'etcd'", NULL, (const char *const[]){"--rdzv-backend", "etcd", "t.py", NULL});
  parse_err("--signals-to-handle", NULL,
            (const char *const[]){"--signals-to-handle", "SIGFOO", "t.py", NULL});
  parse_err("cannot be used together", NULL, (const char *const[]){"-m", "--no-python", "t.py", NULL});
  parse_err("training_script", NULL, (const char *const[]){"--nnodes", "1", NULL});
  parse_err("--numa-binding 'socket': trun implements only 'node'", NULL,
            (const char *const[]){"--numa-binding", "socket", "t.py", NULL});
  trun_config x;
  PARSE_OK(&x, "--explain", "--no-imds", "--numa-binding", "node"); /* --explain needs no script */
  ck_assert_int_eq(x.explain, 1);
  ck_assert_int_eq(x.no_imds, 1);
  ck_assert_str_eq(x.numa_binding, "node");
  ck_assert_ptr_null(x.script);
  char *env[] = {"PET_MAX_RESTARTS=x", NULL};
  parse_err("PET_MAX_RESTARTS=x", env, (const char *const[]){"t.py", NULL});
}
END_TEST

/* --preflight-pass / --preflight-warn: GB/s thresholds for trun-preflight, unset = -1 (the layout's). */
START_TEST(preflight_thresholds) {
  trun_config c;
  PARSE_OK(&c, "--preflight", "t.py");
  ck_assert_double_eq(c.preflight_pass, -1);
  ck_assert_double_eq(c.preflight_warn, -1);
  PARSE_OK(&c, "--preflight", "--preflight-pass", "2.5", "--preflight_warn=1", "t.py");
  ck_assert_double_eq_tol(c.preflight_pass, 2.5, 1e-12);
  ck_assert_double_eq_tol(c.preflight_warn, 1, 1e-12);
  PARSE_OK(&c, "--preflight-warn", "0", "t.py"); /* warn alone: any pass threshold of the layout */
  ck_assert_double_eq(c.preflight_warn, 0);
  ck_assert_double_eq(c.preflight_pass, -1);
  char *env[] = {"TRUN_PREFLIGHT_PASS=40", NULL};
  static const char *const a[] = {"t.py", NULL};
  char err[512];
  ck_assert_int_eq(parse(&c, err, a, env), 0);
  ck_assert_double_eq_tol(c.preflight_pass, 40, 1e-12);
  parse_err("--preflight-pass 'x' must be a bandwidth in GB/s >= 0", NULL,
            (const char *const[]){"--preflight-pass", "x", "t.py", NULL});
  parse_err("--preflight-pass '-1' must be a bandwidth in GB/s >= 0", NULL,
            (const char *const[]){"--preflight-pass=-1", "t.py", NULL});
  parse_err("--preflight-warn 'inf' must be a bandwidth in GB/s >= 0", NULL,
            (const char *const[]){"--preflight-warn", "inf", "t.py", NULL});
  parse_err("--preflight-warn 5 must not be above --preflight-pass 2 (warn <= pass)", NULL,
            (const char *const[]){"--preflight-pass", "2", "--preflight-warn", "5", "t.py", NULL});
  char *bad_env[] = {"TRUN_PREFLIGHT_WARN=nan", NULL};
  parse_err("(from TRUN_PREFLIGHT_WARN=nan)", bad_env, (const char *const[]){"t.py", NULL});
}
END_TEST

/* --health-check off|warn|fail (default warn, TRUN_HEALTH_CHECK) and --health-checks (kept as written: the
 * agent checks the names, agent/discover/health.h). */
START_TEST(health_check) {
  trun_config c;
  PARSE_OK(&c, "t.py");
  ck_assert_int_eq(c.health_check, TRUN_HEALTH_CHECK_WARN);
  ck_assert_str_eq(c.health_checks, "all");
  PARSE_OK(&c, "--health-check", "fail", "--health-checks=-pcie,-shm", "t.py");
  ck_assert_int_eq(c.health_check, TRUN_HEALTH_CHECK_FAIL);
  ck_assert_str_eq(c.health_checks, "-pcie,-shm");
  PARSE_OK(&c, "--health_check=off", "t.py");
  ck_assert_int_eq(c.health_check, TRUN_HEALTH_CHECK_OFF);
  char *env[] = {"TRUN_HEALTH_CHECK=fail", "TRUN_HEALTH_CHECKS=ecc", NULL};
  static const char *const a[] = {"t.py", NULL};
  char err[512];
  ck_assert_int_eq(parse(&c, err, a, env), 0);
  ck_assert_int_eq(c.health_check, TRUN_HEALTH_CHECK_FAIL);
  ck_assert_str_eq(c.health_checks, "ecc");
  parse_err("--health-check 'maybe' must be off, warn or fail", NULL,
            (const char *const[]){"--health-check", "maybe", "t.py", NULL});
  char *bad_env[] = {"TRUN_HEALTH_CHECK=on", NULL};
  parse_err("--health-check 'on' must be off, warn or fail (from TRUN_HEALTH_CHECK=on)", bad_env,
            (const char *const[]){"t.py", NULL});
}
END_TEST

/* --store-threads: 1-64 or auto (0); auto's rule from the usable CPUs. */
START_TEST(store_threads) {
  trun_config c;
  PARSE_OK(&c, "t.py");
  ck_assert_int_eq(c.store_threads, 0);
  PARSE_OK(&c, "--store-threads", "8", "t.py");
  ck_assert_int_eq(c.store_threads, 8);
  PARSE_OK(&c, "--store_threads=auto", "t.py");
  ck_assert_int_eq(c.store_threads, 0);
  char *env[] = {"TRUN_STORE_THREADS=3", NULL};
  static const char *const a[] = {"t.py", NULL};
  char err[512];
  ck_assert_int_eq(parse(&c, err, a, env), 0);
  ck_assert_int_eq(c.store_threads, 3);
  parse_err("--store-threads '0' must be 1-64 or auto", NULL,
            (const char *const[]){"--store-threads", "0", "t.py", NULL});
  parse_err("--store-threads '65' must be 1-64 or auto", NULL,
            (const char *const[]){"--store-threads", "65", "t.py", NULL});
  parse_err("--store-threads 'many' must be 1-64 or auto", NULL,
            (const char *const[]){"--store-threads", "many", "t.py", NULL});
  ck_assert_int_eq(trun_store_threads_auto(1), 1);
  ck_assert_int_eq(trun_store_threads_auto(7), 1);
  ck_assert_int_eq(trun_store_threads_auto(8), 2);
  ck_assert_int_eq(trun_store_threads_auto(31), 2);
  ck_assert_int_eq(trun_store_threads_auto(32), 4);
  ck_assert_int_eq(trun_store_threads_auto(192), 4);
}
END_TEST

int main(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, defaults_single_node);
  tcase_add_test(tc, static_multi_node);
  tcase_add_test(tc, standalone_and_endpoints);
  tcase_add_test(tc, dynamic_endpoint_from_platform);
  tcase_add_test(tc, rdzv_status_command_line);
  tcase_add_test(tc, redirects_tee_filter);
  tcase_add_test(tc, signals_and_timeouts);
  tcase_add_test(tc, bad_inputs);
  tcase_add_test(tc, rdzv_conf_values);
  tcase_add_test(tc, preflight_thresholds);
  tcase_add_test(tc, store_threads);
  tcase_add_test(tc, health_check);
  tcase_add_test(tc, exit_barrier_and_names);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
