/* The agent's life cycle (agent/agent.h): discover and plan, meet the other nodes, then rounds of workers
 * until they succeed, fail with no restart left, or a signal stops the agent; the end. Inside a round:
 * start the workers and supervise them on a libuv loop (exits through SIGCHLD, forwarded signals, the
 * rendezvous backend's ticks, the end of the round on other nodes, the cut-off); what stops them goes
 * through agent_stop.c, and what the round was (run_round's result) is decided in agent_round.c.
 * rounds() switches on that result and asks the restart policy what follows. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agent/nccl/nccl.h"
#include "agent/observe/observe.h"
#include "agent/proc/proc.h"
#include "agent/rdzv/rdzv.h"
#include "agent_int.h"
#include "base/base.h"
#include "restart_policy.h"
#include "worker_env.h"

/* ---- a round's workers ---------------------------------------------------------------------------- */

static void worker_exited(agent *a, worker *w, int status) {
  char sname[32];
  w->running = 0;
  a->stop.running--;
  w->exit_time = trun_wall_s();
  w->exit_us = (unsigned long long)trun_mono_us();
  w->status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  trun_obs_worker_exit(a->obs, w->pid, trun_rdzv_info(a->rdzv)->base_rank + w->local_rank, w->local_rank,
                       w->status, w->torn_down);
  trun_stall_exited(a->stall, w->local_rank);
  if (w->status < 0)
    trun_debug("rank %d (local %d, pid %d) killed by %s", trun_rdzv_info(a->rdzv)->base_rank + w->local_rank,
               w->local_rank, (int)w->pid, trun_signal_name(-w->status, sname, sizeof(sname)));
  if (w->status != 0)
    trun__round_stop(a, OUT_FAILED, w->local_rank, TRUN__CAUSE_EXIT);
  else if (a->stop.running == 0)
    trun__round_stop(a, OUT_SUCCESS, -1, TRUN__CAUSE_EXIT);
  trun__round_maybe_finish(a);
}

static void on_sigchld(uv_signal_t *h, int signum) {
  (void)signum;
  agent *a = h->data;
  int status;
  pid_t pid;
  /* Reap everything: workers, and (as subreaper or PID 1) any orphan that was re-parented to us. */
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    int i = 0;
    while (i < a->nproc && !(a->w[i].pid == pid && a->w[i].running)) i++;
    if (i < a->nproc) {
      trun_watchdog_gone(&a->guard, pid);
      worker_exited(a, &a->w[i], status);
    } else if (!trun__agent_preflight_reaped(a, pid, status)) { /* the local preflight's child */
      trun_warm_reaped(a->warm.pool, pid, status); /* a --warm-start pool process died before use */
    }
  }
}

static void on_signal(uv_signal_t *h, int sig) { trun__agent_handle_signal(h->data, sig); }

/* ---- multi-node end of round ---------------------------------------------------------------------- */

/* A fate that the liveness thread tells while the workers run (it comes again each time it looks), not the
 * round's end key. */
static int is_news(trun_rdzv_end_kind k) {
  return k == TRUN_RDZV_END_JOINING || k == TRUN_RDZV_END_REJOINED || k == TRUN_RDZV_END_CUT_OFF;
}

/* The rendezvous's one door (trun_rdzv_watch_open), on one of its threads or the agent's own (a call that
 * answers through it): the value it gives is kept in the mailbox for the loop (the round's end once, the
 * latest news, the losses of the round before), which it wakes. */
static void on_fate(void *arg, const trun_rdzv_end *end) {
  agent *a = arg;
  pthread_mutex_lock(&a->round.given_mu);
  if (end->kind == TRUN_RDZV_END_NODE_LOST && end->past) {
    if (a->round.n_given_past < TRUN_RDZV_MAX_LOSSES)
      a->round.given_past[a->round.n_given_past++] = end->loss;
  } else if (is_news(end->kind)) {
    a->round.given_news = *end;
    a->round.given_news_set = 1;
  } else if (!a->round.given_end_set) {
    a->round.given_end = *end;
    a->round.given_end_set = 1;
  }
  pthread_mutex_unlock(&a->round.given_mu);
  uv_async_send(&a->round.remote);
}

/* The mailbox, emptied (a round's workers start). */
static void clear_given(agent *a) {
  pthread_mutex_lock(&a->round.given_mu);
  a->round.given_end_set = a->round.given_news_set = 0;
  pthread_mutex_unlock(&a->round.given_mu);
}

/* The latest news the door gave into *news: 1, or 0 when none came since the last look. */
static int take_news(agent *a, trun_rdzv_end *news) {
  pthread_mutex_lock(&a->round.given_mu);
  int has = a->round.given_news_set;
  if (has) *news = a->round.given_news;
  a->round.given_news_set = 0;
  pthread_mutex_unlock(&a->round.given_mu);
  return has;
}

