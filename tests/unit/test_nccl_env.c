/* agent/nccl/nccl_env.c against the node fixtures (tests/fixtures/nodes/<name>/, gen.py there) and the fake
 * NVML (build/libnvidia-ml-fake.so): per fixture the exact decisions (variables trun sets, leaves to the
 * plugin or leaves unset), nproc for auto / gpu, the whole "env" object of its expected.json; a user-set
 * variable survives every rule on every fixture (in the decisions and in the agent's worker environment); the
 * --numa-binding plan; CPU lists; the NVML-less /dev/nvidiaN fallback of --nproc-per-node.
 * Paths: TRUN_REPO (default: the current directory, the repository root under make) and TRUN_BUILD
 * (default <repo>/build). */
#include <check.h>
#include <jansson.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "base/base.h"
#include "config.h"
#include "cpulist.h"
#include "nccl_env.h"
#include "worker_env.h"

static trun_node node;
static trun_env_plan plan;
static char fxdir[PATH_MAX];
static char *fxenv[16]; /* the fixture's env file, NULL-terminated */

static const char *repo(void) {
  const char *r = getenv("TRUN_REPO");
  return r && *r ? r : ".";
}

static void clear_fxenv(void) {
  for (int i = 0; fxenv[i]; i++) {
    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)strcspn(fxenv[i], "="), fxenv[i]);
    unsetenv(name);
    free(fxenv[i]);
    fxenv[i] = NULL;
  }
}

