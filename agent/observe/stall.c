#include "stall.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/discover/discover.h"
#include "agent/proc/proc.h"
#include "base/base.h"

typedef struct {
  pid_t pid;
  int running;
  trun_stream *out, *err;
  char log_out[PATH_MAX], log_err[PATH_MAX];
  uint64_t bytes;         /* output seen at the last sign of life */
  unsigned long long cpu; /* CPU ticks at the last sign of life */
  double last_active;     /* monotonic seconds */
} watched;

struct trun_stall {
  uv_loop_t *loop;
  uv_timer_t tick, grace;
  double timeout;
  int signal;
  trun_stall_cb cb;
  void *arg;
  watched *w;
  int n;
  int fired; /* this round's stall was reported (or is in its grace) */
  int pending_rank;
  double pending_idle;
  int closed;
  long hz; /* clock ticks per second of /proc's CPU times */
  /* GPU utilisation (trun_stall_use_gpus): the sampler, its newest sample, whether this tick has one. */
  trun_gpu_util *gpu;
  int ngpu, gpu_threshold, gpu_fresh;
  int gpu_util[TRUN_MAX_GPUS];
};

unsigned long long trun_pgrp_cpu_ticks(const char *proc_root, pid_t pgrp) {
  const char *root = proc_root ? proc_root : "/proc";
  DIR *d = opendir(root);
  if (d == NULL) return 0;
  unsigned long long sum = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char path[PATH_MAX], buf[1024];
    snprintf(path, sizeof(path), "%s/%s/stat", root, e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: fields start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL) continue;
    char state;
    int ppid, grp;
    unsigned long long ut, st, cut, cst;
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime */
    if (sscanf(p + 1, " %c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &state, &ppid, &grp,
               &ut, &st, &cut, &cst) != 7)
      continue;
    if (grp == pgrp) sum += ut + st + cut + cst;
  }
  closedir(d);
  return sum;
}

