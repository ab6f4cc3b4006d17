/* A connection of the TCPStore server, and the server's memory: its input buffer within the server's input
 * budget, the lists it is on (its shard's deferred, flush and cross-thread reply queues), its end (close,
 * refuse), the push limit; and the free of the server once its last handle on the caller's loop closed.
 * Calls server_exec.c, server_auth.c and server_acl.c only (layers: server_int.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server_int.h"

void trun__server_free(trun_server *s) {
  trun_kv_free(s->kv);
  if (s->peers) trun_kv_free(s->peers);
  pthread_mutex_destroy(&s->acl_mu);
  pthread_mutex_destroy(&s->kv_mu);
  pthread_mutex_destroy(&s->conns_mu);
  if (s->shards) {
    for (int i = 0; i < s->nshards; i++)
      if (s->shards[i]) {
        pthread_mutex_destroy(&s->shards[i]->mu);
        free(s->shards[i]->fds);
        free(s->shards[i]);
      }
    free(s->shards);
  }
  free(s->acl);
  free(s->own_marker);
  trun__server_auth_free(s);
  free(s);
}

void trun__server_handle_closed(trun_server *s) {
  s->handles_open--;
  if (s->closing && s->handles_open == 0) {
    void (*done)(void *) = s->done;
    void *arg = s->done_arg;
    trun__server_free(s);
    if (done) done(arg);
  }
}

size_t trun__push_limit(const trun_server *s) {
  return s->opts.max_reply ? s->opts.max_pending_out + s->opts.max_reply : 0;
}

/* ---- input ------------------------------------------------------------------------------------ */

void trun__conn_in_release(conn *c) {
  __atomic_sub_fetch(&c->srv->stats.input_bytes, c->in_acct, __ATOMIC_RELAXED);
  c->in_acct = 0;
  trun_buf_free(&c->in);
}

int trun__conn_in_reserve(conn *c, size_t extra) {
  trun_server *s = c->srv;
  size_t cap = trun_buf_cap_after(&c->in, extra);
  if (cap == 0) return -ENOMEM;
  if (cap == c->in.cap) return 0;
  size_t grow = cap - c->in_acct;
  size_t total = __atomic_add_fetch(&s->stats.input_bytes, grow, __ATOMIC_RELAXED);
  if (s->opts.max_input_total > 0 && total > s->opts.max_input_total) {
    __atomic_sub_fetch(&s->stats.input_bytes, grow, __ATOMIC_RELAXED);
    return -ENOBUFS;
  }
  if (trun_buf_reserve(&c->in, extra) < 0) {
    __atomic_sub_fetch(&s->stats.input_bytes, grow, __ATOMIC_RELAXED);
    return -ENOMEM;
  }
  c->in_acct = cap;
  return 0;
}

void trun__conn_in_refused(conn *c, int rc) {
  char why[256];
  if (rc == -ENOBUFS)
    snprintf(why, sizeof(why),
             "the store's input budget of %zu bytes (all connections' unfinished requests) is spent; "
             "retry, or raise it (trun-store serve --max-input-bytes)",
             c->srv->opts.max_input_total);
  else
    snprintf(why, sizeof(why), "out of memory for the input buffer");
  trun__conn_close(c, why);
}

/* ---- the queues of a shard: deferred (opts.turn_work), flush, replies from other threads ------ */

static void on_kick(uv_idle_t *h) {
  (void)h; /* only keeps the loop from blocking while conns are deferred */
}

void trun__conn_defer(conn *c) {
  shard *sh = c->sh;
  if (c->deferred) return;
  c->deferred = 1;
  c->dnext = NULL;
  c->dprev = sh->dtail;
  if (sh->dtail)
    sh->dtail->dnext = c;
  else
    sh->dhead = c;
  sh->dtail = c;
  STAT_ADD(c->srv, deferred, 1);
  if (!uv_is_active((uv_handle_t *)&sh->kick)) uv_idle_start(&sh->kick, on_kick);
}

