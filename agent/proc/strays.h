/* Processes started under the workers that left their worker's session: a child in a session of its own
 * (setsid), a double-forked daemon. The guard kills worker sessions (watchdog.h); these are in none of them.
 * The agent is their subreaper (PR_SET_CHILD_SUBREAPER): an orphan comes back to it instead of init, so the
 * job is among the agent's descendants, which a look reads through /proc/PID/task/TID/children where the
 * kernel has it (else every process of /proc). A look finds them by their parent chain (a worker's
 * descendant, or a process the agent inherited that is not one of its own helpers) and registers their
 * sessions with the guard, so that they die with the agent even on SIGKILL; at the end of a round and at stop
 * they are killed and reaped. Part of proc (proc.h). */
#ifndef TRUN_STRAYS_H
#define TRUN_STRAYS_H

#include <stddef.h>
#include <sys/types.h>

#include "watchdog.h"

/* The agent's own children that are not the job's (the guard, the --warm-start pool, the local preflight)
 * and the running workers: what one look at /proc goes by. */
typedef struct {
  const pid_t *workers; /* the running workers (each leads its own session, registered with the guard) */
  size_t nworkers;
  const pid_t *keep; /* the agent's helper children in sessions of their own: never the job's */
  size_t nkeep;
} trun_strays_view;

typedef struct trun_strays trun_strays;

/* proc_root: "/proc" (a fixture tree in tests); guard: where sessions are registered (may be NULL). */
trun_strays *trun_strays_new(const char *proc_root, trun_watchdog *guard);
/* One look: registers with the guard the session of every process of the job (a descendant of a worker, or
 * a process the agent inherited: its parent is the agent, it is not in the agent's session and not one of
 * v->keep; and their descendants) that is neither a worker's session nor registered already. Returns how
 * many sessions were new (each said at debug level), or -errno when /proc cannot be read. */
int trun_strays_scan(trun_strays *s, const trun_strays_view *v);
/* With no worker running: SIGKILL to every process of the job that is left (the same rule, and every
 * process of a session registered so far), again until none is left or 5 s passed, reaping the agent's own
 * children among them. Forgets the registered sessions. Returns how many processes it killed. */
int trun_strays_kill(trun_strays *s, const trun_strays_view *v);
/* What the last look read: *rows processes; 1 when only the agent and its descendants (the kernel lists
 * each thread's children and the agent is the subreaper of the job's orphans), 0 when every process. */
int trun_strays_last_look(const trun_strays *s, size_t *rows);
void trun_strays_free(trun_strays *s);

#endif
