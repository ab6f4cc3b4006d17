/* TCPStore server: connections, request execution, life cycle (server.h; internals in server_int.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "server_int.h"

static void refuse(conn *c, const char *why);
static void conn_undefer(conn *c);

static void server_free(trun_server *s) {
  trun_kv_free(s->kv);
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

/* A handle on the caller's loop was closed: the last one frees the server once it is closing. */
void trun__server_handle_closed(trun_server *s) {
  s->handles_open--;
  if (s->closing && s->handles_open == 0) {
    void (*done)(void *) = s->done;
    void *arg = s->done_arg;
    server_free(s);
    if (done) done(arg);
  }
}

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

void trun_server_opts_default(trun_server_opts *o) {
  memset(o, 0, sizeof(*o));
  trun_limits_default(&o->limits);
  o->legacy = TRUN_GEN_LEGACY113;
  o->max_pending_out = 4u << 20;
  o->max_reply = TRUN_SERVER_DEFAULT_MAX_REPLY;
  o->max_input_total = TRUN_SERVER_DEFAULT_MAX_INPUT;
  o->max_wait_conn = TRUN_SERVER_DEFAULT_MAX_WAIT_CONN;
  o->max_wait_total = TRUN_SERVER_DEFAULT_MAX_WAIT_TOTAL;
  o->turn_work = TRUN_SERVER_DEFAULT_TURN_WORK;
  o->peer_reserve = TRUN_SERVER_PEER_RESERVE;
  o->threads = 1;
}

size_t trun__push_limit(const trun_server *s) {
  return s->opts.max_reply ? s->opts.max_pending_out + s->opts.max_reply : 0;
}

int trun_server_port(const trun_server *s) { return s->port; }
_Static_assert(TRUN_SERVER_WAIT_REG_COST == TRUN_KV_REG_COST, "server.h's cost is the key space's");

int trun_server_compare_set(trun_server *s, trun_slice key, trun_slice expected, trun_slice desired,
                            trun_slice *reply) {
  return trun_kv_compare_set(s->kv, key, expected, desired, reply);
}

int trun_server_add(trun_server *s, trun_slice key, int64_t delta, int64_t *result) {
  return trun_kv_add(s->kv, key, delta, result);
}
void trun_server_get_stats(const trun_server *s, trun_server_stats *st) {
  st->connections = __atomic_load_n(&s->stats.connections, __ATOMIC_RELAXED);
  st->accepted = __atomic_load_n(&s->stats.accepted, __ATOMIC_RELAXED);
  st->rejected = __atomic_load_n(&s->stats.rejected, __ATOMIC_RELAXED);
  st->ops = __atomic_load_n(&s->stats.ops, __ATOMIC_RELAXED);
  st->waiting = __atomic_load_n(&s->stats.waiting, __ATOMIC_RELAXED);
  st->refused = __atomic_load_n(&s->stats.refused, __ATOMIC_RELAXED);
  st->input_bytes = __atomic_load_n(&s->stats.input_bytes, __ATOMIC_RELAXED);
  st->wait_bytes = __atomic_load_n(&s->stats.wait_bytes, __ATOMIC_RELAXED);
  st->over_budget = __atomic_load_n(&s->stats.over_budget, __ATOMIC_RELAXED);
  st->deferred = __atomic_load_n(&s->stats.deferred, __ATOMIC_RELAXED);
}

static int somaxconn(void) {
  FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
  int v = 0;
  if (f) {
    if (fscanf(f, "%d", &v) != 1) v = 0;
    fclose(f);
  }
  return v > 0 ? v : 4096;
}

static void peer_name(conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  snprintf(c->peer, sizeof(c->peer), "?");
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0) return;
  trun__sockaddr_entry((struct sockaddr *)&ss, &c->addr);
  char host[48] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    uv_ip4_name(a, host, sizeof(host));
    port = ntohs(a->sin_port);
    snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
  } else if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    port = ntohs(a->sin6_port);
    if (c->addr.family == AF_INET) { /* an IPv4 peer of the dual-stack listener: shown as IPv4 */
      inet_ntop(AF_INET, c->addr.a, host, sizeof(host));
      snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
      return;
    }
    uv_ip6_name(a, host, sizeof(host));
    snprintf(c->peer, sizeof(c->peer), "[%s]:%d", host, port);
  }
}

