/* A round's end with the job (agent_int.h, a->round): once this node's workers are gone, what the round was.
 * trun__round_settle tells the other nodes how this node ended and learns how the job's round ended (the
 * rendezvous's end and what a failure here is for the job, both taken from its one door; the
 * announcements), gathering facts into a round_seen; trun__round_decide is the one place that turns
 * them and the round's fate (agent_int.h: the stop request, the round's end) into the round's result. A step
 * whose action depends on the result so far asks decide() with the facts gathered until then. Calls
 * agent_stop.c, agent_failures.c and agent_health.c; agent.c calls it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "agent_int.h"

typedef trun__round_seen round_seen;

static int me(const agent *a) { return trun_rdzv_info(a->rdzv)->group_rank; }

/* The round's end names another node's failure. */
static int failed_elsewhere(const agent *a) {
  return a->round.end.kind == TRUN_RDZV_END_FAILED && a->round.end.node != me(a);
}

trun__round_result trun__round_decide(const trun__round_fate *f, const trun__round_seen *s) {
  trun__round_result r = f->here;
  trun__round_kind k = r.kind;
  const trun_rdzv_end *end = f->job;
  int elsewhere = end->kind == TRUN_RDZV_END_FAILED && end->node != f->me;
  if (s->told && k == OUT_SUCCESS && s->told_rc == -EINTR) k = OUT_SIGNALED; /* a stop signal meanwhile */
  if (s->told && k == OUT_SUCCESS && s->told_rc < 0 && s->told_rc != -EINTR) k = OUT_REMOTE_FAILED;
  if (s->end_read) {
    /* Another node's workers failed first: this node's failed workers are its victims (a crashed peer resets
     * their connections), and the root cause is that node's. */
    if (k == OUT_FAILED && elsewhere) k = OUT_REMOTE_FAILED;
    /* The round's end is its first announcement: a membership change before our failure means the change
     * came first and stopped a peer, which is what broke our workers (not counted as a restart). */
    if (end->kind == TRUN_RDZV_END_MEMBER && k != OUT_SIGNALED) k = OUT_MEMBERSHIP;
    if (k == OUT_SUCCESS && end->kind != TRUN_RDZV_END_OK) k = OUT_REMOTE_FAILED;
  }
  /* A node was lost, though this node's workers may have failed first (a crashed peer resets their
   * connections): the loss is the cause. Workers that all succeeded did this node's part of the job. */
  if (s->lost_seen && end->kind == TRUN_RDZV_END_NODE_LOST && end->node != f->me && k != OUT_SUCCESS &&
      k != OUT_SIGNALED && k != OUT_CUT_OFF && k != OUT_PEER_LOST)
    k = OUT_PEER_LOST;
  /* A worker failed while new nodes wait to join: the membership change (see settle). */
  if (s->failed_told && k == OUT_FAILED && end->kind == TRUN_RDZV_END_MEMBER) k = OUT_MEMBERSHIP;
  if (s->owner_read && k == OUT_FAILED && elsewhere) k = OUT_REMOTE_FAILED;
  if (k != r.kind && (k == OUT_REMOTE_FAILED || k == OUT_PEER_LOST)) r.node = end->node;
  if (k != r.kind && k != OUT_FAILED) r.cause = k == OUT_SIGNALED ? TRUN__CAUSE_SIGNAL : TRUN__CAUSE_END;
  r.kind = k;
  return r;
}

/* The round's result so far: its fate (the stop request, the round's end) and what it saw (s). */
static trun__round_result decide(const agent *a, const round_seen *s) {
  trun__round_fate f = {.here = a->stop.req, .job = &a->round.end, .me = me(a)};
  return trun__round_decide(&f, s);
}

