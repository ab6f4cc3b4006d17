/* Why a worker died, in one line (cause.h). The stderr patterns are torch's and NCCL's own texts: the CUDA
 * caching allocator's "CUDA out of memory. Tried to allocate ..." (raised as torch.cuda.OutOfMemoryError in
 * torch 1.13 - 2.4 and torch.OutOfMemoryError from 2.5), ProcessGroupNCCL's "NCCL error in: ..." with NCCL's
 * result names (ncclUnhandledCudaError, ncclSystemError, ...), its watchdog's "Watchdog caught collective
 * operation timeout", c10's "CUDA error: ...", and Python's start-up failures. Fixtures:
 * tests/fixtures/causes/. */
#include "cause.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"

static const char *const names[TRUN_CAUSE__COUNT] = {[TRUN_CAUSE_NONE] = "none",
                                                     [TRUN_CAUSE_EXIT] = "exit",
                                                     [TRUN_CAUSE_SIGNAL] = "signal",
                                                     [TRUN_CAUSE_STARTUP] = "startup_error",
                                                     [TRUN_CAUSE_CUDA_ERROR] = "cuda_error",
                                                     [TRUN_CAUSE_NCCL] = "nccl_error",
                                                     [TRUN_CAUSE_NCCL_TIMEOUT] = "nccl_timeout",
                                                     [TRUN_CAUSE_CUDA_OOM] = "cuda_oom",
                                                     [TRUN_CAUSE_STALL] = "stall",
                                                     [TRUN_CAUSE_OOM_KILL] = "oom_kill",
                                                     [TRUN_CAUSE_GPU_XID] = "gpu_xid",
                                                     [TRUN_CAUSE_STUCK] = "stuck",
                                                     [TRUN_CAUSE_TIMER] = "timer_expired",
                                                     [TRUN_CAUSE_HANG] = "hang"};

const char *trun_cause_name(trun_cause_kind k) {
  return k >= 0 && k < TRUN_CAUSE__COUNT ? names[k] : "unknown";
}

/* Checked in this order on each line: the more precise kind first (an NCCL error caused by a CUDA OOM says
 * both). */
static const struct {
  trun_cause_kind kind;
  const char *text;
} patterns[] = {
    {TRUN_CAUSE_CUDA_OOM, "CUDA out of memory"},
    {TRUN_CAUSE_CUDA_OOM, "OutOfMemoryError"},
    {TRUN_CAUSE_CUDA_OOM, "CUDA error: out of memory"},
    {TRUN_CAUSE_CUDA_OOM, "CUBLAS_STATUS_ALLOC_FAILED"},
    {TRUN_CAUSE_NCCL_TIMEOUT, "Watchdog caught collective operation timeout"},
    {TRUN_CAUSE_NCCL_TIMEOUT, "Some NCCL operations have failed or timed out"},
    {TRUN_CAUSE_NCCL, "NCCL error"},
    {TRUN_CAUSE_NCCL, "ncclUnhandledCudaError"},
    {TRUN_CAUSE_NCCL, "ncclSystemError"},
    {TRUN_CAUSE_NCCL, "ncclInternalError"},
    {TRUN_CAUSE_NCCL, "ncclInvalidUsage"},
    {TRUN_CAUSE_NCCL, "ncclRemoteError"},
    {TRUN_CAUSE_NCCL, "NCCL communicator was aborted"},
    {TRUN_CAUSE_CUDA_ERROR, "CUDA error: "},
    {TRUN_CAUSE_STARTUP, "ModuleNotFoundError: "},
    {TRUN_CAUSE_STARTUP, "ImportError: "},
    {TRUN_CAUSE_STARTUP, "SyntaxError: "},
    {TRUN_CAUSE_STARTUP, "IndentationError: "},
    {TRUN_CAUSE_STARTUP, "can't open file"},
    {TRUN_CAUSE_STARTUP, "No module named"},
};

/* The kind one line says (line[0..n), not NUL-terminated), NONE for nothing. */
static trun_cause_kind line_kind(const char *line, size_t n) {
  char buf[1024];
  if (n >= sizeof(buf)) n = sizeof(buf) - 1;
  memcpy(buf, line, n);
  buf[n] = '\0';
  for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++)
    if (strstr(buf, patterns[i].text)) return patterns[i].kind;
  return TRUN_CAUSE_NONE;
}

/* line[0..n) without surrounding blanks, at most len - 1 bytes, into out. */
static void put_trimmed(const char *line, size_t n, char *out, size_t len) {
  while (n > 0 && (*line == ' ' || *line == '\t')) line++, n--;
  while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r')) n--;
  if (len == 0) return;
  if (n >= len) n = len - 1;
  memcpy(out, line, n);
  out[n] = '\0';
}

