/* The libuv server in-process, spoken to with raw bytes over loopback TCP (no C client): handshakes of
 * every generation on one port, every op's reply bytes (the real torch captures replayed), late WAIT
 * replies, CANCEL_WAIT, bad input closing only its own connection, disconnects while waiting, fragmented
 * and pipelined input, large values. */
#include <errno.h>
#include <poll.h>

#include "client.h"
#include "log.h"
#include "unit.h"

static unit_server us;
static int port;

static void start_with(const trun_server_opts *o) {
  port = unit_server_start(&us, o);
  ck_assert_int_gt(port, 0);
}
static void setup(void) { start_with(NULL); }
/* Four loops: the connections of one test land on different threads (round-robin). */
static void setup_threads(void) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.threads = 4;
  start_with(&o);
}
static void teardown(void) { unit_server_stop(&us); }

/* ---- wire helpers ------------------------------------------------------------------------------ */

typedef struct {
  uint8_t *b;
  size_t n, cap;
} msg;

static void m_grow(msg *m, size_t k) {
  if (m->n + k <= m->cap) return;
  m->cap = (m->n + k) * 2 + 64;
  m->b = realloc(m->b, m->cap);
  ck_assert_ptr_nonnull(m->b);
}
static msg *m_u8(msg *m, uint8_t v) {
  m_grow(m, 1);
  m->b[m->n++] = v;
  return m;
}
static msg *m_u32(msg *m, uint32_t v) {
  for (int i = 0; i < 4; i++) m_u8(m, (uint8_t)(v >> (8 * i)));
  return m;
}
static msg *m_u64(msg *m, uint64_t v) {
  for (int i = 0; i < 8; i++) m_u8(m, (uint8_t)(v >> (8 * i)));
  return m;
}
static msg *m_mem(msg *m, const void *p, size_t n) {
  m_grow(m, n);
  if (n) memcpy(m->b + m->n, p, n);
  m->n += n;
  return m;
}
static msg *m_str(msg *m, const char *s) { return m_mem(m_u64(m, strlen(s)), s, strlen(s)); }
static msg *m_hex(msg *m, const char *hex) {
  m_grow(m, strlen(hex) / 2 + 1);
  long k = unit_unhex(hex, m->b + m->n, m->cap - m->n);
  ck_assert_int_ge(k, 0);
  m->n += (size_t)k;
  return m;
}
static void m_free(msg *m) {
  free(m->b);
  memset(m, 0, sizeof(*m));
}

static void send_msg(int fd, msg *m) {
  ck_assert_int_eq(unit_send(fd, m->b, m->n), 0);
  m->n = 0;
}

/* Reads exactly the bytes of want (then empties want). */
static void expect(int fd, msg *want) {
  uint8_t *got = malloc(want->n ? want->n : 1);
  ck_assert_ptr_nonnull(got);
  ck_assert_msg(unit_recv(fd, got, want->n) == 0, "connection ended before %zu reply bytes", want->n);
  if (want->n && memcmp(got, want->b, want->n) != 0) {
    char a[1100];
    snprintf(a, sizeof(a), "%s", unit_hex(got, want->n));
    ck_abort_msg("reply %s, want %s", a, unit_hex(want->b, want->n));
  }
  free(got);
  want->n = 0;
}

static void expect_hex(int fd, const char *hex) {
  msg m = {0};
  m_hex(&m, hex);
  expect(fd, &m);
  m_free(&m);
}

static void expect_eof(int fd) { ck_assert_msg(unit_eof(fd), "connection still open"); }

static int connect_v2(void) {
  int fd = unit_connect(port);
  ck_assert_int_ge(fd, 0);
  msg m = {0};
  m_u32(m_u8(&m, 0x0d), 0x12345678u);
  msg h = {0};
  m_hex(&h, "00cef7853c");
  m_mem(&h, m.b, m.n);
  send_msg(fd, &h);
  m.n = 0;
  m_u32(&m, 0x12345678u);
  expect(fd, &m);
  m_free(&m);
  m_free(&h);
  return fd;
}

static int connect_legacy(void) {
  int fd = unit_connect(port);
  ck_assert_int_ge(fd, 0);
  return fd;
}

static void ping(int fd, uint32_t nonce) {
  msg m = {0};
  send_msg(fd, m_u32(m_u8(&m, 0x0d), nonce));
  expect(fd, m_u32(&m, nonce));
  m_free(&m);
}

static trun_server_stats stats(void) {
  trun_server_stats st;
  unit_server_stats(&us, &st);
  return st;
}

/* Polls the server until `waiting` reaches want (the test case's timeout bounds it). */
static void until_waiting(uint64_t want) {
  while (stats().waiting != want) usleep(1000);
}

static void until_connections(uint64_t want) {
  while (stats().connections != want) usleep(1000);
}

/* ---- capture replays --------------------------------------------------------------------------- */

/* '>' client sends, '<' server replies exactly, 'L' server replies a LIST (any key order), 'E' the server
 * closes the connection. */
typedef struct {
  char dir;
  const char *hex;
} step;

static void expect_list(int fd, const char *hex) {
  msg w = {0};
  m_hex(&w, hex);
  uint64_t n = trun_get_u64(w.b);
  uint8_t nb[8];
  ck_assert_int_eq(unit_recv(fd, nb, 8), 0);
  ck_assert_uint_eq(trun_get_u64(nb), n);
  /* Every key read must be one of the expected keys, each used once. */
  size_t used[64] = {0};
  ck_assert_uint_le(n, 64);
  for (uint64_t i = 0; i < n; i++) {
    ck_assert_int_eq(unit_recv(fd, nb, 8), 0);
    uint64_t len = trun_get_u64(nb);
    char key[256];
    ck_assert_uint_lt(len, sizeof(key));
    ck_assert_int_eq(unit_recv(fd, key, len), 0);
    int found = 0;
    size_t off = 8;
    for (uint64_t j = 0; j < n; j++) {
      uint64_t kl = trun_get_u64(w.b + off);
      if (!used[j] && kl == len && memcmp(w.b + off + 8, key, len) == 0) {
        used[j] = 1;
        found = 1;
        break;
      }
      off += 8 + kl;
    }
    ck_assert_msg(found, "unexpected key %.*s in LIST", (int)len, key);
  }
  m_free(&w);
}

static void replay(const step *steps) {
  int fd = unit_connect(port);
  ck_assert_int_ge(fd, 0);
  for (int i = 0; steps[i].dir; i++) {
    msg m = {0};
    switch (steps[i].dir) {
      case '>': send_msg(fd, m_hex(&m, steps[i].hex)); break;
      case '<': expect(fd, m_hex(&m, steps[i].hex)); break;
      case 'L': expect_list(fd, steps[i].hex); break;
      case 'E': expect_eof(fd); break;
    }
    m_free(&m);
  }
  close(fd);
}

/* captures/tcpstore-2.11-libuv-server-bytes.txt, connection 1: torch 2.11 against torch's libuv server. */
static const step cap_211_libuv[] = {
    {'>', "00cef7853c0dc0030000"},
    {'<', "c0030000"},
    {'>', "040500000000000000696e69742f0100000000000000"},
    {'<', "0100000000000000"},
    {'>', "0104000000000000002f666f6f0300000000000000626172"},
    {'>', "06010000000000000004000000000000002f666f6f"},
    {'<', "00"},
    {'>', "0304000000000000002f666f6f"},
    {'<', "0300000000000000626172"},
    {'>', "0404000000000000002f636e740500000000000000"},
    {'<', "0500000000000000"},
    {'>', "0404000000000000002f636e74feffffffffffffff"},
    {'<', "0300000000000000"},
    {'>', "0202000000000000002f6b010000000000000078010000000000000079"},
    {'<', "010000000000000078"},
    {'>', "0202000000000000002f6b0000000000000000010000000000000079"},
    {'<', "010000000000000079"},
    {'>', "0202000000000000002f6b01000000000000007901000000000000007a"},
    {'<', "01000000000000007a"},
    {'>', "0202000000000000002f6b04000000000000006e6f7065010000000000000077"},
    {'<', "01000000000000007a"},
    {'>', "05020000000000000004000000000000002f666f6f08000000000000002f6d697373696e67"},
    {'<', "01"},
    {'>', "06010000000000000004000000000000002f666f6f"},
    {'<', "00"},
    {'>', "07"},
    {'<', "0400000000000000"},
    {'>', "0804000000000000002f666f6f"},
    {'<', "0100000000000000"},
    {'>', "0804000000000000002f666f6f"},
    {'<', "0000000000000000"},
    {'>', "0903000000000000002f617002000000000000003132"},
    {'>', "0903000000000000002f617002000000000000003334"},
    {'>', "06010000000000000003000000000000002f6170"},
    {'<', "00"},
    {'>', "0303000000000000002f6170"},
    {'<', "040000000000000031323334"},
    {'>', "0b020000000000000002000000000000002f6101000000000000003102000000000000002f62010000000000000032"},
    {'>', "06020000000000000002000000000000002f6102000000000000002f62"},
    {'<', "00"},
    {'>', "0a020000000000000002000000000000002f6102000000000000002f62"},
    {'<', "010000000000000031010000000000000032"},
    {'>', "0e02000000000000002f7102000000000000007631"},
    {'>', "1002000000000000002f71"},
    {'<', "0100000000000000"},
    {'>', "06010000000000000002000000000000002f71"},
    {'<', "00"},
    {'>', "0f02000000000000002f71"},
    {'<', "010000000000000002000000000000007631"},
    {'>', "11"},
    {'L',
     "060000000000000002000000000000002f6202000000000000002f6103000000000000002f61700200000000000000"
     "2f6b04000000000000002f636e740500000000000000696e69742f"},
    /* SET /s "abc" then ADD /s 1 in one segment: the server closes (stoll fails). */
    {'>', "0102000000000000002f7303000000000000006162630402000000000000002f730100000000000000"},
    {'E', NULL},
    {0, NULL}};

