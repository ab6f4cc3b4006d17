/* The bounded TCP relay (agent/proc/relay.h) on a real loop and loopback sockets, everything in this thread
 * (non-blocking clients and targets pumped between turns of the loop): bytes both ways in order; a refused
 * target skipped for the next; no target, a client beyond max_clients and new clients after the targets
 * are gone closed at once while joined pairs keep theirs; half-closes both ways; a target that never
 * reads holds its client back within max_pending (nothing lost once it reads); resets from either side;
 * many clients interleaved; the relay closed with clients connected (ASan's run checks nothing leaks). */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>

#include "portheld.h"
#include "relay.h"
#include "unit.h"

enum { T_ECHO, T_STALL, T_REPLY }; /* echo back; accept, never read; read to EOF, answer, close */

typedef struct {
  int fd;
  unsigned char *out; /* to write back */
  size_t outn, outcap;
  size_t in;    /* bytes read */
  uint32_t sum; /* of them, position-weighted: order matters */
  int eof;      /* the client's side ended */
  int done;     /* the target closed its end */
} tconn;

typedef struct {
  int lfd, port, mode;
  tconn c[64];
  int n;
} target;

static uint32_t sum_add(uint32_t sum, size_t pos, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) sum = sum * 31u + (uint32_t)p[i] + (uint32_t)(pos + i);
  return sum;
}