trun_cause_kind trun_cause_scan(const char *text, char *line, size_t len) {
  if (len) line[0] = '\0';
  if (text == NULL) return TRUN_CAUSE_NONE;
  const char *end = text + strlen(text);
  while (end > text) {
    const char *e = end;
    if (e[-1] == '\n') e--;
    const char *b = e;
    while (b > text && b[-1] != '\n') b--;
    trun_cause_kind k = line_kind(b, (size_t)(e - b));
    if (k != TRUN_CAUSE_NONE) {
      put_trimmed(b, (size_t)(e - b), line, len);
      return k;
    }
    end = b;
  }
  return TRUN_CAUSE_NONE;
}

/* The kernel's OOM record up to the anonymous resident size (the rest is page-table detail). */
static int kernel_len(const char *k) {
  const char *cut = strstr(k, ", file-rss");
  return (int)(cut ? (size_t)(cut - k) : strlen(k));
}

/* "256 MiB" */
static void human_bytes(long long b, char *out, size_t len) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  snprintf(out, len, v == (double)(long long)v ? "%.0f %s" : "%.1f %s", v, unit[u]);
}

/* One '  File "f", line N in name' line at p (up to e): 1 with its parts. */
static int frame_line(const char *p, const char *e, char *file, size_t flen, long *line, char *name,
                      size_t nlen) {
  static const char pre[] = "  File \"";
  if ((size_t)(e - p) < sizeof(pre) || strncmp(p, pre, sizeof(pre) - 1) != 0) return 0;
  const char *f = p + sizeof(pre) - 1, *q = memchr(f, '"', (size_t)(e - f));
  if (q == NULL || (size_t)(e - q) < 9 || strncmp(q, "\", line ", 8) != 0) return 0;
  char *end;
  *line = strtol(q + 8, &end, 10);
  if (end == q + 8 || end >= e || strncmp(end, " in ", 4) != 0 || end + 4 >= e) return 0;
  const char *base = f;
  for (const char *c = f; c < q; c++)
    if (*c == '/') base = c + 1;
  snprintf(file, flen, "%.*s", (int)(q - base), base);
  snprintf(name, nlen, "%.*s", (int)(e - end - 4), end + 4);
  return 1;
}

int trun_cause_pystack(const char *text, int max_frames, char *out, size_t len) {
  if (len) out[0] = '\0';
  const char *dump = NULL;
  for (const char *p = text; p && (p = strstr(p, "Fatal Python error: ")) != NULL; p++) dump = p;
  if (dump == NULL || len == 0 || max_frames <= 0) return 0;
  /* The blocks: [start, end) of each thread's frames; which one ends in <module>, which is current. */
  const char *best = NULL, *current = NULL, *first = NULL;
  const char *block = NULL;
  int block_current = 0;
  char file[256], name[128];
  long line;
  for (const char *p = dump; *p;) {
    const char *e = strchr(p, '\n');
    if (e == NULL) e = p + strlen(p);
    if (strncmp(p, "Thread 0x", 9) == 0 || strncmp(p, "Current thread 0x", 17) == 0) {
      block = e;
      block_current = p[0] == 'C';
      if (first == NULL) first = block;
      if (block_current && current == NULL) current = block;
    } else if (block && frame_line(p, e, file, sizeof(file), &line, name, sizeof(name))) {
      if (strcmp(name, "<module>") == 0 && best == NULL) best = block;
    } else {
      block = NULL;
    }
    p = *e ? e + 1 : e;
  }
  const char *from = best ? best : current ? current : first;
  if (from == NULL) return 0;
  int n = 0;
  size_t at = 0;
  for (const char *p = *from ? from + 1 : from; *p && n < max_frames;) {
    const char *e = strchr(p, '\n');
    if (e == NULL) e = p + strlen(p);
    if (!frame_line(p, e, file, sizeof(file), &line, name, sizeof(name))) break;
    int w = snprintf(out + at, len - at, "%s%s:%ld in %s", n ? " <- " : "", file, line, name);
    if (w < 0 || (size_t)w >= len - at) {
      out[at] = '\0';
      break;
    }
    at += (size_t)w;
    n++;
    p = *e ? e + 1 : e;
  }
  return n;
}

