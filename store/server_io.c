/* The traffic of a TCPStore server's connection on its shard's loop: reading, parsing and running its
 * requests (held while its output is full, deferred past the strangers' share of a turn), writing and
 * flushing its replies, the waiters' callbacks (wake-ups, watch updates) and the connections they doom.
 * Calls server_conn.c, server_exec.c and server_acl.c only (layers: server_int.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server_int.h"

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static size_t process(conn *c, const uint8_t *data, size_t len);
static void conn_write(conn *c);

/* ---- wake-ups, watch updates and the connections they doom ------------------------------------ */

static void on_reap(uv_idle_t *h) {
  shard *sh = h->data;
  for (conn *c = sh->conns, *next; c; c = next) {
    next = c->next;
    if (c->doomed) trun__conn_close(c, c->doomed);
  }
  sh->ndoomed = 0;
  uv_idle_stop(h);
  trun__shard_flush_woken(sh);
}

/* From inside a wake or watch callback the key space is mid-iteration: closing now would free the
 * registrations it walks. Mark the connection and close it on the next loop turn. */
static void conn_doom(conn *c, const char *why) {
  if (c->doomed || c->closing) return;
  c->doomed = why;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
  if (c->sh->ndoomed++ == 0) uv_idle_start(&c->sh->reaper, on_reap);
}

/* Called by the key space, under kv_mu, on the thread of the request that woke w. */
static void conn_wake(trun_waiter *w) {
  conn *c = (conn *)((char *)w - offsetof(conn, w));
  trun_server *s = c->srv;
  STAT_ADD(s, waiting, -1);
  const uint8_t stop = TRUN_WAIT_STOP_WAITING;
  if (c->sh != s->cur) {
    trun__conn_queue_remote(c, &stop, 1, (trun_slice){0}, (trun_slice){0}, (trun_slice){0}, 0);
    return;
  }
  if (c->closing) return;
  if (trun_buf_append_u8(&c->out, stop) < 0) {
    conn_doom(c, "out of memory queueing a reply");
    return;
  }
  trun__conn_queue_flush(c);
}

static void conn_notify(trun_waiter *w, uint8_t type, trun_slice key, trun_slice old, trun_slice new_) {
  conn *c = (conn *)((char *)w - offsetof(conn, w));
  if (c->sh != c->srv->cur) {
    trun__conn_queue_remote(c, &type, 1, key, old, new_, 1);
    return;
  }
  if (c->closing) return;
  size_t limit = trun__push_limit(c->srv);
  if (limit > 0 && trun__pending_out(c) + 25 + key.n + old.n + new_.n > limit) {
    conn_doom(c, "watch updates not read: unsent replies over the output limit");
    return;
  }
  if (trun_buf_append_u8(&c->out, type) < 0 || trun_buf_append_str(&c->out, key.p, key.n) < 0 ||
      trun_buf_append_str(&c->out, old.p, old.n) < 0 || trun_buf_append_str(&c->out, new_.p, new_.n) < 0) {
    conn_doom(c, "out of memory queueing a watch update");
    return;
  }
  trun__conn_queue_flush(c);
}

/* ---- output, and reading as it allows */

/* Reads while c's requests may run: none is held and the unsent replies are under max_pending_out (once
 * stopped, under half of it). */
static void update_reading(conn *c) {
  size_t pending = trun__pending_out(c), max = c->srv->opts.max_pending_out;
  if (c->closing || c->doomed || c->end_later) return;
  if (c->reading && (c->held || c->deferred || pending > max)) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
  } else if (!c->reading && !c->held && !c->deferred && pending <= max / 2) {
    c->reading = 1;
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc < 0) trun__conn_close(c, uv_strerror(rc));
  }
}

static void on_write(uv_write_t *req, int status) {
  conn *c = req->data;
  shard *sh = c->sh;
  c->writing = 0;
  c->wbuf.len = 0;
  if (c->closing) return;
  if (status < 0)
    trun__conn_close(c, NULL); /* peer went away; nothing to report (its end may wake waiters) */
  else
    trun__conn_flush(c);
  trun__shard_flush_woken(sh);
}

