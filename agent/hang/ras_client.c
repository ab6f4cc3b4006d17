/* The NCCL RAS client: one bounded question to the job's RAS (see hang.h). The protocol, as NCCL's RAS
 * server (src/ras/client_support.cc) speaks it: the client sends lines ending in "\n"; "CLIENT PROTOCOL n"
 * is answered "SERVER PROTOCOL m", "TIMEOUT s" and "SET FORMAT json" are answered "OK" (or "ERROR: ..."; an
 * NCCL before 2.28.7 answers "ERROR: Unknown command" to SET FORMAT), and "VERBOSE STATUS" is answered by the
 * whole report, after which the server closes the connection. Commands may be sent at once: the server runs
 * them in order. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "hang.h"

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

const char *trun_ras_addr(char *const *envp) {
  const char *a = trun_env_get(envp, "NCCL_RAS_ADDR");
  return a && *a ? a : TRUN_RAS_DEFAULT_ADDR;
}

int trun_ras_split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen) {
  const char *colon, *h = addr;
  size_t hl;
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (!close || close[1] != ':') return -EINVAL;
    h = addr + 1;
    hl = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon) return -EINVAL;
    hl = (size_t)(colon - addr);
    if (memchr(addr, ':', hl)) return -EINVAL; /* a bare IPv6 address needs brackets */
  }
  const char *p = colon + 1;
  size_t pl = strlen(p);
  if (hl == 0 || hl >= hostlen || pl == 0 || pl >= portlen) return -EINVAL;
  long v = 0;
  for (size_t i = 0; i < pl; i++) {
    if (p[i] < '0' || p[i] > '9') return -EINVAL;
    v = v * 10 + (p[i] - '0');
    if (v > 65535) return -EINVAL;
  }
  if (v == 0) return -EINVAL;
  memcpy(host, h, hl);
  host[hl] = '\0';
  memcpy(port, p, pl + 1);
  return 0;
}

static int ms_left(double deadline) {
  double left = deadline - trun_mono_ms();
  return left <= 0 ? 0 : left > 600000 ? 600000 : (int)left + 1;
}

/* Connects to one address before the deadline: 0 and *fd, or -errno. */
static int connect_one(const struct addrinfo *ai, double deadline, int *fd) {
  int s = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno; /* socket */
  if (connect(s, ai->ai_addr, ai->ai_addrlen) < 0) {
    if (errno != EINPROGRESS) {
      int e = errno;
      close(s);
      return -e;
    }
    struct pollfd pfd = {.fd = s, .events = POLLOUT};
    int k;
    do k = poll(&pfd, 1, ms_left(deadline));
    while (k < 0 && errno == EINTR);
    if (k <= 0) {
      int e = k == 0 ? ETIMEDOUT : errno;
      close(s);
      return -e;
    }
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) soerr = errno;
    if (soerr) {
      close(s);
      return -soerr;
    }
  }
  *fd = s;
  return 0;
}

/* Sends all of p before the deadline. */
static int send_all(int fd, const char *p, size_t n, double deadline) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int r = poll(&pfd, 1, ms_left(deadline));
    if (r == 0) return -ETIMEDOUT;
    if (r < 0 && errno != EINTR) return -errno;
  }
  return 0;
}

/* Reads until the peer closes, at most max bytes, before the deadline. */
static int recv_all(int fd, trun_buf *b, size_t max, double deadline) {
  for (;;) {
    if (trun_buf_reserve(b, 16384)) return -ENOMEM;
    size_t room = b->cap - b->len;
    if (room > max + 1 - b->len) room = max + 1 - b->len;
    ssize_t k = recv(fd, b->data + b->len, room, 0);
    if (k > 0) {
      b->len += (size_t)k;
      if (b->len > max) return -E2BIG;
      continue;
    }
    if (k == 0) return 0;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r = poll(&pfd, 1, ms_left(deadline));
    if (r == 0) return -ETIMEDOUT;
    if (r < 0 && errno != EINTR) return -errno;
  }
}

