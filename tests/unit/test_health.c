/* agent/discover/health.c and the facts behind it (health_gpu.c in the discovery child) against the node
 * fixtures (tests/fixtures/nodes/, gen.py there) and the fake NVML with its fault injection
 * (tests/fakes/nvml_shim.c): every check's verdict on a healthy p4d, on p4d-faulty (one fault per check),
 * with an older driver that lacks the calls, with a lost GPU, on a CPU-only node; the gpu-count sources, PCIe
 * while idle or busy, NVLinks down with and without NVSwitch, the --health-checks lists and the one-line
 * summary. Paths: TRUN_REPO (default: the current directory) and TRUN_BUILD (default <repo>/build). */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "discover.h"
#include "health.h"
#include "nvml.h"

static trun_node node;
static trun_health_env henv;
static trun_health h;
static char err[1024];
static char tmpdir[64];

static const char *repo(void) {
  const char *r = getenv("TRUN_REPO");
  return r && *r ? r : ".";
}

static void use_fixture(const char *name) {
  char p[PATH_MAX + 64], real[PATH_MAX], lib[PATH_MAX];
  snprintf(p, sizeof(p), "%s/tests/fixtures/nodes/%s", repo(), name);
  ck_assert_msg(realpath(p, real) != NULL, "fixture %s missing", p);
  snprintf(p, sizeof(p), "%s/sys", real);
  setenv("TRUN_SYSFS_ROOT", p, 1);
  snprintf(p, sizeof(p), "%s/dev", real);
  setenv("TRUN_DEV_ROOT", p, 1);
  snprintf(p, sizeof(p), "%s/dmi", real);
  setenv("TRUN_DMI_ROOT", p, 1);
  snprintf(p, sizeof(p), "%s/nvml.json", real);
  setenv("TRUN_FAKE_NVML_TOPO", p, 1);
  setenv("TRUN_CUDART_LIBRARY", "/nonexistent/libcudart.so", 1);
  const char *b = getenv("TRUN_BUILD");
  snprintf(p, sizeof(p), "%s/libnvidia-ml-fake.so", b && *b ? b : "build");
  ck_assert_msg(realpath(p, lib) != NULL, "%s missing: run make", p);
  setenv("TRUN_NVML_LIBRARY", lib, 1);
}

/* Discovery as the gate runs it (facts in the child, RDMA, the type from DMI), then every check; /dev/shm
 * reads shm bytes; envp as the agent's. */
static void check_node(char **envp, long long shm) {
  memset(&node, 0, sizeof(node));
  node.instance.source = "none";
  memset(err, 0, sizeof(err));
  int rc = trun_discover_gpus_flags(&node, envp, TRUN_GPU_NO_AFFINITY | TRUN_GPU_HEALTH, err, sizeof(err));
  if (rc == 0) ck_assert_str_eq(err, "");
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  trun_discover_instance(&node, 1);
  trun_health_gather(&node, envp, err, &henv);
  henv.shm_bytes = shm;
  trun_health_judge(&node, &henv, TRUN_HEALTH_ALL, &h);
}

static const trun_health_check *get(const char *name) {
  for (int i = 0; i < h.n; i++)
    if (strcmp(h.c[i].name, name) == 0) return &h.c[i];
  ck_abort_msg("no check %s", name);
  return NULL;
}

#define STATUS(name, st)                                                                                   \
  ck_assert_msg(get(name)->status == (st), "%s: %s, want %s (value '%s', reason '%s')", name,              \
                trun_health_status_name(get(name)->status), trun_health_status_name(st), get(name)->value, \
                get(name)->reason)
#define REASON_HAS(name, text)                                                               \
  ck_assert_msg(strstr(get(name)->reason, text) != NULL, "%s: reason '%s' lacks '%s'", name, \
                get(name)->reason, text)
#define VALUE_HAS(name, text)                                                                                \
  ck_assert_msg(strstr(get(name)->value, text) != NULL, "%s: value '%s' lacks '%s'", name, get(name)->value, \
                text)

#define NOENV ((char *[]){NULL})
#define GIB (1LL << 30)