trun_cause_kind trun_cause_describe(const trun_cause_in *in, char *out, size_t len) {
  char line[512], sig[32], lim[64] = "";
  if (len == 0) return TRUN_CAUSE_NONE;
  out[0] = '\0';
  if (in->stuck) {
    snprintf(out, len, "SIGKILL did not end it: %s (a driver or file system hang; the node needs a look)",
             in->stuck);
    return TRUN_CAUSE_STUCK;
  }
  if (in->xid) {
    snprintf(out, len, "%s", in->xid);
    return TRUN_CAUSE_GPU_XID;
  }
  if (in->hang) { /* the teardown's signal ended it: the hang is why */
    snprintf(out, len, "%s", in->hang);
    return TRUN_CAUSE_HANG;
  }
  /* Only the kernel's own record of the kill is evidence: the cgroup's counter also counts its other
   * processes, and trun's own SIGKILL (the teardown) is never the OOM killer's. */
  const char *rec = in->oom_kernel ? in->oom_kernel : in->oom_likely;
  if (in->exit_code == -SIGKILL && !in->sent_by_trun && rec) {
    if (in->memcg_limit >= 0) {
      char h[32];
      human_bytes(in->memcg_limit, h, sizeof(h));
      snprintf(lim, sizeof(lim), ", limit %s", h);
    }
    int n =
        snprintf(out, len,
                 "%skilled by the kernel's OOM killer (out of memory%s%s%s): raise the memory limit of the "
                 "pod or job, or use less host memory per worker",
                 in->oom_kernel ? "" : "likely ", in->memcg ? " in memory cgroup " : "",
                 in->memcg ? in->memcg : "", lim);
    if (n > 0 && (size_t)n < len && !in->oom_kernel) /* inside a PID namespace: matched by time, not pid */
      n += snprintf(out + n, len - (size_t)n,
                    " (inside a PID namespace the kernel's record names the host's pid: matched by the time "
                    "of its death)");
    if (n > 0 && (size_t)n < len) /* up to its resident size: "..., anon-rss:259156kB" */
      snprintf(out + n, len - (size_t)n, "; kernel: %.*s", kernel_len(rec), rec);
    return TRUN_CAUSE_OOM_KILL;
  }
  if (in->stalled_s > 0) {
    snprintf(out, len, "stalled for %.0f s (no output, no CPU time; --stall-timeout)", in->stalled_s);
    return TRUN_CAUSE_STALL;
  }
  trun_cause_kind k = trun_cause_scan(in->stderr_tail, line, sizeof(line));
  if (k == TRUN_CAUSE_NONE) k = trun_cause_scan(in->message, line, sizeof(line));
  static const char *const what[TRUN_CAUSE__COUNT] = {
      [TRUN_CAUSE_STARTUP] = "the script failed at start-up",
      [TRUN_CAUSE_CUDA_ERROR] = "CUDA error",
      [TRUN_CAUSE_NCCL] = "NCCL error",
      [TRUN_CAUSE_NCCL_TIMEOUT] = "an NCCL collective timed out (torch's watchdog)",
      [TRUN_CAUSE_CUDA_OOM] = "CUDA out of memory on its GPU"};
  if (k != TRUN_CAUSE_NONE) {
    snprintf(out, len, "%s: %s", what[k], line);
    return k;
  }
  if (in->exit_code < 0) {
    trun_signal_name(-in->exit_code, sig, sizeof(sig));
    const char *why = "";
    char more[256] = "";
    if (in->exit_code == -SIGKILL && in->sent_by_trun)
      why = "; sent by trun (the workers' stop, after --shutdown-timeout)";
    else if (in->exit_code == -SIGKILL && in->oom_kills == 0)
      why = "; no OOM kill recorded in its memory cgroup: another process sent it";
    else if (in->exit_code == -SIGKILL && in->oom_kills > 0 && in->kmsg_err == 0)
      why =
          "; its memory cgroup counted an OOM kill while it ran, but the kernel's records name another "
          "process: another process sent it";
    else if (in->exit_code == -SIGKILL && in->oom_kills > 0) {
      snprintf(more, sizeof(more),
               "; its memory cgroup counted %lld OOM kill%s while it ran, but the kernel log cannot be read "
               "(%s) to say whether it was this process: possibly the OOM killer",
               in->oom_kills, in->oom_kills == 1 ? "" : "s", strerror(-in->kmsg_err));
      why = more;
    }
    snprintf(out, len, "killed by %s (signal %d)%s", sig, -in->exit_code, why);
    return TRUN_CAUSE_SIGNAL;
  }
  if (in->exit_code == 0) return TRUN_CAUSE_NONE;
  snprintf(out, len, "exited with code %d", in->exit_code);
  return TRUN_CAUSE_EXIT;
}

int trun_proc_state(const char *proc_root, pid_t pid, char *state, char *wchan, size_t len) {
  char path[512], buf[1024];
  if (len) wchan[0] = '\0';
  snprintf(path, sizeof(path), "%s/%d/stat", proc_root, (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  int e = errno;
  close(fd);
  if (n < 0) return -e;
  buf[n] = '\0';
  /* "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'. */
  char *rp = strrchr(buf, ')');
  if (rp == NULL || rp[1] != ' ' || rp[2] == '\0') return -EBADMSG;
  *state = rp[2];
  snprintf(path, sizeof(path), "%s/%d/wchan", proc_root, (int)pid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n > 0 && buf[0] != '0') {
      buf[n] = '\0';
      put_trimmed(buf, strcspn(buf, "\n"), wchan, len);
    }
  }
  return 0;
}