/* captures/tcpstore-captures.txt section C: torch 2.6 against the classic server (same replies here). */
static const step cap_26_classic[] = {
    {'>', "00cef7853c0dcc5e0000"},
    {'<', "cc5e0000"},
    {'>', "0104000000000000002f666f6f0300000000000000626172"},
    {'>', "06010000000000000004000000000000002f666f6f"},
    {'<', "00"},
    {'>', "0304000000000000002f666f6f"},
    {'<', "0300000000000000626172"},
    {'>', "0404000000000000002f636e740500000000000000"},
    {'<', "0500000000000000"},
    {'>', "0204000000000000002f666f6f0300000000000000626172030000000000000062617a"},
    {'<', "030000000000000062617a"},
    {'>', "0208000000000000002f6d697373696e67010000000000000078010000000000000079"},
    {'<', "010000000000000078"},
    {'>', "05020000000000000004000000000000002f666f6f06000000000000002f6e6f6b6579"},
    {'<', "01"},
    {'>', "07"},
    {'<', "0200000000000000"},
    {'>', "0804000000000000002f636e74"},
    {'<', "0100000000000000"},
    {'>', "0904000000000000002f666f6f02000000000000002121"},
    {'>', "06020000000000000004000000000000002f666f6f08000000000000002f6d697373696e67"},
    {'>', "0c"},
    {'<', "01"},
    {'>', "0b020000000000000002000000000000002f6101000000000000003102000000000000002f62010000000000000032"},
    {'>', "06010000000000000005000000000000002f6c617465"},
    {'>', "0c"},
    {'<', "01"},
    {'>', "0105000000000000002f6c617465010000000000000076"},
    {'>', "06010000000000000005000000000000002f6c617465"},
    {'<', "00"},
    {'>', "0305000000000000002f6c617465"},
    {'<', "010000000000000076"},
    {'>', "06010000000000000009000000000000002f6d697373696e6732"},
    {'>', "0c"},
    {'<', "01"},
    {'>', "07"},
    {'<', "0400000000000000"},
    {0, NULL}};

/* captures/tcpstore-captures.txt sections A and B: torch 1.13 (one send per field). */
static const step cap_113_a[] = {{'>', "0004000000000000002f666f6f0300000000000000626172"},
                                 {'>', "06"},
                                 {'<', "0100000000000000"},
                                 {'>', "08"},
                                 {'>', "04000000000000002f666f6f"},
                                 {'<', "0100000000000000"},
                                 {'>', "0804000000000000002f666f6f"},
                                 {'<', "0000000000000000"},
                                 {'>', "00"},
                                 {'>', "06000000000000002f656d7074790000000000000000"},
                                 {'>', "05010000000000000006000000000000002f656d707479"},
                                 {'<', "00"},
                                 {'>', "0206000000000000002f656d707479"},
                                 {'<', "0000000000000000"},
                                 {'>', "00"},
                                 {'>', "04000000000000002f62696e020000000000000000ff"},
                                 {'>', "0304000000000000002f62696e0100000000000000"},
                                 {'E', NULL},
                                 {0, NULL}};

static const step cap_113_b[] = {{'>', "05020000000000000002000000000000002f6102000000000000002f62"},
                                 {'>', "00"},
                                 {'>', "02000000000000002f61010000000000000031"},
                                 {'>', "0002000000000000002f62010000000000000032"},
                                 {'<', "00"},
                                 {'>', "05"},
                                 {'>', "010000000000000002000000000000002f610202000000000000002f61"},
                                 {'<', "00010000000000000031"},
                                 {'>', "05010000000000000002000000000000002f62"},
                                 {'<', "00"},
                                 {'>', "02"},
                                 {'>', "02000000000000002f62"},
                                 {'<', "010000000000000032"},
                                 {'>', "05010000000000000002000000000000002f61"},
                                 {'<', "00"},
                                 {'>', "02"},
                                 {'>', "02000000000000002f61"},
                                 {'<', "010000000000000031"},
                                 {'>', "05010000000000000003000000000000002f7a7a"},
                                 {'>', "06"},
                                 {'<', "0200000000000000"},
                                 {0, NULL}};

START_TEST(test_replay_211_libuv) { replay(cap_211_libuv); }
END_TEST

START_TEST(test_replay_26_classic) { replay(cap_26_classic); }
END_TEST

START_TEST(test_replay_113_a) { replay(cap_113_a); }
END_TEST

START_TEST(test_replay_113_b) { replay(cap_113_b); }
END_TEST

/* ---- handshake and generations ----------------------------------------------------------------- */

START_TEST(test_handshake_and_legacy_same_port) {
  int v2 = connect_v2();
  int l113 = connect_legacy();
  /* Handshake split into single bytes on a third connection, interleaved with the others. */
  int v2b = unit_connect(port);
  ck_assert_int_ge(v2b, 0);
  static const uint8_t hello[] = {0x00, 0xce, 0xf7, 0x85, 0x3c, 0x0d, 0x01, 0x02, 0x03, 0x04};
  msg m = {0};
  for (size_t i = 0; i < sizeof(hello); i++) {
    ck_assert_int_eq(unit_send(v2b, &hello[i], 1), 0);
    if (i == 2) {
      /* 1.13 SET (code 0) "/x" = "1", then GET (code 2) on the same port meanwhile. */
      send_msg(l113, m_hex(&m, "0002000000000000002f78010000000000000031"));
      send_msg(l113, m_hex(&m, "0202000000000000002f78"));
      expect_hex(l113, "010000000000000031");
    }
  }
  expect_hex(v2b, "01020304");
  /* The V2 connections see the legacy write: GET (3), GETNUMKEYS (7); the legacy one counts 1 (code 6). */
  send_msg(v2, m_hex(&m, "0302000000000000002f78"));
  expect_hex(v2, "010000000000000031");
  send_msg(v2b, m_hex(&m, "07"));
  expect_hex(v2b, "0100000000000000");
  send_msg(l113, m_hex(&m, "06"));
  expect_hex(l113, "0100000000000000");
  /* V2 SET seen by legacy GET. */
  send_msg(v2, m_hex(&m, "0102000000000000002f790200000000000000aabb"));
  ping(v2, 6); /* the SET is done before the other connection reads */
  send_msg(l113, m_hex(&m, "0202000000000000002f79"));
  expect_hex(l113, "0200000000000000aabb");
  ping(v2, 7);
  ping(v2b, 8);
  trun_server_stats st = stats();
  ck_assert_uint_eq(st.connections, 3);
  ck_assert_uint_eq(st.accepted, 3);
  ck_assert_uint_eq(st.rejected, 0);
  close(v2);
  close(v2b);
  close(l113);
  m_free(&m);
}
END_TEST

