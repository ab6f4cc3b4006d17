/* Key space: values, torch's compare_set and add rules, waits, queues, barriers and 1.13 key watches. */
#include <errno.h>
#include <stdint.h>

#include "kv.h"
#include "unit.h"

static trun_slice S(const char *s) { return (trun_slice){(const uint8_t *)s, strlen(s)}; }

/* ---- a test waiter ---------------------------------------------------------------------------- */

typedef struct {
  trun_waiter w; /* first: the callbacks cast back */
  int woken;
  int notes;
  uint8_t type[16];
  char key[16][32], old[16][32], new_[16][32];
} tw;

static void on_wake(trun_waiter *w) { ((tw *)w)->woken++; }

static void copy(char *dst, trun_slice s) {
  size_t n = s.n < 31 ? s.n : 31;
  if (n) memcpy(dst, s.p, n);
  dst[n] = '\0';
}

static void on_notify(trun_waiter *w, uint8_t type, trun_slice key, trun_slice old, trun_slice new_) {
  tw *t = (tw *)w;
  if (t->notes < 16) {
    t->type[t->notes] = type;
    copy(t->key[t->notes], key);
    copy(t->old[t->notes], old);
    copy(t->new_[t->notes], new_);
  }
  t->notes++;
}

static void tw_init(tw *t) {
  memset(t, 0, sizeof(*t));
  t->w.wake = on_wake;
  t->w.notify = on_notify;
}

/* A CHECK/WAIT key list: u64 length + bytes per key. */
typedef struct {
  trun_buf b;
  uint64_t n;
} keylist;

static keylist *L(keylist *l, const char *k1, const char *k2, const char *k3) {
  trun_buf_free(&l->b);
  l->n = 0;
  const char *ks[] = {k1, k2, k3};
  for (int i = 0; i < 3; i++)
    if (ks[i]) {
      ck_assert_int_eq(trun_buf_append_str(&l->b, ks[i], strlen(ks[i])), 0);
      l->n++;
    }
  return l;
}

static void value_is(trun_kv *kv, const char *key, const char *want) {
  trun_slice v;
  ck_assert_msg(trun_kv_get(kv, S(key), &v) == 1, "key %s missing", key);
  ck_assert_msg(v.n == strlen(want) && (v.n == 0 || memcmp(v.p, want, v.n) == 0), "key %s: got %.*s, want %s",
                key, (int)v.n, (const char *)v.p, want);
}

static void missing(trun_kv *kv, const char *key) {
  trun_slice v;
  ck_assert_int_eq(trun_kv_get(kv, S(key), &v), 0);
}

static trun_kv *kv;
static keylist kl;

static int wait_on(tw *t, const char *k1, const char *k2, const char *k3) {
  L(&kl, k1, k2, k3);
  return trun_kv_wait(kv, &t->w, kl.n, kl.b.data, NULL);
}

static int check_on(const char *k1, const char *k2, const char *k3) {
  L(&kl, k1, k2, k3);
  return trun_kv_check(kv, kl.n, kl.b.data);
}

static void setup(void) {
  kv = trun_kv_new();
  ck_assert_ptr_nonnull(kv);
  memset(&kl, 0, sizeof(kl));
}

static void teardown(void) {
  trun_kv_free(kv);
  trun_buf_free(&kl.b);
}

/* ---- the hash is keyed ------------------------------------------------------------------------ */

static int collect(void *arg, trun_slice key) {
  trun_buf_append_str(arg, key.p, key.n);
  return 0;
}

/* Buckets follow a random key per key space: two key spaces holding the same 200 keys list them in
 * different orders (with an unkeyed hash the orders were always equal, and a client could compute
 * colliding keys). */
START_TEST(test_hash_keyed) {
  trun_kv *a = trun_kv_new(), *b = trun_kv_new();
  ck_assert(a && b);
  for (int i = 0; i < 200; i++) {
    char k[16];
    snprintf(k, sizeof(k), "/k%d", i);
    ck_assert_int_eq(trun_kv_set(a, S(k), S("v")), 0);
    ck_assert_int_eq(trun_kv_set(b, S(k), S("v")), 0);
  }
  trun_buf la = {0}, lb = {0};
  trun_kv_foreach(a, collect, &la);
  trun_kv_foreach(b, collect, &lb);
  ck_assert_uint_eq(la.len, lb.len);
  ck_assert_msg(memcmp(la.data, lb.data, la.len) != 0, "two key spaces hash alike");
  trun_buf_free(&la);
  trun_buf_free(&lb);
  trun_kv_free(a);
  trun_kv_free(b);
}
END_TEST

/* ---- values ----------------------------------------------------------------------------------- */