START_TEST(healthy_p4d) {
  use_fixture("p4d.24xlarge");
  check_node(NOENV, 2 * GIB);
  ck_assert_int_eq(h.n, TRUN_HC__COUNT);
  for (int i = 0; i < h.n; i++) {
    ck_assert_ptr_nonnull(h.c[i].source);
    ck_assert_msg(h.c[i].threshold[0] && h.c[i].reason[0] && h.c[i].value[0], "%s: empty field", h.c[i].name);
  }
  const char *pass[] = {"nvml",   "gpu-count",       "row-remap", "ecc",       "clocks", "pcie",
                        "nvlink", "recovery-action", "efa-ports", "efa-count", "shm"};
  for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++) STATUS(pass[i], TRUN_HEALTH_PASS);
  /* A100s remap rows; the fake answers NOT_SUPPORTED for page retirement as the real driver does there. */
  STATUS("retired-pages", TRUN_HEALTH_SKIP);
  REASON_HAS("retired-pages", "cannot run");
  REASON_HAS("retired-pages", "not supported on NVIDIA A100-SXM4-40GB");
  ck_assert_int_eq(h.worst, TRUN_HEALTH_PASS);
  ck_assert_str_eq(get("gpu-count")->value, "8");
  REASON_HAS("gpu-count", "p4d.24xlarge");
  VALUE_HAS("nvlink", "96 links active");
  VALUE_HAS("efa-ports", "4 device(s), 4 port(s) up");
  ck_assert_str_eq(get("shm")->value, "2.0 GiB");
  char sum[1024];
  trun_health_summary(&h, TRUN_HEALTH_WARN, sum, sizeof(sum));
  ck_assert_str_eq(sum, "");
}
END_TEST

START_TEST(faulty_p4d) {
  use_fixture("p4d-faulty");
  check_node(NOENV, 64LL << 20);
  STATUS("nvml", TRUN_HEALTH_PASS);
  STATUS("gpu-count", TRUN_HEALTH_FAIL);
  ck_assert_str_eq(get("gpu-count")->value, "7");
  ck_assert_str_eq(get("gpu-count")->threshold, ">= 8");
  REASON_HAS("gpu-count", "a GPU is missing");
  STATUS("retired-pages", TRUN_HEALTH_FAIL);
  VALUE_HAS("retired-pages", "GPU 0 GPU-9b52dca5-45dc-56cb-969f-bbcc8b697dff: retirement pending");
  STATUS("row-remap", TRUN_HEALTH_FAIL);
  VALUE_HAS("row-remap", "GPU 1 GPU-");
  VALUE_HAS("row-remap", ": remapping pending (1 rows remapped for uncorrectable, 0 for correctable errors)");
  REASON_HAS("row-remap", "reset the GPU");
  STATUS("ecc", TRUN_HEALTH_FAIL);
  VALUE_HAS("ecc", "GPU 2 ");
  REASON_HAS("ecc", "2 uncorrectable ECC error(s)");
  STATUS("clocks", TRUN_HEALTH_FAIL);
  VALUE_HAS("clocks", "GPU 3 ");
  VALUE_HAS("clocks", "HW slowdown, HW power brake (reasons 0x88)");
  STATUS("pcie", TRUN_HEALTH_WARN);
  VALUE_HAS("pcie", "GPU 4 ");
  VALUE_HAS("pcie", "Gen4 x8 of Gen4 x16");
  STATUS("nvlink", TRUN_HEALTH_FAIL);
  VALUE_HAS("nvlink", "GPU 5 ");
  VALUE_HAS("nvlink", "2 of 12 down (link 3,7)");
  STATUS("recovery-action", TRUN_HEALTH_FAIL);
  VALUE_HAS("recovery-action", "GPU 6 ");
  REASON_HAS("recovery-action", "a reboot of the node (NODE_REBOOT)");
  STATUS("efa-ports", TRUN_HEALTH_FAIL);
  VALUE_HAS("efa-ports", "rdmap32s27 port 1: 1: DOWN / 2: Polling");
  STATUS("efa-count", TRUN_HEALTH_FAIL);
  ck_assert_str_eq(get("efa-count")->value, "3");
  REASON_HAS("efa-count", "3 EFA device(s) of the 4 a p4d.24xlarge has");
  STATUS("shm", TRUN_HEALTH_WARN);
  ck_assert_str_eq(get("shm")->value, "64 MiB");
  REASON_HAS("shm", "--shm-size=1g");
  REASON_HAS("shm", "medium: Memory");
  ck_assert_int_eq(h.worst, TRUN_HEALTH_FAIL);
  /* The one-line summary names every failed check (and, asked for, the warnings). */
  char sum[8192];
  trun_health_summary(&h, TRUN_HEALTH_FAIL, sum, sizeof(sum));
  ck_assert_ptr_nonnull(strstr(sum, "FAIL gpu-count [7]"));
  ck_assert_ptr_nonnull(strstr(sum, "FAIL ecc ["));
  ck_assert_ptr_null(strstr(sum, "WARN"));
  trun_health_summary(&h, TRUN_HEALTH_WARN, sum, sizeof(sum));
  ck_assert_ptr_nonnull(strstr(sum, "WARN shm [64 MiB]"));
}
END_TEST

