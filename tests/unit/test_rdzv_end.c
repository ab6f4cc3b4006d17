/* The end of a round (agent/rdzv/rdzv.h: trun_rdzv_end, trun_rdzv_watch; agent/rdzv/rdzv_watch.c): every
 * value of the round's end key decoded into its kind, the values no trun agent writes (garbage, a missing or
 * huge group rank, bytes that are not text; the store is open to anyone with the job's token) read as INVALID
 * and never crash, what the rendezvous writes decodes back to what it meant, and the watcher thread against
 * an in-process store: the end delivered to its callback, a lost node's record read on its connection, the
 * connection kept between rounds, cut and reopened where the backend has no end key of its own (c10d); a
 * failed node's record with its end, and the first of two failure announcements standing. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "rdzv.h"
#include "rdzv_int.h"
#include "unit.h"

/* ---- decoding ------------------------------------------------------------------------------------- */

static trun_rdzv_end decode(const char *v, int world) {
  trun_rdzv_end e;
  memset(&e, 0x5a, sizeof(e)); /* every field must be set by the decoder */
  trun__rdzv_end_decode(v, strlen(v), world, &e);
  return e;
}

/* The cause is text a log line can carry: NUL-terminated within its array, printable ASCII only. */
static void assert_cause_text(const trun_rdzv_end *e) {
  size_t n = strnlen(e->cause, sizeof(e->cause));
  ck_assert_uint_lt(n, sizeof(e->cause));
  size_t bad = n;
  for (size_t i = 0; i < n && bad == n; i++)
    if (e->cause[i] < 0x20 || e->cause[i] >= 0x7f) bad = i;
  ck_assert_msg(bad == n, "byte %zu of the cause is 0x%02x", bad, (unsigned char)e->cause[bad]);
}

START_TEST(test_decode_values) {
  trun_rdzv_end e = decode("ok", 2);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_OK);
  ck_assert_int_eq(e.node, -1);
  ck_assert_str_eq(e.cause, "");
  ck_assert_int_eq(e.loss_known, 0);

  e = decode("fail:1", 2);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_FAILED);
  ck_assert_int_eq(e.node, 1);
  ck_assert_str_eq(e.cause, "");
  e = decode("fail:0", 2);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_FAILED);
  ck_assert_int_eq(e.node, 0);

  e = decode("gone:3", 4);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_NODE_LOST);
  ck_assert_int_eq(e.node, 3);
  ck_assert_int_eq(e.loss_known, 0);
  e = decode("gone:999999999", 0); /* world unknown: any group rank of 9 digits */
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_NODE_LOST);
  ck_assert_int_eq(e.node, 999999999);

  e = decode("member:join", 2);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_MEMBER);
  ck_assert_int_eq(e.node, -1);
  ck_assert_str_eq(e.cause, "join");
  e = decode("member:lost:1", 2);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_MEMBER);
  ck_assert_str_eq(e.cause, "lost:1");
  e = decode("member:", 2); /* a change without words is still a change */
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_MEMBER);
  ck_assert_str_eq(e.cause, "");
}
END_TEST

