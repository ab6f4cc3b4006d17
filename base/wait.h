/* Waits that say what they wait for (wait.c): a wait of any of trun's modules that lasts says so on stderr
 * once it has lasted a second, then after 5, 15 and 45 s and every 60 s from then on: what it waits for,
 * what it has, the cause of the last failure and the time left before its time-out. Each of those reports,
 * and the end of a wait that reported, also goes to the wait's hook (the agent: the "waiting" event and the
 * trun_wait_seconds metric). The rendezvous's waits (agent/rdzv) are the first users. */
#ifndef TRUN_BASE_WAIT_H
#define TRUN_BASE_WAIT_H

#include <stddef.h>

typedef struct trun_wait_info {
  const char *kind;  /* "store", "round", "last_call", "spare", "round_end", "exit_barrier", "workers_stop" */
  const char *what;  /* "the rendezvous store at HOST:PORT", "the other nodes of rendezvous round 0" */
  const char *have;  /* "1 of 2 nodes joined: node 0 (host-a); missing node ranks: 1" ("": nothing to say) */
  const char *cause; /* the last failure ("": none) */
  double waited_s;
  double left_s; /* before the wait's time-out; < 0: none */
  int done;      /* the wait ended: the hook's last call for it */
} trun_wait_info;
typedef void (*trun_wait_hook)(void *arg, const trun_wait_info *w);

typedef struct trun_wait {
  char kind[24];
  char what[800];
  char have[768];
  char cause[400];
  char timeout_key[48];         /* the setting that bounds it ("join_timeout"; "": none named) */
  double start, deadline, next; /* monotonic seconds; deadline 0: no time-out */
  int reports;
  int active;
  trun_wait_hook hook;
  void *hook_arg;
} trun_wait;

/* Starts a wait (timeout_s <= 0: none) whose reports go to hook (may be NULL). */
void trun_wait_begin(trun_wait *w, const char *kind, double timeout_s, const char *timeout_key,
                     trun_wait_hook hook, void *hook_arg, const char *what_fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* 1 when a report is due (the caller may then refresh have / cause and call trun_wait_report). */
int trun_wait_due(const trun_wait *w);
/* The report: one line on stderr (info level) and the hook. */
void trun_wait_report(trun_wait *w);
/* The wait is over: the hook hears of it (done) when it had reported. */
void trun_wait_end(trun_wait *w);
/* The line a report prints, into out (for tests and the status view). */
void trun_wait_line(const trun_wait *w, double now, char *out, size_t len);

#endif
