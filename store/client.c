/* Blocking TCPStore client: plain sockets and poll(), one request in flight, torch's algorithms (R1, R13, R14
 * in shared/spec/tcpstore-protocol.md). A failure that may leave unread reply bytes on the stream closes the
 * connection; later calls then return -ENOTCONN. */
#include "client.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

/* Longest value accepted in a reply; a larger length means the stream is out of step. */
#define CLIENT_MAX_REPLY (1ull << 34)
/* Most keys accepted in a LIST reply. */
#define CLIENT_MAX_LIST (1ull << 32)

struct trun_client {
  int fd;
  trun_client_opts o; /* host and key_prefix point at the copies below */
  char *host;
  char *prefix;
  size_t prefix_len;
  char *token;        /* opts.agent_token's copy, or NULL */
  int agent;          /* the server took the token */
  uint64_t rng;       /* this client's jitter and nonce source */
  trun_buf req;       /* the request being built */
  char where[300];    /* "host:port" for messages */
  char last_err[200]; /* why the last connect attempt failed */
};

void trun_client_opts_default(trun_client_opts *o) {
  memset(o, 0, sizeof(*o));
  o->host = "127.0.0.1";
  o->port = 29500;
  o->gen = TRUN_GEN_V2;
  o->timeout_ms = 300000;
  o->connect_timeout_ms = -1;
  o->backoff_initial_ms = 100;
  o->backoff_max_ms = 5000;
  o->key_prefix = "/";
}

/* ---- time and randomness ---------------------------------------------------------------------- */

/* Absolute deadline in ms, or -1 for none (ms < 0). */
/* The longest one VALIDATE/PING handshake may take before the attempt counts as failed (and is retried). */
#define TRUN_HANDSHAKE_MS 10000

static int64_t deadline_after(int ms) { return ms < 0 ? -1 : trun_mono_us() / 1000 + ms; }

/* poll() timeout until deadline: -1 for none, 0 when passed. */
static int remaining_ms(int64_t deadline) {
  if (deadline < 0) return -1;
  int64_t r = deadline - trun_mono_us() / 1000;
  if (r <= 0) return 0;
  return r > INT_MAX ? INT_MAX : (int)r;
}

static uint64_t rng_seed(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t z = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec * 1000000000ull ^ (uint64_t)ts.tv_nsec;
  z += 0x9E3779B97F4A7C15ull; /* splitmix64 finaliser: spreads nearby seeds */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z ? z : 0x853C49E6748FEA9Bull;
}

/* Next retry delay: cur +-50 % jitter, capped; then cur grows x1.5 up to the cap (torch's
 * ExponentialBackoffWithJitter). */
static int backoff_next(int64_t *cur, int max_ms, uint64_t *rng) {
  int64_t half = *cur / 2;
  int64_t delay = *cur - half + (half > 0 ? (int64_t)(trun_rng_next(rng) % (uint64_t)(2 * half + 1)) : 0);
  if (delay > max_ms) delay = max_ms;
  *cur = *cur * 3 / 2;
  if (*cur > max_ms) *cur = max_ms;
  if (*cur < 1) *cur = 1;
  return (int)delay;
}

/* ---- socket I/O ------------------------------------------------------------------------------- */

/* Waits for ev on fd until deadline: 0 ready (or error/hang-up pending: the next syscall reports it),
 * -ETIMEDOUT, or a negative errno from poll. */
static int io_wait(int fd, short ev, int64_t deadline) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = ev, .revents = 0};
    int n = poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return 0;
    if (n == 0) return -ETIMEDOUT;
    if (errno != EINTR) return -errno;
  }
}

static int send_all(int fd, const uint8_t *p, size_t n, int64_t deadline) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k >= 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    int rc = io_wait(fd, POLLOUT, deadline);
    if (rc < 0) return rc;
  }
  return 0;
}

/* Reads exactly n bytes; -ECONNRESET when the peer closes first. */
static int recv_all(int fd, uint8_t *p, size_t n, int64_t deadline) {
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    if (k == 0) return -ECONNRESET;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    int rc = io_wait(fd, POLLIN, deadline);
    if (rc < 0) return rc;
  }
  return 0;
}

static void close_fd(trun_client *c) {
  if (c->fd < 0) return;
  if (close(c->fd) < 0 && errno != EINTR)
    trun_warn("closing the connection to TCPStore %s: %s", c->where, strerror(errno));
  c->fd = -1;
}