void trun__conn_undefer(conn *c) {
  shard *sh = c->sh;
  if (!c->deferred) return;
  if (c->dprev)
    c->dprev->dnext = c->dnext;
  else
    sh->dhead = c->dnext;
  if (c->dnext)
    c->dnext->dprev = c->dprev;
  else
    sh->dtail = c->dprev;
  c->dprev = c->dnext = NULL;
  c->deferred = 0;
  if (sh->dhead == NULL && sh->ehead == NULL) uv_idle_stop(&sh->kick);
}

void trun__conn_end_later(conn *c) {
  shard *sh = c->sh;
  if (c->end_later) return;
  c->end_later = 1;
  c->enext = NULL;
  c->eprev = sh->etail;
  if (sh->etail)
    sh->etail->enext = c;
  else
    sh->ehead = c;
  sh->etail = c;
  STAT_ADD(c->srv, ends_put_off, 1);
  if (!uv_is_active((uv_handle_t *)&sh->kick)) uv_idle_start(&sh->kick, on_kick);
}

void trun__conn_unend(conn *c) {
  shard *sh = c->sh;
  if (!c->end_later) return;
  if (c->eprev)
    c->eprev->enext = c->enext;
  else
    sh->ehead = c->enext;
  if (c->enext)
    c->enext->eprev = c->eprev;
  else
    sh->etail = c->eprev;
  c->eprev = c->enext = NULL;
  c->end_later = 0;
  if (sh->dhead == NULL && sh->ehead == NULL) uv_idle_stop(&sh->kick);
}

void trun__conn_queue_flush(conn *c) {
  if (c->fqueued || c->closing) return;
  shard *sh = c->sh;
  c->fqueued = 1;
  c->fprev = NULL;
  c->fnext = sh->flushq;
  if (sh->flushq) sh->flushq->fprev = c;
  sh->flushq = c;
}

void trun__conn_unqueue_flush(conn *c) {
  if (!c->fqueued) return;
  if (c->fprev)
    c->fprev->fnext = c->fnext;
  else
    c->sh->flushq = c->fnext;
  if (c->fnext) c->fnext->fprev = c->fprev;
  c->fprev = c->fnext = NULL;
  c->fqueued = 0;
}

