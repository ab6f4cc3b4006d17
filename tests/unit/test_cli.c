/* launcher/cli.c: the option table, argv parsing with argparse's rules, PET_* fallbacks and --help. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define ARGV(...) ((char *[]){"trun", __VA_ARGS__, NULL})
#define ENV(...) ((char *[]){__VA_ARGS__, NULL})
#define NOENV ((char *[]){NULL})

static int count(char **v) {
  int n = 0;
  while (v[n]) n++;
  return n;
}

static char err[1024];
static trun_settings cl;

/* Parses and checks that a failure leaves a one-line reason and a success leaves err empty. */
static int parse(char **argv, char **envp) {
  memset(err, 'x', sizeof(err));
  int rc = trun_cli_parse(count(argv), argv, envp, &cl, err, sizeof(err));
  ck_assert_ptr_nonnull(memchr(err, '\0', sizeof(err)));
  ck_assert_ptr_null(strchr(err, '\n'));
  if (rc == 0)
    ck_assert_str_eq(err, "");
  else
    ck_assert_int_gt(strlen(err), 0);
  return rc;
}

static void assert_cli(trun_opt_id id, const char *val) {
  ck_assert_pstr_eq(cl.v[id].val, val);
  ck_assert_int_eq(cl.v[id].src, TRUN_SRC_CLI);
}

static void assert_fail(char **argv, char **envp, const char *msg) {
  ck_assert_int_eq(parse(argv, envp), -1);
  ck_assert_str_eq(err, msg);
}

/* ---- the table --------------------------------------------------------------------------------------- */

typedef struct {
  trun_opt_id id;
  const char *name, *alias;
  char short_name;
  int is_flag;
  const char *def, *env, *group;
} expect_desc;