/* Runs the requests held in c->in now that the output drained below half of max_pending_out. */
static void conn_resume(conn *c) {
  c->held = 0;
  size_t used = process(c, c->in.data, c->in.len);
  if (c->closing) return;
  trun_buf_consume(&c->in, used);
  if (c->in.len == 0) trun__conn_in_release(c); /* an idle connection holds no buffer */
}

/* Hands c's replies to the kernel or libuv; runs held requests as the output drains; then reads or not. */
void trun__conn_flush(conn *c) {
  while (!c->closing) {
    if (!c->writing && c->out.len > 0) conn_write(c);
    if (c->closing || !c->held || c->doomed || trun__pending_out(c) > c->srv->opts.max_pending_out / 2) break;
    conn_resume(c);
  }
  if (!c->closing) update_reading(c);
}

/* Writes c->out: what the kernel takes now, the rest through libuv (on_write). */
static void conn_write(conn *c) {
  uv_buf_t b =
      uv_buf_init((char *)c->out.data, (unsigned)(c->out.len > 0x7fffffff ? 0x7fffffff : c->out.len));
  int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  /* On an error other than EAGAIN, uv_write below fails too and on_write closes the connection a loop turn
   * later. */
  if (n < 0) n = 0;
  trun_buf_consume(&c->out, (size_t)n);
  if (c->out.len > 0) {
    trun_buf t = c->wbuf; /* hand the rest to libuv; keep the spare buffer for new replies */
    c->wbuf = c->out;
    c->out = t;
    c->out.len = 0;
    b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc < 0) {
      trun__conn_close(c, NULL);
      return;
    }
    c->writing = 1;
  }
}

/* Reads land in the shard's shared buffer while a connection has no partial request; only the bytes of
 * an unfinished request are copied into the connection's own buffer. Idle connections hold no buffer. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)suggested;
  conn *c = (conn *)h;
  if (c->in.len == 0) {
    *b = uv_buf_init((char *)c->sh->rbuf, sizeof(c->sh->rbuf));
    return;
  }
  size_t want = READ_CHUNK;
  if (c->need > c->in.len && c->need - c->in.len > want) want = c->need - c->in.len;
  int rc = trun__conn_in_reserve(c, want);
  if (rc < 0) {
    c->in_over = rc;
    *b = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
    return;
  }
  size_t room = c->in.cap - c->in.len;
  *b = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(room > 0x7fffffff ? 0x7fffffff : room));
}

void trun__shard_flush_woken(shard *sh) {
  /* A flush may close its connection (a write error), whose end may queue others: take one at a time. */
  while (sh->flushq) {
    conn *c = sh->flushq;
    trun__conn_unqueue_flush(c);
    trun__conn_flush(c);
  }
}

/* ---- the strangers' share of a turn (opts.turn_work) ------------------------------------------ */

/* Each turn of the shard's loop, before it polls: a new budget for strangers, spent first on the
 * connections put off before, oldest first; what the poll then reads from agents runs at once. */
static void on_turn(uv_prepare_t *h) {
  shard *sh = h->data;
  size_t max = sh->srv->opts.turn_work;
  int ends = sh->srv->opts.turn_conns;
  sh->spent = 0;
  sh->ended = 0;
  while (sh->ehead && (ends == 0 || sh->ended < ends)) {
    sh->ended++;
    trun__conn_close(sh->ehead, NULL); /* takes it off the list */
  }
  while (sh->dhead && (max == 0 || sh->spent < max)) {
    conn *c = sh->dhead;
    trun__conn_undefer(c);
    if (c->closing || c->doomed) continue;
    size_t used = process(c, c->in.data, c->in.len);
    if (c->closing) continue;
    trun_buf_consume(&c->in, used);
    if (c->in.len == 0) trun__conn_in_release(c);
    trun__conn_flush(c);
  }
  trun__shard_flush_woken(sh);
}

void trun__shard_turn_init(shard *sh) {
  uv_prepare_init(sh->loop, &sh->turn);
  sh->turn.data = sh;
  uv_prepare_start(&sh->turn, on_turn);
  uv_unref((uv_handle_t *)&sh->turn); /* never what keeps a loop running */
  uv_idle_init(sh->loop, &sh->kick);
  sh->kick.data = sh;
  uv_unref((uv_handle_t *)&sh->kick);
}