START_TEST(test_decode_malformed) {
  static const struct {
    const char *v;
    int world;
  } bad[] = {
      {"", 2},
      {"garbage", 2},
      {"o", 2},
      {"okay", 2},
      {"OK", 2},
      {"ok ", 2},
      {" ok", 2},
      {"gone:", 2},
      {"gone:x", 2},
      {"gone:-1", 2},
      {"gone:+1", 2},
      {"gone: 1", 2},
      {"gone:1 ", 2},
      {"gone:1x", 2},
      {"gone:0x1", 2},
      {"gone:2", 2},          /* not a node of the round */
      {"gone:1000000000", 0}, /* ten digits */
      {"gone:2147483648", 0}, /* past INT_MAX */
      {"gone:99999999999999999999999999999999999999", 0},
      {"gone:1.5", 2},
      {"gone", 2},
      {"GONE:1", 2},
      {"fail:", 2},
      {"fail:abc", 2},
      {"fail:-2147483648", 2},
      {"fail:5", 2},
      {"fail:18446744073709551617", 0},
      {"fail:1:2", 4},
      {"lost:5", 2}, /* a store loss is what a node finds, never a value of the key */
      {"lost:", 2},
      {"member", 2},
      {"Member:join", 2},
      {"%s%n%s%n", 2},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    trun_rdzv_end e = decode(bad[i].v, bad[i].world);
    ck_assert_msg(e.kind == TRUN_RDZV_END_INVALID, "'%s' (world %d) decoded as kind %d", bad[i].v,
                  bad[i].world, e.kind);
    ck_assert_int_eq(e.node, -1);
    ck_assert_int_eq(e.loss_known, 0);
    ck_assert_str_eq(e.cause, bad[i].v); /* said as it was (all printable here) */
  }
  /* Bytes that are not text: cut at no NUL, shown as '?'. */
  trun_rdzv_end e;
  static const char nul_ok[] = {'o', 'k', '\0'};
  trun__rdzv_end_decode(nul_ok, sizeof(nul_ok), 2, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_INVALID);
  ck_assert_str_eq(e.cause, "ok?");
  static const char nul_gone[] = {'g', 'o', 'n', 'e', ':', '1', '\0', '7'};
  trun__rdzv_end_decode(nul_gone, sizeof(nul_gone), 0, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_INVALID);
  ck_assert_str_eq(e.cause, "gone:1?7");
  static const char ctl[] = "fail:\x1b[2J\n\xff";
  trun__rdzv_end_decode(ctl, sizeof(ctl) - 1, 2, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_INVALID);
  ck_assert_str_eq(e.cause, "fail:?[2J??");
  static const char member_ctl[] = "member:a\tb\x80";
  trun__rdzv_end_decode(member_ctl, sizeof(member_ctl) - 1, 2, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_MEMBER);
  ck_assert_str_eq(e.cause, "a?b?");
  /* NULL and empty */
  trun__rdzv_end_decode(NULL, 0, 2, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_INVALID);
  ck_assert_str_eq(e.cause, "");
  trun__rdzv_end_decode(NULL, 12, 2, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_INVALID);
  /* A value longer than the cause: cut, NUL-terminated. */
  size_t n = 64 * 1024;
  char *big = malloc(n);
  ck_assert_ptr_nonnull(big);
  memset(big, 'x', n);
  trun__rdzv_end_decode(big, n, 2, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_INVALID);
  ck_assert_uint_eq(strlen(e.cause), sizeof(e.cause) - 1);
  memcpy(big, "member:", 7);
  trun__rdzv_end_decode(big, n, 2, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_MEMBER);
  ck_assert_uint_eq(strlen(e.cause), sizeof(e.cause) - 1);
  memcpy(big, "gone:", 5);
  memset(big + 5, '1', n - 5);
  trun__rdzv_end_decode(big, n, 0, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_INVALID);
  free(big);
}
END_TEST

/* Random values, most of them starting like a real one: a defined kind, a node in the round, text causes. */
START_TEST(test_decode_random) {
  static const char *const prefixes[] = {"", "ok", "fail:", "gone:", "member:", "lost:", "gone:1", "fail:0"};
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  char v[300];
  for (int iter = 0; iter < 20000; iter++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const char *p = prefixes[x % (sizeof(prefixes) / sizeof(prefixes[0]))];
    size_t np = strlen(p), n = np + (size_t)((x >> 8) % 16);
    if ((x >> 20) % 50 == 0) n = np + (size_t)((x >> 24) % (sizeof(v) - np));
    memcpy(v, p, np);
    for (size_t i = np; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      /* digits most of the time, so that ranks of every length come up */
      v[i] = (x & 3) ? (char)('0' + (x >> 8) % 10) : (char)(x >> 16);
    }
    int world = (int)((x >> 32) % 5) - 1; /* -1 .. 3 */
    trun_rdzv_end e;
    trun__rdzv_end_decode(v, n, world, &e);
    ck_assert_int_ge(e.kind, TRUN_RDZV_END_OK);
    ck_assert_int_le(e.kind, TRUN_RDZV_END_INVALID);
    ck_assert_int_ne(e.kind, TRUN_RDZV_END_STORE_LOST);
    if (e.kind == TRUN_RDZV_END_FAILED || e.kind == TRUN_RDZV_END_NODE_LOST) {
      ck_assert_int_ge(e.node, 0);
      if (world > 0) ck_assert_int_lt(e.node, world);
    } else {
      ck_assert_int_eq(e.node, -1);
    }
    assert_cause_text(&e);
  }
}
END_TEST