/* Writes nvml.json into a temp dir from the p4d fixture's with a top-level key added. */
static void p4d_with(const char *key_json) {
  use_fixture("p4d.24xlarge");
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/trun-health.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  char src[PATH_MAX], dst[128];
  snprintf(src, sizeof(src), "%s", getenv("TRUN_FAKE_NVML_TOPO"));
  FILE *in = fopen(src, "r");
  ck_assert_ptr_nonnull(in);
  static char text[65536];
  size_t n = fread(text, 1, sizeof(text) - 1, in);
  fclose(in);
  text[n] = '\0';
  char *brace = strchr(text, '{');
  ck_assert_ptr_nonnull(brace);
  snprintf(dst, sizeof(dst), "%s/nvml.json", tmpdir);
  FILE *out = fopen(dst, "w");
  ck_assert_ptr_nonnull(out);
  fprintf(out, "{%s, %s", key_json, brace + 1);
  fclose(out);
  setenv("TRUN_FAKE_NVML_TOPO", dst, 1);
}

static void p4d_done(void) {
  char p[128];
  snprintf(p, sizeof(p), "%s/nvml.json", tmpdir);
  unlink(p);
  rmdir(tmpdir);
}

START_TEST(old_driver) {
  p4d_with(
      "\"missing\": [\"nvmlDeviceGetRemappedRows\", \"nvmlDeviceGetRetiredPagesPendingStatus\", "
      "\"nvmlDeviceGetTotalEccErrors\", \"nvmlDeviceGetCurrentClocksEventReasons\", "
      "\"nvmlDeviceGetCurrentClocksThrottleReasons\", \"nvmlDeviceGetCurrPcieLinkGeneration\", "
      "\"nvmlDeviceGetFieldValues\"]");
  check_node(NOENV, 2 * GIB);
  p4d_done();
  const char *skip[] = {"row-remap", "retired-pages", "ecc", "clocks", "pcie", "recovery-action"};
  for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++) {
    STATUS(skip[i], TRUN_HEALTH_SKIP);
    REASON_HAS(skip[i], "cannot run: the driver's NVML lacks ");
    ck_assert_str_eq(get(skip[i])->value, "not read");
  }
  REASON_HAS("row-remap", "nvmlDeviceGetRemappedRows");
  STATUS("nvml", TRUN_HEALTH_PASS);
  STATUS("nvlink", TRUN_HEALTH_PASS);
  ck_assert_int_eq(h.worst, TRUN_HEALTH_PASS); /* a check that cannot run is no failure */
  /* NOT_SUPPORTED (ECC off, a field the driver does not know): a skip that says so. */
  p4d_with("\"unsupported\": [\"nvmlDeviceGetTotalEccErrors\", \"nvmlDeviceGetFieldValues\"]");
  check_node(NOENV, 2 * GIB);
  p4d_done();
  STATUS("ecc", TRUN_HEALTH_SKIP);
  REASON_HAS("ecc", "not supported on NVIDIA A100-SXM4-40GB (or ECC is off");
  STATUS("recovery-action", TRUN_HEALTH_SKIP);
  REASON_HAS("recovery-action", "driver r570 or later");
}
END_TEST

START_TEST(lost_gpu) {
  use_fixture("cpu-only");
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/trun-health.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  char p[128];
  snprintf(p, sizeof(p), "%s/nvml.json", tmpdir);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(
      "{\"gpus\": [{\"uuid\": \"GPU-a\", \"name\": \"G\"}, {\"uuid\": \"GPU-b\", \"name\": \"G\", \"lost\": "
      "true}]}",
      f);
  fclose(f);
  setenv("TRUN_FAKE_NVML_TOPO", p, 1);
  check_node(NOENV, 2 * GIB);
  p4d_done();
  STATUS("nvml", TRUN_HEALTH_FAIL);
  REASON_HAS("nvml", "nvmlDeviceGetHandleByIndex_v2(1) failed: GPU is lost (15)");
  STATUS("ecc", TRUN_HEALTH_SKIP);
  ck_assert_int_eq(h.worst, TRUN_HEALTH_FAIL);
}
END_TEST

