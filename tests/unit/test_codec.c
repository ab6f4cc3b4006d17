/* Wire codec: every query type of every generation, byte-at-a-time input, pipelining, limits checked
 * before the bytes arrive, generation detection, and the real torch captures of shared/spec/captures. */
#include <errno.h>

#include "codec.h"
#include "unit.h"

/* ---- a hand-written encoder, independent of codec.c ------------------------------------------ */

typedef struct {
  uint8_t b[8192];
  size_t n;
} enc;

static void e_u8(enc *e, uint8_t v) { e->b[e->n++] = v; }
static void e_u32(enc *e, uint32_t v) {
  for (int i = 0; i < 4; i++) e_u8(e, (uint8_t)(v >> (8 * i)));
}
static void e_u64(enc *e, uint64_t v) {
  for (int i = 0; i < 8; i++) e_u8(e, (uint8_t)(v >> (8 * i)));
}
static void e_mem(enc *e, const void *p, size_t n) {
  memcpy(e->b + e->n, p, n);
  e->n += n;
}
static void e_str(enc *e, const void *p, size_t n) {
  e_u64(e, n);
  e_mem(e, p, n);
}
static void e_cstr(enc *e, const char *s) { e_str(e, s, strlen(s)); }

/* Wire codes, written out from the spec's tables (not taken from proto.c). */
typedef struct {
  uint8_t code;
  trun_op op;
} code_op;

static const code_op v2_codes[] = {
    {1, TRUN_OP_SET},    {2, TRUN_OP_COMPARE_SET}, {3, TRUN_OP_GET},        {4, TRUN_OP_ADD},
    {5, TRUN_OP_CHECK},  {6, TRUN_OP_WAIT},        {7, TRUN_OP_GETNUMKEYS}, {8, TRUN_OP_DELETE_KEY},
    {9, TRUN_OP_APPEND}, {10, TRUN_OP_MULTI_GET},  {11, TRUN_OP_MULTI_SET}, {12, TRUN_OP_CANCEL_WAIT},
    {13, TRUN_OP_PING},  {14, TRUN_OP_QUEUE_PUSH}, {15, TRUN_OP_QUEUE_POP}, {16, TRUN_OP_QUEUE_LEN},
    {17, TRUN_OP_LIST},  {18, TRUN_OP_BARRIER}};
static const code_op l113_codes[] = {
    {0, TRUN_OP_SET},        {1, TRUN_OP_COMPARE_SET}, {2, TRUN_OP_GET},
    {3, TRUN_OP_ADD},        {4, TRUN_OP_CHECK},       {5, TRUN_OP_WAIT},
    {6, TRUN_OP_GETNUMKEYS}, {7, TRUN_OP_WATCH_KEY},   {8, TRUN_OP_DELETE_KEY}};
static const code_op l21_codes[] = {
    {0, TRUN_OP_SET},    {1, TRUN_OP_COMPARE_SET}, {2, TRUN_OP_GET},        {3, TRUN_OP_ADD},
    {4, TRUN_OP_CHECK},  {5, TRUN_OP_WAIT},        {6, TRUN_OP_GETNUMKEYS}, {7, TRUN_OP_DELETE_KEY},
    {8, TRUN_OP_APPEND}, {9, TRUN_OP_MULTI_GET},   {10, TRUN_OP_MULTI_SET}, {11, TRUN_OP_CANCEL_WAIT}};

typedef struct {
  trun_gen gen;
  const code_op *codes;
  int n;
  uint8_t first_unknown;
} gen_table;

static const gen_table tables[] = {
    {TRUN_GEN_V2, v2_codes, (int)(sizeof(v2_codes) / sizeof(v2_codes[0])), 19},
    {TRUN_GEN_LEGACY113, l113_codes, (int)(sizeof(l113_codes) / sizeof(l113_codes[0])), 9},
    {TRUN_GEN_LEGACY21, l21_codes, (int)(sizeof(l21_codes) / sizeof(l21_codes[0])), 12}};

static const uint8_t bin_val[] = {'v', 0x00, 0xff, '\n', 'x'};

static void key_for(trun_op op, char *k, size_t cap) { snprintf(k, cap, "/key-%s", trun_proto_op_name(op)); }

/* Appends a request for op with fields that verify() knows. */
static void build(enc *e, uint8_t code, trun_op op) {
  char key[64];
  key_for(op, key, sizeof(key));
  e_u8(e, code);
  switch (op) {
    case TRUN_OP_SET:
    case TRUN_OP_APPEND:
    case TRUN_OP_QUEUE_PUSH:
      e_cstr(e, key);
      e_str(e, bin_val, sizeof(bin_val));
      break;
    case TRUN_OP_COMPARE_SET:
      e_cstr(e, key);
      e_cstr(e, "old");
      e_cstr(e, "new!");
      break;
    case TRUN_OP_GET:
    case TRUN_OP_DELETE_KEY:
    case TRUN_OP_QUEUE_POP:
    case TRUN_OP_QUEUE_LEN:
    case TRUN_OP_WATCH_KEY: e_cstr(e, key); break;
    case TRUN_OP_ADD:
      e_cstr(e, key);
      e_u64(e, (uint64_t)-42);
      break;
    case TRUN_OP_BARRIER:
      e_cstr(e, key);
      e_u64(e, 8);
      break;
    case TRUN_OP_CHECK:
    case TRUN_OP_WAIT:
    case TRUN_OP_MULTI_GET:
      e_u64(e, 3);
      e_cstr(e, "a");
      e_cstr(e, "bb");
      e_cstr(e, "");
      break;
    case TRUN_OP_MULTI_SET:
      e_u64(e, 2);
      e_cstr(e, "a");
      e_cstr(e, "1");
      e_cstr(e, "bb");
      e_cstr(e, "");
      break;
    case TRUN_OP_PING: e_u32(e, 0xdeadbeefu); break;
    case TRUN_OP_GETNUMKEYS:
    case TRUN_OP_CANCEL_WAIT:
    case TRUN_OP_LIST: break;
    default: ck_abort_msg("no encoding for %s", trun_proto_op_name(op));
  }
}