int trun__round_take_end(agent *a) {
  pthread_mutex_lock(&a->round.given_mu);
  /* The first end of the round is kept; a membership change the rendezvous gave for this node's failure
   * (trun_rdzv_failed_here) also replaces a store loss, which was only the watcher's connection. */
  const trun_rdzv_end *given = &a->round.given_end;
  if (a->round.given_end_set &&
      (a->round.end.kind == TRUN_RDZV_END_NONE ||
       (given->kind == TRUN_RDZV_END_MEMBER && a->round.end.kind == TRUN_RDZV_END_STORE_LOST))) {
    a->round.end = a->round.given_end;
    if (a->round.end.kind == TRUN_RDZV_END_NODE_LOST) {
      a->round.lost_known = a->round.end.loss_known;
      if (a->round.end.loss_known) a->round.lost = a->round.end.loss;
    }
  }
  a->round.given_end_set = 0;
  pthread_mutex_unlock(&a->round.given_mu);
  return a->round.end.kind != TRUN_RDZV_END_NONE;
}

int trun__round_lost(agent *a) {
  int g = a->round.end.node;
  if (!a->round.lost_known || a->round.lost.node != g) {
    memset(&a->round.lost, 0, sizeof(a->round.lost));
    a->round.lost.node = g;
    snprintf(a->round.lost.addr, sizeof(a->round.lost.addr), "?");
    snprintf(a->round.lost.cause, sizeof(a->round.lost.cause), "no record of the cause");
    a->round.lost.at = trun_wall_s();
    a->round.lost_known = 1;
  }
  trun_obs_node_lost(a->obs, &a->round.lost);
  if (g == me(a)) return 0; /* this node left the job (trun_rdzv_leave_now): it stops anyway */
  trun_warn("node rank %d (%s) is lost: %s; stopping this node's workers to go on without it", g,
            a->round.lost.addr, a->round.lost.cause);
  return 1;
}

/* The round is over on this node: stops the end watcher and takes the end it saw. */
static void stop_watch(agent *a) {
  trun_rdzv_watch_stop(a->round.watch);
  trun__round_take_end(a);
}

/* This node's workers failed (or a signal stopped them): the other nodes learn it with this node's record,
 * and this node learns the round's end as the store holds it: its own failure, or what came first (another
 * node's failure with that node's record). That end is kept over none, and over a store loss that was only
 * the watcher's cut (c10d). */
static void announce_failure(agent *a) {
  trun_rdzv_end now;
  if (trun__agent_announce_failure(a, &now) < 0) return;
  if (now.kind == TRUN_RDZV_END_FAILED &&
      (a->round.end.kind == TRUN_RDZV_END_NONE || a->round.end.kind == TRUN_RDZV_END_STORE_LOST))
    a->round.end = now;
}

/* Multi-node end of a round (static, trun): tell the others how this node ended, learn how the job's round
 * ended. */
static void end_round_multinode(agent *a, round_seen *s) {
  int round = trun_rdzv_info(a->rdzv)->round;
  if (a->stop.req.kind == OUT_SUCCESS) {
    /* This node is done; the round is done when every node is, or when one failed. */
    s->told = 1;
    s->told_rc = trun_rdzv_announce_success(a->rdzv, round);
    if (s->told_rc < 0 && s->told_rc != -EINTR) {
      trun_rdzv_end_store_lost(&a->round.end, round, -s->told_rc);
      trun_rdzv_watch_reconnect(a->round.watch); /* its connection is likely gone too */
    }
  }
  trun__round_kind k = decide(a, s).kind;
  if (k == OUT_FAILED || k == OUT_SIGNALED) announce_failure(a);
  stop_watch(a);
  s->end_read = 1;
}

/* c10d, several nodes: the round has no end key of its own (torchrun agents end it by rejoining). A trun
 * agent whose workers failed still publishes its failure there, and one stopped because a peer rejoined
 * reads who failed first, so that every trun agent names the same root cause. */
static void end_round_c10d(agent *a, round_seen *s) {
  if (trun_rdzv_info(a->rdzv)->group_world_size < 2 || decide(a, s).kind == OUT_CUT_OFF ||
      a->round.store_stuck)
    return;
  if (decide(a, s).kind == OUT_FAILED) announce_failure(a);
  if (decide(a, s).kind == OUT_REMOTE_FAILED && a->round.end.kind != TRUN_RDZV_END_FAILED) {
    trun_rdzv_end now;
    if (trun_rdzv_end_now(a->rdzv, trun_rdzv_info(a->rdzv)->round, &now) == 0 &&
        now.kind == TRUN_RDZV_END_FAILED)
      a->round.end = now;
  }
  s->owner_read = 1;
}

