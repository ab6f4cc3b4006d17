/* launcher/platform.c: Slurm hostlist expansion, and each platform's environment -> the detected settings. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "platform.h"

#define ENV(...) ((char *[]){__VA_ARGS__, NULL})

static char err[1024];
static trun_platform plat;

/* ---- hostlists ---------------------------------------------------------------------------------------- */

static const struct {
  const char *in, *out; /* out: the hosts joined with ' ' */
} expansions[] = {
    {"node[01-04,07]", "node01 node02 node03 node04 node07"},
    {"n[8-11]", "n8 n9 n10 n11"},
    {"n[098-101]", "n098 n099 n100 n101"},
    {"single", "single"},
    {"login,gpu[1-3],x", "login gpu1 gpu2 gpu3 x"},
    {"rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02"},
    {"a[1,3]b[7]c", "a1b7c a3b7c"},
    {"ip-10-0-[1-2]-5,h[0-1]", "ip-10-0-1-5 ip-10-0-2-5 h0 h1"},
    {"gpu-st-p4d-[1-2].compute", "gpu-st-p4d-1.compute gpu-st-p4d-2.compute"},
};

START_TEST(test_hostlist_expand) {
  char **hosts;
  int n;
  ck_assert_msg(trun_hostlist_expand(expansions[_i].in, &hosts, &n, err, sizeof(err)) == 0, "%s", err);
  char joined[512] = "";
  for (int i = 0; i < n; i++) {
    if (i) strcat(joined, " ");
    strcat(joined, hosts[i]);
  }
  ck_assert_str_eq(joined, expansions[_i].out);
  trun_hostlist_free(hosts, n);
}
END_TEST

static const struct {
  const char *in, *msg;
} bad_lists[] = {
    {"n[1-", "missing ']' in 'n[1-'"},
    {"n[3-1]", "bad range '3-1' in 'n[3-1]'"},
    {"n[]", "empty range '[]' in 'n[]'"},
    {"n[a-b]", "bad range 'a-b' in 'n[a-b]'"},
    {"n[1-]", "bad range '1-' in 'n[1-]'"},
    {"n[1,]", "empty range after ',' in 'n[1,]'"},
    {"a,,b", "empty host name in 'a,,b'"},
    {"a,", "empty host name in 'a,'"},
    {"", "no hosts in ''"},
    {"n]1", "unbalanced ']' in 'n]1'"},
    {"n[1-2[3]]", "nested '[' in 'n[1-2[3]]'"},
    {"n[0-999999]", "range '0-999999' has more than 100000 hosts"},
};

START_TEST(test_hostlist_errors) {
  char **hosts = (char **)1;
  int n = 7;
  ck_assert_int_eq(trun_hostlist_expand(bad_lists[_i].in, &hosts, &n, err, sizeof(err)), -1);
  ck_assert_str_eq(err, bad_lists[_i].msg);
  ck_assert_ptr_null(hosts);
  ck_assert_int_eq(n, 0);
}
END_TEST

/* ---- platforms ---------------------------------------------------------------------------------------- */

static const trun_platform_host no_host = {
    .hostname = "laptop", .fqdn = "laptop", .mpi_hostfile = "/nonexistent"};

static void detect_ok(char **envp, const trun_platform_host *h) {
  trun_platform_free(&plat);
  ck_assert_msg(trun_platform_detect(envp, h ? h : &no_host, &plat, err, sizeof(err)) == 0, "%s", err);
}

static void detect_fail(char **envp, const trun_platform_host *h, const char *msg) {
  trun_platform_free(&plat);
  ck_assert_int_eq(trun_platform_detect(envp, h ? h : &no_host, &plat, err, sizeof(err)), -1);
  ck_assert_str_eq(err, msg);
  ck_assert_ptr_null(plat.name);
}