static void slice_is(trun_slice s, const void *p, size_t n) {
  ck_assert_uint_eq(s.n, n);
  if (n) ck_assert_mem_eq(s.p, p, n);
}
static void slice_is_str(trun_slice s, const char *str) { slice_is(s, str, strlen(str)); }

static void verify(const trun_req *r, trun_op op) {
  char key[64];
  key_for(op, key, sizeof(key));
  ck_assert_msg(r->op == op, "op %s, want %s", trun_proto_op_name(r->op), trun_proto_op_name(op));
  const uint8_t *pos;
  switch (op) {
    case TRUN_OP_SET:
    case TRUN_OP_APPEND:
    case TRUN_OP_QUEUE_PUSH:
      slice_is_str(r->key, key);
      slice_is(r->val, bin_val, sizeof(bin_val));
      break;
    case TRUN_OP_COMPARE_SET:
      slice_is_str(r->key, key);
      slice_is_str(r->val, "old");
      slice_is_str(r->val2, "new!");
      break;
    case TRUN_OP_GET:
    case TRUN_OP_DELETE_KEY:
    case TRUN_OP_QUEUE_POP:
    case TRUN_OP_QUEUE_LEN:
    case TRUN_OP_WATCH_KEY: slice_is_str(r->key, key); break;
    case TRUN_OP_ADD:
      slice_is_str(r->key, key);
      ck_assert_int_eq(r->num, -42);
      break;
    case TRUN_OP_BARRIER:
      slice_is_str(r->key, key);
      ck_assert_int_eq(r->num, 8);
      break;
    case TRUN_OP_CHECK:
    case TRUN_OP_WAIT:
    case TRUN_OP_MULTI_GET:
      ck_assert_uint_eq(r->count, 3);
      pos = r->items;
      slice_is_str(trun_req_item(&pos), "a");
      slice_is_str(trun_req_item(&pos), "bb");
      slice_is_str(trun_req_item(&pos), "");
      break;
    case TRUN_OP_MULTI_SET:
      ck_assert_uint_eq(r->count, 2);
      pos = r->items;
      slice_is_str(trun_req_item(&pos), "a");
      slice_is_str(trun_req_item(&pos), "1");
      slice_is_str(trun_req_item(&pos), "bb");
      slice_is_str(trun_req_item(&pos), "");
      break;
    case TRUN_OP_PING: ck_assert_uint_eq(r->u32, 0xdeadbeefu); break;
    default: break;
  }
}

static trun_limits deflim(void) {
  trun_limits l;
  trun_limits_default(&l);
  return l;
}

/* Feeds buf one byte at a time: every proper prefix needs more (with a sane lower bound), the whole
 * request parses to exactly len. */
static void bytewise(trun_gen gen, const uint8_t *buf, size_t len, const trun_limits *lim) {
  trun_req r;
  size_t need, last = 0;
  for (size_t i = 0; i < len; i++) {
    need = 0;
    ssize_t n = trun_req_parse(gen, buf, i, lim, &r, &need);
    ck_assert_msg(n == 0, "prefix %zu of %zu: parse returned %zd (%s)", i, len, n, r.err ? r.err : "");
    ck_assert_msg(need > i && need <= len, "prefix %zu of %zu: need %zu", i, len, need);
    ck_assert_uint_ge(need, last); /* the bound never goes back */
    last = need;
  }
  ck_assert_int_eq(trun_req_parse(gen, buf, len, lim, &r, &need), (ssize_t)len);
  /* The same, resuming each time where the last parse left a list: the same answers, and the state goes
   * forward only (a trickled list is walked once). */
  trun_req_state st = {0};
  last = 0;
  for (size_t i = 0; i < len; i++) {
    trun_req_state before = st;
    ssize_t n = trun_req_parse_resume(gen, buf, i, lim, &r, &need, &st);
    ck_assert_msg(n == 0, "resumed prefix %zu of %zu: parse returned %zd", i, len, n);
    ck_assert_msg(need > i && need <= len, "resumed prefix %zu of %zu: need %zu", i, len, need);
    ck_assert_uint_ge(need, last);
    last = need;
    ck_assert_uint_ge(st.pos, before.pos);
    ck_assert_uint_ge(st.done, before.done);
    ck_assert_uint_le(st.pos, i);
  }
  ck_assert_int_eq(trun_req_parse_resume(gen, buf, len, lim, &r, &need, &st), (ssize_t)len);
  ck_assert_uint_eq(st.pos, 0);
}

/* A list of n empty keys fed 16 keys at a time with the state kept: each call starts at the first item not
 * yet whole, so the state's position is exactly the bytes of the whole items. */
