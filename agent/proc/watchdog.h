/* A guard process that outlives the agent only to kill its workers: if the agent dies, even by SIGKILL,
 * every worker session it started is killed (process groups, then any process left in those sessions),
 * so workers and their children never outlive the agent. */
#ifndef TRUN_WATCHDOG_H
#define TRUN_WATCHDOG_H

#include <sys/types.h>

typedef struct {
  pid_t pid; /* the guard; 0 when none could be started */
  int fd;    /* write end: worker session ids go here */
} trun_watchdog;

/* Forks the guard. 0 or a negative errno (the agent still runs; workers then have PDEATHSIG only). */
int trun_watchdog_start(trun_watchdog *w);
/* Registers a worker session (= its pid: workers lead their own session). */
void trun_watchdog_add(trun_watchdog *w, pid_t sid);
/* Closes the pipe: the guard kills what is left of the registered sessions and exits. */
void trun_watchdog_stop(trun_watchdog *w);

#endif