/* While the workers run, a fate the liveness thread told: this node is cut off from the job; nodes wait to
 * join (a new world: the workers stop and every agent joins the next round, not counted as a restart); a
 * node of this round left it to rejoin (a failure there, which every node counts). */
static void act_on_news(agent *a, const trun_rdzv_end *e) {
  if (a->stop.stopping || a->stop.req.kind != OUT_NONE) return;
  if (e->kind == TRUN_RDZV_END_CUT_OFF) {
    trun_error(
        "node rank %d is cut off from the job: %s; stopping the workers and exiting %d so that the "
        "scheduler replaces this node",
        trun_rdzv_info(a->rdzv)->group_rank, e->cause, TRUN_EXIT_CUT_OFF);
    trun__round_stop_node(a, OUT_CUT_OFF, trun_rdzv_info(a->rdzv)->group_rank);
  } else if (a->stop.running == 0) {
    return;
  } else if (e->kind == TRUN_RDZV_END_JOINING) {
    trun_info("%d new node(s) wait to join the %s rendezvous: restarting the workers into a new world",
              e->nodes, trun_rdzv_backend_name(a->rdzv));
    trun_obs_membership(a->obs, e->nodes);
    trun__round_stop(a, OUT_MEMBERSHIP, -1, TRUN__CAUSE_NEWS);
  } else {
    /* Only peers of this round wait: one of them restarted after a failure (agent_round.c: a failure with
     * nodes waiting). */
    trun_warn("%d node(s) of this round left it to rejoin (a failure there): restarting the workers",
              e->nodes);
    trun__round_stop(a, OUT_REMOTE_FAILED, -1, TRUN__CAUSE_NEWS);
  }
}

/* While the workers run: the round ended elsewhere, and this node's workers stop accordingly. */
static void act_on_end(agent *a) {
  switch (a->round.end.kind) {
    case TRUN_RDZV_END_NODE_LOST:
      if (trun__round_lost(a)) trun__round_stop_node(a, OUT_PEER_LOST, a->round.end.node);
      break;
    case TRUN_RDZV_END_FAILED:
      trun_warn("node rank %d failed: stopping this node's workers", a->round.end.node);
      trun__round_stop_node(a, OUT_REMOTE_FAILED, a->round.end.node);
      break;
    case TRUN_RDZV_END_MEMBER:
      trun_info("the job's membership changes (%s): restarting the workers into a new world",
                a->round.end.cause);
      trun__round_stop_node(a, OUT_MEMBERSHIP, -1);
      break;
    case TRUN_RDZV_END_STORE_LOST:
      trun_error("lost the rendezvous store (%s): stopping the workers", a->round.end.cause);
      trun__round_stop_node(a, OUT_REMOTE_FAILED, -1);
      break;
    default: /* ok: this node's workers end on their own; invalid: said by the watcher, no action */ break;
  }
}

static void on_remote(uv_async_t *h) {
  agent *a = h->data;
  /* A late wake-up from an earlier round, or the round is over (trun__round_settle takes the end). */
  if (!a->stop.in_round) return;
  trun_rdzv_end news;
  if (take_news(a, &news)) act_on_news(a, &news);
  if (!trun__round_take_end(a)) return;
  if (!a->stop.stopping) act_on_end(a);
  trun__round_maybe_finish(a);
}

/* ---- workers ------------------------------------------------------------------------------------- */

/* --stall-timeout: a worker showed no sign of life (and got --stall-signal and its grace): tear the round
 * down like a failure of that worker, so that it counts as a restart and the report names it. */
static void on_stall(void *arg, int local_rank, double idle_s, int sig, int stop) {
  agent *a = arg;
  worker *w = &a->w[local_rank];
  if (!stop) {
    /* Found: recorded now, so that the report names the stall even if the signal ends the worker. */
    w->stalled_s = idle_s;
    trun_obs_stall(a->obs, w->pid, trun_rdzv_info(a->rdzv)->base_rank + local_rank, local_rank, idle_s, sig);
    return;
  }
  if (a->stop.stopping || !w->running) return;
  trun_error("rank %d (local %d, pid %d) stalled for %.0f s (no output, no CPU time): restarting the workers",
             trun_rdzv_info(a->rdzv)->base_rank + local_rank, local_rank, (int)w->pid, idle_s);
  trun__round_stop(a, OUT_FAILED, local_rank, TRUN__CAUSE_STALL); /* the root cause, not a bystander */
}

/* The view of the agent's children that strays.h goes by: the running workers, and the helpers in sessions of
 * their own (the guard, the --warm-start pool, the local preflight). Fills pids (a->nproc + a->nproc + 2). */
