/* build/trun-preflight: one process per local GPU; all of the job's ranks join one NCCL communicator (the
 * unique id through the rendezvous store: rank 0 sets it, the others get it) and run all-reduce from 8 B to
 * 1 GiB the way nccl-tests does (float sum, out of place, sizes x2, warm-up then timed iterations between
 * CUDA events): algbw = bytes / time, busbw = algbw * 2(n-1)/n. Rank 0 prints the table and the verdict
 * against the bandwidth expected for what discovery finds (agent/nccl/preflight.h) and publishes the verdict
 * so that every rank exits alike. libcudart and libnccl are dlopen'ed (prototypes below, no CUDA headers).
 * Environment: the workers' (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
 * TRUN_PREFLIGHT_KEY (store key prefix), TRUN_CUDART_LIBRARY / TRUN_NCCL_LIBRARY (library paths).
 * Exit: 0 pass or warn, 3 fail verdict, 4 skipped (no GPU, no CUDA / NCCL library), 1 error, 2 usage. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/discover/discover.h"
#include "agent/nccl/nccl.h"
#include "base/base.h"
#include "store/store.h"

#ifndef TRUN_VERSION_STRING /* from build/gen/trun_version.h, which the Makefile writes from VERSION */
#define TRUN_VERSION_STRING "unknown"
#endif

extern char **environ;

/* ---- the few CUDA runtime / NCCL prototypes ----------------------------------------------------------- */
typedef int cuda_err;
typedef void *cuda_stream;
typedef void *cuda_event;
typedef struct {
  char internal[128];
} nccl_id;
typedef void *nccl_comm;
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

typedef struct {
  void *cudart, *nccl;
  cuda_err (*GetDeviceCount)(int *);
  cuda_err (*SetDevice)(int);
  cuda_err (*Malloc)(void **, size_t);
  cuda_err (*Free)(void *);
  cuda_err (*Memset)(void *, int, size_t);
  cuda_err (*StreamCreate)(cuda_stream *);
  cuda_err (*StreamSynchronize)(cuda_stream);
  cuda_err (*EventCreate)(cuda_event *);
  cuda_err (*EventRecord)(cuda_event, cuda_stream);
  cuda_err (*EventSynchronize)(cuda_event);
  cuda_err (*EventElapsedTime)(float *, cuda_event, cuda_event);
  const char *(*GetErrorString)(cuda_err);
  int (*ncclGetVersion)(int *);
  int (*ncclGetUniqueId)(nccl_id *);
  int (*ncclCommInitRank)(nccl_comm *, int, nccl_id, int);
  int (*ncclAllReduce)(const void *, void *, size_t, int, int, nccl_comm, cuda_stream);
  int (*ncclCommDestroy)(nccl_comm);
  const char *(*ncclGetErrorString)(int);
} api;

static void *open_first(const char *env, const char *const *names, char *tried, size_t len) {
  const char *p = getenv(env);
  if (p && *p) {
    snprintf(tried, len, "%s", p);
    return dlopen(p, RTLD_NOW | RTLD_GLOBAL);
  }
  tried[0] = '\0';
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (h) return h;
    size_t n = strlen(tried);
    snprintf(tried + n, len - n, "%s%s", n ? ", " : "", names[i]);
  }
  return NULL;
}

