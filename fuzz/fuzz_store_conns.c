/* Stateful libFuzzer target for the store server: the real server (store/server*.c) on a libuv loop in this
 * process, driven over loopback TCP by up to NCONN clients whose actions the input decodes: connect (either
 * wire generation, from one of four loopback addresses), queue a request (valid ones of every kind, or raw
 * bytes), send part of what is queued, read part of what the server sent, reset, close gracefully, and
 * turn the access rules on or off (the clients from 127.0.0.3 and .4 are then refused). A gone callback
 * (liveness keys, as the rendezvous uses them) writes "/end" when an agent's connection (connect's argument
 * bit 3: it presents the job's token; bit 4: a wrong one, and the server closes it) that owned a
 * "/r/alive/<n>" key ends, which wakes the waiters of "/end" from whatever path closed it. Small output and
 * memory limits make back-pressure, reply caps and input budgets reachable with small values. Waiter-heavy
 * requests (issue 41): a WAIT whose argument has bit 3 set names 16 to 128 fresh keys ("/f<i>", or
 * "/f<i>" of a range that other connections name too: waits across connections), so that, with the small
 * wait budgets, a connection's own and the store's total budget are spent and connections are closed for
 * them mid-interleaving; CANCEL_WAIT is one of the ops. The agents' connections are not budgeted.
 *
 * Input: [config][actions...]
 *   config bits 0-2: max_pending_out = 512 << b; bit 2 also: strangers get 24 units of work a loop turn
 *          (turn_work: their requests are put off to later turns), and one connection is accepted and one
 *          stranger's end closed a turn (turn_conns: the rest wait in the listen queue, or unread, for later
 *          turns); bit 3: legacy numbering 2.1 (else
 *          1.13); bit 4: small input limits (64 KiB a connection, 256 KiB in all), a 256 KiB reply cap and
 *          small wait budgets (40 registrations of a short key a connection, 100 in all), and with bit 0
 *          one connection an address and one more on probation (PING or the token first; a newcomer
 *          evicts it); bit 5: two loops
 *          (connections dealt over the caller's loop and a thread of the server's: wake-ups and owners'
 *          ends cross threads; such runs are only as deterministic as that thread); bits 6-7:
 *          max_value = 1 KiB << (3 * b)
 *   action byte a: kind = a & 7, connection = (a >> 3) % NCONN, then the kind's argument bytes.
 * The loop runs without blocking after every action, so a one-loop run is deterministic. After the last
 * action every client resets; the server must then hold no connection and no waiter, answer a new client's
 * PING, and close cleanly (ASan/LSan: no bad access, no leak). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "buf.h"
#include "client.h"
#include "codec.h"
#include "fuzz_check.h"
#include "log.h"
#include "server.h"
#include "server_int.h" /* the key space behind the server, for the invariants */

#define NCONN 4
#define FUZZ_TOKEN "fuzz-job-agent-token-0123"

typedef struct {
  int fd;       /* -1: no connection in this slot */
  trun_gen gen; /* the numbering this client speaks */
  trun_buf out; /* bytes queued, not yet sent */
} fclient;

typedef struct {
  const uint8_t *p;
  size_t n;
} input;

static uv_loop_t g_loop;
static int g_loop_ready;
static uint8_t g_val[1 << 17];
static uint8_t g_sink[1 << 16];
static const fclient *g_clients; /* the run's client array: a client's index names its fresh keys */

static const char *const g_keys[] = {"/a", "/b", "/end", "/r/alive/0", "/r/alive/1", "/big", "", "/q"};
static const size_t g_sizes[] = {0, 1, 9, 300, 4000, 40000, 70000, 1 << 17};

static int next(input *in) {
  if (in->n == 0) return -1;
  in->n--;
  return *in->p++;
}

static void on_gone(void *arg, trun_server *s, trun_slice key, trun_slice value, const char *peer) {
  (void)arg;
  (void)value;
  (void)peer;
  trun_kv_set(s->kv, (trun_slice){(const uint8_t *)"/end", 4}, key);
}

static void spin(void) {
  for (int i = 0; i < 4; i++) uv_run(&g_loop, UV_RUN_NOWAIT);
}

static void reset_fd(int fd) {
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd);
}

/* A non-blocking client with a small receive buffer (replies pile up in the server), from 127.0.0.src. */
static int dial(int port, int src) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int rcv = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)src - 1);
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
    reset_fd(fd);
    return -1;
  }
  return fd;
}

static void put_key(trun_buf *b, int sel) {
  const char *k = g_keys[sel & 7];
  trun_buf_append_str(b, k, strlen(k));
}

/* n keys "/f<i>" from first on: fresh ones (nobody sets them, except a SET of "/f0".."/f7" below). */
static void put_fresh(trun_buf *b, int first, int n) {
  char k[16];
  for (int i = 0; i < n; i++) {
    int len = snprintf(k, sizeof(k), "/f%d", first + i);
    trun_buf_append_str(b, k, (size_t)len);
  }
}

static void put_val(trun_buf *b, int sel) {
  size_t n = g_sizes[sel & 7];
  trun_buf_append_str(b, g_val, n);
}