/* Stopping on a signal: the rendezvous store that does not answer within the liveness window does not hold
 * the exit (each of its requests could wait a minute). Else this node leaves the round cleanly. */
static void round_done(agent *a, trun__round_kind k) {
  int bound = k == OUT_SIGNALED ? 3 * trun_rdzv_live_ms(a->rdzv) + 2000 : -1;
  if (!trun_rdzv_round_done_within(a->rdzv, bound) || k != OUT_SIGNALED) return;
  a->round.store_stuck = 1;
  int store_port;
  const char *store_addr = trun_rdzv_store_addr(a->rdzv, &store_port);
  trun_warn(
      "the rendezvous store at %s:%d did not answer within %.1f s while this node stops: leaving "
      "without telling the other nodes (they see this node gone)",
      store_addr, store_port, bound / 1000.0);
  trun_rdzv_watch_cut(a->round.watch);
  trun_rdzv_hang_up(a->rdzv); /* the report asks no more */
}

static void close_streams(agent *a) {
  for (int i = 0; i < a->nproc; i++) {
    if (a->w[i].out) trun_stream_close(a->w[i].out);
    if (a->w[i].err) trun_stream_close(a->w[i].err);
    a->w[i].out = a->w[i].err = NULL;
  }
  a->stop.open_streams = 0;
}

trun__round_result trun__round_settle(agent *a) {
  round_seen s = {0};
  trun__round_kind k = a->stop.req.kind;
  /* Another node ended the round: its host may be that node and close the store at any moment. */
  if (k == OUT_REMOTE_FAILED || k == OUT_PEER_LOST || failed_elsewhere(a)) trun_rdzv_store_may_go(a->rdzv);
  close_streams(a);
  trun__round_kill(a, SIGKILL); /* whatever the workers left in their process groups */
  if (k == OUT_CUT_OFF) {
    /* Nothing of the store answers: no announcement, no waiting for the end key. */
    trun_rdzv_abandon(a->rdzv);
    trun_rdzv_watch_cut(a->round.watch);
  }
  round_done(a, a->stop.req.kind);
  if (trun_rdzv_ends_by_key(a->rdzv) && a->stop.req.kind != OUT_CUT_OFF && !a->round.store_stuck)
    end_round_multinode(a, &s);
  else
    stop_watch(a);
  if (a->round.end.kind == TRUN_RDZV_END_NODE_LOST) {
    k = decide(a, &s).kind;
    if (k == OUT_SUCCESS && a->round.end.node != me(a))
      trun_warn("node rank %d was lost after this node's workers succeeded; this node's part is done",
                a->round.end.node);
    else if (k != OUT_SIGNALED && k != OUT_CUT_OFF && k != OUT_PEER_LOST)
      trun__round_lost(a);
  }
  s.lost_seen = 1;
  /* A round ended by a worker failure: the rendezvous says through its door what else it is. If new nodes
   * wait to join (c10d: a MEMBER end), another agent saw them first and stopped its workers, which broke ours
   * (their collective lost a peer). That is the membership change, not a failure: torchrun would spend a
   * restart on it when its monitor sees the failure before the wait list; trun asks first, so joining never
   * costs a restart. */
  if (decide(a, &s).kind == OUT_FAILED) {
    trun_rdzv_failed_here(a->rdzv);
    trun__round_take_end(a);
    s.failed_told = 1;
    if (decide(a, &s).kind == OUT_MEMBERSHIP) {
      trun_info(
          "a worker failed while %d new node(s) wait to join the %s rendezvous: taking it as the membership "
          "change (not counted as a restart)",
          a->round.end.nodes, trun_rdzv_backend_name(a->rdzv));
      trun_obs_membership(a->obs, a->round.end.nodes);
    }
  }
  if (!trun_rdzv_ends_by_key(a->rdzv)) end_round_c10d(a, &s);
  trun__agent_after_round_health(a); /* a node whose workers keep failing first excludes itself */
  return decide(a, &s);
}