START_TEST(test_set_get) {
  missing(kv, "a");
  ck_assert_int_eq(trun_kv_set(kv, S("a"), S("1")), 0);
  value_is(kv, "a", "1");
  ck_assert_int_eq(trun_kv_set(kv, S("a"), S("a longer value than before")), 0);
  value_is(kv, "a", "a longer value than before");
  ck_assert_int_eq(trun_kv_set(kv, S("a"), S("x")), 0);
  value_is(kv, "a", "x");
  ck_assert_uint_eq(trun_kv_num_keys(kv), 1);
  /* Empty key and empty value are legal and distinct from absence. */
  ck_assert_int_eq(trun_kv_set(kv, S(""), S("")), 0);
  value_is(kv, "", "");
  ck_assert_uint_eq(trun_kv_num_keys(kv), 2);
  /* Binary bytes. */
  const uint8_t bin[] = {0, 0xff, 0, 1};
  ck_assert_int_eq(trun_kv_set(kv, S("bin"), (trun_slice){bin, sizeof(bin)}), 0);
  trun_slice v;
  ck_assert_int_eq(trun_kv_get(kv, S("bin"), &v), 1);
  ck_assert_uint_eq(v.n, 4);
  ck_assert_mem_eq(v.p, bin, 4);
  /* Many keys (the table grows) all stay reachable. */
  char k[32], val[32];
  for (int i = 0; i < 2000; i++) {
    snprintf(k, sizeof(k), "key-%d", i);
    snprintf(val, sizeof(val), "v%d", i * 7);
    ck_assert_int_eq(trun_kv_set(kv, S(k), S(val)), 0);
  }
  for (int i = 0; i < 2000; i++) {
    snprintf(k, sizeof(k), "key-%d", i);
    snprintf(val, sizeof(val), "v%d", i * 7);
    value_is(kv, k, val);
  }
  ck_assert_uint_eq(trun_kv_num_keys(kv), 2003);
  ck_assert_uint_gt(trun_kv_bytes(kv), 0);
}
END_TEST

START_TEST(test_append) {
  ck_assert_int_eq(trun_kv_append(kv, S("ap"), S("12")), 0); /* creates */
  value_is(kv, "ap", "12");
  ck_assert_int_eq(trun_kv_append(kv, S("ap"), S("34")), 0);
  value_is(kv, "ap", "1234");
  ck_assert_int_eq(trun_kv_append(kv, S("ap"), S("")), 0);
  value_is(kv, "ap", "1234");
  for (int i = 0; i < 100; i++) ck_assert_int_eq(trun_kv_append(kv, S("ap"), S("x")), 0);
  trun_slice v;
  ck_assert_int_eq(trun_kv_get(kv, S("ap"), &v), 1);
  ck_assert_uint_eq(v.n, 104);
  ck_assert_uint_eq(trun_kv_num_keys(kv), 1);
  /* Append to an empty value. */
  ck_assert_int_eq(trun_kv_set(kv, S("e"), S("")), 0);
  ck_assert_int_eq(trun_kv_append(kv, S("e"), S("z")), 0);
  value_is(kv, "e", "z");
}
END_TEST

static void cas(const char *key, const char *expected, const char *desired, const char *reply) {
  trun_slice r = {NULL, 99};
  ck_assert_int_eq(trun_kv_compare_set(kv, S(key), S(expected), S(desired), &r), 0);
  ck_assert_msg(r.n == strlen(reply) && (r.n == 0 || memcmp(r.p, reply, r.n) == 0),
                "compare_set(%s, %s, %s): reply %.*s, want %s", key, expected, desired, (int)r.n,
                (const char *)r.p, reply);
}

START_TEST(test_compare_set) {
  /* Missing key, non-empty expected: nothing stored, reply = expected (torch's documented reply). */
  cas("k", "x", "y", "x");
  missing(kv, "k");
  ck_assert_uint_eq(trun_kv_num_keys(kv), 0);
  /* Missing key, empty expected: stores desired, reply desired. */
  cas("k", "", "y", "y");
  value_is(kv, "k", "y");
  /* Match: replace, reply the new value. */
  cas("k", "y", "z", "z");
  value_is(kv, "k", "z");
  /* Mismatch: reply the current value, nothing changes. */
  cas("k", "nope", "w", "z");
  value_is(kv, "k", "z");
  /* Present but empty value equals an empty expected. */
  ck_assert_int_eq(trun_kv_set(kv, S("e"), S("")), 0);
  cas("e", "", "filled", "filled");
  /* Empty desired on a missing key creates an empty value (torchelastic's initial compare_set). */
  cas("n", "", "", "");
  value_is(kv, "n", "");
  ck_assert_uint_eq(trun_kv_num_keys(kv), 3);
  /* A prefix of the value is not a match. */
  cas("k", "", "q", "z");
  cas("k", "zz", "q", "z");
}
END_TEST

START_TEST(test_compare_set_wakes) {
  tw a;
  tw_init(&a);
  ck_assert_int_eq(wait_on(&a, "k", NULL, NULL), 0);
  cas("k", "x", "y", "x"); /* nothing stored: the key is still missing */
  ck_assert_int_eq(a.woken, 0);
  cas("k", "", "y", "y"); /* created */
  ck_assert_int_eq(a.woken, 1);
  trun_kv_cancel(kv, &a.w);
}
END_TEST

static void add_ok(const char *key, int64_t delta, int64_t want) {
  int64_t got = 12345;
  ck_assert_int_eq(trun_kv_add(kv, S(key), delta, &got), 0);
  ck_assert_int_eq(got, want);
  char text[32];
  snprintf(text, sizeof(text), "%lld", (long long)want);
  value_is(kv, key, text); /* stored back as decimal text */
}

static void add_err(const char *stored, int64_t delta, int err) {
  ck_assert_int_eq(trun_kv_set(kv, S("bad"), S(stored)), 0);
  int64_t got = 777;
  ck_assert_int_eq(trun_kv_add(kv, S("bad"), delta, &got), err);
  ck_assert_int_eq(got, 777);
  value_is(kv, "bad", stored); /* unchanged */
}

