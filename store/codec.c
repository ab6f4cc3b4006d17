#include "codec.h"

#include <errno.h>
#include <string.h>

void trun_limits_default(trun_limits *lim) {
  lim->max_key = TRUN_DEFAULT_MAX_KEY;
  lim->max_value = TRUN_DEFAULT_MAX_VALUE;
  lim->max_keys = TRUN_DEFAULT_MAX_KEYS;
}

trun_gen trun_gen_detect(const uint8_t *buf, size_t len, trun_gen legacy, size_t *consumed) {
  static const uint8_t validate[5] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
  size_t n = len < 5 ? len : 5;
  *consumed = 0;
  if (memcmp(buf, validate, n) != 0) return legacy;
  if (len < 5) return TRUN_GEN_UNKNOWN;
  *consumed = 5;
  return TRUN_GEN_V2;
}

/* Cursor over a possibly incomplete request. */
typedef struct {
  const uint8_t *buf;
  size_t len;
  size_t pos;
  size_t need; /* set when a read ran past len */
  const trun_limits *lim;
  trun_req *req;
  trun_req_state *st; /* NULL, or where a list's parse resumes and is left */
} cursor;

enum { CUR_OK = 0, CUR_MORE = 1 };

static int cur_take(cursor *c, size_t n, const uint8_t **out) {
  if (n > c->len - c->pos) {
    c->need = c->pos + n;
    return CUR_MORE;
  }
  *out = c->buf + c->pos;
  c->pos += n;
  return CUR_OK;
}

static int cur_u64(cursor *c, uint64_t *v) {
  const uint8_t *p;
  int rc = cur_take(c, 8, &p);
  if (rc == CUR_OK) *v = trun_get_u64(p);
  return rc;
}

static int cur_u32(cursor *c, uint32_t *v) {
  const uint8_t *p;
  int rc = cur_take(c, 4, &p);
  if (rc == CUR_OK) *v = trun_get_u32(p);
  return rc;
}

/* A u64 length then that many bytes; the length is checked against max before anything else. */
static int cur_str(cursor *c, uint64_t max, const char *what, trun_slice *s) {
  uint64_t n;
  int rc = cur_u64(c, &n);
  if (rc != CUR_OK) return rc;
  if (n > max) {
    c->req->err = what;
    return -EMSGSIZE;
  }
  const uint8_t *p;
  rc = cur_take(c, (size_t)n, &p);
  if (rc == CUR_OK) {
    s->p = p;
    s->n = (size_t)n;
  }
  return rc;
}

static int cur_key(cursor *c, trun_slice *s) {
  return cur_str(c, c->lim->max_key, "key longer than the key limit", s);
}
static int cur_val(cursor *c, trun_slice *s) {
  return cur_str(c, c->lim->max_value, "value longer than the value limit", s);
}

/* count, then count keys (pairs when pairs != 0). */
static int cur_list(cursor *c, int pairs) {
  uint64_t n;
  int rc = cur_u64(c, &n);
  if (rc != CUR_OK) return rc;
  if (pairs && (int64_t)n < 0) {
    c->req->err = "negative pair count";
    return -EBADMSG;
  }
  if (n > c->lim->max_keys) {
    c->req->err = "more keys than the per-request limit";
    return -EMSGSIZE;
  }
  c->req->count = n;
  c->req->items = c->buf + c->pos;
  uint64_t i = 0;
  if (c->st && c->st->pos > c->pos && c->st->pos <= c->len && c->st->done <= n) {
    c->pos = c->st->pos; /* the items before were checked by an earlier call */
    i = c->st->done;
  }
  for (; i < n; i++) {
    size_t at = c->pos;
    trun_slice s;
    if ((rc = cur_key(c, &s)) == CUR_OK && pairs) rc = cur_val(c, &s);
    if (rc == CUR_MORE && c->st) {
      c->st->pos = at;
      c->st->done = i;
    }
    if (rc != CUR_OK) return rc;
  }
  return CUR_OK;
}