/* A 2.1 numbering server: DELETE_KEY 7, APPEND 8, MULTI_GET 9, MULTI_SET 10, CANCEL_WAIT 11. */
START_TEST(test_legacy21) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.legacy = TRUN_GEN_LEGACY21;
  start_with(&o);
  int fd = connect_legacy();
  msg m = {0};
  send_msg(fd, m_str(m_str(m_u8(&m, 8), "/a"), "12")); /* APPEND */
  send_msg(fd, m_str(m_str(m_u8(&m, 8), "/a"), "34")); /* APPEND */
  send_msg(fd, m_str(m_u64(m_u8(&m, 9), 2), "/a"));    /* MULTI_GET [/a, /none] */
  send_msg(fd, m_str(&m, "/none"));
  expect_hex(fd, "0400000000000000313233340000000000000000");
  send_msg(fd, m_str(m_str(m_str(m_str(m_u64(m_u8(&m, 10), 2), "/b"), "B"), "/c"), "")); /* MULTI_SET */
  send_msg(fd, m_str(m_u8(&m, 2), "/b"));                                                /* GET */
  expect_hex(fd, "010000000000000042");
  send_msg(fd, m_str(m_u8(&m, 7), "/c")); /* DELETE_KEY */
  expect_hex(fd, "0100000000000000");
  send_msg(fd, m_str(m_u64(m_u8(&m, 5), 1), "/never")); /* WAIT */
  until_waiting(1);
  send_msg(fd, m_u8(&m, 11)); /* CANCEL_WAIT */
  expect_hex(fd, "01");
  until_waiting(0);
  send_msg(fd, m_u8(&m, 6)); /* GETNUMKEYS: /a /b */
  expect_hex(fd, "0200000000000000");
  send_msg(fd, m_u8(&m, 12)); /* unknown in 2.1 */
  expect_eof(fd);
  close(fd);
  m_free(&m);
}
END_TEST

/* 1.13 WATCH_KEY (code 7): reply 3, then pushed updates: u8 type, key, old, new. */
START_TEST(test_watch_key) {
  int w = connect_legacy();
  int l = connect_legacy();
  msg m = {0};
  send_msg(w, m_str(m_u8(&m, 7), "/w"));
  expect_hex(w, "03");
  send_msg(l, m_str(m_str(m_u8(&m, 0), "/w"), "v1")); /* SET: created */
  expect(w, m_str(m_str(m_str(m_u8(&m, TRUN_WATCH_KEY_CREATED), "/w"), ""), "v1"));
  send_msg(l, m_str(m_str(m_u8(&m, 0), "/w"), "v2")); /* SET: updated */
  expect(w, m_str(m_str(m_str(m_u8(&m, TRUN_WATCH_KEY_UPDATED), "/w"), "v1"), "v2"));
  send_msg(l, m_str(m_u8(&m, 8), "/w")); /* DELETE_KEY */
  expect_hex(l, "0100000000000000");
  expect(w, m_str(m_str(m_str(m_u8(&m, TRUN_WATCH_KEY_DELETED), "/w"), "v2"), ""));
  /* The watcher leaves; later writes go nowhere and the writer is unaffected. */
  close(w);
  until_connections(1);
  send_msg(l, m_str(m_str(m_u8(&m, 0), "/w"), "v3"));
  send_msg(l, m_u8(&m, 6));
  expect_hex(l, "0100000000000000");
  close(l);
  m_free(&m);
}
END_TEST

/* ---- replies of every op not covered by the captures ------------------------------------------ */

START_TEST(test_op_replies) {
  int fd = connect_v2();
  msg m = {0};
  ping(fd, 0xffffffffu);
  ping(fd, 0);
  send_msg(fd, m_str(m_u8(&m, 3), "/missing")); /* GET missing: empty (libuv rule) */
  expect_hex(fd, "0000000000000000");
  send_msg(fd, m_u64(m_u8(&m, 5), 0)); /* CHECK [] */
  expect_hex(fd, "00");
  send_msg(fd, m_u64(m_u8(&m, 6), 0)); /* WAIT [] */
  expect_hex(fd, "00");
  send_msg(fd, m_u8(&m, 12)); /* CANCEL_WAIT with nothing pending */
  expect_hex(fd, "01");
  send_msg(fd, m_u8(&m, 17)); /* LIST of nothing */
  expect_hex(fd, "0000000000000000");
  send_msg(fd, m_u8(&m, 7)); /* GETNUMKEYS */
  expect_hex(fd, "0000000000000000");
  send_msg(fd, m_str(m_str(m_u8(&m, 1), ""), "")); /* SET "" = "" */
  send_msg(fd, m_str(m_u8(&m, 3), ""));
  expect_hex(fd, "0000000000000000");
  send_msg(fd, m_u8(&m, 7));
  expect_hex(fd, "0100000000000000");
  send_msg(fd, m_str(m_u64(m_u8(&m, 10), 3), "")); /* MULTI_GET ["", "/nope", ""] */
  send_msg(fd, m_str(m_str(&m, "/nope"), ""));
  expect_hex(fd, "000000000000000000000000000000000000000000000000");
  send_msg(fd, m_str(m_u8(&m, 15), "/q")); /* QUEUE_POP empty: length only */
  expect_hex(fd, "0000000000000000");
  send_msg(fd, m_str(m_u8(&m, 16), "/q"));
  expect_hex(fd, "0000000000000000");
  send_msg(fd, m_str(m_str(m_u8(&m, 14), "/q"), "one"));
  send_msg(fd, m_str(m_str(m_u8(&m, 14), "/q"), "two"));
  send_msg(fd, m_str(m_u8(&m, 16), "/q"));
  expect_hex(fd, "0200000000000000");
  send_msg(fd, m_str(m_u8(&m, 15), "/q"));
  expect(fd, m_str(m_u64(&m, 2), "one"));
  send_msg(fd, m_str(m_u8(&m, 15), "/q"));
  expect(fd, m_str(m_u64(&m, 1), "two"));
  send_msg(fd, m_u64(m_str(m_u8(&m, 18), "/bar"), 1)); /* BARRIER world 1 */
  expect_hex(fd, "00");
  send_msg(fd, m_str(m_u8(&m, 3), "/bar"));
  expect(fd, m_str(&m, "1"));
  send_msg(fd, m_u64(m_str(m_u8(&m, 4), "/n"), (uint64_t)INT64_MIN)); /* ADD INT64_MIN */
  expect(fd, m_u64(&m, (uint64_t)INT64_MIN));
  send_msg(fd, m_str(m_u8(&m, 8), "/n")); /* DELETE_KEY */
  expect_hex(fd, "0100000000000000");
  send_msg(fd, m_u64(m_str(m_u8(&m, 4), "/n"), 0));
  expect_hex(fd, "0000000000000000");
  trun_server_stats st = stats();
  ck_assert_uint_ge(st.ops, 25);
  close(fd);
  m_free(&m);
}
END_TEST

/* ---- waits ------------------------------------------------------------------------------------- */

START_TEST(test_wait_answered_later) {
  int a = connect_v2(), b = connect_v2();
  msg m = {0};
  send_msg(a, m_str(m_str(m_u64(m_u8(&m, 6), 2), "/late1"), "/late2"));
  until_waiting(1);
  ck_assert(!unit_readable_now(a));
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/late1"), "x"));
  ping(b, 1);                       /* b's SET is done */
  ck_assert(!unit_readable_now(a)); /* one of two keys */
  ck_assert_uint_eq(stats().waiting, 1);
  send_msg(b, m_str(m_str(m_u8(&m, 9), "/late2"), "y")); /* APPEND creates */
  expect_hex(a, "00");
  ck_assert_uint_eq(stats().waiting, 0);
  ping(a, 2);
  /* Several connections waiting on one key are all answered by one SET. */
  int c = connect_v2();
  send_msg(a, m_str(m_u64(m_u8(&m, 6), 1), "/all"));
  send_msg(c, m_str(m_u64(m_u8(&m, 6), 1), "/all"));
  until_waiting(2);
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/all"), ""));
  expect_hex(a, "00");
  expect_hex(c, "00");
  until_waiting(0);
  close(a);
  close(b);
  close(c);
  m_free(&m);
}
END_TEST

START_TEST(test_cancel_wait) {
  int a = connect_v2(), b = connect_v2();
  msg m = {0};
  send_msg(a, m_str(m_u64(m_u8(&m, 6), 1), "/never"));
  until_waiting(1);
  send_msg(a, m_u8(&m, 12));
  expect_hex(a, "01");
  ck_assert_uint_eq(stats().waiting, 0);
  /* A later SET of the key sends a nothing: the next bytes are the PING echo. */
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/never"), "now"));
  ping(b, 3);
  ping(a, 4);
  /* CANCEL_WAIT after STOP_WAITING was sent: 00 then 01. */
  send_msg(a, m_str(m_u64(m_u8(&m, 6), 1), "/soon"));
  until_waiting(1);
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/soon"), "x"));
  until_waiting(0);
  send_msg(a, m_u8(&m, 12));
  expect_hex(a, "0001");
  close(a);
  close(b);
  m_free(&m);
}
END_TEST