START_TEST(test_list_resume) {
  trun_limits lim = deflim();
  enum { N = 1000 }; /* 8009 bytes: within enc */
  static enc e;
  e.n = 0;
  e_u8(&e, 0x06); /* V2 WAIT */
  e_u64(&e, N);
  for (int i = 0; i < N; i++) e_u64(&e, 0);
  trun_req_state st = {0};
  trun_req r;
  size_t need;
  for (size_t k = 0; k < N; k += 16) {
    ck_assert_int_eq(trun_req_parse_resume(TRUN_GEN_V2, e.b, 9 + k * 8 + 3, &lim, &r, &need, &st), 0);
    ck_assert_uint_eq(st.done, k);
    ck_assert_uint_eq(st.pos, 9 + k * 8);
    ck_assert_uint_eq(need, 9 + k * 8 + 8);
  }
  ck_assert_int_eq(trun_req_parse_resume(TRUN_GEN_V2, e.b, e.n, &lim, &r, &need, &st), (ssize_t)e.n);
  ck_assert_uint_eq(r.count, N);
  ck_assert_uint_eq(st.pos, 0);
  /* A state from another request is ignored where it cannot fit (past the bytes there are). */
  st.pos = e.n + 100;
  st.done = 3;
  ck_assert_int_eq(trun_req_parse_resume(TRUN_GEN_V2, e.b, e.n, &lim, &r, &need, &st), (ssize_t)e.n);
}
END_TEST

static void check_table(const gen_table *t) {
  trun_limits lim = deflim();
  for (int i = 0; i < t->n; i++) {
    enc e = {.n = 0};
    build(&e, t->codes[i].code, t->codes[i].op);
    trun_req r;
    size_t need;
    ssize_t n = trun_req_parse(t->gen, e.b, e.n, &lim, &r, &need);
    ck_assert_msg(n == (ssize_t)e.n, "%s code %u: parse %zd of %zu", trun_proto_gen_name(t->gen),
                  t->codes[i].code, n, e.n);
    verify(&r, t->codes[i].op);
    /* Trailing bytes of a next request change nothing. */
    size_t len = e.n;
    e_u8(&e, 0x01);
    e_u64(&e, 12345);
    ck_assert_int_eq(trun_req_parse(t->gen, e.b, e.n, &lim, &r, &need), (ssize_t)len);
    verify(&r, t->codes[i].op);
    bytewise(t->gen, e.b, len, &lim);
    /* Code mapping both ways, and the encoder's code byte. */
    ck_assert_int_eq(trun_proto_op(t->gen, t->codes[i].code), (int)t->codes[i].op);
    ck_assert_int_eq(trun_proto_code(t->gen, t->codes[i].op), t->codes[i].code);
    trun_buf b = {0};
    ck_assert_int_eq(trun_req_begin(&b, t->gen, t->codes[i].op), 0);
    ck_assert_uint_eq(b.len, 1);
    ck_assert_uint_eq(b.data[0], t->codes[i].code);
    trun_buf_free(&b);
  }
}

START_TEST(test_ops_v2) { check_table(&tables[0]); }
END_TEST

START_TEST(test_ops_legacy113) { check_table(&tables[1]); }
END_TEST

START_TEST(test_ops_legacy21) { check_table(&tables[2]); }
END_TEST

/* Operations a generation lacks cannot be encoded. */
START_TEST(test_begin_unsupported) {
  trun_buf b = {0};
  ck_assert_int_eq(trun_req_begin(&b, TRUN_GEN_V2, TRUN_OP_WATCH_KEY), -ENOTSUP);
  ck_assert_int_eq(trun_req_begin(&b, TRUN_GEN_LEGACY113, TRUN_OP_APPEND), -ENOTSUP);
  ck_assert_int_eq(trun_req_begin(&b, TRUN_GEN_LEGACY113, TRUN_OP_PING), -ENOTSUP);
  ck_assert_int_eq(trun_req_begin(&b, TRUN_GEN_LEGACY21, TRUN_OP_PING), -ENOTSUP);
  ck_assert_int_eq(trun_req_begin(&b, TRUN_GEN_LEGACY21, TRUN_OP_WATCH_KEY), -ENOTSUP);
  ck_assert_int_eq(trun_req_begin(&b, TRUN_GEN_UNKNOWN, TRUN_OP_SET), -ENOTSUP);
  ck_assert_uint_eq(b.len, 0);
  trun_buf_free(&b);
}
END_TEST

/* All requests of a generation in one buffer parse one after the other; then the same stream is fed one
 * byte at a time the way a server buffers it. */
START_TEST(test_pipelined) {
  const gen_table *t = &tables[_i];
  trun_limits lim = deflim();
  static enc e;
  e.n = 0;
  size_t starts[32];
  for (int i = 0; i < t->n; i++) {
    starts[i] = e.n;
    build(&e, t->codes[i].code, t->codes[i].op);
  }
  starts[t->n] = e.n;
  size_t off = 0;
  for (int i = 0; i < t->n; i++) {
    trun_req r;
    size_t need;
    ssize_t n = trun_req_parse(t->gen, e.b + off, e.n - off, &lim, &r, &need);
    ck_assert_int_eq(n, (ssize_t)(starts[i + 1] - starts[i]));
    verify(&r, t->codes[i].op);
    off += (size_t)n;
  }
  ck_assert_uint_eq(off, e.n);
  /* Incremental: avail grows by one; parse from off whenever possible. */
  int got = 0;
  off = 0;
  for (size_t avail = 0; avail <= e.n; avail++) {
    for (;;) {
      trun_req r;
      size_t need;
      ssize_t n = trun_req_parse(t->gen, e.b + off, avail - off, &lim, &r, &need);
      ck_assert_int_ge(n, 0);
      if (n == 0) {
        ck_assert_uint_gt(need, avail - off);
        break;
      }
      ck_assert_uint_eq(off, starts[got]);
      verify(&r, t->codes[got].op);
      got++;
      off += (size_t)n;
    }
  }
  ck_assert_int_eq(got, t->n);
}
END_TEST

