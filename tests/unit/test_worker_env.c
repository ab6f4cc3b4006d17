/* agent/worker_env.c: each worker's argv and environment from the typed configuration and a round
 * (torchrun's variables, checked against agent/proc/round_vars.c's table, --virtual-local-rank's GPU,
 * ${local_rank} in the arguments) and the interpreter
 * trun's rule finds beside its own executable (trun_env_python). */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "config_parse.h"
#include "rdzv.h"
#include "unit.h"
#include "worker_env.h"

/* ---- worker argv and environment ------------------------------------------------------------------ */

/* Node 1 of 2, FAKE_NPROC workers a node. */
#define FAKE_NPROC 2
static trun_rdzv_round fake_round(void) {
  trun_rdzv_round r;
  memset(&r, 0, sizeof(r));
  r.group_rank = 1;
  r.group_world_size = 2;
  r.base_rank = r.role_base_rank = 2;
  r.world_size = r.role_world_size = 4;
  strcpy(r.master_addr, "head");
  r.master_port = 4321;
  return r;
}

START_TEST(worker_environment) {
  trun_config c;
  PARSE_OK(&c, "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--max-restarts", "3",
           "--master-port", "4321", "t.py");
  char *base_in[] = {"PATH=/bin", "LOCAL_RANK=99", NULL};
  int forced = 0;
  char **base = trun_agent_env(base_in, &c, 2, NULL, &forced);
  ck_assert_int_eq(forced, 1);
  ck_assert_str_eq(trun_env_get(base, "OMP_NUM_THREADS"), "1");
  ck_assert_str_eq(trun_env_get(base, "TORCHELASTIC_SIGNALS_TO_HANDLE"), "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  trun_rdzv_round r = fake_round();
  char **env = trun_worker_envp(base, &c, &r, FAKE_NPROC, 1, 2, "/l/attempt_2/1/error.json");
  static const char *const want[][2] = {{"LOCAL_RANK", "1"},
                                        {"RANK", "3"},
                                        {"GROUP_RANK", "1"},
                                        {"ROLE_RANK", "3"},
                                        {"ROLE_NAME", "default"},
                                        {"LOCAL_WORLD_SIZE", "2"},
                                        {"WORLD_SIZE", "4"},
                                        {"GROUP_WORLD_SIZE", "2"},
                                        {"ROLE_WORLD_SIZE", "4"},
                                        {"MASTER_ADDR", "head"},
                                        {"MASTER_PORT", "4321"},
                                        {"TORCHELASTIC_RESTART_COUNT", "2"},
                                        {"TORCHELASTIC_MAX_RESTARTS", "3"},
                                        {"TORCHELASTIC_RUN_ID", "none"},
                                        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
                                        {"TORCHELASTIC_ERROR_FILE", "/l/attempt_2/1/error.json"},
                                        {"PATH", "/bin"}};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    const char *v = trun_env_get(env, want[i][0]);
    ck_assert_msg(v && strcmp(v, want[i][1]) == 0, "%s=%s, want %s", want[i][0], v ? v : "(unset)",
                  want[i][1]);
  }
  int count = 0;
  for (char **p = env; *p; p++) count += strncmp(*p, "LOCAL_RANK=", 11) == 0;
  ck_assert_int_eq(count, 1); /* replaced, not duplicated */
  ck_assert_ptr_null(trun_env_get(env, "CUDA_VISIBLE_DEVICES"));
  trun_strv_free(env);
  trun_strv_free(base);
}
END_TEST

/* ---- the one table of torchrun's variables (proc's round_vars.h) against the builder ------------------ */

/* Every variable trun_worker_envp adds is a per-round row of the table and every per-round row is set by
 * it, in the table's order (torchrun's): a name added to the builder or the table alone fails here. */
