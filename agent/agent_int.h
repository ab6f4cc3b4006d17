/* Internals of the agent shared by its files (libuv's convention: trun__ names are private): agent.c (life
 * cycle, rounds(), a round's start and supervision), agent_stop.c (the round's stop mechanics and the stop
 * request), agent_round.c (a round's end with the job and its result), agent_workers.c (a worker's log
 * files, output streams and process), agent_failures.c (failure records, the report, the announcement to
 * other nodes), agent_health.c (the health gate, Xids, leaving unhealthy), agent_exclude.c,
 * agent_torchwatch.c (torch's file-timer watchdog and health-check port), agent_hang.c (collective hangs from
 * NCCL RAS), agent_fr.c, agent_hangstack.c, agent_rasport.c (the job's own RAS port), agent_preflight.c,
 * agent_warm.c, agent_stdin.c (--watch-stdin), agent_wait.c, agent_dryrun.c (--dry-run). Who owns which part
 * of struct agent is written there; docs/architecture.md#inside-the-agent has the table. Calls go one way (no
 * file calls back into one that calls it: scripts/check-layers.py --calls); a watcher that must end the round
 * calls agent_stop.c. */
#ifndef TRUN_AGENT_INT_H
#define TRUN_AGENT_INT_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <uv.h>

#include "agent.h"
#include "agent/discover/discover.h"
#include "agent/hang/hang.h"
#include "agent/nccl/nccl.h"
#include "agent/observe/observe.h"
#include "agent/proc/proc.h"
#include "agent/rdzv/rdzv.h"
#include "base/base.h"

/* What a round was (run_round's result; rounds() switches on it). OUT_MEMBERSHIP: c10d nodes wait to join;
 * the workers restart into a new world without using a restart. */
typedef enum {
  OUT_NONE = 0,
  OUT_SUCCESS,
  OUT_FAILED,        /* this node's workers failed (or a stall, a hang, a hardware Xid stopped them) */
  OUT_SIGNALED,      /* a stop signal (or --watch-stdin's) stopped the agent */
  OUT_REMOTE_FAILED, /* another node failed first, a node of the round rejoined, or the store was lost */
  OUT_MEMBERSHIP,
  OUT_PEER_LOST, /* the liveness found a node of the round gone (TRUN_RDZV_END_NODE_LOST): counted like a
                    failure */
  OUT_CUT_OFF /* this node lost the rendezvous store for the liveness window: it exits (TRUN_EXIT_CUT_OFF) */
} trun__round_kind;

/* What stopped a round on this node, as the stop request names it. */
typedef enum {
  TRUN__CAUSE_NONE = 0,
  TRUN__CAUSE_EXIT,      /* a worker exited (all with 0: the round's success) */
  TRUN__CAUSE_START,     /* a worker could not start */
  TRUN__CAUSE_STALL,     /* --stall-timeout */
  TRUN__CAUSE_HANG,      /* --hang-timeout (NCCL RAS, the flight recorder) */
  TRUN__CAUSE_UNHEALTHY, /* a hardware Xid on a worker's GPU */
  TRUN__CAUSE_SIGNAL,    /* a stop signal to the agent or on --watch-stdin */
  TRUN__CAUSE_END,       /* the rendezvous's end of the round (another node failed, left, the store lost) */
  TRUN__CAUSE_NEWS,      /* c10d: nodes wait to join, or a node of the round rejoined */
  TRUN__CAUSE_CUT_OFF    /* this node lost the rendezvous store (liveness) */
} trun__round_cause;

/* A round's result: decided once, by trun__round_decide (agent_round.c), from what the round saw (the stop
 * request below, the rendezvous's end of the round, the announcements). */
typedef struct {
  trun__round_kind kind;
  int culprit;             /* local rank of this node's root cause, -1 none */
  trun__round_cause cause; /* what stopped the round on this node */
  int node;                /* the node rank the round's end names (another node's failure, a lost node), -1 */
} trun__round_result;

/* A round's fate, the one value trun__round_decide reads: how the round ended on this node and
 * for the job. `here` is the stop request (a->stop.req): every ending this node finds itself, through
 * trun__round_stop: a worker's exit or stall, the hang watch's tear-down (agent_hang.c: OUT_FAILED, the
 * culprit, TRUN__CAUSE_HANG), a hardware Xid, a stop signal, and what the rendezvous's news made it do.
 * `job` is the round's end as the rendezvous's one door told it (a->round.end; kind NONE: none known). A hang
 * is a fate of this node's own: it reaches the other nodes as this node's FAILED end, its record naming the
 * hang. */
