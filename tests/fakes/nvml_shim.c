/* A fake libnvidia-ml.so for the tests (built as build/libnvidia-ml-fake.so, loaded through
 * TRUN_NVML_LIBRARY). nvmlInit_v2 reads the JSON file named by TRUN_FAKE_NVML_TOPO:
 *   {"init_rc": 0,                       optional: what nvmlInit_v2 returns (9 = driver not loaded)
 *    "gpus": [{"uuid": "GPU-...", "name": "NVIDIA A100-SXM4-40GB", "pci": "00000000:10:1C.0",
 *              "memory": 42949672960, "cpu_affinity": "0-23,48-71",
 *              "numa_id": 0,              optional: nvmlDeviceGetNumaNodeId (else NOT_SUPPORTED)
 *              "nvswitch_links": 12,      links to an NVSwitch hidden in the VM (remote busId "")
 *              "nvlinks": ["00000000:10:1D.0", ...],  links to other GPUs, one entry per link
 *              "fabric": [3, "<32 hex digits>"],  optional: nvmlDeviceGetGpuFabricInfo's state and
 *                                         cluster UUID (absent: NOT_SUPPORTED, no NVLink fabric)
 *              "mig": ["MIG-..."]}],      MIG devices of this GPU
 *    "topology": [["X", "PHB", ...], ...],  PCIe level per pair: X PIX PXB PHB NODE SYS
 *    "p2p": [["X", "OK", "NS", ...], ...]}  optional: P2P read status per pair (nvidia-smi topo -p2p r
 *                                           words OK CNS GNS TNS DR NS U); absent: NOT_SUPPORTED
 * Links are numbered nvswitch_links first, then nvlinks; a link beyond them answers INVALID_ARGUMENT (no such
 * link). A GPU without links answers INVALID_ARGUMENT for link 0.
 *
 * Faults for the health checks (agent/discover/health_gpu.c), per GPU, all optional (absent: healthy):
 *    "remapped_rows": [corr, unc, pending, failure],   nvmlDeviceGetRemappedRows (default 0 0 0 0)
 *    "retired_pages_pending": 0|1,      nvmlDeviceGetRetiredPagesPendingStatus (absent: NOT_SUPPORTED, as
 *                                       on GPUs that remap rows instead)
 *    "ecc_volatile_uncorrected": N,     nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE) (default 0)
 *    "clock_event_reasons": BITS,       nvmlDeviceGetCurrentClocksEventReasons (default 1: GPU idle)
 *    "pcie": [gen, gen_max, width, width_max],  (default 4 4 16 16)
 *    "nvlinks_down": [link, ...],       links that exist but are not active
 *    "recovery_action": N,              field 230 of nvmlDeviceGetFieldValues (default 0: none)
 *    "lost": true                       nvmlDeviceGetHandleByIndex_v2 answers GPU_IS_LOST for it
 * and at the top level "missing": ["nvmlDeviceGetRemappedRows", ...]: those calls answer FUNCTION_NOT_FOUND
 * (an older driver), "unsupported": [...]: NOT_SUPPORTED.
 *
 * A live Xid: TRUN_FAKE_NVML_XID names a file of lines "<NVML index> <xid>"; nvmlEventSetWait_v2 polls it
 * (every 20 ms up to its time-out) and delivers each line once, for GPUs registered with
 * nvmlEventTypeXidCriticalError.
 *
 * TRUN_FAKE_NVML_INIT_LOG names a file to which each nvmlInit_v2 appends "init <pid>" (how often trun asks).
 *
 * It implements exactly the entry points agent/discover/ looks up. A test fake, so plain globals. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"

#define FAKE_MAX 64
#define FAKE_LINKS 18
#define FAKE_CALLS 16

struct trun_nvmlDevice_st {
  int is_mig;
  int gpu; /* index of the GPU (the parent for a MIG device) */
  char uuid[96];
  char name[96];
  char pci[32];
  unsigned long long memory;
  char cpus[256];
  int numa_id;      /* -1 none */
  int fabric_state; /* -1: no fabric (NOT_SUPPORTED) */
  unsigned char fabric_uuid[16];
  int nlinks;
  char link_remote[FAKE_LINKS][32];
  /* health faults */
  unsigned remap[4];
  int retired_pending; /* -1: NOT_SUPPORTED */
  unsigned long long ecc_unc;
  unsigned long long clocks;
  unsigned pcie[4];
  unsigned long long down; /* bit n: link n not active */
  unsigned recovery;
  int lost;
  int xid_registered;
};