START_TEST(test_add) {
  add_ok("c", 5, 5); /* absent: value = delta */
  add_ok("c", -2, 3);
  add_ok("c", 0, 3);
  add_ok("zero", 0, 0); /* ADD 0 creates the key */
  ck_assert_uint_eq(trun_kv_num_keys(kv), 2);
  add_ok("neg", -7, -7);
  add_ok("neg", 10, 3);
  /* stoll rules on the stored bytes. */
  const struct {
    const char *stored;
    int64_t delta, want;
  } ok[] = {{"12abc", 1, 13},
            {"  42", 1, 43},
            {"\t\n\v\f\r 8", 2, 10},
            {"+5", 1, 6},
            {"-5", 1, -4},
            {"007", 0, 7},
            {"1 2", 0, 1},
            {"-0", 0, 0},
            {"9223372036854775806", 1, INT64_MAX},
            {"-9223372036854775807", -1, INT64_MIN},
            {"-9223372036854775808", 0, INT64_MIN},
            {"9223372036854775807", 0, INT64_MAX}};
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    ck_assert_int_eq(trun_kv_set(kv, S("s"), S(ok[i].stored)), 0);
    add_ok("s", ok[i].delta, ok[i].want);
  }
}
END_TEST

START_TEST(test_add_errors) {
  /* "0x10": stoll reads 0, ignores the rest. */
  ck_assert_int_eq(trun_kv_set(kv, S("h"), S("0x10")), 0);
  add_ok("h", 1, 1);
  add_err("abc", 1, -EINVAL);
  add_err("", 1, -EINVAL);
  add_err("   ", 1, -EINVAL);
  add_err("-", 1, -EINVAL);
  add_err("+-1", 1, -EINVAL);
  add_err(" x1", 1, -EINVAL);
  /* Out of int64 range, in the stored text or in the sum. */
  add_err("9223372036854775808", 0, -ERANGE);
  add_err("-9223372036854775809", 0, -ERANGE);
  add_err("99999999999999999999999", 0, -ERANGE);
  add_err("9223372036854775807", 1, -ERANGE);
  add_err("-9223372036854775808", -1, -ERANGE);
  add_err("1", INT64_MAX, -ERANGE);
  add_err("-2", INT64_MIN, -ERANGE);
  int64_t got;
  ck_assert_int_eq(trun_kv_add(kv, S("fresh"), INT64_MIN, &got), 0);
  ck_assert_int_eq(got, INT64_MIN);
}
END_TEST

START_TEST(test_delete) {
  ck_assert_int_eq(trun_kv_delete(kv, S("a")), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("a"), S("1")), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("b"), S("2")), 0);
  size_t bytes = trun_kv_bytes(kv);
  ck_assert_int_eq(trun_kv_delete(kv, S("a")), 1);
  ck_assert_int_eq(trun_kv_delete(kv, S("a")), 0);
  missing(kv, "a");
  value_is(kv, "b", "2");
  ck_assert_uint_eq(trun_kv_num_keys(kv), 1);
  ck_assert_uint_lt(trun_kv_bytes(kv), bytes);
  ck_assert_int_eq(trun_kv_set(kv, S("a"), S("again")), 0);
  value_is(kv, "a", "again");
  ck_assert_int_eq(trun_kv_delete(kv, S("a")), 1);
  ck_assert_int_eq(trun_kv_delete(kv, S("b")), 1);
  ck_assert_uint_eq(trun_kv_num_keys(kv), 0);
  ck_assert_uint_eq(trun_kv_bytes(kv), 0);
}
END_TEST

typedef struct {
  int n;
  int seen[8];
  int stop_after;
} fe_acc;

static int fe(void *arg, trun_slice key) {
  fe_acc *a = arg;
  ck_assert_uint_eq(key.n, 2);
  ck_assert_int_eq(key.p[0], 'k');
  a->seen[key.p[1] - '0']++;
  a->n++;
  return a->stop_after && a->n == a->stop_after ? 42 : 0;
}

START_TEST(test_num_keys_foreach) {
  ck_assert_uint_eq(trun_kv_num_keys(kv), 0);
  char k[3] = "k0";
  for (int i = 0; i < 5; i++) {
    k[1] = (char)('0' + i);
    ck_assert_int_eq(trun_kv_set(kv, S(k), S("v")), 0);
  }
  ck_assert_int_eq(trun_kv_delete(kv, S("k2")), 1);
  /* Queues are not KV keys. */
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q9"), S("x")), 0);
  ck_assert_uint_eq(trun_kv_num_keys(kv), 4);
  fe_acc a = {0};
  ck_assert_int_eq(trun_kv_foreach(kv, fe, &a), 0);
  ck_assert_int_eq(a.n, 4);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(a.seen[i], i == 2 ? 0 : 1);
  fe_acc b = {.stop_after = 2};
  ck_assert_int_eq(trun_kv_foreach(kv, fe, &b), 42);
  ck_assert_int_eq(b.n, 2);
}
END_TEST

/* ---- check and wait --------------------------------------------------------------------------- */

START_TEST(test_check) {
  ck_assert_int_eq(trun_kv_check(kv, 0, NULL), 1); /* n = 0: ready */
  L(&kl, "a", "b", NULL);
  ck_assert_int_eq(trun_kv_check(kv, kl.n, kl.b.data), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("a"), S("1")), 0);
  ck_assert_int_eq(trun_kv_check(kv, kl.n, kl.b.data), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("b"), S("")), 0);
  ck_assert_int_eq(trun_kv_check(kv, kl.n, kl.b.data), 1);
  ck_assert_int_eq(trun_kv_delete(kv, S("b")), 1);
  ck_assert_int_eq(trun_kv_check(kv, kl.n, kl.b.data), 0);
  /* A non-empty queue of the name counts (libuv rule); an emptied one does not. */
  ck_assert_int_eq(trun_kv_queue_push(kv, S("b"), S("x")), 0);
  ck_assert_int_eq(trun_kv_check(kv, kl.n, kl.b.data), 1);
  trun_slice v;
  ck_assert_int_eq(trun_kv_queue_pop(kv, S("b"), &v), 1);
  free((void *)v.p);
  ck_assert_int_eq(trun_kv_check(kv, kl.n, kl.b.data), 0);
}
END_TEST