/* Exactly these options detected (id, value) and nothing else. */
static void expect(const char *name, int n, ...) {
  ck_assert_pstr_eq(plat.name, name);
  int seen[TRUN_OPT__COUNT] = {0};
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    int id = va_arg(ap, int);
    const char *val = va_arg(ap, const char *);
    ck_assert_msg(plat.val[id] != NULL, "option %d not detected", id);
    ck_assert_str_eq(plat.val[id], val);
    ck_assert_ptr_nonnull(plat.why[id]);
    seen[id] = 1;
  }
  va_end(ap);
  for (int id = 0; id < TRUN_OPT__COUNT; id++)
    ck_assert_msg(seen[id] || plat.val[id] == NULL, "option %d detected as '%s'", id, plat.val[id]);
}

START_TEST(test_none) {
  detect_ok(ENV("HOME=/root"), NULL);
  expect(NULL, 0);
  /* Kubernetes alone is no platform; nor is a pod that is a torchrun worker (LOCAL_RANK, TORCHELASTIC_RUN_ID)
   */
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1"), NULL);
  expect(NULL, 0);
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=a", "MASTER_PORT=1", "WORLD_SIZE=2",
                "RANK=1", "LOCAL_RANK=1", "TORCHELASTIC_RUN_ID=x"),
            NULL);
  expect(NULL, 0);
  /* TRUN_PLATFORM=none turns a real Slurm environment off */
  detect_ok(ENV("TRUN_PLATFORM=none", "SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_NODEID=0",
                "SLURM_JOB_NODELIST=a[1-2]"),
            NULL);
  expect(NULL, 0);
}
END_TEST

START_TEST(test_slurm) {
  detect_ok(ENV("SLURM_JOB_ID=4242", "SLURM_NNODES=4", "SLURM_NODEID=2", "SLURM_JOB_NODELIST=gpu-[07-09,12]",
                "SLURM_GPUS_ON_NODE=8", "SLURM_NTASKS_PER_NODE=1"),
            NULL);
  expect("slurm", 5, TRUN_OPT_NNODES, "4", TRUN_OPT_NODE_RANK, "2", TRUN_OPT_MASTER_ADDR, "gpu-07",
         TRUN_OPT_RDZV_ID, "4242", TRUN_OPT_NPROC_PER_NODE, "8");
  ck_assert_str_eq(plat.why[TRUN_OPT_NPROC_PER_NODE], "SLURM_GPUS_ON_NODE");
  ck_assert_str_eq(plat.note, "");
  /* no GPUs: tasks per node; SLURM_NODELIST and SLURM_JOB_NUM_NODES as fallbacks; a count mismatch is noted
   */
  detect_ok(ENV("SLURM_JOB_ID=7", "SLURM_JOB_NUM_NODES=3", "SLURM_NODEID=0", "SLURM_NODELIST=cpu[1-2]",
                "SLURM_NTASKS_PER_NODE=4"),
            NULL);
  expect("slurm", 5, TRUN_OPT_NNODES, "3", TRUN_OPT_NODE_RANK, "0", TRUN_OPT_MASTER_ADDR, "cpu1",
         TRUN_OPT_RDZV_ID, "7", TRUN_OPT_NPROC_PER_NODE, "4");
  ck_assert_str_eq(plat.note, "SLURM_NODELIST has 2 hosts but SLURM_JOB_NUM_NODES=3");
  /* heterogeneous tasks per node ("2(x3)") is no hint */
  detect_ok(ENV("SLURM_JOB_ID=7", "SLURM_NNODES=1", "SLURM_NODEID=0", "SLURM_JOB_NODELIST=solo",
                "SLURM_NTASKS_PER_NODE=2(x3)"),
            NULL);
  expect("slurm", 4, TRUN_OPT_NNODES, "1", TRUN_OPT_NODE_RANK, "0", TRUN_OPT_MASTER_ADDR, "solo",
         TRUN_OPT_RDZV_ID, "7");
}
END_TEST

/* Inside srun every task is an agent. The environments are those Slurm 22.05 gave the tasks of
 * `srun -N2 --ntasks-per-node=2 [--gpus-per-task=1]` on the test cluster (tests/helpers/slurm_cluster.sh). */