static struct trun_nvmlDevice_st fake_gpu[FAKE_MAX], fake_mig[FAKE_MAX];
static int fake_ngpu, fake_nmig, fake_init;
static int fake_level[FAKE_MAX][FAKE_MAX];
static int fake_p2p[FAKE_MAX][FAKE_MAX]; /* nvmlGpuP2PStatus_t, -1 = no matrix */
static void cp(char *dst, size_t n, const char *src) { snprintf(dst, n, "%s", src ? src : ""); }

static char fake_missing[FAKE_CALLS][64], fake_unsupported[FAKE_CALLS][64];
static int fake_nmissing, fake_nunsupported;

/* The answer of a health call that the fixture marks missing or unsupported, else 0. */
static trun_nvmlReturn_t fault_of(const char *call) {
  for (int i = 0; i < fake_nmissing; i++)
    if (strcmp(fake_missing[i], call) == 0) return TRUN_NVML_ERROR_FUNCTION_NOT_FOUND;
  for (int i = 0; i < fake_nunsupported; i++)
    if (strcmp(fake_unsupported[i], call) == 0) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  return TRUN_NVML_SUCCESS;
}

static int read_names(json_t *arr, char (*out)[64]) {
  size_t i;
  json_t *v;
  int n = 0;
  json_array_foreach(arr, i, v) {
    if (n < FAKE_CALLS) cp(out[n++], 64, json_string_value(v));
  }
  return n;
}

/* Unsigned values of a JSON array into out[0..n) (absent entries keep out's defaults). */
static void read_uints(json_t *arr, unsigned *out, size_t n) {
  for (size_t i = 0; i < n && i < json_array_size(arr); i++)
    out[i] = (unsigned)json_integer_value(json_array_get(arr, i));
}

static void read_health(json_t *g, struct trun_nvmlDevice_st *d) {
  memset(d->remap, 0, sizeof(d->remap));
  read_uints(json_object_get(g, "remapped_rows"), d->remap, 4);
  json_t *rp = json_object_get(g, "retired_pages_pending");
  d->retired_pending = json_is_integer(rp) ? (int)json_integer_value(rp) : -1;
  d->ecc_unc = (unsigned long long)json_integer_value(json_object_get(g, "ecc_volatile_uncorrected"));
  json_t *ck = json_object_get(g, "clock_event_reasons");
  d->clocks = json_is_integer(ck) ? (unsigned long long)json_integer_value(ck) : 1;
  unsigned pcie[4] = {4, 4, 16, 16};
  read_uints(json_object_get(g, "pcie"), pcie, 4);
  memcpy(d->pcie, pcie, sizeof(pcie));
  size_t k;
  json_t *l;
  json_array_foreach(json_object_get(g, "nvlinks_down"), k, l) {
    json_int_t n = json_integer_value(l);
    if (n >= 0 && n < FAKE_LINKS) d->down |= 1ULL << n;
  }
  d->recovery = (unsigned)json_integer_value(json_object_get(g, "recovery_action"));
  d->lost = json_is_true(json_object_get(g, "lost"));
}