START_TEST(test_disconnect_while_waiting) {
  int a = connect_v2(), b = connect_v2();
  msg m = {0};
  send_msg(a, m_str(m_str(m_u64(m_u8(&m, 6), 2), "/k1"), "/k2"));
  send_msg(b, m_str(m_u64(m_u8(&m, 6), 1), "/k1"));
  until_waiting(2);
  close(a);
  until_connections(1);
  until_waiting(1);
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/k1"), "v"));
  expect_hex(b, "00");
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/k2"), "v"));
  ping(b, 5);
  trun_server_stats st = stats();
  ck_assert_uint_eq(st.waiting, 0);
  ck_assert_uint_eq(st.connections, 1);
  ck_assert_uint_eq(st.rejected, 0); /* leaving is not bad input */
  /* A waiter reset by its peer (RST) is dropped too. */
  int c = connect_v2();
  send_msg(c, m_str(m_u64(m_u8(&m, 6), 1), "/k3"));
  until_waiting(1);
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(c);
  until_waiting(0);
  until_connections(1);
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/k3"), "v"));
  ping(b, 6);
  close(b);
  m_free(&m);
}
END_TEST

/* Owned keys: the gone callback writes "/o/end" (then "/o/end2") = "gone:" + the key
 * (trun_server_compare_set from "") and counts "/o/gone_n" (trun_server_add), as the rendezvous does, on the
 * server's thread with the key space locked, so that a waiter of "/o/end" wakes. */
static void owner_gone(void *arg, trun_server *s, trun_slice key, trun_slice value, const char *peer) {
  (void)value;
  char v[128];
  int n = snprintf(v, sizeof(v), "gone:%.*s", (int)key.n, (const char *)key.p);
  trun_slice reply;
  const char *end = *(int *)arg == 0 ? "/o/end" : "/o/end2"; /* each end once: compare-set from "" */
  ck_assert_int_eq(trun_server_compare_set(s, trun_str(end), trun_str(""),
                                           (trun_slice){(const uint8_t *)v, (size_t)n}, &reply),
                   0);
  ck_assert_int_eq((int)reply.n, n);
  int64_t count;
  ck_assert_int_eq(trun_server_add(s, trun_str("/o/gone_n"), 1, &count), 0);
  ck_assert_int_ge(count, 1);
  ck_assert_msg(strncmp(peer, "127.0.0.1:", 10) == 0, "peer %s", peer);
  (*(int *)arg)++;
}

#define OWN_TOKEN "unit-test-agent-token"

/* Owned keys live in the agents' key space ("/o/..."), written by connections with the agents' token. */
static void own_on(trun_server *s, void *arg) {
  ck_assert_int_eq(trun_server_own_keys(s, "/alive/", owner_gone, arg), 0);
  ck_assert_int_eq(trun_server_agent_token(s, OWN_TOKEN), 0);
  ck_assert_int_eq(trun_server_protect(s, "/o", NULL), 0);
}

/* A V2 connection that presented the agents' token (CHECK of the token key: READY). */
static int connect_agent(void) {
  int fd = connect_v2();
  msg m = {0};
  send_msg(fd, m_str(m_u64(m_u8(&m, 5), 1), TRUN_STORE_TOKEN_KEY OWN_TOKEN));
  expect_hex(fd, "00");
  m_free(&m);
  return fd;
}

/* An agent connection that SET a key "<root>/<seg>/alive/<n>" and ends without deleting it: the callback
 * fires once, and its write wakes a waiter. A DELETE by the owner, another connection's SET of the key, or
 * keys without the marker: no callback. */
START_TEST(test_owned_key_gone) {
  static int gone;
  gone = 0;
  unit_server_call(&us, own_on, &gone);
  int a = connect_agent(), w = connect_v2();
  msg m = {0};
  send_msg(w, m_str(m_u64(m_u8(&m, 6), 1), "/o/end"));
  until_waiting(1);
  send_msg(a, m_str(m_str(m_u8(&m, 1), "/o/r1/alive/2"), "10.0.0.3 77 0"));
  send_msg(a, m_str(m_str(m_u8(&m, 1), "/o/other"), "x"));
  ping(a, 1);
  ck_assert(!unit_readable_now(w));
  close(a);
  expect_hex(w, "00");
  send_msg(w, m_str(m_u8(&m, 3), "/o/end"));
  expect(w, m_str(&m, "gone:/o/r1/alive/2"));
  ck_assert_int_eq(gone, 1);
  /* Deleted by its owner first: nothing. */
  int b = connect_agent();
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/o/r2/alive/0"), "me"));
  send_msg(b, m_str(m_u8(&m, 8), "/o/r2/alive/0"));
  expect_hex(b, "0100000000000000");
  close(b);
  /* Written again by another connection: the first one's end is not the key's. */
  int c = connect_agent(), d = connect_agent();
  send_msg(c, m_str(m_str(m_u8(&m, 1), "/o/r3/alive/1"), "first"));
  ping(c, 2);
  send_msg(d, m_str(m_str(m_u8(&m, 1), "/o/r3/alive/1"), "second"));
  ping(d, 3);
  close(c);
  until_connections(2); /* w and d */
  ping(w, 4);
  ck_assert_int_eq(gone, 1);
  /* The new owner's end fires. */
  close(d);
  until_connections(1);
  send_msg(w, m_str(m_u8(&m, 3), "/o/end2"));
  expect(w, m_str(&m, "gone:/o/r3/alive/1"));
  ck_assert_int_eq(gone, 2);
  close(w);
  m_free(&m);
}
END_TEST

/* BARRIER over the wire, and a BARRIER that passes at once replacing a pending WAIT. */
START_TEST(test_barrier) {
  int a = connect_v2(), b = connect_v2();
  msg m = {0};
  send_msg(a, m_u64(m_str(m_u8(&m, 18), "/b"), 2));
  until_waiting(1);
  ck_assert(!unit_readable_now(a));
  send_msg(b, m_u64(m_str(m_u8(&m, 18), "/b"), 2));
  expect_hex(b, "00");
  expect_hex(a, "00");
  ck_assert_uint_eq(stats().waiting, 0);
  send_msg(a, m_str(m_u64(m_u8(&m, 6), 1), "/x"));
  until_waiting(1);
  send_msg(a, m_u64(m_str(m_u8(&m, 18), "/solo"), 1));
  expect_hex(a, "00");
  until_waiting(0);
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/x"), "1"));
  ping(b, 9);
  ping(a, 10); /* no stray STOP_WAITING before the echo */
  ck_assert_uint_eq(stats().waiting, 0);
  close(a);
  close(b);
  m_free(&m);
}
END_TEST

START_TEST(test_queue_push_wakes_one) {
  int a = connect_v2(), b = connect_v2(), c = connect_v2();
  msg m = {0};
  send_msg(a, m_str(m_u64(m_u8(&m, 6), 1), "/q"));
  send_msg(b, m_str(m_u64(m_u8(&m, 6), 1), "/q"));
  until_waiting(2);
  send_msg(c, m_str(m_str(m_u8(&m, 14), "/q"), "1"));
  until_waiting(1); /* the key space woke one waiter ... */
  /* ... whose byte may still be on its way from another loop's thread */
  while (unit_readable_now(a) + unit_readable_now(b) == 0) usleep(1000);
  ck_assert_int_eq(unit_readable_now(a) + unit_readable_now(b), 1);
  send_msg(c, m_str(m_str(m_u8(&m, 14), "/q"), "2"));
  expect_hex(a, "00");
  expect_hex(b, "00");
  until_waiting(0);
  close(a);
  close(b);
  close(c);
  m_free(&m);
}
END_TEST

/* ---- bad input --------------------------------------------------------------------------------- */

typedef struct {
  int v2;          /* do the handshake first */
  const char *hex; /* then send this */
} bad_case;