static trun_strays_view stray_view(agent *a, pid_t *pids) {
  trun_strays_view v = {.workers = pids, .keep = pids + a->nproc};
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].running && a->w[i].pid > 0) pids[v.nworkers++] = a->w[i].pid;
  pid_t *keep = pids + a->nproc;
  keep[v.nkeep++] = a->guard.pid;
  keep[v.nkeep++] = a->pf.pid;
  for (int i = 0; i < a->nproc; i++) keep[v.nkeep++] = trun_warm_pid(a->warm.pool, i);
  return v;
}

static void on_stray_timer(uv_timer_t *t) {
  agent *a = t->data;
  pid_t *pids = calloc(2 * (size_t)a->nproc + 2, sizeof(pid_t));
  if (pids == NULL) return;
  trun_strays_view v = stray_view(a, pids);
  int rc = trun_strays_scan(a->round.strays, &v);
  if (rc < 0) trun_debug("cannot read /proc for what the workers started: %s", strerror(-rc));
  free(pids);
}

/* The end of a round (or of the agent): no process the workers started outlives it (strays.h). */
static void kill_strays(agent *a) {
  pid_t *pids = a->round.strays ? calloc(2 * (size_t)a->nproc + 2, sizeof(pid_t)) : NULL;
  if (pids == NULL) return;
  trun_strays_view v = stray_view(a, pids);
  v.nworkers = 0; /* the round is over: a worker still there (stuck) is the job's like the rest */
  double t0 = trun_mono_ms();
  int n = trun_strays_kill(a->round.strays, &v);
  size_t rows;
  int walk = trun_strays_last_look(a->round.strays, &rows);
  trun_debug("strays: /proc looked at in %.1f ms (%zu process(es): %s), %d process(es) killed",
             trun_mono_ms() - t0, rows, walk ? "the agent and its descendants" : "every process", n);
  if (n > 0) trun_info("killed %d process(es) the workers left behind (outside their sessions or groups)", n);
  free(pids);
}

/* Starts every local worker of the round (the first that cannot start stops the round as its failure);
 * attempt_dir: where their files go. */
static void start_workers(agent *a, const char *attempt_dir) {
  clear_given(a);
  trun_rdzv_watch_start(a->round.watch, trun_rdzv_info(a->rdzv)->round);
  trun_stall_begin(a->stall, a->nproc);
  trun__agent_torchwatch_round(a);
  for (int i = 0; i < a->nproc; i++) {
    a->w[i].a = a;
    a->w[i].local_rank = i;
    if (trun__agent_start_worker(a, &a->w[i], attempt_dir) < 0) {
      a->w[i].status = 127;
      a->w[i].exit_time = trun_wall_s();
      trun__round_stop(a, OUT_FAILED, i, TRUN__CAUSE_START);
      break;
    }
  }
  a->warm.started = 1;
  trun__agent_warm_fill(a); /* the next group's pool, while this one runs */
  const trun_rdzv_round *ri = trun_rdzv_info(a->rdzv);
  trun_debug("round %d: started %d workers (ranks %d-%d of %d)", ri->round, a->nproc, ri->base_rank,
             ri->base_rank + a->nproc - 1, ri->world_size);
  if (a->round.recovery_from > 0) {
    double s = trun_wall_s() - a->round.recovery_from;
    trun_info("recovered: the workers run again in a world of %d (%d node(s)), %.2f s after the loss",
              ri->world_size, ri->group_world_size, s);
    trun_obs_recovered(a->obs, ri->world_size, ri->group_world_size, s);
  }
}

/* One round: start every local worker, supervise them on the loop until the round ends, then settle it
 * with the job (agent_round.c). Its result, decided once there, is also kept for the failure report. */
static trun__round_result run_round(agent *a) {
  char attempt_dir[PATH_MAX] = "";
  trun__round_begin(a);
  a->round.end = (trun_rdzv_end){.kind = TRUN_RDZV_END_NONE, .node = -1};
  memset(a->w, 0, sizeof(worker) * (size_t)a->nproc);
  if (!a->files_off && trun__agent_pathf(attempt_dir, sizeof(attempt_dir), "%s/attempt_%d", a->run_dir,
                                         trun_rdzv_info(a->rdzv)->attempt) < 0)
    a->files_off = 1;
  start_workers(a, attempt_dir);
  a->stop.in_round = 1;
  if (a->round.strays)
    uv_timer_start(&a->round.stray_timer, on_stray_timer, TRUN_STRAY_SCAN_MS, TRUN_STRAY_SCAN_MS);
  trun__agent_hang_round(a, 1);
  trun__round_maybe_finish(a); /* a worker may have failed to start */
  trun_nccl_report *rep = trun_nccl_report_start(a->cfg, a->env, a->files_off ? NULL : attempt_dir);
  uv_run(a->loop, UV_RUN_DEFAULT);
  /* A worker SIGKILL did not end: this node is unhealthy and leaves the job, while still in the round. */
  if (a->stop.stuck >= 0) trun__agent_health_stuck(a, &a->w[a->stop.stuck]);
  trun_nccl_report_finish(rep);
  uv_timer_stop(&a->round.stray_timer);
  kill_strays(a);
  trun_stall_end(a->stall);
  trun__agent_hang_round(a, 0);
  a->stop.in_round = 0;
  a->round.result = trun__round_settle(a);
  return a->round.result;
}