START_TEST(round_vars_match_builder) {
  trun_config c;
  /* --virtual-local-rank: CUDA_VISIBLE_DEVICES too; no --numa-binding plan (TRUN_CPU_AFFINITY, trun's own) */
  PARSE_OK(&c, "--virtual-local-rank", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "t.py");
  char *base[] = {"PATH=/bin", NULL};
  trun_rdzv_round r = fake_round();
  char **env = trun_worker_envp(base, &c, &r, FAKE_NPROC, 1, 2, "/l/attempt_2/1/error.json");
  ck_assert_ptr_nonnull(env);
  ck_assert_str_eq(env[0], "PATH=/bin");
  size_t last = 0;
  for (char **p = env + 1; *p; p++) {
    ck_assert_msg(trun_round_var_flags(*p) & TRUN_RV_PER_ROUND,
                  "trun_worker_envp sets %s, which has no per-round row in agent/proc/round_vars.c", *p);
    size_t row = 0;
    while (row < TRUN_RV_COUNT && (strncmp(*p, trun_round_vars[row].name, strcspn(*p, "=")) != 0 ||
                                   trun_round_vars[row].name[strcspn(*p, "=")] != '\0'))
      row++;
    ck_assert_msg(row < TRUN_RV_COUNT && row >= last, "%s is set out of the table's order", *p);
    last = row;
  }
  for (size_t i = 0; i < TRUN_RV_COUNT; i++)
    if (trun_round_vars[i].flags & TRUN_RV_PER_ROUND)
      ck_assert_msg(trun_env_get(env, trun_round_vars[i].name) != NULL,
                    "agent/proc/round_vars.c's per-round %s is not set by trun_worker_envp",
                    trun_round_vars[i].name);
  trun_strv_free(env);
}
END_TEST

/* The table's rows are whole and agree with each other: a value the rendezvous decides is set each round,
 * shown by --dry-run (as unknown before it) and taken by a warm worker from the round. */
START_TEST(round_vars_rows) {
  for (size_t i = 0; i < TRUN_RV_COUNT; i++) {
    const trun_round_var *v = &trun_round_vars[i];
    ck_assert_msg(v->name != NULL && v->name[0] != '\0' && v->flags != 0, "row %zu of round_vars.c is empty",
                  i);
    ck_assert_str_eq(trun_round_var_name((trun_round_var_id)i), v->name);
    for (size_t j = 0; j < i; j++) ck_assert_str_ne(trun_round_vars[j].name, v->name);
    if (v->flags & (TRUN_RV_RANKS | TRUN_RV_MASTER)) {
      unsigned want = TRUN_RV_PER_ROUND | TRUN_RV_SHOWN | TRUN_RV_WARM;
      ck_assert_msg((v->flags & want) == want, "%s waits for the rendezvous but lacks a flag", v->name);
    }
    if (!(v->flags & TRUN_RV_PREFIX)) ck_assert_uint_eq(trun_round_var_flags(v->name) & v->flags, v->flags);
  }
  ck_assert_uint_eq(trun_round_var_flags("RANK=3") & TRUN_RV_RANKS, TRUN_RV_RANKS);
  ck_assert_uint_eq(trun_round_var_flags("RANKS=3"), 0);
  ck_assert_uint_eq(trun_round_var_flags("TORCHELASTIC_"), 0);
  ck_assert(trun_round_var_flags("TORCHELASTIC_TIMER_FILE=/x") & TRUN_RV_WARM);
  ck_assert(!(trun_round_var_flags("TORCHELASTIC_TIMER_FILE") & TRUN_RV_PER_ROUND));
}
END_TEST

START_TEST(virtual_local_rank_gpus) {
  trun_config c;
  PARSE_OK(&c, "--virtual-local-rank", "--nproc-per-node", "2", "t.py");
  char *base[] = {"CUDA_VISIBLE_DEVICES=3,5", NULL};
  trun_rdzv_round r = fake_round();
  char **env = trun_worker_envp(base, &c, &r, FAKE_NPROC, 1, 0, "");
  ck_assert_str_eq(trun_env_get(env, "CUDA_VISIBLE_DEVICES"), "5");
  ck_assert_str_eq(trun_env_get(env, "LOCAL_RANK"), "0");
  trun_strv_free(env);
  char *few[] = {"CUDA_VISIBLE_DEVICES=3", NULL};
  ck_assert_ptr_null(trun_worker_envp(few, &c, &r, FAKE_NPROC, 1, 0, ""));
  char *empty[] = {"CUDA_VISIBLE_DEVICES=3,,5", NULL}; /* an empty entry is no device */
  ck_assert_ptr_null(trun_worker_envp(empty, &c, &r, FAKE_NPROC, 1, 0, ""));
  env = trun_worker_envp(empty, &c, &r, FAKE_NPROC, 0, 0, "");
  ck_assert_str_eq(trun_env_get(env, "CUDA_VISIBLE_DEVICES"), "3");
  trun_strv_free(env);
}
END_TEST