START_TEST(test_wait_ready) {
  tw a;
  tw_init(&a);
  ck_assert_int_eq(trun_kv_wait(kv, &a.w, 0, NULL, NULL), 1);
  ck_assert_int_eq(trun_kv_set(kv, S("a"), S("1")), 0);
  ck_assert_int_eq(wait_on(&a, "a", NULL, NULL), 1);
  ck_assert_uint_eq(a.w.pending, 0);
  ck_assert_ptr_null(a.w.regs);
  ck_assert_int_eq(trun_kv_cancel(kv, &a.w), 0);
  ck_assert_int_eq(a.woken, 0);
}
END_TEST

START_TEST(test_wait_multi_key) {
  tw a;
  tw_init(&a);
  ck_assert_int_eq(trun_kv_set(kv, S("present"), S("1")), 0);
  ck_assert_int_eq(wait_on(&a, "k1", "present", "k2"), 0);
  ck_assert_uint_eq(a.w.pending, 2); /* only the missing keys */
  ck_assert_int_eq(trun_kv_set(kv, S("k1"), S("x")), 0);
  ck_assert_int_eq(a.woken, 0);
  ck_assert_int_eq(trun_kv_set(kv, S("k1"), S("y")), 0); /* the same key twice does not count twice */
  ck_assert_int_eq(a.woken, 0);
  ck_assert_int_eq(trun_kv_set(kv, S("present"), S("2")), 0);
  ck_assert_int_eq(a.woken, 0);
  ck_assert_int_eq(trun_kv_add(kv, S("k2"), 1, &(int64_t){0}), 0); /* ADD wakes too */
  ck_assert_int_eq(a.woken, 1);
  ck_assert_uint_eq(a.w.pending, 0);
  ck_assert_ptr_null(a.w.regs);
  ck_assert_int_eq(trun_kv_set(kv, S("k2"), S("again")), 0);
  ck_assert_int_eq(a.woken, 1);
  ck_assert_int_eq(trun_kv_cancel(kv, &a.w), 0);
}
END_TEST

START_TEST(test_wait_wakers) {
  /* APPEND and MULTI_SET-style SETs wake; so does a queue push (for the queue name). */
  tw a, b, c;
  tw_init(&a);
  tw_init(&b);
  tw_init(&c);
  ck_assert_int_eq(wait_on(&a, "ap", NULL, NULL), 0);
  ck_assert_int_eq(wait_on(&b, "q", NULL, NULL), 0);
  ck_assert_int_eq(wait_on(&c, "ap2", NULL, NULL), 0);
  ck_assert_int_eq(trun_kv_append(kv, S("ap"), S("1")), 0);
  ck_assert_int_eq(a.woken, 1);
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q"), S("1")), 0);
  ck_assert_int_eq(b.woken, 1);
  ck_assert_int_eq(trun_kv_set(kv, S("ap2"), S("")), 0);
  ck_assert_int_eq(c.woken, 1);
  /* Appending to an existing value wakes a later waiter of it only if it was missing: wait returns 1. */
  ck_assert_int_eq(wait_on(&a, "ap", NULL, NULL), 1);
}
END_TEST

START_TEST(test_wait_all_waiters) {
  tw w[4];
  for (int i = 0; i < 4; i++) {
    tw_init(&w[i]);
    ck_assert_int_eq(wait_on(&w[i], "k1", "k2", NULL), 0);
  }
  /* One leaves (disconnect). */
  ck_assert_int_eq(trun_kv_cancel(kv, &w[3].w), 2);
  ck_assert_int_eq(trun_kv_set(kv, S("k1"), S("1")), 0);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(w[i].woken, 0);
  ck_assert_int_eq(trun_kv_set(kv, S("k2"), S("2")), 0);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(w[i].woken, 1);
  ck_assert_int_eq(w[3].woken, 0);
}
END_TEST

START_TEST(test_wait_delete_no_wake) {
  tw a;
  tw_init(&a);
  ck_assert_int_eq(trun_kv_set(kv, S("k"), S("1")), 0);
  ck_assert_int_eq(trun_kv_delete(kv, S("k")), 1);
  /* A deleted key can be waited on again; DELETE_KEY wakes nobody. */
  ck_assert_int_eq(wait_on(&a, "k", NULL, NULL), 0);
  ck_assert_int_eq(trun_kv_delete(kv, S("k")), 0);
  ck_assert_int_eq(a.woken, 0);
  ck_assert_uint_eq(a.w.pending, 1);
  ck_assert_int_eq(trun_kv_set(kv, S("k"), S("2")), 0);
  ck_assert_int_eq(a.woken, 1);
  /* Delete of another key while waiting: still no wake. */
  tw b;
  tw_init(&b);
  ck_assert_int_eq(trun_kv_set(kv, S("other"), S("1")), 0);
  ck_assert_int_eq(wait_on(&b, "other", "m", NULL), 0);
  ck_assert_int_eq(trun_kv_delete(kv, S("other")), 1);
  ck_assert_int_eq(b.woken, 0);
  ck_assert_int_eq(trun_kv_cancel(kv, &b.w), 1);
}
END_TEST