/* ---- life cycle ---------------------------------------------------------------------------------- */

static int setup_signals(agent *a) {
  int rc = uv_signal_init(a->loop, &a->sigchld);
  if (rc == 0) rc = uv_signal_start(&a->sigchld, on_sigchld, SIGCHLD);
  a->sigchld.data = a;
  for (int i = 0; rc == 0 && i < a->cfg->nsignals; i++) {
    rc = uv_signal_init(a->loop, &a->sigs[i]);
    if (rc == 0) rc = uv_signal_start(&a->sigs[i], on_signal, a->cfg->signals[i]);
    a->sigs[i].data = a;
    a->nsigs = i + 1;
  }
  signal(SIGPIPE, SIG_IGN);
  return rc;
}

/* h->loop is set by its init: a handle that was never initialised (open_agent stopped early) is passed over.
 */
static void close_handle(uv_handle_t *h) {
  if (h->loop && !uv_is_closing(h)) uv_close(h, NULL);
}

static void teardown(agent *a) {
  for (int i = 0; i < a->nproc; i++) {
    if (a->w[i].out) trun_stream_close(a->w[i].out);
    if (a->w[i].err) trun_stream_close(a->w[i].err);
    a->w[i].out = a->w[i].err = NULL;
  }
  close_handle((uv_handle_t *)&a->sigchld);
  for (int i = 0; i < a->nsigs; i++) close_handle((uv_handle_t *)&a->sigs[i]);
  trun__agent_stdin_stop(a);
  close_handle((uv_handle_t *)&a->stop.kill_timer);
  close_handle((uv_handle_t *)&a->stop.drain_timer);
  close_handle((uv_handle_t *)&a->wait_timer);
  close_handle((uv_handle_t *)&a->stop_wait.timer);
  close_handle((uv_handle_t *)&a->round.remote);
  close_handle((uv_handle_t *)&a->round.stray_timer);
  uv_run(a->loop, UV_RUN_DEFAULT);
  uv_loop_close(a->loop);
}

/* While the agent waits on the store: let the loop run signal handlers; stop waiting after a stop signal. */
static int poll_signals(void *arg) {
  agent *a = arg;
  uv_run(a->loop, UV_RUN_NOWAIT);
  if (a->round.in_rdzv) {
    trun__agent_health_recheck(a); /* a warm spare: its gate stays fresh while it waits */
    trun__agent_preflight_wait(a); /* and runs the local part of --preflight once */
  }
  return a->stop.signal_seen != 0 || a->health.unhealthy;
}

/* --preflight: local rank lr's trun-preflight gets the environment its worker would get. */
static char **preflight_env(void *arg, int lr) {
  agent *a = arg;
  return trun_worker_envp(a->env, a->cfg, trun_rdzv_info(a->rdzv), a->nproc, lr,
                          trun_rdzv_info(a->rdzv)->attempt, "");
}

/* ---- the life cycle: discover and plan, meet the other nodes, rounds, end ------------------------------ */

/* The node's GPUs, EFA devices, instance and CPUs, once per agent (a->node; NULL when out of memory). */
static void discover(agent *a) {
  a->discovered = 1;
  double t0 = trun_mono_ms();
  if ((a->node = calloc(1, sizeof(*a->node))) == NULL) return;
  a->discover_rc = trun_discover_node(a->node, a->env, trun_agent_discover_flags(a->cfg), a->cfg->no_imds,
                                      a->discover_err, sizeof(a->discover_err));
  static const char *const cache[] = {"", ", from the GPU cache", ", GPU cache written",
                                      ", GPU cache unused"};
  int c = a->node->gpu_cache >= 0 && a->node->gpu_cache <= TRUN_GPU_CACHE_UNUSED ? a->node->gpu_cache : 0;
  trun_debug("node discovery: %d GPU(s) (%s%s), %d RDMA device(s), in %.1f ms", a->node->ngpu,
             a->node->gpu_source ? a->node->gpu_source : "none", cache[c], a->node->nrdma,
             trun_mono_ms() - t0);
  if (a->node->gpu_cache_note[0]) trun_debug("GPU cache: %s", a->node->gpu_cache_note);
}

/* What the node has, the workers' base environment (NCCL / EFA decisions included), the run directory,
 * torch's watchdog and health port. 0, or -1 / -2 (bad input) said on stderr. */
