/* The child supervisor's loop side, for a process that starts children and waits for them on a libuv loop
 * (the hostfile launcher's rsh children; the agent's workers have their own in agent.c for now): every
 * child reaped on SIGCHLD (waitpid(-1): an orphan re-parented to a subreaper is reaped too) and handed to
 * on_exit; the stop signals caught and handed to on_signal (the caller forwards them: to process groups,
 * as lines on a pipe, ...); one grace timer (on_grace, e.g. "stop whoever still runs"); SIGPIPE ignored.
 * The caller keeps its own table of children and what each exit means. */
#ifndef TRUN_PROC_SUPER_H
#define TRUN_PROC_SUPER_H

#include <sys/types.h>
#include <uv.h>

#define TRUN_SUPER_MAX_SIGNALS 8

typedef struct trun_super trun_super;

typedef struct {
  void (*on_exit)(void *arg, pid_t pid, int status); /* status as waitpid gives it */
  void (*on_signal)(void *arg, int sig);             /* NULL: signals are not caught */
  void (*on_grace)(void *arg);                       /* the grace timer ran out */
  void *arg;
  const int *signals; /* the signals to catch, nsignals at most TRUN_SUPER_MAX_SIGNALS */
  int nsignals;
} trun_super_opts;

/* Starts catching SIGCHLD and o's signals on loop. 0 or a negative libuv error (UV_EINVAL: too many
 * signals); *out set on success. */
int trun_super_start(uv_loop_t *loop, const trun_super_opts *o, trun_super **out);
/* Starts (or restarts) the grace timer: on_grace in ms milliseconds; stop cancels it. */
void trun_super_grace(trun_super *s, uint64_t ms);
void trun_super_grace_stop(trun_super *s);
/* Stops catching and closes the handles; s is freed once the loop has run their close callbacks. */
void trun_super_close(trun_super *s);

#endif
