/* The GPU utilisation sampler (agent/discover/gpu_util.h). Protocol on the pipe, one line each:
 *   "U v0 v1 ... v(n-1)"  a sample, percent or -1
 *   "E reason"            the sampler cannot sample and ends */
#include "gpu_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"
#include "store/store.h"

#define MAX_GPUS 64

struct trun_gpu_util {
  pid_t pid;
  int fd; /* read end, non-blocking */
  int n;
  char buf[4096];
  size_t len;
  char err[256];
  int ended;
};

/* The child: never returns. */
static void sample(int out, const char (*uuids)[96], int n, double interval) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) _exit(0);
  /* The agent's handlers (libuv's signal pipe) are not ours: default dispositions, nothing blocked. */
  static const int sigs[] = {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) signal(sigs[i], SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (dup2(out, 3) < 0) _exit(1);
  trun_closefrom(4);
  const char *lib = getenv("TRUN_NVML_LIBRARY");
  if (!lib || !*lib) lib = "libnvidia-ml.so.1";
  void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) {
    dprintf(3, "E cannot load NVML %s: %s\n", lib, dlerror());
    _exit(0);
  }
  trun_nvmlInit_v2_fn init = (trun_nvmlInit_v2_fn)dlsym(dl, "nvmlInit_v2");
  trun_nvmlDeviceGetHandleByUUID_fn by_uuid =
      (trun_nvmlDeviceGetHandleByUUID_fn)dlsym(dl, "nvmlDeviceGetHandleByUUID");
  trun_nvmlDeviceGetUtilizationRates_fn util =
      (trun_nvmlDeviceGetUtilizationRates_fn)dlsym(dl, "nvmlDeviceGetUtilizationRates");
  if (!init || !by_uuid || !util) {
    dprintf(3, "E NVML %s lacks nvmlInit_v2, nvmlDeviceGetHandleByUUID or nvmlDeviceGetUtilizationRates\n",
            lib);
    _exit(0);
  }
  trun_nvmlReturn_t rc = init();
  if (rc != TRUN_NVML_SUCCESS) {
    dprintf(3, "E nvmlInit_v2 failed (%d)\n", rc);
    _exit(0);
  }
  trun_nvmlDevice_t dev[MAX_GPUS];
  for (int i = 0; i < n; i++)
    if (by_uuid(uuids[i], &dev[i]) != TRUN_NVML_SUCCESS) dev[i] = NULL;
  struct timespec ts = {.tv_sec = (time_t)interval,
                        .tv_nsec = (long)((interval - (double)(time_t)interval) * 1e9)};
  for (;;) {
    char line[MAX_GPUS * 5 + 8];
    int o = snprintf(line, sizeof(line), "U");
    for (int i = 0; i < n; i++) {
      trun_nvmlUtilization_t u = {0, 0};
      int v = dev[i] && util(dev[i], &u) == TRUN_NVML_SUCCESS ? (int)u.gpu : -1;
      o += snprintf(line + o, sizeof(line) - (size_t)o, " %d", v);
    }
    o += snprintf(line + o, sizeof(line) - (size_t)o, "\n");
    if (write(3, line, (size_t)o) != o) _exit(0); /* the agent is gone */
    nanosleep(&ts, NULL);
  }
}

trun_gpu_util *trun_gpu_util_start(const char (*uuids)[96], int n, double interval_s) {
  if (n <= 0) return NULL;
  if (n > MAX_GPUS) n = MAX_GPUS;
  trun_gpu_util *g = calloc(1, sizeof(*g));
  int p[2];
  if (g == NULL || pipe2(p, O_CLOEXEC) < 0) {
    free(g);
    return NULL;
  }
  pid_t pid = fork();
  if (pid == 0) sample(p[1], uuids, n, interval_s < 0.1 ? 0.1 : interval_s);
  close(p[1]);
  if (pid < 0) {
    close(p[0]);
    free(g);
    return NULL;
  }
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  g->pid = pid;
  g->fd = p[0];
  g->n = n;
  return g;
}

/* One complete line (NUL-terminated, no newline): 1 a sample into util, 0 other. */
static int parse(trun_gpu_util *g, char *line, int *util) {
  if (line[0] == 'E') {
    snprintf(g->err, sizeof(g->err), "%s", line[1] ? line + 2 : "the GPU sampler failed");
    g->ended = 1;
    return 0;
  }
  if (line[0] != 'U') return 0;
  char *p = line + 1;
  for (int i = 0; i < g->n; i++) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) return 0;
    util[i] = v < -1 || v > 100 ? -1 : (int)v;
    p = end;
  }
  return 1;
}

int trun_gpu_util_read(trun_gpu_util *g, int *util, char *err, size_t errlen) {
  if (g == NULL) return 0;
  int got = 0;
  while (!g->ended) {
    ssize_t r = read(g->fd, g->buf + g->len, sizeof(g->buf) - 1 - g->len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break; /* EAGAIN: nothing more now */
    if (r == 0) {
      if (!g->err[0]) snprintf(g->err, sizeof(g->err), "the GPU sampler (pid %d) exited", (int)g->pid);
      g->ended = 1;
      break;
    }
    g->len += (size_t)r;
    g->buf[g->len] = '\0';
    char *start = g->buf, *nl;
    while ((nl = strchr(start, '\n')) != NULL) {
      *nl = '\0';
      got |= parse(g, start, util);
      start = nl + 1;
    }
    g->len -= (size_t)(start - g->buf);
    memmove(g->buf, start, g->len);
    if (g->len == sizeof(g->buf) - 1) g->len = 0; /* a line that long is not ours: drop it */
  }
  if (got) return 1;
  if (g->ended) {
    if (err && errlen) snprintf(err, errlen, "%s", g->err);
    return -1;
  }
  return 0;
}

void trun_gpu_util_stop(trun_gpu_util *g) {
  if (g == NULL) return;
  kill(g->pid, SIGKILL);
  /* The agent's SIGCHLD handler may reap it first: ECHILD is fine. */
  while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  close(g->fd);
  free(g);
}