static int plan(agent *a) {
  char *err = a->discover_err; /* kept for the health gate */
  int omp_forced = 0;
  if (!a->discovered) discover(a);
  if (a->node != NULL && a->discover_rc < 0)
    trun_warn("GPU discovery: %s; deciding the NCCL environment from the GPUs found before it", err);
  a->env = trun_agent_env(a->env, a->cfg, a->nproc, a->node, &omp_forced);
  if (a->env == NULL) {
    trun_error("out of memory copying the environment");
    return -1;
  }
  if (omp_forced)
    fprintf(stderr,
            "*****************************************\n"
            "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
            "your system being overloaded, please further tune the variable for optimal performance in "
            "your application as needed. \n"
            "*****************************************\n");
  int rc = trun__agent_make_run_dir(a);
  if (rc < 0) {
    trun_error("cannot create the log directory under %s: %s; pass a writable --log-dir",
               a->cfg->log_dir ? a->cfg->log_dir : "/tmp", strerror(-rc));
    return -1;
  }
  if ((rc = trun__agent_torchwatch_open(a)) < 0) return rc;
  if (trun__agent_fr_open(a) < 0) return -1;
  if (trun__agent_hang_open(a) < 0) return -1;
  trun_obs_discovery(a->obs, a->nproc, a->env, a->node);
  trun_stall_use_gpus(a->stall, a->node);
  trun__agent_warm_fill(a); /* imports while the agent meets the other nodes */
  return 0;
}

/* Reaches the rendezvous (hosting its store where this node is the host), and where a round can end on other
 * nodes, the end watcher and its connection. 0, or -1 (said on stderr). */
static int meet(agent *a) {
  char err[512];
  trun_rdzv_opts o = {.poll = poll_signals,
                      .poll_arg = a,
                      .on_wait = trun__agent_wait_hook,
                      .on_wait_arg = a,
                      .node = a->node}; /* how the exclusion list knows this node */
  if (trun_rdzv_init(a->rdzv, a->cfg, a->nproc, &o, err, sizeof(err)) < 0) {
    trun_error("%s", err);
    return -1;
  }
  trun_obs_set_rdzv(a->obs, a->rdzv);
  if (trun_rdzv_token_public(a->rdzv)) { /* once per job: said by the agent that hosts its store */
    snprintf(err, sizeof(err),
             "job '%s' runs on several nodes without a secret agent token (TRUN_RDZV_TOKEN is unset): its "
             "token is derived from the run id, which anyone who reaches the rendezvous store can learn; it "
             "stops mistakes, not attackers (a stray client could end its rounds or exclude its nodes); give "
             "every node the same TRUN_RDZV_TOKEN, e.g. from 'openssl rand -hex 32' (docs/store.md)",
             a->cfg->run_id);
    trun_warn("%s", err);
    trun_obs_insecure_token(a->obs, a->cfg->run_id, err);
  }
  /* The end watcher: how a round ends on the other nodes (static, trun), and a lost node (every backend). */
  if (trun_rdzv_watch_open(a->rdzv, on_fate, a, &a->round.watch, err, sizeof(err)) < 0) {
    trun_error("%s", err);
    return -1;
  }
  return 0;
}

/* The losses of the last round that the door told at this round's start (NODE_LOST ends with `past`: those
 * this node learnt only at the rendezvous, its workers having failed before the watcher saw them, said here,
 * and the one the round's end named, said then): the recovery is timed from the earliest. */
static void past_losses(agent *a) {
  trun_rdzv_loss past[TRUN_RDZV_MAX_LOSSES];
  pthread_mutex_lock(&a->round.given_mu);
  int n = a->round.n_given_past;
  memcpy(past, a->round.given_past, sizeof(past[0]) * (size_t)n);
  a->round.n_given_past = 0;
  pthread_mutex_unlock(&a->round.given_mu);
  a->round.recovery_from = 0;
  for (int i = 0; i < n; i++) {
    const trun_rdzv_loss *l = &past[i];
    if (!(a->round.lost_known && a->round.lost.node == l->node && a->round.lost.round_id == l->round_id))
      trun_obs_node_lost(a->obs, l);
    if (a->round.recovery_from == 0 || l->at < a->round.recovery_from) a->round.recovery_from = l->at;
  }
  a->round.lost_known = 0;
}

/* Before a round's workers: the rendezvous round, the split-pod doctor (agent/nccl/doctor.h) and, on the
 * first round, --preflight (agent/nccl/preflight.h). 0 to run the workers, -1 to stop the job. */
