/* Requests of the TCPStore server on its key space, under kv_mu: what each op does and replies, the wait
 * budgets, the keys a connection owns (trun_server_own_keys) and the key space in-process (server.h). Calls
 * server_auth.c only (layers: server_int.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server_int.h"

_Static_assert(TRUN_SERVER_WAIT_REG_COST == TRUN_KV_REG_COST, "server.h's cost is the key space's");

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

void trun__conn_gone(conn *c) {
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

int trun__exec_request(conn *c, const trun_req *r, const char **why) {
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

/* ---- the key space in-process, from inside a gone callback ------------------------------------ */

int trun_server_compare_set(trun_server *s, trun_slice key, trun_slice expected, trun_slice desired,
                            trun_slice *reply) {
  return trun_kv_compare_set(s->kv, key, expected, desired, reply);
}

int trun_server_add(trun_server *s, trun_slice key, int64_t delta, int64_t *result) {
  return trun_kv_add(s->kv, key, delta, result);
}