/* ---- replies ---------------------------------------------------------------------------------- */

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

typedef struct {
  trun_buf *out;
  uint64_t n;
  size_t bytes;
  const conn *c; /* the asking connection: the agents' keys are listed only to an agent */
} list_acc;

static int list_count(void *arg, trun_slice key) {
  if (trun__key_hidden(((list_acc *)arg)->c, key)) return 0;
  ((list_acc *)arg)->n++;
  ((list_acc *)arg)->bytes += 8 + key.n;
  return 0;
}

/* Whether a reply of n bytes is within the reply limit; else *why says so (the request closes c). */
static int reply_fits(conn *c, size_t n, const char **why) {
  if (c->srv->opts.max_reply == 0 || n <= c->srv->opts.max_reply) return 1;
  *why = "reply over the reply limit";
  return 0;
}

static int list_put(void *arg, trun_slice key) {
  if (trun__key_hidden(((list_acc *)arg)->c, key)) return 0;
  return trun_buf_append_str(((list_acc *)arg)->out, key.p, key.n);
}

int trun_server_own_keys(trun_server *s, const char *marker, trun_server_gone_fn gone, void *arg) {
  char *m = gone && marker ? strdup(marker) : NULL;
  if (gone && marker && m == NULL) return -ENOMEM;
  pthread_mutex_lock(&s->kv_mu);
  free(s->own_marker);
  s->own_marker = m;
  s->own_gone = m ? gone : NULL;
  s->own_arg = arg;
  pthread_mutex_unlock(&s->kv_mu);
  return 0;
}

/* Under kv_mu: after c SET key to val. Out of memory only loses the ownership (no liveness for it). */
static void conn_own(conn *c, trun_slice key, trun_slice val) {
  c->owned.len = c->owned_val.len = 0;
  if (trun_buf_append(&c->owned, key.p, key.n) < 0 || trun_buf_append(&c->owned_val, val.p, val.n) < 0)
    c->owned.len = c->owned_val.len = 0;
}

/* Under kv_mu, on c's thread, as c ends: the key it owns still holds its value: its owner is gone. */
static void conn_gone(conn *c) {
  trun_server *s = c->srv;
  trun_slice v;
  if (c->owned.len == 0 || !s->own_gone || s->closing) return;
  trun_slice k = {c->owned.data, c->owned.len};
  if (!trun_kv_get(s->kv, k, &v) || v.n != c->owned_val.len ||
      (v.n > 0 && memcmp(v.p, c->owned_val.data, v.n) != 0)) /* an empty value has no buffer */
    return;
  s->cur = c->sh;
  s->own_gone(s->own_arg, s, k, (trun_slice){c->owned_val.data, c->owned_val.len}, c->peer);
  s->cur = NULL;
}

/* The wait budget of c's registrations: none for an agent of the job (its waits are the job's own). */
static const trun_kv_budget *wait_budget(const conn *c, trun_kv_budget *b) {
  if (c->agent) return NULL;
  b->per_waiter = c->srv->opts.max_wait_conn;
  b->total = c->srv->opts.max_wait_total;
  return b;
}

/* A WAIT, BARRIER or WATCH_KEY over a wait budget (rc -EDQUOT or -ENOSPC): *why says which. */
static int wait_refused(conn *c, int rc, const trun_req *r, const char **why) {
  const trun_server_opts *o = &c->srv->opts;
  if (rc == -EDQUOT)
    snprintf(c->why, sizeof(c->why),
             "%s on %llu keys: its wait registrations (%d bytes and the key each) are over the "
             "connection's wait budget of %zu bytes; wait on fewer keys at a time (trun-store serve: "
             "--max-wait-bytes)",
             trun_proto_op_name(r->op), (unsigned long long)(r->op == TRUN_OP_WAIT ? r->count : 1),
             TRUN_KV_REG_COST, o->max_wait_conn);
  else
    snprintf(c->why, sizeof(c->why),
             "%s: the store's wait budget of %zu bytes (every connection's wait registrations) is spent; "
             "retry, or raise it (trun-store serve: --max-wait-bytes-total)",
             trun_proto_op_name(r->op), o->max_wait_total);
  *why = c->why;
  return rc;
}

