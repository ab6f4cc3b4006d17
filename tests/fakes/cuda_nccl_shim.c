/* A fake CUDA runtime + NCCL for the preflight tests (built as build/libcuda-nccl-fake.so, loaded by
 * trun-preflight through TRUN_CUDART_LIBRARY and TRUN_NCCL_LIBRARY). No GPU: memory is host memory, and
 * time is virtual: each all-reduce of B bytes on n ranks advances the stream's clock by
 * B * 2(n-1)/n / (TRUN_FAKE_BUSBW GB/s * 1e9) + 5 us, so the measured busbw is TRUN_FAKE_BUSBW at large
 * sizes. The unique id is 128 random bytes that ncclGetUniqueId also writes to $TRUN_FAKE_NCCL_DIR/id;
 * ncclCommInitRank fails (ncclInvalidArgument) unless the id it gets equals that file, and records
 * "rank <r> of <n>" lines in $TRUN_FAKE_NCCL_DIR/ranks. TRUN_FAKE_CUDA_DEVICES: cudaGetDeviceCount (default
 * 2).
 * GPU discovery (agent/discover/discover_cudart.c, loaded through TRUN_CUDART_LIBRARY when NVML is absent):
 * with TRUN_FAKE_CUDART_TOPO naming a JSON file
 *   {"gpus": [{"uuid": "GPU-<32 hex digits with dashes>", "name": "...", "pci": "0000:10:00.0",
 *              "memory": 24146608128}, ...],
 *    "p2p": [["X", "OK", "NS"], ...]}   per host GPU pair: cudaDeviceCanAccessPeer is 1 for "OK"
 * the devices are those GPUs after CUDA_VISIBLE_DEVICES (read from the environment, as the real runtime
 * does: indices or GPU-<uuid> prefixes; the first entry naming no GPU ends the list); none left →
 * cudaErrorNoDevice. It serves cudaGetDeviceCount, cudaGetDeviceProperties_v2 (the head of cudaDeviceProp:
 * name[256], uuid[16], luid[8], luidDeviceNodeMask, totalGlobalMem), cudaDeviceGetPCIBusId and
 * cudaDeviceCanAccessPeer.
 * The driver API's first steps (the --warm-start-cuda pool, agent/proc/warm_boot.c, loads this file through
 * TRUN_CUDA_DRIVER_LIBRARY): cuInit, cuDeviceGetCount (TRUN_FAKE_CUDA_DEVICES, default 2), cuDeviceGet and
 * cuDevicePrimaryCtxRetain, which appends "pid <pid> retain <ordinal> cvd <CUDA_VISIBLE_DEVICES or ->" to
 * the file TRUN_FAKE_CUDA_LOG names.
 * The --warm-start-nccl pool (warm_boot.c) finds NCCL as the library named libnccl.so* that its imports
 * loaded (the tests load a copy of this file by that name): ncclCommInitAll appends "pid <pid> init-all n <n>
 * dev <d> thread <main|other> ras <NCCL_RAS_ADDR> debug-file <NCCL_DEBUG_FILE> comm-id <NCCL_COMM_ID>
 * graph-dump <NCCL_GRAPH_DUMP_FILE>" ("-" for unset) to the file TRUN_FAKE_NCCL_LOG names and, as NCCL's RAS
 * thread does once a process, listens on NCCL_RAS_ADDR (127.0.0.1:<port>, SO_REUSEADDR + SO_REUSEPORT) for
 * the process's life; each client it accepts appends "pid <pid> ras-client" and is closed (one whose first
 * bytes are "TRUN-FAKE-PING\n" is first answered "pong <pid>\n" and appends "pid <pid> ras-ping")
 * (TRUN_FAKE_NCCL_RAS=0: no RAS, nothing listens; TRUN_FAKE_NCCL_INIT_SLEEP=S: the set-up takes S s first).
 * ncclResetDebugInit appends "pid <pid> reset-debug NCCL_DEBUG <value>". A test fake, so plain globals. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct {
  char internal[128];
} nccl_id;

static double vclock; /* seconds, one stream */
static int nranks = 1;
static void nccl_log(const char *fmt, ...);

static double busbw(void) {
  const char *v = getenv("TRUN_FAKE_BUSBW");
  return v && *v ? atof(v) : 100.0;
}

static void dir_file(const char *name, char *out, size_t len) {
  const char *d = getenv("TRUN_FAKE_NCCL_DIR");
  snprintf(out, len, "%s/%s", d && *d ? d : "/tmp", name);
}