/* ---- connect ---------------------------------------------------------------------------------- */

static int retryable(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EAGAIN:
    case EPIPE:
    case EPROTO:
    case EAFNOSUPPORT:
    case EADDRNOTAVAIL: return 1;
    default: return 0;
  }
}

/* Non-blocking connect to one address within deadline, then TCP_NODELAY; 0 and *out or negative errno. */
static int connect_addr(const struct addrinfo *ai, int64_t deadline, int *out) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int rc = 0;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
    if (errno != EINPROGRESS && errno != EINTR)
      rc = -errno;
    else if ((rc = io_wait(fd, POLLOUT, deadline)) == 0) {
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        rc = -errno;
      else
        rc = -err;
    }
  }
  int one = 1;
  if (rc == 0 && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) rc = -errno;
  if (rc < 0) {
    close(fd); /* the socket never carried data: nothing to report from close */
    return rc;
  }
  *out = fd;
  return 0;
}

/* VALIDATE + PING in one write, then the 4 echoed nonce bytes. */
static int handshake(trun_client *c, int fd, int64_t deadline) {
  uint8_t msg[10] = {0x00};
  uint32_t nonce = (uint32_t)trun_rng_next(&c->rng);
  trun_put_u32(msg + 1, TRUN_VALIDATE_MAGIC);
  msg[5] = (uint8_t)trun_proto_code(TRUN_GEN_V2, TRUN_OP_PING);
  trun_put_u32(msg + 6, nonce);
  int rc = send_all(fd, msg, sizeof(msg), deadline);
  uint8_t echo[4];
  if (rc == 0) rc = recv_all(fd, echo, sizeof(echo), deadline);
  if (rc == 0 && trun_get_u32(echo) != nonce) rc = -EPROTO;
  return rc;
}

/* Presents opts.agent_token on the new connection c->fd: a CHECK of TRUN_STORE_TOKEN_KEY + token. 0 (READY:
 * an agent here; NOT_READY: the server guards no key space), -EACCES when the server closed the connection
 * instead, or another negative errno. */
static int present_token(trun_client *c) {
  c->agent = 0;
  if (c->token == NULL) return 0;
  size_t kl = strlen(TRUN_STORE_TOKEN_KEY), tl = strlen(c->token);
  c->req.len = 0;
  int rc = trun_req_begin(&c->req, c->o.gen, TRUN_OP_CHECK);
  if (rc == 0) rc = trun_buf_append_u64(&c->req, 1);
  if (rc == 0) rc = trun_buf_append_u64(&c->req, kl + tl);
  if (rc == 0) rc = trun_buf_append(&c->req, TRUN_STORE_TOKEN_KEY, kl);
  if (rc == 0) rc = trun_buf_append(&c->req, c->token, tl);
  if (rc < 0) return rc;
  int64_t deadline = deadline_after(c->o.timeout_ms);
  uint8_t b = 0xff;
  rc = send_all(c->fd, c->req.data, c->req.len, deadline);
  if (rc == 0) rc = recv_all(c->fd, &b, 1, deadline);
  if (rc == -ECONNRESET || rc == -EPIPE) {
    trun_error(
        "TCPStore %s closed the connection when this agent presented its token: it is not the job's "
        "token (give every agent the same TRUN_RDZV_TOKEN or --rdzv-conf trun_token), or the store "
        "does not admit this host (--store-allow-peers)",
        c->where);
    return -EACCES;
  }
  if (rc < 0) {
    trun_error("TCPStore %s: presenting the agent token: %s", c->where, strerror(-rc));
    return rc;
  }
  if (b != TRUN_CHECK_READY && b != TRUN_CHECK_NOT_READY) {
    trun_error("TCPStore %s: presenting the agent token: the reply 0x%02x is neither READY nor NOT_READY",
               c->where, b);
    return -EPROTO;
  }
  c->agent = b == TRUN_CHECK_READY;
  return 0;
}

int trun_client_is_agent(const trun_client *c) { return c->agent; }