/* Executes one request. Returns 0, or a negative errno with *why set (the connection is closed). */
static int handle(conn *c, const trun_req *r, const char **why) {
  trun_kv *kv = c->srv->kv;
  trun_buf *out = &c->out;
  trun_slice v;
  trun_kv_budget budget;
  int64_t n;
  int rc = 0;
  STAT_ADD(c->srv, ops, 1);
  if ((rc = trun__server_auth_request(c, r, why)) != 0) return rc < 0 ? rc : 0;
  switch (r->op) {
    case TRUN_OP_SET:
      rc = trun_kv_set(kv, r->key, r->val);
      if (rc == 0 && trun__key_owned(c, r->key)) conn_own(c, r->key, r->val);
      break;
    case TRUN_OP_APPEND: rc = trun_kv_append(kv, r->key, r->val); break;
    case TRUN_OP_COMPARE_SET:
      rc = trun_kv_compare_set(kv, r->key, r->val, r->val2, &v);
      if (rc == 0 && !reply_fits(c, 8 + v.n, why)) return -EMSGSIZE;
      if (rc == 0) rc = trun_buf_append_str(out, v.p, v.n);
      break;
    case TRUN_OP_GET:
      /* libuv server's rule: a missing key reads as empty (torch clients WAIT before GET). */
      if (!trun_kv_get(kv, r->key, &v)) v.n = 0;
      if (!reply_fits(c, 8 + v.n, why)) return -EMSGSIZE;
      rc = trun_buf_append_str(out, v.p, v.n);
      break;
    case TRUN_OP_ADD:
      rc = trun_kv_add(kv, r->key, r->num, &n);
      if (rc == -EINVAL) {
        *why = "ADD on a value that is not a decimal integer";
        return rc;
      }
      if (rc == -ERANGE) {
        *why = "ADD overflows int64";
        return rc;
      }
      if (rc == 0) rc = trun_buf_append_u64(out, (uint64_t)n);
      break;
    case TRUN_OP_CHECK:
      rc = trun_buf_append_u8(
          out, trun_kv_check(kv, r->count, r->items) ? TRUN_CHECK_READY : TRUN_CHECK_NOT_READY);
      break;
    case TRUN_OP_WAIT: {
      int was = c->w.pending > 0;
      rc = trun_kv_wait(kv, &c->w, r->count, r->items, wait_budget(c, &budget));
      if (was) STAT_ADD(c->srv, waiting, -1);
      if (rc == -EDQUOT || rc == -ENOSPC) return wait_refused(c, rc, r, why);
      if (rc == 1)
        rc = trun_buf_append_u8(out, TRUN_WAIT_STOP_WAITING);
      else if (rc == 0)
        STAT_ADD(c->srv, waiting, 1);
      break;
    }
    case TRUN_OP_BARRIER: {
      int was = c->w.pending > 0;
      rc = trun_kv_barrier(kv, &c->w, r->key, r->num, wait_budget(c, &budget));
      if (was) STAT_ADD(c->srv, waiting, -1);
      if (rc == -EDQUOT || rc == -ENOSPC) return wait_refused(c, rc, r, why);
      if (rc == 1)
        rc = trun_buf_append_u8(out, TRUN_WAIT_STOP_WAITING);
      else if (rc == 0)
        STAT_ADD(c->srv, waiting, 1);
      else if (rc == -EINVAL || rc == -ERANGE) {
        *why = "BARRIER on a key whose value is not a counter";
        return rc;
      }
      break;
    }
    case TRUN_OP_CANCEL_WAIT:
      if (trun_kv_cancel(kv, &c->w) > 0) STAT_ADD(c->srv, waiting, -1);
      rc = trun_buf_append_u8(out, TRUN_WAIT_CANCELED);
      break;
    case TRUN_OP_GETNUMKEYS: rc = trun_buf_append_u64(out, trun_kv_num_keys(kv)); break;
    case TRUN_OP_DELETE_KEY:
      if (c->owned.len > 0 && c->owned.len == r->key.n && memcmp(c->owned.data, r->key.p, r->key.n) == 0)
        c->owned.len = c->owned_val.len = 0;
      rc = trun_buf_append_u64(out, (uint64_t)trun_kv_delete(kv, r->key));
      break;
    case TRUN_OP_MULTI_GET: {
      const uint8_t *pos = r->items;
      size_t total = 0; /* first the reply's size: nothing is queued when it is over the limit */
      for (uint64_t i = 0; i < r->count; i++)
        total += 8 + (trun_kv_get(kv, trun_req_item(&pos), &v) ? v.n : 0);
      if (!reply_fits(c, total, why)) return -EMSGSIZE;
      pos = r->items;
      for (uint64_t i = 0; i < r->count && rc == 0; i++) {
        trun_slice key = trun_req_item(&pos);
        if (!trun_kv_get(kv, key, &v)) v.n = 0;
        rc = trun_buf_append_str(out, v.p, v.n);
      }
      break;
    }
    case TRUN_OP_MULTI_SET: {
      const uint8_t *pos = r->items;
      for (uint64_t i = 0; i < r->count && rc == 0; i++) {
        trun_slice key = trun_req_item(&pos);
        trun_slice val = trun_req_item(&pos);
        rc = trun_kv_set(kv, key, val);
      }
      break;
    }
    case TRUN_OP_PING: rc = trun_buf_append_u32(out, r->u32); break;
    case TRUN_OP_QUEUE_PUSH: rc = trun_kv_queue_push(kv, r->key, r->val); break;
    case TRUN_OP_QUEUE_POP:
      n = trun_kv_queue_pop(kv, r->key, &v);
      if (n < 0) {
        rc = (int)n;
        break;
      }
      rc = trun_buf_append_u64(out, (uint64_t)n);
      if (n > 0) {
        if (rc == 0) rc = trun_buf_append_str(out, v.p, v.n);
        free((void *)v.p);
      }
      break;
    case TRUN_OP_QUEUE_LEN: rc = trun_buf_append_u64(out, (uint64_t)trun_kv_queue_len(kv, r->key)); break;
    case TRUN_OP_LIST: {
      list_acc acc = {out, 0, 8, c};
      trun_kv_foreach(kv, list_count, &acc);
      if (!reply_fits(c, acc.bytes, why)) return -EMSGSIZE;
      rc = trun_buf_append_u64(out, acc.n);
      if (rc == 0) rc = trun_kv_foreach(kv, list_put, &acc);
      break;
    }
    case TRUN_OP_WATCH_KEY:
      rc = trun_kv_watch(kv, &c->w, r->key, wait_budget(c, &budget));
      if (rc == -EDQUOT || rc == -ENOSPC) return wait_refused(c, rc, r, why);
      if (rc == 0) rc = trun_buf_append_u8(out, TRUN_WATCH_REGISTERED);
      break;
    default: *why = "query type not served"; return -EBADMSG;
  }
  if (rc < 0) *why = "out of memory";
  return rc < 0 ? rc : 0;
}

