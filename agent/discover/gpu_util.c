/* The GPU utilisation sampler (agent/discover/gpu_util.h), a short-lived NVML child (nvml_child.h).
 * Protocol on the pipe, one line each:
 *   "U v0 v1 ... v(n-1)"  a sample, percent or -1
 *   "E reason"            the sampler cannot sample and ends */
#include "gpu_util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"
#include "nvml_child.h"

#define MAX_GPUS 64

struct trun_gpu_util {
  trun__nvml_child child;
  int n;
  int *util; /* trun_gpu_util_read's output while it parses */
  int got;
};

typedef struct {
  const char (*uuids)[96];
  int n;
  double interval;
} sampler_args;

/* The child: samples every interval until the agent is gone. */
static void sample(void *arg) {
  const sampler_args *s = arg;
  const char *lib;
  void *dl = trun__nvml_child_dlopen(&lib);
  if (dl == NULL) return;
  trun_nvmlInit_v2_fn init = (trun_nvmlInit_v2_fn)dlsym(dl, "nvmlInit_v2");
  trun_nvmlDeviceGetHandleByUUID_fn by_uuid =
      (trun_nvmlDeviceGetHandleByUUID_fn)dlsym(dl, "nvmlDeviceGetHandleByUUID");
  trun_nvmlDeviceGetUtilizationRates_fn util =
      (trun_nvmlDeviceGetUtilizationRates_fn)dlsym(dl, "nvmlDeviceGetUtilizationRates");
  if (!init || !by_uuid || !util) {
    dprintf(3, "E NVML %s lacks nvmlInit_v2, nvmlDeviceGetHandleByUUID or nvmlDeviceGetUtilizationRates\n",
            lib);
    return;
  }
  trun_nvmlReturn_t rc = init();
  if (rc != TRUN_NVML_SUCCESS) {
    dprintf(3, "E nvmlInit_v2 failed (%d)\n", rc);
    return;
  }
  trun_nvmlDevice_t dev[MAX_GPUS];
  for (int i = 0; i < s->n; i++)
    if (by_uuid(s->uuids[i], &dev[i]) != TRUN_NVML_SUCCESS) dev[i] = NULL;
  struct timespec ts = {.tv_sec = (time_t)s->interval,
                        .tv_nsec = (long)((s->interval - (double)(time_t)s->interval) * 1e9)};
  for (;;) {
    char line[MAX_GPUS * 5 + 8];
    int o = snprintf(line, sizeof(line), "U");
    for (int i = 0; i < s->n; i++) {
      trun_nvmlUtilization_t u = {0, 0};
      int v = dev[i] && util(dev[i], &u) == TRUN_NVML_SUCCESS ? (int)u.gpu : -1;
      o += snprintf(line + o, sizeof(line) - (size_t)o, " %d", v);
    }
    o += snprintf(line + o, sizeof(line) - (size_t)o, "\n");
    if (write(3, line, (size_t)o) != o) return; /* the agent is gone */
    nanosleep(&ts, NULL);
  }
}

trun_gpu_util *trun_gpu_util_start(const char (*uuids)[96], int n, double interval_s) {
  if (n <= 0) return NULL;
  if (n > MAX_GPUS) n = MAX_GPUS;
  trun_gpu_util *g = calloc(1, sizeof(*g));
  if (g == NULL) return NULL;
  sampler_args args = {uuids, n, interval_s < 0.1 ? 0.1 : interval_s};
  if (trun__nvml_child_start(&g->child, sample, &args) < 0) {
    free(g);
    return NULL;
  }
  g->n = n;
  return g;
}

/* One complete line: a sample into g->util. */
static void parse(void *arg, char *line) {
  trun_gpu_util *g = arg;
  if (line[0] != 'U') return;
  int v[MAX_GPUS];
  char *p = line + 1;
  for (int i = 0; i < g->n; i++) {
    char *end;
    long x = strtol(p, &end, 10);
    if (end == p) return;
    v[i] = x < -1 || x > 100 ? -1 : (int)x;
    p = end;
  }
  memcpy(g->util, v, sizeof(int) * (size_t)g->n);
  g->got = 1;
}

int trun_gpu_util_read(trun_gpu_util *g, int *util, char *err, size_t errlen) {
  if (g == NULL) return 0;
  g->util = util;
  g->got = 0;
  int rc = trun__nvml_child_read(&g->child, "the GPU sampler", parse, g);
  if (g->got) return 1;
  if (rc < 0) {
    if (err && errlen) snprintf(err, errlen, "%s", g->child.err);
    return -1;
  }
  return 0;
}

void trun_gpu_util_stop(trun_gpu_util *g) {
  if (g == NULL) return;
  trun__nvml_child_stop(&g->child);
  free(g);
}