static const bad_case bad_cases[] = {
    {1, "ff"},                                   /* unknown code */
    {1, "13"},                                   /* WATCH_KEY is not V2 */
    {1, "00cef7853c"},                           /* a second VALIDATE */
    {1, "010000000000000010"},                   /* key length 2^60, nothing else sent */
    {1, "01ffffffffffffffff"},                   /* key length 2^64-1 */
    {1, "0101000000000000006b0000000000000001"}, /* value length 2^56 */
    {1, "06ffffffffffffffff"},                   /* WAIT with 2^64-1 keys */
    {1, "0bffffffffffffffff"},                   /* MULTI_SET with a negative count */
    {0, "474554202f20485454502f312e310d0a0d0a"}, /* "GET / HTTP/1.1": unknown code 'G' */
    {0, "09"},                                   /* unknown in 1.13 */
    {0, "00cef7853d0d01000000"},                 /* bad magic: a 1.13 SET with an absurd key length */
};

START_TEST(test_bad_input_closes) {
  int good = connect_v2();
  int legacy = connect_legacy();
  msg m = {0};
  int n = (int)(sizeof(bad_cases) / sizeof(bad_cases[0]));
  for (int i = 0; i < n; i++) {
    int fd = bad_cases[i].v2 ? connect_v2() : connect_legacy();
    send_msg(fd, m_hex(&m, bad_cases[i].hex));
    ck_assert_msg(unit_eof(fd), "case %d (%s): still open", i, bad_cases[i].hex);
    close(fd);
    ping(good, (uint32_t)i);
    send_msg(legacy, m_u8(&m, 6));
    expect_hex(legacy, "0000000000000000");
  }
  until_connections(2);
  ck_assert_uint_eq(stats().rejected, (uint64_t)n);
  close(good);
  close(legacy);
  m_free(&m);
}
END_TEST

/* Limits apply as soon as a length is readable: the rest of the oversized request is never sent. */
START_TEST(test_limits_close) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.limits.max_key = 64;
  o.limits.max_value = 128;
  o.limits.max_keys = 4;
  start_with(&o);
  int good = connect_v2();
  char key[65], val[129];
  memset(key, 'k', 64);
  key[64] = '\0';
  memset(val, 'v', 128);
  val[128] = '\0';
  msg m = {0};
  /* At the limits: fine. */
  send_msg(good, m_str(m_str(m_u8(&m, 1), key), val));
  send_msg(good, m_str(m_u8(&m, 3), key));
  expect(good, m_str(&m, val));
  send_msg(good, m_str(m_str(m_str(m_str(m_u64(m_u8(&m, 5), 4), key), key), key), key));
  expect_hex(good, "00");
  /* One over: closed with only the length sent. */
  const char *over[] = {"014100000000000000", "0101000000000000006b8100000000000000", "060500000000000000",
                        "0b0500000000000000", "0e01000000000000006b8100000000000000"};
  for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
    int fd = connect_v2();
    send_msg(fd, m_hex(&m, over[i]));
    ck_assert_msg(unit_eof(fd), "%s: still open", over[i]);
    close(fd);
    ping(good, (uint32_t)i);
  }
  close(good);
  m_free(&m);
}
END_TEST

START_TEST(test_add_non_integer) {
  int a = connect_v2(), b = connect_v2();
  msg m = {0};
  send_msg(a, m_str(m_str(m_u8(&m, 1), "/s"), "abc"));
  send_msg(a, m_u64(m_str(m_u8(&m, 4), "/s"), 1));
  expect_eof(a);
  close(a);
  send_msg(b, m_str(m_u8(&m, 3), "/s"));
  expect(b, m_str(&m, "abc"));
  /* stoll rules: "12abc" + 1 = 13 and the connection stays. */
  send_msg(b, m_str(m_str(m_u8(&m, 1), "/t"), "12abc"));
  send_msg(b, m_u64(m_str(m_u8(&m, 4), "/t"), 1));
  expect(b, m_u64(&m, 13));
  /* Overflow closes too. */
  int c = connect_v2();
  send_msg(c, m_u64(m_str(m_u8(&m, 4), "/t"), (uint64_t)INT64_MAX));
  expect_eof(c);
  close(c);
  ping(b, 1);
  until_connections(1);
  ck_assert_uint_eq(stats().rejected, 2);
  close(b);
  m_free(&m);
}
END_TEST

/* ---- fragmented, pipelined, large ---------------------------------------------------------------- */

static void build_session(msg *req, msg *rep) {
  m_hex(req, "00cef7853c");
  m_u32(m_u8(req, 13), 0xabcdef01u);
  m_u32(rep, 0xabcdef01u);
  m_str(m_str(m_u8(req, 1), "/a"), "alpha");
  m_str(m_u8(req, 3), "/a");
  m_str(rep, "alpha");
  m_u64(m_str(m_u8(req, 4), "/c"), 1);
  m_u64(rep, 1);
  m_u64(m_str(m_u8(req, 4), "/c"), 41);
  m_u64(rep, 42);
  m_str(m_str(m_u64(m_u8(req, 5), 2), "/a"), "/c");
  m_u8(rep, 0);
  m_str(m_str(m_u64(m_u8(req, 6), 2), "/a"), "/c");
  m_u8(rep, 0);
  m_str(m_str(m_str(m_u8(req, 2), "/a"), "alpha"), "beta");
  m_str(rep, "beta");
  m_u8(req, 7);
  m_u64(rep, 2);
  m_str(m_str(m_u64(m_u8(req, 10), 2), "/c"), "/a");
  m_str(m_str(rep, "42"), "beta");
  m_str(m_u8(req, 8), "/a");
  m_u64(rep, 1);
  m_str(m_str(m_u8(req, 14), "/q"), "item");
  m_str(m_u8(req, 15), "/q");
  m_str(m_u64(rep, 1), "item");
  m_u32(m_u8(req, 13), 0x01020304u);
  m_u32(rep, 0x01020304u);
}

START_TEST(test_bytewise) {
  msg req = {0}, rep = {0};
  build_session(&req, &rep);
  int fd = unit_connect(port);
  ck_assert_int_ge(fd, 0);
  for (size_t i = 0; i < req.n; i++) ck_assert_int_eq(unit_send(fd, req.b + i, 1), 0);
  expect(fd, &rep);
  /* A legacy client sending one byte at a time. */
  int l = connect_legacy();
  msg m = {0};
  m_str(m_str(m_u8(&m, 0), "/x"), "y");
  m_str(m_u8(&m, 2), "/x");
  for (size_t i = 0; i < m.n; i++) ck_assert_int_eq(unit_send(l, m.b + i, 1), 0);
  m.n = 0;
  expect(l, m_str(&m, "y"));
  close(fd);
  close(l);
  m_free(&req);
  m_free(&rep);
  m_free(&m);
}
END_TEST

START_TEST(test_pipelined) {
  msg req = {0}, rep = {0};
  build_session(&req, &rep);
  int fd = unit_connect(port);
  ck_assert_int_ge(fd, 0);
  send_msg(fd, &req);
  expect(fd, &rep);
  /* 1000 PINGs in one write come back in order. */
  for (uint32_t i = 0; i < 1000; i++) m_u32(m_u8(&req, 13), i);
  for (uint32_t i = 0; i < 1000; i++) m_u32(&rep, i);
  send_msg(fd, &req);
  expect(fd, &rep);
  close(fd);
  m_free(&req);
  m_free(&rep);
}
END_TEST

static void big_roundtrip(int fd, size_t n, int gets) {
  uint8_t *v = malloc(n);
  ck_assert_ptr_nonnull(v);
  for (size_t i = 0; i < n; i++) v[i] = (uint8_t)(i * 131 + (i >> 16));
  msg m = {0};
  m_mem(m_u64(m_str(m_u8(&m, 1), "/big"), n), v, n);
  for (int g = 0; g < gets; g++) m_str(m_u8(&m, 3), "/big");
  /* Send while reading: the replies can exceed what the socket buffers hold. */
  size_t sent = 0, got = 0, want = (size_t)gets * (8 + n);
  uint8_t *r = malloc(want);
  ck_assert_ptr_nonnull(r);
  while (got < want) {
    struct pollfd p = {.fd = fd, .events = POLLIN | (sent < m.n ? POLLOUT : 0)};
    ck_assert_int_gt(poll(&p, 1, 20000), 0);
    if ((p.revents & POLLOUT) && sent < m.n) {
      ssize_t k = send(fd, m.b + sent, m.n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      ck_assert_int_gt(k, 0);
      sent += (size_t)k;
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t k = recv(fd, r + got, want - got, MSG_DONTWAIT);
      ck_assert_int_gt(k, 0);
      got += (size_t)k;
    }
  }
  for (int g = 0; g < gets; g++) {
    const uint8_t *p = r + (size_t)g * (8 + n);
    ck_assert_uint_eq(trun_get_u64(p), n);
    ck_assert_msg(memcmp(p + 8, v, n) == 0, "value %d of %zu bytes differs", g, n);
  }
  free(r);
  free(v);
  m_free(&m);
}

START_TEST(test_large_values) {
  int fd = connect_v2();
  big_roundtrip(fd, 64 * 1024 + 1, 1);
  big_roundtrip(fd, 1024 * 1024, 2);
  big_roundtrip(fd, 6 * 1024 * 1024 + 7, 3); /* replies beyond max_pending_out: reading pauses, resumes */
  ping(fd, 77);
  close(fd);
}
END_TEST

/* ---- a peer that is gone while the server writes to it ------------------------------------------ */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int entered, release;
} gate;

static gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

/* Runs on the loop thread: holds the loop until the test opens the gate. */
static void gate_fn(trun_server *s, void *arg) {
  (void)s;
  (void)arg;
  pthread_mutex_lock(&g.mu);
  g.entered = 1;
  pthread_cond_broadcast(&g.cv);
  while (!g.release) pthread_cond_wait(&g.cv, &g.mu);
  pthread_mutex_unlock(&g.mu);
}

static void *gate_thread(void *arg) {
  (void)arg;
  unit_server_call(&us, gate_fn, NULL);
  return NULL;
}

/* Holds the server's loop, runs fn while it is held, then lets the loop see everything at once. */
static void while_loop_held(void (*fn)(void *), void *arg) {
  pthread_t t;
  g.entered = g.release = 0;
  ck_assert_int_eq(pthread_create(&t, NULL, gate_thread, NULL), 0);
  pthread_mutex_lock(&g.mu);
  while (!g.entered) pthread_cond_wait(&g.cv, &g.mu);
  pthread_mutex_unlock(&g.mu);
  fn(arg);
  pthread_mutex_lock(&g.mu);
  g.release = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  pthread_join(t, NULL);
}

typedef struct {
  int writer, gone;
  int n;
} gone_args;

/* The writer's updates arrive first, then the other peer's close: the server writes to a closed peer
 * (its second write fails with EPIPE) while it is inside the key space's wake/notify loop. */
static void writes_then_close(void *arg) {
  gone_args *a = arg;
  msg m = {0};
  for (int i = 0; i < a->n; i++) m_str(m_str(m_u8(&m, 0 /* 1.13 SET */), "/w"), "value");
  send_msg(a->writer, &m);
  close(a->gone);
  m_free(&m);
}

START_TEST(test_watcher_gone) {
  int l = connect_legacy();
  int w = connect_legacy();
  int w2 = connect_legacy();
  msg m = {0};
  send_msg(w, m_str(m_u8(&m, 7), "/w"));
  expect_hex(w, "03");
  send_msg(w2, m_str(m_u8(&m, 7), "/w"));
  expect_hex(w2, "03");
  gone_args a = {.writer = l, .gone = w, .n = 4};
  while_loop_held(writes_then_close, &a);
  send_msg(l, m_u8(&m, 6));
  expect_hex(l, "0100000000000000");
  until_connections(2);
  /* The other watcher got all four updates. */
  for (int i = 0; i < 4; i++)
    expect(w2, m_str(m_str(m_str(m_u8(&m, i ? TRUN_WATCH_KEY_UPDATED : TRUN_WATCH_KEY_CREATED), "/w"),
                           i ? "value" : ""),
                     "value"));
  close(l);
  close(w2);
  m_free(&m);
}
END_TEST

/* The same with waiters: the STOP_WAITING write to a peer that reset its connection. */
static void set_then_reset(void *arg) {
  gone_args *a = arg;
  msg m = {0};
  for (int i = 0; i < a->n; i++) m_str(m_str(m_u8(&m, 1), "/g"), "v");
  send_msg(a->writer, &m);
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(a->gone, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(a->gone);
  m_free(&m);
}

START_TEST(test_waiter_gone) {
  int b = connect_v2();
  int a = connect_v2();
  int c = connect_v2();
  msg m = {0};
  send_msg(a, m_str(m_u64(m_u8(&m, 6), 1), "/g"));
  send_msg(c, m_str(m_u64(m_u8(&m, 6), 1), "/g"));
  until_waiting(2);
  /* The loop sees a's reset before or after b's SET; either way c is answered and b keeps working. */
  gone_args ga = {.writer = b, .gone = a, .n = 2};
  while_loop_held(set_then_reset, &ga);
  expect_hex(c, "00");
  ping(b, 1);
  until_connections(2);
  ck_assert_uint_eq(stats().waiting, 0);
  close(b);
  close(c);
  m_free(&m);
}
END_TEST

/* ---- connections closed on paths other than a read ------------------------------------------------ */

/* Sends SET key = n bytes of 'b' (code: the generation's SET) without waiting for anything back. */
static void set_big_code(int fd, uint8_t code, const char *key, size_t n) {
  msg m = {0};
  m_u64(m_str(m_u8(&m, code), key), n);
  m_grow(&m, n);
  memset(m.b + m.n, 'b', n);
  m.n += n;
  send_msg(fd, &m);
  m_free(&m);
}

static void set_big(int fd, const char *key, size_t n) { set_big_code(fd, 1, key, n); }

static void reset_conn(int fd) {
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
  close(fd);
}

/* Two connections each own a liveness key, wait on "/o/end" and ask for a large value they never read: the
 * server stops reading them with replies pending. Both reset: the server learns it on the write path, and
 * the first one's end (the gone callback writes "/o/end") wakes the other just before that one closes too.
 * The woken connection must leave no stale entry in its shard's flush queue once it is freed: the next
 * request on that loop (a PING from a third connection) walked freed memory before (ASan). */
START_TEST(test_owners_reset_with_reply_pending) {
  static int gone;
  gone = 0;
  unit_server_call(&us, own_on, &gone);
  int c = connect_v2();
  set_big(c, "/big", 8u << 20);
  ping(c, 1);
  uint64_t base = stats().ops;
  int fd[2];
  msg m = {0};
  for (int i = 0; i < 2; i++) {
    char key[32];
    snprintf(key, sizeof(key), "/o/alive/%d", i);
    fd[i] = connect_agent();                            /* an agent's connection: its liveness key is owned */
    m_str(m_str(m_u8(&m, 1), key), "me");               /* SET: owned */
    m_str(m_u64(m_u8(&m, 6), 1), "/o/end");             /* WAIT */
    m_str(m_u8(m_str(m_u8(&m, 3), "/big"), 3), "/big"); /* GET, GET: never read */
    send_msg(fd[i], &m);
  }
  until_waiting(2);
  /* Each connection's handshake PING, token CHECK, SET, WAIT and at least one GET have run. */
  while (stats().ops < base + 2 * 5) usleep(1000);
  reset_conn(fd[0]);
  reset_conn(fd[1]);
  until_connections(1);
  for (uint32_t i = 0; i < 20; i++) ping(c, 100 + i);
  ck_assert_int_eq(gone, 2);
  ck_assert_uint_eq(stats().waiting, 0);
  send_msg(c, m_str(m_u8(&m, 3), "/o/end"));
  msg want = {0};
  m_str(&want, "gone:/o/alive/0");
  uint8_t got[32];
  ck_assert_int_eq(unit_recv(c, got, want.n), 0); /* either key's end wrote last */
  ck_assert_msg(memcmp(got, want.b, 8) == 0 && memcmp(got + 8, "gone:/o/alive/", 14) == 0, "got %s",
                unit_hex(got, want.n));
  close(c);
  m_free(&want);
  m_free(&m);
}
END_TEST

/* ---- bounded work per connection ----------------------------------------------------------------- */

/* A client that pipelines 200 GETs of a 1 MiB value and does not read: the server stops running its
 * requests once 4 MiB of replies wait (the rest of the input is held, counted in input_bytes), then runs
 * them as the client reads; every reply arrives, in order. */
START_TEST(test_backpressure_holds_requests) {
  enum { N = 200 };
  size_t n = 1u << 20;
  int w = connect_v2(), r = connect_v2();
  set_big(w, "/m", n);
  ping(w, 1);
  uint64_t base = stats().ops;
  msg m = {0};
  for (int i = 0; i < N; i++) m_str(m_u8(&m, 3), "/m");
  send_msg(r, &m);
  while (stats().input_bytes == 0) usleep(1000); /* held: the requests wait in the input buffer */
  ck_assert_uint_lt(stats().ops, base + N);
  ping(w, 2); /* others are served meanwhile */
  uint8_t *got = malloc(8 + n);
  ck_assert_ptr_nonnull(got);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(unit_recv(r, got, 8 + n), 0);
    ck_assert_uint_eq(trun_get_u64(got), n);
    ck_assert_int_eq(got[8 + i * 4099 % n], 'b');
  }
  free(got);
  ping(r, 3);
  ck_assert_uint_eq(stats().ops, base + N + 2);
  ck_assert_uint_eq(stats().input_bytes, 0);
  close(w);
  close(r);
  m_free(&m);
}
END_TEST