START_TEST(test_wait_cancel) {
  tw a;
  tw_init(&a);
  ck_assert_int_eq(trun_kv_cancel(kv, &a.w), 0);
  ck_assert_int_eq(wait_on(&a, "a", "b", NULL), 0);
  ck_assert_int_eq(trun_kv_cancel(kv, &a.w), 2);
  ck_assert_uint_eq(a.w.pending, 0);
  ck_assert_ptr_null(a.w.regs);
  ck_assert_int_eq(trun_kv_set(kv, S("a"), S("1")), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("b"), S("1")), 0);
  ck_assert_int_eq(a.woken, 0);
  /* A new WAIT replaces the earlier one. */
  ck_assert_int_eq(wait_on(&a, "c", NULL, NULL), 0);
  ck_assert_int_eq(wait_on(&a, "d", NULL, NULL), 0);
  ck_assert_uint_eq(a.w.pending, 1);
  ck_assert_int_eq(trun_kv_set(kv, S("c"), S("1")), 0);
  ck_assert_int_eq(a.woken, 0);
  ck_assert_int_eq(trun_kv_set(kv, S("d"), S("1")), 0);
  ck_assert_int_eq(a.woken, 1);
  /* Registrations on keys that never got a value leave nothing behind once cancelled. */
  ck_assert_int_eq(wait_on(&a, "x", "y", "z"), 0);
  ck_assert_int_eq(trun_kv_cancel(kv, &a.w), 3);
  ck_assert_uint_eq(trun_kv_num_keys(kv), 4);
  ck_assert_int_eq(check_on("x", NULL, NULL), 0);
}
END_TEST

START_TEST(test_wait_duplicate_keys) {
  tw a;
  tw_init(&a);
  ck_assert_int_eq(wait_on(&a, "k", "k", NULL), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("k"), S("1")), 0);
  ck_assert_int_eq(a.woken, 1);
  ck_assert_uint_eq(a.w.pending, 0);
  ck_assert_ptr_null(a.w.regs);
}
END_TEST

/* Waiters still registered when the key space is freed are detached (ASan: no leak, no use after free). */
START_TEST(test_free_with_waiters) {
  tw a;
  tw_init(&a);
  ck_assert_int_eq(wait_on(&a, "a", "b", NULL), 0);
  ck_assert_int_eq(trun_kv_watch(kv, &a.w, S("w"), NULL), 0);
  trun_kv_free(kv);
  kv = trun_kv_new();
  ck_assert_ptr_null(a.w.regs);
  ck_assert_ptr_null(a.w.watches);
  ck_assert_int_eq(trun_kv_cancel(kv, &a.w), 0);
  trun_kv_cancel_watches(kv, &a.w);
}
END_TEST

/* ---- queues ----------------------------------------------------------------------------------- */

static void pop_is(const char *key, int64_t len, const char *want) {
  trun_slice v = {NULL, 0};
  ck_assert_int_eq(trun_kv_queue_pop(kv, S(key), &v), len);
  if (len > 0) {
    ck_assert_uint_eq(v.n, strlen(want));
    if (v.n) ck_assert_mem_eq(v.p, want, v.n);
    free((void *)v.p);
  }
}

START_TEST(test_queue) {
  ck_assert_int_eq(trun_kv_queue_len(kv, S("q")), 0);
  pop_is("q", 0, NULL);
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q"), S("x")), 0);
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q"), S("")), 0);
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q"), S("zz")), 0);
  ck_assert_int_eq(trun_kv_queue_len(kv, S("q")), 3);
  pop_is("q", 3, "x");
  pop_is("q", 2, "");
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q"), S("last")), 0);
  pop_is("q", 2, "zz");
  pop_is("q", 1, "last");
  pop_is("q", 0, NULL);
  ck_assert_int_eq(trun_kv_queue_len(kv, S("q")), 0);
  /* A separate namespace from the values. */
  ck_assert_int_eq(trun_kv_set(kv, S("q"), S("kv")), 0);
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q"), S("item")), 0);
  value_is(kv, "q", "kv");
  ck_assert_uint_eq(trun_kv_num_keys(kv), 1);
  ck_assert_int_eq(trun_kv_delete(kv, S("q")), 1);
  ck_assert_int_eq(trun_kv_queue_len(kv, S("q")), 1);
  pop_is("q", 1, "item");
  /* Left in queues at free: freed by trun_kv_free (ASan checks). */
  ck_assert_int_eq(trun_kv_queue_push(kv, S("left"), S("over")), 0);
}
END_TEST

START_TEST(test_queue_push_wakes_one) {
  tw w[3];
  for (int i = 0; i < 3; i++) {
    tw_init(&w[i]);
    ck_assert_int_eq(wait_on(&w[i], "q", NULL, NULL), 0);
  }
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q"), S("1")), 0);
  ck_assert_int_eq(w[0].woken + w[1].woken + w[2].woken, 1);
  ck_assert_int_eq(trun_kv_queue_push(kv, S("q"), S("2")), 0);
  ck_assert_int_eq(w[0].woken + w[1].woken + w[2].woken, 2);
  for (int i = 0; i < 3; i++) ck_assert_int_le(w[i].woken, 1);
  /* A SET of the same name wakes whoever is left. */
  ck_assert_int_eq(trun_kv_set(kv, S("q"), S("v")), 0);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(w[i].woken, 1);
  /* Waiting on a non-empty queue returns at once. */
  tw x;
  tw_init(&x);
  ck_assert_int_eq(trun_kv_delete(kv, S("q")), 1);
  ck_assert_int_eq(wait_on(&x, "q", NULL, NULL), 1);
}
END_TEST