START_TEST(test_slurm_step) {
  /* task 3 of 4, the second on n2: node rank = SLURM_PROCID, nodes = the step's tasks; no GPUs, and the
   * step's tasks per node (agents) are no worker count */
  detect_ok(ENV("SLURM_JOB_ID=9", "SLURM_JOB_NODELIST=n[1-3]", "SLURM_JOB_NUM_NODES=3", "SLURM_NNODES=2",
                "SLURM_NODEID=1", "SLURM_LOCALID=1", "SLURM_PROCID=3", "SLURM_NTASKS=4",
                "SLURM_NTASKS_PER_NODE=2", "SLURM_STEP_NODELIST=n[2-3]", "SLURM_STEP_NUM_NODES=2",
                "SLURM_STEP_NUM_TASKS=4", "SLURM_STEP_TASKS_PER_NODE=2(x2)"),
            NULL);
  expect("slurm", 4, TRUN_OPT_NNODES, "4", TRUN_OPT_NODE_RANK, "3", TRUN_OPT_MASTER_ADDR, "n2",
         TRUN_OPT_RDZV_ID, "9");
  ck_assert_str_eq(plat.why[TRUN_OPT_NODE_RANK], "SLURM_PROCID");
  ck_assert_str_eq(plat.why[TRUN_OPT_MASTER_ADDR], "SLURM_STEP_NODELIST, first host");
  ck_assert_str_eq(plat.note, "");
  /* --gpus-per-task=1: SLURM_GPUS_ON_NODE=2 counts the node's, SLURM_STEP_GPUS this task's */
  detect_ok(
      ENV("SLURM_JOB_ID=9", "SLURM_JOB_NODELIST=n1", "SLURM_NNODES=1", "SLURM_NODEID=0", "SLURM_PROCID=1",
          "SLURM_STEP_NODELIST=n1", "SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=2",
          "SLURM_GPUS_ON_NODE=2", "SLURM_STEP_GPUS=1", "CUDA_VISIBLE_DEVICES=1"),
      NULL);
  expect("slurm", 5, TRUN_OPT_NNODES, "2", TRUN_OPT_NODE_RANK, "1", TRUN_OPT_MASTER_ADDR, "n1",
         TRUN_OPT_RDZV_ID, "9", TRUN_OPT_NPROC_PER_NODE, "1");
  ck_assert_str_eq(plat.why[TRUN_OPT_NPROC_PER_NODE], "SLURM_STEP_GPUS");
  /* one task per node with all of the node's GPUs: SLURM_GPUS_ON_NODE */
  detect_ok(
      ENV("SLURM_JOB_ID=9", "SLURM_JOB_NODELIST=g[1-2]", "SLURM_NNODES=2", "SLURM_NODEID=1", "SLURM_PROCID=1",
          "SLURM_STEP_NUM_TASKS=2", "SLURM_GPUS_ON_NODE=8", "SLURM_STEP_GPUS=0,1,2,3,4,5,6,7"),
      NULL);
  expect("slurm", 5, TRUN_OPT_NNODES, "2", TRUN_OPT_NODE_RANK, "1", TRUN_OPT_MASTER_ADDR, "g1",
         TRUN_OPT_RDZV_ID, "9", TRUN_OPT_NPROC_PER_NODE, "8");
  ck_assert_str_eq(plat.why[TRUN_OPT_NPROC_PER_NODE], "SLURM_GPUS_ON_NODE");
  ck_assert_str_eq(plat.why[TRUN_OPT_MASTER_ADDR], "SLURM_JOB_NODELIST, first host");
  /* a step list that disagrees with the step's node count is noted; a PROCID past the tasks is an error */
  detect_ok(
      ENV("SLURM_JOB_ID=9", "SLURM_JOB_NODELIST=n[1-3]", "SLURM_NNODES=2", "SLURM_NODEID=0", "SLURM_PROCID=0",
          "SLURM_STEP_NODELIST=n1", "SLURM_STEP_NUM_NODES=2", "SLURM_STEP_NUM_TASKS=2"),
      NULL);
  ck_assert_str_eq(plat.note, "SLURM_STEP_NODELIST has 1 hosts but SLURM_STEP_NUM_NODES=2");
  detect_fail(
      ENV("SLURM_JOB_ID=9", "SLURM_JOB_NODELIST=n[1-3]", "SLURM_NNODES=2", "SLURM_NODEID=0", "SLURM_PROCID=4",
          "SLURM_STEP_NUM_TASKS=4"),
      NULL,
      "SLURM_PROCID='4' is not an integer from 0 to 3 (set TRUN_PLATFORM=none to skip platform detection)");
}
END_TEST