#define TOPO_MAX 64
static struct {
  char uuid[96], name[256], pci[32];
  unsigned long long memory;
} topo_gpu[TOPO_MAX];
static int topo_ngpu, topo_loaded, topo_visible[TOPO_MAX], topo_nvisible;
static char topo_p2p[TOPO_MAX][TOPO_MAX][8];

static void topo_copy(char *dst, size_t n, json_t *v) {
  snprintf(dst, n, "%s", v ? json_string_value(v) : "");
}

/* CUDA_VISIBLE_DEVICES over the host GPUs → topo_visible. */
static void topo_apply_visible(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  topo_nvisible = 0;
  if (!cvd) {
    for (int i = 0; i < topo_ngpu; i++) topo_visible[topo_nvisible++] = i;
    return;
  }
  char buf[1024];
  snprintf(buf, sizeof(buf), "%s", cvd);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && topo_nvisible < TOPO_MAX;
       t = strtok_r(NULL, ",", &save)) {
    int pick = -1;
    if (strncmp(t, "GPU-", 4) == 0) {
      for (int i = 0; i < topo_ngpu; i++)
        if (strncmp(topo_gpu[i].uuid, t, strlen(t)) == 0) pick = pick < 0 ? i : -2;
    } else {
      char *end;
      long v = strtol(t, &end, 10);
      if (end != t && *end == '\0' && v >= 0 && v < topo_ngpu) pick = (int)v;
    }
    for (int k = 0; pick >= 0 && k < topo_nvisible; k++)
      if (topo_visible[k] == pick) pick = -1;
    if (pick < 0) break;
    topo_visible[topo_nvisible++] = pick;
  }
}

/* 1 when TRUN_FAKE_CUDART_TOPO is set (loaded once), else 0. */
static int topo_mode(void) {
  const char *path = getenv("TRUN_FAKE_CUDART_TOPO");
  if (!path || !*path) return 0;
  if (topo_loaded) return 1;
  topo_loaded = 1;
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) {
    fprintf(stderr, "cuda_nccl_shim: %s:%d: %s\n", path, je.line, je.text);
    return 1;
  }
  size_t i;
  json_t *g;
  json_array_foreach(json_object_get(root, "gpus"), i, g) {
    if (topo_ngpu >= TOPO_MAX) break;
    topo_copy(topo_gpu[topo_ngpu].uuid, sizeof(topo_gpu[0].uuid), json_object_get(g, "uuid"));
    topo_copy(topo_gpu[topo_ngpu].name, sizeof(topo_gpu[0].name), json_object_get(g, "name"));
    topo_copy(topo_gpu[topo_ngpu].pci, sizeof(topo_gpu[0].pci), json_object_get(g, "pci"));
    topo_gpu[topo_ngpu].memory = (unsigned long long)json_integer_value(json_object_get(g, "memory"));
    topo_ngpu++;
  }
  for (int a = 0; a < topo_ngpu; a++)
    for (int b = 0; b < topo_ngpu; b++)
      topo_copy(topo_p2p[a][b], sizeof(topo_p2p[a][b]),
                json_array_get(json_array_get(json_object_get(root, "p2p"), (size_t)a), (size_t)b));
  json_decref(root);
  topo_apply_visible();
  return 1;
}

int cudaGetDeviceCount(int *n);
int cudaGetDeviceCount(int *n) {
  if (topo_mode()) {
    *n = topo_nvisible;
    return topo_nvisible ? 0 : 100; /* cudaErrorNoDevice */
  }
  const char *v = getenv("TRUN_FAKE_CUDA_DEVICES");
  *n = v && *v ? atoi(v) : 2;
  return 0;
}

/* ---- the driver API (CUresult: 0 success, 101 invalid device, 3 not initialised) ---- */

static int driver_ready;

int cuInit(unsigned flags);
int cuInit(unsigned flags) {
  driver_ready = flags == 0;
  return flags == 0 ? 0 : 1;
}

int cuDeviceGetCount(int *n);
int cuDeviceGetCount(int *n) {
  if (!driver_ready) return 3;
  const char *v = getenv("TRUN_FAKE_CUDA_DEVICES");
  *n = v && *v ? atoi(v) : 2;
  return 0;
}

int cuDeviceGet(int *dev, int ordinal);
int cuDeviceGet(int *dev, int ordinal) {
  int n = 0;
  if (cuDeviceGetCount(&n) != 0) return 3;
  if (ordinal < 0 || ordinal >= n) return 101;
  *dev = ordinal;
  return 0;
}