/* ---- barrier ---------------------------------------------------------------------------------- */

START_TEST(test_barrier) {
  tw w[3];
  for (int i = 0; i < 3; i++) tw_init(&w[i]);
  ck_assert_int_eq(trun_kv_barrier(kv, &w[0].w, S("bar"), 3, NULL), 0);
  value_is(kv, "bar", "1");
  ck_assert_int_eq(trun_kv_barrier(kv, &w[1].w, S("bar"), 3, NULL), 0);
  value_is(kv, "bar", "2");
  ck_assert_int_eq(w[0].woken, 0); /* earlier arrivers wake only at completion */
  ck_assert_int_eq(trun_kv_barrier(kv, &w[2].w, S("bar"), 3, NULL), 1);
  value_is(kv, "bar", "3");
  ck_assert_int_eq(w[0].woken, 1);
  ck_assert_int_eq(w[1].woken, 1);
  ck_assert_int_eq(w[2].woken, 0); /* the last one is answered by the return value */
  /* The key is never reset: a later arrival passes at once. */
  ck_assert_int_eq(trun_kv_barrier(kv, &w[0].w, S("bar"), 3, NULL), 1);
  value_is(kv, "bar", "4");
  /* world <= 1 passes at once. */
  ck_assert_int_eq(trun_kv_barrier(kv, &w[0].w, S("solo"), 1, NULL), 1);
  /* A key that is not a counter. */
  ck_assert_int_eq(trun_kv_set(kv, S("txt"), S("abc")), 0);
  ck_assert_int_eq(trun_kv_barrier(kv, &w[0].w, S("txt"), 2, NULL), -EINVAL);
  /* A plain WAIT on the barrier key is not woken by an arrival, only by completion. */
  tw p;
  tw_init(&p);
  ck_assert_int_eq(wait_on(&p, "b2", NULL, NULL), 0);
  ck_assert_int_eq(trun_kv_barrier(kv, &w[0].w, S("b2"), 2, NULL), 0);
  ck_assert_int_eq(p.woken, 0);
  ck_assert_int_eq(trun_kv_barrier(kv, &w[1].w, S("b2"), 2, NULL), 1);
  ck_assert_int_eq(p.woken, 1);
  /* A cancelled barrier waiter is not woken. */
  ck_assert_int_eq(trun_kv_barrier(kv, &w[0].w, S("b3"), 2, NULL), 0);
  ck_assert_int_eq(trun_kv_cancel(kv, &w[0].w), 1);
  int before = w[0].woken;
  ck_assert_int_eq(trun_kv_barrier(kv, &w[1].w, S("b3"), 2, NULL), 1);
  ck_assert_int_eq(w[0].woken, before);
}
END_TEST

/* A BARRIER replaces the waiter's earlier WAIT like a new WAIT does, also when it passes at once: the old
 * registrations must not wake the waiter later (the server would send a stray STOP_WAITING byte and count
 * the connection out of `waiting` twice). */
START_TEST(test_barrier_replaces_wait) {
  tw a;
  tw_init(&a);
  ck_assert_int_eq(wait_on(&a, "x", NULL, NULL), 0);
  ck_assert_int_eq(trun_kv_barrier(kv, &a.w, S("b"), 1, NULL), 1);
  ck_assert_uint_eq(a.w.pending, 0);
  ck_assert_ptr_null(a.w.regs);
  ck_assert_int_eq(trun_kv_set(kv, S("x"), S("1")), 0);
  ck_assert_int_eq(a.woken, 0);
  /* And when it registers. */
  ck_assert_int_eq(wait_on(&a, "y", NULL, NULL), 0);
  ck_assert_int_eq(trun_kv_barrier(kv, &a.w, S("b9"), 2, NULL), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("y"), S("1")), 0);
  ck_assert_int_eq(a.woken, 0);
  ck_assert_int_eq(trun_kv_cancel(kv, &a.w), 1);
}
END_TEST

/* ---- watches (1.13 WATCH_KEY) ----------------------------------------------------------------- */