START_TEST(test_slurm_errors) {
  detect_fail(
      ENV("SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_NODEID=2", "SLURM_JOB_NODELIST=a[1-2]"), NULL,
      "SLURM_NODEID='2' is not an integer from 0 to 1 (set TRUN_PLATFORM=none to skip platform detection)");
  detect_fail(
      ENV("SLURM_JOB_ID=1", "SLURM_NNODES=two", "SLURM_NODEID=0", "SLURM_JOB_NODELIST=a[1-2]"), NULL,
      "SLURM_NNODES='two' is not an integer from 1 to 1000000 (set TRUN_PLATFORM=none to skip platform "
      "detection)");
  detect_fail(ENV("SLURM_JOB_ID=1", "SLURM_NNODES=2", "SLURM_NODEID=0", "SLURM_JOB_NODELIST=a[1-2"), NULL,
              "SLURM_JOB_NODELIST='a[1-2': missing ']' in 'a[1-2' (set TRUN_PLATFORM=none to skip platform "
              "detection)");
  detect_fail(ENV("TRUN_PLATFORM=slurm"), NULL,
              "TRUN_PLATFORM=slurm but the environment lacks SLURM_JOB_ID, SLURM_NNODES, SLURM_NODEID or "
              "SLURM_JOB_NODELIST");
  detect_fail(
      ENV("TRUN_PLATFORM=pbs"), NULL,
      "TRUN_PLATFORM='pbs' is not one of auto, none, slurm, kubeflow-trainer-v2, kubeflow-pytorchjob-v1, "
      "mpi-operator, jobset, indexed-job");
}
END_TEST

START_TEST(test_pytorchjob_v1) {
  /* RANK is the pod's index, WORLD_SIZE the number of pods (nprocPerNode unset) */
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "PYTHONUNBUFFERED=1", "MASTER_ADDR=train-master-0",
                "MASTER_PORT=23456", "WORLD_SIZE=3", "RANK=2"),
            NULL);
  expect("kubeflow-pytorchjob-v1", 4, TRUN_OPT_NNODES, "3", TRUN_OPT_NODE_RANK, "2", TRUN_OPT_MASTER_ADDR,
         "train-master-0", TRUN_OPT_MASTER_PORT, "23456");
  /* with nprocPerNode=4: WORLD_SIZE = pods x 4 */
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=m", "MASTER_PORT=23456", "WORLD_SIZE=8",
                "RANK=1", "PET_NPROC_PER_NODE=4", "PET_NNODES=2", "PET_NODE_RANK=1", "PET_MASTER_ADDR=m"),
            NULL);
  expect("kubeflow-pytorchjob-v1", 4, TRUN_OPT_NNODES, "2", TRUN_OPT_NODE_RANK, "1", TRUN_OPT_MASTER_ADDR,
         "m", TRUN_OPT_MASTER_PORT, "23456");
  ck_assert_str_eq(plat.why[TRUN_OPT_NNODES], "WORLD_SIZE / PET_NPROC_PER_NODE");
  detect_fail(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=m", "MASTER_PORT=23456", "WORLD_SIZE=2",
                  "RANK=2"),
              NULL,
              "RANK='2' is not an integer from 0 to 1 (set TRUN_PLATFORM=none to skip platform detection)");
}
END_TEST