/* A reply over max_reply closes its connection (logged) before anything is queued; GET of a value within
 * it works, and so does everyone else. */
START_TEST(test_reply_cap) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.max_reply = 1u << 20;
  start_with(&o);
  int w = connect_v2();
  set_big(w, "/v", 600u << 10);
  ping(w, 1);
  msg m = {0};
  int a = connect_v2();
  send_msg(a, m_str(m_str(m_u64(m_u8(&m, 10), 2), "/v"), "/v")); /* MULTI_GET: 1.2 MiB */
  expect_eof(a);
  close(a);
  a = connect_v2();
  send_msg(a, m_str(m_u8(&m, 3), "/v"));
  uint8_t *got = malloc(8 + (600u << 10));
  ck_assert_ptr_nonnull(got);
  ck_assert_int_eq(unit_recv(a, got, 8 + (600u << 10)), 0);
  free(got);
  ping(w, 2);
  ck_assert_uint_eq(stats().rejected, 1);
  close(a);
  close(w);
  m_free(&m);
}
END_TEST

/* A 1.13 watcher that never reads its updates: once they pass max_pending_out + max_reply unsent, the
 * server closes it (a slow consumer) instead of buffering every value ever written; the writer goes on.
 * With one loop, and with four (the writer's updates cross threads). */
START_TEST(test_watcher_slow_consumer) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.max_reply = 1u << 20;
  o.threads = _i ? 4 : 1;
  start_with(&o);
  int w = connect_legacy(), l = connect_legacy();
  int rcv = 4096;
  ck_assert_int_eq(setsockopt(w, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv)), 0);
  msg m = {0};
  send_msg(w, m_str(m_u8(&m, 7), "/w"));
  expect_hex(w, "03");
  for (int i = 0; i < 40; i++) {
    set_big_code(l, 0, "/w", 512u << 10); /* 1.13 SET */
    send_msg(l, m_u8(&m, 6));             /* GETNUMKEYS: the SET is done */
    expect_hex(l, "0100000000000000");
  }
  until_connections(1);
  ck_assert_uint_eq(stats().rejected, 1);
  close(w);
  close(l);
  m_free(&m);
}
END_TEST

/* The input all connections buffer together is bounded: with a 256 KiB budget, a request that needs more
 * closes its connection; a small one on another connection is served. */
START_TEST(test_input_budget) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.max_input_total = 256u << 10;
  start_with(&o);
  int w = connect_v2(), a = connect_v2();
  msg m = {0};
  m_u64(m_str(m_u8(&m, 1), "/huge"), 1u << 20); /* SET of 1 MiB: only the header is sent */
  m_mem(&m, "xx", 2);
  send_msg(a, &m);
  expect_eof(a);
  close(a);
  ping(w, 1);
  until_connections(1);
  ck_assert_uint_eq(stats().input_bytes, 0);
  close(w);
  m_free(&m);
}
END_TEST

/* ---- wait budgets and the strangers' share of a turn (issue 41, finding 1) ------------------------ */

/* The server's log lines (stderr) while a test case runs: capture_start, then capture_end into buf. */
static int saved_stderr = -1;
static FILE *capture_file;
static void capture_start(void) {
  fflush(stderr);
  capture_file = tmpfile();
  ck_assert_ptr_nonnull(capture_file);
  saved_stderr = dup(2);
  ck_assert_int_ge(saved_stderr, 0);
  ck_assert_int_ge(dup2(fileno(capture_file), 2), 0);
  trun_log_set_level(TRUN_LOG_WARN);
}
static void capture_end(char *buf, size_t len) {
  trun_log_set_level(TRUN_LOG_ERROR);
  fflush(stderr);
  ck_assert_int_ge(dup2(saved_stderr, 2), 0);
  close(saved_stderr);
  rewind(capture_file);
  size_t n = fread(buf, 1, len - 1, capture_file);
  buf[n] = '\0';
  fclose(capture_file);
}

/* WAIT of n fresh keys "<prefix>NNNN" (4 digits: each key is strlen(prefix) + 4 bytes). */
static void send_wait_many(int fd, const char *prefix, int n) {
  msg m = {0};
  m_u64(m_u8(&m, 6), (uint64_t)n);
  char k[64];
  for (int i = 0; i < n; i++) {
    snprintf(k, sizeof(k), "%s%04d", prefix, i);
    m_str(&m, k);
  }
  send_msg(fd, &m);
  m_free(&m);
}

static void agent_token_on(trun_server *s, void *arg) {
  (void)arg;
  ck_assert_int_eq(trun_server_agent_token(s, OWN_TOKEN), 0);
}

/* A connection without the agent token that WAITs on more keys than its budget is closed with a line that
 * names the budget, costs nothing afterwards (wait_bytes 0, no waiter), and the others are served: a
 * connection within its budget waits and is woken as before, an agent's connection is not budgeted. The
 * total budget closes the connection whose WAIT would exceed it and keeps the others' registrations. */
START_TEST(test_wait_budgets) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  const size_t cost = TRUN_SERVER_WAIT_REG_COST + 6; /* "/bNNNN" */
  o.max_wait_conn = 8 * cost;
  o.max_wait_total = 12 * cost;
  start_with(&o);
  unit_server_call(&us, agent_token_on, NULL);
  char log[8192];
  int w = connect_v2(), a = connect_v2(), b = connect_v2(), ag = connect_agent();
  capture_start();
  send_wait_many(a, "/a", 9); /* over 8 */
  expect_eof(a);
  close(a);
  ping(w, 1);
  capture_end(log, sizeof(log));
  ck_assert_msg(strstr(log, "WAIT on 9 keys") && strstr(log, "over the connection's wait budget of"),
                "log: %s", log);
  trun_server_stats st = stats();
  ck_assert_uint_eq(st.over_budget, 1);
  ck_assert_uint_eq(st.wait_bytes, 0);
  ck_assert_uint_eq(st.waiting, 0);
  /* Within the budget: registered (8 keys), then woken by SETs. */
  send_wait_many(w, "/b", 8);
  until_waiting(1);
  ck_assert_uint_eq(stats().wait_bytes, 8 * cost);
  /* The total: 8 registered, b's 5 more would make 13 > 12: b is closed, w keeps its registrations. */
  capture_start();
  send_wait_many(b, "/c", 5);
  expect_eof(b);
  close(b);
  capture_end(log, sizeof(log));
  ck_assert_msg(strstr(log, "the store's wait budget of") != NULL, "log: %s", log);
  ck_assert_uint_eq(stats().over_budget, 2);
  ck_assert_uint_eq(stats().wait_bytes, 8 * cost);
  /* The agent is held to neither: 20 keys while the total is nearly spent. */
  send_wait_many(ag, "/d", 20);
  until_waiting(2);
  ck_assert_uint_eq(stats().wait_bytes, 28 * cost);
  msg m = {0};
  send_msg(ag, m_u8(&m, 12)); /* CANCEL_WAIT */
  expect_hex(ag, "01");
  for (int i = 0; i < 8; i++) {
    char k[16];
    snprintf(k, sizeof(k), "/b%04d", i);
    send_msg(ag, m_str(m_str(m_u8(&m, 1), k), "v"));
  }
  expect_hex(w, "00");
  ping(w, 2);
  ping(ag, 3);
  st = stats();
  ck_assert_uint_eq(st.wait_bytes, 0);
  ck_assert_uint_eq(st.waiting, 0);
  close(w);
  close(ag);
  m_free(&m);
}
END_TEST

/* With a share of one unit per turn, a stranger's 200 pipelined PINGs are put off turn after turn and all
 * answered in order; an agent's 200 are never put off. */