#define SYM(lib, field, name)                            \
  do {                                                   \
    *(void **)&a->field = dlsym(a->lib, name);           \
    if (a->field == NULL) {                              \
      snprintf(err, errlen, "%s has no %s", #lib, name); \
      return -1;                                         \
    }                                                    \
  } while (0)

/* 0, or -1 with err: a library is missing (the caller skips). */
static int load(api *a, char *err, size_t errlen) {
  static const char *const cudart[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                       "libcudart.so.11.0", NULL};
  static const char *const nccl[] = {"libnccl.so.2", "libnccl.so", NULL};
  char tried[512];
  if ((a->cudart = open_first("TRUN_CUDART_LIBRARY", cudart, tried, sizeof(tried))) == NULL) {
    snprintf(err, errlen, "cannot load the CUDA runtime (%.300s); set TRUN_CUDART_LIBRARY or LD_LIBRARY_PATH",
             tried);
    return -1;
  }
  if ((a->nccl = open_first("TRUN_NCCL_LIBRARY", nccl, tried, sizeof(tried))) == NULL) {
    snprintf(err, errlen, "cannot load NCCL (%.300s); set TRUN_NCCL_LIBRARY or LD_LIBRARY_PATH", tried);
    return -1;
  }
  SYM(cudart, GetDeviceCount, "cudaGetDeviceCount");
  SYM(cudart, SetDevice, "cudaSetDevice");
  SYM(cudart, Malloc, "cudaMalloc");
  SYM(cudart, Free, "cudaFree");
  SYM(cudart, Memset, "cudaMemset");
  SYM(cudart, StreamCreate, "cudaStreamCreate");
  SYM(cudart, StreamSynchronize, "cudaStreamSynchronize");
  SYM(cudart, EventCreate, "cudaEventCreate");
  SYM(cudart, EventRecord, "cudaEventRecord");
  SYM(cudart, EventSynchronize, "cudaEventSynchronize");
  SYM(cudart, EventElapsedTime, "cudaEventElapsedTime");
  SYM(cudart, GetErrorString, "cudaGetErrorString");
  SYM(nccl, ncclGetVersion, "ncclGetVersion");
  SYM(nccl, ncclGetUniqueId, "ncclGetUniqueId");
  SYM(nccl, ncclCommInitRank, "ncclCommInitRank");
  SYM(nccl, ncclAllReduce, "ncclAllReduce");
  SYM(nccl, ncclCommDestroy, "ncclCommDestroy");
  SYM(nccl, ncclGetErrorString, "ncclGetErrorString");
  return 0;
}

/* ---- options ------------------------------------------------------------------------------------------ */

typedef struct {
  double min_bytes, max_bytes, factor;
  int iters, warmup, timeout_s;
  double pass_gbps, warn_gbps; /* < 0: from the table */
  const char *json;
} opts;

static const char *usage =
    "usage: trun-preflight [--min-bytes N] [--max-bytes N] [--step-factor F] [--iters N] [--warmup N]\n"
    "                      [--pass GBPS] [--warn GBPS] [--timeout S] [--json FILE] [--version]\n"
    "  NCCL all-reduce (float, sum, out of place) over every rank of the job, nccl-tests style:\n"
    "  sizes from --min-bytes (8) to --max-bytes (1073741824) times --step-factor (2), --warmup (5) then\n"
    "  --iters (20) timed iterations per size; busbw = algbw * 2(n-1)/n. Verdict on the peak busbw:\n"
    "  pass >= --pass, warn >= --warn, else fail (defaults: the table for NVLink / PCIe / EFA / sockets).\n"
    "  --timeout: seconds for the NCCL id and communicator set-up (default 300). --json: rank 0's results.\n"
    "  Run by `trun --preflight` (one per local rank) or `trun-topo preflight` (this node alone).\n"
    "  Exit: 0 pass/warn, 3 fail, 4 skipped (no GPU or no CUDA/NCCL library), 1 error, 2 usage.\n";

static int parse_opts(int argc, char **argv, opts *o) {
  *o = (opts){8, 1073741824.0, 2, 20, 5, 300, -1, -1, NULL};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i];
    if (strcmp(k, "-h") == 0 || strcmp(k, "--help") == 0) {
      fputs(usage, stdout);
      exit(0);
    }
    if (strcmp(k, "--version") == 0) {
      printf("trun-preflight %s\n", TRUN_VERSION_STRING);
      exit(0);
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "trun-preflight: %s needs a value; see trun-preflight --help\n", k);
      return -1;
    }
    const char *v = argv[++i];
    char *end;
    double d = strtod(v, &end);
    int num_ok = *v && *end == '\0';
    if (strcmp(k, "--json") == 0) {
      o->json = v;
      continue;
    }
    if (!num_ok || d < 0) {
      fprintf(stderr, "trun-preflight: %s '%s' is not a number >= 0; see trun-preflight --help\n", k, v);
      return -1;
    }
    if (strcmp(k, "--min-bytes") == 0)
      o->min_bytes = d;
    else if (strcmp(k, "--max-bytes") == 0)
      o->max_bytes = d;
    else if (strcmp(k, "--step-factor") == 0)
      o->factor = d;
    else if (strcmp(k, "--iters") == 0)
      o->iters = (int)d;
    else if (strcmp(k, "--warmup") == 0)
      o->warmup = (int)d;
    else if (strcmp(k, "--pass") == 0)
      o->pass_gbps = d;
    else if (strcmp(k, "--warn") == 0)
      o->warn_gbps = d;
    else if (strcmp(k, "--timeout") == 0)
      o->timeout_s = (int)d;
    else {
      fprintf(stderr, "trun-preflight: unknown option '%s'; see trun-preflight --help\n", k);
      return -1;
    }
  }
  if (o->factor <= 1 || o->min_bytes < 4 || o->max_bytes < o->min_bytes || o->iters < 1) {
    fprintf(stderr,
            "trun-preflight: need --step-factor > 1, 4 <= --min-bytes <= --max-bytes, --iters >= 1\n");
    return -1;
  }
  return 0;
}

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] =
      "trun-preflight: init timeout: the NCCL communicator was not set up in time (a rank "
      "missing, or NCCL cannot connect between the nodes); --timeout to wait longer\n";
  ssize_t w = write(2, m, sizeof(m) - 1);
  (void)w;
  _exit(TRUN_PF_EXIT_ERROR);
}