int cuDevicePrimaryCtxRetain(void **ctx, int dev);
int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  if (!driver_ready) return 3;
  static int fake_ctx;
  *ctx = &fake_ctx;
  const char *log = getenv("TRUN_FAKE_CUDA_LOG"), *cvd = getenv("CUDA_VISIBLE_DEVICES");
  FILE *f = log && *log ? fopen(log, "a") : NULL;
  if (f) {
    fprintf(f, "pid %d retain %d cvd %s\n", (int)getpid(), dev, cvd ? cvd : "-");
    fclose(f);
  }
  return 0;
}

/* The head of cudaDeviceProp (CUDA >= 10). */
typedef struct {
  char name[256];
  unsigned char uuid[16];
  char luid[8];
  unsigned int luid_device_node_mask;
  size_t total_global_mem;
} fake_props;

int cudaGetDeviceProperties_v2(void *prop, int d);
int cudaGetDeviceProperties_v2(void *prop, int d) {
  if (!topo_mode() || d < 0 || d >= topo_nvisible) return 101;
  const int h = topo_visible[d];
  fake_props *p = prop;
  memset(p, 0, sizeof(*p));
  snprintf(p->name, sizeof(p->name), "%s", topo_gpu[h].name);
  const char *u = topo_gpu[h].uuid + 4;
  for (int k = 0; k < 16 && *u; u++) {
    if (*u == '-') continue;
    unsigned x;
    if (sscanf(u, "%2x", &x) != 1) break;
    p->uuid[k++] = (unsigned char)x;
    u++;
  }
  p->total_global_mem = (size_t)topo_gpu[h].memory;
  return 0;
}

int cudaDeviceGetPCIBusId(char *buf, int len, int d);
int cudaDeviceGetPCIBusId(char *buf, int len, int d) {
  if (!topo_mode() || d < 0 || d >= topo_nvisible) return 101;
  snprintf(buf, (size_t)len, "%s", topo_gpu[topo_visible[d]].pci);
  return 0;
}

int cudaDeviceCanAccessPeer(int *can, int d, int peer);
int cudaDeviceCanAccessPeer(int *can, int d, int peer) {
  if (!topo_mode() || d < 0 || d >= topo_nvisible || peer < 0 || peer >= topo_nvisible) return 101;
  *can = strcmp(topo_p2p[topo_visible[d]][topo_visible[peer]], "OK") == 0;
  return 0;
}
int cudaSetDevice(int d);
int cudaSetDevice(int d) {
  int n;
  cudaGetDeviceCount(&n);
  return d < n ? 0 : 101; /* cudaErrorInvalidDevice */
}
int cudaMalloc(void **p, size_t n);
int cudaMalloc(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  return *p ? 0 : 2;
}
int cudaFree(void *p);
int cudaFree(void *p) {
  free(p);
  return 0;
}
int cudaMemset(void *p, int v, size_t n);
int cudaMemset(void *p, int v, size_t n) {
  memset(p, v, n);
  return 0;
}
int cudaStreamCreate(void **s);
int cudaStreamCreate(void **s) {
  *s = (void *)&vclock;
  return 0;
}
int cudaStreamSynchronize(void *s);
int cudaStreamSynchronize(void *s) {
  (void)s;
  return 0;
}
int cudaEventCreate(void **e);
int cudaEventCreate(void **e) {
  *e = calloc(1, sizeof(double));
  return *e ? 0 : 2;
}
int cudaEventRecord(void *e, void *s);
int cudaEventRecord(void *e, void *s) {
  (void)s;
  *(double *)e = vclock;
  return 0;
}
int cudaEventSynchronize(void *e);
int cudaEventSynchronize(void *e) {
  (void)e;
  return 0;
}
int cudaEventElapsedTime(float *ms, void *a, void *b);
int cudaEventElapsedTime(float *ms, void *a, void *b) {
  *ms = (float)((*(double *)b - *(double *)a) * 1e3);
  return 0;
}
const char *cudaGetErrorString(int e);
const char *cudaGetErrorString(int e) { return e == 101 ? "invalid device ordinal" : "fake CUDA error"; }