/* What the rendezvous writes reads back as what it meant. */
START_TEST(test_encode_roundtrip) {
  char v[64];
  trun_rdzv_end e;
  ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_OK, -1, NULL, v, sizeof(v)), 0);
  ck_assert_str_eq(v, "ok");
  trun__rdzv_end_decode(v, strlen(v), 2, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_OK);
  for (int g = 0; g < 3; g++) {
    ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_FAILED, g, NULL, v, sizeof(v)), 0);
    trun__rdzv_end_decode(v, strlen(v), 3, &e);
    ck_assert_int_eq(e.kind, TRUN_RDZV_END_FAILED);
    ck_assert_int_eq(e.node, g);
    ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_NODE_LOST, g, NULL, v, sizeof(v)), 0);
    trun__rdzv_end_decode(v, strlen(v), 3, &e);
    ck_assert_int_eq(e.kind, TRUN_RDZV_END_NODE_LOST);
    ck_assert_int_eq(e.node, g);
  }
  ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_MEMBER, -1, "lost:2", v, sizeof(v)), 0);
  ck_assert_str_eq(v, "member:lost:2");
  trun__rdzv_end_decode(v, strlen(v), 3, &e);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_MEMBER);
  ck_assert_str_eq(e.cause, "lost:2");
  /* Not values of the key, a node that is none, no room. */
  ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_NONE, 0, NULL, v, sizeof(v)), -EINVAL);
  ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_STORE_LOST, 0, NULL, v, sizeof(v)), -EINVAL);
  ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_INVALID, 0, NULL, v, sizeof(v)), -EINVAL);
  ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_FAILED, -1, NULL, v, sizeof(v)), -EINVAL);
  ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_NODE_LOST, -3, NULL, v, sizeof(v)), -EINVAL);
  ck_assert_int_eq(trun__rdzv_end_encode(TRUN_RDZV_END_FAILED, 12345, NULL, v, 8), -ENOSPC);

  trun_rdzv_end_store_lost(&e, 4, ECONNRESET);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_STORE_LOST);
  ck_assert_int_eq(e.round, 4);
  ck_assert_int_eq(e.node, -1);
  ck_assert_int_eq(e.err, ECONNRESET);
  ck_assert_str_eq(e.cause, strerror(ECONNRESET));
}
END_TEST

/* ---- the watcher ---------------------------------------------------------------------------------- */

static unit_server us;
static int port;

/* What the watcher's callback saw (its thread writes, the test reads under mu). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int calls;
static trun_rdzv_end seen;
static void *seen_arg;

static void on_end(void *arg, const trun_rdzv_end *end) {
  pthread_mutex_lock(&mu);
  calls++;
  seen = *end;
  seen_arg = arg;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

/* Waits (at most 10 s, a safety limit) until the callback ran `want` times in all. */
static int wait_calls(int want) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 10;
  pthread_mutex_lock(&mu);
  while (calls < want && pthread_cond_timedwait(&cv, &mu, &ts) == 0) {
  }
  int n = calls;
  pthread_mutex_unlock(&mu);
  return n;
}

static int yes(const trun_rdzv *r) {
  (void)r;
  return 1;
}
static const trun_rdzv_ops by_key = {.name = "by-key", .ends_by_key = yes}; /* static, trun */
static const trun_rdzv_ops by_liveness = {.name = "by-liveness"};           /* c10d */
static char live_placeholder;                                               /* r->live: set, never read */

static trun_client *writer;

static void setup(void) {
  calls = 0;
  memset(&seen, 0, sizeof(seen));
  port = unit_server_start(&us, NULL);
  ck_assert_int_gt(port, 0);
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = 10000;
  ck_assert_int_eq(trun_client_connect(&o, &writer), 0);
}

/* A node of a two-node round in key space /trun/j/r<round>, on a backend with ops. */
static void node(trun_rdzv *r, const trun_rdzv_ops *ops, int round) {
  memset(r, 0, sizeof(*r));
  snprintf(r->store_addr, sizeof(r->store_addr), "127.0.0.1");
  r->store_port = port;
  r->store_gen = TRUN_GEN_V2;
  r->info.group_rank = 0;
  r->info.group_world_size = 2;
  r->info.round = round;
  r->info.round_id = 100 + round;
  snprintf(r->key_space, sizeof(r->key_space), "/trun/j/r%d", round);
  r->be = ops;
  if (ops == &by_liveness) r->live = (struct trun_live *)&live_placeholder;
  trun__rdzv_door_set(r, on_end, &us); /* as trun_rdzv_watch_open left it before the memset */
}