static int level_of(const char *s) {
  static const struct {
    const char *l;
    int v;
  } t[] = {{"X", TRUN_NVML_TOPOLOGY_INTERNAL},   {"PIX", TRUN_NVML_TOPOLOGY_SINGLE},
           {"PXB", TRUN_NVML_TOPOLOGY_MULTIPLE}, {"PHB", TRUN_NVML_TOPOLOGY_HOSTBRIDGE},
           {"NODE", TRUN_NVML_TOPOLOGY_NODE},    {"SYS", TRUN_NVML_TOPOLOGY_SYSTEM}};
  for (size_t i = 0; s && i < sizeof(t) / sizeof(t[0]); i++)
    if (strcmp(s, t[i].l) == 0) return t[i].v;
  return -1;
}

static int p2p_of(const char *s) {
  static const char *const words[] = {"OK", "CNS", "GNS", "TNS", "DR", "NS", "U"}; /* status 0..6 */
  for (int i = 0; s && i < 7; i++)
    if (strcmp(s, words[i]) == 0) return i;
  return -1;
}

/* Call counting and made-up latency (the launch benchmarks and tests): TRUN_FAKE_NVML_CALLS names a file to
 * which nvmlShutdown appends "calls <pid> total=N <function>=n ..." (how often each entry point was called);
 * TRUN_FAKE_NVML_CALL_US sleeps that long in every call, TRUN_FAKE_NVML_INIT_MS that long in nvmlInit_v2;
 * TRUN_FAKE_NVML_INIT_GATE names a file nvmlInit_v2 waits for (up to 10 s) before it starts. */
#define FAKE_FNS 64
static const char *fake_fn_name[FAKE_FNS];
static int fake_fn_calls[FAKE_FNS], fake_nfn;

static void fake_count(const char *fn) {
  int i = 0;
  while (i < fake_nfn && strcmp(fake_fn_name[i], fn) != 0) i++;
  if (i == fake_nfn && fake_nfn < FAKE_FNS) fake_fn_name[fake_nfn++] = fn;
  if (i < fake_nfn) fake_fn_calls[i]++;
  const char *us = getenv("TRUN_FAKE_NVML_CALL_US");
  if (us && atoi(us) > 0) usleep((useconds_t)atoi(us));
}

static void fake_init_wait(void) {
  const char *gate = getenv("TRUN_FAKE_NVML_INIT_GATE");
  for (int i = 0; gate && *gate && i < 1000 && access(gate, F_OK) != 0; i++) usleep(10000);
  const char *ms = getenv("TRUN_FAKE_NVML_INIT_MS");
  if (ms && atoi(ms) > 0) usleep((useconds_t)atoi(ms) * 1000);
}

static void fake_calls_dump(void) {
  const char *log = getenv("TRUN_FAKE_NVML_CALLS");
  FILE *f = log && *log ? fopen(log, "a") : NULL;
  if (f == NULL) return;
  int total = 0;
  for (int i = 0; i < fake_nfn; i++) total += fake_fn_calls[i];
  fprintf(f, "calls %d total=%d", (int)getpid(), total);
  for (int i = 0; i < fake_nfn; i++) fprintf(f, " %s=%d", fake_fn_name[i], fake_fn_calls[i]);
  fprintf(f, "\n");
  fclose(f);
}