static uint64_t file_size(const char *path) {
  struct stat st;
  return path[0] && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static void on_grace(uv_timer_t *t) {
  trun_stall *s = t->data;
  s->cb(s->arg, s->pending_rank, s->pending_idle, s->signal, 1);
}

/* Takes the sampler's newest line; a sampler that ended is reported once and no longer asked. */
static void read_gpu(trun_stall *s) {
  char err[256] = "";
  int rc = trun_gpu_util_read(s->gpu, s->gpu_util, err, sizeof(err));
  if (rc >= 0) {
    s->gpu_fresh = rc == 1;
    return;
  }
  trun_warn("hang detection: GPU utilisation is not read (%s); output and CPU time still count", err);
  trun_gpu_util_stop(s->gpu);
  s->gpu = NULL;
  s->gpu_fresh = 0;
}

static void on_tick(uv_timer_t *t) {
  trun_stall *s = t->data;
  if (s->fired) return;
  double now = trun_mono_s();
  if (s->gpu) read_gpu(s);
  for (int i = 0; i < s->n; i++) {
    watched *w = &s->w[i];
    if (!w->running) continue;
    uint64_t bytes =
        trun_stream_bytes(w->out) + trun_stream_bytes(w->err) + file_size(w->log_out) + file_size(w->log_err);
    unsigned long long cpu = trun_pgrp_cpu_ticks(NULL, w->pid);
    double idle = now - w->last_active;
    /* CPU time counts when it is more than background noise (an idle torch process with its helper
     * threads uses about 1% of a CPU): TRUN_STALL_CPU_FRACTION of the time since the last sign of life.
     * A sum that went down (a process of the group ended unreaped) restarts the count. */
    double cpu_s = cpu >= w->cpu ? (double)(cpu - w->cpu) / (double)s->hz : 1e9;
    /* Local rank i drives visible GPU i (mod the GPUs): busy in the newest sample is a sign of life. */
    int gpu_busy = s->gpu_fresh && s->ngpu > 0 && s->gpu_util[i % s->ngpu] >= s->gpu_threshold;
    if (bytes != w->bytes || (idle > 0 && cpu_s >= TRUN_STALL_CPU_FRACTION * idle) || gpu_busy) {
      w->bytes = bytes;
      w->cpu = cpu;
      w->last_active = now;
      continue;
    }
    if (idle < s->timeout) continue;
    s->fired = 1;
    s->pending_rank = i;
    s->pending_idle = idle;
    s->cb(s->arg, i, idle, s->signal, 0);
    if (s->signal > 0) {
      char name[32];
      trun_signal_name(s->signal, name, sizeof(name));
      trun_warn(
          "local rank %d (pid %d) shows no output and no CPU time%s for %.0f s: sending it signal %s, "
          "restarting in %d s",
          i, (int)w->pid, s->gpu ? " and its GPU no utilisation" : "", idle, name,
          TRUN_STALL_GRACE_MS / 1000);
      if (kill(-w->pid, s->signal) < 0) kill(w->pid, s->signal);
      uv_timer_start(&s->grace, on_grace, TRUN_STALL_GRACE_MS, 0);
    } else {
      s->cb(s->arg, i, idle, 0, 1);
    }
    return;
  }
}

trun_stall *trun_stall_new(uv_loop_t *loop, double timeout_s, int signal, trun_stall_cb cb, void *arg) {
  if (timeout_s <= 0) return NULL;
  trun_stall *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->loop = loop;
  s->hz = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
  s->timeout = timeout_s;
  s->signal = signal;
  s->cb = cb;
  s->arg = arg;
  uv_timer_init(loop, &s->tick);
  uv_timer_init(loop, &s->grace);
  s->tick.data = s->grace.data = s;
  return s;
}

/* How often the tick runs: a few times per timeout, at most every 5 s, at least every 100 ms. */
static double tick_s(const trun_stall *s) {
  double every = s->timeout / 4;
  if (every > 5) every = 5;
  if (every < 0.1) every = 0.1;
  return every;
}

void trun_stall_use_gpus(trun_stall *s, const trun_node *node) {
  if (s == NULL || node == NULL || node->ngpu <= 0 || s->gpu) return;
  const char *v = getenv("TRUN_STALL_GPU_UTIL");
  int threshold = v && *v ? atoi(v) : TRUN_STALL_GPU_UTIL_DEFAULT;
  if (threshold <= 0) return;
  char uuids[TRUN_MAX_GPUS][96];
  for (int i = 0; i < node->ngpu; i++) snprintf(uuids[i], sizeof(uuids[i]), "%s", node->gpus[i].uuid);
  s->gpu = trun_gpu_util_start((const char(*)[96])uuids, node->ngpu, tick_s(s));
  if (s->gpu == NULL) {
    trun_warn("hang detection: cannot start the GPU utilisation sampler; output and CPU time still count");
    return;
  }
  s->ngpu = node->ngpu;
  s->gpu_threshold = threshold;
  trun_debug("hang detection: GPU utilisation of %d GPU(s) counts from %d%%", s->ngpu, threshold);
}

void trun_stall_begin(trun_stall *s, int nproc) {
  if (s == NULL) return;
  free(s->w);
  s->w = calloc((size_t)nproc, sizeof(*s->w));
  s->n = s->w ? nproc : 0;
  s->fired = 0;
  uint64_t ms = (uint64_t)(tick_s(s) * 1000);
  uv_timer_start(&s->tick, on_tick, ms, ms);
}

void trun_stall_watch(trun_stall *s, int local_rank, pid_t pid, trun_stream *out, trun_stream *err,
                      const char *log_out, const char *log_err) {
  if (s == NULL || local_rank < 0 || local_rank >= s->n) return;
  watched *w = &s->w[local_rank];
  w->pid = pid;
  w->running = 1;
  w->out = out;
  w->err = err;
  snprintf(w->log_out, sizeof(w->log_out), "%s", log_out ? log_out : "");
  snprintf(w->log_err, sizeof(w->log_err), "%s", log_err ? log_err : "");
  w->last_active = trun_mono_s();
  w->cpu = trun_pgrp_cpu_ticks(NULL, pid);
  w->bytes = 0;
}

void trun_stall_exited(trun_stall *s, int local_rank) {
  if (s == NULL || local_rank < 0 || local_rank >= s->n) return;
  s->w[local_rank].running = 0;
  s->w[local_rank].out = s->w[local_rank].err = NULL;
}

void trun_stall_end(trun_stall *s) {
  if (s == NULL) return;
  uv_timer_stop(&s->tick);
  uv_timer_stop(&s->grace);
  for (int i = 0; i < s->n; i++) s->w[i].running = 0, s->w[i].out = s->w[i].err = NULL;
}

static void on_closed(uv_handle_t *h) {
  trun_stall *s = h->data;
  if (++s->closed == 2) { /* libuv runs close callbacks in no promised order */
    free(s->w);
    free(s);
  }
}

void trun_stall_close(trun_stall *s) {
  if (s == NULL) return;
  trun_stall_end(s);
  trun_gpu_util_stop(s->gpu);
  s->gpu = NULL;
  uv_close((uv_handle_t *)&s->tick, on_closed);
  uv_close((uv_handle_t *)&s->grace, on_closed);
}