/* ---- limits ----------------------------------------------------------------------------------- */

static const trun_limits small = {.max_key = 16, .max_value = 32, .max_keys = 4};

static ssize_t parse_v2(const enc *e, const trun_limits *lim, trun_req *r) {
  size_t need;
  return trun_req_parse(TRUN_GEN_V2, e->b, e->n, lim, r, &need);
}

static void fill(char *s, size_t n) {
  for (size_t i = 0; i < n; i++) s[i] = (char)('a' + i % 26);
  s[n] = '\0';
}

START_TEST(test_limit_key) {
  char k[64];
  trun_req r;
  /* Exactly max_key: accepted, through every op that carries a key. */
  fill(k, 16);
  enc e = {.n = 0};
  e_u8(&e, 3);
  e_cstr(&e, k);
  ck_assert_int_eq(parse_v2(&e, &small, &r), (ssize_t)e.n);
  slice_is_str(r.key, k);
  /* max_key + 1: refused as soon as the 9 header bytes are there. */
  static const uint8_t key_ops[] = {1, 2, 3, 4, 8, 9, 14, 15, 16, 18};
  for (size_t i = 0; i < sizeof(key_ops); i++) {
    e.n = 0;
    e_u8(&e, key_ops[i]);
    e_u64(&e, 17);
    ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
    ck_assert_ptr_nonnull(r.err);
    /* One header byte short: still waiting. */
    e.n = 8;
    size_t need;
    ck_assert_int_eq(trun_req_parse(TRUN_GEN_V2, e.b, e.n, &small, &r, &need), 0);
    ck_assert_uint_eq(need, 9);
  }
  /* A key in a list, and a huge length with the default limits. */
  e.n = 0;
  e_u8(&e, 6);
  e_u64(&e, 2);
  e_cstr(&e, "ok");
  e_u64(&e, 17);
  ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
  trun_limits lim = deflim();
  e.n = 0;
  e_u8(&e, 1);
  e_u64(&e, (uint64_t)1 << 60);
  ck_assert_int_eq(parse_v2(&e, &lim, &r), -EMSGSIZE);
  e.n = 0;
  e_u8(&e, 1);
  e_u64(&e, UINT64_MAX);
  ck_assert_int_eq(parse_v2(&e, &lim, &r), -EMSGSIZE);
  e.n = 0;
  e_u8(&e, 1);
  e_u64(&e, TRUN_DEFAULT_MAX_KEY + 1);
  ck_assert_int_eq(parse_v2(&e, &lim, &r), -EMSGSIZE);
  /* max_key 0: only the empty key. */
  trun_limits zero = {.max_key = 0, .max_value = 0, .max_keys = 0};
  e.n = 0;
  e_u8(&e, 1);
  e_cstr(&e, "");
  e_cstr(&e, "");
  ck_assert_int_eq(parse_v2(&e, &zero, &r), (ssize_t)e.n);
  e.n = 0;
  e_u8(&e, 3);
  e_u64(&e, 1);
  ck_assert_int_eq(parse_v2(&e, &zero, &r), -EMSGSIZE);
}
END_TEST

START_TEST(test_limit_value) {
  char v[64];
  trun_req r;
  fill(v, 32);
  /* SET, APPEND, QUEUE_PUSH: value of exactly max_value accepted, one more refused after its length. */
  static const uint8_t val_ops[] = {1, 9, 14};
  for (size_t i = 0; i < sizeof(val_ops); i++) {
    enc e = {.n = 0};
    e_u8(&e, val_ops[i]);
    e_cstr(&e, "k");
    e_cstr(&e, v);
    ck_assert_int_eq(parse_v2(&e, &small, &r), (ssize_t)e.n);
    slice_is_str(r.val, v);
    e.n = 0;
    e_u8(&e, val_ops[i]);
    e_cstr(&e, "k");
    e_u64(&e, 33);
    ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
  }
  /* COMPARE_SET: both the expected and the desired value. */
  enc e = {.n = 0};
  e_u8(&e, 2);
  e_cstr(&e, "k");
  e_u64(&e, 33);
  ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
  e.n = 0;
  e_u8(&e, 2);
  e_cstr(&e, "k");
  e_cstr(&e, v);
  e_u64(&e, 33);
  ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
  e.n = 0;
  e_u8(&e, 2);
  e_cstr(&e, "k");
  e_cstr(&e, v);
  e_cstr(&e, v);
  ck_assert_int_eq(parse_v2(&e, &small, &r), (ssize_t)e.n);
  /* MULTI_SET value. */
  e.n = 0;
  e_u8(&e, 11);
  e_u64(&e, 1);
  e_cstr(&e, "k");
  e_u64(&e, 33);
  ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
  /* Default limit. */
  trun_limits lim = deflim();
  e.n = 0;
  e_u8(&e, 1);
  e_cstr(&e, "k");
  e_u64(&e, (uint64_t)TRUN_DEFAULT_MAX_VALUE + 1);
  ck_assert_int_eq(parse_v2(&e, &lim, &r), -EMSGSIZE);
  e.n = 0;
  e_u8(&e, 1);
  e_cstr(&e, "k");
  e_u64(&e, TRUN_DEFAULT_MAX_VALUE);
  size_t need;
  ck_assert_int_eq(trun_req_parse(TRUN_GEN_V2, e.b, e.n, &lim, &r, &need), 0);
  ck_assert_uint_eq(need, e.n + TRUN_DEFAULT_MAX_VALUE);
}
END_TEST