typedef struct {
  trun__round_result here;
  const trun_rdzv_end *job;
  int me; /* this node's group rank in the round */
} trun__round_fate;

/* What a round saw after its workers, besides its fate (agent_round.c gathers it while it settles). */
typedef struct {
  int told, told_rc; /* static / trun: this node's success was announced (told), with
                        trun_rdzv_announce_success's return */
  int end_read;      /* static / trun: the round's end was read after the announcements */
  int lost_seen;     /* a lost node the round's end names was taken */
  int failed_told;   /* a failed round: the rendezvous was told (trun_rdzv_failed_here); its answer, if
                        any, is the round's end (c10d: MEMBER, nodes wait to join) */
  int owner_read;    /* c10d, several nodes: who failed first was read */
} trun__round_seen;

/* The round's result from its fate and what it saw after the workers (agent_round.c): the one place that
 * decides it, a function of its arguments only. */
trun__round_result trun__round_decide(const trun__round_fate *f, const trun__round_seen *s);

typedef struct agent agent;
#define TRUN_ROUND_XID_GPUS 64        /* GPUs (visible index) whose Xids of the round a hang consults */
typedef struct trun__hang trun__hang; /* agent_hang.c */

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
  double stalled_s;      /* --stall-timeout found it stalled for this long (0: not) */
  char timer_scope[128]; /* torch's file-timer watchdog killed it: the expired scope ("" not) */
  int timer_signal;
  /* Why it died (agent_failures.c, proc/cause.h): its last stderr lines, its memory cgroup's OOM kills. */
  trun_tail err_tail;
  trun_memcg memcg;
  int memcg_ok;                /* memcg and oom_base were read when it started */
  long long oom_base;          /* the cgroup's oom_kill counter then */
  unsigned long long start_us; /* CLOCK_MONOTONIC microseconds at its start (the kernel log's clock) */
  unsigned long long exit_us;  /* and when it was reaped (0: not yet) */
  int sigkill_sent;            /* trun's stop sent it SIGKILL while it ran: never an OOM kill */
  int eof_said;                /* debug: its output pipe's end while it still ran was said */
  char stuck[256];             /* SIGKILL did not end it: its state ("" none; agent.c on_kill_timer) */
  char hang[2048];             /* --hang-timeout tore the round down for it: the hang ("" not) */
  char ras[64]; /* --warm-start-nccl: where its NCCL RAS serves clients, its own port ("" the job's) */
} worker;

/* The agent's state, split by owner: the core every file reads (agent.c sets it up), then one part per file
 * that writes it (the others only read it, through the functions the owner declares below). */
struct agent {
  /* ---- core (agent.c: open_agent, plan, meet): read by every file ---- */
  const trun_config *cfg;
  uv_loop_t *loop;
  char **env; /* the agent's environment as workers inherit it */
  int nproc;
  worker *w;         /* this round's workers (agent.c starts a round, agent_workers.c each worker) */
  trun_rdzv *rdzv;   /* the rendezvous: the round number and the job's attempt are its (trun_rdzv_info) */
  trun_node *node;   /* what discovery found, once per agent (GPUs in a short-lived child) */
  trun_obs *obs;     /* events and metrics (agent/observe/obs.h) */
  trun_stall *stall; /* --stall-timeout (agent/observe/stall.h), NULL when off */
  trun_watchdog guard;
  char host[256];
  char run_dir[PATH_MAX];
  int files_off;         /* --log-dir /dev/null */
  struct rlimit nofile;  /* RLIMIT_NOFILE trun was started with, given back to workers */
  int nofile_raised;     /* the agent raised its soft limit to the hard one */
  uv_timer_t wait_timer; /* the agent's waits between rounds: --restart-backoff (agent.c), the warm pool's */

  /* ---- agent_stop.c: the round's stop mechanics; agent_workers.c counts what it starts ---- */
  struct {
    int in_round;           /* workers of this round may still run: remote ends act only then */
    int running;            /* workers not yet reaped */
    int open_streams;       /* their output pipes not yet at EOF */
    int stopping;           /* the stop signal went out this round */
    int killed;             /* SIGKILL went out: kill_timer now waits TRUN_STUCK_WAIT_S for stuck workers */
    int stuck;              /* local rank of the first worker SIGKILL did not end, -1 (agent.c: unhealthy) */
    int signal_seen;        /* the terminating signal the agent got, 0 */
    trun__round_result req; /* what ended the round on this node, kind OUT_NONE: nothing yet */
    uv_timer_t kill_timer, drain_timer;
  } stop;

