/* The round's stop mechanics (agent_int.h, a->stop): the stop request that records what ended the round on
 * this node, the stop itself (the signal to every worker's process group, SIGKILL after --shutdown-timeout,
 * the workers SIGKILL does not end), the agent's own signals, and the end of the round's loop once every
 * worker is reaped and its output drained. agent.c, agent_hang.c, agent_fr.c, agent_health.c, agent_stdin.c
 * and agent_workers.c call it; it calls only agent_wait.c (the stop's wait report), so that no file of the
 * agent calls back into the one that called it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "agent_int.h"

/* Debug (TRUN_LOG_LEVEL=debug): a worker whose output pipe ended while it still runs is exiting (the kernel
 * closes its files before its parent learns of the exit; with CUDA, the driver's teardown comes in between)
 * or closed its stdout / stderr: said once with the time, so that a trace shows how much sooner than the
 * reap a crash could be known. */
static void note_eof(agent *a) {
  for (int i = 0; i < a->nproc; i++) {
    worker *w = &a->w[i];
    if (!w->running || w->eof_said ||
        !((w->out && !trun_stream_is_open(w->out)) || (w->err && !trun_stream_is_open(w->err))))
      continue;
    w->eof_said = 1;
    trun_debug("rank %d (local %d, pid %d): its output pipe ended while it still runs",
               trun_rdzv_info(a->rdzv)->base_rank + i, i, (int)w->pid);
  }
}

void trun__round_stream_eof(void *arg) {
  agent *a = arg;
  a->stop.open_streams--;
  if (trun_log_level() >= TRUN_LOG_DEBUG) note_eof(a);
  trun__round_maybe_finish(a);
}

static void on_drain_timeout(uv_timer_t *t) {
  agent *a = t->data;
  /* Workers are gone but something they started still holds their output pipe: stop reading it. */
  for (int i = 0; i < a->nproc; i++) {
    worker *w = &a->w[i];
    if (w->out && trun_stream_is_open(w->out)) {
      trun_stream_close(w->out), w->out = NULL, a->stop.open_streams--;
    }
    if (w->err && trun_stream_is_open(w->err)) {
      trun_stream_close(w->err), w->err = NULL, a->stop.open_streams--;
    }
  }
  trun__round_maybe_finish(a);
}

void trun__round_maybe_finish(agent *a) {
  if (a->stop.running > 0) return;
  if (a->stop.open_streams > 0) {
    if (!uv_is_active((uv_handle_t *)&a->stop.drain_timer))
      uv_timer_start(&a->stop.drain_timer, on_drain_timeout, 2000, 0);
    return;
  }
  uv_timer_stop(&a->stop.kill_timer);
  uv_timer_stop(&a->stop.drain_timer);
  trun__agent_stop_wait_end(a);
  uv_stop(a->loop);
}

void trun__round_kill(agent *a, int sig) {
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].pid > 0 && (a->w[i].running || sig == SIGKILL)) {
      if (sig == SIGKILL && a->w[i].running) a->w[i].sigkill_sent = 1; /* ours: never the OOM killer's */
      if (kill(-a->w[i].pid, sig) < 0 && errno == ESRCH && a->w[i].running) kill(a->w[i].pid, sig);
    }
}

/* A worker that SIGKILL did not end within TRUN_STUCK_WAIT_S: says so and stops waiting for it (the round
 * can end); the first one makes this node unhealthy once the round's loop ends (agent.c). */
static void worker_stuck(agent *a, worker *w) {
  char st = '?', wchan[128] = "";
  int rank = trun_rdzv_info(a->rdzv)->base_rank + w->local_rank;
  if (trun_proc_state("/proc", w->pid, &st, wchan, sizeof(wchan)) == 0 && st == 'Z')
    return; /* SIGCHLD comes */
  snprintf(w->stuck, sizeof(w->stuck), "still in state %c%s%s%s %d s after SIGKILL", st,
           st == 'D' ? " (uninterruptible sleep)" : "", wchan[0] ? " in " : "", wchan, TRUN_STUCK_WAIT_S);
  trun_error(
      "rank %d (local %d, pid %d) is %s: SIGKILL cannot end it (a driver or file system hang); not waiting "
      "for it any longer: this node leaves the job and exits %d",
      rank, w->local_rank, (int)w->pid, w->stuck, TRUN_EXIT_UNHEALTHY);
  w->running = 0;
  a->stop.running--;
  w->exit_time = trun_wall_s();
  if (w->status == 0) w->status = -SIGKILL;
  trun_obs_worker_exit(a->obs, w->pid, rank, w->local_rank, w->status, w->torn_down);
  trun_obs_stuck(a->obs, w->pid, rank, w->local_rank, w->stuck);
  trun_stall_exited(a->stall, w->local_rank);
  if (a->stop.stuck < 0) a->stop.stuck = w->local_rank;
}