void trun__conn_queue_remote(conn *c, const uint8_t *p, size_t n, trun_slice key, trun_slice old,
                             trun_slice new_, int strings) {
  shard *sh = c->sh;
  pthread_mutex_lock(&sh->mu);
  size_t total = n + (strings ? 24 + key.n + old.n + new_.n : 0);
  size_t limit = trun__push_limit(c->srv);
  int rc = 0;
  if (c->xfail == NULL && limit > 0 && c->xout.len + total > limit)
    c->xfail = "watch updates not read: unsent replies over the output limit";
  if (c->xfail == NULL) rc = trun_buf_append(&c->xout, p, n);
  if (rc == 0 && strings) {
    rc = trun_buf_append_str(&c->xout, key.p, key.n);
    if (rc == 0) rc = trun_buf_append_str(&c->xout, old.p, old.n);
    if (rc == 0) rc = trun_buf_append_str(&c->xout, new_.p, new_.n);
  }
  if (rc < 0) c->xfail = "out of memory queueing a reply";
  if (c->xfail) c->xout.len = 0;
  c->xwatch |= strings;
  if (!c->xqueued) {
    c->xprev = NULL;
    c->xnext = sh->xq;
    if (sh->xq) sh->xq->xprev = c;
    sh->xq = c;
    __atomic_store_n(&c->xqueued, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&sh->mu);
  uv_async_send(&sh->async);
}

/* Owner thread, sh->mu held: takes c off its shard's queue. */
static void xq_unlink(conn *c) {
  if (!c->xqueued) return;
  if (c->xprev)
    c->xprev->xnext = c->xnext;
  else
    c->sh->xq = c->xnext;
  if (c->xnext) c->xnext->xprev = c->xprev;
  c->xprev = c->xnext = NULL;
  __atomic_store_n(&c->xqueued, 0, __ATOMIC_RELEASE);
}

/* Owner thread, sh->mu held, after moving xout into c's output: watch updates queued by other threads
 * took the unsent replies over trun__push_limit (a watcher that does not read). Wake-ups never do. */
static int watch_over(conn *c) {
  size_t limit = trun__push_limit(c->srv);
  int over = c->xfail == NULL && c->xwatch && limit > 0 && trun__pending_out(c) > limit;
  c->xwatch = 0;
  if (over) c->xfail = "watch updates not read: unsent replies over the output limit";
  return over;
}

int trun__conn_take_remote(conn *c) {
  if (!__atomic_load_n(&c->xqueued, __ATOMIC_ACQUIRE)) return 0;
  shard *sh = c->sh;
  pthread_mutex_lock(&sh->mu);
  int rc = c->xfail ? -1 : trun_buf_append(&c->out, c->xout.data, c->xout.len);
  if (c->xfail == NULL && rc < 0) c->xfail = "out of memory queueing a reply";
  if (watch_over(c)) rc = -1;
  c->xout.len = 0;
  xq_unlink(c);
  pthread_mutex_unlock(&sh->mu);
  return rc < 0 ? -1 : 0;
}

conn *trun__shard_take_remote(shard *sh) {
  conn *woken = NULL;
  while (sh->xq) {
    conn *c = sh->xq;
    if (c->xfail == NULL && trun_buf_append(&c->out, c->xout.data, c->xout.len) < 0)
      c->xfail = "out of memory queueing a reply";
    watch_over(c);
    c->xout.len = 0;
    xq_unlink(c);
    if (c->xfail && !c->doomed) c->doomed = c->xfail;
    c->anext = woken;
    woken = c;
  }
  return woken;
}

/* ---- the end of a connection ------------------------------------------------------------------ */

static void on_conn_closed(uv_handle_t *h) {
  conn *c = (conn *)h;
  trun_server *s = c->srv;
  int on_caller_loop = c->sh->index == 0;
  trun__conn_in_release(c);
  trun_buf_free(&c->out);
  trun_buf_free(&c->wbuf);
  trun_buf_free(&c->xout);
  trun_buf_free(&c->owned);
  trun_buf_free(&c->owned_val);
  free(c);
  if (on_caller_loop) trun__server_handle_closed(s);
}

static void conn_unlist(conn *c) {
  if (!c->listed) return;
  shard *sh = c->sh;
  pthread_mutex_lock(&c->srv->conns_mu);
  if (c->prev)
    c->prev->next = c->next;
  else
    sh->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->listed = 0;
  if (c->peer_counted) trun__peer_count(c->srv, &c->addr, -1, NULL); /* frees, never allocates */
  c->peer_counted = 0;
  trun__probation_forget(c);
  pthread_mutex_unlock(&c->srv->conns_mu);
}

void trun__conn_close(conn *c, const char *why) {
  if (c->closing) return;
  c->closing = 1;
  trun_server *s = c->srv;
  if (why) {
    STAT_ADD(s, rejected, 1);
    trun_warn("closed connection from %s (%s): %s", c->peer, trun_proto_gen_name(c->gen), why);
  }
  pthread_mutex_lock(&s->kv_mu);
  if (trun_kv_cancel(s->kv, &c->w) > 0) STAT_ADD(s, waiting, -1);
  trun_kv_cancel_watches(s->kv, &c->w);
  trun__conn_gone(c);
  __atomic_store_n(&s->stats.wait_bytes, (uint64_t)trun_kv_reg_bytes(s->kv), __ATOMIC_RELAXED);
  pthread_mutex_unlock(&s->kv_mu);
  trun__conn_undefer(c);
  trun__conn_unend(c);
  /* No registration is left, so no other thread queues for c any more. */
  pthread_mutex_lock(&c->sh->mu);
  xq_unlink(c);
  pthread_mutex_unlock(&c->sh->mu);
  trun__conn_unqueue_flush(c); /* freed once libuv lets go: nothing may point at it */
  conn_unlist(c);
  STAT_ADD(s, connections, -1);
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

void trun__conn_refuse(conn *c, const char *why) {
  trun_server *s = c->srv;
  STAT_ADD(s, refused, 1);
  unsigned n = __atomic_add_fetch(&s->refused_logged, 1, __ATOMIC_RELAXED);
  if (n <= 10)
    trun_warn("store on port %d refused a connection from %s: %s%s", s->port, c->peer, why,
              n == 10 ? " (further refusals are not logged)" : "");
  trun__conn_close(c, NULL);
}
