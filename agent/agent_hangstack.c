/* The Python stack of a hang's culprit (agent/agent_int.h): a rank that hangs outside a collective (a sleep,
 * a loop in Python, a wait on I/O) shows nothing in NCCL's answers nor in torch's flight recorder, so before
 * the round is torn down for it (--hang-timeout) the agent asks the culprit itself: the workers run with
 * PYTHONFAULTHANDLER=1 (unless the user set it), and SIGABRT makes Python's faulthandler print every
 * thread's stack on the worker's stderr, which the agent captures like all its output; the failure report
 * then carries the frames (trun_cause_pystack). Only this round's own running workers are signalled, by
 * their pid; their core dumps are turned off first (prlimit), so that a large CUDA process does not write
 * gigabytes on its way out. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "agent_int.h"

int trun__agent_hang_stack_env(agent *a) {
  if (trun_env_get(a->env, "PYTHONFAULTHANDLER")) return 0; /* the user's choice */
  if (trun_strv_setenv(&a->env, "PYTHONFAULTHANDLER", "1") < 0) {
    trun_error("out of memory setting PYTHONFAULTHANDLER");
    return -1;
  }
  return 0;
}

int trun__agent_hang_stack_ask(agent *a, worker *w) {
  const char *fh = trun_env_get(a->env, "PYTHONFAULTHANDLER");
  if (w == NULL || !w->running || w->pid <= 0 || fh == NULL || fh[0] == '\0' ||
      (a->cfg->no_python && !a->cfg->run_path))
    return 0; /* no Python of ours that would print it */
  const struct rlimit none = {0, 0};
  if (prlimit(w->pid, RLIMIT_CORE, &none, NULL) < 0) {
    trun_debug("hang: prlimit(%d, RLIMIT_CORE): %s: no stack asked of it", (int)w->pid, strerror(errno));
    return 0;
  }
  if (kill(w->pid, SIGABRT) < 0) {
    trun_debug("hang: kill(%d, SIGABRT): %s", (int)w->pid, strerror(errno));
    return 0;
  }
  trun_info("hang: asked rank %d (pid %d) for its Python stack (SIGABRT, PYTHONFAULTHANDLER)",
            trun_rdzv_info(a->rdzv)->base_rank + w->local_rank, (int)w->pid);
  return 1;
}