START_TEST(test_turn_work_defers_strangers) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.turn_work = 1;
  start_with(&o);
  unit_server_call(&us, agent_token_on, NULL);
  int a = connect_v2(), ag = connect_agent();
  msg m = {0}, want = {0};
  for (uint32_t i = 0; i < 200; i++) {
    m_u32(m_u8(&m, 0x0d), i);
    m_u32(&want, i);
  }
  msg m2 = {0}, want2 = {0};
  m_mem(&m2, m.b, m.n);
  m_mem(&want2, want.b, want.n);
  uint64_t d0 = stats().deferred;
  send_msg(ag, &m);
  expect(ag, &want);
  ck_assert_uint_eq(stats().deferred, d0);
  send_msg(a, &m2);
  expect(a, &want2);
  ck_assert_uint_ge(stats().deferred, d0 + 1);
  ping(a, 7);
  close(a);
  close(ag);
  m_free(&m);
  m_free(&want);
  m_free(&m2);
  m_free(&want2);
}
END_TEST

/* The server's loop, stopped (blocked in a call) until the test writes a byte to the pipe: what the test
 * does meanwhile (connects, closes) all waits in the kernel for the loop's next turn. */
typedef struct {
  int pipe[2];
  pthread_t th;
} loop_hold;

static void hold_fn(trun_server *s, void *arg) {
  (void)s;
  char b;
  ck_assert_int_eq(read(((loop_hold *)arg)->pipe[0], &b, 1), 1);
}

static void *hold_thread(void *arg) {
  unit_server_call(&us, hold_fn, arg);
  return NULL;
}

static void hold_loop(loop_hold *h) {
  ck_assert_int_eq(pipe(h->pipe), 0);
  ck_assert_int_eq(pthread_create(&h->th, NULL, hold_thread, h), 0);
}

static void release_loop(loop_hold *h) {
  ck_assert_int_eq(write(h->pipe[1], "x", 1), 1);
  pthread_join(h->th, NULL);
  close(h->pipe[0]);
  close(h->pipe[1]);
}

/* With one connection a turn, 40 connects queued while the loop was busy are accepted over later turns (the
 * rest left in the listen queue, none lost), and 40 clients that leave at once are closed over later turns;
 * the agent's PINGs sent meanwhile are answered, and its connection stays. */
START_TEST(test_turn_conns_spreads_accepts_and_ends) {
  enum { N = 40 };
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.turn_conns = 1;
  start_with(&o);
  unit_server_call(&us, agent_token_on, NULL);
  int ag = connect_agent(), fd[N];
  until_connections(1);
  loop_hold h;
  hold_loop(&h);
  for (int i = 0; i < N; i++) ck_assert_int_ge(fd[i] = unit_connect(port), 0); /* queued by the kernel */
  msg m = {0};
  send_msg(ag, m_u32(m_u8(&m, 0x0d), 11));
  release_loop(&h);
  expect(ag, m_u32(&m, 11));
  until_connections(1 + N);
  trun_server_stats st = stats();
  ck_assert_uint_ge(st.accepts_put_off, 1);
  ck_assert_uint_eq(st.refused, 0);
  hold_loop(&h);
  for (int i = 0; i < N; i++) close(fd[i]);
  send_msg(ag, m_u32(m_u8(&m, 0x0d), 12));
  release_loop(&h);
  expect(ag, m_u32(&m, 12));
  until_connections(1);
  ck_assert_uint_ge(stats().ends_put_off, 1);
  ping(ag, 13);
  close(ag);
  m_free(&m);
}
END_TEST

/* ---- threads ----------------------------------------------------------------------------------- */

/* 64 connections over 4 loops: one SET wakes every waiter whatever its thread, and 3,200 pipelined ADDs
 * from all of them on one key each get a distinct result (the key space is one, updated atomically). */
START_TEST(test_threads_cross_wake_and_add) {
  enum { N = 64, ADDS = 50 };
  int fd[N];
  msg m = {0};
  for (int i = 0; i < N; i++) fd[i] = connect_v2();
  for (int i = 0; i < N; i++) send_msg(fd[i], m_str(m_u64(m_u8(&m, 6), 1), "/go"));
  until_waiting(N);
  int s = connect_v2();
  send_msg(s, m_str(m_str(m_u8(&m, 1), "/go"), "now"));
  for (int i = 0; i < N; i++) expect_hex(fd[i], "00");
  until_waiting(0);
  for (int r = 0; r < ADDS; r++)
    for (int i = 0; i < N; i++) send_msg(fd[i], m_u64(m_str(m_u8(&m, 4), "/n"), 1));
  static uint8_t seen[N * ADDS + 1];
  memset(seen, 0, sizeof(seen));
  for (int i = 0; i < N; i++)
    for (int r = 0; r < ADDS; r++) {
      uint8_t b[8];
      ck_assert_int_eq(unit_recv(fd[i], b, 8), 0);
      uint64_t v = 0;
      for (int k = 7; k >= 0; k--) v = v << 8 | b[k];
      ck_assert_msg(v >= 1 && v <= N * ADDS, "ADD returned %llu", (unsigned long long)v);
      ck_assert_msg(!seen[v], "ADD result %llu seen twice", (unsigned long long)v);
      seen[v] = 1;
    }
  send_msg(s, m_str(m_u8(&m, 3), "/n"));
  expect(s, m_str(&m, "3200"));
  /* CANCEL_WAIT right after a wake from another thread still reads STOP_WAITING first. */
  for (int round = 0; round < 20; round++) {
    char key[32];
    snprintf(key, sizeof(key), "/c%d", round);
    send_msg(fd[round], m_str(m_u64(m_u8(&m, 6), 1), key));
    until_waiting(1);
    send_msg(fd[round + 1], m_str(m_str(m_u8(&m, 1), key), "x"));
    send_msg(fd[round], m_u8(&m, 12));
    uint8_t b[2];
    ck_assert_int_eq(unit_recv(fd[round], b, 1), 0);
    if (b[0] == 0x00) { /* woken before the cancel: 00 then 01 */
      ck_assert_int_eq(unit_recv(fd[round], b + 1, 1), 0);
      ck_assert_int_eq(b[1], 0x01);
    } else {
      ck_assert_int_eq(b[0], 0x01); /* cancelled first: the SET sends nothing later */
    }
    ping(fd[round], 7);
    ping(fd[round + 1], 8);
    until_waiting(0);
  }
  for (int i = 0; i < N; i++) close(fd[i]);
  close(s);
  until_connections(0);
  m_free(&m);
}
END_TEST

/* The cases of each fixture, also run again with four loops. */
static void add_cases(TCase *tc, const TTest *const *cases, size_t n) {
  for (size_t i = 0; i < n; i++) tcase_add_test(tc, cases[i]);
}
#define ADD_CASES(tc, list) add_cases(tc, list, sizeof(list) / sizeof(list[0]))

static Suite *server_suite(void) {
  const TTest *const replay[] = {test_replay_211_libuv,
                                 test_replay_26_classic,
                                 test_replay_113_a,
                                 test_replay_113_b,
                                 test_handshake_and_legacy_same_port,
                                 test_watch_key,
                                 test_op_replies};
  const TTest *const wait[] = {test_wait_answered_later,
                               test_cancel_wait,
                               test_disconnect_while_waiting,
                               test_barrier,
                               test_queue_push_wakes_one,
                               test_watcher_gone,
                               test_waiter_gone,
                               test_owned_key_gone,
                               test_owners_reset_with_reply_pending};
  const TTest *const input[] = {test_bad_input_closes, test_add_non_integer,
                                test_bytewise,         test_pipelined,
                                test_large_values,     test_backpressure_holds_requests};
  Suite *s = suite_create("server");
  TCase *tc = tcase_create("replay");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  ADD_CASES(tc, replay);
  suite_add_tcase(s, tc);
  tc = tcase_create("opts");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_legacy21);
  tcase_add_test(tc, test_limits_close);
  tcase_add_test(tc, test_reply_cap);
  tcase_add_test(tc, test_input_budget);
  tcase_add_test(tc, test_wait_budgets);
  tcase_add_test(tc, test_turn_work_defers_strangers);
  tcase_add_test(tc, test_turn_conns_spreads_accepts_and_ends);
  tcase_add_loop_test(tc, test_watcher_slow_consumer, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("wait");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  ADD_CASES(tc, wait);
  suite_add_tcase(s, tc);
  tc = tcase_create("input");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  ADD_CASES(tc, input);
  suite_add_tcase(s, tc);
  /* The same cases with four loops: every connection of a test may be on another thread. */
  tc = tcase_create("threads");
  tcase_add_checked_fixture(tc, setup_threads, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_threads_cross_wake_and_add);
  ADD_CASES(tc, replay);
  ADD_CASES(tc, wait);
  ADD_CASES(tc, input);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  trun_log_set_level(TRUN_LOG_ERROR); /* the server warns about every connection these tests break */
  return unit_run(server_suite());
}