START_TEST(test_limit_keys) {
  trun_req r;
  /* CHECK, WAIT, MULTI_GET: max_keys keys accepted, max_keys+1 refused with only the count buffered. */
  static const uint8_t list_ops[] = {5, 6, 10};
  for (size_t i = 0; i < sizeof(list_ops); i++) {
    enc e = {.n = 0};
    e_u8(&e, list_ops[i]);
    e_u64(&e, 4);
    for (int k = 0; k < 4; k++) e_cstr(&e, "kk");
    ck_assert_int_eq(parse_v2(&e, &small, &r), (ssize_t)e.n);
    ck_assert_uint_eq(r.count, 4);
    e.n = 0;
    e_u8(&e, list_ops[i]);
    e_u64(&e, 5);
    ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
    e.n = 0;
    e_u8(&e, list_ops[i]);
    e_u64(&e, UINT64_MAX);
    ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
    /* An empty list is legal. */
    e.n = 0;
    e_u8(&e, list_ops[i]);
    e_u64(&e, 0);
    ck_assert_int_eq(parse_v2(&e, &small, &r), 9);
    ck_assert_uint_eq(r.count, 0);
  }
  /* MULTI_SET: pairs count, and a negative count. */
  enc e = {.n = 0};
  e_u8(&e, 11);
  e_u64(&e, 4);
  for (int k = 0; k < 4; k++) {
    e_cstr(&e, "k");
    e_cstr(&e, "v");
  }
  ck_assert_int_eq(parse_v2(&e, &small, &r), (ssize_t)e.n);
  e.n = 0;
  e_u8(&e, 11);
  e_u64(&e, 5);
  ck_assert_int_eq(parse_v2(&e, &small, &r), -EMSGSIZE);
  e.n = 0;
  e_u8(&e, 11);
  e_u64(&e, (uint64_t)-1);
  ck_assert_int_eq(parse_v2(&e, &small, &r), -EBADMSG);
  ck_assert_ptr_nonnull(r.err);
  /* Legacy generations apply the same limit. */
  e.n = 0;
  e_u8(&e, 5); /* WAIT in 1.13 and 2.1 */
  e_u64(&e, 5);
  size_t need;
  ck_assert_int_eq(trun_req_parse(TRUN_GEN_LEGACY113, e.b, e.n, &small, &r, &need), -EMSGSIZE);
  ck_assert_int_eq(trun_req_parse(TRUN_GEN_LEGACY21, e.b, e.n, &small, &r, &need), -EMSGSIZE);
}
END_TEST

START_TEST(test_empty_key_value) {
  trun_limits lim = deflim();
  trun_req r;
  enc e = {.n = 0};
  e_u8(&e, 1);
  e_cstr(&e, "");
  e_cstr(&e, "");
  ck_assert_int_eq(parse_v2(&e, &lim, &r), 17);
  ck_assert_int_eq(r.op, TRUN_OP_SET);
  ck_assert_uint_eq(r.key.n, 0);
  ck_assert_uint_eq(r.val.n, 0);
  bytewise(TRUN_GEN_V2, e.b, e.n, &lim);
  e.n = 0;
  e_u8(&e, 2); /* COMPARE_SET "" "" "" */
  e_cstr(&e, "");
  e_cstr(&e, "");
  e_cstr(&e, "");
  ck_assert_int_eq(parse_v2(&e, &lim, &r), 25);
  ck_assert_uint_eq(r.val2.n, 0);
}
END_TEST

/* ---- codes ------------------------------------------------------------------------------------ */

START_TEST(test_unknown_code) {
  trun_limits lim = deflim();
  for (int t = 0; t < 3; t++) {
    for (unsigned code = tables[t].first_unknown; code <= 0xff; code++) {
      uint8_t b[16] = {(uint8_t)code};
      trun_req r;
      size_t need;
      ck_assert_int_eq(trun_req_parse(tables[t].gen, b, 1, &lim, &r, &need), -EBADMSG);
      ck_assert_ptr_nonnull(r.err);
      ck_assert_int_eq(trun_req_parse(tables[t].gen, b, sizeof(b), &lim, &r, &need), -EBADMSG);
      ck_assert_int_eq(trun_proto_op(tables[t].gen, (uint8_t)code), -1);
    }
  }
  uint8_t b[1] = {1};
  trun_req r;
  size_t need;
  ck_assert_int_eq(trun_req_parse(TRUN_GEN_UNKNOWN, b, 1, &lim, &r, &need), -EBADMSG);
}
END_TEST

START_TEST(test_validate_refused) {
  trun_limits lim = deflim();
  static const uint8_t validate[] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
  trun_req r;
  size_t need;
  for (size_t n = 1; n <= sizeof(validate); n++) {
    ck_assert_int_eq(trun_req_parse(TRUN_GEN_V2, validate, n, &lim, &r, &need), -EBADMSG);
    ck_assert_ptr_nonnull(r.err);
  }
  /* A parse with nothing buffered needs one byte. */
  ck_assert_int_eq(trun_req_parse(TRUN_GEN_V2, validate, 0, &lim, &r, &need), 0);
  ck_assert_uint_eq(need, 1);
}
END_TEST