static int parse_fields(cursor *c, trun_req *r) {
  int rc;
  uint64_t u;
  switch (r->op) {
    case TRUN_OP_VALIDATE: return cur_u32(c, &r->u32);
    case TRUN_OP_PING: return cur_u32(c, &r->u32);
    case TRUN_OP_SET:
    case TRUN_OP_APPEND:
    case TRUN_OP_QUEUE_PUSH:
      if ((rc = cur_key(c, &r->key)) != CUR_OK) return rc;
      return cur_val(c, &r->val);
    case TRUN_OP_COMPARE_SET:
      if ((rc = cur_key(c, &r->key)) != CUR_OK) return rc;
      if ((rc = cur_val(c, &r->val)) != CUR_OK) return rc;
      return cur_val(c, &r->val2);
    case TRUN_OP_GET:
    case TRUN_OP_DELETE_KEY:
    case TRUN_OP_QUEUE_POP:
    case TRUN_OP_QUEUE_LEN:
    case TRUN_OP_WATCH_KEY: return cur_key(c, &r->key);
    case TRUN_OP_ADD:
    case TRUN_OP_BARRIER:
      if ((rc = cur_key(c, &r->key)) != CUR_OK) return rc;
      if ((rc = cur_u64(c, &u)) != CUR_OK) return rc;
      r->num = (int64_t)u;
      return CUR_OK;
    case TRUN_OP_CHECK:
    case TRUN_OP_WAIT:
    case TRUN_OP_MULTI_GET: return cur_list(c, 0);
    case TRUN_OP_MULTI_SET: return cur_list(c, 1);
    case TRUN_OP_GETNUMKEYS:
    case TRUN_OP_CANCEL_WAIT:
    case TRUN_OP_LIST: return CUR_OK;
    default: r->err = "unknown query type"; return -EBADMSG;
  }
}

ssize_t trun_req_parse_resume(trun_gen gen, const uint8_t *buf, size_t len, const trun_limits *lim,
                              trun_req *req, size_t *need, trun_req_state *st) {
  memset(req, 0, sizeof(*req));
  *need = 1;
  if (len == 0) return 0;
  int op = trun_proto_op(gen, buf[0]);
  if (op < 0) {
    req->err = "unknown query type";
    if (st) memset(st, 0, sizeof(*st));
    return -EBADMSG;
  }
  if (op == TRUN_OP_VALIDATE) {
    /* The handshake is taken by trun_gen_detect; a later VALIDATE is refused as torch's servers do. */
    req->err = "VALIDATE after the first message";
    if (st) memset(st, 0, sizeof(*st));
    return -EBADMSG;
  }
  req->op = (trun_op)op;
  cursor c = {.buf = buf, .len = len, .pos = 1, .need = 0, .lim = lim, .req = req, .st = st};
  int rc = parse_fields(&c, req);
  if (rc == CUR_MORE) {
    *need = c.need;
    return 0;
  }
  if (st) memset(st, 0, sizeof(*st));
  if (rc < 0) return rc;
  return (ssize_t)c.pos;
}

ssize_t trun_req_parse(trun_gen gen, const uint8_t *buf, size_t len, const trun_limits *lim, trun_req *req,
                       size_t *need) {
  return trun_req_parse_resume(gen, buf, len, lim, req, need, NULL);
}

trun_slice trun_req_item(const uint8_t **pos) {
  trun_slice s;
  s.n = (size_t)trun_get_u64(*pos);
  s.p = *pos + 8;
  *pos += 8 + s.n;
  return s;
}

int trun_req_begin(trun_buf *out, trun_gen gen, trun_op op) {
  int code = trun_proto_code(gen, op);
  if (code < 0) return -ENOTSUP;
  return trun_buf_append_u8(out, (uint8_t)code);
}