  /* ---- agent.c: the round with the job (run_round); agent_failures.c and agent_exclude.c read it ---- */
  struct {
    trun__round_result result; /* the last round's, decided once at its end (decide) */
    /* Multi-node: the rendezvous's end watcher (NULL: a single node) wakes remote when the round ends; end is
     * how the round ended for the job as far as this node knows (kind NONE: not yet). */
    uv_async_t remote;
    trun_rdzv_watch *watch;
    trun_rdzv_end end;
    /* The mailbox of the rendezvous's one door (trun_rdzv_watch_open): its callback, on a thread of the
     * rendezvous, keeps the value it is given there (the round's end once, the latest news of the liveness
     * thread) under given_mu and wakes remote; the loop takes it from there. */
    pthread_mutex_t given_mu;
    trun_rdzv_end given_end, given_news;
    int given_end_set, given_news_set;
    /* The losses of the round before that the door told at this round's start (NODE_LOST, `past`). */
    trun_rdzv_loss given_past[TRUN_RDZV_MAX_LOSSES];
    int n_given_past;
    /* Liveness: the lost node of this round (result OUT_PEER_LOST) or of the round before (recovery). */
    trun_rdzv_loss lost;
    int lost_known;
    double recovery_from;   /* wall-clock seconds of the loss the next round recovers from, 0: none */
    int store_stuck;        /* stopping on a signal, the rendezvous store did not answer: leave without it */
    int in_rdzv;            /* waiting in trun_rdzv_next_round (a spare, a node waiting for others) */
    trun_strays *strays;    /* what the workers started outside their sessions (proc/strays.h) */
    uv_timer_t stray_timer; /* while the workers run: a look for them every TRUN_STRAY_SCAN_MS */
  } round;

  /* ---- agent.c: discovery and the agent's signals ---- */
  int discovered;         /* node is filled (check_input discovers it for --nproc-per-node gpu / auto) */
  int discover_rc;        /* and what trun_discover_node returned then */
  char discover_err[512]; /* GPU discovery's complaint in plan ("" none; the health gate reads it) */
  uv_signal_t sigchld;
  uv_signal_t sigs[TRUN_MAX_SIGNALS];
  int nsigs;

  /* ---- agent_health.c: node health, the Xid watcher, this node leaving the job (agent_preflight.c sets
   * a failed preflight, agent_failures.c reads the cause) ---- */
  struct {
    trun_xid_watch *xid; /* the Xid watcher child, NULL when off or ended */
    uv_poll_t xid_poll;  /* readable: the watcher wrote */
    int xid_poll_on;     /* xid_poll was initialised (close it at the end) */
    int unhealthy;       /* a hardware Xid: this node leaves the job and exits 3 */
    char msg[512];       /* "GPU 3 <UUID> Xid 79: GPU has fallen off the bus" */
    int lr;              /* the local rank whose GPU it was, -1 */
    double time;         /* when the agent read it (unix seconds) */
    const char *kind;    /* the exclusion's kind: "xid", "health", "preflight" or "stuck" */
    unsigned long long round_xid[TRUN_ROUND_XID_GPUS]; /* the last Xid of each visible GPU this round, 0 */
    int left;                                          /* trun__agent_leave_unhealthy ran */
    int seen;              /* other nodes' health records already read from the store */
    double gate_at;        /* monotonic ms of the last health gate run */
    trun_gpu_probe *probe; /* the gate's GPU facts read in the background (warn, GPUs from the cache) */
    uv_poll_t probe_poll;  /* readable: the probe ended */
    int probe_poll_on;     /* probe_poll was initialised (close it at the end) */
    double probe_t0;       /* when it started (monotonic ms) */
  } health;
  int fail_streak; /* agent_exclude.c: rounds in a row whose first failure was this node's */

  /* ---- agent_stdin.c: --watch-stdin, the launcher's session ---- */
  struct {
    uv_poll_t poll;
    int on, hello;
    char line[64];
    size_t len;
  } launcher;

  /* ---- agent_torchwatch.c: torch's file-timer watchdog and health-check port ---- */
  trun_ftimer *ftimer; /* NULL when off */
  trun_metrics *probe; /* TORCHELASTIC_HEALTH_CHECK_PORT's server, NULL when off */