START_TEST(test_gen_detect) {
  static const uint8_t hello[] = {0x00, 0xce, 0xf7, 0x85, 0x3c, 0x0d, 0xc0, 0x03, 0x00, 0x00};
  size_t used = 99;
  ck_assert_int_eq(trun_gen_detect(hello, 5, TRUN_GEN_LEGACY113, &used), TRUN_GEN_V2);
  ck_assert_uint_eq(used, 5);
  used = 99;
  ck_assert_int_eq(trun_gen_detect(hello, sizeof(hello), TRUN_GEN_LEGACY21, &used), TRUN_GEN_V2);
  ck_assert_uint_eq(used, 5);
  /* Every proper prefix of the magic: cannot tell yet. */
  for (size_t n = 0; n < 5; n++) {
    used = 99;
    ck_assert_int_eq(trun_gen_detect(hello, n, TRUN_GEN_LEGACY113, &used), TRUN_GEN_UNKNOWN);
    ck_assert_uint_eq(used, 0);
  }
  /* Anything else is the configured legacy generation, nothing consumed. */
  static const uint8_t wrong_magic[] = {0x00, 0xce, 0xf7, 0x85, 0x3d};
  static const uint8_t l113_set[] = {0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  static const uint8_t l113_get[] = {0x02};
  for (int g = 0; g < 2; g++) {
    trun_gen legacy = g ? TRUN_GEN_LEGACY21 : TRUN_GEN_LEGACY113;
    ck_assert_int_eq(trun_gen_detect(wrong_magic, 5, legacy, &used), legacy);
    ck_assert_uint_eq(used, 0);
    ck_assert_int_eq(trun_gen_detect(wrong_magic, 2, legacy, &used), TRUN_GEN_UNKNOWN);
    ck_assert_int_eq(trun_gen_detect(l113_set, 2, legacy, &used), legacy);
    ck_assert_uint_eq(used, 0);
    ck_assert_int_eq(trun_gen_detect(l113_set, sizeof(l113_set), legacy, &used), legacy);
    ck_assert_int_eq(trun_gen_detect(l113_get, 1, legacy, &used), legacy);
    /* 1.13 sends the code byte of a SET alone (MSG_MORE per field): wait for more. */
    ck_assert_int_eq(trun_gen_detect(l113_set, 1, legacy, &used), TRUN_GEN_UNKNOWN);
  }
}
END_TEST

/* ---- real captures ---------------------------------------------------------------------------- */

/* torch 2.11 client against the libuv server (captures/tcpstore-2.11-libuv-server-bytes.txt, C>S lines of
 * connection 1, in order). The classic-server capture is the same byte stream up to QUEUE_LEN. */
static const char *const cap_211[] = {
    "00cef7853c0dc0030000",
    "040500000000000000696e69742f0100000000000000",
    "0104000000000000002f666f6f0300000000000000626172",
    "06010000000000000004000000000000002f666f6f",
    "0304000000000000002f666f6f",
    "0404000000000000002f636e740500000000000000",
    "0404000000000000002f636e74feffffffffffffff",
    "0202000000000000002f6b010000000000000078010000000000000079",
    "0202000000000000002f6b0000000000000000010000000000000079",
    "0202000000000000002f6b01000000000000007901000000000000007a",
    "0202000000000000002f6b04000000000000006e6f7065010000000000000077",
    "05020000000000000004000000000000002f666f6f08000000000000002f6d697373696e67",
    "06010000000000000004000000000000002f666f6f",
    "07",
    "0804000000000000002f666f6f",
    "0804000000000000002f666f6f",
    "0903000000000000002f617002000000000000003132",
    "0903000000000000002f617002000000000000003334",
    "06010000000000000003000000000000002f6170",
    "0303000000000000002f6170",
    "0b020000000000000002000000000000002f6101000000000000003102000000000000002f62010000000000000032",
    "06020000000000000002000000000000002f6102000000000000002f62",
    "0a020000000000000002000000000000002f6102000000000000002f62",
    "0e02000000000000002f7102000000000000007631",
    "1002000000000000002f71",
    "06010000000000000002000000000000002f71",
    "0f02000000000000002f71",
    "11",
    "0102000000000000002f7303000000000000006162630402000000000000002f730100000000000000",
    "0102000000000000002f65000000000000000006010000000000000002000000000000002f65",
    "06010000000000000006000000000000002f6e65766572",
    NULL};
static const trun_op cap_211_ops[] = {
    TRUN_OP_PING,        TRUN_OP_ADD,       TRUN_OP_SET,         TRUN_OP_WAIT,        TRUN_OP_GET,
    TRUN_OP_ADD,         TRUN_OP_ADD,       TRUN_OP_COMPARE_SET, TRUN_OP_COMPARE_SET, TRUN_OP_COMPARE_SET,
    TRUN_OP_COMPARE_SET, TRUN_OP_CHECK,     TRUN_OP_WAIT,        TRUN_OP_GETNUMKEYS,  TRUN_OP_DELETE_KEY,
    TRUN_OP_DELETE_KEY,  TRUN_OP_APPEND,    TRUN_OP_APPEND,      TRUN_OP_WAIT,        TRUN_OP_GET,
    TRUN_OP_MULTI_SET,   TRUN_OP_WAIT,      TRUN_OP_MULTI_GET,   TRUN_OP_QUEUE_PUSH,  TRUN_OP_QUEUE_LEN,
    TRUN_OP_WAIT,        TRUN_OP_QUEUE_POP, TRUN_OP_LIST,        TRUN_OP_SET,         TRUN_OP_ADD,
    TRUN_OP_SET,         TRUN_OP_WAIT,      TRUN_OP_WAIT};

/* torch 1.13.1 client (captures/tcpstore-captures.txt, sections A then B, conn1 C->S). */
static const char *const cap_113[] = {
    "0004000000000000002f666f6f0300000000000000626172", "06", "08", "04000000000000002f666f6f",
    "0804000000000000002f666f6f", "00", "06000000000000002f656d7074790000000000000000",
    "05010000000000000006000000000000002f656d707479", "0206000000000000002f656d707479", "00",
    "04000000000000002f62696e020000000000000000ff", "0304000000000000002f62696e0100000000000000", "06",
    "05020000000000000002000000000000002f6102000000000000002f62",
    /* B */
    "05020000000000000002000000000000002f6102000000000000002f62", "00",
    "02000000000000002f61010000000000000031", "0002000000000000002f62010000000000000032", "05",
    "010000000000000002000000000000002f610202000000000000002f61", "05010000000000000002000000000000002f62",
    "02", "02000000000000002f62", "05010000000000000002000000000000002f61", "02", "02000000000000002f61",
    "05010000000000000003000000000000002f7a7a", "06", NULL};
static const trun_op cap_113_ops[] = {
    TRUN_OP_SET,  TRUN_OP_GETNUMKEYS, TRUN_OP_DELETE_KEY, TRUN_OP_DELETE_KEY, TRUN_OP_SET,  TRUN_OP_WAIT,
    TRUN_OP_GET,  TRUN_OP_SET,        TRUN_OP_ADD,        TRUN_OP_GETNUMKEYS, TRUN_OP_WAIT, TRUN_OP_WAIT,
    TRUN_OP_SET,  TRUN_OP_SET,        TRUN_OP_WAIT,       TRUN_OP_GET,        TRUN_OP_WAIT, TRUN_OP_GET,
    TRUN_OP_WAIT, TRUN_OP_GET,        TRUN_OP_WAIT,       TRUN_OP_GETNUMKEYS};

/* torch 2.6.0 client against the classic server (captures/tcpstore-captures.txt, section C). */
static const char *const cap_26[] = {
    "00cef7853c0dcc5e0000",
    "0104000000000000002f666f6f0300000000000000626172",
    "06010000000000000004000000000000002f666f6f",
    "0304000000000000002f666f6f",
    "0404000000000000002f636e740500000000000000",
    "0204000000000000002f666f6f0300000000000000626172030000000000000062617a",
    "0208000000000000002f6d697373696e67010000000000000078010000000000000079",
    "05020000000000000004000000000000002f666f6f06000000000000002f6e6f6b6579",
    "07",
    "0804000000000000002f636e74",
    "0904000000000000002f666f6f02000000000000002121",
    "06020000000000000004000000000000002f666f6f08000000000000002f6d697373696e67",
    "0c",
    "0b020000000000000002000000000000002f6101000000000000003102000000000000002f62010000000000000032",
    "06010000000000000005000000000000002f6c617465",
    "0c",
    "0105000000000000002f6c617465010000000000000076",
    "06010000000000000005000000000000002f6c617465",
    "0305000000000000002f6c617465",
    "06010000000000000009000000000000002f6d697373696e6732",
    "0c",
    "07",
    NULL};
static const trun_op cap_26_ops[] = {
    TRUN_OP_PING,        TRUN_OP_SET,         TRUN_OP_WAIT,        TRUN_OP_GET,        TRUN_OP_ADD,
    TRUN_OP_COMPARE_SET, TRUN_OP_COMPARE_SET, TRUN_OP_CHECK,       TRUN_OP_GETNUMKEYS, TRUN_OP_DELETE_KEY,
    TRUN_OP_APPEND,      TRUN_OP_WAIT,        TRUN_OP_CANCEL_WAIT, TRUN_OP_MULTI_SET,  TRUN_OP_WAIT,
    TRUN_OP_CANCEL_WAIT, TRUN_OP_SET,         TRUN_OP_WAIT,        TRUN_OP_GET,        TRUN_OP_WAIT,
    TRUN_OP_CANCEL_WAIT, TRUN_OP_GETNUMKEYS};

static uint8_t stream[4096];

static size_t join(const char *const *parts) {
  size_t n = 0;
  for (int i = 0; parts[i]; i++) {
    long k = unit_unhex(parts[i], stream + n, sizeof(stream) - n);
    ck_assert_int_ge(k, 0);
    n += (size_t)k;
  }
  return n;
}

#define MAXREQ 64

/* Parses a client stream as the server does: generation first, then requests, with avail growing by
 * `step` bytes (0: everything at once). Returns the number of requests; every one must be complete. */
static int parse_stream(size_t len, trun_gen legacy, size_t step, trun_gen *gen, trun_req *reqs) {
  trun_limits lim = deflim();
  *gen = TRUN_GEN_UNKNOWN;
  size_t off = 0, avail = step ? 0 : len;
  int got = 0;
  for (;;) {
    if (*gen == TRUN_GEN_UNKNOWN) {
      size_t used;
      *gen = trun_gen_detect(stream, avail, legacy, &used);
      off = used;
    }
    while (*gen != TRUN_GEN_UNKNOWN) {
      size_t need;
      ssize_t n = trun_req_parse(*gen, stream + off, avail - off, &lim, &reqs[got], &need);
      ck_assert_msg(n >= 0, "request %d at %zu: %s", got, off, reqs[got].err);
      if (n == 0) {
        ck_assert_uint_gt(need, avail - off);
        break;
      }
      ck_assert_int_lt(got, MAXREQ - 1);
      got++;
      off += (size_t)n;
    }
    if (avail == len) break;
    avail = avail + step > len ? len : avail + step;
  }
  ck_assert_uint_eq(off, len);
  return got;
}

static void check_capture(const char *const *parts, trun_gen legacy, trun_gen want_gen, const trun_op *ops,
                          int nops) {
  size_t len = join(parts);
  static const size_t steps[] = {0, 1, 2, 3, 7, 64};
  for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
    trun_req reqs[MAXREQ];
    trun_gen gen;
    int n = parse_stream(len, legacy, steps[s], &gen, reqs);
    ck_assert_int_eq(gen, want_gen);
    ck_assert_int_eq(n, nops);
    for (int i = 0; i < n; i++)
      ck_assert_msg(reqs[i].op == ops[i], "step %zu request %d: %s, want %s", steps[s], i,
                    trun_proto_op_name(reqs[i].op), trun_proto_op_name(ops[i]));
  }
}