/* --numa-binding's plan (TRUN_NUMA_PLAN, one CPU list per local rank, ';' between): each worker gets its own
 * entry as TRUN_CPU_AFFINITY; a rank beyond the plan, or an empty entry, gets no pinning; the plan itself is
 * not passed on. */
START_TEST(numa_plan_entries) {
  trun_config c;
  PARSE_OK(&c, "--nproc-per-node", "3", "t.py");
  char *base[] = {"TRUN_NUMA_PLAN=0-3;4-7;", "TRUN_CPU_AFFINITY=stale", NULL};
  trun_rdzv_round r = fake_round();
  const char *want[] = {"0-3", "4-7", NULL, NULL};
  for (int lr = 0; lr < 4; lr++) {
    char **env = trun_worker_envp(base, &c, &r, FAKE_NPROC, lr, 0, "");
    ck_assert_ptr_nonnull(env);
    ck_assert_ptr_null(trun_env_get(env, "TRUN_NUMA_PLAN"));
    if (want[lr])
      ck_assert_str_eq(trun_env_get(env, "TRUN_CPU_AFFINITY"), want[lr]);
    else
      ck_assert_ptr_null(trun_env_get(env, "TRUN_CPU_AFFINITY"));
    trun_strv_free(env);
  }
}
END_TEST

START_TEST(worker_argv) {
  trun_config c;
  PARSE_OK(&c, "-m", "pkg.train", "--rank", "${local_rank}", "x${local_rank}y${local_rank}");
  char *env[] = {"PYTHON_EXEC=/opt/py", NULL};
  char **argv = trun_worker_argv(&c, env, 7);
  const char *want[] = {"/opt/py", "-u", "-m", "pkg.train", "--rank", "7", "x7y7", NULL};
  for (int i = 0; want[i]; i++) ck_assert_str_eq(argv[i], want[i]);
  ck_assert_ptr_null(argv[7]);
  trun_strv_free(argv);
  PARSE_OK(&c, "--no-python", "/bin/echo", "a");
  argv = trun_worker_argv(&c, NULL, 0);
  ck_assert_str_eq(argv[0], "/bin/echo");
  ck_assert_str_eq(argv[1], "a");
  ck_assert_ptr_null(argv[2]);
  trun_strv_free(argv);
  PARSE_OK(&c, "t.py");
  argv = trun_worker_argv(&c, NULL, 0);
  ck_assert_str_eq(argv[0], "python3");
  trun_strv_free(argv);
}
END_TEST

/* A file at path (made executable when mode has x bits). */
static void touch(const char *path, mode_t mode) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  ck_assert_int_eq(chmod(path, mode), 0);
}