START_TEST(cpu_only) {
  use_fixture("cpu-only");
  setenv("TRUN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  check_node(NOENV, 2 * GIB);
  STATUS("nvml", TRUN_HEALTH_SKIP);
  REASON_HAS("nvml", "no NVIDIA driver or NVML library here");
  STATUS("gpu-count", TRUN_HEALTH_SKIP);
  const char *gpu[] = {"row-remap", "retired-pages", "ecc", "clocks", "pcie", "nvlink", "recovery-action"};
  for (size_t i = 0; i < sizeof(gpu) / sizeof(gpu[0]); i++) {
    STATUS(gpu[i], TRUN_HEALTH_SKIP);
    REASON_HAS(gpu[i], "no GPU is visible here");
  }
  STATUS("efa-ports", TRUN_HEALTH_SKIP);
  REASON_HAS("efa-ports", "no EFA device is usable in this container");
  STATUS("efa-count", TRUN_HEALTH_SKIP); /* c6i.8xlarge: not in trun's table */
  STATUS("shm", TRUN_HEALTH_PASS);
  ck_assert_int_eq(h.worst, TRUN_HEALTH_PASS);
  /* statvfs that fails: a warning naming the path. */
  henv.shm_bytes = -2;
  henv.shm_path = "/nonexistent/shm";
  trun_health_judge(&node, &henv, 1u << TRUN_HC_SHM, &h);
  ck_assert_int_eq(h.n, 1);
  STATUS("shm", TRUN_HEALTH_WARN);
  REASON_HAS("shm", "/nonexistent/shm cannot be read (No such file or directory)");
}
END_TEST

START_TEST(gpu_count_sources) {
  use_fixture("p4d-faulty");
  /* A pod given 7 GPUs by the device plugin: NVML lists 7 = the list. */
  check_node((char *[]){"NVIDIA_VISIBLE_DEVICES=0,1,2,3,4,5,6", NULL}, 2 * GIB);
  STATUS("gpu-count", TRUN_HEALTH_PASS);
  REASON_HAS("gpu-count", "the 7 GPU(s) NVIDIA_VISIBLE_DEVICES gives this container");
  /* ... given 8 by UUID, one of which NVML does not list. */
  check_node((char *[]){"NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b,GPU-c,GPU-d,GPU-e,GPU-f,GPU-g,GPU-h", NULL},
             2 * GIB);
  STATUS("gpu-count", TRUN_HEALTH_FAIL);
  check_node((char *[]){"NVIDIA_VISIBLE_DEVICES=all", NULL}, 2 * GIB);
  STATUS("gpu-count", TRUN_HEALTH_FAIL);
  REASON_HAS("gpu-count", "NVIDIA_VISIBLE_DEVICES=all");
  check_node((char *[]){"NVIDIA_VISIBLE_DEVICES=void", NULL}, 2 * GIB);
  STATUS("gpu-count", TRUN_HEALTH_SKIP);
  REASON_HAS("gpu-count", "CDI");
  /* No instance type (the H200 box has no DMI type in its fixture): nothing to compare with. */
  use_fixture("h200x2");
  check_node(NOENV, 2 * GIB);
  STATUS("gpu-count", TRUN_HEALTH_SKIP);
  REASON_HAS("gpu-count", "instance type is unknown");
  STATUS("efa-count", TRUN_HEALTH_SKIP);
  STATUS("nvlink", TRUN_HEALTH_PASS);
}
END_TEST

/* The judge alone, on hand-made facts. */
static void one_gpu(const char *type) {
  memset(&node, 0, sizeof(node));
  memset(&henv, 0, sizeof(henv));
  henv.shm_bytes = 2 * GIB;
  node.gpu_source = "nvml";
  node.gpus_listed = node.ngpu = 1;
  snprintf(node.instance.instance_type, sizeof(node.instance.instance_type), "%s", type);
  trun_gpu *g = &node.gpus[0];
  snprintf(g->uuid, sizeof(g->uuid), "GPU-x");
  snprintf(g->name, sizeof(g->name), "NVIDIA H100 80GB HBM3");
  trun_gpu_health *f = &g->health;
  f->probed = 1;
  f->retired_rc = TRUN_NVML_ERROR_NOT_SUPPORTED;
  f->pcie_gen = f->pcie_gen_max = 5;
  f->pcie_width = f->pcie_width_max = 16;
  f->nvlink_links = 18;
}

START_TEST(pcie_idle_and_nvlink_layouts) {
  one_gpu("p5.48xlarge");
  trun_gpu_health *f = &node.gpus[0].health;
  f->pcie_gen = 1; /* idle power saving */
  f->clock_reasons = TRUN_NVML_CLOCKS_EVENT_GPU_IDLE;
  trun_health_judge(&node, &henv, TRUN_HEALTH_ALL, &h);
  STATUS("pcie", TRUN_HEALTH_PASS);
  f->clock_reasons = 0; /* busy at Gen1 */
  trun_health_judge(&node, &henv, TRUN_HEALTH_ALL, &h);
  STATUS("pcie", TRUN_HEALTH_WARN);
  REASON_HAS("pcie", "at a lower generation while busy");
  /* Every link down on a type with NVSwitch fails; on an unknown type it is a PCIe-only GPU. */
  f->nvlink_down_mask = (1ULL << 18) - 1;
  trun_health_judge(&node, &henv, TRUN_HEALTH_ALL, &h);
  STATUS("nvlink", TRUN_HEALTH_FAIL);
  VALUE_HAS("nvlink", "18 of 18 down");
  one_gpu("");
  node.gpus[0].health.nvlink_down_mask = (1ULL << 18) - 1;
  trun_health_judge(&node, &henv, TRUN_HEALTH_ALL, &h);
  STATUS("nvlink", TRUN_HEALTH_SKIP);
  REASON_HAS("nvlink", "PCIe-only");
  /* A GPU that is lost in the middle of the reads fails the check that saw it. */
  node.gpus[0].health.ecc_rc = TRUN_NVML_ERROR_GPU_IS_LOST;
  node.gpus[0].health.recovery_action = TRUN_NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET;
  trun_health_judge(&node, &henv, TRUN_HEALTH_ALL, &h);
  STATUS("ecc", TRUN_HEALTH_FAIL);
  REASON_HAS("ecc", "fallen off the bus");
  STATUS("recovery-action", TRUN_HEALTH_FAIL);
  REASON_HAS("recovery-action", "DRAIN_AND_RESET");
  /* Only the checks in the mask run, in order. */
  trun_health_judge(&node, &henv, (1u << TRUN_HC_SHM) | (1u << TRUN_HC_ECC), &h);
  ck_assert_int_eq(h.n, 2);
  ck_assert_str_eq(h.c[0].name, "ecc");
  ck_assert_str_eq(h.c[1].name, "shm");
}
END_TEST

START_TEST(check_lists) {
  unsigned m = 0;
  char e[512];
  ck_assert_int_eq(trun_health_parse_checks("all", &m, e, sizeof(e)), 0);
  ck_assert_uint_eq(m, TRUN_HEALTH_ALL);
  ck_assert_int_eq(trun_health_parse_checks("ecc, nvlink", &m, e, sizeof(e)), 0);
  ck_assert_uint_eq(m, (1u << TRUN_HC_ECC) | (1u << TRUN_HC_NVLINK));
  ck_assert_int_eq(trun_health_parse_checks("-pcie,-shm", &m, e, sizeof(e)), 0);
  ck_assert_uint_eq(m, TRUN_HEALTH_ALL & ~((1u << TRUN_HC_PCIE) | (1u << TRUN_HC_SHM)));
  ck_assert_int_eq(trun_health_parse_checks("all,-efa-count", &m, e, sizeof(e)), 0);
  ck_assert_uint_eq(m, TRUN_HEALTH_ALL & ~(1u << TRUN_HC_EFA_COUNT));
  ck_assert_int_eq(trun_health_parse_checks("ecc,bogus", &m, e, sizeof(e)), -1);
  ck_assert_ptr_nonnull(strstr(e, "'bogus' names no check"));
  ck_assert_ptr_nonnull(strstr(e, "gpu-count"));
  ck_assert_int_eq(trun_health_parse_checks("", &m, e, sizeof(e)), -1);
  ck_assert_ptr_nonnull(strstr(e, "names no check"));
  ck_assert_int_eq(trun_health_parse_checks(" , ,", &m, e, sizeof(e)), -1);
  ck_assert_int_eq(trun_health_parse_checks("ecc,-ecc", &m, e, sizeof(e)), -1);
  ck_assert_ptr_nonnull(strstr(e, "leaves no check"));
  ck_assert_int_eq(trun_health_parse_checks("-all", &m, e, sizeof(e)), -1);
  for (int i = 0; i < TRUN_HC__COUNT; i++) ck_assert_ptr_nonnull(trun_health_name((trun_health_id)i));
  ck_assert_ptr_null(trun_health_name(TRUN_HC__COUNT));
}
END_TEST

/* Reads the watcher until cond or about 10 s (a safety limit, not a timing assertion). */
static int watch_until(trun_xid_watch *w, trun_xid_event *ev, int *ready, int want_events, char *e,
                       size_t elen) {
  for (int i = 0; i < 1000; i++) {
    int n = trun_xid_watch_read(w, ev, 4, ready, e, elen);
    if (n != 0 || (!want_events && *ready)) return n;
    usleep(10000);
  }
  return 0;
}

START_TEST(xid_watcher) {
  use_fixture("h200x2");
  char xf[] = "/tmp/trun-xid-XXXXXX";
  int fd = mkstemp(xf);
  ck_assert_int_ge(fd, 0);
  close(fd);
  setenv("TRUN_FAKE_NVML_XID", xf, 1);
  const char uuids[2][96] = {"GPU-975b78a1-6a65-a1da-4756-7a34bbfb8bee",
                             "GPU-cc1980a5-ea8b-6221-86ef-d9c8546cd156"};
  trun_xid_watch *w = trun_xid_watch_start(uuids, 2);
  ck_assert_ptr_nonnull(w);
  ck_assert_int_ge(trun_xid_watch_fd(w), 0);
  trun_xid_event ev[4];
  int ready = 0;
  char e[256] = "";
  ck_assert_int_eq(watch_until(w, ev, &ready, 0, e, sizeof(e)), 0);
  ck_assert_int_eq(ready, 1);
  FILE *f = fopen(xf, "a"); /* NVML index 1 is the second GPU given */
  fputs("1 79\n", f);
  fclose(f);
  ck_assert_int_eq(watch_until(w, ev, &ready, 1, e, sizeof(e)), 1);
  ck_assert_int_eq(ev[0].gpu, 1);
  ck_assert_uint_eq(ev[0].xid, 79);
  ck_assert(ev[0].time > 1e9);
  f = fopen(xf, "a");
  fputs("0 13\n", f);
  fclose(f);
  ck_assert_int_eq(watch_until(w, ev, &ready, 1, e, sizeof(e)), 1);
  ck_assert_int_eq(ev[0].gpu, 0);
  ck_assert_uint_eq(ev[0].xid, 13);
  trun_xid_watch_stop(w);
  unlink(xf);
  unsetenv("TRUN_FAKE_NVML_XID");
  /* No NVML library: the watcher ends and says why. */
  setenv("TRUN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  w = trun_xid_watch_start(uuids, 1);
  ck_assert_ptr_nonnull(w);
  ck_assert_int_eq(watch_until(w, ev, &ready, 1, e, sizeof(e)), -1);
  ck_assert_ptr_nonnull(strstr(e, "cannot load NVML /nonexistent/libnvidia-ml.so.1"));
  trun_xid_watch_stop(w);
  ck_assert_ptr_null(trun_xid_watch_start(uuids, 0));
  /* Meanings: the hardware's Xids and the application's. */
  int hw = -1;
  ck_assert_str_eq(trun_xid_meaning(79, &hw), "GPU has fallen off the bus");
  ck_assert_int_eq(hw, 1);
  const unsigned long long hard[] = {48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154};
  for (size_t i = 0; i < sizeof(hard) / sizeof(hard[0]); i++) {
    trun_xid_meaning(hard[i], &hw);
    ck_assert_msg(hw == 1, "Xid %llu is the hardware's", hard[i]);
  }
  trun_xid_meaning(13, &hw);
  ck_assert_int_eq(hw, 0);
  ck_assert_ptr_nonnull(strstr(trun_xid_meaning(12345, &hw), "does not know"));
  ck_assert_int_eq(hw, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("health");
  TCase *tc = tcase_create("checks");
  tcase_add_test(tc, healthy_p4d);
  tcase_add_test(tc, faulty_p4d);
  tcase_add_test(tc, old_driver);
  tcase_add_test(tc, lost_gpu);
  tcase_add_test(tc, cpu_only);
  tcase_add_test(tc, gpu_count_sources);
  tcase_add_test(tc, pcie_idle_and_nvlink_layouts);
  tcase_add_test(tc, check_lists);
  tcase_add_test(tc, xid_watcher);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