static int before_round(agent *a, int round) {
  char err[512];
  trun_obs_rdzv_start(a->obs, round);
  a->round.in_rdzv = 1;
  int rc = trun_rdzv_next_round(a->rdzv, round, err, sizeof(err));
  a->round.in_rdzv = 0;
  if (rc < 0) {
    trun_obs_rdzv_end(a->obs, round, err);
    if (!a->health.unhealthy) trun_error("%s", err); /* unhealthy: the wait was ended for it, said there */
    return -1;
  }
  /* The round number and the job's attempt are now the rendezvous's (the elastic backends' are the store's:
   * a spare takes the survivors' attempt). */
  trun_obs_rdzv_end(a->obs, trun_rdzv_info(a->rdzv)->round, NULL);
  trun__agent_exclusion_news(a);
  past_losses(a);
  trun__agent_health_news(a, NULL, NULL, 0); /* nodes that left unhealthy: node rank 0 names them */
  char master_err[1024];
  if (trun_rdzv_check_master(a->rdzv, master_err, sizeof(master_err)) < 0) {
    /* A name the workers cannot use would hold every node for torch's 30 minutes: the job stops now. */
    trun_error("%s", master_err);
    char why[160];
    snprintf(why, sizeof(why),
             "its workers could not use MASTER_ADDR %.64s there (it does not resolve, or leads to loopback)",
             trun_rdzv_info(a->rdzv)->master_addr);
    if (trun_rdzv_leave_job(a->rdzv, why, 10000) < 0)
      trun_warn("could not tell the other nodes that this node leaves; they notice when it is gone");
    return -1;
  }
  trun_doctor_outcome doc;
  int stop = trun_doctor_round(a->rdzv, a->cfg, a->nproc, a->env, a->node, &doc);
  trun_obs_doctor(a->obs, trun_rdzv_info(a->rdzv)->round, &doc);
  if (!stop) stop = trun__agent_preflight_round(a, preflight_env) < 0;
  return stop ? -1 : 0;
}

static void on_backoff_done(uv_timer_t *t) { uv_stop(t->loop); }

/* --restart-backoff: waits s seconds on the loop; a stop signal ends the wait (trun__round_maybe_finish stops
 * the loop). 0, or -1 when a signal came. */
static int backoff_wait(agent *a, double s) {
  trun_info("waiting %.1f s before the restart (--restart-backoff)", s);
  trun__round_rearm(a); /* a stop signal now stops the loop (trun__round_maybe_finish) */
  uv_timer_start(&a->wait_timer, on_backoff_done, (uint64_t)(s * 1000), 0);
  if (!a->stop.signal_seen) uv_run(a->loop, UV_RUN_DEFAULT);
  uv_timer_stop(&a->wait_timer);
  return a->stop.signal_seen ? -1 : 0;
}

/* After a round that failed (here or elsewhere) or lost a node: the restart policy says what follows. The
 * failure report (the job's when nothing follows), then the exit code, or -1 once the restart is under way
 * (the next attempt proposed to the rendezvous, the back-off waited). */
static int restart(agent *a, trun_restart_policy *pol, const trun__round_result *r, double ran_s) {
  int attempt = trun_rdzv_info(a->rdzv)->attempt;
  int failed = r->kind == OUT_FAILED || r->kind == OUT_REMOTE_FAILED;
  trun_restart_next next = trun_restart_policy_next(pol, failed, ran_s, attempt);
  trun__agent_report_failures(a, next != TRUN_RESTART_GO);
  if (next == TRUN_RESTART_CRASH_LOOP) {
    trun_error(
        "crash loop: %d failed rounds in a row, each within %.0f s of the workers' start (--crash-loop); "
        "restarts make no progress: exit %d (do not requeue); fix the cause above",
        pol->fast_streak, pol->loop_window, TRUN_EXIT_NO_PROGRESS);
    return TRUN_EXIT_NO_PROGRESS;
  }
  if (next == TRUN_RESTART_SPENT) {
    int code = trun_restart_policy_exhausted_code(pol);
    if (code == TRUN_EXIT_NO_PROGRESS)
      trun_error(
          "the job's --max-restarts %d are spent, %d of them by requeues (%s): exit %d (do not requeue)",
          pol->max_restarts, pol->offset, pol->offset_from, code);
    return code;
  }
  int left = trun_restart_policy_left(pol, attempt) - 1;
  trun_rdzv_set_attempt(a->rdzv, attempt + 1); /* the next round's, settled by the rendezvous */
  trun_warn("restarting the workers (attempt %d, %d restart(s) left)", attempt + 1, left);
  trun_obs_restart(a->obs, attempt + 1, left);
  double delay = trun_restart_policy_delay(pol);
  if (delay > 0 && backoff_wait(a, delay) < 0) return 1; /* stopped by a signal while waiting */
  return -1;
}

/* Rounds until the workers succeed, fail with no restart left, or a signal stops the agent: the exit
 * code. Two counters, both the rendezvous's (trun_rdzv_info): the round number (one more per rendezvous
 * round, a membership change included) and the job's attempt (TORCHELASTIC_RESTART_COUNT: one more per
 * restart, proposed by restart() and settled by the rendezvous, the same on every node). A membership change
 * starts a new round with the same attempt, like torchrun. --max-restarts counts the job's attempts and,
 * through the restart policy (restart_policy.h), the requeues before this run; the policy also waits before
 * a restart after a fast failure and stops a crash loop. */