static void on_kill_timer(uv_timer_t *t) {
  agent *a = t->data;
  if (a->stop.killed) { /* TRUN_STUCK_WAIT_S after SIGKILL: whoever still runs cannot be ended */
    for (int i = 0; i < a->nproc; i++)
      if (a->w[i].running) worker_stuck(a, &a->w[i]);
    trun__round_maybe_finish(a);
    return;
  }
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].running)
      trun_warn("rank %d (local %d, pid %d) still runs %.0f s after the stop signal: sending SIGKILL",
                trun_rdzv_info(a->rdzv)->base_rank + i, i, (int)a->w[i].pid, a->cfg->shutdown_timeout);
  trun__round_kill(a, SIGKILL);
  a->stop.killed = 1;
  uv_timer_start(&a->stop.kill_timer, on_kill_timer, TRUN_STUCK_WAIT_S * 1000, 0);
}

/* Stops every running worker: sig to its process group, SIGKILL after the shutdown timeout. */
static void begin_stop(agent *a, int sig) {
  if (a->stop.stopping) return;
  a->stop.stopping = 1;
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].running) a->w[i].torn_down = 1;
  trun__round_kill(a, sig);
  uv_timer_start(&a->stop.kill_timer, on_kill_timer, (uint64_t)(a->cfg->shutdown_timeout * 1000), 0);
  if (a->stop.running > 0) trun__agent_stop_wait_begin(a, sig);
  trun__round_maybe_finish(a);
}

void trun__round_init(agent *a) {
  uv_timer_init(a->loop, &a->stop.kill_timer);
  uv_timer_init(a->loop, &a->stop.drain_timer);
  a->stop.kill_timer.data = a->stop.drain_timer.data = a;
  a->stop.stuck = -1;
}

/* The one place the stop request is written: what ended the round on this node. */
static void record(agent *a, trun__round_kind kind, int culprit, trun__round_cause cause, int node) {
  a->stop.req = (trun__round_result){.kind = kind, .culprit = culprit, .cause = cause, .node = node};
}

void trun__round_begin(agent *a) {
  record(a, OUT_NONE, -1, TRUN__CAUSE_NONE, -1);
  a->stop.stopping = 0;
  a->stop.killed = 0;
  a->stop.stuck = -1;
}

void trun__round_rearm(agent *a) { a->stop.stopping = 0; }

static void request(agent *a, trun__round_kind kind, int culprit, trun__round_cause cause, int node) {
  if (a->stop.stopping) return;
  record(a, kind, kind == OUT_SUCCESS ? -1 : culprit, cause, node);
  if (kind == OUT_SUCCESS) return; /* every worker exited 0: nothing to stop */
  begin_stop(a, SIGTERM);
  /* A stalled worker, or the one whose GPU failed, still ran: the root cause, not a bystander. */
  if ((cause == TRUN__CAUSE_STALL || cause == TRUN__CAUSE_UNHEALTHY) && culprit >= 0 && culprit < a->nproc)
    a->w[culprit].torn_down = 0;
}

void trun__round_stop(agent *a, trun__round_kind kind, int culprit, trun__round_cause cause) {
  request(a, kind, culprit, cause, -1);
}

void trun__round_stop_node(agent *a, trun__round_kind kind, int node) {
  request(a, kind, -1, kind == OUT_CUT_OFF ? TRUN__CAUSE_CUT_OFF : TRUN__CAUSE_END, node);
}

static int is_stop_signal(int sig) {
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

void trun__agent_handle_signal(agent *a, int sig) {
  char name[32];
  trun_signal_name(sig, name, sizeof(name));
  if (!is_stop_signal(sig)) {
    trun_info("%s: forwarded to the workers", name);
    trun__round_kill(a, sig);
    return;
  }
  if (a->stop.signal_seen) {
    trun_warn("second %s: killing the workers now", name);
    trun__round_kill(a, SIGKILL);
    return;
  }
  a->stop.signal_seen = sig;
  /* A stop signal decides the round whatever stopped it before (a failed worker stays its culprit). */
  record(a, OUT_SIGNALED, a->stop.req.culprit, TRUN__CAUSE_SIGNAL, a->stop.req.node);
  /* The other nodes go on (or end) at once instead of after the heartbeat expiry. Only while the workers run:
   * otherwise the agent may be inside a request on this connection. */
  if (a->stop.in_round) {
    char why[64];
    snprintf(why, sizeof(why), "stopped by %s", name);
    trun_rdzv_leave_now(a->rdzv, why);
  }
  trun_warn("%s: forwarding it to the workers; SIGKILL in %.0f s (send it again to kill now)", name,
            a->cfg->shutdown_timeout);
  begin_stop(a, sig);
}