/* Points the test hooks at fixture name and puts its env file into the process environment and fxenv. */
static void use_fixture(const char *name) {
  char p[PATH_MAX + 64];
  snprintf(p, sizeof(p), "%s/tests/fixtures/nodes/%s", repo(), name);
  ck_assert_msg(realpath(p, fxdir) != NULL, "fixture %s missing", p);
  snprintf(p, sizeof(p), "%s/sys", fxdir);
  setenv("TRUN_SYSFS_ROOT", p, 1);
  snprintf(p, sizeof(p), "%s/dev", fxdir);
  setenv("TRUN_DEV_ROOT", p, 1);
  snprintf(p, sizeof(p), "%s/dmi", fxdir);
  setenv("TRUN_DMI_ROOT", p, 1);
  snprintf(p, sizeof(p), "%s/nvml.json", fxdir);
  setenv("TRUN_FAKE_NVML_TOPO", p, 1);
  if (access(p, F_OK) == 0) {
    const char *b = getenv("TRUN_BUILD");
    char lib[PATH_MAX];
    snprintf(p, sizeof(p), "%s/libnvidia-ml-fake.so", b && *b ? b : "build");
    ck_assert_msg(realpath(p, lib) != NULL, "%s missing: run make", p);
    setenv("TRUN_NVML_LIBRARY", lib, 1);
  } else {
    setenv("TRUN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  }
  setenv("TRUN_CUDART_LIBRARY", "/nonexistent/libcudart.so", 1); /* not the host's CUDA runtime */
  snprintf(p, sizeof(p), "%s/cgroup", fxdir);
  if (access(p, F_OK) == 0)
    setenv("TRUN_CGROUP_ROOT", p, 1);
  else
    unsetenv("TRUN_CGROUP_ROOT");
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("NVIDIA_VISIBLE_DEVICES");
  clear_fxenv();
  snprintf(p, sizeof(p), "%s/env", fxdir);
  FILE *f = fopen(p, "r");
  ck_assert_ptr_nonnull(f);
  char line[256];
  int n = 0;
  while (fgets(line, sizeof(line), f) && n < 15) {
    line[strcspn(line, "\n")] = '\0';
    char *eq = strchr(line, '=');
    if (eq == NULL) continue;
    fxenv[n++] = strdup(line);
    *eq = '\0';
    setenv(line, eq + 1, 1);
  }
  fclose(f);
}

/* envp = the fixture's env plus extra (NULL-terminated), in a static vector. */
static char **with_env(char *const *extra) {
  static char *v[64];
  int n = 0;
  for (int i = 0; fxenv[i]; i++) v[n++] = fxenv[i];
  for (int i = 0; extra && extra[i] && n < 63; i++) v[n++] = extra[i];
  v[n] = NULL;
  return v;
}

static void discover_decide(char *const *envp) {
  char err[512];
  ck_assert_int_eq(trun_discover_node(&node, envp, TRUN_IDENTITY_ALWAYS, 1, err, sizeof(err)), 0);
  trun_nccl_env_decide(&node, envp, 0, &plan);
}

static const trun_env_decision *find(const char *name) {
  for (int i = 0; i < plan.n; i++)
    if (strcmp(plan.d[i].name, name) == 0) return &plan.d[i];
  return NULL;
}

typedef struct {
  const char *name, *value; /* value NULL: listed, not set */
  trun_env_source source;
} want_row;

/* Whether a reason is words only: not empty, no section sign, no design-note tag ("O1", "L1", "N5", "A1"
 * after a blank, '(' or ','), since users read it (--explain, trun-topo --json). */
static int reason_in_words(const char *r) {
  if (r[0] == '\0' || strstr(r, "\xc2\xa7")) return 0;
  for (const char *p = r + 1; *p; p++)
    if (strchr("OLNA", *p) && strchr(" (,", p[-1]) && p[1] >= '0' && p[1] <= '9') return 0;
  return 1;
}

/* The plan must be exactly rows, in order. */
static void assert_rows(const want_row *rows, int n) {
  for (int i = 0; i < plan.n && i < n; i++) {
    ck_assert_str_eq(plan.d[i].name, rows[i].name);
    ck_assert_msg(plan.d[i].source == rows[i].source, "%s: source %s", rows[i].name,
                  trun_env_source_name(plan.d[i].source));
    ck_assert_int_eq(plan.d[i].set, rows[i].value != NULL);
    if (rows[i].value) ck_assert_str_eq(plan.d[i].value, rows[i].value);
    ck_assert_msg(reason_in_words(plan.d[i].reason), "%s: reason cites design notes: %s", rows[i].name,
                  plan.d[i].reason);
  }
  ck_assert_int_eq(plan.n, n);
}

/* The decisions equal the "env" object and nproc the "nproc_auto" of the fixture's expected.json. */
static void assert_expected_json(void) {
  char p[PATH_MAX + 32];
  snprintf(p, sizeof(p), "%s/expected.json", fxdir);
  json_error_t je;
  json_t *root = json_load_file(p, 0, &je);
  ck_assert_msg(root != NULL, "%s: %s", p, je.text);
  json_t *env = json_object_get(root, "env");
  ck_assert_int_eq((int)json_object_size(env), plan.n);
  for (int i = 0; i < plan.n; i++) {
    const trun_env_decision *d = &plan.d[i];
    json_t *o = json_object_get(env, d->name);
    ck_assert_msg(o != NULL, "%s not in %s", d->name, p);
    json_t *v = json_object_get(o, "value");
    if (d->set)
      ck_assert_str_eq(json_string_value(v), d->value);
    else
      ck_assert(json_is_null(v));
    ck_assert_str_eq(json_string_value(json_object_get(o, "source")), trun_env_source_name(d->source));
    ck_assert_str_eq(json_string_value(json_object_get(o, "reason")), d->reason);
  }
  ck_assert_int_eq(json_integer_value(json_object_get(root, "nproc_auto")), trun_nproc_auto(&node));
  json_decref(root);
}

static int nproc(const char *spec, char *err, size_t errlen) {
  int n = 0;
  if (trun_nproc_resolve(spec, &n, err, errlen) < 0) return -1;
  return n;
}

#define PL TRUN_ENV_PLUGIN
#define TR TRUN_ENV_TRUN
#define EFA_ROWS(gdr)                                                                                \
  {"FI_PROVIDER", "efa", TR}, {"FI_EFA_USE_DEVICE_RDMA", gdr, TR}, {"FI_EFA_FORK_SAFE", NULL, PL}, { \
    "OFI_NCCL_PROTOCOL", NULL, PL                                                                    \
  }
#define GPU_PLUGIN_ROWS \
  {"NCCL_PROTO", NULL, PL}, { "NCCL_TUNER_PLUGIN", NULL, PL }
#define BUFF_ROWS \
  {"NCCL_BUFFSIZE", NULL, PL}, { "NCCL_P2P_NET_CHUNKSIZE", NULL, PL }

START_TEST(p4d) {
  use_fixture("p4d.24xlarge");
  discover_decide(with_env(NULL));
  ck_assert_str_eq(node.instance.instance_type, "p4d.24xlarge");
  want_row rows[] = {EFA_ROWS("1"),
                     GPU_PLUGIN_ROWS,
                     BUFF_ROWS,
                     {"NCCL_TOPO_FILE", NULL, PL},
                     {"NCCL_P2P_LEVEL", "NVL", TR},
                     {"NCCL_SOCKET_IFNAME", "=eth0,eth1", TR}};
  assert_rows(rows, sizeof(rows) / sizeof(rows[0]));
  assert_expected_json();
  char err[256];
  ck_assert_int_eq(nproc("auto", err, sizeof(err)), 8);
  ck_assert_int_eq(nproc("gpu", err, sizeof(err)), 8);
  setenv("CUDA_VISIBLE_DEVICES", "6,2,5", 1);
  ck_assert_int_eq(nproc("gpu", err, sizeof(err)), 3);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  ck_assert_int_eq(nproc("gpu", err, sizeof(err)), -1);
  ck_assert_ptr_nonnull(strstr(err, "no GPU"));
  unsetenv("CUDA_VISIBLE_DEVICES");
}
END_TEST

START_TEST(pod_4_of_8) {
  use_fixture("pod-p4d-4of8");
  discover_decide(with_env(NULL));
  ck_assert_int_eq(node.ngpu, 4);
  want_row rows[] = {EFA_ROWS("1"),
                     GPU_PLUGIN_ROWS,
                     BUFF_ROWS,
                     {"NCCL_TOPO_FILE", NULL, PL},
                     {"NCCL_P2P_LEVEL", "NVL", TR},
                     {"NCCL_SOCKET_IFNAME", "=eth0", TR}};
  assert_rows(rows, sizeof(rows) / sizeof(rows[0]));
  ck_assert_ptr_nonnull(strstr(find("FI_PROVIDER")->reason, "1 usable EFA"));
  assert_expected_json();
  char err[256];
  ck_assert_int_eq(nproc("auto", err, sizeof(err)), 4); /* CUDA_VISIBLE_DEVICES=4,5,6,7 from env */
  ck_assert_int_eq(nproc("gpu", err, sizeof(err)), 4);
}
END_TEST

START_TEST(pod_without_efa) {
  /* The same pod if its single EFA device were not granted either: nothing libfabric, no plugin rows. */
  use_fixture("pod-p4d-4of8");
  char err[512];
  ck_assert_int_eq(trun_discover_node(&node, with_env(NULL), TRUN_IDENTITY_ALWAYS, 1, err, sizeof(err)), 0);
  for (int r = 0; r < node.nrdma; r++) node.rdma[r].usable = 0;
  trun_nccl_env_decide(&node, with_env(NULL), 0, &plan);
  want_row rows[] = {
      {"NCCL_TOPO_FILE", NULL, TR}, {"NCCL_P2P_LEVEL", "NVL", TR}, {"NCCL_SOCKET_IFNAME", "=eth0", TR}};
  assert_rows(rows, sizeof(rows) / sizeof(rows[0]));
}
END_TEST

START_TEST(warm_cuda_cumem) {
  /* --warm-start-cuda: NCCL_CUMEM_ENABLE=0 only where NVML saw no NVSwitch link (NVLink SHARP needs cuMem);
   * never without the flag; the user's value wins. p5's GPUs reach their NVSwitches in the fixture. */
  use_fixture("p5.48xlarge");
  char err[512];
  ck_assert_int_eq(trun_discover_node(&node, with_env(NULL), TRUN_IDENTITY_ALWAYS, 1, err, sizeof(err)), 0);
  ck_assert_int_gt(node.gpus[0].switch_links, 0);
  trun_nccl_env_decide(&node, with_env(NULL), 0, &plan);
  ck_assert_ptr_null(find("NCCL_CUMEM_ENABLE"));
  trun_nccl_env_decide(&node, with_env(NULL), TRUN_NCCL_WARM_CUDA, &plan);
  const trun_env_decision *d = find("NCCL_CUMEM_ENABLE");
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(d->set, 0);
  ck_assert_ptr_nonnull(strstr(d->reason, "NVSwitch"));
  ck_assert(reason_in_words(d->reason));
  /* The same GPUs with direct NVLinks only (a 4-GPU board): set to 0. */
  for (int g = 0; g < node.ngpu; g++) node.gpus[g].switch_links = 0;
  trun_nccl_env_decide(&node, with_env(NULL), TRUN_NCCL_WARM_CUDA, &plan);
  d = find("NCCL_CUMEM_ENABLE");
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(d->set, 1);
  ck_assert_str_eq(d->value, "0");
  ck_assert_int_eq(d->source, TRUN_ENV_TRUN);
  ck_assert(reason_in_words(d->reason));
  /* GPUs found through the CUDA runtime: whether a switch is there is unknown, NCCL's default. */
  const char *src = node.gpu_source;
  node.gpu_source = "cudart";
  trun_nccl_env_decide(&node, with_env(NULL), TRUN_NCCL_WARM_CUDA, &plan);
  ck_assert_int_eq(find("NCCL_CUMEM_ENABLE")->set, 0);
  node.gpu_source = src;
  /* The user's value is kept. */
  char *user[] = {"NCCL_CUMEM_ENABLE=1", NULL};
  trun_nccl_env_decide(&node, with_env(user), TRUN_NCCL_WARM_CUDA, &plan);
  d = find("NCCL_CUMEM_ENABLE");
  ck_assert_int_eq(d->source, TRUN_ENV_USER);
  ck_assert_str_eq(d->value, "1");
}
END_TEST

/* An NVSwitch node whose job turned NVLink SHARP off (NCCL_NVLS_ENABLE=0, as on the shared H200 boxes):
 * cuMem off with --warm-start-cuda, unless a GPU is (or may be) in a multi-node NVLink domain, which needs
 * cuMem too. The h200x2 fixture's GPUs reach hidden switches and registered with the fabric with a zero
 * cluster UUID (no MNNVL), as NVML says on the box. */
START_TEST(warm_cuda_cumem_nvls_off) {
  use_fixture("h200x2");
  char err[512];
  ck_assert_int_eq(trun_discover_node(&node, with_env(NULL), TRUN_IDENTITY_NEVER, 1, err, sizeof(err)), 0);
  ck_assert_int_eq(node.ngpu, 2);
  for (int g = 0; g < node.ngpu; g++) {
    ck_assert_int_eq(node.gpus[g].switch_links, 18);
    ck_assert_int_eq(node.gpus[g].mnnvl, 0);
  }
  /* NVLS on (unset, or not a plain 0): NCCL's default */
  char *on[][2] = {{NULL, NULL},
                   {"NCCL_NVLS_ENABLE=1", NULL},
                   {"NCCL_NVLS_ENABLE=", NULL},
                   {"NCCL_NVLS_ENABLE=0x", NULL},
                   {"NCCL_NVLS_ENABLE=2", NULL}};
  for (size_t i = 0; i < sizeof(on) / sizeof(on[0]); i++) {
    trun_nccl_env_decide(&node, with_env(on[i]), TRUN_NCCL_WARM_CUDA, &plan);
    const trun_env_decision *d = find("NCCL_CUMEM_ENABLE");
    ck_assert_msg(d && !d->set, "case %zu: cuMem turned off with NVLS on", i);
    ck_assert_ptr_nonnull(strstr(d->reason, "NCCL_NVLS_ENABLE=0"));
    ck_assert(reason_in_words(d->reason));
  }
  char *off[] = {"NCCL_NVLS_ENABLE=0", NULL};
  trun_nccl_env_decide(&node, with_env(off), TRUN_NCCL_WARM_CUDA, &plan);
  const trun_env_decision *d = find("NCCL_CUMEM_ENABLE");
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(d->set, 1);
  ck_assert_str_eq(d->value, "0");
  ck_assert_int_eq(d->source, TRUN_ENV_TRUN);
  ck_assert(reason_in_words(d->reason));
  trun_nccl_env_decide(&node, with_env(off), 0, &plan); /* never without --warm-start-cuda */
  ck_assert_ptr_null(find("NCCL_CUMEM_ENABLE"));
  /* a GPU in a multi-node NVLink domain, or NVML that cannot say: NCCL's default */
  for (int mn = -1; mn <= 1; mn += 2) {
    node.gpus[1].mnnvl = mn;
    trun_nccl_env_decide(&node, with_env(off), TRUN_NCCL_WARM_CUDA, &plan);
    d = find("NCCL_CUMEM_ENABLE");
    ck_assert_msg(d && !d->set, "mnnvl %d: cuMem turned off", mn);
    ck_assert_ptr_nonnull(strstr(d->reason, "multi-node NVLink"));
    ck_assert(reason_in_words(d->reason));
  }
  /* the user's value wins over all of it */
  node.gpus[1].mnnvl = 0;
  char *both[] = {"NCCL_NVLS_ENABLE=0", "NCCL_CUMEM_ENABLE=1", NULL};
  trun_nccl_env_decide(&node, with_env(both), TRUN_NCCL_WARM_CUDA, &plan);
  d = find("NCCL_CUMEM_ENABLE");
  ck_assert_int_eq(d->source, TRUN_ENV_USER);
  ck_assert_str_eq(d->value, "1");
}
END_TEST

START_TEST(p5) {
  use_fixture("p5.48xlarge");
  discover_decide(with_env(NULL));
  want_row rows[] = {EFA_ROWS("1"),
                     GPU_PLUGIN_ROWS,
                     BUFF_ROWS,
                     {"NCCL_NVLSTREE_MAX_CHUNKSIZE", NULL, PL},
                     {"NCCL_NVLS_CHUNKSIZE", NULL, PL},
                     {"NCCL_NET_FORCE_FLUSH", NULL, PL},
                     {"NCCL_NVLS_ENABLE", NULL, PL},
                     {"NCCL_TOPO_FILE", NULL, PL},
                     {"NCCL_P2P_LEVEL", "NVL", TR},
                     {"NCCL_SOCKET_IFNAME", "=ens32", TR}};
  assert_rows(rows, sizeof(rows) / sizeof(rows[0]));
  ck_assert_ptr_nonnull(strstr(find("NCCL_TOPO_FILE")->reason, "generated"));
  assert_expected_json();
  char err[256];
  ck_assert_int_eq(nproc("auto", err, sizeof(err)), 8);
}
END_TEST

START_TEST(g5) {
  use_fixture("g5.48xlarge");
  discover_decide(with_env(NULL));
  want_row rows[] = {EFA_ROWS(NULL),
                     GPU_PLUGIN_ROWS,
                     {"NCCL_TOPO_FILE", NULL, PL},
                     {"NCCL_P2P_LEVEL", NULL, TR},
                     {"NCCL_SOCKET_IFNAME", "=eth0", TR}};
  assert_rows(rows, sizeof(rows) / sizeof(rows[0]));
  ck_assert_ptr_nonnull(strstr(find("NCCL_P2P_LEVEL")->reason, "GPUs 0 and 1 are NODE"));
  ck_assert_ptr_nonnull(strstr(find("FI_EFA_USE_DEVICE_RDMA")->reason, "no GPUDirect RDMA"));
  assert_expected_json();
}
END_TEST

START_TEST(g6e) {
  use_fixture("g6e.12xlarge");
  discover_decide(with_env(NULL));
  ck_assert_int_eq(node.ngpu, 4);
  ck_assert_str_eq(node.gpus[0].name, "NVIDIA L40S");
  ck_assert_int_eq(node.nrdma, 1);
  want_row rows[] = {EFA_ROWS(NULL),
                     GPU_PLUGIN_ROWS,
                     {"NCCL_TOPO_FILE", NULL, TR},
                     {"NCCL_P2P_LEVEL", NULL, TR},
                     {"NCCL_SOCKET_IFNAME", "=ens5", TR}};
  assert_rows(rows, sizeof(rows) / sizeof(rows[0]));
  assert_expected_json();
  char err[256];
  ck_assert_int_eq(nproc("auto", err, sizeof(err)), 4);
}
END_TEST

START_TEST(trn1) {
  use_fixture("trn1.32xlarge");
  discover_decide(with_env(NULL));
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_int_eq(node.nrdma, 8);
  want_row rows[] = {EFA_ROWS(NULL)};
  assert_rows(rows, sizeof(rows) / sizeof(rows[0]));
  ck_assert_ptr_nonnull(strstr(find("FI_EFA_USE_DEVICE_RDMA")->reason, "no NVIDIA GPU"));
  assert_expected_json();
  char err[256];
  ck_assert_int_eq(nproc("auto", err, sizeof(err)), 1); /* the fixture's cgroup allows 1 CPU */
  ck_assert_int_eq(nproc("gpu", err, sizeof(err)), -1);
}
END_TEST

START_TEST(h200_and_cpu_only) {
  use_fixture("h200x2");
  discover_decide(with_env(NULL));
  want_row rows[] = {
      {"NCCL_TOPO_FILE", NULL, TR}, {"NCCL_P2P_LEVEL", "NVL", TR}, {"NCCL_SOCKET_IFNAME", "=enp5s0", TR}};
  assert_rows(rows, sizeof(rows) / sizeof(rows[0]));
  assert_expected_json();
  use_fixture("cpu-only");
  discover_decide(with_env(NULL));
  ck_assert_int_eq(plan.n, 0);
  assert_expected_json();
  char err[256];
  ck_assert_int_eq(nproc("auto", err, sizeof(err)), 1);
}
END_TEST

/* One GPU visible: no pair, so no NCCL_P2P_LEVEL. */
START_TEST(one_gpu) {
  use_fixture("p4d.24xlarge");
  discover_decide(with_env((char *[]){"CUDA_VISIBLE_DEVICES=3", NULL}));
  ck_assert_int_eq(node.ngpu, 1);
  const trun_env_decision *d = find("NCCL_P2P_LEVEL");
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(d->set, 0);
  ck_assert_ptr_nonnull(strstr(d->reason, "one visible GPU"));
}
END_TEST

static const char *const FIXTURES[] = {"p4d.24xlarge", "pod-p4d-4of8",  "p5.48xlarge", "g5.48xlarge",
                                       "g6e.12xlarge", "trn1.32xlarge", "h200x2",      "cpu-only"};

/* Every variable any rule touches on any fixture, set by the user: kept in the decisions and in the
 * environment the agent builds for the workers. */
START_TEST(user_value_survives_every_rule) {
  const char *names[TRUN_ENV_MAX * 2];
  int nnames = 0;
  for (size_t f = 0; f < sizeof(FIXTURES) / sizeof(FIXTURES[0]); f++) {
    use_fixture(FIXTURES[f]);
    discover_decide(with_env(NULL));
    for (int i = 0; i < plan.n; i++) {
      int seen = 0;
      for (int k = 0; k < nnames; k++) seen |= strcmp(names[k], plan.d[i].name) == 0;
      if (!seen) names[nnames++] = strdup(plan.d[i].name);
    }
  }
  ck_assert_int_ge(nnames, 15);
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.signals_text = "SIGTERM";
  cfg.no_imds = 1;
  for (size_t f = 0; f < sizeof(FIXTURES) / sizeof(FIXTURES[0]); f++) {
    use_fixture(FIXTURES[f]);
    for (int k = 0; k < nnames; k++) {
      char entry[128], empty[128];
      snprintf(entry, sizeof(entry), "%s=user-%d", names[k], k);
      snprintf(empty, sizeof(empty), "%s=", names[k]);
      for (int form = 0; form < 2; form++) { /* a value, and the empty string */
        char *extra[] = {form ? empty : entry, NULL};
        char want[64];
        snprintf(want, sizeof(want), form ? "" : "user-%d", k);
        discover_decide(with_env(extra));
        const trun_env_decision *d = find(names[k]);
        ck_assert_ptr_nonnull(d);
        ck_assert_msg(d->source == TRUN_ENV_USER, "%s on %s: source %s", names[k], FIXTURES[f],
                      trun_env_source_name(d->source));
        ck_assert_int_eq(d->set, 1);
        ck_assert_str_eq(d->value, want);
        int omp;
        char **base = trun_agent_env(with_env(extra), &cfg, 2, NULL, &omp);
        ck_assert_ptr_nonnull(base);
        ck_assert_str_eq(trun_env_get(base, names[k]), want);
        /* the other decisions are still applied */
        for (int i = 0; i < plan.n; i++)
          if (plan.d[i].source == TRUN_ENV_TRUN && plan.d[i].set)
            ck_assert_str_eq(trun_env_get(base, plan.d[i].name), plan.d[i].value);
        trun_strv_free(base);
      }
    }
  }
  for (int k = 0; k < nnames; k++) free((char *)names[k]);
}
END_TEST

/* Variables of the families trun looks at but has no rule for: listed as the user's, unchanged. */
START_TEST(other_user_variables_listed) {
  use_fixture("p4d.24xlarge");
  discover_decide(with_env((char *[]){"NCCL_DEBUG=INFO", "FI_LOG_LEVEL=warn", "PATH=/bin", NULL}));
  const trun_env_decision *d = find("NCCL_DEBUG");
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(d->source, TRUN_ENV_USER);
  ck_assert_str_eq(d->value, "INFO");
  ck_assert_ptr_nonnull(find("FI_LOG_LEVEL"));
  ck_assert_ptr_null(find("PATH"));
}
END_TEST

/* The agent's environment carries trun's values; the worker's gets its NUMA CPUs. */
START_TEST(agent_env_and_numa_plan) {
  use_fixture("p4d.24xlarge");
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.signals_text = "SIGTERM";
  cfg.no_imds = 1;
  cfg.numa_binding = "node";
  cfg.role = "default";
  int omp;
  char *user[] = {"TRUN_CPU_AFFINITY=0", "TRUN_NUMA_PLAN=9;9", NULL};
  char **base = trun_agent_env(with_env(user), &cfg, 8, NULL, &omp);
  ck_assert_ptr_nonnull(base);
  ck_assert_str_eq(trun_env_get(base, "FI_PROVIDER"), "efa");
  ck_assert_str_eq(trun_env_get(base, "FI_EFA_USE_DEVICE_RDMA"), "1");
  ck_assert_str_eq(trun_env_get(base, "NCCL_P2P_LEVEL"), "NVL");
  ck_assert_str_eq(trun_env_get(base, "NCCL_SOCKET_IFNAME"), "=eth0,eth1");
  ck_assert_ptr_null(trun_env_get(base, "FI_EFA_FORK_SAFE")); /* left to the plugin */
  ck_assert_ptr_null(trun_env_get(base, "NCCL_TOPO_FILE"));
  /* The plan: each rank's GPU NUMA node cpulist (node0 0-23,48-71, node1 24-47,72-95) within this
   * process's CPUs. */
  char want[8][1024];
  for (int lr = 0; lr < 8; lr++) {
    unsigned long a[TRUN_CPU_LONGS], b[TRUN_CPU_LONGS];
    ck_assert_int_eq(trun_cpulist_to_mask(lr < 4 ? "0-23,48-71" : "24-47,72-95", a, TRUN_CPU_LONGS), 0);
    memset(b, 0, sizeof(b));
    ck_assert_int_eq(sched_getaffinity(0, sizeof(b), (cpu_set_t *)(void *)b), 0);
    for (int i = 0; i < TRUN_CPU_LONGS; i++) a[i] &= b[i];
    trun_mask_to_cpulist(a, TRUN_CPU_LONGS, want[lr], sizeof(want[lr]));
  }
  trun_rdzv_round r;
  memset(&r, 0, sizeof(r));
  strcpy(r.master_addr, "h");
  for (int lr = 0; lr < 8; lr++) {
    char **env = trun_worker_envp(base, &cfg, &r, 8, lr, 0, "");
    ck_assert_ptr_nonnull(env);
    ck_assert_ptr_null(trun_env_get(env, "TRUN_NUMA_PLAN"));
    const char *cpus = trun_worker_cpus(env);
    if (want[lr][0])
      ck_assert_str_eq(cpus, want[lr]);
    else
      ck_assert_ptr_null(cpus); /* none of that node's CPUs is ours: not pinned */
    trun_strv_free(env);
  }
  trun_strv_free(base);
  /* Without --numa-binding a user's TRUN_CPU_AFFINITY pins nothing. */
  cfg.numa_binding = NULL;
  base = trun_agent_env(with_env(user), &cfg, 2, NULL, &omp);
  char **env = trun_worker_envp(base, &cfg, &r, 8, 0, 0, "");
  ck_assert_ptr_null(trun_worker_cpus(env));
  trun_strv_free(env);
  trun_strv_free(base);
}
END_TEST

START_TEST(numa_cpulist_sources) {
  use_fixture("p5.48xlarge");
  char err[512], out[256];
  ck_assert_int_eq(trun_discover_node(&node, with_env(NULL), TRUN_IDENTITY_NEVER, 1, err, sizeof(err)), 0);
  ck_assert_int_eq(trun_gpu_numa_cpulist(&node.gpus[5], out, sizeof(out)), 0);
  ck_assert_str_eq(out, "48-95,144-191"); /* sysfs node1/cpulist */
  trun_gpu g;
  memset(&g, 0, sizeof(g));
  g.numa_node = 7; /* no such node: NVML's affinity */
  strcpy(g.cpu_affinity, "3-4");
  ck_assert_int_eq(trun_gpu_numa_cpulist(&g, out, sizeof(out)), 0);
  ck_assert_str_eq(out, "3-4");
  g.cpu_affinity[0] = '\0';
  ck_assert_int_eq(trun_gpu_numa_cpulist(&g, out, sizeof(out)), -1);
  trun_numa_cpus_for(&node, 8, out, sizeof(out)); /* no GPU for local rank 8 */
  ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(cpulists) {
  unsigned long m[TRUN_CPU_LONGS];
  char out[256];
  ck_assert_int_eq(trun_cpulist_to_mask("0-23,48-71\n", m, TRUN_CPU_LONGS), 0);
  ck_assert_int_eq(trun_mask_count(m, TRUN_CPU_LONGS), 48);
  trun_mask_to_cpulist(m, TRUN_CPU_LONGS, out, sizeof(out));
  ck_assert_str_eq(out, "0-23,48-71");
  ck_assert_int_eq(trun_cpulist_to_mask("5, 7-8,4095", m, TRUN_CPU_LONGS), 0);
  trun_mask_to_cpulist(m, TRUN_CPU_LONGS, out, sizeof(out));
  ck_assert_str_eq(out, "5,7-8,4095");
  ck_assert_int_eq(trun_cpulist_to_mask("", m, TRUN_CPU_LONGS), 0);
  ck_assert_int_eq(trun_mask_count(m, TRUN_CPU_LONGS), 0);
  const char *bad[] = {"4096", "3-1", "a", "1,", "1-", "1;2", "-1"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(trun_cpulist_to_mask(bad[i], m, TRUN_CPU_LONGS) == -1, "accepted '%s'", bad[i]);
}
END_TEST

/* Without an NVML library, gpu / auto count /dev/nvidiaN (TRUN_DEV_ROOT), narrowed by CUDA_VISIBLE_DEVICES.
 */
START_TEST(nproc_dev_fallback) {
  use_fixture("cpu-only");
  char dir[] = "/tmp/trun-nccl-env.XXXXXX", p[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *nodes[] = {"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"};
  for (size_t i = 0; i < 5; i++) {
    snprintf(p, sizeof(p), "%s/%s", dir, nodes[i]);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
  }
  setenv("TRUN_DEV_ROOT", dir, 1);
  char err[256];
  ck_assert_int_eq(nproc("gpu", err, sizeof(err)), 3);
  setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  ck_assert_int_eq(nproc("auto", err, sizeof(err)), 1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  for (size_t i = 0; i < 5; i++) {
    snprintf(p, sizeof(p), "%s/%s", dir, nodes[i]);
    unlink(p);
  }
  rmdir(dir);
}
END_TEST

START_TEST(gdr_types) {
  const char *yes[] = {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge",
                       "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"};
  const char *no[] = {"p5.4xlarge", "g5.48xlarge", "g6e.12xlarge", "trn1.32xlarge", "", "p4d"};
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
    ck_assert_int_eq(trun_instance_has_gdr(yes[i]), 1);
  for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) ck_assert_int_eq(trun_instance_has_gdr(no[i]), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nccl_env");
  TCase *tc = tcase_create("decisions");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, p4d);
  tcase_add_test(tc, pod_4_of_8);
  tcase_add_test(tc, pod_without_efa);
  tcase_add_test(tc, p5);
  tcase_add_test(tc, g5);
  tcase_add_test(tc, g6e);
  tcase_add_test(tc, trn1);
  tcase_add_test(tc, h200_and_cpu_only);
  tcase_add_test(tc, one_gpu);
  tcase_add_test(tc, user_value_survives_every_rule);
  tcase_add_test(tc, other_user_variables_listed);
  tcase_add_test(tc, agent_env_and_numa_plan);
  tcase_add_test(tc, numa_cpulist_sources);
  tcase_add_test(tc, cpulists);
  tcase_add_test(tc, nproc_dev_fallback);
  tcase_add_test(tc, gdr_types);
  tcase_add_test(tc, warm_cuda_cumem);
  tcase_add_test(tc, warm_cuda_cumem_nvls_off);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