/* The next line of b from *pos (without "\n" or "\r\n") into line; 0, or -1 when there is no full line. */
static int next_line(const trun_buf *b, size_t *pos, char *line, size_t linelen) {
  const uint8_t *s = b->data + *pos, *nl = memchr(s, '\n', b->len - *pos);
  if (!nl) return -1;
  size_t k = (size_t)(nl - s);
  *pos += k + 1;
  if (k && s[k - 1] == '\r') k--;
  if (k >= linelen) k = linelen - 1;
  for (size_t i = 0; i < k; i++) line[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
  line[k] = '\0';
  return 0;
}

/* Checks the three one-line answers and hands over the report that follows. */
static int read_answer(const char *addr, trun_buf *b, char **json, size_t *n, char *err, size_t errlen) {
  size_t pos = 0;
  char line[160];
  if (next_line(b, &pos, line, sizeof(line)) || strncmp(line, "SERVER PROTOCOL ", 16) != 0)
    return fail(err, errlen, -EPROTO,
                "NCCL RAS at %s: not a RAS server (its first line is not SERVER PROTOCOL)", addr);
  if (next_line(b, &pos, line, sizeof(line)) || strcmp(line, "OK") != 0)
    return fail(err, errlen, -EPROTO, "NCCL RAS at %s: TIMEOUT refused: %s", addr, line);
  if (next_line(b, &pos, line, sizeof(line)) || strcmp(line, "OK") != 0) {
    if (strncmp(line, "ERROR", 5) == 0)
      return fail(err, errlen, -EPROTO,
                  "NCCL RAS at %s: no JSON answers (%s): NCCL 2.28.7 or later is needed for hang detection",
                  addr, line);
    return fail(err, errlen, -EPROTO, "NCCL RAS at %s: SET FORMAT json refused: %s", addr, line);
  }
  size_t k = b->len - pos;
  while (k && (b->data[pos] == ' ' || b->data[pos] == '\n' || b->data[pos] == '\r')) pos++, k--;
  if (k == 0) return fail(err, errlen, -EPROTO, "NCCL RAS at %s: closed without a status report", addr);
  if (b->data[pos] != '{') {
    int partial = next_line(b, &pos, line, sizeof(line));
    return fail(err, errlen, -EPROTO, "NCCL RAS at %s: the status report is not JSON: %s", addr,
                partial ? "(no full line)" : line);
  }
  char *out = malloc(k + 1);
  if (!out) return fail(err, errlen, -ENOMEM, "NCCL RAS at %s: out of memory for the answer", addr);
  memcpy(out, b->data + pos, k);
  out[k] = '\0';
  *json = out;
  *n = k;
  return 0;
}

int trun_ras_query(const char *addr, int timeout_ms, size_t max_bytes, char **json, size_t *n, char *err,
                   size_t errlen) {
  *json = NULL;
  *n = 0;
  if (err && errlen) err[0] = '\0';
  if (!addr) addr = TRUN_RAS_DEFAULT_ADDR;
  if (max_bytes == 0) max_bytes = TRUN_RAS_MAX_ANSWER;
  if (timeout_ms < 100 || timeout_ms > 600000 || max_bytes < 1024 || max_bytes > TRUN_RAS_MAX_ANSWER)
    return fail(err, errlen, -EINVAL, "NCCL RAS query: time-out %d ms or size %zu out of range", timeout_ms,
                max_bytes);
  char host[256], port[8];
  if (trun_ras_split_addr(addr, host, sizeof(host), port, sizeof(port)))
    return fail(err, errlen, -EINVAL, "NCCL RAS address %.80s: not host:port or [ipv6]:port (NCCL_RAS_ADDR)",
                addr);
  double deadline = trun_mono_ms() + timeout_ms;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG},
                  *res = NULL;
  int g = getaddrinfo(host, port, &hints, &res);
  if (g == EAI_ADDRFAMILY || g == EAI_NONAME || g == EAI_NODATA) {
    hints.ai_flags = AI_NUMERICSERV; /* loopback only (no address configured): localhost still resolves */
    g = getaddrinfo(host, port, &hints, &res);
  }
  if (g)
    return fail(err, errlen, -EINVAL, "NCCL RAS at %.80s: cannot resolve %s: %s", addr, host,
                gai_strerror(g));
  int fd = -1, rc = -ECONNREFUSED;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    rc = connect_one(ai, deadline, &fd);
    if (rc == -ETIMEDOUT) break;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (rc == -ECONNREFUSED)
      return fail(err, errlen, rc,
                  "NCCL RAS at %.80s: nothing listens (no NCCL job here yet, or NCCL_RAS_ENABLE=0)", addr);
    return fail(err, errlen, rc, "NCCL RAS at %.80s: connect: %s", addr, strerror(-rc));
  }
  /* RAS's own gathering gets a little under our time, so that it answers with what it has (unresponsive
   * ranks listed as missing) before we give up. Whole seconds: NCCL 2.28.9 refuses "TIMEOUT 1.5". */
  int ras_s = timeout_ms / 2000;
  if (ras_s < 1) ras_s = 1;
  char req[128];
  int rl =
      snprintf(req, sizeof(req), "CLIENT PROTOCOL 2\nTIMEOUT %d\nSET FORMAT json\nVERBOSE STATUS\n", ras_s);
  trun_buf b = {0};
  const char *what = "send";
  rc = send_all(fd, req, (size_t)rl, deadline);
  if (rc == 0) {
    what = "recv";
    rc = recv_all(fd, &b, max_bytes, deadline);
  }
  if (close(fd) < 0 && rc == 0) {
    what = "close";
    rc = -errno;
  }
  if (rc == -E2BIG)
    rc = fail(err, errlen, rc, "NCCL RAS at %.80s: answer over %zu bytes; ignored", addr, max_bytes);
  else if (rc == -ETIMEDOUT)
    rc = fail(err, errlen, rc, "NCCL RAS at %.80s: no full answer within %d ms (%zu bytes read)", addr,
              timeout_ms, b.len);
  else if (rc)
    rc = fail(err, errlen, rc, "NCCL RAS at %.80s: %s: %s", addr, what, strerror(-rc));
  else
    rc = read_answer(addr, &b, json, n, err, errlen);
  trun_buf_free(&b);
  return rc;
}
