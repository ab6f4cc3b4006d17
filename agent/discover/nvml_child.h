/* A short-lived NVML child that reports in lines (private to agent/discover): the GPU utilisation sampler
 * (gpu_util.c) and the Xid watcher (xid_watch.c) each run their NVML calls in a forked process that closes
 * every inherited descriptor but the write end of a pipe (its fd 3), restores the default signal
 * dispositions, dies with the agent (PR_SET_PDEATHSIG) and writes one line per report; the agent reads the
 * pipe without blocking. The agent never maps NVML itself. */
#ifndef TRUN_NVML_CHILD_H
#define TRUN_NVML_CHILD_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
  pid_t pid;
  int fd; /* read end, non-blocking */
  char buf[4096];
  size_t len;
  int ended;     /* an "E reason" line or EOF */
  char err[256]; /* why it ended */
} trun__nvml_child;

/* Forks the child: body(arg) runs there with the pipe on fd 3 and must not return (it _exits). 0, or -1
 * (no pipe, no process: errno says why). */
int trun__nvml_child_start(trun__nvml_child *c, void (*body)(void *arg), void *arg);
/* Reads what the child wrote and calls on_line for each complete line (NUL-terminated, no newline) but the
 * "E reason" line a child writes before it gives up. 0 when the child still runs, -1 once it ended (that
 * line, or EOF: "<what> (pid N) exited"): c->err says why. Never blocks. */
int trun__nvml_child_read(trun__nvml_child *c, const char *what, void (*on_line)(void *arg, char *line),
                          void *arg);
/* SIGKILLs and reaps the child, closes the pipe. */
void trun__nvml_child_stop(trun__nvml_child *c);
/* In the child: loads NVML (TRUN_NVML_LIBRARY or libnvidia-ml.so.1). The handle, or NULL after writing
 * "E cannot load NVML <lib>: <why>" on fd 3; *lib is the name tried. */
void *trun__nvml_child_dlopen(const char **lib);

#endif