static void set(const char *k, const char *v) {
  ck_assert_int_eq(trun_client_set(writer, trun_str(k), trun_str(v)), 0);
}

static uint64_t accepted(void) {
  trun_server_stats st;
  unit_server_stats(&us, &st);
  return st.accepted;
}

/* The static and trun backends: the end key's value reaches the callback and the result; seen_end/<g> says
 * this node was alive at the end; the connection serves the next round too. */
START_TEST(test_watch_by_key) {
  trun_rdzv r;
  node(&r, &by_key, 0);
  trun_rdzv_watch *w = NULL;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  ck_assert_ptr_nonnull(w);
  ck_assert_int_eq(calls, 0);
  trun_rdzv_watch_start(w, 0);
  ck_assert_int_eq(calls, 0);
  set("/trun/j/r0/end", "fail:1");
  ck_assert_int_eq(wait_calls(1), 1);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_FAILED);
  ck_assert_int_eq(seen.node, 1);
  ck_assert_int_eq(seen.round, 0);
  ck_assert_ptr_eq(seen_arg, &us);
  trun_rdzv_watch_stop(w);
  trun_buf v = {0};
  ck_assert_int_eq(trun_client_get(writer, trun_str("/trun/j/r0/seen_end/0"), &v, 1000), 0);
  ck_assert(v.len == 1 && v.data[0] == '1');
  trun_buf_free(&v);

  uint64_t conns = accepted();
  node(&r, &by_key, 1);
  trun_rdzv_watch_start(w, 1);
  ck_assert_int_eq(calls, 1); /* round 0's end is not round 1's */
  set("/trun/j/r1/end", "ok");
  ck_assert_int_eq(wait_calls(2), 2);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_OK);
  ck_assert_int_eq(seen.round, 1);
  trun_rdzv_watch_stop(w);
  ck_assert_uint_eq(accepted(), conns); /* the same connection */

  /* A value no agent writes: INVALID, said, and the watcher still ends. */
  node(&r, &by_key, 2);
  trun_rdzv_watch_start(w, 2);
  set("/trun/j/r2/end", "gone:");
  ck_assert_int_eq(wait_calls(3), 3);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_INVALID);
  ck_assert_str_eq(seen.cause, "gone:");
  trun_rdzv_watch_stop(w);
  trun_rdzv_watch_close(w);
}
END_TEST

/* A lost node: its record, read on the watcher's connection, comes with the end; without one, loss_known 0.
 */
START_TEST(test_watch_node_lost) {
  trun_rdzv r;
  node(&r, &by_key, 0);
  trun_rdzv_watch *w = NULL;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  trun_rdzv_watch_start(w, 0);
  set("/trun/j/r0/lost/1",
      "{\"node\": 1, \"addr\": \"10.0.0.2\", \"id\": \"10.0.0.2 42 0\", \"cause\": \"3 "
      "heartbeats missed\", \"by\": \"0\", \"at\": 12.5}");
  set("/trun/j/r0/end", "gone:1");
  ck_assert_int_eq(wait_calls(1), 1);
  trun_rdzv_watch_stop(w);
  trun_rdzv_end e = seen;
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_NODE_LOST);
  ck_assert_int_eq(e.node, 1);
  ck_assert_int_eq(e.loss_known, 1);
  ck_assert_int_eq(e.loss.node, 1);
  ck_assert_int_eq(e.loss.round_id, 100);
  ck_assert_str_eq(e.loss.addr, "10.0.0.2");
  ck_assert_str_eq(e.loss.cause, "3 heartbeats missed");
  ck_assert_str_eq(e.loss.by, "0");

  node(&r, &by_key, 1);
  trun_rdzv_watch_start(w, 1);
  set("/trun/j/r1/end", "gone:0");
  ck_assert_int_eq(wait_calls(2), 2);
  trun_rdzv_watch_stop(w);
  e = seen;
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_NODE_LOST);
  ck_assert_int_eq(e.node, 0);
  ck_assert_int_eq(e.loss_known, 0);
  trun_rdzv_watch_close(w);
}
END_TEST

/* c10d: nothing sets the end key after a round without a loss or a trun agent's failure: stop cuts the
 * connection (quickly), the round has no end (not a store loss), and the next round's watcher opens a new
 * connection. */
