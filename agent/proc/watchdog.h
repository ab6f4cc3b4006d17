/* A guard process that outlives the agent only to kill its workers: if the agent dies, even by SIGKILL,
 * every worker session it started is killed (process groups, then any process left in those sessions),
 * so workers and their children never outlive the agent; the agent's FIFOs named to it are removed. */
#ifndef TRUN_WATCHDOG_H
#define TRUN_WATCHDOG_H

#include <stdint.h>
#include <sys/types.h>

typedef struct {
  pid_t pid; /* the guard; 0 when none could be started */
  int fd;    /* write end: worker session ids go here */
} trun_watchdog;

/* Forks the guard. 0 or a negative errno (the agent still runs; workers then have PDEATHSIG only). */
int trun_watchdog_start(trun_watchdog *w);
/* Registers a worker session (= its pid: workers lead their own session), with its leader's start time
 * (call it while the leader has not been reaped). */
void trun_watchdog_add(trun_watchdog *w, pid_t sid);
/* The same with the leader's start time given (trun_watchdog_start_time). */
void trun_watchdog_add_at(trun_watchdog *w, pid_t sid, uint64_t start);
/* The agent reaped the session's leader. The guard kills only sessions that are still the workers': a
 * leader alive (or a zombie) with the start time it was registered with, or, once reaped, a session that
 * still holds a process born before the leader was reaped (so its id was never free for reuse). A pid
 * that an unrelated process took over after a worker ended is never killed. */
void trun_watchdog_gone(trun_watchdog *w, pid_t sid);
/* Process pid's start time (/proc/PID/stat field 22, clock ticks since boot); 0 when it is gone. */
uint64_t trun_watchdog_start_time(pid_t pid);
/* The guard removes the file at path (the file-timer FIFO) when the agent is gone, even by SIGKILL, if it
 * is still the file that was there when this was called (same device and inode); at most 8 such files. */
void trun_watchdog_remove_on_exit(trun_watchdog *w, const char *path);
/* Closes the pipe: the guard kills what is left of the registered sessions, removes the files named by
 * trun_watchdog_remove_on_exit that are still there, and exits. */
void trun_watchdog_stop(trun_watchdog *w);

#endif