/* Queues one well-formed request of the client's generation (ops it lacks are skipped). */
static void queue_request(fclient *c, input *in) {
  int a = next(in), b = next(in);
  if (a < 0 || b < 0) return;
  trun_op op = (trun_op)(1 + a % (TRUN_OP__COUNT - 1));
  trun_buf *o = &c->out;
  size_t start = o->len;
  if (trun_req_begin(o, c->gen, op) < 0) return;
  int n = 1 + (b >> 5); /* list length */
  switch (op) {
    case TRUN_OP_SET:
      if ((b & 7) == 7) { /* "/f0".."/f7": wakes the many-key waiters of the shared range */
        put_fresh(o, (b >> 3) & 7, 1);
        put_val(o, 1);
        break;
      }
      /* fall through */
    case TRUN_OP_APPEND:
    case TRUN_OP_QUEUE_PUSH:
      put_key(o, b);
      put_val(o, b >> 3);
      break;
    case TRUN_OP_COMPARE_SET:
      put_key(o, b);
      put_val(o, (b >> 3) & 1);
      put_val(o, b >> 4);
      break;
    case TRUN_OP_GET:
    case TRUN_OP_DELETE_KEY:
    case TRUN_OP_QUEUE_POP:
    case TRUN_OP_QUEUE_LEN:
    case TRUN_OP_WATCH_KEY: put_key(o, b); break;
    case TRUN_OP_ADD:
      put_key(o, b);
      trun_buf_append_u64(o, (uint64_t)(int64_t)((b >> 3) - 8));
      break;
    case TRUN_OP_BARRIER:
      put_key(o, b);
      trun_buf_append_u64(o, (uint64_t)(1 + (b >> 6)));
      break;
    case TRUN_OP_WAIT:
      if (b & 8) { /* many fresh keys: 16 << (b >> 6) of them, from 0 (shared) or from 1000 * client */
        int many = 16 << (b >> 6);
        trun_buf_append_u64(o, (uint64_t)many);
        put_fresh(o, (b & 4) ? 0 : 1000 * (1 + (int)(c - g_clients)), many);
        break;
      }
      /* fall through */
    case TRUN_OP_CHECK:
    case TRUN_OP_MULTI_GET:
      trun_buf_append_u64(o, (uint64_t)n);
      for (int i = 0; i < n; i++) put_key(o, (b & 16) ? b : b + i * 3); /* bit 4: one key n times */
      break;
    case TRUN_OP_MULTI_SET:
      trun_buf_append_u64(o, (uint64_t)n);
      for (int i = 0; i < n; i++) {
        put_key(o, b + i);
        put_val(o, (b >> 2) + i);
      }
      break;
    case TRUN_OP_PING: trun_buf_append_u32(o, (uint32_t)b * 0x01010101u); break;
    case TRUN_OP_VALIDATE: o->len = start; break;
    default: break;
  }
}

static void send_some(fclient *c, size_t max) {
  size_t n = c->out.len < max ? c->out.len : max;
  if (n == 0) return;
  ssize_t k = send(c->fd, c->out.data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k > 0) trun_buf_consume(&c->out, (size_t)k);
}

static void drop(fclient *c) {
  if (c->fd >= 0) reset_fd(c->fd);
  c->fd = -1;
  trun_buf_free(&c->out);
}

static void act(trun_server *s, fclient *cl, int legacy21, input *in) {
  int a = next(in);
  if (a < 0) return;
  fclient *c = &cl[(a >> 3) % NCONN];
  int kind = a & 7, arg;
  if (kind != 0 && kind != 7 && c->fd < 0) return;
  switch (kind) {
    case 0: /* connect: bit 0 V2 handshake, bits 1-2 source address */
      if (c->fd >= 0 || (arg = next(in)) < 0) return;
      c->fd = dial(trun_server_port(s), 1 + ((arg >> 1) & 3));
      if (c->fd < 0) return;
      if (arg & 1) {
        static const uint8_t hello[] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
        trun_buf_append(&c->out, hello, sizeof(hello));
        c->gen = TRUN_GEN_V2;
      } else {
        c->gen = legacy21 ? TRUN_GEN_LEGACY21 : TRUN_GEN_LEGACY113;
      }
      if (arg & 8) { /* an agent's connection: presents the token (bit 4: a wrong one, which closes it) */
        const char *key =
            (arg & 16) ? TRUN_STORE_TOKEN_KEY "not-the-fuzz-job-token" : TRUN_STORE_TOKEN_KEY FUZZ_TOKEN;
        if (trun_req_begin(&c->out, c->gen, TRUN_OP_CHECK) == 0) {
          trun_buf_append_u64(&c->out, 1);
          trun_buf_append_str(&c->out, key, strlen(key));
        }
      }
      break;
    case 1: queue_request(c, in); break;
    case 2: /* raw bytes: malformed or not */
      if ((arg = next(in)) < 0) return;
      for (int i = 0; i < (arg & 31) && in->n; i++) trun_buf_append_u8(&c->out, (uint8_t)next(in));
      break;
    case 3: /* send part of what is queued: 1..255 bytes, or everything */
      if ((arg = next(in)) < 0) return;
      send_some(c, arg ? (size_t)arg : SIZE_MAX);
      break;
    case 4: /* read part of the replies */
      if ((arg = next(in)) < 0) return;
      if (recv(c->fd, g_sink, (size_t)(arg + 1) * 256, MSG_DONTWAIT) < 0 && errno != EAGAIN) drop(c);
      break;
    case 5: drop(c); break;
    case 6: shutdown(c->fd, SHUT_WR); break; /* the server sees the end; the slot keeps the fd */
    case 7:
      if ((arg = next(in)) < 0) return;
      trun_server_allow_enforce(s, arg & 1);
      break;
  }
  spin();
}