START_TEST(env_python) {
  char root[] = "/tmp/trun-envpy.XXXXXX", p[512], out[512];
  ck_assert_ptr_nonnull(mkdtemp(root));
  snprintf(p, sizeof(p), "%s/bin", root);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  snprintf(p, sizeof(p), "%s/bin/trun", root);
  touch(p, 0755);
  /* bin/python3 but no pyvenv.cfg / conda-meta (/usr/bin/trun next to /usr/bin/python3): PATH's python3. */
  char py[512];
  snprintf(py, sizeof(py), "%s/bin/python3", root);
  touch(py, 0755);
  ck_assert_int_eq(trun_env_python(p, out, sizeof(out)), -1);
  char cfg[512];
  snprintf(cfg, sizeof(cfg), "%s/pyvenv.cfg", root);
  touch(cfg, 0644);
  ck_assert_int_eq(trun_env_python(p, out, sizeof(out)), 0);
  ck_assert_str_eq(out, py);
  /* A python3 that cannot be run is not taken. */
  ck_assert_int_eq(chmod(py, 0644), 0);
  ck_assert_int_eq(trun_env_python(p, out, sizeof(out)), -1);
  ck_assert_int_eq(chmod(py, 0755), 0);
  /* conda: ../conda-meta instead of ../pyvenv.cfg. */
  ck_assert_int_eq(unlink(cfg), 0);
  snprintf(cfg, sizeof(cfg), "%s/conda-meta", root);
  ck_assert_int_eq(mkdir(cfg, 0755), 0);
  ck_assert_int_eq(trun_env_python(p, out, sizeof(out)), 0);
  ck_assert_str_eq(out, py);
  ck_assert_int_eq(trun_env_python(p, out, 8), -1); /* too long for out */
  ck_assert_int_eq(trun_env_python("trun", out, sizeof(out)), -1);
  ck_assert_int_eq(rmdir(cfg), 0);
  ck_assert_int_eq(unlink(py), 0);
  ck_assert_int_eq(unlink(p), 0);
  snprintf(p, sizeof(p), "%s/bin", root);
  ck_assert_int_eq(rmdir(p), 0);
  ck_assert_int_eq(rmdir(root), 0);
}
END_TEST

/* ---- the workers' torch, found by its files -------------------------------------------------------- */