START_TEST(test_watch_by_liveness) {
  trun_rdzv r;
  node(&r, &by_liveness, 0);
  trun_rdzv_watch *w = NULL;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  ck_assert_ptr_nonnull(w);
  trun_rdzv_watch_start(w, 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  trun_rdzv_watch_stop(w);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 10); /* not the 15 s bound */
  ck_assert_int_eq(wait_calls(1), 1);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_NONE);
  ck_assert_int_eq(seen.node, -1);

  uint64_t conns = accepted();
  node(&r, &by_liveness, 1);
  trun_rdzv_watch_start(w, 1);
  ck_assert_uint_eq(accepted(), conns + 1); /* reopened */
  ck_assert_int_eq(calls, 1);
  set("/trun/j/r1/end", "gone:1");
  ck_assert_int_eq(wait_calls(2), 2);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_NODE_LOST);
  trun_rdzv_watch_stop(w);
  trun_slice k = trun_str("/trun/j/r1/seen_end/0");
  ck_assert_int_eq(trun_client_check(writer, 1, &k), 1); /* the store's host may wait for it */

  /* A trun agent's failure ends a c10d round too, with its record. */
  node(&r, &by_liveness, 2);
  trun_rdzv_watch_start(w, 2);
  set("/trun/j/r2/failure/1", "{\"global_rank\": 3}");
  set("/trun/j/r2/end", "fail:1");
  ck_assert_int_eq(wait_calls(3), 3);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_FAILED);
  ck_assert_int_eq(seen.node, 1);
  ck_assert_str_eq(seen.failure, "{\"global_rank\": 3}");
  trun_rdzv_watch_stop(w);
  trun_rdzv_watch_close(w);
}
END_TEST

/* A failed node's record comes with the end (read before the callback, while the store is surely there);
 * none, or one too long to carry, leaves it empty. */
START_TEST(test_watch_failure_record) {
  trun_rdzv r;
  node(&r, &by_key, 0);
  trun_rdzv_watch *w = NULL;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  trun_rdzv_watch_start(w, 0);
  set("/trun/j/r0/failure/1", "{\"global_rank\": 2, \"cause\": \"exited with code 3\"}");
  set("/trun/j/r0/end", "fail:1");
  ck_assert_int_eq(wait_calls(1), 1);
  ck_assert_str_eq(seen.failure, "{\"global_rank\": 2, \"cause\": \"exited with code 3\"}");
  trun_rdzv_watch_stop(w);

  node(&r, &by_key, 1); /* no record */
  trun_rdzv_watch_start(w, 1);
  set("/trun/j/r1/end", "fail:0");
  ck_assert_int_eq(wait_calls(2), 2);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_FAILED);
  ck_assert_str_eq(seen.failure, "");
  trun_rdzv_watch_stop(w);

  node(&r, &by_key, 2); /* too long */
  char *big = malloc(TRUN_RDZV_FAILURE_MAX + 1);
  ck_assert_ptr_nonnull(big);
  memset(big, 'x', TRUN_RDZV_FAILURE_MAX);
  big[TRUN_RDZV_FAILURE_MAX] = '\0';
  set("/trun/j/r2/failure/1", big);
  free(big);
  trun_rdzv_watch_start(w, 2);
  set("/trun/j/r2/end", "fail:1");
  ck_assert_int_eq(wait_calls(3), 3);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_FAILED);
  ck_assert_str_eq(seen.failure, "");
  trun_rdzv_watch_stop(w);
  trun_rdzv_watch_close(w);
}
END_TEST

/* Two nodes announce a failure: the first one's end stands, and the second learns it with the first one's
 * record (the reply of its compare-and-set); a node that reads the end later gets the same. */
START_TEST(test_announce_first_wins) {
  trun_rdzv a, b;
  node(&a, &by_liveness, 0);
  node(&b, &by_liveness, 0);
  b.info.group_rank = 1;
  a.client = writer;
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = 10000;
  ck_assert_int_eq(trun_client_connect(&o, &b.client), 0);
  trun_rdzv_end e;
  ck_assert_int_eq(trun_rdzv_end_now(&b, 0, &e), 0);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_NONE); /* nothing announced yet */
  ck_assert_int_eq(trun_rdzv_announce_failure(&b, 0, "{\"global_rank\": 3}", &e), 0);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_FAILED);
  ck_assert_int_eq(e.node, 1);
  ck_assert_int_eq(trun_rdzv_announce_failure(&a, 0, "{\"global_rank\": 0}", &e), 0);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_FAILED);
  ck_assert_int_eq(e.node, 1); /* b came first */
  ck_assert_str_eq(e.failure, "{\"global_rank\": 3}");
  ck_assert_int_eq(trun_rdzv_end_now(&a, 0, &e), 0);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_FAILED);
  ck_assert_int_eq(e.node, 1);
  ck_assert_str_eq(e.failure, "{\"global_rank\": 3}");
  trun_buf v = {0}; /* each node's record stays for node rank 0's job-wide report */
  ck_assert_int_eq(trun_client_get(writer, trun_str("/trun/j/r0/failure/0"), &v, 1000), 0);
  trun_buf_free(&v);
  /* The store gone: STORE_LOST, without waiting. */
  trun_client_close(b.client);
  b.client = NULL;
  ck_assert_int_lt(trun_rdzv_end_now(&b, 0, &e), 0);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_STORE_LOST);
}
END_TEST