/* Tries every address of one family once (torch: IPv6 with v4-mapped first, then IPv4). */
static int connect_family(trun_client *c, int family, int64_t deadline, int *out) {
  struct addrinfo hints = {.ai_family = family, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  if (family == AF_INET6) hints.ai_flags |= AI_V4MAPPED | AI_ALL;
  char port[16];
  snprintf(port, sizeof(port), "%d", c->o.port);
  struct addrinfo *res = NULL;
  int g = getaddrinfo(c->host, port, &hints, &res);
  if (g != 0) {
    snprintf(c->last_err, sizeof(c->last_err), "cannot resolve '%s': %s", c->host,
             g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    if (c->o.on_connect_error)
      c->o.on_connect_error(c->o.on_connect_error_arg, TRUN_CONNECT_RESOLVE, EHOSTUNREACH, c->last_err);
    return -EHOSTUNREACH;
  }
  int rc = -EHOSTUNREACH;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = -1, stage = TRUN_CONNECT_TCP;
    rc = connect_addr(ai, deadline, &fd);
    if (rc == 0 && c->o.gen == TRUN_GEN_V2) {
      stage = TRUN_CONNECT_HANDSHAKE;
      /* A program that accepts and never answers (not a store) must not hold one attempt for the whole
       * connect time-out: each handshake gets at most TRUN_HANDSHAKE_MS, then the failure is told. */
      int64_t hs = deadline_after(TRUN_HANDSHAKE_MS);
      rc = handshake(c, fd, deadline >= 0 && deadline < hs ? deadline : hs);
      if (rc < 0) {
        close(fd); /* a failed handshake: the socket is dropped, its close result does not matter */
        snprintf(c->last_err, sizeof(c->last_err), "VALIDATE/PING handshake failed: %s%s", strerror(-rc),
                 rc == -ECONNRESET ? " (a torch < 2.2 server? try the 1.13 or 2.1 generation)"
                 : rc == -ETIMEDOUT || rc == -EPROTO
                     ? " (something answers on that port but is not a TCPStore: another program holds it?)"
                     : "");
        if (rc == -ETIMEDOUT) rc = -EPROTO; /* the server answered the connect: keep retrying */
      }
    } else if (rc < 0) {
      snprintf(c->last_err, sizeof(c->last_err), "connect: %s", strerror(-rc));
    }
    if (rc < 0 && c->o.on_connect_error)
      c->o.on_connect_error(c->o.on_connect_error_arg, stage, -rc, c->last_err);
    /* An address this host cannot reach now (no route for it, a link-local one without its interface, a
     * firewall): retried like any unreachable store, which the network may yet reach. */
    if (stage == TRUN_CONNECT_TCP && (rc == -EINVAL || rc == -EPERM || rc == -EACCES || rc == -ENETDOWN))
      rc = -ENETUNREACH;
    if (rc == 0) {
      *out = fd;
      break;
    }
    if (!retryable(-rc) || remaining_ms(deadline) == 0) break;
  }
  freeaddrinfo(res);
  return rc;
}

/* Connects c->fd, retrying with backoff until connect_timeout_ms. */
static int client_open(trun_client *c) {
  int timeout = c->o.connect_timeout_ms >= 0 ? c->o.connect_timeout_ms : c->o.timeout_ms;
  int64_t deadline = deadline_after(timeout);
  int64_t cur = c->o.backoff_initial_ms > 0 ? c->o.backoff_initial_ms : 1;
  int max = c->o.backoff_max_ms > 0 ? c->o.backoff_max_ms : 1;
  int attempts = 0;
  c->last_err[0] = '\0';
  for (;;) {
    int fd = -1;
    if (attempts > 0 && remaining_ms(deadline) == 0) break; /* slept up to the deadline */
    attempts++;
    int rc = connect_family(c, AF_INET6, deadline, &fd);
    if (rc < 0 && retryable(-rc) && remaining_ms(deadline) != 0)
      rc = connect_family(c, AF_INET, deadline, &fd);
    if (rc == 0) {
      c->fd = fd;
      if ((rc = present_token(c)) < 0) close_fd(c);
      return rc;
    }
    if (!retryable(-rc)) {
      trun_error("cannot connect to TCPStore %s: %s; check the address and port given for the store",
                 c->where, c->last_err);
      return rc;
    }
    int left = remaining_ms(deadline);
    if (left == 0) break;
    int delay = backoff_next(&cur, max, &c->rng);
    if (left >= 0 && delay > left) delay = left;
    trun_debug("TCPStore %s: %s; retrying in %d ms", c->where, c->last_err, delay);
    struct timespec ts = {.tv_sec = delay / 1000, .tv_nsec = (long)(delay % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
  }
  trun_log_at(c->o.quiet_connect ? TRUN_LOG_DEBUG : TRUN_LOG_ERROR, __FILE__, __LINE__,
              "cannot connect to TCPStore %s within %d ms (%d attempts): %s; check that the store is running "
              "there, reachable, and speaks the chosen generation (%s)",
              c->where, timeout, attempts, c->last_err, trun_proto_gen_name(c->o.gen));
  return -ETIMEDOUT;
}

int trun_client_connect(const trun_client_opts *o, trun_client **out) {
  if (o == NULL || out == NULL || o->host == NULL || o->host[0] == '\0' || o->port <= 0 || o->port > 65535)
    return -EINVAL;
  if (o->gen != TRUN_GEN_V2 && o->gen != TRUN_GEN_LEGACY113 && o->gen != TRUN_GEN_LEGACY21) return -EINVAL;
  trun_client *c = calloc(1, sizeof(*c));
  if (c == NULL) return -ENOMEM;
  c->fd = -1;
  c->o = *o;
  c->host = strdup(o->host);
  c->prefix = strdup(o->key_prefix ? o->key_prefix : "/");
  c->token = o->agent_token ? strdup(o->agent_token) : NULL;
  if (c->host == NULL || c->prefix == NULL || (o->agent_token && c->token == NULL)) {
    trun_client_close(c);
    return -ENOMEM;
  }
  c->o.host = c->host;
  c->o.key_prefix = c->prefix;
  c->o.agent_token = c->token;
  c->prefix_len = strlen(c->prefix);
  c->rng = rng_seed() ^ (uint64_t)(uintptr_t)c;
  if (strchr(c->host, ':'))
    snprintf(c->where, sizeof(c->where), "[%s]:%d", c->host, c->o.port);
  else
    snprintf(c->where, sizeof(c->where), "%s:%d", c->host, c->o.port);
  int rc = client_open(c);
  if (rc < 0) {
    trun_client_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void trun_client_close(trun_client *c) {
  if (c == NULL) return;
  close_fd(c);
  trun_buf_free(&c->req);
  free(c->host);
  free(c->prefix);
  free(c->token);
  free(c);
}

int trun_client_release_fd(trun_client *c) {
  int fd = c->fd;
  c->fd = -1;
  trun_client_close(c);
  return fd;
}

void trun_client_set_quiet(trun_client *c, int quiet) {
  if (c) c->o.quiet_errors = quiet;
}

int trun_client_fd(const trun_client *c) { return c->fd; }

/* ---- requests and replies --------------------------------------------------------------------- */

/* The key as text for messages: at most 60 bytes, non-printable bytes as '?'. */
static const char *key_text(trun_slice key, char *buf, size_t cap) {
  size_t n = key.n < 60 ? key.n : 60, j = 0;
  for (size_t i = 0; i < n && j + 4 < cap; i++)
    buf[j++] = key.p[i] >= 0x20 && key.p[i] < 0x7f ? (char)key.p[i] : '?';
  if (key.n > n) buf[j++] = '.', buf[j++] = '.', buf[j++] = '.';
  buf[j] = '\0';
  return buf;
}

/* Reports a failure that leaves the stream out of step, closes the connection and returns rc. */
static int fail(trun_client *c, int rc, trun_op op, trun_slice key, const char *what) {
  char kb[80], kt[120] = "";
  if (op != TRUN_OP_GETNUMKEYS && op != TRUN_OP_PING && op != TRUN_OP_LIST)
    snprintf(kt, sizeof(kt), " of key '%s%s'", c->prefix, key_text(key, kb, sizeof(kb)));
  const char *hint = rc == -ECONNRESET || rc == -EPIPE
                         ? "the server closed the connection: its process or host may be gone (check it "
                           "runs), or it refused the request (torch servers close on an unknown request, a "
                           "missing key in GET, or ADD on a non-number)"
                     : rc == -ETIMEDOUT ? "no reply in time; the connection was closed, reconnect"
                                        : "the connection was closed; reconnect";
  if (c->o.quiet_errors)
    trun_debug("TCPStore %s: %s%s: %s: %s", c->where, trun_proto_op_name(op), kt, what, strerror(-rc));
  else
    trun_error("TCPStore %s: %s%s: %s: %s; %s", c->where, trun_proto_op_name(op), kt, what, strerror(-rc),
               hint);
  close_fd(c);
  return rc;
}

static int not_connected(trun_client *c, trun_op op) {
  trun_log_at(c->o.quiet_errors ? TRUN_LOG_DEBUG : TRUN_LOG_ERROR, __FILE__, __LINE__,
              "TCPStore %s: %s on a closed connection (an earlier call failed); connect again", c->where,
              trun_proto_op_name(op));
  return -ENOTCONN;
}

static int req_begin(trun_client *c, trun_op op) {
  c->req.len = 0;
  return trun_req_begin(&c->req, c->o.gen, op);
}

static int req_key(trun_client *c, trun_slice key) {
  int rc = trun_buf_append_u64(&c->req, c->prefix_len + key.n);
  if (rc == 0) rc = trun_buf_append(&c->req, c->prefix, c->prefix_len);
  if (rc == 0) rc = trun_buf_append(&c->req, key.p, key.n);
  return rc;
}

static int req_keys(trun_client *c, size_t n, const trun_slice *keys) {
  int rc = trun_buf_append_u64(&c->req, n);
  for (size_t i = 0; i < n && rc == 0; i++) rc = req_key(c, keys[i]);
  return rc;
}

static int req_send(trun_client *c, trun_op op, trun_slice key) {
  int rc = send_all(c->fd, c->req.data, c->req.len, deadline_after(c->o.timeout_ms));
  return rc < 0 ? fail(c, rc, op, key, "sending the request") : 0;
}

static int read_bytes(trun_client *c, void *p, size_t n, trun_op op, trun_slice key) {
  int rc = recv_all(c->fd, p, n, deadline_after(c->o.timeout_ms));
  return rc < 0 ? fail(c, rc, op, key, "reading the reply") : 0;
}

static int read_u64(trun_client *c, uint64_t *v, trun_op op, trun_slice key) {
  uint8_t b[8];
  int rc = read_bytes(c, b, 8, op, key);
  if (rc == 0) *v = trun_get_u64(b);
  return rc;
}

static int read_u8(trun_client *c, uint8_t *v, trun_op op, trun_slice key) {
  return read_bytes(c, v, 1, op, key);
}

/* u64 length + bytes into out (replaced). */
static int read_str(trun_client *c, trun_buf *out, trun_op op, trun_slice key) {
  uint64_t n = 0;
  int rc = read_u64(c, &n, op, key);
  if (rc < 0) return rc;
  if (n > CLIENT_MAX_REPLY) return fail(c, -EPROTO, op, key, "reply length beyond 16 GiB");
  out->len = 0;
  if ((rc = trun_buf_reserve(out, (size_t)n)) < 0) return fail(c, rc, op, key, "buffering the reply");
  if ((rc = read_bytes(c, out->data, (size_t)n, op, key)) < 0) return rc;
  out->len = (size_t)n;
  return 0;
}

/* Builds nothing and touches nothing when the generation lacks op. */
static int check_op(trun_client *c, trun_op op) {
  if (trun_proto_code(c->o.gen, op) < 0) return -ENOTSUP;
  return c->fd < 0 ? not_connected(c, op) : 0;
}

static trun_slice first_key(size_t n, const trun_slice *keys) {
  return n > 0 ? keys[0] : (trun_slice){(const uint8_t *)"", 0};
}

/* ---- operations ------------------------------------------------------------------------------- */

/* After a WAIT timed out: CANCEL_WAIT where the generation has it (the reply may be preceded by a late
 * STOP_WAITING), else a fresh connection so that a late STOP_WAITING cannot be read as another reply. */
static int wait_cancel(trun_client *c, trun_slice key) {
  if (trun_proto_code(c->o.gen, TRUN_OP_CANCEL_WAIT) < 0) {
    close_fd(c);
    int rc = client_open(c);
    if (rc < 0)
      trun_error("TCPStore %s: reconnecting after a wait timeout failed: %s; later calls return ENOTCONN",
                 c->where, strerror(-rc));
    return -ETIMEDOUT;
  }
  int rc = req_begin(c, TRUN_OP_CANCEL_WAIT);
  if (rc < 0) return rc;
  if ((rc = req_send(c, TRUN_OP_CANCEL_WAIT, key)) < 0) return rc;
  uint8_t b = 0xff;
  if ((rc = read_u8(c, &b, TRUN_OP_CANCEL_WAIT, key)) < 0) return rc;
  if (b == TRUN_WAIT_STOP_WAITING && (rc = read_u8(c, &b, TRUN_OP_CANCEL_WAIT, key)) < 0) return rc;
  if (b != TRUN_WAIT_CANCELED)
    return fail(c, -EPROTO, TRUN_OP_CANCEL_WAIT, key, "reply is not WAIT_CANCELED");
  return -ETIMEDOUT;
}

int trun_client_wait(trun_client *c, size_t n, const trun_slice *keys, int timeout_ms) {
  trun_slice k0 = first_key(n, keys);
  int rc = check_op(c, TRUN_OP_WAIT);
  if (rc < 0) return rc;
  if ((rc = req_begin(c, TRUN_OP_WAIT)) < 0 || (rc = req_keys(c, n, keys)) < 0) return rc;
  if ((rc = req_send(c, TRUN_OP_WAIT, k0)) < 0) return rc;
  rc = io_wait(c->fd, POLLIN, deadline_after(timeout_ms < 0 ? c->o.timeout_ms : timeout_ms));
  if (rc == -ETIMEDOUT) return wait_cancel(c, k0);
  if (rc < 0) return fail(c, rc, TRUN_OP_WAIT, k0, "polling for the reply");
  uint8_t b = 0xff;
  if ((rc = read_u8(c, &b, TRUN_OP_WAIT, k0)) < 0) return rc;
  if (b != TRUN_WAIT_STOP_WAITING) return fail(c, -EPROTO, TRUN_OP_WAIT, k0, "reply is not STOP_WAITING");
  return 0;
}

/* Sends a request that has no reply. */
static int send_only(trun_client *c, trun_op op, trun_slice key, const trun_slice *v1) {
  int rc = check_op(c, op);
  if (rc < 0) return rc;
  if ((rc = req_begin(c, op)) < 0 || (rc = req_key(c, key)) < 0) return rc;
  if (v1 && (rc = trun_buf_append_str(&c->req, v1->p, v1->n)) < 0) return rc;
  return req_send(c, op, key);
}

int trun_client_set(trun_client *c, trun_slice key, trun_slice val) {
  return send_only(c, TRUN_OP_SET, key, &val);
}

int trun_client_append(trun_client *c, trun_slice key, trun_slice val) {
  return send_only(c, TRUN_OP_APPEND, key, &val);
}

int trun_client_queue_push(trun_client *c, trun_slice key, trun_slice val) {
  return send_only(c, TRUN_OP_QUEUE_PUSH, key, &val);
}

/* A request of one key whose reply is a string. */
static int key_str_reply(trun_client *c, trun_op op, trun_slice key, trun_buf *out) {
  int rc = send_only(c, op, key, NULL);
  return rc < 0 ? rc : read_str(c, out, op, key);
}

int trun_client_get(trun_client *c, trun_slice key, trun_buf *out, int timeout_ms) {
  int rc = check_op(c, TRUN_OP_GET);
  if (rc < 0) return rc;
  if ((rc = trun_client_wait(c, 1, &key, timeout_ms)) < 0) return rc;
  return key_str_reply(c, TRUN_OP_GET, key, out);
}

int trun_client_add(trun_client *c, trun_slice key, int64_t delta, int64_t *result) {
  int rc = check_op(c, TRUN_OP_ADD);
  if (rc < 0) return rc;
  if ((rc = req_begin(c, TRUN_OP_ADD)) < 0 || (rc = req_key(c, key)) < 0 ||
      (rc = trun_buf_append_u64(&c->req, (uint64_t)delta)) < 0)
    return rc;
  uint64_t v = 0;
  if ((rc = req_send(c, TRUN_OP_ADD, key)) < 0 || (rc = read_u64(c, &v, TRUN_OP_ADD, key)) < 0) return rc;
  *result = (int64_t)v;
  return 0;
}

int trun_client_compare_set(trun_client *c, trun_slice key, trun_slice expected, trun_slice desired,
                            trun_buf *out) {
  int rc = check_op(c, TRUN_OP_COMPARE_SET);
  if (rc < 0) return rc;
  if ((rc = req_begin(c, TRUN_OP_COMPARE_SET)) < 0 || (rc = req_key(c, key)) < 0 ||
      (rc = trun_buf_append_str(&c->req, expected.p, expected.n)) < 0 ||
      (rc = trun_buf_append_str(&c->req, desired.p, desired.n)) < 0)
    return rc;
  if ((rc = req_send(c, TRUN_OP_COMPARE_SET, key)) < 0) return rc;
  return read_str(c, out, TRUN_OP_COMPARE_SET, key);
}

int trun_client_check(trun_client *c, size_t n, const trun_slice *keys) {
  trun_slice k0 = first_key(n, keys);
  int rc = check_op(c, TRUN_OP_CHECK);
  if (rc < 0) return rc;
  if ((rc = req_begin(c, TRUN_OP_CHECK)) < 0 || (rc = req_keys(c, n, keys)) < 0) return rc;
  uint8_t b = 0xff;
  if ((rc = req_send(c, TRUN_OP_CHECK, k0)) < 0 || (rc = read_u8(c, &b, TRUN_OP_CHECK, k0)) < 0) return rc;
  if (b == TRUN_CHECK_READY) return 1;
  if (b == TRUN_CHECK_NOT_READY) return 0;
  return fail(c, -EPROTO, TRUN_OP_CHECK, k0, "reply is neither READY nor NOT_READY");
}

/* A request of one key (or none) whose reply is a u64. */
static int u64_reply(trun_client *c, trun_op op, const trun_slice *key, uint64_t *v) {
  trun_slice k = key ? *key : (trun_slice){(const uint8_t *)"", 0};
  int rc = check_op(c, op);
  if (rc < 0) return rc;
  if ((rc = req_begin(c, op)) < 0 || (key && (rc = req_key(c, *key)) < 0)) return rc;
  if ((rc = req_send(c, op, k)) < 0) return rc;
  return read_u64(c, v, op, k);
}

int trun_client_delete(trun_client *c, trun_slice key) {
  uint64_t v = 0;
  int rc = u64_reply(c, TRUN_OP_DELETE_KEY, &key, &v);
  return rc < 0 ? rc : v != 0;
}

int trun_client_num_keys(trun_client *c, int64_t *out) {
  uint64_t v = 0;
  int rc = u64_reply(c, TRUN_OP_GETNUMKEYS, NULL, &v);
  if (rc == 0) *out = (int64_t)v;
  return rc;
}

int trun_client_queue_len(trun_client *c, trun_slice key, int64_t *out) {
  uint64_t v = 0;
  int rc = u64_reply(c, TRUN_OP_QUEUE_LEN, &key, &v);
  if (rc == 0) *out = (int64_t)v;
  return rc;
}

int trun_client_multi_get(trun_client *c, size_t n, const trun_slice *keys, trun_buf *vals, int timeout_ms) {
  trun_slice k0 = first_key(n, keys);
  int rc = check_op(c, TRUN_OP_MULTI_GET);
  if (rc < 0) return rc;
  if ((rc = trun_client_wait(c, n, keys, timeout_ms)) < 0) return rc;
  if ((rc = req_begin(c, TRUN_OP_MULTI_GET)) < 0 || (rc = req_keys(c, n, keys)) < 0) return rc;
  if ((rc = req_send(c, TRUN_OP_MULTI_GET, k0)) < 0) return rc;
  for (size_t i = 0; i < n; i++)
    if ((rc = read_str(c, &vals[i], TRUN_OP_MULTI_GET, keys[i])) < 0) return rc;
  return 0;
}

int trun_client_multi_set(trun_client *c, size_t n, const trun_slice *keys, const trun_slice *vals) {
  trun_slice k0 = first_key(n, keys);
  int rc = check_op(c, TRUN_OP_MULTI_SET);
  if (rc < 0) return rc;
  if ((rc = req_begin(c, TRUN_OP_MULTI_SET)) < 0 || (rc = trun_buf_append_u64(&c->req, n)) < 0) return rc;
  for (size_t i = 0; i < n; i++)
    if ((rc = req_key(c, keys[i])) < 0 || (rc = trun_buf_append_str(&c->req, vals[i].p, vals[i].n)) < 0)
      return rc;
  return req_send(c, TRUN_OP_MULTI_SET, k0);
}

int trun_client_ping(trun_client *c) {
  trun_slice none = {(const uint8_t *)"", 0};
  int rc = check_op(c, TRUN_OP_PING);
  if (rc < 0) return rc;
  uint32_t nonce = (uint32_t)trun_rng_next(&c->rng);
  if ((rc = req_begin(c, TRUN_OP_PING)) < 0 || (rc = trun_buf_append_u32(&c->req, nonce)) < 0) return rc;
  uint8_t b[4];
  if ((rc = req_send(c, TRUN_OP_PING, none)) < 0 || (rc = read_bytes(c, b, 4, TRUN_OP_PING, none)) < 0)
    return rc;
  if (trun_get_u32(b) != nonce) return fail(c, -EPROTO, TRUN_OP_PING, none, "echoed nonce differs");
  return 0;
}

int trun_client_list(trun_client *c, void (*fn)(void *arg, trun_slice key), void *arg) {
  trun_slice none = {(const uint8_t *)"", 0};
  uint64_t n = 0;
  int rc = u64_reply(c, TRUN_OP_LIST, NULL, &n);
  if (rc < 0) return rc;
  if (n > CLIENT_MAX_LIST) return fail(c, -EPROTO, TRUN_OP_LIST, none, "key count beyond 2^32");
  trun_buf k = {0};
  for (uint64_t i = 0; i < n && rc == 0; i++) {
    if ((rc = read_str(c, &k, TRUN_OP_LIST, none)) < 0) break;
    if (c->prefix_len == 0 || (k.len >= c->prefix_len && memcmp(k.data, c->prefix, c->prefix_len) == 0))
      fn(arg, (trun_slice){k.data + c->prefix_len, k.len - c->prefix_len});
  }
  trun_buf_free(&k);
  return rc;
}

int trun_client_queue_pop(trun_client *c, trun_slice key, trun_buf *out, int timeout_ms) {
  int rc = check_op(c, TRUN_OP_QUEUE_POP);
  if (rc < 0) return rc;
  int64_t deadline = deadline_after(timeout_ms < 0 ? c->o.timeout_ms : timeout_ms);
  for (;;) {
    /* Another client may pop between WAIT and QUEUE_POP: then wait again for the time left. */
    if ((rc = trun_client_wait(c, 1, &key, remaining_ms(deadline))) < 0) return rc;
    uint64_t len = 0;
    if ((rc = u64_reply(c, TRUN_OP_QUEUE_POP, &key, &len)) < 0) return rc;
    if ((int64_t)len < 0) return fail(c, -EPROTO, TRUN_OP_QUEUE_POP, key, "negative queue length");
    if (len > 0) return read_str(c, out, TRUN_OP_QUEUE_POP, key);
    if (remaining_ms(deadline) == 0) return -ETIMEDOUT;
  }
}

/* ---- command-line helpers --------------------------------------------------------------------- */

int trun_client_parse_target(const char *s, char *host, size_t cap, int *port) {
  const char *colon = strrchr(s, ':');
  if (colon == NULL || colon == s) return -EINVAL;
  const char *h = s;
  size_t hn = (size_t)(colon - s);
  if (s[0] == '[') {
    if (hn < 3 || s[hn - 1] != ']') return -EINVAL;
    h = s + 1;
    hn -= 2;
  } else if (memchr(s, ':', hn) != NULL) {
    return -EINVAL; /* a bare IPv6 address is ambiguous: write [ADDR]:PORT */
  }
  if (hn + 1 > cap) return -EINVAL;
  char *end;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (colon[1] == '\0' || *end != '\0' || errno != 0 || p < 1 || p > 65535) return -EINVAL;
  memcpy(host, h, hn);
  host[hn] = '\0';
  *port = (int)p;
  return 0;
}

int trun_client_parse_gen(const char *s, trun_gen *out) {
  if (strcmp(s, "v2") == 0 || strcmp(s, "2.2") == 0)
    *out = TRUN_GEN_V2;
  else if (strcmp(s, "1.13") == 0 || strcmp(s, "2.0") == 0)
    *out = TRUN_GEN_LEGACY113;
  else if (strcmp(s, "2.1") == 0)
    *out = TRUN_GEN_LEGACY21;
  else
    return -EINVAL;
  return 0;
}