/* ---- connection I/O --------------------------------------------------------------------------- */

/* Gives c's input buffer back, and its share of the server's input budget. */
static void conn_in_release(conn *c) {
  __atomic_sub_fetch(&c->srv->stats.input_bytes, c->in_acct, __ATOMIC_RELAXED);
  c->in_acct = 0;
  trun_buf_free(&c->in);
}

/* Makes room for extra more input bytes in c->in within the server's input budget, counted before any
 * allocation. 0, -ENOBUFS over the budget, -ENOMEM. */
static int conn_in_reserve(conn *c, size_t extra) {
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

static void in_refused(conn *c, int rc) {
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

static void on_conn_closed(uv_handle_t *h) {
  conn *c = (conn *)h;
  trun_server *s = c->srv;
  int on_caller_loop = c->sh->index == 0;
  conn_in_release(c);
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
  conn_gone(c);
  __atomic_store_n(&s->stats.wait_bytes, (uint64_t)trun_kv_reg_bytes(s->kv), __ATOMIC_RELAXED);
  pthread_mutex_unlock(&s->kv_mu);
  conn_undefer(c);
  /* No registration is left, so no other thread queues for c any more. */
  pthread_mutex_lock(&c->sh->mu);
  trun__xq_unlink(c);
  pthread_mutex_unlock(&c->sh->mu);
  trun__conn_unqueue_flush(c); /* freed once libuv lets go: nothing may point at it */
  conn_unlist(c);
  STAT_ADD(s, connections, -1);
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static size_t process(conn *c, const uint8_t *data, size_t len);
static void conn_write(conn *c);

/* Reads while c's requests may run: none is held and the unsent replies are under max_pending_out (once
 * stopped, under half of it). */
static void update_reading(conn *c) {
  size_t pending = trun__pending_out(c), max = c->srv->opts.max_pending_out;
  if (c->closing || c->doomed) return;
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
  if (c->in.len == 0) conn_in_release(c); /* an idle connection holds no buffer */
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
  int rc = conn_in_reserve(c, want);
  if (rc < 0) {
    c->in_over = rc;
    *b = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
    return;
  }
  size_t room = c->in.cap - c->in.len;
  *b = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(room > 0x7fffffff ? 0x7fffffff : room));
}

/* ---- the strangers' share of a turn (opts.turn_work) ------------------------------------------ */

static void on_kick(uv_idle_t *h) {
  (void)h; /* only keeps the loop from blocking while conns are deferred */
}

/* c's requests wait for a later turn: it stops reading (update_reading) until on_turn runs them. */
static void conn_defer(conn *c) {
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

/* Takes c off its shard's deferred list. */
static void conn_undefer(conn *c) {
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
  if (sh->dhead == NULL) uv_idle_stop(&sh->kick);
}

/* Each turn of the shard's loop, before it polls: a new budget for strangers, spent first on the
 * connections put off before, oldest first; what the poll then reads from agents runs at once. */
static void on_turn(uv_prepare_t *h) {
  shard *sh = h->data;
  size_t max = sh->srv->opts.turn_work;
  sh->spent = 0;
  while (sh->dhead && (max == 0 || sh->spent < max)) {
    conn *c = sh->dhead;
    conn_undefer(c);
    if (c->closing || c->doomed) continue;
    size_t used = process(c, c->in.data, c->in.len);
    if (c->closing) continue;
    trun_buf_consume(&c->in, used);
    if (c->in.len == 0) conn_in_release(c);
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
  int rc = handle(c, r, why);
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
      conn_defer(c); /* strangers had their share of this turn: the rest waits in c->in */
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
        in_refused(c, -ENOBUFS); /* before its bytes come: the budget would not hold them */
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
      int rc = conn_in_reserve(c, rest);
      if (rc < 0) {
        in_refused(c, rc);
        return;
      }
      trun_buf_append(&c->in, c->sh->rbuf + used, rest);
    }
  } else {
    c->in.len += (size_t)nread;
    size_t used = process(c, c->in.data, c->in.len);
    if (c->closing) return;
    trun_buf_consume(&c->in, used);
    if (c->in.len == 0) conn_in_release(c); /* an idle connection holds no buffer */
  }
  if (!c->closing) trun__conn_flush(c);
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
      refuse(c, "not an allowed peer (admitted before the job's hosts were known)");
  }
  if (!c->closing) {
    if (nread == UV_ENOBUFS)
      in_refused(c, c->in_over);
    else if (nread < 0)
      trun__conn_close(c, NULL); /* EOF or reset: the client left */
    else if (nread > 0)
      read_data(c, nread, b);
  }
  /* The requests, or the end of a connection that owned keys, may have woken waiters of this loop. */
  trun__shard_flush_woken(sh);
}

/* Closes a connection the access rules do not admit: counted, and logged for the first few only (a
 * scanner must not flood the log). */
static void refuse(conn *c, const char *why) {
  trun_server *s = c->srv;
  STAT_ADD(s, refused, 1);
  unsigned n = __atomic_add_fetch(&s->refused_logged, 1, __ATOMIC_RELAXED);
  if (n <= 10)
    trun_warn("store on port %d refused a connection from %s: %s%s", s->port, c->peer, why,
              n == 10 ? " (further refusals are not logged)" : "");
  trun__conn_close(c, NULL);
}

/* On a shard's loop after the rules changed: connections they no longer admit are closed now, not at
 * their next request (a connection parked in WAIT or WATCH_KEY would otherwise keep receiving). */
void trun__shard_recheck_acl(shard *sh) {
  trun_server *s = sh->srv;
  unsigned gen = __atomic_load_n(&s->acl_gen, __ATOMIC_ACQUIRE);
  if (gen == sh->acl_seen) return;
  sh->acl_seen = gen;
  for (conn *c = sh->conns, *next; c; c = next) {
    next = c->next;
    if (c->closing || c->doomed || c->acl_gen == gen) continue;
    c->acl_gen = gen;
    if (!trun__addr_allowed(s, &c->addr))
      refuse(c, "not an allowed peer (admitted before the job's hosts were known)");
  }
}

static int same_addr(const conn *a, const conn *b) {
  return a->addr.family == b->addr.family && memcmp(a->addr.a, b->addr.a, 16) == 0;
}

/* Same address as c among the open connections of every shard, c included. */
static int count_same_peer(trun_server *s, const conn *c) {
  int same = 0;
  pthread_mutex_lock(&s->conns_mu);
  for (int i = 0; i < s->nshards; i++)
    for (conn *o = s->shards[i]->conns; o; o = o->next) same += same_addr(o, c);
  pthread_mutex_unlock(&s->conns_mu);
  return same;
}

/* c came beyond the per-peer limit of a server that knows an agent token: it is admitted on probation
 * (no request but PING before it presents the token), within opts.peer_reserve such connections of its
 * address; beyond them the oldest that has not presented the token yet is evicted. Strangers' idle
 * connections thus never lock an agent out of its store, and connections admitted within the limit (the
 * workers') are never evicted. */
static void admit_on_probation(trun_server *s, conn *c) {
  conn *oldest = NULL;
  int n = 0;
  __atomic_store_n(&c->probation, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&s->conns_mu);
  for (int i = 0; i < s->nshards; i++)
    for (conn *o = s->shards[i]->conns; o; o = o->next)
      if (o != c && !o->evict && same_addr(o, c) && __atomic_load_n(&o->probation, __ATOMIC_RELAXED)) {
        n++;
        if (oldest == NULL || o->seq < oldest->seq) oldest = o;
      }
  shard *victim_sh = NULL;
  if (n >= (s->opts.peer_reserve > 0 ? s->opts.peer_reserve : 1) && oldest) {
    oldest->evict = 1;
    victim_sh = oldest->sh;
    if (victim_sh != c->sh) __atomic_store_n(&victim_sh->evict, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&s->conns_mu);
  if (victim_sh == c->sh)
    trun__shard_evict(c->sh);
  else if (victim_sh)
    uv_async_send(&victim_sh->async);
}

void trun__shard_evict(shard *sh) {
  trun_server *s = sh->srv;
  for (;;) { /* one scan per victim (usually one): closing takes conns_mu itself */
    conn *victim = NULL;
    pthread_mutex_lock(&s->conns_mu);
    for (conn *c = sh->conns; c && victim == NULL; c = c->next)
      if (c->evict && !c->closing) victim = c;
    pthread_mutex_unlock(&s->conns_mu);
    if (victim == NULL) return;
    refuse(victim,
           "evicted: too many connections from this address, and this one did not present the job's "
           "agent token (one beyond the per-peer limit is admitted only for the job's agents)");
  }
}

/* c's socket is open on its shard's loop: checks the access rules and limits, then starts reading. */
static void conn_admit(conn *c) {
  trun_server *s = c->srv;
  shard *sh = c->sh;
  uv_tcp_nodelay(&c->tcp, 1);
  peer_name(c);
  pthread_mutex_lock(&s->conns_mu);
  c->next = sh->conns;
  if (sh->conns) sh->conns->prev = c;
  sh->conns = c;
  c->listed = 1;
  c->seq = ++s->conn_seq;
  pthread_mutex_unlock(&s->conns_mu);
  c->acl_gen = __atomic_load_n(&s->acl_gen, __ATOMIC_ACQUIRE);
  if (!trun__addr_allowed(s, &c->addr)) {
    refuse(c,
           "not an allowed peer (the store admits only the job's hosts: --store-allow-peers or a "
           "single-node job)");
    return;
  }
  if (s->opts.max_conns > 0 &&
      __atomic_load_n(&s->stats.connections, __ATOMIC_RELAXED) > (uint64_t)s->opts.max_conns) {
    refuse(c,
           "too many connections (the store's connection limit, from the hosting process's open-file "
           "limit: raise `ulimit -n`)");
    return;
  }
  if (s->opts.max_conns_per_peer > 0 && count_same_peer(s, c) > s->opts.max_conns_per_peer) {
    if (s->token == NULL) { /* set before connections come: no agent could get in beyond the limit */
      refuse(c, "too many connections from this address (the per-peer connection limit)");
      return;
    }
    admit_on_probation(s, c);
  }
  c->reading = 1;
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc < 0) trun__conn_close(c, uv_strerror(rc));
}

static conn *conn_new(shard *sh) {
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

/* On shard sh's thread: a socket accepted by shard 0 for it. */
void trun__shard_adopt(shard *sh, int fd) {
  conn *c = conn_new(sh);
  if (c == NULL) {
    close(fd);
    return;
  }
  int rc = uv_tcp_open(&c->tcp, fd);
  if (rc < 0) {
    close(fd);
    trun__conn_close(c, uv_strerror(rc));
    return;
  }
  conn_admit(c);
}

static void on_connection(uv_stream_t *l, int status) {
  trun_server *s = l->data;
  if (status < 0) {
    trun_warn("accept on port %d failed: %s", s->port, uv_strerror(status));
    return;
  }
  shard *dst = s->shards[s->next_shard++ % (unsigned)s->nshards];
  if (dst->index != 0) {
    trun__hand_off(s, l, dst);
    return;
  }
  conn *c = conn_new(dst);
  if (c == NULL) return;
  int rc = uv_accept(l, (uv_stream_t *)&c->tcp);
  if (rc < 0) {
    trun__conn_close(c, uv_strerror(rc));
    return;
  }
  conn_admit(c);
}

/* ---- life cycle ------------------------------------------------------------------------------- */

static int bind_host(trun_server *s, uv_tcp_t *l, const char *host, int port) {
  struct sockaddr_storage ss;
  int rc;
  if (host == NULL || host[0] == '\0') {
    rc = uv_ip6_addr("::", port, (struct sockaddr_in6 *)&ss);
    if (rc == 0) rc = uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
    if (rc == 0) return 0;
    uv_ip4_addr("0.0.0.0", port, (struct sockaddr_in *)&ss);
    return uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
  }
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) == 0 ||
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) == 0)
    return uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
  uv_getaddrinfo_t req;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  rc = uv_getaddrinfo(s->loop, &req, NULL, host, ps, &hints);
  if (rc < 0) return rc;
  rc = UV_EADDRNOTAVAIL;
  for (struct addrinfo *ai = req.addrinfo; ai; ai = ai->ai_next)
    if ((rc = uv_tcp_bind(l, ai->ai_addr, 0)) == 0) break;
  uv_freeaddrinfo(req.addrinfo);
  return rc;
}