  /* ---- agent_warm.c: --warm-start ---- */
  struct {
    trun_warm *pool;   /* NULL when off */
    double wait_until; /* trun__agent_warm_wait: when it stops waiting (wall s) */
    int started;       /* a group has started: the pool now fills for restarts */
  } warm;

  /* ---- agent_preflight.c: the rounds --preflight was asked for, the local part a spare runs while it
   * waits ---- */
  struct {
    int rounds;              /* rounds this agent started with --preflight on */
    int local;               /* TRUN_PF_LOCAL_* */
    pid_t pid;               /* the local part's child trun while it runs, else 0 */
    double t0;               /* monotonic seconds it started */
    int reaped, status;      /* the SIGCHLD handler reaped it: its wait status */
    char result[PATH_MAX];   /* its local rank 0's result file */
    char local_verdict[400]; /* what it found, for the line at the takeover */
  } pf;

  /* ---- agent_fr.c: the workers' flight-recorder dumps and pipes ---- */
  struct {
    char dir[PATH_MAX]; /* "" none */
    int remove;         /* dir is trun's temporary one: removed at exit */
  } fr;

  /* ---- agent_wait.c: the wait for workers after the stop signal, reported every second while due ---- */
  struct {
    trun_wait wait;
    uv_timer_t timer;
  } stop_wait;

  /* ---- agent_hang.c: collective hang detection from NCCL RAS ---- */
  trun__hang *hang;
};

/* nproc.c: trun_nproc_resolve from a node discovery already made (trun_discover_node): `gpu` and `auto` count
 * its GPUs instead of asking NVML once more (each asking forks an NVML child: about 0.1 s on a 4-GPU node).
 */
int trun__nproc_resolve_node(const char *spec, const trun_node *node, int *nproc, char *err, size_t errlen);

/* agent_workers.c: torchrun's run directory, <log-dir or $TMPDIR/torchelastic_XXXXXX>/<run_id>_XXXXXX (or
 * no files for --log-dir /dev/null). 0 or -errno. */
