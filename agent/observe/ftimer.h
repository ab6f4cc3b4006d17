/* torch's file-timer watchdog (torch.distributed.elastic.timer.FileTimerServer) on the agent's libuv loop.
 * Workers' FileTimerClients (torch 1.13 and 2.x alike) write one JSON object per line into a FIFO:
 * {"version": 1, "pid": P, "scope_id": "S", "expiration_time": T, "signal": N}; T is a wall-clock time
 * (time.time()), a negative T releases (pid, scope). A (pid, scope) whose time passes is handed to the
 * callback with the first expired signal > 0 (by expiration time) and every timer of that pid is dropped,
 * as torch's server does; timers of pids that no longer exist are dropped without a call. Requests for pids
 * that the agent's check refuses (not its workers) are dropped when they arrive. Malformed lines
 * are logged (a few) and skipped; at most TRUN_FTIMER_MAX_TIMERS timers are kept; one wake-up of the loop
 * reads at most 64 KiB, so a writer that never stops cannot hold the loop. */
#ifndef TRUN_FTIMER_H
#define TRUN_FTIMER_H

#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

/* torch's clients refuse requests longer than PIPE_BUF (a FIFO write of at most that is atomic). */
#define TRUN_FTIMER_MAX_LINE 4096
#define TRUN_FTIMER_MAX_TIMERS 4096

typedef struct {
  pid_t pid;
  char *scope; /* malloc'ed */
  double expiration_time;
  int signal;
} trun_ftimer_req;

/* One request line (without its newline). 0, or -1 with why in err (r untouched). */
int trun_ftimer_parse(const char *line, size_t len, trun_ftimer_req *r, char *err, size_t errlen);

typedef struct trun_ftimer trun_ftimer;
/* pid's scope expired; signal > 0: what to send it (the callback sends it); 0: the client asked for none. */
typedef void (*trun_ftimer_cb)(void *arg, pid_t pid, const char *scope, int signal);

/* Makes the FIFO at path (an existing file there is replaced, as torch does; mode 0600) and reads it on
 * loop. NULL with why in err. */
trun_ftimer *trun_ftimer_open(uv_loop_t *loop, const char *path, trun_ftimer_cb cb, void *arg, char *err,
                              size_t errlen);
/* Whether pid may hold timers (the agent: a process of this node's running workers or their process
 * groups). Requests for other pids are refused when they arrive: they take no place in the table and never
 * expire; the first few are said, then a count at most every 10 s. */
typedef int (*trun_ftimer_accept_cb)(void *arg, pid_t pid);
/* Sets the check (called with the open's arg); NULL (the default) accepts every pid. */
void trun_ftimer_set_accept(trun_ftimer *t, trun_ftimer_accept_cb accept);
/* Requests refused so far. */
unsigned long trun_ftimer_refused(const trun_ftimer *t);
const char *trun_ftimer_path(const trun_ftimer *t);
/* Forgets every timer (a new round: torch starts a fresh server per round). */
void trun_ftimer_clear(trun_ftimer *t);
size_t trun_ftimer_count(const trun_ftimer *t);
/* Wall-clock seconds of the watchdog's last pass (torch's get_last_progress_time). */
double trun_ftimer_last_progress(const trun_ftimer *t);
/* Removes the FIFO and closes the handles (run the loop afterwards to free them). NULL is fine. */
void trun_ftimer_close(trun_ftimer *t);

#endif