static int rounds(agent *a) {
  trun_restart_policy pol;
  trun_restart_policy_init(&pol, a->cfg, a->env);
  if (pol.offset > 0)
    trun_info("%s=%d: the job used %d restart(s) before this run; %d of --max-restarts %d left",
              pol.offset_from, pol.offset, pol.offset, trun_restart_policy_remaining(&pol), pol.max_restarts);
  for (int round = 0;; round = trun_rdzv_info(a->rdzv)->round + 1) {
    if (before_round(a, round) < 0 || a->health.unhealthy) /* unhealthy: agent_main's exit */
      return trun_rdzv_excluded(a->rdzv) ? trun_rdzv_excluded(a->rdzv) : TRUN_EXIT_FAILED;
    if (trun__agent_warm_wait(a) < 0) return TRUN_EXIT_FAILED; /* a stop signal while the pool imports */
    double started = trun_wall_s();
    trun__round_result r = run_round(a);
    if (a->health.unhealthy) return 1;
    switch (r.kind) {
      case OUT_SUCCESS: return 0;
      case OUT_MEMBERSHIP: trun_restart_policy_reset(&pol); continue; /* a new world, the same attempt */
      case OUT_CUT_OFF: trun__agent_report_failures(a, 0); return TRUN_EXIT_CUT_OFF;
      case OUT_SIGNALED: trun__agent_report_failures(a, 0); return 1;
      case OUT_PEER_LOST:
        if (trun_rdzv_elastic(a->rdzv)) break;
        trun__agent_report_failures(a, 1); /* a fixed-size job (static) cannot go on without the node */
        return 1;
      default: break; /* failed here or elsewhere: a restart if the policy allows */
    }
    int code = restart(a, &pol, &r, trun_wall_s() - started);
    if (code >= 0) return code;
  }
}

static int agent_main(agent *a) {
  int prc = plan(a);
  if (prc < 0) return prc == -2 ? 2 : 1;                          /* -2: bad input (agent_torchwatch.c) */
  if (trun__agent_health_gate(a) < 0) return TRUN_EXIT_UNHEALTHY; /* before joining: the node stays out */
  int code = meet(a) < 0 ? 1 : rounds(a);
  if (a->health.unhealthy) { /* it leaves (if not yet), and its failure report is the job's end here */
    trun__agent_leave_unhealthy(a);
    trun__agent_report_failures(a, 1);
    code = trun__agent_unhealthy_exit(a);
  }
  /* A cut-off node cannot reach the store for the backend's exit barrier or close: it just goes. An
   * unhealthy node leaves; it does not close the rendezvous for the others (c10d's shutdown). */
  /* Nor does a node refused by the exclusion list, or one that turned unhealthy before it ever joined (a
   * spare): they were in no round, whose exit barrier they would count in; nor one whose store is stuck. */
  int outside =
      trun_rdzv_excluded(a->rdzv) || (a->health.unhealthy && trun_rdzv_info(a->rdzv)->group_world_size == 0);
  if (code != TRUN_EXIT_CUT_OFF && !outside && !a->round.store_stuck)
    trun_rdzv_finish(a->rdzv, code, a->stop.signal_seen != 0 || a->health.unhealthy);
  return code;
}

/* The stores the agent hosts take one descriptor per connection: the soft open-file limit goes up to the
 * hard one (a common soft limit of 1024 is used up by a thousand idle peers), the stores stop accepting
 * TRUN_STORE_FD_RESERVE short of it (agent/rdzv/store_acl.h), and workers get the limit trun was started
 * with. */
static void raise_nofile(agent *a) {
  if (getrlimit(RLIMIT_NOFILE, &a->nofile) < 0) {
    trun_debug("getrlimit(RLIMIT_NOFILE): %s; the open-file limit stays as it is", strerror(errno));
    return;
  }
  if (a->nofile.rlim_cur >= a->nofile.rlim_max) return;
  struct rlimit up = {a->nofile.rlim_max, a->nofile.rlim_max};
  if (setrlimit(RLIMIT_NOFILE, &up) < 0) {
    trun_debug("setrlimit(RLIMIT_NOFILE, %llu): %s; the open-file limit stays %llu",
               (unsigned long long)up.rlim_cur, strerror(errno), (unsigned long long)a->nofile.rlim_cur);
    return;
  }
  a->nofile_raised = 1;
}

/* The input checks that need the node or the rendezvous (those of the configuration alone ran in config/):
 * 0, or exit 2 (said on stderr). Sets a->nproc. */