START_TEST(test_trainer_v2) {
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "PET_NNODES=2", "PET_NODE_RANK=1",
                "PET_MASTER_ADDR=mnist-node-0-0.mnist", "PET_MASTER_PORT=29500", "JOB_COMPLETION_INDEX=1"),
            NULL);
  /* the PET_* values are environment settings already; what is left to detect is nproc auto */
  expect("kubeflow-trainer-v2", 1, TRUN_OPT_NPROC_PER_NODE, "auto");
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "PET_NNODES=2", "PET_NODE_RANK=1", "PET_MASTER_ADDR=m",
                "PET_NPROC_PER_NODE=8"),
            NULL);
  expect("kubeflow-trainer-v2", 0);
}
END_TEST

static void fake_fqdn(char *out, size_t len) {
  snprintf(out, len, "train-node-0-3.train.default.svc.cluster.local");
}

START_TEST(test_jobset_and_indexed_job) {
  /* JobSet: <jobset>-<replicated job>-<job index>-<pod index>, the subdomain from the pod's FQDN */
  trun_platform_host js = {
      .hostname = "train-node-0-3", .fqdn_fn = fake_fqdn, .mpi_hostfile = "/nonexistent"};
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=3", "JOBSET_NAME=train"), &js);
  expect("jobset", 2, TRUN_OPT_NODE_RANK, "3", TRUN_OPT_MASTER_ADDR,
         "train-node-0-0.train.default.svc.cluster.local");
  ck_assert_str_eq(plat.note,
                   "the node count is not in an Indexed Job's environment: set --nnodes, PET_NNODES or "
                   "nnodes: in the config file");
  /* Indexed Job with TRUN_MASTER_SERVICE naming the headless Service */
  trun_platform_host ij = {.hostname = "bert-12", .fqdn = "bert-12", .mpi_hostfile = "/nonexistent"};
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=12",
                "TRUN_MASTER_SERVICE=bert-svc", "PET_NNODES=16"),
            &ij);
  expect("indexed-job", 2, TRUN_OPT_NODE_RANK, "12", TRUN_OPT_MASTER_ADDR, "bert-0.bert-svc");
  ck_assert_str_eq(plat.why[TRUN_OPT_MASTER_ADDR], "hostname with index 0 + TRUN_MASTER_SERVICE");
  ck_assert_str_eq(plat.note, "");
  /* no subdomain: the bare name, and a note saying what to do */
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=12", "PET_NNODES=16"), &ij);
  expect("indexed-job", 2, TRUN_OPT_NODE_RANK, "12", TRUN_OPT_MASTER_ADDR, "bert-0");
  ck_assert_str_eq(plat.note,
                   "the pod has no subdomain: set spec.subdomain to a headless Service, or "
                   "TRUN_MASTER_SERVICE to its name, so that the master address resolves");
  /* a hostname that does not end with the index: only the rank */
  trun_platform_host odd = {.hostname = "worker", .fqdn = "worker", .mpi_hostfile = "/nonexistent"};
  detect_ok(ENV("KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=1", "PET_NNODES=2"), &odd);
  expect("indexed-job", 1, TRUN_OPT_NODE_RANK, "1");
  ck_assert_str_eq(plat.note,
                   "hostname 'worker' does not end with -1, so the master address (index 0) is unknown: "
                   "set --master-addr");
}
END_TEST

