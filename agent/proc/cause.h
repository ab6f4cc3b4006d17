/* Why a worker died, in one line: the kernel's OOM killer (its memory cgroup's counter, the kernel log), a
 * CUDA out-of-memory or NCCL error (its last stderr lines), a GPU Xid, a stall, a hung collective, a process
 * that SIGKILL cannot end (D state), a start-up error, else its signal or exit code. The failure report, the
 * console, events and metrics all say it (docs/supervision.md#causes). */
#ifndef TRUN_CAUSE_H
#define TRUN_CAUSE_H

#include <stddef.h>
#include <sys/types.h>

typedef enum {
  TRUN_CAUSE_NONE = 0,     /* exited 0 */
  TRUN_CAUSE_EXIT,         /* a non-zero exit, nothing more known */
  TRUN_CAUSE_SIGNAL,       /* a signal, nothing more known */
  TRUN_CAUSE_STARTUP,      /* the script could not start: import error, syntax error, no such file */
  TRUN_CAUSE_CUDA_ERROR,   /* a CUDA error (illegal address, launch failure, ...) */
  TRUN_CAUSE_NCCL,         /* an NCCL error (unhandled CUDA error, system error, remote error, ...) */
  TRUN_CAUSE_NCCL_TIMEOUT, /* torch's NCCL watchdog: a collective timed out */
  TRUN_CAUSE_CUDA_OOM,     /* torch's CUDA out of memory */
  TRUN_CAUSE_STALL,        /* --stall-timeout */
  TRUN_CAUSE_OOM_KILL,     /* SIGKILL from the kernel's OOM killer */
  TRUN_CAUSE_GPU_XID,      /* a hardware Xid on its GPU */
  TRUN_CAUSE_STUCK,        /* SIGKILL did not end it (uninterruptible sleep, D state) */
  TRUN_CAUSE_TIMER,        /* torch's file-timer watchdog killed it (agent/observe/ftimer.h) */
  TRUN_CAUSE_HANG,         /* NCCL RAS named it behind in a hung collective (--hang-timeout, agent/hang/) */
  TRUN_CAUSE__COUNT
} trun_cause_kind;

/* The kind's name in events and metrics ("oom_kill", "cuda_oom", ...). */
const char *trun_cause_name(trun_cause_kind k);

/* What a worker's last stderr lines (text, NUL-terminated) say, the last line that says something first:
 * its kind (TRUN_CAUSE_NONE: nothing known) and that line, trimmed, in line[len]. */
trun_cause_kind trun_cause_scan(const char *text, char *line, size_t len);

typedef struct {
  int exit_code;           /* exit status, or -signal */
  const char *stderr_tail; /* its last stderr lines, or NULL */
  const char *message;     /* its error file's message, or NULL */
  long long oom_kills;     /* OOM kills in its memory cgroup since it started, -1: unknown (a hint only: the
                              cgroup holds other processes too) */
  const char *oom_kernel;  /* the kernel's record of the OOM kill of its pid (certain), or NULL */
  const char
      *oom_likely;       /* inside a PID namespace (whose pids the kernel's records do not use): the
                            kernel's record of an OOM kill in its life that it is the likely victim of, NULL */
  int kmsg_err;          /* 0: the kernel log was read; -errno: it could not be (no OOM evidence then) */
  int sent_by_trun;      /* trun itself sent the SIGKILL (its teardown): never taken for memory */
  const char *memcg;     /* its memory cgroup's directory, or NULL */
  long long memcg_limit; /* that cgroup's limit in bytes, -1: none or unknown */
  const char *xid;       /* a hardware Xid on its GPU, or NULL */
  double stalled_s;      /* > 0: --stall-timeout found it stalled */
  const char *stuck;     /* SIGKILL did not end it: its state, or NULL */
  const char *hang;      /* behind in a hung collective (agent_hang.c): what it said, or NULL */
} trun_cause_in;

/* The one-line cause in out[len] and its kind. */
trun_cause_kind trun_cause_describe(const trun_cause_in *in, char *out, size_t len);

/* The Python stack a worker printed on its stderr (text: its last stderr lines, NUL-terminated) when
 * faulthandler dumped it (PYTHONFAULTHANDLER and SIGABRT: "Fatal Python error: ...", then one block of
 * '  File "f", line N in name' lines per thread): the main thread's frames (the block that ends in <module>;
 * else the current thread's; else the first), innermost first, at most max_frames, as
 * "f:N in name <- f:N in name ..." (f without its directories) in out[len]. Returns the frames written, 0
 * when text holds no such dump (out ""). */
int trun_cause_pystack(const char *text, int max_frames, char *out, size_t len);

/* The state letter of /proc/<pid>/stat under proc_root ("/proc") and its wait channel (wchan, "" when
 * unknown) in wchan[len]: 'D' for uninterruptible sleep. -errno when the process is gone or unreadable. */
int trun_proc_state(const char *proc_root, pid_t pid, char *state, char *wchan, size_t len);

#endif