void trun__shard_turn_close(shard *sh, uv_close_cb cb) {
  uv_close((uv_handle_t *)&sh->turn, cb);
  uv_close((uv_handle_t *)&sh->kick, cb);
}

/* ---- requests --------------------------------------------------------------------------------- */

/* Executes one request under the key space's lock; replies queued for c by other threads go first. */
static int handle_locked(conn *c, const trun_req *r, const char **why) {
  trun_server *s = c->srv;
  pthread_mutex_lock(&s->kv_mu);
  if (trun__conn_take_remote(c) < 0) {
    pthread_mutex_unlock(&s->kv_mu);
    *why = c->xfail;
    return -ENOMEM;
  }
  s->cur = c->sh;
  int rc = trun__exec_request(c, r, why);
  s->cur = NULL;
  __atomic_store_n(&s->stats.wait_bytes, (uint64_t)trun_kv_reg_bytes(s->kv), __ATOMIC_RELAXED);
  pthread_mutex_unlock(&s->kv_mu);
  return rc;
}

/* Closes c for a wait over a budget: counted, logged for the first few only (a flood must not flood the
 * log too). */
static void over_budget(conn *c, const char *why) {
  trun_server *s = c->srv;
  STAT_ADD(s, over_budget, 1);
  STAT_ADD(s, rejected, 1);
  unsigned n = __atomic_add_fetch(&s->budget_logged, 1, __ATOMIC_RELAXED);
  if (n <= 10)
    trun_warn("closed connection from %s (%s): %s%s", c->peer, trun_proto_gen_name(c->gen), why,
              n == 10 ? " (further closes for the wait budgets are counted, not logged)" : "");
  trun__conn_close(c, NULL);
}

/* Parses and executes every whole request in data[0..len); returns the bytes taken. c->need is left
 * relative to data + the return value. */
static size_t process(conn *c, const uint8_t *data, size_t len) {
  trun_server *s = c->srv;
  size_t off = 0;
  if (c->gen == TRUN_GEN_UNKNOWN) {
    size_t used;
    c->gen = trun_gen_detect(data, len, s->opts.legacy, &used);
    if (c->gen == TRUN_GEN_UNKNOWN) return 0;
    off = used;
    c->need = 0;
  }
  while (off < len && !c->closing && !c->doomed) {
    if (trun__pending_out(c) > s->opts.max_pending_out) {
      c->held = 1; /* back-pressure: the rest waits in c->in until the client reads */
      break;
    }
    if (!c->agent && s->opts.turn_work > 0 && c->sh->spent >= s->opts.turn_work) {
      trun__conn_defer(c); /* strangers had their share of this turn: the rest waits in c->in */
      break;
    }
    if (len - off < c->need) break;
    trun_req r;
    size_t need;
    /* A list request that arrives in pieces is parsed on from where the last piece left it (c->ps). */
    ssize_t n = trun_req_parse_resume(c->gen, data + off, len - off, &s->opts.limits, &r, &need, &c->ps);
    if (n < 0) {
      char why[160];
      snprintf(why, sizeof(why), "%s (byte 0x%02x)", r.err ? r.err : "malformed request", data[off]);
      trun__conn_close(c, why);
      return off;
    }
    if (n == 0) {
      c->need = need;
      if (s->opts.max_conn_memory > 0 && need > s->opts.max_conn_memory) {
        char why[160];
        snprintf(why, sizeof(why),
                 "a request of at least %zu bytes is over the connection memory limit of %zu", need,
                 s->opts.max_conn_memory);
        trun__conn_close(c, why);
        return off;
      }
      size_t used = __atomic_load_n(&s->stats.input_bytes, __ATOMIC_RELAXED);
      if (s->opts.max_input_total > 0 && need > c->in_acct &&
          need - c->in_acct > (used < s->opts.max_input_total ? s->opts.max_input_total - used : 0)) {
        trun__conn_in_refused(c, -ENOBUFS); /* before its bytes come: the budget would not hold them */
        return off;
      }
      break;
    }
    const char *why = NULL;
    int rc = handle_locked(c, &r, &why);
    if (!c->agent) c->sh->spent += 1 + (size_t)r.count + (size_t)n / 256;
    if (rc == -EDQUOT || rc == -ENOSPC) {
      over_budget(c, why);
      return off;
    }
    if (rc < 0) {
      char msg[256];
      if (rc == -EMSGSIZE)
        snprintf(msg, sizeof(msg),
                 "%s of %zu bytes in %s: ask for fewer or smaller values at a time (trun-store serve: "
                 "--max-reply-bytes)",
                 why, s->opts.max_reply, trun_proto_op_name(r.op));
      else
        snprintf(msg, sizeof(msg), "%s in %s", why, trun_proto_op_name(r.op));
      trun__conn_close(c, msg);
      return off;
    }
    off += (size_t)n;
    c->need = 0;
  }
  return off;
}

