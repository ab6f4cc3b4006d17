/* A fake CUDA runtime + NCCL for the preflight tests (built as build/libcuda-nccl-fake.so, loaded by
 * trun-preflight through TRUN_CUDART_LIBRARY and TRUN_NCCL_LIBRARY). No GPU: memory is host memory, and
 * time is virtual: each all-reduce of B bytes on n ranks advances the stream's clock by
 * B * 2(n-1)/n / (TRUN_FAKE_BUSBW GB/s * 1e9) + 5 us, so the measured busbw is TRUN_FAKE_BUSBW at large
 * sizes. The unique id is 128 random bytes that ncclGetUniqueId also writes to $TRUN_FAKE_NCCL_DIR/id;
 * ncclCommInitRank fails (ncclInvalidArgument) unless the id it gets equals that file, and records
 * "rank <r> of <n>" lines in $TRUN_FAKE_NCCL_DIR/ranks. TRUN_FAKE_CUDA_DEVICES: cudaGetDeviceCount (default
 * 2). A test fake, so plain globals. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  char internal[128];
} nccl_id;

static double vclock; /* seconds, one stream */
static int nranks = 1;

static double busbw(void) {
  const char *v = getenv("TRUN_FAKE_BUSBW");
  return v && *v ? atof(v) : 100.0;
}

static void dir_file(const char *name, char *out, size_t len) {
  const char *d = getenv("TRUN_FAKE_NCCL_DIR");
  snprintf(out, len, "%s/%s", d && *d ? d : "/tmp", name);
}

int cudaGetDeviceCount(int *n);
int cudaGetDeviceCount(int *n) {
  const char *v = getenv("TRUN_FAKE_CUDA_DEVICES");
  *n = v && *v ? atoi(v) : 2;
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
  return 0;
}
const char *ncclGetErrorString(int rc);
const char *ncclGetErrorString(int rc) {
  return rc == 4 ? "invalid argument (fake: not rank 0's unique id)" : "fake NCCL error";
}