/* root/rel with text (parents made), mode. */
static void put(const char *root, const char *rel, const char *text, mode_t mode) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (char *q = path + strlen(root) + 1; (q = strchr(q, '/')) != NULL; q++) {
    *q = '\0';
    ck_assert(mkdir(path, 0755) == 0 || errno == EEXIST);
    *q = '/';
  }
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  ck_assert_int_eq(chmod(path, mode), 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* The version of the torch the interpreter of envp (PYTHON_EXEC) would import: "M.m at where", or "none". */
static const char *torch_of(char **envp, char *out, size_t len) {
  int ma = -1, mi = -1;
  char where[512];
  if (trun_worker_torch_version(NULL, envp, &ma, &mi, where, sizeof(where)) != 0) return "none";
  snprintf(out, len, "%d.%d at %s", ma, mi, where);
  return out;
}

/* A virtual environment (pyvenv.cfg one up from bin/python3, its version), PYTHONPATH first, the base
 * installation's site-packages only when the venv includes them, the user's site-packages unless
 * PYTHONNOUSERSITE, Debian's dist-packages of a plain install (X.Y from the interpreter's name), and the
 * real Debian python3 of this box with its torch 1.13. */
START_TEST(torch_versions) {
  char root[] = "/tmp/trun-torchver.XXXXXX", e1[1200], e2[1200], e3[1200], e4[1200], want[1200], out[1200];
  ck_assert_ptr_nonnull(mkdtemp(root));
  char cfg[512];
  snprintf(cfg, sizeof(cfg), "home = %s/base/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n",
           root);
  put(root, "venv/pyvenv.cfg", cfg, 0644);
  put(root, "venv/bin/python3", "", 0755);
  put(root, "venv/lib/python3.12/site-packages/torch/version.py",
      "from typing import Optional\n__version__ = '2.11.0+cu130'\n", 0644);
  put(root, "base/bin/python3.12", "", 0755);
  put(root, "base/lib/python3.12/site-packages/torch/version.py", "__version__ = '2.7.1'\n", 0644);
  put(root, "pp/torch/version.py", "__version__ = \"2.9.0\"\n", 0644);
  snprintf(e1, sizeof(e1), "PYTHON_EXEC=%s/venv/bin/python3", root);
  snprintf(e2, sizeof(e2), "PYTHONPATH=/nonexistent:%s/pp", root);
  snprintf(e3, sizeof(e3), "HOME=%s/home", root);
  char *venv[] = {e1, "PATH=/usr/bin:/bin", NULL}, *pp[] = {e1, e2, NULL};
  snprintf(want, sizeof(want), "2.11 at %s/venv/lib/python3.12/site-packages/torch", root);
  ck_assert_str_eq(torch_of(venv, out, sizeof(out)), want);
  snprintf(want, sizeof(want), "2.9 at %s/pp/torch", root);
  ck_assert_str_eq(torch_of(pp, out, sizeof(out)), want);
  /* no torch in the venv: the base's only when the venv includes the system's site-packages */
  snprintf(e4, sizeof(e4), "%s/venv/lib/python3.12/site-packages/torch/version.py", root);
  ck_assert_int_eq(unlink(e4), 0);
  ck_assert_str_eq(torch_of(venv, out, sizeof(out)), "none");
  snprintf(cfg, sizeof(cfg), "home = %s/base/bin\ninclude-system-site-packages = true\nversion = 3.12.3\n",
           root);
  put(root, "venv/pyvenv.cfg", cfg, 0644);
  snprintf(want, sizeof(want), "2.7 at %s/base/lib/python3.12/site-packages/torch", root);
  ck_assert_str_eq(torch_of(venv, out, sizeof(out)), want);
  /* a plain install: X.Y from the name, the user's site-packages first, Debian's dist-packages */
  put(root, "usr/bin/python3.10", "", 0755);
  put(root, "usr/lib/python3/dist-packages/torch/version.py", "__version__ = '2.4.0a0'\n", 0644);
  put(root, "home/.local/lib/python3.10/site-packages/torch/version.py", "__version__ = '2.8.0'\n", 0644);
  snprintf(e1, sizeof(e1), "PYTHON_EXEC=%s/usr/bin/python3.10", root);
  char *plain[] = {e1, e3, NULL}, *nouser[] = {e1, e3, "PYTHONNOUSERSITE=1", NULL};
  snprintf(want, sizeof(want), "2.8 at %s/home/.local/lib/python3.10/site-packages/torch", root);
  ck_assert_str_eq(torch_of(plain, out, sizeof(out)), want);
  snprintf(want, sizeof(want), "2.4 at %s/usr/lib/python3/dist-packages/torch", root);
  ck_assert_str_eq(torch_of(nouser, out, sizeof(out)), want);
  /* a version.py without a version, a missing interpreter, --no-python: not found */
  put(root, "usr/lib/python3/dist-packages/torch/version.py", "git_version = 'abc'\n", 0644);
  ck_assert_str_eq(torch_of(nouser, out, sizeof(out)), "none");
  char *missing[] = {"PYTHON_EXEC=no-such-python", "PATH=/nonexistent", NULL};
  ck_assert_str_eq(torch_of(missing, out, sizeof(out)), "none");
  trun_config c;
  PARSE_OK(&c, "--no-python", "--standalone", "/bin/true");
  int ma, mi;
  ck_assert_int_eq(trun_worker_torch_version(&c, venv, &ma, &mi, out, sizeof(out)), -1);
  ck_assert_int_eq(nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
  /* this box's Debian python3 and its python3-torch (1.13) */
  char *host[] = {"PYTHON_EXEC=/usr/bin/python3", "PYTHONNOUSERSITE=1", NULL};
  ck_assert_str_eq(torch_of(host, out, sizeof(out)), "1.13 at /usr/lib/python3/dist-packages/torch");
}
END_TEST

static Suite *worker_env_suite(void) {
  Suite *s = suite_create("worker_env");
  TCase *tc = tcase_create("worker_env");
  tcase_add_test(tc, worker_environment);
  tcase_add_test(tc, virtual_local_rank_gpus);
  tcase_add_test(tc, numa_plan_entries);
  tcase_add_test(tc, round_vars_match_builder);
  tcase_add_test(tc, round_vars_rows);
  tcase_add_test(tc, worker_argv);
  tcase_add_test(tc, env_python);
  tcase_add_test(tc, torch_versions);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(worker_env_suite()); }