/* The NCCL unique id: rank 0 creates and publishes it, the others wait for it. 0 or -1. */
static int exchange_id(const api *a, int rank, int world, int timeout_s, nccl_id *id, trun_client **cl,
                       const char *key) {
  if (rank == 0) {
    int rc = a->ncclGetUniqueId(id);
    if (rc != 0) {
      fprintf(stderr, "trun-preflight: ncclGetUniqueId: %s\n", a->ncclGetErrorString(rc));
      return -1;
    }
  }
  if (world == 1) return 0;
  const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  if (!host || !port) {
    fprintf(stderr,
            "trun-preflight: MASTER_ADDR / MASTER_PORT unset: run it through trun --preflight or "
            "trun-topo preflight\n");
    return -1;
  }
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = host;
  o.port = atoi(port);
  o.connect_timeout_ms = timeout_s * 1000;
  int rc = trun_client_connect(&o, cl);
  if (rc < 0) {
    fprintf(stderr, "trun-preflight: rank %d: cannot reach the store at %s:%s: %s\n", rank, host, port,
            strerror(-rc));
    return -1;
  }
  char k[600];
  snprintf(k, sizeof(k), "%s/nccl_id", key);
  if (rank == 0) {
    rc = trun_client_set(*cl, trun_str(k), (trun_slice){(const uint8_t *)id->internal, sizeof(id->internal)});
  } else {
    trun_buf v = {0};
    rc = trun_client_get(*cl, trun_str(k), &v, timeout_s * 1000);
    if (rc == 0 && v.len == sizeof(id->internal)) memcpy(id->internal, v.data, v.len);
    if (rc == 0 && v.len != sizeof(id->internal)) rc = -EPROTO;
    trun_buf_free(&v);
  }
  if (rc < 0) {
    fprintf(stderr, "trun-preflight: rank %d: %s the NCCL id under %s: %s%s\n", rank,
            rank ? "cannot get" : "cannot set", k, strerror(-rc),
            rc == -ETIMEDOUT ? " (init timeout: is rank 0 running trun-preflight?)" : "");
    return -1;
  }
  return 0;
}

static void layout_of(int world, int local, trun_pf_layout *l) {
  memset(l, 0, sizeof(*l));
  l->world = world;
  l->local = local > 0 ? local : 1;
  l->nodes = (world + l->local - 1) / l->local;
  trun_node *n = calloc(1, sizeof(*n));
  char err[256];
  if (n == NULL) return;
  trun_discover_node(n, environ, TRUN_IDENTITY_IF_EFA, 0, err, sizeof(err));
  for (int i = 0; i < n->ngpu; i++)
    for (int j = 0; j < n->ngpu; j++)
      if (i != j && strncmp(n->links[i][j], "NV", 2) == 0) l->nvlink = 1;
  for (int r = 0; r < n->nrdma; r++) l->efa += n->rdma[r].is_efa && n->rdma[r].usable;
  snprintf(l->instance_type, sizeof(l->instance_type), "%s", n->instance.instance_type);
  free(n);
}