/* The store does not answer: cut ends the wait at once; a store that goes away ends it too. */
START_TEST(test_watch_cut_and_lost) {
  trun_rdzv r;
  node(&r, &by_key, 0);
  trun_rdzv_watch *w = NULL;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  trun_rdzv_watch_start(w, 0);
  trun_rdzv_watch_cut(w);
  ck_assert_int_eq(wait_calls(1), 1);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_STORE_LOST);
  ck_assert_int_ne(seen.err, 0);
  ck_assert_str_ne(seen.cause, "");
  trun_rdzv_watch_stop(w);

  /* The caller lost the store on its own connection: the next round reconnects although this one ended. */
  node(&r, &by_key, 1);
  trun_rdzv_watch_start(w, 1);
  set("/trun/j/r1/end", "ok");
  ck_assert_int_eq(wait_calls(2), 2);
  trun_rdzv_watch_reconnect(w);
  trun_rdzv_watch_stop(w);
  uint64_t conns = accepted();
  node(&r, &by_key, 2);
  trun_rdzv_watch_start(w, 2);
  ck_assert_uint_eq(accepted(), conns + 1);

  trun_client_close(writer);
  writer = NULL;
  unit_server_stop(&us);
  ck_assert_int_eq(wait_calls(3), 3);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_STORE_LOST);
  ck_assert_int_eq(seen.round, 2);
  trun_rdzv_watch_close(w);
  port = unit_server_start(&us, NULL); /* for teardown */
  ck_assert_int_gt(port, 0);
}
END_TEST

/* One node: nothing to watch; every call takes NULL. */
START_TEST(test_watch_single_node) {
  trun_rdzv r;
  node(&r, &by_key, 0);
  r.be = &by_liveness; /* no end key, and no liveness (r.live NULL) */
  trun_rdzv_watch *w = (trun_rdzv_watch *)&live_placeholder;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  ck_assert_ptr_null(w);
  trun_rdzv_watch_start(w, 0);
  ck_assert_int_eq(calls, 0);
  trun_rdzv_watch_cut(w);
  trun_rdzv_watch_reconnect(w);
  trun_rdzv_watch_stop(w);
  trun_rdzv_watch_close(w);
  ck_assert_int_eq(calls, 0);
}
END_TEST

/* A backend's tick whose news is "2 new nodes wait": the liveness thread hands it on through the one door. */
static trun_rdzv_news tick_new_nodes(trun_rdzv *r, trun_client *c, int *nodes) {
  (void)r, (void)c;
  *nodes = 2;
  return TRUN_RDZV_NEW_NODES;
}
static int tick_fast(const trun_rdzv *r) {
  (void)r;
  return 100;
}
static const trun_rdzv_ops by_tick = {.name = "by-tick", .tick = tick_new_nodes, .tick_ms = tick_fast};

/* The liveness thread of a round of two nodes on the unit's store, heartbeats every 0.1 s. */
static void live_node(trun_rdzv *r, trun_config *cfg, const trun_rdzv_ops *ops, int round) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->max_nodes = 2;
  snprintf(cfg->run_id, sizeof(cfg->run_id), "j");
  cfg->rdzv_conf = "trun_heartbeat_interval=0.1,trun_heartbeat_misses=2";
  node(r, ops, round);
  r->live = NULL;
  r->cfg = cfg;
  snprintf(r->host_addr, sizeof(r->host_addr), "127.0.0.1");
  ck_assert_int_eq(trun__rdzv_live_start(r), 0);
  ck_assert_ptr_nonnull(r->live);
  trun__rdzv_live_round(r);
}