START_TEST(test_capture_211) {
  check_capture(cap_211, TRUN_GEN_LEGACY113, TRUN_GEN_V2, cap_211_ops,
                (int)(sizeof(cap_211_ops) / sizeof(cap_211_ops[0])));
  /* Fields of a few of them. */
  size_t len = join(cap_211);
  trun_req r[MAXREQ];
  trun_gen gen;
  parse_stream(len, TRUN_GEN_LEGACY113, 0, &gen, r);
  ck_assert_uint_eq(r[0].u32, 0x3c0);
  slice_is_str(r[1].key, "init/");
  ck_assert_int_eq(r[1].num, 1);
  slice_is_str(r[2].key, "/foo");
  slice_is_str(r[2].val, "bar");
  ck_assert_uint_eq(r[3].count, 1);
  ck_assert_int_eq(r[6].num, -2);
  slice_is_str(r[7].key, "/k");
  slice_is_str(r[7].val, "x");
  slice_is_str(r[7].val2, "y");
  ck_assert_uint_eq(r[8].val.n, 0);
  slice_is_str(r[10].val, "nope");
  ck_assert_uint_eq(r[11].count, 2);
  const uint8_t *pos = r[11].items;
  slice_is_str(trun_req_item(&pos), "/foo");
  slice_is_str(trun_req_item(&pos), "/missing");
  ck_assert_uint_eq(r[20].count, 2);
  pos = r[20].items;
  slice_is_str(trun_req_item(&pos), "/a");
  slice_is_str(trun_req_item(&pos), "1");
  slice_is_str(trun_req_item(&pos), "/b");
  slice_is_str(trun_req_item(&pos), "2");
  slice_is_str(r[23].key, "/q");
  slice_is_str(r[23].val, "v1");
  slice_is_str(r[28].val, "abc");
  ck_assert_uint_eq(r[30].val.n, 0);
  /* The classic-server run's handshake differs only in the nonce. */
  uint8_t hello[10];
  ck_assert_int_eq(unit_unhex("00cef7853c0dee030000", hello, sizeof(hello)), 10);
  size_t used;
  ck_assert_int_eq(trun_gen_detect(hello, 10, TRUN_GEN_LEGACY113, &used), TRUN_GEN_V2);
  trun_limits lim = deflim();
  size_t need;
  ck_assert_int_eq(trun_req_parse(TRUN_GEN_V2, hello + used, 10 - used, &lim, &r[0], &need), 5);
  ck_assert_int_eq(r[0].op, TRUN_OP_PING);
  ck_assert_uint_eq(r[0].u32, 0x3ee);
}
END_TEST