/* $TRUN_PREFLIGHT_RESULT (set by the agent for its "preflight" event, and for a spare's local preflight): the
 * result as JSON, written by local rank 0 alone: under `trun --standalone` every rank has the variable, and a
 * second writer (truncating the file, perhaps stopped half-way) would spoil rank 0's. */
static void write_result(const trun_pf_result *res) {
  const char *path = getenv("TRUN_PREFLIGHT_RESULT"), *lr = getenv("LOCAL_RANK");
  if (lr && *lr && atoi(lr) != 0) return;
  if (path && *path && trun_pf_result_write(path, res) < 0)
    fprintf(stderr, "trun-preflight: cannot write the result to $TRUN_PREFLIGHT_RESULT %s: %s\n", path,
            strerror(errno));
}

static int skipped(const char *why) {
  trun_pf_result res = {.verdict = TRUN_PF_SKIP, .peak_gbps = -1};
  snprintf(res.cause, sizeof(res.cause), "%s", why);
  write_result(&res);
  return TRUN_PF_EXIT_SKIP;
}

/* One all-reduce sweep's samples: bytes, seconds per iteration and busbw of each size. */
#define MAX_SIZES 128
typedef struct {
  int n;
  double bytes[MAX_SIZES], times[MAX_SIZES], bus[MAX_SIZES];
} sweep;

/* The name of this rank's GPU (LOCAL_RANK among the visible ones) into name; 0 when no GPU is visible (NVML
 * finds none), -1 out of memory. */
static int gpu_name(int lr, char *name, size_t len) {
  trun_node *node = calloc(1, sizeof(*node));
  char err[512];
  if (node == NULL) return -1;
  trun_discover_gpus(node, environ, err, sizeof(err));
  int ngpu = node->ngpu;
  snprintf(name, len, "%s", ngpu ? node->gpus[lr % ngpu].name : "");
  free(node);
  return ngpu;
}

/* Makes LOCAL_RANK's device (modulo the count) current: 0, or -1 said on stderr. */
static int open_device(const api *a, int rank, int lr, int ngpu) {
  int count = 0;
  cuda_err ce = a->GetDeviceCount(&count);
  if (ce != 0 || count == 0) {
    fprintf(stderr, "trun-preflight: rank %d: GPU missing: NVML lists %d GPU(s) but CUDA finds %d (%s)\n",
            rank, ngpu, count, ce ? a->GetErrorString(ce) : "no device");
    return -1;
  }
  int dev = lr < count ? lr : lr % count;
  if ((ce = a->SetDevice(dev)) != 0) {
    fprintf(stderr, "trun-preflight: rank %d: GPU missing: cudaSetDevice(%d): %s\n", rank, dev,
            a->GetErrorString(ce));
    return -1;
  }
  return 0;
}

/* The store key of this preflight's NCCL id and verdict: $TRUN_PREFLIGHT_KEY, else one per run and restart.
 */
static void preflight_key(char *key, size_t len) {
  const char *k = getenv("TRUN_PREFLIGHT_KEY"), *run = getenv("TORCHELASTIC_RUN_ID"),
             *restart = getenv("TORCHELASTIC_RESTART_COUNT");
  if (k && *k)
    snprintf(key, len, "%s", k);
  else
    snprintf(key, len, "trun_preflight/%s/%s", run ? run : "none", restart ? restart : "0");
}

