/* Internals of the agent shared by its files (libuv's convention: trun__ names are private): agent.c (life
 * cycle, rounds, signals, membership, multi-node ends), agent_workers.c (a worker's log files, output
 * streams and process), agent_failures.c (failure records, the report, the announcement to other nodes). */
#ifndef TRUN_AGENT_INT_H
#define TRUN_AGENT_INT_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <uv.h>

#include "agent.h"
#include "client.h"
#include "discover.h"
#include "obs.h"
#include "output.h"
#include "rdzv.h"
#include "stall.h"
#include "watchdog.h"

/* OUT_MEMBERSHIP: c10d nodes wait to join; the workers restart into a new world without using a restart. */
typedef enum {
  OUT_NONE = 0,
  OUT_SUCCESS,
  OUT_FAILED,
  OUT_SIGNALED,
  OUT_REMOTE_FAILED,
  OUT_MEMBERSHIP
} outcome;

typedef struct agent agent;

typedef struct {
  agent *a;
  int local_rank;
  pid_t pid;
  int running;
  int status; /* exit code, or -signal */
  double exit_time;
  int torn_down; /* stopped by the agent, not failed by itself */
  trun_stream *out, *err;
  char error_file[PATH_MAX];
  char log_out[PATH_MAX], log_err[PATH_MAX];
  double stalled_s; /* --stall-timeout found it stalled for this long (0: not) */
} worker;

struct agent {
  const trun_config *cfg;
  uv_loop_t *loop;
  char **env; /* the agent's environment as workers inherit it */
  int nproc;
  worker *w;
  int running; /* workers not yet reaped */
  int open_streams;
  int phase_stopping;
  outcome result;
  int first_failed; /* local rank of the first failure, -1 */
  int watch_lost;   /* the failure-watch connection was lost: reconnect before the next round */
  int signal_seen;  /* the terminating signal the agent got, 0 */
  int restart_count;
  int round;
  trun_rdzv rdzv;
  trun_node *node; /* what discovery found, once per agent (GPUs in a short-lived child) */
  trun_watchdog guard;
  char run_dir[PATH_MAX];
  int files_off; /* --log-dir /dev/null */
  char host[256];
  uv_signal_t sigchld;
  uv_signal_t sigs[TRUN_MAX_SIGNALS];
  int nsigs;
  /* --watch-stdin: the launcher's session (agent.c, watch_stdin). */
  uv_poll_t stdin_poll;
  int stdin_on, stdin_hello;
  char stdin_line[64];
  size_t stdin_len;
  uv_timer_t kill_timer;
  uv_timer_t drain_timer;
  uv_timer_t member_timer; /* c10d: heartbeats and the wait list while the workers run */
  /* Multi-node: a thread waits for the round's end key on its own connection. */
  uv_async_t remote;
  pthread_t watcher;
  int watcher_on;
  trun_client *watch_client;
  char end_value[64];
  int end_seen;         /* the watcher delivered end_value (set by the watcher thread) */
  int end_round;        /* the round whose end the watcher delivered */
  int in_round;         /* workers of this round may still run: remote ends act only then */
  trun_obs *obs;        /* events and metrics (agent/obs.h) */
  trun_stall *stall;    /* --stall-timeout (agent/stall.h), NULL when off */
  struct rlimit nofile; /* RLIMIT_NOFILE trun was started with, given back to workers */
  int nofile_raised;    /* the agent raised its soft limit to the hard one */
};

/* Wall-clock seconds (exit and failure timestamps, as torchelastic's). */
double trun__agent_now(void);
/* snprintf for paths: -ENAMETOOLONG instead of a silently cut path. */
int trun__agent_pathf(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* mkdir -p: 0, or -errno. */
int trun__agent_mkdirs(const char *path);
/* A worker's output stream reached EOF (agent.c: the round may end). arg: the agent. */
void trun__agent_on_stream_eof(void *arg);

/* agent_workers.c: starts local rank w->local_rank of this round, its files under attempt_dir. 0, or -1
 * (said on stderr). */
int trun__agent_start_worker(agent *a, worker *w, const char *attempt_dir);

/* agent_failures.c: the round's failures to events and metrics; final: also the job's failure report (on
 * node rank 0 with the other nodes' root causes) and $TORCHELASTIC_ERROR_FILE. */
void trun__agent_report_failures(agent *a, int final);
/* Publishes this node's failure (its root cause, or that the agent was stopped by a signal) and ends the
 * round for every node: "fail:<group rank>" in the round's end key. */
void trun__agent_announce_failure(agent *a);

#endif