static void target_open(target *t, int mode) {
  memset(t, 0, sizeof(*t));
  t->mode = mode;
  t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(t->lfd, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof(sin);
  ck_assert_int_eq(bind(t->lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
  ck_assert_int_eq(listen(t->lfd, 64), 0);
  ck_assert_int_eq(getsockname(t->lfd, (struct sockaddr *)&sin, &sl), 0);
  t->port = ntohs(sin.sin_port);
}

static void target_close(target *t) {
  for (int i = 0; i < t->n; i++) {
    if (t->c[i].fd >= 0 && !t->c[i].done) close(t->c[i].fd);
    free(t->c[i].out);
  }
  close(t->lfd);
}

static void put(tconn *c, const void *p, size_t n) {
  if (c->outn + n > c->outcap) {
    c->outcap = (c->outn + n) * 2;
    c->out = realloc(c->out, c->outcap);
    ck_assert_ptr_nonnull(c->out);
  }
  memcpy(c->out + c->outn, p, n);
  c->outn += n;
}

static void target_pump(target *t) {
  int fd;
  while (t->n < 64 && (fd = accept4(t->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
    t->c[t->n++] = (tconn){.fd = fd};
  for (int i = 0; i < t->n; i++) {
    tconn *c = &t->c[i];
    if (c->done) continue;
    unsigned char buf[65536];
    while (t->mode != T_STALL && !c->eof) {
      ssize_t k = read(c->fd, buf, sizeof(buf));
      if (k > 0) {
        c->sum = sum_add(c->sum, c->in, buf, (size_t)k);
        c->in += (size_t)k;
        if (t->mode == T_ECHO) put(c, buf, (size_t)k);
      } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
        c->eof = 1;
        if (t->mode == T_REPLY) {
          char ans[64];
          int m = snprintf(ans, sizeof(ans), "answer %zu", c->in);
          put(c, ans, (size_t)m);
        }
      } else {
        break;
      }
    }
    while (c->outn > 0) {
      ssize_t k = write(c->fd, c->out, c->outn);
      if (k <= 0) break;
      memmove(c->out, c->out + k, c->outn - (size_t)k);
      c->outn -= (size_t)k;
    }
    if (c->eof && c->outn == 0) {
      close(c->fd); /* the echo and the answer end as their client did */
      c->done = 1;
    }
  }
}

/* A client: a non-blocking loopback socket and what it has read. */
typedef struct {
  int fd;
  unsigned char in[1 << 16];
  size_t n;
  int eof;
  uint32_t sum;
  size_t total;
} client;

static void client_open(client *c, int port) {
  memset(c, 0, sizeof(*c));
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(c->fd, 0);
  struct sockaddr_in sin = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int rc = connect(c->fd, (struct sockaddr *)&sin, sizeof(sin));
  ck_assert_msg(rc == 0 || errno == EINPROGRESS, "connect: %s", strerror(errno));
}

static void client_pump(client *c) {
  unsigned char buf[65536];
  while (!c->eof) {
    ssize_t k = read(c->fd, buf, sizeof(buf));
    if (k > 0) {
      c->sum = sum_add(c->sum, c->total, buf, (size_t)k);
      c->total += (size_t)k;
      size_t room = sizeof(c->in) - c->n, m = (size_t)k < room ? (size_t)k : room;
      memcpy(c->in + c->n, buf, m);
      c->n += m;
    } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
      c->eof = 1;
    } else {
      break;
    }
  }
}

static void client_send(client *c, const char *s) {
  ck_assert_int_eq(write(c->fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* The world one test runs: the loop, the relay, up to two targets and some clients. */
typedef struct {
  uv_loop_t loop;
  trun_relay *r;
  target *t[2];
  client *c[32];
  int nc;
} world;

static void world_turn(world *w) {
  uv_run(&w->loop, UV_RUN_NOWAIT);
  for (int i = 0; i < 2; i++)
    if (w->t[i]) target_pump(w->t[i]);
  for (int i = 0; i < w->nc; i++) client_pump(w->c[i]);
}

/* Turns until cond holds: a fail-safe bound of about 20 s, not a timed assertion. */
#define UNTIL(w, cond)                             \
  do {                                             \
    int ok_ = 0;                                   \
    for (int i_ = 0; i_ < 20000; i_++) {           \
      world_turn(w);                               \
      if (cond) {                                  \
        ok_ = 1;                                   \
        break;                                     \
      }                                            \
      poll(NULL, 0, 1);                            \
    }                                              \
    ck_assert_msg(ok_, "never came true: " #cond); \
  } while (0)

static int relay_port; /* the held port the relay listens on */
static int held_fd;

static void world_open(world *w, int max_clients, size_t max_pending) {
  memset(w, 0, sizeof(*w));
  ck_assert_int_eq(uv_loop_init(&w->loop), 0);
  unsigned port = 0;
  const char *step = NULL;
  held_fd = trun_port_hold(&port, &step);
  ck_assert_msg(held_fd >= 0, "trun_port_hold: %s", step);
  relay_port = (int)port;
  trun_relay_limits lim = {.max_clients = max_clients, .max_pending = max_pending};
  ck_assert_int_eq(trun_relay_open(&w->loop, held_fd, &lim, &w->r, &step), 0);
}

static void world_targets(world *w, const int *ports, int n) {
  char addrs[4][64];
  for (int i = 0; i < n; i++) snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%d", ports[i]);
  ck_assert_int_eq(trun_relay_targets(w->r, (const char(*)[64])addrs, n), n);
}

/* A world whose relay has one target of the given mode. */
static void world_with_target(world *w, target *t, int mode, int max_clients, size_t max_pending) {
  world_open(w, max_clients, max_pending);
  target_open(t, mode);
  w->t[0] = t;
  world_targets(w, &t->port, 1);
}

static client *world_client(world *w) {
  client *c = calloc(1, sizeof(*c));
  ck_assert_ptr_nonnull(c);
  client_open(c, relay_port);
  w->c[w->nc++] = c;
  return c;
}

static trun_relay_stats stats(world *w) {
  trun_relay_stats st;
  trun_relay_stats_get(w->r, &st);
  return st;
}

static void world_close(world *w) {
  trun_relay_close(w->r);
  uv_run(&w->loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&w->loop), 0);
  for (int i = 0; i < w->nc; i++) {
    close(w->c[i]->fd);
    free(w->c[i]);
  }
  close(held_fd);
}

static void world_end(world *w, target *t) {
  world_close(w);
  target_close(t);
}

START_TEST(test_both_ways) {
  world w;
  target t;
  world_with_target(&w, &t, T_ECHO, 8, 1 << 16);
  client *c = world_client(&w);
  client_send(c, "CLIENT PROTOCOL 2\n");
  UNTIL(&w, c->n == 18);
  ck_assert_int_eq(memcmp(c->in, "CLIENT PROTOCOL 2\n", 18), 0);
  client_send(c, "VERBOSE STATUS\n");
  UNTIL(&w, c->n == 33);
  ck_assert_int_eq(memcmp(c->in + 18, "VERBOSE STATUS\n", 15), 0);
  ck_assert_int_eq(stats(&w).clients, 1);
  ck_assert_int_eq(stats(&w).accepted, 1);
  close(c->fd); /* the client goes: the target sees its EOF, the pair closes */
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  UNTIL(&w, t.n == 1 && t.c[0].done && stats(&w).clients == 0);
  ck_assert_int_eq(stats(&w).pending, 0);
  world_end(&w, &t);
}
END_TEST

START_TEST(test_refused_then_next) {
  world w;
  target t;
  world_open(&w, 8, 1 << 16);
  target_open(&t, T_ECHO);
  w.t[0] = &t;
  unsigned gone = 0;
  const char *step;
  int gone_fd = trun_port_hold(&gone, &step); /* bound, never listening: a worker gone, refused at once */
  ck_assert_int_ge(gone_fd, 0);
  int ports[2] = {(int)gone, t.port};
  world_targets(&w, ports, 2);
  client *c = world_client(&w);
  client_send(c, "ping");
  UNTIL(&w, c->n == 4);
  ck_assert_int_eq(memcmp(c->in, "ping", 4), 0);
  ck_assert_int_eq(stats(&w).no_target, 0);
  /* only the refusing one: the client is closed, counted */
  world_targets(&w, ports, 1);
  client *d = world_client(&w);
  UNTIL(&w, d->eof);
  ck_assert_int_eq(d->total, 0);
  ck_assert_int_eq(stats(&w).no_target, 1);
  /* none at all: the same; the pair joined before keeps its target */
  world_targets(&w, ports, 0);
  client *e = world_client(&w);
  UNTIL(&w, e->eof);
  ck_assert_int_eq(stats(&w).no_target, 2);
  client_send(c, "pong");
  UNTIL(&w, c->n == 8);
  ck_assert_int_eq(memcmp(c->in + 4, "pong", 4), 0);
  ck_assert(!c->eof);
  ck_assert_int_eq(stats(&w).clients, 1);
  close(gone_fd);
  world_end(&w, &t);
}
END_TEST

START_TEST(test_bad_targets_left_out) {
  world w;
  world_open(&w, 8, 1 << 16);
  char bad[][64] = {"",
                    ":80",
                    "127.0.0.1",
                    "127.0.0.1:",
                    "127.0.0.1:0",
                    "127.0.0.1:65536",
                    "127.0.0.1:+80",
                    "127.0.0.1:80x",
                    "localhost:80",
                    "[::1]:80",
                    "1.2.3.4.5:80",
                    "127.0.0.1: 80"};
  int n = (int)(sizeof(bad) / sizeof(bad[0]));
  ck_assert_int_eq(trun_relay_targets(w.r, (const char(*)[64])bad, n), 0);
  char many[12][64];
  for (int i = 0; i < 12; i++) snprintf(many[i], sizeof(many[i]), "127.0.0.1:%d", 1000 + i);
  ck_assert_int_eq(trun_relay_targets(w.r, (const char(*)[64])many, 12), TRUN_RELAY_MAX_TARGETS);
  world_close(&w);
}
END_TEST

START_TEST(test_half_close) {
  world w;
  target t;
  world_with_target(&w, &t, T_REPLY, 8, 1 << 16);
  client *c = world_client(&w);
  client_send(c, "a question in two ");
  UNTIL(&w, t.n == 1 && t.c[0].in == 18);
  client_send(c, "parts");
  ck_assert_int_eq(shutdown(c->fd, SHUT_WR), 0); /* the client is done asking: the target answers */
  UNTIL(&w, c->eof);
  ck_assert_int_eq(c->n, strlen("answer 23"));
  ck_assert_int_eq(memcmp(c->in, "answer 23", c->n), 0);
  UNTIL(&w, stats(&w).clients == 0);
  world_end(&w, &t);
}
END_TEST

START_TEST(test_max_clients) {
  world w;
  target t;
  world_with_target(&w, &t, T_ECHO, 4, 1 << 16);
  client *c[4];
  for (int i = 0; i < 4; i++) {
    c[i] = world_client(&w);
    client_send(c[i], "x");
    UNTIL(&w, c[i]->n == 1);
  }
  client *extra = world_client(&w);
  UNTIL(&w, extra->eof);
  ck_assert_int_eq(extra->total, 0);
  ck_assert_int_eq(stats(&w).turned_away, 1);
  for (int i = 0; i < 4; i++) client_send(c[i], "y");
  UNTIL(&w, c[0]->n == 2 && c[1]->n == 2 && c[2]->n == 2 && c[3]->n == 2);
  /* one goes: there is room again */
  close(c[0]->fd);
  c[0]->fd = socket(AF_INET, SOCK_STREAM, 0);
  UNTIL(&w, stats(&w).clients == 3);
  client *next = world_client(&w);
  client_send(next, "z");
  UNTIL(&w, next->n == 1);
  ck_assert_int_eq(stats(&w).turned_away, 1);
  world_end(&w, &t);
}
END_TEST

/* A target that never reads: the client's writes stop being taken, the relay holds at most max_pending plus
 * one read toward it; once the target reads, every byte arrives in order. */
START_TEST(test_backpressure) {
  world w;
  target t;
  const size_t max_pending = 1 << 16;
  world_with_target(&w, &t, T_STALL, 8, max_pending);
  client *c = world_client(&w);
  unsigned char chunk[65536];
  for (size_t i = 0; i < sizeof(chunk); i++) chunk[i] = (unsigned char)(i * 7 + 3);
  size_t sent = 0, peak = 0;
  uint32_t sum = 0;
  int stalled = 0;
  for (int turn = 0; turn < 20000 && stalled < 300; turn++) {
    ssize_t k = write(c->fd, chunk, sizeof(chunk));
    if (k > 0) {
      sum = sum_add(sum, sent, chunk, (size_t)k);
      sent += (size_t)k;
      stalled = 0;
    } else {
      ck_assert_msg(errno == EAGAIN, "write: %s", strerror(errno));
      stalled++;
    }
    world_turn(&w);
    size_t p = stats(&w).pending;
    if (p > peak) peak = p;
    ck_assert_msg(sent < (size_t)256 << 20, "256 MiB taken from a client whose target never reads");
  }
  ck_assert_msg(stalled >= 300, "the client's writes were never held back");
  ck_assert_msg(peak <= max_pending + 65536, "the relay queued %zu bytes (limit %zu + one read)", peak,
                max_pending);
  /* the target reads now: everything the client wrote arrives, in order */
  t.mode = T_ECHO;
  w.t[0] = NULL;
  for (int turn = 0; turn < 200000 && !(t.n == 1 && t.c[0].in == sent); turn++) {
    uv_run(&w.loop, UV_RUN_NOWAIT);
    int fd;
    while (t.n < 1 && (fd = accept4(t.lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) t.c[t.n++] = (tconn){.fd = fd};
    if (t.n == 1) { /* read without echoing: the client does not read here */
      unsigned char buf[65536];
      ssize_t k;
      while ((k = read(t.c[0].fd, buf, sizeof(buf))) > 0) {
        t.c[0].sum = sum_add(t.c[0].sum, t.c[0].in, buf, (size_t)k);
        t.c[0].in += (size_t)k;
      }
    }
    if (turn % 64 == 63) poll(NULL, 0, 1);
  }
  ck_assert_int_eq(t.n, 1);
  ck_assert_msg(t.c[0].in == sent, "the target got %zu of %zu bytes", t.c[0].in, sent);
  ck_assert_uint_eq(t.c[0].sum, sum);
  world_end(&w, &t);
}
END_TEST

static void reset_close(int fd) {
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
  close(fd);
}

START_TEST(test_resets) {
  world w;
  target t;
  world_with_target(&w, &t, T_ECHO, 8, 1 << 16);
  /* the client resets in the middle of a stream */
  client *c = world_client(&w);
  client_send(c, "half a requ");
  UNTIL(&w, c->n == 11);
  reset_close(c->fd);
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  UNTIL(&w, stats(&w).clients == 0 && t.c[0].done);
  /* the target resets: its client sees the end */
  client *d = world_client(&w);
  client_send(d, "q");
  UNTIL(&w, d->n == 1);
  reset_close(t.c[1].fd);
  t.c[1].done = 1;
  UNTIL(&w, d->eof);
  UNTIL(&w, stats(&w).clients == 0);
  /* a client that connects and resets before anything: nothing stays */
  for (int i = 0; i < 20; i++) {
    client *e = world_client(&w);
    reset_close(e->fd);
    e->fd = socket(AF_INET, SOCK_STREAM, 0);
  }
  UNTIL(&w, stats(&w).clients == 0 && stats(&w).accepted + stats(&w).turned_away >= 2);
  ck_assert_int_eq(stats(&w).pending, 0);
  world_end(&w, &t);
}
END_TEST

/* Sixteen clients, each its own pattern in chunks, interleaved: each gets back exactly its own. */
START_TEST(test_interleaved) {
  world w;
  target t;
  world_with_target(&w, &t, T_ECHO, 16, 1 << 14);
  enum { N = 16, CHUNKS = 40, CHUNK = 1000 };
  client *c[N];
  uint32_t want[N] = {0};
  for (int i = 0; i < N; i++) c[i] = world_client(&w);
  for (int k = 0; k < CHUNKS; k++) {
    for (int i = 0; i < N; i++) {
      unsigned char b[CHUNK];
      for (int j = 0; j < CHUNK; j++) b[j] = (unsigned char)(i * 131 + k * 17 + j);
      want[i] = sum_add(want[i], (size_t)k * CHUNK, b, CHUNK);
      size_t off = 0;
      while (off < CHUNK) {
        ssize_t m = write(c[i]->fd, b + off, CHUNK - off);
        if (m > 0)
          off += (size_t)m;
        else
          world_turn(&w);
      }
    }
    world_turn(&w);
  }
  int all = 0;
  for (int turn = 0; turn < 20000 && !all; turn++) {
    world_turn(&w);
    all = 1;
    for (int i = 0; i < N; i++) all &= c[i]->total == (size_t)CHUNKS * CHUNK;
    if (!all) poll(NULL, 0, 1);
  }
  for (int i = 0; i < N; i++) {
    ck_assert_msg(c[i]->total == (size_t)CHUNKS * CHUNK, "client %d got %zu bytes", i, c[i]->total);
    ck_assert_msg(c[i]->sum == want[i], "client %d got another's bytes or out of order", i);
  }
  ck_assert_int_eq(stats(&w).accepted, N);
  world_end(&w, &t);
}
END_TEST

START_TEST(test_close_with_clients) {
  world w;
  target t;
  world_with_target(&w, &t, T_STALL, 8, 1 << 16);
  client *c[3];
  for (int i = 0; i < 3; i++) c[i] = world_client(&w);
  UNTIL(&w, stats(&w).accepted == 3);
  unsigned char big[65536] = {0};
  for (int i = 0; i < 8; i++) (void)!write(c[0]->fd, big, sizeof(big)); /* queued toward a stalled target */
  for (int i = 0; i < 100; i++) world_turn(&w);
  trun_relay_close(w.r);
  uv_run(&w.loop, UV_RUN_DEFAULT); /* everything freed: the loop has nothing left */
  ck_assert_int_eq(uv_loop_close(&w.loop), 0);
  for (int i = 0; i < 3; i++) {
    for (int k = 0; k < 2000 && !c[i]->eof; k++) {
      client_pump(c[i]);
      poll(NULL, 0, 1);
    }
    ck_assert_msg(c[i]->eof, "client %d was not closed with the relay", i);
    close(c[i]->fd);
    free(c[i]);
  }
  /* the held port is the caller's still: nothing listens on it now (refused), and a relay opened again on the
   * same socket serves on the same port */
  client probe;
  client_open(&probe, relay_port);
  for (int k = 0; k < 2000 && !probe.eof; k++) {
    client_pump(&probe);
    poll(NULL, 0, 1);
  }
  ck_assert(probe.eof);
  ck_assert_int_eq(probe.total, 0);
  close(probe.fd);
  ck_assert_int_eq(uv_loop_init(&w.loop), 0);
  w.nc = 0;
  t.mode = T_ECHO;
  trun_relay_limits lim = {.max_clients = 8, .max_pending = 1 << 16};
  const char *step;
  ck_assert_int_eq(trun_relay_open(&w.loop, held_fd, &lim, &w.r, &step), 0);
  world_targets(&w, &t.port, 1);
  client *again = world_client(&w);
  client_send(again, "back");
  UNTIL(&w, again->n == 4);
  ck_assert_int_eq(memcmp(again->in, "back", 4), 0);
  world_end(&w, &t);
}
END_TEST

static Suite *relay_suite(void) {
  Suite *s = suite_create("relay");
  TCase *tc = tcase_create("relay");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_both_ways);
  tcase_add_test(tc, test_refused_then_next);
  tcase_add_test(tc, test_bad_targets_left_out);
  tcase_add_test(tc, test_half_close);
  tcase_add_test(tc, test_max_clients);
  tcase_add_test(tc, test_backpressure);
  tcase_add_test(tc, test_resets);
  tcase_add_test(tc, test_interleaved);
  tcase_add_test(tc, test_close_with_clients);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  return unit_run(relay_suite());
}