/* The all-reduce sweep on comm (rank 0 prints a line per size, nccl-tests style): 0, or -1 said on stderr. */
static int run_sweep(const api *a, const opts *o, nccl_comm comm, int rank, int world, sweep *sw) {
  size_t maxb = (size_t)o->max_bytes;
  void *send = NULL, *recv = NULL;
  cuda_stream st = NULL;
  cuda_event e0 = NULL, e1 = NULL;
  cuda_err ce;
  if ((ce = a->Malloc(&send, maxb)) != 0 || (ce = a->Malloc(&recv, maxb)) != 0 ||
      (ce = a->Memset(send, 0, maxb)) != 0 || (ce = a->StreamCreate(&st)) != 0 ||
      (ce = a->EventCreate(&e0)) != 0 || (ce = a->EventCreate(&e1)) != 0) {
    fprintf(stderr, "trun-preflight: rank %d: CUDA set-up (%zu B buffers): %s\n", rank, maxb,
            a->GetErrorString(ce));
    return -1;
  }
  sw->n = 0;
  for (double b = o->min_bytes; b <= o->max_bytes && sw->n < MAX_SIZES; b *= o->factor) {
    size_t cnt = (size_t)b / 4;
    if (cnt == 0) cnt = 1;
    for (int i = 0; i < o->warmup; i++) a->ncclAllReduce(send, recv, cnt, NCCL_FLOAT32, NCCL_SUM, comm, st);
    a->StreamSynchronize(st);
    a->EventRecord(e0, st);
    for (int i = 0; i < o->iters; i++) {
      int rc = a->ncclAllReduce(send, recv, cnt, NCCL_FLOAT32, NCCL_SUM, comm, st);
      if (rc != 0) {
        fprintf(stderr, "trun-preflight: rank %d: ncclAllReduce(%zu floats): %s\n", rank, cnt,
                a->ncclGetErrorString(rc));
        return -1;
      }
    }
    a->EventRecord(e1, st);
    if ((ce = a->EventSynchronize(e1)) != 0) {
      fprintf(stderr, "trun-preflight: rank %d: all-reduce of %zu B: %s\n", rank, cnt * 4,
              a->GetErrorString(ce));
      return -1;
    }
    float ms = 0;
    a->EventElapsedTime(&ms, e0, e1);
    double sec = ms / 1e3 / o->iters, sz = (double)cnt * 4;
    sw->bytes[sw->n] = sz;
    sw->times[sw->n] = sec;
    sw->bus[sw->n] = trun_pf_busbw(sz, sec, world);
    if (rank == 0)
      printf("  %12.0f %12zu %6s %6s %12.2f %12.2f %12.2f\n", sz, cnt, "float", "sum", sec * 1e6,
             sz / sec / 1e9, sw->bus[sw->n]);
    fflush(stdout);
    sw->n++;
  }
  a->Free(send);
  a->Free(recv);
  return 0;
}

/* --json FILE: rank 0's results. */
static void write_json(const char *path, int nver, int world, const trun_pf_layout *lay,
                       const trun_pf_expect *ex, trun_pf_verdict v, const sweep *sw) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "trun-preflight: cannot write --json %s: %s\n", path, strerror(errno));
    return;
  }
  fprintf(f,
          "{\"nccl_version\": %d, \"nranks\": %d, \"nodes\": %d, \"fabric\": \"%s\", \"verdict\": \"%s\", "
          "\"pass_gbps\": %.3f, \"warn_gbps\": %.3f, \"results\": [",
          nver, world, lay->nodes, ex->fabric, trun_pf_verdict_name(v), ex->pass_gbps, ex->warn_gbps);
  for (int i = 0; i < sw->n; i++)
    fprintf(f, "%s{\"bytes\": %.0f, \"time_us\": %.3f, \"algbw\": %.3f, \"busbw\": %.3f}", i ? ", " : "",
            sw->bytes[i], sw->times[i] * 1e6, sw->bytes[i] / sw->times[i] / 1e9, sw->bus[i]);
  fprintf(f, "]}\n");
  fclose(f);
}

/* Rank 0's verdict, as the other ranks read it from the store (their own v when it cannot be read). */
static trun_pf_verdict read_verdict(trun_client *cl, const char *vk, trun_pf_verdict v) {
  trun_buf b = {0};
  if (trun_client_get(cl, trun_str(vk), &b, 120000) == 0) {
    if (b.len == 4 && memcmp(b.data, "FAIL", 4) == 0)
      v = TRUN_PF_FAIL;
    else if (b.len == 4 && memcmp(b.data, "PASS", 4) == 0)
      v = TRUN_PF_PASS;
    else if (b.len == 4 && memcmp(b.data, "WARN", 4) == 0)
      v = TRUN_PF_WARN;
  }
  trun_buf_free(&b);
  return v;
}