trun_nvmlReturn_t nvmlInit_v2(void) {
  fake_init_wait();
  fake_count(__func__);
  const char *log = getenv("TRUN_FAKE_NVML_INIT_LOG");
  FILE *lf = log && *log ? fopen(log, "a") : NULL;
  if (lf) {
    fprintf(lf, "init %d\n", (int)getpid());
    fclose(lf);
  }
  const char *path = getenv("TRUN_FAKE_NVML_TOPO");
  if (!path) return TRUN_NVML_ERROR_LIBRARY_NOT_FOUND;
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) {
    fprintf(stderr, "nvml_shim: %s:%d: %s\n", path, je.line, je.text);
    return TRUN_NVML_ERROR_UNKNOWN;
  }
  int rc = (int)json_integer_value(json_object_get(root, "init_rc"));
  fake_ngpu = fake_nmig = 0;
  json_t *gpus = json_object_get(root, "gpus");
  size_t i;
  json_t *g;
  json_array_foreach(gpus, i, g) {
    if (fake_ngpu >= FAKE_MAX) break;
    struct trun_nvmlDevice_st *d = &fake_gpu[fake_ngpu];
    memset(d, 0, sizeof(*d));
    d->gpu = fake_ngpu;
    cp(d->uuid, sizeof(d->uuid), json_string_value(json_object_get(g, "uuid")));
    cp(d->name, sizeof(d->name), json_string_value(json_object_get(g, "name")));
    cp(d->pci, sizeof(d->pci), json_string_value(json_object_get(g, "pci")));
    cp(d->cpus, sizeof(d->cpus), json_string_value(json_object_get(g, "cpu_affinity")));
    d->memory = (unsigned long long)json_integer_value(json_object_get(g, "memory"));
    json_t *numa = json_object_get(g, "numa_id");
    d->numa_id = json_is_integer(numa) ? (int)json_integer_value(numa) : -1;
    json_t *fab = json_object_get(g, "fabric");
    d->fabric_state = json_is_array(fab) ? (int)json_integer_value(json_array_get(fab, 0)) : -1;
    const char *hex = json_string_value(json_array_get(fab, 1));
    for (size_t b = 0;
         hex && b < sizeof(d->fabric_uuid) && sscanf(hex + 2 * b, "%2hhx", &d->fabric_uuid[b]) == 1; b++) {
    }
    read_health(g, d);
    int nsw = (int)json_integer_value(json_object_get(g, "nvswitch_links"));
    for (int k = 0; k < nsw && d->nlinks < FAKE_LINKS; k++) d->link_remote[d->nlinks++][0] = '\0';
    size_t k;
    json_t *l;
    json_array_foreach(json_object_get(g, "nvlinks"), k, l) {
      if (d->nlinks < FAKE_LINKS) cp(d->link_remote[d->nlinks++], 32, json_string_value(l));
    }
    json_array_foreach(json_object_get(g, "mig"), k, l) {
      if (fake_nmig >= FAKE_MAX) break;
      struct trun_nvmlDevice_st *m = &fake_mig[fake_nmig++];
      *m = *d;
      m->is_mig = 1;
      m->nlinks = 0;
      cp(m->uuid, sizeof(m->uuid), json_string_value(l));
    }
    fake_ngpu++;
  }
  json_t *topo = json_object_get(root, "topology");
  for (int a = 0; a < fake_ngpu; a++)
    for (int b = 0; b < fake_ngpu; b++)
      fake_level[a][b] =
          level_of(json_string_value(json_array_get(json_array_get(topo, (size_t)a), (size_t)b)));
  json_t *p2p = json_object_get(root, "p2p");
  for (int a = 0; a < fake_ngpu; a++)
    for (int b = 0; b < fake_ngpu; b++)
      fake_p2p[a][b] = p2p_of(json_string_value(json_array_get(json_array_get(p2p, (size_t)a), (size_t)b)));
  fake_nmissing = read_names(json_object_get(root, "missing"), fake_missing);
  fake_nunsupported = read_names(json_object_get(root, "unsupported"), fake_unsupported);
  json_decref(root);
  if (rc == 0) fake_init = 1;
  return rc;
}

trun_nvmlReturn_t nvmlShutdown(void) {
  fake_count(__func__);
  if (!fake_init) return TRUN_NVML_ERROR_UNINITIALIZED;
  fake_init = 0;
  fake_calls_dump();
  return TRUN_NVML_SUCCESS;
}