/* What a backend's tick learns while the workers run (c10d: nodes waiting) comes through the watcher's
 * callback as a fate of the round it watches: JOINING with the count of nodes. */
START_TEST(test_door_news) {
  trun_rdzv r;
  trun_config cfg;
  live_node(&r, &cfg, &by_tick, 3);
  trun_rdzv_watch *w = NULL;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  ck_assert_ptr_nonnull(w);
  trun_rdzv_watch_start(w, 3);
  ck_assert_int_ge(wait_calls(1), 1);
  pthread_mutex_lock(&mu);
  trun_rdzv_end e = seen;
  pthread_mutex_unlock(&mu);
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_JOINING);
  ck_assert_int_eq(e.nodes, 2);
  ck_assert_int_eq(e.round, 3);
  ck_assert_ptr_eq(seen_arg, &us);
  trun_rdzv_round_done(&r);
  trun__rdzv_live_stop(&r);
  trun_rdzv_watch_close(w);
}
END_TEST

/* The store stops answering this node's heartbeats: the liveness's judge, which never waits on the store,
 * hands the round a CUT_OFF fate through the same door, with the store and the silence in its cause. */
START_TEST(test_door_cut_off) {
  trun_rdzv r;
  trun_config cfg;
  live_node(&r, &cfg, &by_key, 0);
  trun_rdzv_watch *w = NULL;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  trun_rdzv_watch_start(w, 0);
  trun_slice k = trun_str("/trun/j/r0/alive/0");
  for (int i = 0; i < 100 && trun_client_check(writer, 1, &k) != 1; i++) usleep(20000);
  ck_assert_int_eq(calls, 0); /* heartbeats answered: no fate */
  trun_client_close(writer);
  writer = NULL;
  unit_server_stop(&us); /* the watcher's wait fails too: STORE_LOST, then the judge's CUT_OFF */
  trun_rdzv_end e = {0};
  for (int n = 1; n < 50 && e.kind != TRUN_RDZV_END_CUT_OFF; n++) {
    ck_assert_int_ge(wait_calls(n), n);
    pthread_mutex_lock(&mu);
    e = seen;
    pthread_mutex_unlock(&mu);
  }
  ck_assert_int_eq(e.kind, TRUN_RDZV_END_CUT_OFF);
  ck_assert_ptr_nonnull(strstr(e.cause, "no answer from the rendezvous store at 127.0.0.1:"));
  ck_assert_ptr_nonnull(strstr(e.cause, "twice the liveness window of 2 heartbeats of 0.1 s"));
  trun_rdzv_abandon(&r);
  trun_rdzv_round_done(&r);
  trun__rdzv_live_stop(&r);
  trun_rdzv_watch_close(w);
  port = unit_server_start(&us, NULL); /* for teardown */
  ck_assert_int_gt(port, 0);
}
END_TEST

/* c10d's wait list as a test sets it: nodes that were not in the round wait to join. */
static int waiting_nodes;
static int new_nodes(trun_rdzv *r) {
  (void)r;
  return waiting_nodes;
}
static const trun_rdzv_ops by_wait_list = {.name = "by-wait-list", .new_nodes_waiting = new_nodes};

/* This node's workers failed while new nodes wait to join (c10d): the rendezvous says so through the one
 * door, as a MEMBER end with the count, even on a node with nothing to watch (a round of one node); with
 * nobody waiting, or on a backend without a wait list, nothing comes. */
START_TEST(test_door_failed_joining) {
  trun_rdzv r;
  node(&r, &by_wait_list, 4);
  r.info.group_world_size = 1;
  trun__rdzv_door_set(&r, NULL, NULL); /* as trun_rdzv_new left it */
  trun_rdzv_watch *w = NULL;
  char err[256];
  ck_assert_int_eq(trun_rdzv_watch_open(&r, on_end, &us, &w, err, sizeof(err)), 0);
  ck_assert_ptr_null(w); /* nothing to watch, the door is the agent's all the same */
  trun__rdzv_door_round(&r, 4);
  waiting_nodes = 0;
  trun_rdzv_failed_here(&r);
  ck_assert_int_eq(calls, 0);
  waiting_nodes = 3;
  trun_rdzv_failed_here(&r);
  ck_assert_int_eq(calls, 1); /* on the caller's thread, before the call returns */
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_MEMBER);
  ck_assert_int_eq(seen.nodes, 3);
  ck_assert_str_eq(seen.cause, "join");
  ck_assert_int_eq(seen.node, -1);
  ck_assert_int_eq(seen.round, 4);
  ck_assert_int_eq(seen.past, 0);
  r.be = &by_key; /* static, trun: no wait list */
  trun_rdzv_failed_here(&r);
  ck_assert_int_eq(calls, 1);
}
END_TEST