START_TEST(test_mpi_operator) {
  char dir[] = "/tmp/trun-test-mpi.XXXXXX", path[64], envvar[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/hostfile", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(
      "# written by the MPI Operator\n"
      "pi-worker-0.pi.default.svc slots=8\n"
      "pi-worker-1.pi.default.svc slots=8\n\n"
      "pi-worker-2.pi.default.svc slots=8\n",
      f);
  fclose(f);
  snprintf(envvar, sizeof(envvar), "OMPI_MCA_orte_default_hostfile=%s", path);
  trun_platform_host h = {.hostname = "pi-worker-1", .fqdn = NULL, .mpi_hostfile = "/nonexistent"};
  detect_ok(ENV(envvar), &h);
  expect("mpi-operator", 4, TRUN_OPT_NNODES, "3", TRUN_OPT_MASTER_ADDR, "pi-worker-0.pi.default.svc",
         TRUN_OPT_NODE_RANK, "1", TRUN_OPT_NPROC_PER_NODE, "8");
  /* the default path when the pod is an MPI Operator pod; Intel MPI's host:N form; the rank from mpirun */
  f = fopen(path, "w");
  fputs("a.svc:4\nb.svc:4\n", f);
  fclose(f);
  trun_platform_host launcher = {.hostname = "pi-launcher", .mpi_hostfile = path};
  detect_ok(ENV("K_MPI_JOB_ROLE=worker", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=1"), &launcher);
  expect("mpi-operator", 4, TRUN_OPT_NNODES, "2", TRUN_OPT_MASTER_ADDR, "a.svc", TRUN_OPT_NODE_RANK, "1",
         TRUN_OPT_NPROC_PER_NODE, "4");
  /* neither: the rank is left to the user, with a note */
  detect_ok(ENV("K_MPI_JOB_ROLE=launcher"), &launcher);
  expect("mpi-operator", 3, TRUN_OPT_NNODES, "2", TRUN_OPT_MASTER_ADDR, "a.svc", TRUN_OPT_NPROC_PER_NODE,
         "4");
  char note[256];
  snprintf(note, sizeof(note), "host 'pi-launcher' is not in %s: set --node-rank", path);
  ck_assert_str_eq(plat.note, note);
  unlink(path);
  rmdir(dir);
  detect_fail(
      ENV("OMPI_MCA_orte_default_hostfile=/nonexistent/hostfile"), NULL,
      "cannot read the MPI hostfile /nonexistent/hostfile (from OMPI_MCA_orte_default_hostfile): No such "
      "file or directory");
}
END_TEST

/* apply: only options still at their defaults take detected values. */
START_TEST(test_apply) {
  char *argv[] = {"trun", "--nnodes", "2", "t.py", NULL};
  trun_settings cl;
  ck_assert_int_eq(trun_cli_parse(4, argv, ENV("PET_NODE_RANK=1"), &cl, err, sizeof(err)), 0);
  detect_ok(ENV("SLURM_JOB_ID=5", "SLURM_NNODES=2", "SLURM_NODEID=0", "SLURM_JOB_NODELIST=h[1-2]"), NULL);
  trun_platform_apply(&plat, &cl);
  ck_assert_str_eq(cl.platform, "slurm");
  ck_assert_int_eq(cl.v[TRUN_OPT_NNODES].src, TRUN_SRC_CLI);
  ck_assert_int_eq(cl.v[TRUN_OPT_NODE_RANK].src, TRUN_SRC_ENV);
  ck_assert_str_eq(cl.v[TRUN_OPT_NODE_RANK].val, "1");
  ck_assert_int_eq(cl.v[TRUN_OPT_MASTER_ADDR].src, TRUN_SRC_DETECTED);
  ck_assert_str_eq(cl.v[TRUN_OPT_MASTER_ADDR].val, "h1");
  ck_assert_int_eq(cl.v[TRUN_OPT_RDZV_ID].src, TRUN_SRC_DETECTED);
}
END_TEST

static Suite *platform_suite(void) {
  Suite *s = suite_create("platform");
  TCase *tc = tcase_create("platform");
  tcase_add_loop_test(tc, test_hostlist_expand, 0, (int)(sizeof(expansions) / sizeof(expansions[0])));
  tcase_add_loop_test(tc, test_hostlist_errors, 0, (int)(sizeof(bad_lists) / sizeof(bad_lists[0])));
  tcase_add_test(tc, test_none);
  tcase_add_test(tc, test_slurm);
  tcase_add_test(tc, test_slurm_step);
  tcase_add_test(tc, test_slurm_errors);
  tcase_add_test(tc, test_pytorchjob_v1);
  tcase_add_test(tc, test_trainer_v2);
  tcase_add_test(tc, test_jobset_and_indexed_job);
  tcase_add_test(tc, test_mpi_operator);
  tcase_add_test(tc, test_apply);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(platform_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  trun_platform_free(&plat);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