int trun__agent_make_run_dir(agent *a);
/* snprintf for paths: -ENAMETOOLONG instead of a silently cut path. */
int trun__agent_pathf(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* mkdir -p: 0, or -errno. */
int trun__agent_mkdirs(const char *path);
/* Starts local rank w->local_rank of this round, its files under attempt_dir. 0, or -1 (said on stderr). */
int trun__agent_start_worker(agent *a, worker *w, const char *attempt_dir);

/* agent_warm.c: --warm-start: starts the pool processes of the local slots that have none (once the
 * workers' base environment is known, and after each group starts). */
void trun__agent_warm_fill(agent *a);
/* Starts worker w from the pool (w->pid set): 0; 1 when it must start cold (the reason said on stderr). */
int trun__agent_warm_take(agent *a, worker *w, char *const *argv, char *const *envp, int out_fd, int err_fd);
/* Before a group starts: lets pool processes still importing get ready (or fail), on the loop (its endpoints
 * answer meanwhile), for at most TRUN_WARM_WAIT_S; a slot not ready by then starts cold. 0, -1 on a stop
 * signal. Uses wait_timer. */
int trun__agent_warm_wait(agent *a);
/* One line for --dry-run / --explain: whether the workers start warm, from what; measure: also start one pool
 * process, wait until it is ready and give its resident memory (--explain). base: the workers' base env. */
/* --local-ranks-filter against this node's nproc workers (agent_script.c): -1 with the reason when it names
 * none of them (the console would show nothing); a warning for ranks beyond them. */
int trun__agent_check_ranks_filter(const trun_config *cfg, int nproc, char *err, size_t len);
void trun__agent_warm_describe(const trun_config *cfg, char **base, int nproc, int measure, FILE *out);

/* The round's failures to events and metrics; final: also the job's failure report (on
 * node rank 0 with the other nodes' root causes) and $TORCHELASTIC_ERROR_FILE. */
void trun__agent_report_failures(agent *a, int final);
/* Publishes this node's failure (its root cause, or that the agent was stopped by a signal) and ends the
 * round for every node (its end: TRUN_RDZV_END_FAILED, this node's group rank) unless another end came
 * first; now: the round's end as the store holds it then (trun_rdzv_announce_failure). 0 or a negative
 * errno (said on stderr). */
int trun__agent_announce_failure(agent *a, trun_rdzv_end *now);

/* agent_stop.c: the round's stop mechanics. init: its timers (open_agent); begin: a round starts (nothing
 * ended it yet); rearm: a wait between rounds (--restart-backoff) that a stop signal must end. */
void trun__round_init(agent *a);
void trun__round_begin(agent *a);
void trun__round_rearm(agent *a);
/* The stop request: kind ended the round on this node (culprit: the local rank of the root cause, -1; cause:
 * what found it); unless the round is already stopping, it is recorded in a->stop.req and every running
 * worker gets SIGTERM (SIGKILL after --shutdown-timeout). OUT_SUCCESS (every worker exited 0) is recorded
 * and stops nothing. A stall's or an unhealthy GPU's culprit is named the root cause (not torn down). */
void trun__round_stop(agent *a, trun__round_kind kind, int culprit, trun__round_cause cause);
/* The same for an end the rendezvous or the liveness found (kind OUT_REMOTE_FAILED, OUT_MEMBERSHIP,
 * OUT_PEER_LOST, OUT_CUT_OFF), naming node (-1 none). */
void trun__round_stop_node(agent *a, trun__round_kind kind, int node);
/* sig to every worker's process group (SIGKILL also to those already reaped: what they left). */
void trun__round_kill(agent *a, int sig);
/* The round's loop ends once every worker is reaped and its output drained (uv_stop). */
void trun__round_maybe_finish(agent *a);
/* A worker's output stream reached EOF (trun_stream_on_eof's callback, arg: the agent). */
void trun__round_stream_eof(void *arg);
/* A signal the agent got, or one named on stdin (--watch-stdin): a stop signal decides the round
 * (OUT_SIGNALED) and stops the workers (a second one kills them); another is forwarded to them. */
void trun__agent_handle_signal(agent *a, int sig);

/* agent_round.c: a round's end with the job. settle: after the round's loop, tells the other nodes how this
 * node ended, learns how the job's round ended, and returns the round's result (decided there, once).
 * take_end: the round's end into a->round.end once the rendezvous's door gave it (a lost node's record into
 * a->round.lost); 1 when known. lost: the end names a lost node: its record, event and line; 1 when it is
 * another node (this node's workers stop to go on without it), 0 when this node left. */
trun__round_result trun__round_settle(agent *a);
int trun__round_take_end(agent *a);
int trun__round_lost(agent *a);

/* Seconds the agent waits for a worker to end after SIGKILL before it calls it stuck. */
#define TRUN_STUCK_WAIT_S 10
/* agent.c: how often a round looks for processes the workers started outside their sessions (strays.h). */
#define TRUN_STRAY_SCAN_MS 1000

/* agent_preflight.c: the local part of --preflight while a spare waits. */
enum {
  TRUN_PF_LOCAL_NONE,
  TRUN_PF_LOCAL_RUNNING,
  TRUN_PF_LOCAL_OK,
  TRUN_PF_LOCAL_SKIPPED,
  TRUN_PF_LOCAL_FAILED
};
/* From the rendezvous wait's hook: a spare that has not run a round starts the node-local preflight once (a
 * child trun; no GPU: one line), later calls poll it without blocking; a failure sets a->unhealthy (kind
 * "preflight": the wait ends, the node leaves excluded and exits 3). */
void trun__agent_preflight_wait(agent *a);
/* Before a round's workers: waits for a local part still running; at this agent's first round, the
 * all-ranks preflight when that round is the job's first (rendezvous round 0), else one line saying it is
 * skipped. 0 to run the workers, -1 to stop (a failed preflight, or a->unhealthy). */
int trun__agent_preflight_round(agent *a, trun_pf_rank_env rank_env);
/* The SIGCHLD handler reaped pid: 1 when it was the local part's child (its status kept for the poll). */
int trun__agent_preflight_reaped(agent *a, pid_t pid, int status);
/* At the agent's end: a local part still running is killed. */
void trun__agent_preflight_close(agent *a);

/* agent_health.c: the node health gate before the first rendezvous (--health-check): runs the checks on the
 * node plan discovered, reports them (stderr, "health" events, trun_health_failed) and, with fail and a
 * failed check, tells the other nodes through the rendezvous store and returns -1 (exit 3, not joining);
 * then starts the Xid watcher on the agent's loop. 0 to go on. */
int trun__agent_health_gate(agent *a);
/* While the agent waits in the rendezvous (a spare, a node waiting for others): the health gate again every
 * trun_wait_health_interval, so that a spare that went bad does not take over. 1 when it failed with
 * --health-check fail: a->unhealthy is set (the wait ends; the agent leaves, excluded, and exits 3). */
int trun__agent_health_recheck(agent *a);
/* Other nodes' health records (a failed gate, a hardware Xid) the store holds and this agent has not read:
 * node rank 0 prints each; with fs, each is also added to fs[*n..cap) as a failure record (the root cause
 * of this round when it came first). */
void trun__agent_health_news(agent *a, trun_failure *fs, size_t *n, size_t cap);
/* This node leaves the job because it is unhealthy: the single place that does it (see there). */
void trun__agent_leave_unhealthy(agent *a);
/* The job ends for an unhealthy node (after it left and its failure report): its line; TRUN_EXIT_UNHEALTHY.
 */
int trun__agent_unhealthy_exit(agent *a);
/* Worker w did not end by SIGKILL (agent_stop.c): this node is unhealthy (kind "stuck") and leaves the job.
 */
void trun__agent_health_stuck(agent *a, worker *w);
/* After a round: trun__agent_failure_streak with this node's name. */
void trun__agent_after_round_health(agent *a);
/* A hang's culprit at local rank lr is stopped by --hang-timeout (hang: the hang in words): an Xid its GPU
 * (visible index lr mod the node's GPUs) showed in this round that is not the application's own (13, 31,
 * 43, 45) is hardware evidence: the node becomes unhealthy like after a hardware Xid (it leaves the job,
 * excluded, and exits 3). 1 when so. */
int trun__agent_hang_hardware(agent *a, int lr, const char *hang);
/* agent_hangstack.c: PYTHONFAULTHANDLER=1 in a->env unless set (0; -1 out of memory); ask: a hang's culprit
 * w, still running, is made to print its Python stack (prlimit RLIMIT_CORE 0, then SIGABRT to its pid, where
 * faulthandler is on and the workers are Python): 1 when asked (it dies of it), else 0. */
int trun__agent_hang_stack_env(agent *a);
int trun__agent_hang_stack_ask(agent *a, worker *w);
/* Stops the Xid watcher (before the loop is torn down). */
void trun__agent_health_close(agent *a);

/* agent_hang.c: hang detection from NCCL RAS (on by default; nothing when no NCCL job answers): starts its
 * thread (0; -1 out of memory); round: active 1 when a round's workers start, 0 when they are reaped; close
 * (before the loop is torn down) stops the thread. */
int trun__agent_hang_open(agent *a);
void trun__agent_hang_round(agent *a, int active);
void trun__agent_hang_close(agent *a);
/* agent_rasport.c: unless NCCL_RAS_ADDR is in a->env, reserves a loopback port of this agent's own for its
 * workers' NCCL RAS and sets NCCL_RAS_ADDR=127.0.0.1:<port> in a->env; *fd is the socket that holds it (close
 * it at the end; -1 when none). 0 (a port that cannot be reserved is said, and NCCL's default stays), -1 out
 * of memory. */
int trun__agent_ras_port(agent *a, int *fd);

/* agent_fr.c: torch's flight-recorder variables for the workers (trun__agent_fr_vars, NULL-terminated: what
 * trun may add; each only when the environment does not name it, only with ngpu > 0, nothing when the user
 * set a buffer size of 0) with the dumps and pipes under dir: 0 or -ENOMEM / -ENAMETOOLONG. open: after the
 * run directory, makes the node's directory (mode 0700) and sets them in a->env (0; -1 out of memory; a
 * directory it cannot make is a warning and no variables). close: removes the directory when it is trun's
 * temporary one. */
extern const char *const trun__agent_fr_vars[];
int trun__agent_fr_env(char ***env, int ngpu, const char *dir, const trun_config *cfg);
int trun__agent_fr_open(agent *a);
void trun__agent_fr_close(agent *a);
/* Asks this node's ranks base_rank..base_rank+n-1 for fresh dumps through their pipes (pipe_prefix, as in
 * TORCH_NCCL_DEBUG_INFO_PIPE_FILE) and reads them (dump_prefix, as in TORCH_FR_DUMP_TEMP_FILE), within
 * TRUN__FR_PROBE_MS (blocking: the hang thread calls it). line: what they say together (trun_fr_summarize),
 * "" when no dump came. Returns the dumps read. */
#define TRUN__FR_PROBE_MS 10000

/* Every rank in NCCL (agent_fr.c, called by the hang thread): once a communicator's equal counts have stood
 * still for the window (TRUN__FR_SPIN_WINDOW_S; TRUN_HANG_SPIN_WINDOW in the environment, 2..86400), the
 * node's ranks are asked for dumps every gap (window / 3, 2..30 s), and two probes in a row whose newest
 * entries are the same not-completed collective on every rank are a hang (trun_fr_spin). */
#define TRUN__FR_SPIN_WINDOW_S 60.0
#define TRUN_FR_SPIN_MAX 64 /* culprits kept */
typedef struct {
  double window, gap, next;
  trun_fr_rank *prev; /* the last probe, NULL none */
  size_t nprev;
} trun__fr_spin;
typedef struct {
  double quiet;       /* how long the counts have stood still */
  double named_quiet; /* quiet when it was first named (set by the caller) */
  char line[512];
  int culprit[TRUN_FR_MAX_RANKS];
  size_t nculprit;
} trun__fr_spin_verdict;
void trun__agent_fr_spin_init(trun__fr_spin *s, char *const *env);
void trun__agent_fr_spin_free(trun__fr_spin *s);
/* One poll: quiet from trun_hang_quiet_s, now monotonic seconds. 1 with *out filled when it is hung. */
int trun__agent_fr_spin_step(trun__fr_spin *s, double quiet, double now, const char *dump_prefix,
                             const char *pipe_prefix, int base_rank, int n, trun__fr_spin_verdict *out);
/* The loop's side of a verdict: one line and the hang event per round (*named), and the teardown for a
 * culprit of this node --hang-timeout seconds later (*acted). */
void trun__agent_fr_spin_report(agent *a, const trun__fr_spin_verdict *v, int *named, int *acted);
size_t trun__agent_fr_ask(const char *dump_prefix, const char *pipe_prefix, int base_rank, int n, char *line,
                          size_t len);

/* torch's agent gives its health-check server this timeout (seconds) over the watchdog's last progress. */
#define TRUN_HEALTH_PORT_TIMEOUT_S 60
/* agent_torchwatch.c: torch's file-timer watchdog, with TORCHELASTIC_ENABLE_FILE_TIMER=1 in the agent's
 * environment: makes the FIFO (TORCHELASTIC_TIMER_FILE or a fresh /tmp/watchdog_timer_<hex>) and puts its
 * path into a->env for the workers; an expired scope signals the worker (named in its failure record). And
 * with TORCHELASTIC_HEALTH_CHECK_PORT, the health probe on that port. 0, -1 (said on stderr), or -2 for a
 * bad TORCHELASTIC_HEALTH_CHECK_PORT (said; the agent exits 2). */
int trun__agent_torchwatch_open(agent *a);
/* A new round: the last round's timers go. */
void trun__agent_torchwatch_round(agent *a);
/* Removes the FIFO (before the loop is torn down). */
void trun__agent_torchwatch_close(agent *a);
/* agent_stdin.c: --watch-stdin: watches stdin on the agent's loop for the launcher's lines (said on stderr
 * when stdin cannot be watched); stops watching (idempotent; before the loop is torn down). */
void trun__agent_watch_stdin(agent *a);
void trun__agent_stdin_stop(agent *a);
/* agent_wait.c: every wait's report as the "waiting" event and metric (a trun_wait_hook, arg: the agent); the
 * wait for the workers after the stop signal sig (agent_stop.c), ended once they are all reaped. */
void trun__agent_wait_hook(void *arg, const trun_wait_info *w);
void trun__agent_stop_wait_begin(agent *a, int sig);
void trun__agent_stop_wait_end(agent *a);
/* agent_exclude.c: puts this node (known to the others as host) on the job's exclusion list through r's
 * connection to the rendezvous store (none: nothing). */
void trun__agent_exclude_self(agent *a, trun_rdzv *r, const char *host, const char *kind, const char *cause);
/* The exclusion list's news of this round (read by trun_rdzv_next_round): events, metrics, stderr on node
 * rank 0. */
void trun__agent_exclusion_news(agent *a);
/* After a round: this node's workers failed first trun_exclude_failures rounds in a row: it excludes itself
 * (its next rendezvous refuses it: exit 3). */
void trun__agent_failure_streak(agent *a, const char *host);

#endif
