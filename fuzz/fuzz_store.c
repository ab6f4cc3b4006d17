/* libFuzzer target for the store: the request parser fed with arbitrary splits, and every parsed request
 * executed against a trun_kv the way the server's handle() does (waits, cancels, barriers, queues, multi
 * ops, 1.13 watches) on behalf of a few simulated connections.
 *
 * Input: [mode][limits][conns] then the client byte stream.
 *   mode   bits 0-1: 0 detect the generation (legacy 1.13), 1 detect (legacy 2.1), 2 V2 after the handshake,
 *                    3 legacy 1.13 without detection; bits 2-7: seed of the chunk sizes the stream is fed in
 *   limits max_key = 4 << (b & 7), max_value = 4 << ((b >> 3) & 7), max_keys = 1 + 2 * (b >> 6): small, so
 *          that the limit checks are reached
 *   conns  which simulated connection runs each request
 * Checks (abort on failure): chunked parsing, resumed where each chunk left a list (trun_req_parse_resume),
 * gives exactly the requests of a one-shot parse, `need` is a
 * sane lower bound, values read back as written, the server's `waiting` bookkeeping never goes negative
 * and matches every waiter's state, and (by ASan/LSan) no bad access and no leak. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "fuzz_check.h"
#include "kv.h"

#define NCONN 3
#define MAXREQ 65536

typedef struct {
  trun_waiter w; /* first: callbacks cast back */
  int waiting;   /* the server's per-connection share of stats.waiting */
  uint64_t wakes, notes;
} fconn;

static uint64_t g_waiting; /* mirrors trun_server_stats.waiting */
static volatile uint8_t g_sink;

static void touch(trun_slice s) {
  uint8_t x = 0;
  for (size_t i = 0; i < s.n; i++) x ^= s.p[i];
  g_sink ^= x;
}

static void f_wake(trun_waiter *w) {
  fconn *c = (fconn *)w;
  CHECK(c->waiting == 1); /* a wake only ends a registered wait */
  CHECK(w->pending == 0);
  CHECK(g_waiting > 0);
  c->waiting = 0;
  g_waiting--;
  c->wakes++;
}

static void f_notify(trun_waiter *w, uint8_t type, trun_slice key, trun_slice old, trun_slice new_) {
  CHECK(type <= TRUN_WATCH_KEY_DELETED);
  touch(key);
  touch(old);
  touch(new_);
  ((fconn *)w)->notes++;
}

static void conn_reset(trun_kv *kv, fconn *c) {
  /* conn_close: cancel waits (stats) and watches. */
  if (trun_kv_cancel(kv, &c->w) > 0) {
    CHECK(c->waiting == 1);
    g_waiting--;
  }
  CHECK(c->w.pending == 0 && c->w.regs == NULL);
  c->waiting = 0;
  trun_kv_cancel_watches(kv, &c->w);
  CHECK(c->w.watches == NULL);
}

/* After a WAIT or BARRIER: the server's bookkeeping (was pending: -1; registered: +1). */
static void account(fconn *c, int was, int rc) {
  if (was) {
    CHECK(g_waiting > 0);
    g_waiting--;
    c->waiting = 0;
  }
  if (rc == 0) {
    CHECK(c->w.pending > 0);
    c->waiting = 1;
    g_waiting++;
  } else {
    CHECK(c->w.pending == 0);
  }
}

static int count_key(void *arg, trun_slice key) {
  touch(key);
  (*(uint64_t *)arg)++;
  return 0;
}

/* Executes r for connection c like the server's trun__exec_request (server_exec.c); returns -1 when the
 * server would close c. */