int main(int argc, char **argv) {
  opts o;
  if (parse_opts(argc, argv, &o) < 0) return TRUN_PF_EXIT_USAGE;
  int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1), lr = env_int("LOCAL_RANK", 0);
  int local = env_int("LOCAL_WORLD_SIZE", world);
  /* No GPU: one line, before touching any library. */
  char gpu[96], err[512];
  int ngpu = gpu_name(lr, gpu, sizeof(gpu));
  if (ngpu < 0) return TRUN_PF_EXIT_ERROR;
  if (ngpu == 0) {
    printf("trun-preflight: skipped: no GPU visible on this host (NVML finds none)\n");
    return skipped("no GPU visible on this host (NVML finds none)");
  }
  api a;
  memset(&a, 0, sizeof(a));
  if (load(&a, err, sizeof(err)) < 0) {
    printf("trun-preflight: skipped: %s\n", err);
    return skipped(err);
  }
  if (open_device(&a, rank, lr, ngpu) < 0) return TRUN_PF_EXIT_ERROR;
  char key[512];
  preflight_key(key, sizeof(key));
  signal(SIGALRM, on_alarm);
  alarm((unsigned)o.timeout_s + 30);
  nccl_id id;
  memset(&id, 0, sizeof(id));
  trun_client *cl = NULL;
  if (exchange_id(&a, rank, world, o.timeout_s, &id, &cl, key) < 0) return TRUN_PF_EXIT_ERROR;
  nccl_comm comm = NULL;
  int rc = a.ncclCommInitRank(&comm, world, id, rank);
  alarm(0);
  if (rc != 0) {
    fprintf(stderr, "trun-preflight: rank %d: ncclCommInitRank: %s\n", rank, a.ncclGetErrorString(rc));
    return TRUN_PF_EXIT_ERROR;
  }
  int nver = 0;
  a.ncclGetVersion(&nver);
  trun_pf_layout lay;
  trun_pf_expect ex;
  layout_of(world, local, &lay);
  trun_pf_expect_for(&lay, &ex);
  if (o.pass_gbps >= 0) ex.pass_gbps = o.pass_gbps;
  if (o.warn_gbps >= 0) ex.warn_gbps = o.warn_gbps;
  if (rank == 0) {
    printf("# trun-preflight: NCCL %d, %d rank(s) on %d node(s), %d per node, GPU %s; fabric %s (%s)\n", nver,
           world, lay.nodes, lay.local, gpu, ex.fabric, ex.why);
    printf("# %12s %12s %6s %6s %12s %12s %12s\n", "size(B)", "count", "type", "redop", "time(us)",
           "algbw(GB/s)", "busbw(GB/s)");
  }
  sweep sw;
  if (run_sweep(&a, &o, comm, rank, world, &sw) < 0) return TRUN_PF_EXIT_ERROR;
  a.ncclCommDestroy(comm);
  char msg[1024], vk[600];
  trun_pf_result res;
  trun_pf_verdict v = trun_pf_judge_result(&ex, sw.bytes, sw.bus, sw.n, &res, msg, sizeof(msg));
  snprintf(vk, sizeof(vk), "%s/verdict", key);
  if (rank == 0) {
    printf("# verdict: %s: %s\n", trun_pf_verdict_name(v), msg);
    fflush(stdout);
    /* Said and written before the other ranks learn the verdict: under `trun --standalone` their FAIL exit
     * stops this rank. */
    res.verdict = v;
    write_result(&res);
    if (cl) trun_client_set(cl, trun_str(vk), trun_str(trun_pf_verdict_name(v)));
    if (o.json) write_json(o.json, nver, world, &lay, &ex, v, &sw);
  } else if (cl) {
    v = read_verdict(cl, vk, v);
  }
  if (cl) trun_client_close(cl);
  res.verdict = v; /* rank 0's, with this rank's measurement */
  if (rank != 0) write_result(&res);
  fflush(stdout);
  return v == TRUN_PF_FAIL ? TRUN_PF_EXIT_FAIL : TRUN_PF_EXIT_OK;
}