START_TEST(test_watch) {
  tw a, b;
  tw_init(&a);
  tw_init(&b);
  ck_assert_int_eq(trun_kv_watch(kv, &a.w, S("k"), NULL), 0);
  ck_assert_int_eq(trun_kv_watch(kv, &b.w, S("other"), NULL), 0);
  ck_assert_uint_eq(trun_kv_num_keys(kv), 0); /* a watch is not a key */
  ck_assert_int_eq(trun_kv_set(kv, S("k"), S("v1")), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("k"), S("v2")), 0);
  ck_assert_int_eq(trun_kv_append(kv, S("k"), S("+")), 0);
  int64_t r;
  ck_assert_int_eq(trun_kv_delete(kv, S("k")), 1);
  ck_assert_int_eq(trun_kv_add(kv, S("k"), 7, &r), 0);
  ck_assert_int_eq(a.notes, 5);
  static const struct {
    uint8_t type;
    const char *old, *new_;
  } want[] = {{TRUN_WATCH_KEY_CREATED, "", "v1"},
              {TRUN_WATCH_KEY_UPDATED, "v1", "v2"},
              {TRUN_WATCH_KEY_UPDATED, "v2", "v2+"},
              {TRUN_WATCH_KEY_DELETED, "v2+", ""},
              {TRUN_WATCH_KEY_CREATED, "", "7"}};
  for (int i = 0; i < 5; i++) {
    ck_assert_uint_eq(a.type[i], want[i].type);
    ck_assert_str_eq(a.key[i], "k");
    ck_assert_str_eq(a.old[i], want[i].old);
    ck_assert_str_eq(a.new_[i], want[i].new_);
  }
  ck_assert_int_eq(b.notes, 0);
  /* A watch stays after the notification; cancel_watches ends it. */
  trun_kv_cancel_watches(kv, &a.w);
  ck_assert_ptr_null(a.w.watches);
  ck_assert_int_eq(trun_kv_set(kv, S("k"), S("v3")), 0);
  ck_assert_int_eq(a.notes, 5);
  /* Watches and waits are separate: cancel leaves the watch. */
  ck_assert_int_eq(wait_on(&b, "other", NULL, NULL), 0);
  ck_assert_int_eq(trun_kv_cancel(kv, &b.w), 1);
  ck_assert_int_eq(trun_kv_set(kv, S("other"), S("x")), 0);
  ck_assert_int_eq(b.notes, 1);
  ck_assert_int_eq(b.woken, 0);
  trun_kv_cancel_watches(kv, &b.w);
}
END_TEST

/* ---- wait budgets (issue 41: a WAIT on 131,072 fresh keys cost 27 MB and 60 ms under the lock) -------- */

/* A list of n distinct keys "<prefix><i>". */
static void many(keylist *l, const char *prefix, uint64_t n) {
  trun_buf_free(&l->b);
  l->n = 0;
  char k[64];
  for (uint64_t i = 0; i < n; i++) {
    int len = snprintf(k, sizeof(k), "%s%llu", prefix, (unsigned long long)i);
    ck_assert_int_eq(trun_buf_append_str(&l->b, k, (size_t)len), 0);
    l->n++;
  }
}

#define COST(klen) ((size_t)TRUN_KV_REG_COST + (klen))

/* One waiter's budget: a list over it fails with -EDQUOT before it allocates past it and leaves nothing
 * registered (no registration, no slot: a SET of those keys wakes nobody); within it, everything as before;
 * the cost is given back by cancel and by wake-ups. */
START_TEST(test_wait_budget_per_waiter) {
  tw a, b;
  tw_init(&a);
  tw_init(&b);
  trun_kv_budget bud = {.per_waiter = 9 * COST(2) + COST(3), .total = 0}; /* "k0".."k8" and "k10" */
  many(&kl, "k", 11);
  ck_assert_int_eq(trun_kv_wait(kv, &a.w, kl.n, kl.b.data, &bud), -EDQUOT);
  ck_assert_uint_eq(a.w.pending, 0);
  ck_assert_ptr_null(a.w.regs);
  ck_assert_uint_eq(a.w.bytes, 0);
  ck_assert_uint_eq(trun_kv_num_regs(kv), 0);
  ck_assert_uint_eq(trun_kv_reg_bytes(kv), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("k3"), S("x")), 0);
  ck_assert_int_eq(a.woken, 0);
  /* Keys that exist cost nothing: "k3" is set, so 11 keys need 10 registrations, which fit. */
  ck_assert_int_eq(trun_kv_wait(kv, &a.w, kl.n, kl.b.data, &bud), 0);
  ck_assert_uint_eq(a.w.pending, 10);
  ck_assert_uint_eq(a.w.bytes, 9 * COST(2) + COST(3));
  ck_assert_uint_eq(trun_kv_reg_bytes(kv), 9 * COST(2) + COST(3));
  /* Another waiter has a budget of its own. */
  many(&kl, "k", 10);
  ck_assert_int_eq(trun_kv_wait(kv, &b.w, kl.n, kl.b.data, &bud), 0);
  ck_assert_uint_eq(trun_kv_num_regs(kv), 19);
  ck_assert_int_eq(trun_kv_set(kv, S("k10"), S("v")), 0);
  /* A WAIT replaces the earlier one: the budget holds the new list, not both. */
  ck_assert_int_eq(trun_kv_wait(kv, &a.w, kl.n, kl.b.data, &bud), 0);
  ck_assert_uint_eq(a.w.bytes, 9 * COST(2));
  /* Wake-ups give the cost back. */
  for (int i = 0; i < 10; i++) {
    char k[16];
    snprintf(k, sizeof(k), "k%d", i);
    ck_assert_int_eq(trun_kv_set(kv, S(k), S("v")), 0);
  }
  ck_assert_int_eq(a.woken, 1);
  ck_assert_int_eq(b.woken, 1);
  ck_assert_uint_eq(a.w.bytes + b.w.bytes, 0);
  ck_assert_uint_eq(trun_kv_num_regs(kv), 0);
  ck_assert_uint_eq(trun_kv_reg_bytes(kv), 0);
  /* Long keys count their length: one key of 300 bytes is over a budget of one short key. */
  trun_kv_budget one = {.per_waiter = COST(8), .total = 0};
  char longkey[301];
  memset(longkey, 'L', 300);
  longkey[300] = '\0';
  ck_assert_int_eq(wait_on(&a, "short", NULL, NULL), 0); /* no budget: NULL */
  L(&kl, longkey, NULL, NULL);
  ck_assert_int_eq(trun_kv_wait(kv, &a.w, kl.n, kl.b.data, &one), -EDQUOT);
  ck_assert_uint_eq(trun_kv_num_regs(kv), 0); /* the earlier WAIT was replaced, the new one refused */
  ck_assert_uint_eq(trun_kv_cancel(kv, &a.w), 0);
}
END_TEST