static void read_data(conn *c, ssize_t nread, const uv_buf_t *b) {
  if ((uint8_t *)b->base == c->sh->rbuf) {
    size_t used = process(c, c->sh->rbuf, (size_t)nread), rest = (size_t)nread - used;
    if (c->closing) return;
    if (rest > 0) {
      int rc = trun__conn_in_reserve(c, rest);
      if (rc < 0) {
        trun__conn_in_refused(c, rc);
        return;
      }
      trun_buf_append(&c->in, c->sh->rbuf + used, rest);
    }
  } else {
    c->in.len += (size_t)nread;
    size_t used = process(c, c->in.data, c->in.len);
    if (c->closing) return;
    trun_buf_consume(&c->in, used);
    if (c->in.len == 0) trun__conn_in_release(c); /* an idle connection holds no buffer */
  }
  if (!c->closing) trun__conn_flush(c);
}

/* EOF or reset: the client left. A flood of connections that all end at once must not hold the agents'
 * requests for the whole lot: beyond opts.turn_conns a turn, connections without the agent token close in
 * later turns (not read meanwhile). An agent's end is seen at once (its liveness keys). */
static void peer_left(conn *c) {
  shard *sh = c->sh;
  int max = c->srv->opts.turn_conns;
  if (c->agent || max == 0 || sh->ended < max) {
    if (!c->agent) sh->ended++;
    trun__conn_close(c, NULL);
    return;
  }
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
  trun__conn_end_later(c);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  conn *c = (conn *)st;
  shard *sh = c->sh;
  if (c->closing) return;
  unsigned gen = __atomic_load_n(&c->srv->acl_gen, __ATOMIC_ACQUIRE);
  if (gen != c->acl_gen) {
    /* The rules changed since this connection was admitted (the job's hosts became known). */
    c->acl_gen = gen;
    if (!trun__addr_allowed(c->srv, &c->addr))
      trun__conn_refuse(c, "not an allowed peer (admitted before the job's hosts were known)");
  }
  if (!c->closing) {
    if (nread == UV_ENOBUFS)
      trun__conn_in_refused(c, c->in_over);
    else if (nread < 0)
      peer_left(c);
    else if (nread > 0)
      read_data(c, nread, b);
  }
  /* The requests, or the end of a connection that owned keys, may have woken waiters of this loop. */
  trun__shard_flush_woken(sh);
}

/* ---- a new connection ------------------------------------------------------------------------- */

conn *trun__conn_new(shard *sh) {
  conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    trun_error("out of memory accepting a connection on port %d", sh->srv->port);
    return NULL;
  }
  c->srv = sh->srv;
  c->sh = sh;
  c->w.wake = conn_wake;
  c->w.notify = conn_notify;
  int rc = uv_tcp_init(sh->loop, &c->tcp);
  if (rc < 0) {
    trun_error("uv_tcp_init on the store's port %d: %s", sh->srv->port, uv_strerror(rc));
    free(c);
    return NULL;
  }
  if (sh->index == 0) sh->srv->handles_open++;
  STAT_ADD(sh->srv, connections, 1);
  STAT_ADD(sh->srv, accepted, 1);
  return c;
}

void trun__conn_start(conn *c) {
  c->reading = 1;
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc < 0) trun__conn_close(c, uv_strerror(rc));
}