static void on_closed(void *arg) { *(int *)arg = 1; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  if (!g_loop_ready) {
    trun_log_set_level(TRUN_LOG_ERROR); /* every broken connection would be logged */
    CHECK(uv_loop_init(&g_loop) == 0);
    for (size_t i = 0; i < sizeof(g_val); i++) g_val[i] = (uint8_t)(i * 7);
    g_loop_ready = 1;
  }
  input in = {data + 1, size - 1};
  uint8_t cfg = data[0];
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = 0;
  o.max_pending_out = (size_t)512 << (cfg & 7);
  o.legacy = (cfg & 8) ? TRUN_GEN_LEGACY21 : TRUN_GEN_LEGACY113;
  o.limits.max_value = (uint64_t)1024 << (3 * (cfg >> 6));
  o.limits.max_keys = 128; /* the many-key WAITs; the other lists name at most 8 */
  if (cfg & 4) {
    o.turn_work = 24;
    o.turn_conns = 1;
  }
  if (cfg & 16) {
    o.max_conn_memory = 64 * 1024;
    o.max_input_total = 256 * 1024;
    o.max_reply = 256 * 1024;
    o.max_wait_conn = 40 * (TRUN_SERVER_WAIT_REG_COST + 4);
    o.max_wait_total = 100 * (TRUN_SERVER_WAIT_REG_COST + 4);
    if (cfg & 1) { /* one connection an address, one more on probation: agents evict strangers */
      o.max_conns_per_peer = 1;
      o.peer_reserve = 1;
    }
  }
  if (cfg & 32) o.threads = 2;
  int wait_us = (cfg & 32) ? 1000 : 0; /* the other loop's thread: give it time to catch up */
  trun_server *s;
  if (trun_server_start(&g_loop, &o, &s) != 0) return 0; /* no port left: not the server's fault */
  CHECK(trun_server_own_keys(s, "/alive/", on_gone, NULL) == 0);
  CHECK(trun_server_agent_token(s, FUZZ_TOKEN) == 0); /* "/r/alive/<n>" is owned when an agent writes it */
  CHECK(trun_server_protect(s, "/r", NULL) == 0);
  CHECK(trun_server_allow(s, "127.0.0.1") == 0);
  CHECK(trun_server_allow(s, "127.0.0.2/32") == 0);
  fclient cl[NCONN];
  for (int i = 0; i < NCONN; i++) cl[i] = (fclient){.fd = -1};
  g_clients = cl;
  while (in.n) {
    act(s, cl, (cfg & 8) != 0, &in);
    if (wait_us) usleep((useconds_t)wait_us / 10);
  }
  for (int i = 0; i < NCONN; i++) drop(&cl[i]);
  trun_server_allow_enforce(s, 0);
  trun_server_stats st;
  for (int i = 0; i < (wait_us ? 5000 : 100); i++) {
    spin();
    trun_server_get_stats(s, &st);
    if (st.connections == 0 && st.waiting == 0 && st.wait_bytes == 0) break;
    if (wait_us) usleep((useconds_t)wait_us);
  }
  CHECK(st.connections == 0); /* every reset was noticed, whatever the connection was doing */
  CHECK(st.waiting == 0);
  CHECK(st.wait_bytes == 0); /* every registration given back, budgets included */
  CHECK(trun_kv_num_regs(s->kv) == 0);
  /* The server still answers: a V2 handshake and a PING. */
  int fd = dial(trun_server_port(s), 1);
  CHECK(fd >= 0);
  static const uint8_t ping[] = {0x00, 0xce, 0xf7, 0x85, 0x3c, 0x0d, 0x01, 0x02, 0x03, 0x04};
  CHECK(send(fd, ping, sizeof(ping), MSG_NOSIGNAL) == (ssize_t)sizeof(ping));
  uint8_t got[4];
  size_t have = 0;
  for (int i = 0; i < (wait_us ? 5000 : 100) && have < 4; i++) {
    spin();
    if (wait_us) usleep((useconds_t)wait_us);
    ssize_t k = recv(fd, got + have, 4 - have, MSG_DONTWAIT);
    if (k > 0) have += (size_t)k;
  }
  CHECK(have == 4 && memcmp(got, ping + 6, 4) == 0);
  reset_fd(fd);
  int closed = 0;
  trun_server_close(s, on_closed, &closed);
  uv_run(&g_loop, UV_RUN_DEFAULT);
  CHECK(closed);
  return 0;
}