static const expect_desc expected[] = {
    {TRUN_OPT_NNODES, "nnodes", NULL, 0, 0, "1:1", "PET_NNODES", "Worker/node size related arguments"},
    {TRUN_OPT_NPROC_PER_NODE, "nproc-per-node", "nproc_per_node", 0, 0, "1", "PET_NPROC_PER_NODE",
     "Worker/node size related arguments"},
    {TRUN_OPT_RDZV_BACKEND, "rdzv-backend", "rdzv_backend", 0, 0, "static", "PET_RDZV_BACKEND",
     "Rendezvous related arguments"},
    {TRUN_OPT_RDZV_ENDPOINT, "rdzv-endpoint", "rdzv_endpoint", 0, 0, "", "PET_RDZV_ENDPOINT",
     "Rendezvous related arguments"},
    {TRUN_OPT_RDZV_ID, "rdzv-id", "rdzv_id", 0, 0, "none", "PET_RDZV_ID", "Rendezvous related arguments"},
    {TRUN_OPT_RDZV_CONF, "rdzv-conf", "rdzv_conf", 0, 0, "", "PET_RDZV_CONF", "Rendezvous related arguments"},
    {TRUN_OPT_STANDALONE, "standalone", NULL, 0, 1, NULL, "PET_STANDALONE", "Rendezvous related arguments"},
    {TRUN_OPT_MAX_RESTARTS, "max-restarts", "max_restarts", 0, 0, "0", "PET_MAX_RESTARTS",
     "User-code launch related arguments"},
    {TRUN_OPT_MONITOR_INTERVAL, "monitor-interval", "monitor_interval", 0, 0, "0.1", "PET_MONITOR_INTERVAL",
     "User-code launch related arguments"},
    {TRUN_OPT_START_METHOD, "start-method", "start_method", 0, 0, "spawn", "PET_START_METHOD",
     "User-code launch related arguments"},
    {TRUN_OPT_EVENT_LOG_HANDLER, "event-log-handler", "event_log_handler", 0, 0, "null",
     "PET_EVENT_LOG_HANDLER", "User-code launch related arguments"},
    {TRUN_OPT_ROLE, "role", NULL, 0, 0, "default", "PET_ROLE", "User-code launch related arguments"},
    {TRUN_OPT_MODULE, "module", NULL, 'm', 1, NULL, "PET_MODULE", "User-code launch related arguments"},
    {TRUN_OPT_NO_PYTHON, "no-python", "no_python", 0, 1, NULL, "PET_NO_PYTHON",
     "User-code launch related arguments"},
    {TRUN_OPT_RUN_PATH, "run-path", "run_path", 0, 1, NULL, "PET_RUN_PATH",
     "User-code launch related arguments"},
    {TRUN_OPT_LOG_DIR, "log-dir", "log_dir", 0, 0, NULL, "PET_LOG_DIR", "User-code launch related arguments"},
    {TRUN_OPT_REDIRECTS, "redirects", NULL, 'r', 0, "0", "PET_REDIRECTS",
     "User-code launch related arguments"},
    {TRUN_OPT_TEE, "tee", NULL, 't', 0, "0", "PET_TEE", "User-code launch related arguments"},
    {TRUN_OPT_LOCAL_RANKS_FILTER, "local-ranks-filter", "local_ranks_filter", 0, 0, "",
     "PET_LOCAL_RANKS_FILTER", "User-code launch related arguments"},
    {TRUN_OPT_DUPLICATE_STDOUT_FILTERS, "duplicate-stdout-filters", "duplicate_stdout_filters", 0, 0, "",
     "PET_DUPLICATE_STDOUT_FILTERS", "User-code launch related arguments"},
    {TRUN_OPT_DUPLICATE_STDERR_FILTERS, "duplicate-stderr-filters", "duplicate_stderr_filters", 0, 0, "",
     "PET_DUPLICATE_STDERR_FILTERS", "User-code launch related arguments"},
    {TRUN_OPT_NODE_RANK, "node-rank", "node_rank", 0, 0, "0", "PET_NODE_RANK",
     "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_MASTER_ADDR, "master-addr", "master_addr", 0, 0, "127.0.0.1", "PET_MASTER_ADDR",
     "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_MASTER_PORT, "master-port", "master_port", 0, 0, "29500", "PET_MASTER_PORT",
     "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_LOCAL_ADDR, "local-addr", "local_addr", 0, 0, NULL, "PET_LOCAL_ADDR",
     "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_LOGS_SPECS, "logs-specs", "logs_specs", 0, 0, NULL, NULL,
     "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_NUMA_BINDING, "numa-binding", "numa_binding", 0, 0, NULL, NULL,
     "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_SIGNALS_TO_HANDLE, "signals-to-handle", "signals_to_handle", 0, 0,
     "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "PET_SIGNALS_TO_HANDLE",
     "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_SHUTDOWN_TIMEOUT, "shutdown-timeout", "shutdown_timeout", 0, 0, NULL, "PET_SHUTDOWN_TIMEOUT",
     "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_VIRTUAL_LOCAL_RANK, "virtual-local-rank", "virtual_local_rank", 0, 1, NULL,
     "PET_VIRTUAL_LOCAL_RANK", "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_DRY_RUN, "dry-run", "dry_run", 0, 1, NULL, "TRUN_DRY_RUN", "trun"},
    {TRUN_OPT_RDZV_STATUS, "rdzv-status", NULL, 0, 1, NULL, NULL, "trun"},
    {TRUN_OPT_LOG_LINE_PREFIX, "log-line-prefix", "log_line_prefix", 0, 0, NULL,
     "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "trun"},
    {TRUN_OPT_EXPLAIN, "explain", NULL, 0, 1, NULL, NULL, "trun"},
    {TRUN_OPT_NO_IMDS, "no-imds", "no_imds", 0, 1, NULL, NULL, "trun"},
    {TRUN_OPT_CONFIG, "config", NULL, 0, 0, NULL, "TRUN_CONFIG", "trun"},
    {TRUN_OPT_PRINT_CONFIG, "print-config", "print_config", 0, 1, NULL, NULL, "trun"},
    {TRUN_OPT_HOSTFILE, "hostfile", NULL, 0, 0, NULL, NULL, "trun"},
    {TRUN_OPT_RSH, "rsh", NULL, 0, 0, "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=10",
     NULL, "trun"},
    {TRUN_OPT_ON_SPLIT_PODS, "on-split-pods", "on_split_pods", 0, 0, "warn", "TRUN_ON_SPLIT_PODS", "trun"},
    {TRUN_OPT_NCCL_REPORT, "nccl-report", "nccl_report", 0, 1, NULL, "TRUN_NCCL_REPORT", "trun"},
    {TRUN_OPT_PREFLIGHT, "preflight", NULL, 0, 1, NULL, "TRUN_PREFLIGHT", "trun"},
    {TRUN_OPT_PREFLIGHT_PASS, "preflight-pass", "preflight_pass", 0, 0, NULL, "TRUN_PREFLIGHT_PASS", "trun"},
    {TRUN_OPT_PREFLIGHT_WARN, "preflight-warn", "preflight_warn", 0, 0, NULL, "TRUN_PREFLIGHT_WARN", "trun"},
    {TRUN_OPT_EVENTS, "events", NULL, 0, 0, NULL, "TRUN_EVENTS", "trun"},
    {TRUN_OPT_METRICS_PORT, "metrics-port", "metrics_port", 0, 0, NULL, "TRUN_METRICS_PORT", "trun"},
    {TRUN_OPT_STALL_TIMEOUT, "stall-timeout", "stall_timeout", 0, 0, NULL, "TRUN_STALL_TIMEOUT", "trun"},
    {TRUN_OPT_STALL_SIGNAL, "stall-signal", "stall_signal", 0, 0, NULL, "TRUN_STALL_SIGNAL", "trun"},
    {TRUN_OPT_HANG_TIMEOUT, "hang-timeout", "hang_timeout", 0, 0, "300", "TRUN_HANG_TIMEOUT", "trun"},
    {TRUN_OPT_STORE_ALLOW_PEERS, "store-allow-peers", "store_allow_peers", 0, 1, NULL,
     "TRUN_STORE_ALLOW_PEERS", "trun"},
    {TRUN_OPT_STORE_THREADS, "store-threads", "store_threads", 0, 0, "auto", "TRUN_STORE_THREADS", "trun"},
    {TRUN_OPT_GPU_CACHE, "gpu-cache", "gpu_cache", 0, 0, "on", "TRUN_GPU_CACHE", "trun"},
    {TRUN_OPT_HEALTH_CHECK, "health-check", "health_check", 0, 0, "warn", "TRUN_HEALTH_CHECK", "trun"},
    {TRUN_OPT_HEALTH_CHECKS, "health-checks", "health_checks", 0, 0, "all", "TRUN_HEALTH_CHECKS", "trun"},
    {TRUN_OPT_WATCH_STDIN, "watch-stdin", "watch_stdin", 0, 1, NULL, NULL, "trun"},
    {TRUN_OPT_EXIT_BARRIER_TIMEOUT, "exit-barrier-timeout", "exit_barrier_timeout", 0, 0, NULL,
     "PET_EXIT_BARRIER_TIMEOUT", "Backwards compatible parameters with caffe2.distributed.launch"},
    {TRUN_OPT_WARM_START, "warm-start", "warm_start", 0, 1, NULL, "PET_WARM_START", "trun"},
    {TRUN_OPT_WARM_START_MODULES, "warm-start-modules", "warm_start_modules", 0, 0, "torch,torch.distributed",
     "PET_WARM_START_MODULES", "trun"},
    {TRUN_OPT_WARM_START_CUDA, "warm-start-cuda", "warm_start_cuda", 0, 1, NULL, "PET_WARM_START_CUDA",
     "trun"},
    {TRUN_OPT_WARM_START_NCCL, "warm-start-nccl", "warm_start_nccl", 0, 1, NULL, "PET_WARM_START_NCCL",
     "trun"},
    {TRUN_OPT_RESTART_BACKOFF, "restart-backoff", "restart_backoff", 0, 0, "1", "PET_RESTART_BACKOFF",
     "trun"},
    {TRUN_OPT_CRASH_LOOP, "crash-loop", "crash_loop", 0, 0, "3:60", "PET_CRASH_LOOP", "trun"},
    {TRUN_OPT_RESTART_OFFSET, "restart-offset", "restart_offset", 0, 0, NULL, "PET_RESTART_OFFSET", "trun"},
    {TRUN_OPT_LIST_EXCLUDED, "list-excluded", "list_excluded", 0, 0, NULL, "TRUN_LIST_EXCLUDED", "trun"},
};
#define NEXPECTED ((int)(sizeof(expected) / sizeof(expected[0])))

START_TEST(test_table_exact) {
  ck_assert_int_eq(NEXPECTED, TRUN_OPT__COUNT);
  for (int i = 0; i < NEXPECTED; i++) {
    const expect_desc *e = &expected[i];
    const trun_opt_desc *d = trun_opt_desc_of(e->id);
    ck_assert_ptr_nonnull(d);
    ck_assert_str_eq(d->name, e->name);
    ck_assert_pstr_eq(d->alias, e->alias);
    ck_assert_int_eq(d->short_name, e->short_name);
    ck_assert_int_eq(d->is_flag, e->is_flag);
    ck_assert_pstr_eq(d->def, e->def);
    ck_assert_pstr_eq(d->env, e->env);
    ck_assert_str_eq(d->group, e->group);
    ck_assert_ptr_nonnull(d->help);
    ck_assert_int_gt(strlen(d->help), 10);
    if (d->is_flag)
      ck_assert_ptr_null(d->metavar);
    else
      ck_assert_ptr_nonnull(d->metavar);
  }
  ck_assert_str_eq(trun_opt_desc_of(TRUN_OPT_LOG_LINE_PREFIX)->metavar, "TEMPLATE");
  ck_assert_ptr_null(trun_opt_desc_of(TRUN_OPT__COUNT));
  ck_assert_ptr_null(trun_opt_desc_of((trun_opt_id)-1));
}
END_TEST

START_TEST(test_src_names) {
  ck_assert_str_eq(trun_src_name(TRUN_SRC_DEFAULT), "default");
  ck_assert_str_eq(trun_src_name(TRUN_SRC_DETECTED), "detected");
  ck_assert_str_eq(trun_src_name(TRUN_SRC_FILE), "file");
  ck_assert_str_eq(trun_src_name(TRUN_SRC_ENV), "env");
  ck_assert_str_eq(trun_src_name(TRUN_SRC_CLI), "cli");
}
END_TEST

/* ---- command line ---------------------------------------------------------------------------------- */

START_TEST(test_defaults) {
  char **argv = ARGV("train.py");
  ck_assert_int_eq(parse(argv, NOENV), 0);
  for (int i = 0; i < NEXPECTED; i++) {
    ck_assert_pstr_eq(cl.v[expected[i].id].val, expected[i].def);
    ck_assert_int_eq(cl.v[expected[i].id].src, TRUN_SRC_DEFAULT);
  }
  ck_assert_ptr_eq(cl.script, argv[1]);
  ck_assert_int_eq(cl.nscript_args, 0);
  ck_assert_ptr_eq(cl.script_args, argv + 2);
  ck_assert_int_eq(cl.help, 0);
  ck_assert_int_eq(cl.version, 0);
  /* a NULL envp is an empty environment */
  ck_assert_int_eq(trun_cli_parse(2, argv, NULL, &cl, err, sizeof(err)), 0);
  ck_assert_str_eq(cl.v[TRUN_OPT_NNODES].val, "1:1");
}
END_TEST

/* Every valued option in all four long forms: --name v, --name=v, --alias v, --alias=v. */
START_TEST(test_every_option_every_spelling) {
  char opt[96], joined[128];
  for (int i = 0; i < NEXPECTED; i++) {
    const expect_desc *e = &expected[i];
    const char *names[2] = {e->name, e->alias};
    for (int k = 0; k < 2; k++) {
      if (!names[k]) continue;
      snprintf(opt, sizeof(opt), "--%s", names[k]);
      if (e->is_flag) {
        ck_assert_int_eq(parse(ARGV(opt, "s.py"), NOENV), 0);
        assert_cli(e->id, "1");
        continue;
      }
      char **argv = ARGV(opt, "v-al=ue", "s.py", "a");
      ck_assert_int_eq(parse(argv, NOENV), 0);
      assert_cli(e->id, "v-al=ue");
      ck_assert_ptr_eq(cl.v[e->id].val, argv[2]); /* points into argv */
      ck_assert_str_eq(cl.script, "s.py");
      ck_assert_int_eq(cl.nscript_args, 1);
      snprintf(joined, sizeof(joined), "--%s=x=y", names[k]);
      ck_assert_int_eq(parse(ARGV(joined, "s.py"), NOENV), 0);
      assert_cli(e->id, "x=y");
      snprintf(joined, sizeof(joined), "--%s=", names[k]);
      ck_assert_int_eq(parse(ARGV(joined, "s.py"), NOENV), 0);
      assert_cli(e->id, "");
      for (int o = 0; o < NEXPECTED; o++)
        if (expected[o].id != e->id) ck_assert_int_eq(cl.v[expected[o].id].src, TRUN_SRC_DEFAULT);
    }
  }
}
END_TEST

START_TEST(test_typical_command_line) {
  char **argv = ARGV("--nnodes=1:2", "--nproc_per_node", "4", "--rdzv-backend", "c10d", "--rdzv_endpoint",
                     "host:29400", "--rdzv-id=job7", "--max-restarts", "3", "-r", "3", "-t3", "--standalone",
                     "train.py", "--epochs", "2");
  ck_assert_int_eq(parse(argv, NOENV), 0);
  assert_cli(TRUN_OPT_NNODES, "1:2");
  assert_cli(TRUN_OPT_NPROC_PER_NODE, "4");
  assert_cli(TRUN_OPT_RDZV_BACKEND, "c10d");
  assert_cli(TRUN_OPT_RDZV_ENDPOINT, "host:29400");
  assert_cli(TRUN_OPT_RDZV_ID, "job7");
  assert_cli(TRUN_OPT_MAX_RESTARTS, "3");
  assert_cli(TRUN_OPT_REDIRECTS, "3");
  assert_cli(TRUN_OPT_TEE, "3");
  assert_cli(TRUN_OPT_STANDALONE, "1");
  ck_assert_str_eq(cl.v[TRUN_OPT_ROLE].val, "default");
  ck_assert_int_eq(cl.v[TRUN_OPT_ROLE].src, TRUN_SRC_DEFAULT);
  ck_assert_ptr_null(cl.v[TRUN_OPT_MODULE].val);
  ck_assert_str_eq(cl.script, "train.py");
  ck_assert_int_eq(cl.nscript_args, 2);
  ck_assert_str_eq(cl.script_args[0], "--epochs");
  ck_assert_str_eq(cl.script_args[1], "2");
}
END_TEST

START_TEST(test_flag_with_value_is_error) {
  assert_fail(ARGV("--standalone=1", "s.py"), NOENV, "argument --standalone: ignored explicit argument '1'");
  assert_fail(ARGV("--no_python=", "s.py"), NOENV,
              "argument --no-python/--no_python: ignored explicit argument ''");
  assert_fail(ARGV("--stand=yes", "s.py"), NOENV, "argument --standalone: ignored explicit argument 'yes'");
  assert_fail(ARGV("-m=1", "s.py"), NOENV, "argument -m/--module: ignored explicit argument '1'");
  assert_fail(ARGV("--help=1"), NOENV, "argument --help: ignored explicit argument '1'");
  /* a flag does not swallow the next item */
  ck_assert_int_eq(parse(ARGV("--standalone", "1"), NOENV), 0);
  ck_assert_str_eq(cl.script, "1");
}
END_TEST

START_TEST(test_repeated_last_wins) {
  ck_assert_int_eq(parse(ARGV("--nnodes", "2", "--nnodes=3", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_NNODES, "3");
  ck_assert_int_eq(
      parse(ARGV("--nproc-per-node", "2", "--nproc_per_node", "4", "-r1", "-r", "2", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_NPROC_PER_NODE, "4");
  assert_cli(TRUN_OPT_REDIRECTS, "2");
}
END_TEST

START_TEST(test_value_starting_with_dash) {
  ck_assert_int_eq(parse(ARGV("--rdzv-conf=-x=1", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_RDZV_CONF, "-x=1");
  /* argparse reads "-x=1" as an (unknown) option, not as the value of --rdzv-conf */
  assert_fail(ARGV("--rdzv-conf", "-x=1", "s.py"), NOENV,
              "argument --rdzv-conf/--rdzv_conf: expected one argument");
  ck_assert_int_eq(parse(ARGV("--role=--nnodes", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_ROLE, "--nnodes");
  ck_assert_int_eq(cl.v[TRUN_OPT_NNODES].src, TRUN_SRC_DEFAULT);
}
END_TEST

/* Issue 38 item 3: an option never swallows the next option. Every option of real torchrun's parser
 * (/usr/bin/python3's torch) that takes a value, with awkward values (options, prefixes, negative
 * numbers, '-', '--', blanks), separate and '='-joined: trun refuses exactly where torchrun's argparse
 * does. tests/helpers/argparse_cases.py prints torchrun's verdicts. */
START_TEST(test_values_against_torchrun_argparse) {
  FILE *f = popen("/usr/bin/python3 tests/helpers/argparse_cases.py", "r");
  ck_assert_msg(f != NULL, "cannot run /usr/bin/python3 tests/helpers/argparse_cases.py");
  static char line[4096];
  int ncases = 0, nrefused = 0, nwrong = 0;
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *items[16] = {"trun"};
    int n = 1;
    char *verdict = line, *tab = strchr(line, '\t');
    ck_assert_ptr_nonnull(tab);
    *tab = '\0';
    for (char *a = tab + 1; n < 15; n++) {
      items[n] = a;
      char *t = strchr(a, '\t');
      if (!t) {
        n++;
        break;
      }
      *t = '\0';
      a = t + 1;
    }
    items[n] = NULL;
    int want_refuse = strcmp(verdict, "refuse") == 0;
    ck_assert(want_refuse || strcmp(verdict, "accept") == 0);
    int rc = parse(items, NOENV);
    ncases++;
    nrefused += want_refuse;
    if ((rc < 0) != want_refuse) {
      nwrong++;
      fprintf(stderr, "torchrun %ss, trun %ss:", verdict, rc < 0 ? "refuse" : "accept");
      for (int i = 1; i < n; i++) fprintf(stderr, " '%s'", items[i]);
      fprintf(stderr, "%s%s\n", rc < 0 ? " -- " : "", rc < 0 ? err : "");
    }
  }
  ck_assert_int_eq(pclose(f), 0);
  ck_assert_int_gt(ncases, 1000);
  ck_assert_int_gt(nrefused, 100);
  ck_assert_int_eq(nwrong, 0);
}
END_TEST

/* Issue 38 item 12: every option that takes a value says its default once ("(default: auto) (default:
 * unset; ...)" for --store-threads), flags never. */
START_TEST(test_help_one_default_each) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  trun_cli_help(f);
  ck_assert_int_eq(fclose(f), 0);
  int want = 0, got = 0;
  for (int id = 0; id < TRUN_OPT__COUNT; id++) want += !trun_opt_desc_of((trun_opt_id)id)->is_flag;
  for (const char *p = strstr(text, "(default:"); p; p = strstr(p + 1, "(default:")) got++;
  free(text);
  ck_assert_int_eq(got, want);
}
END_TEST

/* ---- prefixes ---------------------------------------------------------------------------------------- */

START_TEST(test_unique_prefixes) {
  ck_assert_int_eq(
      parse(ARGV("--nnod", "2", "--nproc_p=4", "--rdzv-e", "h:1", "--stand", "--mod", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_NNODES, "2");
  assert_cli(TRUN_OPT_NPROC_PER_NODE, "4");
  assert_cli(TRUN_OPT_RDZV_ENDPOINT, "h:1");
  assert_cli(TRUN_OPT_STANDALONE, "1");
  assert_cli(TRUN_OPT_MODULE, "1");
  /* the dash and underscore spellings of one option are not ambiguous with each other */
  ck_assert_int_eq(parse(ARGV("--nproc", "8", "--max-r", "1", "--master_p=1234", "--dry", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_NPROC_PER_NODE, "8");
  assert_cli(TRUN_OPT_MAX_RESTARTS, "1");
  assert_cli(TRUN_OPT_MASTER_PORT, "1234");
  assert_cli(TRUN_OPT_DRY_RUN, "1");
  ck_assert_int_eq(parse(ARGV("--dup", "x", "s.py"), NOENV), -1);
  ck_assert_int_eq(parse(ARGV("--duplicate-stdo", "x", "--duplicate_stde=y", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_DUPLICATE_STDOUT_FILTERS, "x");
  assert_cli(TRUN_OPT_DUPLICATE_STDERR_FILTERS, "y");
  ck_assert_int_eq(parse(ARGV("--hel"), NOENV), 0); /* "--h": --help, --hostfile or --health-check* */
  ck_assert_int_eq(cl.help, 1);
  ck_assert_int_eq(parse(ARGV("--vers"), NOENV), 0);
  ck_assert_int_eq(cl.version, 1);
  ck_assert_int_eq(cl.help, 0);
}
END_TEST

START_TEST(test_ambiguous_prefixes) {
  assert_fail(
      ARGV("--ma", "1", "s.py"), NOENV,
      "ambiguous option: --ma could match --max-restarts, --max_restarts, --master-addr, --master_addr, "
      "--master-port, --master_port");
  assert_fail(ARGV("--n=1", "s.py"), NOENV,
              "ambiguous option: --n could match --nnodes, --nproc-per-node, --nproc_per_node, --no-python, "
              "--no_python, --node-rank, --node_rank, --numa-binding, --numa_binding, --no-imds, --no_imds, "
              "--nccl-report, --nccl_report");
  assert_fail(ARGV("--v", "s.py"), NOENV,
              "ambiguous option: --v could match --virtual-local-rank, --virtual_local_rank, --version");
  assert_fail(
      ARGV("--rdzv_", "x", "s.py"), NOENV,
      "ambiguous option: --rdzv_ could match --rdzv_backend, --rdzv_endpoint, --rdzv_id, --rdzv_conf");
  assert_fail(ARGV("--lo", "x", "s.py"), NOENV,
              "ambiguous option: --lo could match --log-dir, --log_dir, --local-ranks-filter, "
              "--local_ranks_filter, --local-addr, --local_addr, --logs-specs, --logs_specs, "
              "--log-line-prefix, --log_line_prefix");
}
END_TEST

/* ---- short options -------------------------------------------------------------------------------- */

START_TEST(test_short_forms) {
  ck_assert_int_eq(parse(ARGV("-m", "pkg.train"), NOENV), 0);
  assert_cli(TRUN_OPT_MODULE, "1");
  ck_assert_str_eq(cl.script, "pkg.train");
  ck_assert_int_eq(parse(ARGV("-r", "3", "-t", "0:1,1:2", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_REDIRECTS, "3");
  assert_cli(TRUN_OPT_TEE, "0:1,1:2");
  ck_assert_int_eq(parse(ARGV("-r1", "-t2", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_REDIRECTS, "1");
  assert_cli(TRUN_OPT_TEE, "2");
  ck_assert_int_eq(parse(ARGV("-r=2", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_REDIRECTS, "2");
  ck_assert_int_eq(parse(ARGV("--redirects", "1", "--tee=3", "--module", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_REDIRECTS, "1");
  assert_cli(TRUN_OPT_TEE, "3");
  assert_cli(TRUN_OPT_MODULE, "1");
  /* clusters: a flag letter goes on with the next one */
  ck_assert_int_eq(parse(ARGV("-mr3", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_MODULE, "1");
  assert_cli(TRUN_OPT_REDIRECTS, "3");
  ck_assert_int_eq(parse(ARGV("-mt", "1", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_MODULE, "1");
  assert_cli(TRUN_OPT_TEE, "1");
  /* the value letters are taken verbatim, as argparse does */
  ck_assert_int_eq(parse(ARGV("-rm", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_REDIRECTS, "m");
  ck_assert_ptr_null(cl.v[TRUN_OPT_MODULE].val);
  assert_fail(ARGV("-x", "s.py"), NOENV, "unrecognized option '-x'");
  assert_fail(ARGV("-mx", "s.py"), NOENV, "unrecognized option '-x' in '-mx'");
}
END_TEST

/* ---- script and its arguments ---------------------------------------------------------------------- */

START_TEST(test_script_args_verbatim) {
  char **argv = ARGV("--nnodes", "2", "train.py", "--lr", "0.1", "-m", "foo", "--nnodes", "3", "--", "--help",
                     "${local_rank}");
  ck_assert_int_eq(parse(argv, NOENV), 0);
  assert_cli(TRUN_OPT_NNODES, "2");
  ck_assert_ptr_null(cl.v[TRUN_OPT_MODULE].val);
  ck_assert_int_eq(cl.v[TRUN_OPT_MODULE].src, TRUN_SRC_DEFAULT);
  ck_assert_int_eq(cl.help, 0);
  ck_assert_ptr_eq(cl.script, argv[3]);
  ck_assert_ptr_eq(cl.script_args, argv + 4);
  ck_assert_int_eq(cl.nscript_args, 9);
  const char *want[] = {"--lr", "0.1", "-m", "foo", "--nnodes", "3", "--", "--help", "${local_rank}"};
  for (int i = 0; i < 9; i++) ck_assert_str_eq(cl.script_args[i], want[i]);
  ck_assert_ptr_null(cl.script_args[9]);
}
END_TEST

START_TEST(test_double_dash) {
  char **argv = ARGV("--nnodes", "2", "--", "--weird.py", "-x", "--", "y");
  ck_assert_int_eq(parse(argv, NOENV), 0);
  assert_cli(TRUN_OPT_NNODES, "2");
  ck_assert_str_eq(cl.script, "--weird.py");
  ck_assert_int_eq(cl.nscript_args, 3);
  ck_assert_str_eq(cl.script_args[0], "-x");
  ck_assert_str_eq(cl.script_args[1], "--");
  ck_assert_str_eq(cl.script_args[2], "y");
  ck_assert_int_eq(parse(ARGV("--", "-m"), NOENV), 0);
  ck_assert_str_eq(cl.script, "-m");
  ck_assert_ptr_null(cl.v[TRUN_OPT_MODULE].val);
  assert_fail(ARGV("--nnodes", "2", "--"), NOENV, "the following arguments are required: training_script");
  /* a lone "-" is a positional */
  ck_assert_int_eq(parse(ARGV("-", "a"), NOENV), 0);
  ck_assert_str_eq(cl.script, "-");
  ck_assert_int_eq(cl.nscript_args, 1);
}
END_TEST

START_TEST(test_missing_script) {
  assert_fail(ARGV("--nnodes", "2"), NOENV, "the following arguments are required: training_script");
  char *only[] = {"trun", NULL};
  assert_fail(only, NOENV, "the following arguments are required: training_script");
  assert_fail(ARGV("--standalone"), ENV("PET_NNODES=2"),
              "the following arguments are required: training_script");
  /* --rdzv-status looks at a job's rendezvous: no script. */
  ck_assert_int_eq(parse(ARGV("--rdzv-status", "--nnodes", "2", "--rdzv-endpoint", "h:1"), NOENV), 0);
  assert_cli(TRUN_OPT_RDZV_STATUS, "1");
  ck_assert_ptr_null(cl.script);
}
END_TEST

START_TEST(test_missing_value_at_end) {
  assert_fail(ARGV("--nnodes"), NOENV, "argument --nnodes: expected one argument");
  assert_fail(ARGV("--nproc_per_node"), NOENV,
              "argument --nproc-per-node/--nproc_per_node: expected one argument");
  assert_fail(ARGV("--rdzv-e"), NOENV, "argument --rdzv-endpoint/--rdzv_endpoint: expected one argument");
  assert_fail(ARGV("-r"), NOENV, "argument -r/--redirects: expected one argument");
  assert_fail(ARGV("-m", "-t"), NOENV, "argument -t/--tee: expected one argument");
}
END_TEST

START_TEST(test_unknown_option) {
  assert_fail(ARGV("--nproc-per-mode", "4", "s.py"), NOENV,
              "unrecognized option '--nproc-per-mode'; did you mean --nproc-per-node?");
  assert_fail(ARGV("--nodes=2", "s.py"), NOENV, "unrecognized option '--nodes'; did you mean --nnodes?");
  assert_fail(ARGV("--master_adr", "h", "s.py"), NOENV,
              "unrecognized option '--master_adr'; did you mean --master_addr?");
  assert_fail(ARGV("--standalon3", "s.py"), NOENV,
              "unrecognized option '--standalon3'; did you mean --standalone?");
  assert_fail(ARGV("-nnodes", "2", "s.py"), NOENV, "unrecognized option '-nnodes'; did you mean --nnodes?");
  assert_fail(ARGV("--foo", "s.py"), NOENV, "unrecognized option '--foo'");
  assert_fail(ARGV("--use-env", "s.py"), NOENV, "unrecognized option '--use-env'");
  /* a prefix is not a typo: --nproc-per-nod is --nproc-per-node */
  ck_assert_int_eq(parse(ARGV("--nproc-per-nod", "4", "s.py"), NOENV), 0);
  assert_cli(TRUN_OPT_NPROC_PER_NODE, "4");
}
END_TEST

START_TEST(test_help_and_version) {
  ck_assert_int_eq(parse(ARGV("--help"), NOENV), 0);
  ck_assert_int_eq(cl.help, 1);
  ck_assert_ptr_null(cl.script);
  ck_assert_int_eq(parse(ARGV("-h"), NOENV), 0);
  ck_assert_int_eq(cl.help, 1);
  ck_assert_int_eq(parse(ARGV("--nnodes", "2", "-h", "--bogus"), NOENV), 0);
  ck_assert_int_eq(cl.help, 1);
  assert_cli(TRUN_OPT_NNODES, "2");
  ck_assert_int_eq(parse(ARGV("-mh"), NOENV), 0);
  ck_assert_int_eq(cl.help, 1);
  ck_assert_int_eq(parse(ARGV("--version"), ENV("PET_NNODES=4")), 0);
  ck_assert_int_eq(cl.version, 1);
  ck_assert_int_eq(cl.help, 0);
  ck_assert_str_eq(cl.v[TRUN_OPT_NNODES].val, "4");
  ck_assert_int_eq(parse(ARGV("s.py", "--help", "--version"), NOENV), 0);
  ck_assert_int_eq(cl.help, 0);
  ck_assert_int_eq(cl.version, 0);
  ck_assert_int_eq(cl.nscript_args, 2);
}
END_TEST

/* ---- environment -------------------------------------------------------------------------------------- */

START_TEST(test_env_fallback_and_precedence) {
  char **env =
      ENV("PATH=/bin", "PET_NNODES=2:4", "PET_NPROC_PER_NODE=8", "PET_NNODESX=9",
          "PET_RDZV_ENDPOINT=", "PET_LOGS_SPECS=x", "PET_NUMA_BINDING=node", "PET_REDIRECTS=3",
          "PET_NNODES=7", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[${rank}]", "PET_SHUTDOWN_TIMEOUT=5");
  ck_assert_int_eq(parse(ARGV("--nnodes", "3", "s.py"), env), 0);
  assert_cli(TRUN_OPT_NNODES, "3");
  ck_assert_str_eq(cl.v[TRUN_OPT_NPROC_PER_NODE].val, "8");
  ck_assert_int_eq(cl.v[TRUN_OPT_NPROC_PER_NODE].src, TRUN_SRC_ENV);
  ck_assert_ptr_eq(cl.v[TRUN_OPT_NPROC_PER_NODE].val, env[2] + strlen("PET_NPROC_PER_NODE="));
  /* set but empty still counts */
  ck_assert_str_eq(cl.v[TRUN_OPT_RDZV_ENDPOINT].val, "");
  ck_assert_int_eq(cl.v[TRUN_OPT_RDZV_ENDPOINT].src, TRUN_SRC_ENV);
  ck_assert_str_eq(cl.v[TRUN_OPT_REDIRECTS].val, "3");
  ck_assert_int_eq(cl.v[TRUN_OPT_REDIRECTS].src, TRUN_SRC_ENV);
  ck_assert_str_eq(cl.v[TRUN_OPT_LOG_LINE_PREFIX].val, "[${rank}]");
  ck_assert_int_eq(cl.v[TRUN_OPT_LOG_LINE_PREFIX].src, TRUN_SRC_ENV);
  ck_assert_str_eq(cl.v[TRUN_OPT_SHUTDOWN_TIMEOUT].val, "5");
  ck_assert_int_eq(cl.v[TRUN_OPT_SHUTDOWN_TIMEOUT].src, TRUN_SRC_ENV);
  /* no environment fallback for --logs-specs / --numa-binding */
  ck_assert_ptr_null(cl.v[TRUN_OPT_LOGS_SPECS].val);
  ck_assert_int_eq(cl.v[TRUN_OPT_LOGS_SPECS].src, TRUN_SRC_DEFAULT);
  ck_assert_ptr_null(cl.v[TRUN_OPT_NUMA_BINDING].val);
  ck_assert_int_eq(cl.v[TRUN_OPT_NUMA_BINDING].src, TRUN_SRC_DEFAULT);
  ck_assert_str_eq(cl.v[TRUN_OPT_MASTER_PORT].val, "29500");
  ck_assert_int_eq(cl.v[TRUN_OPT_MASTER_PORT].src, TRUN_SRC_DEFAULT);
  /* without the CLI value the first PET_NNODES wins (like getenv), not the PET_NNODESX look-alike */
  ck_assert_int_eq(parse(ARGV("s.py"), env), 0);
  ck_assert_str_eq(cl.v[TRUN_OPT_NNODES].val, "2:4");
  ck_assert_int_eq(cl.v[TRUN_OPT_NNODES].src, TRUN_SRC_ENV);
  /* a CLI value given with the alias spelling also wins */
  ck_assert_int_eq(parse(ARGV("--nproc_per_node=2", "s.py"), env), 0);
  assert_cli(TRUN_OPT_NPROC_PER_NODE, "2");
}
END_TEST

START_TEST(test_env_flags) {
  ck_assert_int_eq(
      parse(ARGV("s.py"), ENV("PET_STANDALONE=1", "PET_MODULE=0", "PET_NO_PYTHON= 2 ", "TRUN_DRY_RUN=1",
                              "PET_VIRTUAL_LOCAL_RANK=-0", "PET_RUN_PATH=1_0")),
      0);
  ck_assert_str_eq(cl.v[TRUN_OPT_STANDALONE].val, "1");
  ck_assert_int_eq(cl.v[TRUN_OPT_STANDALONE].src, TRUN_SRC_ENV);
  ck_assert_ptr_null(cl.v[TRUN_OPT_MODULE].val);
  ck_assert_int_eq(cl.v[TRUN_OPT_MODULE].src, TRUN_SRC_ENV);
  ck_assert_str_eq(cl.v[TRUN_OPT_NO_PYTHON].val, "1");
  ck_assert_str_eq(cl.v[TRUN_OPT_DRY_RUN].val, "1");
  ck_assert_int_eq(cl.v[TRUN_OPT_DRY_RUN].src, TRUN_SRC_ENV);
  ck_assert_ptr_null(cl.v[TRUN_OPT_VIRTUAL_LOCAL_RANK].val);
  ck_assert_str_eq(cl.v[TRUN_OPT_RUN_PATH].val, "1");
  assert_fail(ARGV("s.py"), ENV("PET_STANDALONE=true"),
              "invalid value 'true' in environment variable PET_STANDALONE for --standalone: expected an "
              "integer");
  assert_fail(ARGV("s.py"), ENV("PET_MODULE="),
              "invalid value '' in environment variable PET_MODULE for --module: expected an integer");
  assert_fail(ARGV("s.py"), ENV("TRUN_DRY_RUN=1_"),
              "invalid value '1_' in environment variable TRUN_DRY_RUN for --dry-run: expected an integer");
  /* the command line beats the environment, so a bad value there goes unread */
  ck_assert_int_eq(parse(ARGV("--standalone", "s.py"), ENV("PET_STANDALONE=true")), 0);
  assert_cli(TRUN_OPT_STANDALONE, "1");
}
END_TEST

/* ---- error buffer ---------------------------------------------------------------------------------- */

START_TEST(test_small_or_no_error_buffer) {
  char small[16];
  char **argv = ARGV("--nproc-per-mode", "4", "s.py");
  ck_assert_int_eq(trun_cli_parse(count(argv), argv, NOENV, &cl, small, sizeof(small)), -1);
  ck_assert_str_eq(small, "unrecognized op");
  ck_assert_int_eq(trun_cli_parse(count(argv), argv, NOENV, &cl, NULL, 0), -1);
  char **amb = ARGV("--n", "4", "s.py");
  ck_assert_int_eq(trun_cli_parse(count(amb), amb, NOENV, &cl, small, sizeof(small)), -1);
  ck_assert_str_eq(small, "ambiguous optio");
}
END_TEST

/* ---- --help ------------------------------------------------------------------------------------------- */

START_TEST(test_help_text) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  trun_cli_help(f);
  fclose(f);
  ck_assert_int_eq(strncmp(buf, "usage: trun [-h] [--version] [--nnodes NNODES]", 46), 0);
  const char *want[] = {
      "\npositional arguments:\n  training_script       ",
      "\nWorker/node size related arguments:\n  --nnodes NNODES       Number of nodes",
      "\nRendezvous related arguments:\n",
      "\nUser-code launch related arguments:\n",
      "\nBackwards compatible parameters with caffe2.distributed.launch:\n",
      "\ntrun:\n  --dry-run, --dry_run  Print the resolved plan",
      "\n  --nproc-per-node, --nproc_per_node NPROC_PER_NODE\n                        Number of workers",
      "\n  -r, --redirects REDIRECTS\n",
      "\n  -m, --module          ",
      "\n  --log-line-prefix, --log_line_prefix TEMPLATE\n",
      "\n  --explain             Print what was found on this node",
      "\n  --no-imds, --no_imds  Do not ask the EC2 instance metadata service",
      "\n  --numa-binding, --numa_binding {node}\n",
      "(default: 1:1; env: PET_NNODES)",
      "[-r REDIRECTS] [-t TEE]",
      "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)",
      "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
      "(env: PET_STANDALONE)",
  };
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
    ck_assert_msg(strstr(buf, want[i]) != NULL, "help lacks: %s", want[i]);
  /* every option appears, and no line is wider than 100 columns */
  char opt[96];
  for (int i = 0; i < NEXPECTED; i++) {
    snprintf(opt, sizeof(opt), "--%s", expected[i].name);
    ck_assert_msg(strstr(buf, opt) != NULL, "help lacks %s", opt);
  }
  for (const char *line = buf; *line;) {
    const char *nl = strchr(line, '\n');
    ck_assert_ptr_nonnull(nl);
    ck_assert_msg(nl - line <= 100, "line too long: %.*s", (int)(nl - line), line);
    line = nl + 1;
  }
  /* logs-specs and numa-binding name no environment variable */
  const char *ls = strstr(buf, "\n  --logs-specs");
  ck_assert_ptr_nonnull(ls);
  const char *next = strstr(ls + 1, "\n  --");
  ck_assert_ptr_nonnull(next);
  ck_assert_ptr_null(memmem(ls, (size_t)(next - ls), "env:", 4));
  free(buf);
}
END_TEST

static Suite *cli_suite(void) {
  Suite *s = suite_create("cli");
  TCase *torch = tcase_create("torchrun-argparse"); /* imports torch: seconds on a loaded machine */
  tcase_set_timeout(torch, 120);
  tcase_add_test(torch, test_values_against_torchrun_argparse);
  suite_add_tcase(s, torch);
  TCase *tc = tcase_create("cli");
  tcase_add_test(tc, test_table_exact);
  tcase_add_test(tc, test_src_names);
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_every_option_every_spelling);
  tcase_add_test(tc, test_typical_command_line);
  tcase_add_test(tc, test_flag_with_value_is_error);
  tcase_add_test(tc, test_repeated_last_wins);
  tcase_add_test(tc, test_value_starting_with_dash);
  tcase_add_test(tc, test_help_one_default_each);
  tcase_add_test(tc, test_unique_prefixes);
  tcase_add_test(tc, test_ambiguous_prefixes);
  tcase_add_test(tc, test_short_forms);
  tcase_add_test(tc, test_script_args_verbatim);
  tcase_add_test(tc, test_double_dash);
  tcase_add_test(tc, test_missing_script);
  tcase_add_test(tc, test_missing_value_at_end);
  tcase_add_test(tc, test_unknown_option);
  tcase_add_test(tc, test_help_and_version);
  tcase_add_test(tc, test_env_fallback_and_precedence);
  tcase_add_test(tc, test_env_flags);
  tcase_add_test(tc, test_small_or_no_error_buffer);
  tcase_add_test(tc, test_help_text);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(cli_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