static int check_input(agent *a) {
  char err[512];
  if (trun_rdzv_conf_check(a->cfg, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  /* gpu / auto count the GPUs of the node's discovery, made here once for plan() too */
  const char *spec = a->cfg->nproc_spec;
  if (strcmp(spec, "gpu") == 0 || strcmp(spec, "auto") == 0) discover(a);
  if ((a->node ? trun__nproc_resolve_node(spec, a->node, &a->nproc, err, sizeof(err))
               : trun_nproc_resolve(spec, &a->nproc, err, sizeof(err))) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  if (trun__agent_check_ranks_filter(a->cfg, a->nproc, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s\n", err);
    return 2;
  }
  unsigned checks;
  if (a->cfg->health_check != TRUN_HEALTH_CHECK_OFF &&
      trun_health_parse_checks(a->cfg->health_checks, &checks, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: --health-checks: %s\n", err);
    return 2;
  }
  return 0;
}

/* What the agent runs on: its loop, the guard process, the loop's timers and signals, --watch-stdin, events
 * and metrics, the stall watch. 0, or the exit code (said on stderr); close_agent closes what was opened. */
static int open_agent(agent *a) {
  const trun_config *cfg = a->cfg;
  char err[256];
  trun_fqdn(a->host, sizeof(a->host));
  a->health.lr = -1;
  raise_nofile(a);
  a->w = calloc((size_t)a->nproc, sizeof(worker));
  a->loop = malloc(sizeof(uv_loop_t));
  a->rdzv = trun_rdzv_new(); /* started in meet(); read before (its round info all 0) */
  int lrc = a->w && a->loop && a->rdzv ? uv_loop_init(a->loop) : UV_ENOMEM;
  if (lrc < 0) {
    trun_error("cannot start the agent: %s: %s",
               a->w && a->loop && a->rdzv ? "uv_loop_init" : "calloc/malloc", uv_strerror(lrc));
    free(a->loop);
    a->loop = NULL; /* nothing to tear down */
    return 1;
  }
  /* Orphans of our workers come back to us (we reap them); as PID 1 that is already so. */
  if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
    trun_warn("prctl(PR_SET_CHILD_SUBREAPER): %s; orphaned grandchildren go to init", strerror(errno));
  if (trun_watchdog_start(&a->guard) < 0)
    trun_warn(
        "cannot start the guard process: workers are still killed with the agent (PDEATHSIG), "
        "their own children may not be");
  trun__round_init(a);
  uv_timer_init(a->loop, &a->wait_timer);
  uv_timer_init(a->loop, &a->stop_wait.timer);
  a->wait_timer.data = a->stop_wait.timer.data = a;
  uv_async_init(a->loop, &a->round.remote, on_remote);
  a->round.remote.data = a;
  uv_timer_init(a->loop, &a->round.stray_timer);
  a->round.stray_timer.data = a;
  a->round.strays = trun_strays_new("/proc", a->guard.pid > 0 ? &a->guard : NULL);
  if (setup_signals(a) < 0) {
    trun_error("cannot install signal handlers");
    return 1;
  }
  if (cfg->watch_stdin) trun__agent_watch_stdin(a);
  if (trun_obs_open(cfg, a->loop, a->host, &a->obs, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s\n", err);
    return 2;
  }
  a->stall = trun_stall_new(a->loop, cfg->stall_timeout, cfg->stall_signal, on_stall, a);
  return 0;
}

/* The one way out of trun_agent_run, whatever was opened (each step passes over what was not): the
 * node's watchers and children, the end watcher, events (the last one says code), the rendezvous (its
 * stores stop), the warm pool, the loop and its handles, the guard, the memory. */
static void close_agent(agent *a, int code, char **orig_env) {
  trun__agent_hang_close(a);
  trun__agent_fr_close(a);
  trun__agent_health_close(a);
  trun__agent_preflight_close(a);
  trun__agent_torchwatch_close(a);
  trun_rdzv_watch_close(a->round.watch);
  trun_obs_close(a->obs, code);
  trun_stall_close(a->stall);
  trun_rdzv_free(a->rdzv);
  if (a->loop) kill_strays(a); /* what a round's end did not see (a stop between rounds) */
  trun_strays_free(a->round.strays);
  trun_warm_free(a->warm.pool);
  if (a->loop) teardown(a);
  trun_watchdog_stop(&a->guard);
  if (a->env != orig_env) trun_strv_free(a->env);
  free(a->w);
  free(a->node);
  free(a->loop);
}

int trun_agent_run(const trun_config *cfg, char **envp) {
  agent a;
  memset(&a, 0, sizeof(a));
  a.cfg = cfg;
  a.env = envp;
  a.guard.fd = -1; /* no guard process yet */
  pthread_mutex_init(&a.round.given_mu, NULL);
  int code = check_input(&a);
  if (code == 0) code = open_agent(&a);
  if (code == 0) code = agent_main(&a);
  close_agent(&a, code, envp);
  pthread_mutex_destroy(&a.round.given_mu); /* after the rendezvous's threads (trun_rdzv_free) */
  return code;
}