/* The total budget: a waiter whose list would take every waiter's registrations over it fails with -ENOSPC
 * and registers nothing; the others keep theirs and are woken as before. */
START_TEST(test_wait_budget_total) {
  tw a, b, c;
  tw_init(&a);
  tw_init(&b);
  tw_init(&c);
  trun_kv_budget bud = {.per_waiter = 0, .total = 5 * COST(2)};
  many(&kl, "a", 3);
  ck_assert_int_eq(trun_kv_wait(kv, &a.w, kl.n, kl.b.data, &bud), 0);
  many(&kl, "b", 3);
  ck_assert_int_eq(trun_kv_wait(kv, &b.w, kl.n, kl.b.data, &bud), -ENOSPC);
  ck_assert_uint_eq(b.w.bytes, 0);
  ck_assert_uint_eq(b.w.pending, 0);
  ck_assert_uint_eq(trun_kv_num_regs(kv), 3);
  many(&kl, "b", 2);
  ck_assert_int_eq(trun_kv_wait(kv, &b.w, kl.n, kl.b.data, &bud), 0); /* exactly at the total */
  /* A watch and a barrier count too, and are refused the same way. */
  ck_assert_int_eq(trun_kv_watch(kv, &b.w, S("w"), &bud), -ENOSPC);
  ck_assert_int_eq(trun_kv_barrier(kv, &c.w, S("bar"), 2, &bud), -ENOSPC);
  missing(kv, "bar"); /* refused before it began: the count was not raised */
  ck_assert_uint_eq(c.w.pending, 0);
  ck_assert_uint_eq(a.w.pending, 3);
  ck_assert_int_eq(trun_kv_set(kv, S("b0"), S("x")), 0);
  ck_assert_int_eq(trun_kv_set(kv, S("b1"), S("x")), 0);
  ck_assert_int_eq(b.woken, 1);
  ck_assert_uint_eq(trun_kv_cancel(kv, &a.w), 3);
  ck_assert_uint_eq(trun_kv_reg_bytes(kv), 0);
  ck_assert_int_eq(a.woken, 0);
}
END_TEST

/* Watches count against the waiter's budget while they last, and are given back by cancel_watches. */
START_TEST(test_watch_budget) {
  tw a;
  tw_init(&a);
  trun_kv_budget bud = {.per_waiter = 2 * COST(2), .total = 0};
  ck_assert_int_eq(trun_kv_watch(kv, &a.w, S("w1"), &bud), 0);
  ck_assert_int_eq(trun_kv_watch(kv, &a.w, S("w2"), &bud), 0);
  ck_assert_int_eq(trun_kv_watch(kv, &a.w, S("w3"), &bud), -EDQUOT);
  ck_assert_int_eq(wait_on(&a, "x", NULL, NULL), 0); /* unbudgeted (NULL) */
  ck_assert_uint_eq(trun_kv_num_regs(kv), 3);
  L(&kl, "y", NULL, NULL);
  ck_assert_int_eq(trun_kv_wait(kv, &a.w, kl.n, kl.b.data, &bud), -EDQUOT); /* the watches use it up */
  trun_kv_cancel_watches(kv, &a.w);
  ck_assert_uint_eq(a.w.bytes, 0);
  ck_assert_int_eq(trun_kv_wait(kv, &a.w, kl.n, kl.b.data, &bud), 0);
  ck_assert_uint_eq(trun_kv_cancel(kv, &a.w), 1);
  ck_assert_uint_eq(trun_kv_num_regs(kv), 0);
  ck_assert_uint_eq(trun_kv_reg_bytes(kv), 0);
}
END_TEST

static Suite *kv_suite(void) {
  Suite *s = suite_create("kv");
  TCase *tc = tcase_create("values");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_set_get);
  tcase_add_test(tc, test_hash_keyed);
  tcase_add_test(tc, test_append);
  tcase_add_test(tc, test_compare_set);
  tcase_add_test(tc, test_compare_set_wakes);
  tcase_add_test(tc, test_add);
  tcase_add_test(tc, test_add_errors);
  tcase_add_test(tc, test_delete);
  tcase_add_test(tc, test_num_keys_foreach);
  suite_add_tcase(s, tc);
  tc = tcase_create("wait");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_check);
  tcase_add_test(tc, test_wait_ready);
  tcase_add_test(tc, test_wait_multi_key);
  tcase_add_test(tc, test_wait_wakers);
  tcase_add_test(tc, test_wait_all_waiters);
  tcase_add_test(tc, test_wait_delete_no_wake);
  tcase_add_test(tc, test_wait_cancel);
  tcase_add_test(tc, test_wait_duplicate_keys);
  tcase_add_test(tc, test_free_with_waiters);
  tcase_add_test(tc, test_wait_budget_per_waiter);
  tcase_add_test(tc, test_wait_budget_total);
  tcase_add_test(tc, test_watch_budget);
  suite_add_tcase(s, tc);
  tc = tcase_create("queue_barrier_watch");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_queue);
  tcase_add_test(tc, test_queue_push_wakes_one);
  tcase_add_test(tc, test_barrier);
  tcase_add_test(tc, test_barrier_replaces_wait);
  tcase_add_test(tc, test_watch);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(kv_suite()); }