/* At a round's start, the loss records of the round before come through the door, one NODE_LOST end each
 * with `past` set, stamped with that round and carrying the record; a round without losses tells none. */
START_TEST(test_door_past_losses) {
  trun_rdzv r;
  node(&r, &by_key, 6);
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = 10000;
  ck_assert_int_eq(trun_client_connect(&o, &r.client), 0);
  trun__rdzv_door_round(&r, 6);
  trun__rdzv_tell_losses(&r, "/trun/j/r6", 3, 41);
  ck_assert_int_eq(calls, 0);
  set("/trun/j/r6/lost/2",
      "{\"node\": 2, \"addr\": \"10.0.0.3\", \"id\": \"10.0.0.3 77 0\", \"cause\": \"3 heartbeats "
      "missed\", \"by\": \"1\", \"at\": 1234.5}");
  set("/trun/j/r6/lost/0",
      "{\"node\": 0, \"addr\": \"10.0.0.1\", \"id\": \"10.0.0.1 5 0\", \"cause\": \"it left the job: "
      "SIGTERM\", \"by\": \"0\", \"at\": 1200.0}");
  int64_t n;
  ck_assert_int_eq(trun_client_add(writer, trun_str("/trun/j/r6/lost_n"), 2, &n), 0);
  trun__rdzv_tell_losses(&r, "", 3, 41);           /* no round before: nothing */
  trun__rdzv_tell_losses(&r, "/trun/j/r6", 1, 41); /* a round of one node: nothing */
  ck_assert_int_eq(calls, 0);
  trun__rdzv_tell_losses(&r, "/trun/j/r6", 3, 41);
  ck_assert_int_eq(calls, 2);
  ck_assert_int_eq(seen.kind, TRUN_RDZV_END_NODE_LOST); /* the last one: node 2 */
  ck_assert_int_eq(seen.past, 1);
  ck_assert_int_eq(seen.node, 2);
  ck_assert_int_eq(seen.round, 6);
  ck_assert_int_eq(seen.loss_known, 1);
  ck_assert_int_eq(seen.loss.node, 2);
  /* The round it was lost in, as the watcher stamps a loss it saw in that round: the agent then tells it once
   * (before, 0 here: a loss seen during the round was told again at the next one, trun_nodes_lost_total
   * counting it twice). */
  ck_assert_int_eq(seen.loss.round_id, 41);
  ck_assert_str_eq(seen.loss.addr, "10.0.0.3");
  ck_assert_str_eq(seen.loss.cause, "3 heartbeats missed");
  ck_assert_str_eq(seen.loss.by, "1");
  ck_assert(seen.loss.at > 1234.4 && seen.loss.at < 1234.6);
  trun_client_close(r.client);
}
END_TEST

static void teardown_watch(void) {
  if (writer) trun_client_close(writer);
  writer = NULL;
  unit_server_stop(&us);
}

static Suite *rdzv_end_suite(void) {
  Suite *s = suite_create("rdzv_end");
  TCase *tc = tcase_create("decode");
  tcase_set_timeout(tc, 60); /* ASan on a loaded box */
  tcase_add_test(tc, test_decode_values);
  tcase_add_test(tc, test_decode_malformed);
  tcase_add_test(tc, test_decode_random);
  tcase_add_test(tc, test_encode_roundtrip);
  suite_add_tcase(s, tc);
  tc = tcase_create("watch");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown_watch);
  tcase_add_test(tc, test_watch_by_key);
  tcase_add_test(tc, test_watch_node_lost);
  tcase_add_test(tc, test_watch_by_liveness);
  tcase_add_test(tc, test_watch_cut_and_lost);
  tcase_add_test(tc, test_watch_single_node);
  tcase_add_test(tc, test_watch_failure_record);
  tcase_add_test(tc, test_announce_first_wins);
  tcase_add_test(tc, test_door_news);
  tcase_add_test(tc, test_door_cut_off);
  tcase_add_test(tc, test_door_failed_joining);
  tcase_add_test(tc, test_door_past_losses);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(rdzv_end_suite()); }