const char *nvmlErrorString(trun_nvmlReturn_t rc) {
  fake_count(__func__);
  switch (rc) {
    case TRUN_NVML_SUCCESS: return "Success";
    case TRUN_NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case TRUN_NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case TRUN_NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case TRUN_NVML_ERROR_NOT_FOUND: return "Not Found";
    case TRUN_NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case TRUN_NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

#define CHECK_DEV(d)                                      \
  do {                                                    \
    if (!fake_init) return TRUN_NVML_ERROR_UNINITIALIZED; \
    if (!(d)) return TRUN_NVML_ERROR_INVALID_ARGUMENT;    \
  } while (0)

trun_nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
  fake_count(__func__);
  if (!fake_init) return TRUN_NVML_ERROR_UNINITIALIZED;
  *n = (unsigned)fake_ngpu;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, trun_nvmlDevice_t *d) {
  fake_count(__func__);
  if (!fake_init) return TRUN_NVML_ERROR_UNINITIALIZED;
  if (i >= (unsigned)fake_ngpu) return TRUN_NVML_ERROR_INVALID_ARGUMENT;
  if (fake_gpu[i].lost) return TRUN_NVML_ERROR_GPU_IS_LOST;
  *d = &fake_gpu[i];
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, trun_nvmlDevice_t *d) {
  fake_count(__func__);
  if (!fake_init) return TRUN_NVML_ERROR_UNINITIALIZED;
  for (int i = 0; i < fake_ngpu; i++)
    if (strcmp(fake_gpu[i].uuid, uuid) == 0) return *d = &fake_gpu[i], TRUN_NVML_SUCCESS;
  for (int i = 0; i < fake_nmig; i++)
    if (strcmp(fake_mig[i].uuid, uuid) == 0) return *d = &fake_mig[i], TRUN_NVML_SUCCESS;
  return TRUN_NVML_ERROR_NOT_FOUND;
}

trun_nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(trun_nvmlDevice_t mig,
                                                               trun_nvmlDevice_t *parent) {
  fake_count(__func__);
  CHECK_DEV(mig);
  if (!mig->is_mig) return TRUN_NVML_ERROR_INVALID_ARGUMENT;
  *parent = &fake_gpu[mig->gpu];
  return TRUN_NVML_SUCCESS;
}

static trun_nvmlReturn_t copy_out(char *buf, unsigned len, const char *s) {
  if (strlen(s) + 1 > len) return TRUN_NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(buf, s, strlen(s) + 1);
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetUUID(trun_nvmlDevice_t d, char *buf, unsigned int len) {
  fake_count(__func__);
  CHECK_DEV(d);
  return copy_out(buf, len, d->uuid);
}

trun_nvmlReturn_t nvmlDeviceGetName(trun_nvmlDevice_t d, char *buf, unsigned int len) {
  fake_count(__func__);
  CHECK_DEV(d);
  return copy_out(buf, len, d->name);
}

static void fill_pci(const char *busid, trun_nvmlPciInfo_t *p) {
  memset(p, 0, sizeof(*p));
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  if (*busid && sscanf(busid, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4) {
    p->domain = dom;
    p->bus = bus;
    p->device = dev;
  }
  snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "%04X:%02X:%02X.%X", dom & 0xffff, bus, dev, fn);
  cp(p->busId, sizeof(p->busId), busid);
}

trun_nvmlReturn_t nvmlDeviceGetPciInfo_v3(trun_nvmlDevice_t d, trun_nvmlPciInfo_t *p) {
  fake_count(__func__);
  CHECK_DEV(d);
  fill_pci(d->pci, p);
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetMemoryInfo(trun_nvmlDevice_t d, trun_nvmlMemory_t *m) {
  fake_count(__func__);
  CHECK_DEV(d);
  m->total = d->memory;
  m->free = d->memory;
  m->used = 0;
  return TRUN_NVML_SUCCESS;
}

/* TRUN_FAKE_NVML_UTIL: a file of GPU utilisation percentages, one per NVML index, blank-separated; read at
 * every call, so that a test can change it while a sampler runs. No file or no entry: NOT_SUPPORTED. */
trun_nvmlReturn_t nvmlDeviceGetUtilizationRates(trun_nvmlDevice_t d, trun_nvmlUtilization_t *u) {
  fake_count(__func__);
  CHECK_DEV(d);
  const char *path = getenv("TRUN_FAKE_NVML_UTIL");
  FILE *f = path ? fopen(path, "r") : NULL;
  if (f == NULL) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  int v = -1, ok = 0;
  for (int i = 0; i <= d->gpu && (ok = fscanf(f, "%d", &v) == 1); i++) {
  }
  fclose(f);
  if (!ok || v < 0) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  u->gpu = (unsigned)v;
  u->memory = 0;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetCpuAffinity(trun_nvmlDevice_t d, unsigned int nlongs, unsigned long *set) {
  fake_count(__func__);
  CHECK_DEV(d);
  const unsigned bits = 8 * (unsigned)sizeof(unsigned long);
  memset(set, 0, nlongs * sizeof(unsigned long));
  const char *p = d->cpus;
  while (*p) {
    char *end;
    unsigned long a = strtoul(p, &end, 10), b = a;
    if (end == p) return TRUN_NVML_ERROR_UNKNOWN;
    if (*end == '-') b = strtoul(end + 1, &end, 10);
    for (unsigned long c = a; c <= b && c < (unsigned long)nlongs * bits; c++)
      set[c / bits] |= 1UL << (c % bits);
    p = *end == ',' ? end + 1 : end;
  }
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetGpuFabricInfo(trun_nvmlDevice_t d, trun_nvmlGpuFabricInfo_t *f) {
  fake_count(__func__);
  CHECK_DEV(d);
  trun_nvmlReturn_t rc = fault_of(__func__);
  if (rc) return rc;
  if (d->fabric_state < 0) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  memset(f, 0, sizeof(*f));
  memcpy(f->cluster_uuid, d->fabric_uuid, sizeof(f->cluster_uuid));
  f->state = (unsigned char)d->fabric_state;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetNumaNodeId(trun_nvmlDevice_t d, unsigned int *node) {
  fake_count(__func__);
  CHECK_DEV(d);
  if (d->numa_id < 0) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  *node = (unsigned)d->numa_id;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(trun_nvmlDevice_t a, trun_nvmlDevice_t b, int *level) {
  fake_count(__func__);
  CHECK_DEV(a);
  CHECK_DEV(b);
  int l = fake_level[a->gpu][b->gpu];
  if (l < 0) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  *level = l;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetNvLinkState(trun_nvmlDevice_t d, unsigned int link, int *active) {
  fake_count(__func__);
  CHECK_DEV(d);
  if (link >= FAKE_LINKS || (int)link >= d->nlinks) return TRUN_NVML_ERROR_INVALID_ARGUMENT;
  *active = !(d->down >> link & 1);
  return TRUN_NVML_SUCCESS;
}

/* What a link's far end is: a switch for the hidden-switch links (remote busId ""), else a GPU. */
trun_nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(trun_nvmlDevice_t d, unsigned int link, int *type) {
  fake_count(__func__);
  CHECK_DEV(d);
  if (link >= FAKE_LINKS) return TRUN_NVML_ERROR_INVALID_ARGUMENT;
  if ((int)link >= d->nlinks || (d->down >> link & 1)) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  *type = d->link_remote[link][0] ? TRUN_NVML_NVLINK_DEVICE_TYPE_GPU : TRUN_NVML_NVLINK_DEVICE_TYPE_SWITCH;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(trun_nvmlDevice_t d, unsigned int link,
                                                      trun_nvmlPciInfo_t *p) {
  fake_count(__func__);
  CHECK_DEV(d);
  if (link >= FAKE_LINKS) return TRUN_NVML_ERROR_INVALID_ARGUMENT;
  if ((int)link >= d->nlinks || (d->down >> link & 1)) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  fill_pci(d->link_remote[link], p);
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetP2PStatus(trun_nvmlDevice_t a, trun_nvmlDevice_t b, int cap, int *status) {
  fake_count(__func__);
  CHECK_DEV(a);
  CHECK_DEV(b);
  if (cap != TRUN_NVML_P2P_CAPS_INDEX_READ) return TRUN_NVML_ERROR_INVALID_ARGUMENT; /* trun asks READ only */
  int st = fake_p2p[a->gpu][b->gpu];
  if (st < 0) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  *status = st;
  return TRUN_NVML_SUCCESS;
}

/* ---- health checks ---------------------------------------------------------------------------- */

#define FAULT(call)                         \
  do {                                      \
    trun_nvmlReturn_t f_ = fault_of(call);  \
    if (f_ != TRUN_NVML_SUCCESS) return f_; \
  } while (0)

trun_nvmlReturn_t nvmlDeviceGetRemappedRows(trun_nvmlDevice_t d, unsigned int *corr, unsigned int *unc,
                                            unsigned int *pending, unsigned int *failure) {
  fake_count(__func__);
  CHECK_DEV(d);
  FAULT("nvmlDeviceGetRemappedRows");
  *corr = d->remap[0], *unc = d->remap[1], *pending = d->remap[2], *failure = d->remap[3];
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(trun_nvmlDevice_t d, int *pending) {
  fake_count(__func__);
  CHECK_DEV(d);
  FAULT("nvmlDeviceGetRetiredPagesPendingStatus");
  if (d->retired_pending < 0) return TRUN_NVML_ERROR_NOT_SUPPORTED;
  *pending = d->retired_pending;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetTotalEccErrors(trun_nvmlDevice_t d, int type, int counter,
                                              unsigned long long *count) {
  fake_count(__func__);
  CHECK_DEV(d);
  FAULT("nvmlDeviceGetTotalEccErrors");
  if (type != TRUN_NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counter != TRUN_NVML_VOLATILE_ECC)
    return TRUN_NVML_ERROR_INVALID_ARGUMENT; /* trun asks for the volatile uncorrected count only */
  *count = d->ecc_unc;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(trun_nvmlDevice_t d, unsigned long long *r) {
  fake_count(__func__);
  CHECK_DEV(d);
  FAULT("nvmlDeviceGetCurrentClocksEventReasons");
  *r = d->clocks;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(trun_nvmlDevice_t d, unsigned long long *r) {
  fake_count(__func__);
  CHECK_DEV(d);
  FAULT("nvmlDeviceGetCurrentClocksThrottleReasons");
  *r = d->clocks;
  return TRUN_NVML_SUCCESS;
}

static trun_nvmlReturn_t pcie(trun_nvmlDevice_t d, const char *call, int i, unsigned int *v) {
  CHECK_DEV(d);
  FAULT(call);
  *v = d->pcie[i];
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(trun_nvmlDevice_t d, unsigned int *v) {
  fake_count(__func__);
  return pcie(d, "nvmlDeviceGetCurrPcieLinkGeneration", 0, v);
}
trun_nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(trun_nvmlDevice_t d, unsigned int *v) {
  fake_count(__func__);
  return pcie(d, "nvmlDeviceGetMaxPcieLinkGeneration", 1, v);
}
trun_nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(trun_nvmlDevice_t d, unsigned int *v) {
  fake_count(__func__);
  return pcie(d, "nvmlDeviceGetCurrPcieLinkWidth", 2, v);
}
trun_nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(trun_nvmlDevice_t d, unsigned int *v) {
  fake_count(__func__);
  return pcie(d, "nvmlDeviceGetMaxPcieLinkWidth", 3, v);
}

/* Field 230 (the GPU recovery action) only; other fields answer NOT_SUPPORTED in their nvmlReturn. */
trun_nvmlReturn_t nvmlDeviceGetFieldValues(trun_nvmlDevice_t d, int n, trun_nvmlFieldValue_t *v) {
  fake_count(__func__);
  CHECK_DEV(d);
  FAULT("nvmlDeviceGetFieldValues");
  for (int i = 0; i < n; i++) {
    if (v[i].fieldId != TRUN_NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) {
      v[i].nvmlReturn = TRUN_NVML_ERROR_NOT_SUPPORTED;
      continue;
    }
    v[i].nvmlReturn = TRUN_NVML_SUCCESS;
    v[i].valueType = 1; /* unsigned int */
    v[i].value.uiVal = d->recovery;
  }
  return TRUN_NVML_SUCCESS;
}

/* ---- events ---------------------------------------------------------------------------------- */

struct trun_nvmlEventSet_st {
  int delivered; /* lines of the Xid file delivered so far */
};
static struct trun_nvmlEventSet_st fake_set;

trun_nvmlReturn_t nvmlEventSetCreate(trun_nvmlEventSet_t *set) {
  fake_count(__func__);
  if (!fake_init) return TRUN_NVML_ERROR_UNINITIALIZED;
  FAULT("nvmlEventSetCreate");
  fake_set.delivered = 0;
  *set = &fake_set;
  return TRUN_NVML_SUCCESS;
}

trun_nvmlReturn_t nvmlDeviceRegisterEvents(trun_nvmlDevice_t d, unsigned long long types,
                                           trun_nvmlEventSet_t set) {
  fake_count(__func__);
  CHECK_DEV(d);
  FAULT("nvmlDeviceRegisterEvents");
  if (set != &fake_set) return TRUN_NVML_ERROR_INVALID_ARGUMENT;
  if (types & TRUN_NVML_EVENT_TYPE_XID_CRITICAL_ERROR) fake_gpu[d->gpu].xid_registered = 1;
  return TRUN_NVML_SUCCESS;
}

/* The line after the ones delivered: 1 and its GPU / Xid, or 0 when there is none yet. */
static int next_xid(int *gpu, unsigned long long *xid) {
  const char *path = getenv("TRUN_FAKE_NVML_XID");
  FILE *f = path ? fopen(path, "r") : NULL;
  if (f == NULL) return 0;
  char line[128];
  int n = 0, found = 0;
  while (!found && fgets(line, sizeof(line), f)) {
    if (strchr(line, '\n') == NULL) break; /* a line still being written */
    if (n++ < fake_set.delivered) continue;
    found = sscanf(line, "%d %llu", gpu, xid) == 2;
    fake_set.delivered = n;
  }
  fclose(f);
  return found;
}

trun_nvmlReturn_t nvmlEventSetWait_v2(trun_nvmlEventSet_t set, trun_nvmlEventData_t *data, unsigned int ms) {
  fake_count(__func__);
  if (!fake_init) return TRUN_NVML_ERROR_UNINITIALIZED;
  if (set != &fake_set) return TRUN_NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned waited = 0;; waited += 20) {
    int gpu;
    unsigned long long xid;
    while (next_xid(&gpu, &xid))
      if (gpu >= 0 && gpu < fake_ngpu && fake_gpu[gpu].xid_registered) {
        memset(data, 0, sizeof(*data));
        data->device = &fake_gpu[gpu];
        data->eventType = TRUN_NVML_EVENT_TYPE_XID_CRITICAL_ERROR;
        data->eventData = xid;
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        return TRUN_NVML_SUCCESS;
      }
    if (waited >= ms) return TRUN_NVML_ERROR_TIMEOUT;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

trun_nvmlReturn_t nvmlEventSetFree(trun_nvmlEventSet_t set) {
  fake_count(__func__);
  return set == &fake_set ? TRUN_NVML_SUCCESS : TRUN_NVML_ERROR_INVALID_ARGUMENT;
}