static int execute(trun_kv *kv, fconn *c, const trun_req *r) {
  trun_slice v;
  int64_t n;
  int rc = 0;
  switch (r->op) {
    case TRUN_OP_SET:
      rc = trun_kv_set(kv, r->key, r->val);
      if (rc == 0) {
        CHECK(trun_kv_get(kv, r->key, &v) == 1);
        CHECK(v.n == r->val.n && (v.n == 0 || memcmp(v.p, r->val.p, v.n) == 0));
      }
      break;
    case TRUN_OP_APPEND: {
      size_t before = trun_kv_get(kv, r->key, &v) ? v.n : 0;
      rc = trun_kv_append(kv, r->key, r->val);
      if (rc == 0) {
        CHECK(trun_kv_get(kv, r->key, &v) == 1);
        CHECK(v.n == before + r->val.n);
        CHECK(r->val.n == 0 || memcmp(v.p + before, r->val.p, r->val.n) == 0);
      }
      break;
    }
    case TRUN_OP_COMPARE_SET: {
      int existed = trun_kv_get(kv, r->key, &v);
      rc = trun_kv_compare_set(kv, r->key, r->val, r->val2, &v);
      if (rc == 0) {
        touch(v);
        if (!existed && r->val.n > 0)
          CHECK(trun_kv_get(kv, r->key, &v) == 0);
        else
          CHECK(trun_kv_get(kv, r->key, &v) == 1);
      }
      break;
    }
    case TRUN_OP_GET:
      if (trun_kv_get(kv, r->key, &v)) touch(v);
      break;
    case TRUN_OP_ADD:
      rc = trun_kv_add(kv, r->key, r->num, &n);
      if (rc == -EINVAL || rc == -ERANGE) return -1;
      if (rc == 0) {
        char text[24];
        int len = snprintf(text, sizeof(text), "%lld", (long long)n);
        CHECK(trun_kv_get(kv, r->key, &v) == 1);
        CHECK(v.n == (size_t)len && memcmp(v.p, text, v.n) == 0);
      }
      break;
    case TRUN_OP_CHECK: CHECK(trun_kv_check(kv, r->count, r->items) >= 0); break;
    case TRUN_OP_WAIT: {
      int was = c->w.pending > 0;
      CHECK(was == c->waiting);
      rc = trun_kv_wait(kv, &c->w, r->count, r->items, NULL);
      account(c, was, rc);
      if (rc == 1) {
        rc = 0;
        CHECK(trun_kv_check(kv, r->count, r->items) == 1);
      }
      break;
    }
    case TRUN_OP_BARRIER: {
      int was = c->w.pending > 0;
      CHECK(was == c->waiting);
      rc = trun_kv_barrier(kv, &c->w, r->key, r->num, NULL);
      if (rc == -EINVAL || rc == -ERANGE) {
        account(c, was, 1);
        return -1;
      }
      account(c, was, rc);
      if (rc == 1) rc = 0;
      break;
    }
    case TRUN_OP_CANCEL_WAIT:
      if (trun_kv_cancel(kv, &c->w) > 0) {
        CHECK(c->waiting == 1);
        g_waiting--;
      }
      c->waiting = 0;
      CHECK(c->w.pending == 0);
      break;
    case TRUN_OP_GETNUMKEYS: {
      uint64_t cnt = 0;
      trun_kv_foreach(kv, count_key, &cnt);
      CHECK(cnt == trun_kv_num_keys(kv));
      break;
    }
    case TRUN_OP_DELETE_KEY: {
      int had = trun_kv_get(kv, r->key, &v);
      CHECK(trun_kv_delete(kv, r->key) == had);
      CHECK(trun_kv_get(kv, r->key, &v) == 0);
      break;
    }
    case TRUN_OP_MULTI_GET: {
      const uint8_t *pos = r->items;
      for (uint64_t i = 0; i < r->count; i++)
        if (trun_kv_get(kv, trun_req_item(&pos), &v)) touch(v);
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
    case TRUN_OP_PING: break;
    case TRUN_OP_QUEUE_PUSH: {
      int64_t before = trun_kv_queue_len(kv, r->key);
      rc = trun_kv_queue_push(kv, r->key, r->val);
      if (rc == 0) CHECK(trun_kv_queue_len(kv, r->key) == before + 1);
      break;
    }
    case TRUN_OP_QUEUE_POP:
      n = trun_kv_queue_pop(kv, r->key, &v);
      if (n < 0) {
        rc = (int)n;
        break;
      }
      if (n > 0) {
        touch(v);
        free((void *)v.p);
        CHECK(trun_kv_queue_len(kv, r->key) == n - 1);
      }
      break;
    case TRUN_OP_QUEUE_LEN: CHECK(trun_kv_queue_len(kv, r->key) >= 0); break;
    case TRUN_OP_LIST: {
      uint64_t cnt = 0;
      trun_kv_foreach(kv, count_key, &cnt);
      break;
    }
    case TRUN_OP_WATCH_KEY: rc = trun_kv_watch(kv, &c->w, r->key, NULL); break;
    default: return -1; /* "query type not served" */
  }
  return rc < 0 ? -1 : 0;
}

typedef struct {
  size_t off, len;
  trun_op op;
} ref_req;

static ref_req refs[MAXREQ];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3 || size - 3 >= MAXREQ) return 0;
  uint8_t mode = data[0], lb = data[1], cb = data[2];
  const uint8_t *s = data + 3;
  size_t len = size - 3;
  trun_limits lim = {
      .max_key = 4u << (lb & 7), .max_value = 4u << ((lb >> 3) & 7), .max_keys = 1u + 2u * (lb >> 6)};

  /* The generation, as the server learns it from the whole stream. */
  trun_gen gen;
  size_t start = 0;
  switch (mode & 3) {
    case 0:
    case 1: {
      trun_gen legacy = (mode & 3) ? TRUN_GEN_LEGACY21 : TRUN_GEN_LEGACY113;
      gen = trun_gen_detect(s, len, legacy, &start);
      if (gen == TRUN_GEN_UNKNOWN) return 0; /* a proper prefix of VALIDATE */
      /* Any prefix that decides, decides the same. */
      for (size_t k = 0; k <= len && k <= 5; k++) {
        size_t used;
        trun_gen g = trun_gen_detect(s, k, legacy, &used);
        CHECK(g == TRUN_GEN_UNKNOWN || (g == gen && used == start));
      }
      break;
    }
    case 2: gen = TRUN_GEN_V2; break;
    default: gen = TRUN_GEN_LEGACY113; break;
  }

  /* Reference: one-shot parse of the whole stream. */
  int nref = 0;
  ssize_t end_rc = 0; /* < 0: parse error at refs_end; 0: incomplete or clean end */
  size_t off = start;
  while (off < len && nref < MAXREQ) {
    trun_req r;
    size_t need;
    ssize_t n = trun_req_parse(gen, s + off, len - off, &lim, &r, &need);
    if (n < 0) {
      CHECK(n == -EBADMSG || n == -EMSGSIZE);
      CHECK(r.err != NULL);
      end_rc = n;
      break;
    }
    if (n == 0) {
      CHECK(need > len - off);
      break;
    }
    CHECK((size_t)n <= len - off);
    refs[nref].off = off;
    refs[nref].len = (size_t)n;
    refs[nref].op = r.op;
    nref++;
    off += (size_t)n;
  }
  size_t ref_end = off;

  /* Chunked: the bytes arrive in pieces; `in` holds exactly the unparsed bytes (ASan sees over-reads). */
  trun_kv *kv = trun_kv_new();
  if (kv == NULL) return 0;
  fconn conns[NCONN];
  memset(conns, 0, sizeof(conns));
  for (int i = 0; i < NCONN; i++) {
    conns[i].w.wake = f_wake;
    conns[i].w.notify = f_notify;
  }
  g_waiting = 0;
  uint8_t *in = NULL;
  size_t in_len = 0, in_off = start; /* stream offset of in[0] */
  size_t fed = start;
  uint32_t rnd = (uint32_t)(mode >> 2) * 2654435761u + 1;
  int got = 0, done = 0;
  trun_req_state st = {0};
  while (!done && fed < len) {
    rnd = rnd * 1103515245u + 12345u;
    size_t chunk = 1 + ((rnd >> 16) % ((mode >> 2) % 4 == 0 ? 1 : (mode >> 2) % 4 == 1 ? 7 : 300));
    if (chunk > len - fed) chunk = len - fed;
    uint8_t *nb = realloc(in, in_len + chunk);
    if (nb == NULL) break;
    in = nb;
    memcpy(in + in_len, s + fed, chunk);
    in_len += chunk;
    fed += chunk;
    size_t used = 0;
    for (;;) {
      trun_req r;
      size_t need = 0;
      /* As the server parses: a list goes on from where the last chunk left it (st). */
      ssize_t n = trun_req_parse_resume(gen, in + used, in_len - used, &lim, &r, &need, &st);
      size_t at = in_off + used;
      if (n < 0) {
        CHECK(got == nref && end_rc == n && at == ref_end);
        done = 1;
        break;
      }
      if (n == 0) {
        CHECK(need > in_len - used);
        if (got < nref) CHECK(refs[got].off == at && need <= refs[got].len);
        break;
      }
      CHECK(got < nref);
      CHECK(refs[got].off == at && refs[got].len == (size_t)n && refs[got].op == r.op);
      got++;
      fconn *c = &conns[(unsigned)(got * (cb | 1) + (cb >> 4)) % NCONN];
      if (execute(kv, c, &r) < 0) conn_reset(kv, c); /* the server closes it; a new one takes its place */
      used += (size_t)n;
      for (int i = 0; i < NCONN; i++) CHECK((conns[i].w.pending > 0) == conns[i].waiting);
    }
    if (used) {
      memmove(in, in + used, in_len - used);
      in_len -= used;
      in_off += used;
    }
  }
  if (!done) CHECK(got == nref);
  free(in);
  for (int i = 0; i < NCONN; i++) conn_reset(kv, &conns[i]);
  CHECK(g_waiting == 0);
  uint64_t cnt = 0;
  trun_kv_foreach(kv, count_key, &cnt);
  CHECK(cnt == trun_kv_num_keys(kv));
  trun_kv_free(kv);
  return 0;
}