static int listener_port(uv_tcp_t *l) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  if (uv_tcp_getsockname(l, (struct sockaddr *)&ss, &len) < 0) return -1;
  return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
}

/* Opens one listener per address (opts.hosts), or one for opts.host; every one after the first on the
 * port the first got. 0 or a negative libuv error. */
static int listen_all(trun_server *s) {
  const trun_server_opts *o = &s->opts;
  int n = o->nhosts > 0 ? o->nhosts : 1, port = o->port, rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    uv_tcp_t *l = &s->listeners[i];
    if ((rc = uv_tcp_init(s->loop, l)) < 0) break;
    l->data = s;
    s->nlisteners++;
    s->handles_open++;
    rc = bind_host(s, l, o->nhosts > 0 ? o->hosts[i] : o->host, port);
    if (rc == 0) rc = uv_listen((uv_stream_t *)l, o->backlog > 0 ? o->backlog : somaxconn(), on_connection);
    if (rc == 0 && i == 0 && (port = listener_port(l)) < 0) rc = UV_EINVAL;
  }
  s->port = port;
  return rc;
}

static void on_listener_closed(uv_handle_t *h) { trun__server_handle_closed(h->data); }

/* Closes the listeners and shard 0's handles (the worker shards are stopped already). */
static void server_close_handles(trun_server *s) {
  for (int i = 0; i < s->nlisteners; i++) uv_close((uv_handle_t *)&s->listeners[i], on_listener_closed);
  if (s->shards && s->shards[0]) {
    uv_close((uv_handle_t *)&s->shards[0]->reaper, trun__on_shard_handle_closed);
    uv_close((uv_handle_t *)&s->shards[0]->async, trun__on_shard_handle_closed);
    trun__shard_turn_close(s->shards[0], trun__on_shard_handle_closed);
  }
}