int ncclGetVersion(int *v);
int ncclGetVersion(int *v) {
  *v = 22803;
  return 0;
}
int ncclGetUniqueId(nccl_id *id);
int ncclGetUniqueId(nccl_id *id) {
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd < 0 || read(fd, id->internal, sizeof(id->internal)) != (ssize_t)sizeof(id->internal)) return 2;
  close(fd);
  char p[4096];
  dir_file("id", p, sizeof(p));
  FILE *f = fopen(p, "wb");
  if (f == NULL) return 2;
  fwrite(id->internal, 1, sizeof(id->internal), f);
  fclose(f);
  return 0;
}
int ncclCommInitRank(void **comm, int n, nccl_id id, int rank);
int ncclCommInitRank(void **comm, int n, nccl_id id, int rank) {
  char p[4096], want[128];
  dir_file("id", p, sizeof(p));
  FILE *f = fopen(p, "rb");
  if (f == NULL || fread(want, 1, sizeof(want), f) != sizeof(want) ||
      memcmp(want, id.internal, sizeof(want)) != 0) {
    if (f) fclose(f);
    return 4; /* ncclInvalidArgument: not rank 0's id */
  }
  fclose(f);
  dir_file("ranks", p, sizeof(p));
  if ((f = fopen(p, "a")) != NULL) fprintf(f, "rank %d of %d\n", rank, n), fclose(f);
  nranks = n;
  *comm = (void *)&nranks;
  return 0;
}
int ncclAllReduce(const void *s, void *r, size_t count, int dtype, int op, void *comm, void *stream);
int ncclAllReduce(const void *s, void *r, size_t count, int dtype, int op, void *comm, void *stream) {
  (void)s, (void)r, (void)dtype, (void)op, (void)comm, (void)stream;
  double bytes = (double)count * 4;
  vclock += 5e-6 + (nranks > 1 ? bytes * 2.0 * (nranks - 1) / nranks / (busbw() * 1e9) : 0);
  return 0;
}
int ncclCommDestroy(void *comm);
int ncclCommDestroy(void *comm) {
  (void)comm;
  nccl_log("destroy");
  return 0;
}
/* A line in TRUN_FAKE_NCCL_LOG, if set. */
static void nccl_log(const char *fmt, ...) {
  const char *log = getenv("TRUN_FAKE_NCCL_LOG");
  FILE *f = log && *log ? fopen(log, "a") : NULL;
  if (f == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(f, "pid %d ", (int)getpid());
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  va_end(ap);
  fclose(f);
}

static void *ras_serve(void *arg) {
  int s = (int)(long)arg;
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    nccl_log("ras-client");
    /* A test's own question (not RAS's): "TRUN-FAKE-PING\n" is answered "pong <pid>\n", so that a test can
     * tell which process a connection reached; anything else is closed at once, as before. */
    struct timeval tv = {.tv_sec = 2};
    char line[64];
    ssize_t k = setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 ? read(c, line, sizeof(line)) : -1;
    if (k >= 15 && memcmp(line, "TRUN-FAKE-PING\n", 15) == 0) {
      char ans[32];
      int m = snprintf(ans, sizeof(ans), "pong %d\n", (int)getpid());
      if (write(c, ans, (size_t)m) == m) nccl_log("ras-ping");
    }
    close(c);
  }
  return NULL;
}

/* NCCL's RAS: one listener a process, on NCCL_RAS_ADDR as it was at the first communicator. */
static void ras_start(const char *addr) {
  static int started;
  if (started || addr == NULL || strncmp(addr, "127.0.0.1:", 10) != 0) return;
  started = 1;
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((unsigned short)atoi(addr + 10)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  pthread_t t;
  if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
      setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
      bind(s, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(s, 16) < 0 ||
      pthread_create(&t, NULL, ras_serve, (void *)(long)s) != 0) {
    nccl_log("ras-failed %s", addr);
    return;
  }
  pthread_detach(t);
}

int ncclCommInitAll(void **comm, int n, const int *devs);
int ncclCommInitAll(void **comm, int n, const int *devs) {
  const char *ras = getenv("NCCL_RAS_ADDR"), *file = getenv("NCCL_DEBUG_FILE"), *id = getenv("NCCL_COMM_ID"),
             *dump = getenv("NCCL_GRAPH_DUMP_FILE");
  nccl_log("init-all n %d dev %d thread %s ras %s debug-file %s comm-id %s graph-dump %s", n,
           n > 0 ? devs[0] : -1, syscall(SYS_gettid) == getpid() ? "main" : "other", ras ? ras : "-",
           file ? file : "-", id ? id : "-", dump ? dump : "-");
  const char *nap = getenv("TRUN_FAKE_NCCL_INIT_SLEEP");
  if (nap && *nap) sleep((unsigned)atoi(nap));
  const char *on = getenv("TRUN_FAKE_NCCL_RAS");
  if (on == NULL || strcmp(on, "0") != 0) ras_start(ras);
  nranks = n;
  *comm = (void *)&nranks;
  return 0;
}
void ncclResetDebugInit(void);
void ncclResetDebugInit(void) {
  const char *d = getenv("NCCL_DEBUG");
  nccl_log("reset-debug NCCL_DEBUG %s", d ? d : "-");
}
const char *ncclGetErrorString(int rc);
const char *ncclGetErrorString(int rc) {
  return rc == 4 ? "invalid argument (fake: not rank 0's unique id)" : "fake NCCL error";
}
