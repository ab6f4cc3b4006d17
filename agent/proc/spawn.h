/* Starting one worker process: fork + exec, no shell. */
#ifndef TRUN_SPAWN_H
#define TRUN_SPAWN_H

#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

typedef struct {
  char *const *argv; /* argv[0] is looked up in PATH when it has no '/' */
  char *const *envp;
  int stdin_fd;         /* > 0: becomes the child's fd 0; 0 (the default) = /dev/null */
  int stdout_fd;        /* becomes the child's fd 1; -1 = inherit */
  int stderr_fd;        /* becomes the child's fd 2; -1 = inherit */
  int inherit_fd;       /* > 2: a close-on-exec fd the child keeps across exec (warm.h's control socket) */
  const int *close_fds; /* fds the child must not keep (besides O_CLOEXEC ones); may be NULL */
  size_t nclose_fds;
  const char *cpus; /* cpulist the child is pinned to (sched_setaffinity before exec); NULL = inherit */
  const struct rlimit *nofile; /* RLIMIT_NOFILE the child gets back (the agent raised its own); NULL =
                                  inherit */
} trun_spawn_req;

/* Forks a child that: closes every descriptor but 0-2 and req->inherit_fd (whatever the agent opened or
 * inherited), starts its own session (so it leads its process group, like torchrun 2.x's
 * start_new_session), asks the kernel for SIGKILL when the agent dies (PR_SET_PDEATHSIG, and exits at once
 * if the agent is already gone), reads stdin from req->stdin_fd or /dev/null, resets signal dispositions and
 * the signal mask, pins itself to req->cpus when given, then execs. Exec failure is reported back through a
 * close-on-exec pipe. Returns 0 with *pid set, or a negative errno; *what names the failing step ("fork",
 * "exec", ...). */
int trun_spawn(const trun_spawn_req *req, pid_t *pid, const char **what);

#endif