int trun_server_start(uv_loop_t *loop, const trun_server_opts *o, trun_server **out) {
  /* libuv writes with write(2), not send(MSG_NOSIGNAL): a reply to a peer that is gone would raise
   * SIGPIPE and kill the process. Ignore it unless the program chose a disposition itself. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  if (o->threads < 0 || o->threads > TRUN_SERVER_MAX_THREADS) return UV_EINVAL;
  if (o->nhosts < 0 || o->nhosts > TRUN_SERVER_MAX_LISTENERS || (o->nhosts > 0 && o->hosts == NULL))
    return UV_EINVAL;
  trun_server *s = calloc(1, sizeof(*s));
  if (s == NULL) return UV_ENOMEM;
  s->loop = loop;
  s->opts = *o;
  if (s->opts.threads == 0) s->opts.threads = 1;
  pthread_mutex_init(&s->acl_mu, NULL);
  pthread_mutex_init(&s->kv_mu, NULL);
  pthread_mutex_init(&s->conns_mu, NULL);
  if (s->opts.max_pending_out == 0) s->opts.max_pending_out = 4u << 20;
  s->kv = trun_kv_new();
  if (s->kv == NULL) {
    server_free(s);
    return UV_ENOMEM;
  }
  int rc = trun__shards_start(s, s->opts.threads);
  if (rc == 0) rc = listen_all(s);
  if (rc < 0) {
    s->closing = 1;
    trun__shards_stop(s);
    server_close_handles(s);
    if (s->handles_open == 0) server_free(s); /* nothing to wait for: no handle was opened */
    return rc;
  }
  *out = s;
  return 0;
}

void trun_server_close(trun_server *s, void (*done)(void *arg), void *arg) {
  if (s->closing) return;
  s->closing = 1;
  s->done = done;
  s->done_arg = arg;
  trun__shards_stop(s);
  trun__shard_close_all(s->shards[0]);
  server_close_handles(s);
}
