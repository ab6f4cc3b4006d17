/* The end watcher (agent/rdzv/rdzv.h: trun_rdzv_watch): a thread that waits, while a round's workers run, for
 * the round's end key (its values: rdzv_end_key.c) on a connection of its own (the agent's loop never waits
 * on the store while the workers run), from trun_rdzv_watch_start to trun_rdzv_watch_stop. It reads a failed
 * node's record (rdzv_end.c) and a lost node's record (rdzv_live.c) on that connection before it calls the
 * agent back. It sits above the store's keys, the liveness and the end protocol, below rdzv.c's face. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "rdzv_int.h"

/* ---- the watcher ---------------------------------------------------------------------------------- */

#define WATCH_CONNECT_MS 60000
#define WATCH_JOIN_S 15

struct trun_rdzv_watch {
  trun_rdzv *r;   /* read on the caller's thread (open, start); the thread only posts through its door */
  trun_client *c; /* the watcher's connection; NULL: lost and not reopened */
  int reopen;     /* open a new connection at the next start */
  pthread_t thread;
  int running; /* a thread was started and is not joined yet */
  /* The round watched: set by start before the thread runs, then only read. */
  char key[sizeof(((trun_rdzv *)0)->key_space) + 8];       /* its end key */
  char seen_key[sizeof(((trun_rdzv *)0)->key_space) + 24]; /* seen_end/<g>, "": none to set */
  char ks[sizeof(((trun_rdzv *)0)->key_space)];
  int round, world, by_key;
  long long round_id;
  pthread_mutex_t mu;
  int ended;         /* under mu: end holds the round's end */
  int stopped;       /* under mu: trun_rdzv_watch_stop cut the connection of a round without an end */
  trun_rdzv_end end; /* under mu */
};

/* A second connection to the rendezvous store, with the agents' token and raw keys. 0 or a negative errno. */
static int watch_connect(const trun_rdzv *r, int timeout_ms, trun_client **out) {
  trun_client_opts o;
  trun__rdzv_agent_opts(r, 300000, &o);
  o.connect_timeout_ms = timeout_ms;
  o.quiet_connect = 0;
  /* The watcher's connection is closed at a round's end, and a store lost while the workers run is said by
   * the agent ("lost the rendezvous store"): the client's own error line would be noise. */
  o.quiet_errors = 1;
  return trun_client_connect(&o, out);
}

static void *watch_thread(void *arg) {
  trun_rdzv_watch *w = arg;
  trun_rdzv_end e;
  trun_buf v = {0};
  int rc;
  /* A round may run for days: each request's time-out only bounds one wait. */
  while ((rc = trun_client_get(w->c, trun_str(w->key), &v, 3600 * 1000)) == -ETIMEDOUT) {
  }
  if (rc == 0) {
    trun__rdzv_end_decode(v.data, v.len, w->world, &e);
    /* The failed node's record now, while the store is surely there (its host may be that node, which exits
     * when its restarts are spent): every node names the same root cause. */
    if (e.kind == TRUN_RDZV_END_FAILED)
      (void)trun__rdzv_failure_read(w->c, w->ks, e.node, e.failure, sizeof(e.failure));
    /* Alive at the end of the round: node rank 0's job-wide report tells lost nodes from the others, and
     * the store's host that leaves after a failure (c10d) knows this node has read its record. */
    if (w->seen_key[0]) trun_client_set(w->c, trun_str(w->seen_key), trun_str("1"));
  } else {
    trun_rdzv_end_store_lost(&e, w->round, -rc);
    pthread_mutex_lock(&w->mu);
    if (w->stopped) { /* the round ended without an end key (c10d): no end, not a loss */
      memset(&e, 0, sizeof(e));
      e.node = -1;
    }
    pthread_mutex_unlock(&w->mu);
  }
  trun_buf_free(&v);
  e.round = w->round;
  if (e.kind == TRUN_RDZV_END_NODE_LOST) {
    /* The lost node's record, read here on this connection (the agent's loop never waits on the store). */
    e.loss_known = trun__rdzv_loss_read(w->c, w->ks, e.node, &e.loss) == 0;
    e.loss.round_id = w->round_id;
  } else if (e.kind == TRUN_RDZV_END_INVALID) {
    trun_warn(
        "the end key of round %d in the rendezvous store holds '%s', which no trun agent writes: this node "
        "takes no action on it (a program with the job's token wrote it, or a trun of another version)",
        w->round, e.cause);
  }
  pthread_mutex_lock(&w->mu);
  w->end = e;
  w->ended = 1;
  pthread_mutex_unlock(&w->mu);
  trun__rdzv_door_post(w->r, &e); /* the one door (rdzv_door.c) */
  return NULL;
}