START_TEST(test_capture_113) {
  check_capture(cap_113, TRUN_GEN_LEGACY113, TRUN_GEN_LEGACY113, cap_113_ops,
                (int)(sizeof(cap_113_ops) / sizeof(cap_113_ops[0])));
  size_t len = join(cap_113);
  trun_req r[MAXREQ];
  trun_gen gen;
  parse_stream(len, TRUN_GEN_LEGACY113, 0, &gen, r);
  slice_is_str(r[4].key, "/empty");
  ck_assert_uint_eq(r[4].val.n, 0);
  static const uint8_t bin[] = {0x00, 0xff};
  slice_is(r[7].val, bin, 2);
  slice_is_str(r[8].key, "/bin");
  ck_assert_int_eq(r[8].num, 1);
}
END_TEST

START_TEST(test_capture_26) {
  check_capture(cap_26, TRUN_GEN_LEGACY113, TRUN_GEN_V2, cap_26_ops,
                (int)(sizeof(cap_26_ops) / sizeof(cap_26_ops[0])));
  size_t len = join(cap_26);
  trun_req r[MAXREQ];
  trun_gen gen;
  parse_stream(len, TRUN_GEN_LEGACY21, 0, &gen, r);
  ck_assert_int_eq(gen, TRUN_GEN_V2);
  ck_assert_uint_eq(r[0].u32, 0x5ecc);
  slice_is_str(r[5].val, "bar");
  slice_is_str(r[5].val2, "baz");
  slice_is_str(r[10].val, "!!");
}
END_TEST

static Suite *codec_suite(void) {
  Suite *s = suite_create("codec");
  TCase *tc = tcase_create("ops");
  tcase_add_test(tc, test_ops_v2);
  tcase_add_test(tc, test_ops_legacy113);
  tcase_add_test(tc, test_ops_legacy21);
  tcase_add_test(tc, test_begin_unsupported);
  tcase_add_test(tc, test_list_resume);
  tcase_add_loop_test(tc, test_pipelined, 0, 3);
  tcase_add_test(tc, test_unknown_code);
  tcase_add_test(tc, test_validate_refused);
  tcase_add_test(tc, test_gen_detect);
  suite_add_tcase(s, tc);
  tc = tcase_create("limits");
  tcase_add_test(tc, test_limit_key);
  tcase_add_test(tc, test_limit_value);
  tcase_add_test(tc, test_limit_keys);
  tcase_add_test(tc, test_empty_key_value);
  suite_add_tcase(s, tc);
  tc = tcase_create("captures");
  tcase_add_test(tc, test_capture_211);
  tcase_add_test(tc, test_capture_113);
  tcase_add_test(tc, test_capture_26);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(codec_suite()); }