int trun_rdzv_watch_open(trun_rdzv *r, trun_rdzv_end_fn on_end, void *arg, trun_rdzv_watch **out, char *err,
                         size_t errlen) {
  *out = NULL;
  trun__rdzv_door_set(r, on_end, arg); /* a single node's too: trun_rdzv_failed_here's answer (c10d) */
  if (!trun_rdzv_ends_by_key(r) && r->live == NULL) return 0; /* a single node: no other node ends a round */
  trun_rdzv_watch *w = calloc(1, sizeof(*w));
  if (w == NULL) {
    snprintf(err, errlen, "cannot start the failure watcher: out of memory");
    return -1;
  }
  int rc = watch_connect(r, WATCH_CONNECT_MS, &w->c);
  if (rc < 0) {
    snprintf(err, errlen, "cannot open the failure-watch connection to the rendezvous store (port %d): %s",
             r->info.master_port, strerror(-rc));
    free(w);
    return -1;
  }
  w->r = r;
  pthread_mutex_init(&w->mu, NULL);
  *out = w;
  return 0;
}

void trun_rdzv_watch_start(trun_rdzv_watch *w, int round) {
  if (w == NULL || w->running) return;
  trun_rdzv *r = w->r;
  trun__rdzv_door_round(r, round); /* the liveness thread's fates are this round's too */
  if (w->reopen) {
    /* One try: a store that cannot be reached now leaves this node without a watcher, as before a round. */
    w->reopen = 0;
    if (w->c) trun_client_close(w->c);
    if (watch_connect(r, WATCH_CONNECT_MS, &w->c) < 0) w->c = NULL;
  }
  pthread_mutex_lock(&w->mu);
  w->ended = 0;
  w->stopped = 0;
  memset(&w->end, 0, sizeof(w->end));
  w->end.node = -1;
  pthread_mutex_unlock(&w->mu);
  if (w->c == NULL) return;
  w->round = round;
  w->world = r->info.group_world_size;
  w->round_id = r->info.round_id;
  w->by_key = trun_rdzv_ends_by_key(r);
  snprintf(w->ks, sizeof(w->ks), "%s", r->key_space);
  snprintf(w->key, sizeof(w->key), "%s/end", r->key_space);
  w->seen_key[0] = '\0';
  snprintf(w->seen_key, sizeof(w->seen_key), "%s/seen_end/%d", r->key_space, r->info.group_rank);
  w->running = pthread_create(&w->thread, NULL, watch_thread, w) == 0;
  if (!w->running) trun_warn("cannot start the failure watcher; other nodes' failures go unnoticed");
}

void trun_rdzv_watch_cut(trun_rdzv_watch *w) {
  /* shutdown, not close: the thread's request returns with an error, and the thread still owns the client. */
  if (w && w->running && w->c) shutdown(trun_client_fd(w->c), SHUT_RDWR);
}

void trun_rdzv_watch_reconnect(trun_rdzv_watch *w) {
  if (w) w->reopen = 1;
}

void trun_rdzv_watch_stop(trun_rdzv_watch *w) {
  if (w == NULL || !w->running) return;
  pthread_mutex_lock(&w->mu);
  int ended = w->ended;
  if (!w->by_key && !ended) w->stopped = 1;
  pthread_mutex_unlock(&w->mu);
  /* c10d sets the end key only when a node is lost or a trun agent failed: after a round without either
   * nothing wakes the watcher, so its connection is cut now (a new one comes with the next round); the
   * round's end then reads NONE, not a store loss. */
  if (!w->by_key && !ended) trun_rdzv_watch_cut(w);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += WATCH_JOIN_S;
  if (pthread_timedjoin_np(w->thread, NULL, &ts) != 0) {
    trun_warn("the end-of-round watcher did not finish; cutting its store connection");
    trun_rdzv_watch_cut(w);
    pthread_join(w->thread, NULL);
  }
  w->running = 0;
  pthread_mutex_lock(&w->mu);
  int lost = !w->ended || w->stopped || w->end.kind == TRUN_RDZV_END_STORE_LOST;
  pthread_mutex_unlock(&w->mu);
  if (lost || w->reopen) {
    /* The watch connection is gone: the next round, if any, opens a new one. */
    trun_client_close(w->c);
    w->c = NULL;
    w->reopen = 1;
  }
}

void trun_rdzv_watch_close(trun_rdzv_watch *w) {
  if (w == NULL) return;
  trun_rdzv_watch_stop(w);
  if (w->c) trun_client_close(w->c);
  pthread_mutex_destroy(&w->mu);
  free(w);
}
