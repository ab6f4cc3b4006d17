#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define IDLE_MS 10000

typedef struct mconn mconn;

struct trun_metrics {
  uv_tcp_t listener;
  trun_metrics_render render;
  trun_metrics_probe probe; /* set: a health probe (trun_metrics_start_probe) instead of /metrics */
  void *arg;
  mconn *conns;
  int nconns;
  int closing;
  int handles; /* the listener and each connection's two handles: freed when the last one closes */
  unsigned long long scanned; /* request bytes the reader examined (trun_metrics_scanned) */
};

struct mconn {
  uv_tcp_t tcp;
  uv_timer_t idle;
  trun_metrics *m;
  mconn *prev, *next;
  char req[TRUN_METRICS_MAX_REQUEST];
  size_t len;
  size_t scanned; /* req[0..scanned) holds no end of the head: each read scans only what is new */
  int answered;
  int closing;
  int closing_handles; /* close callbacks still to come */
  trun_buf reply;
  uv_write_t wreq;
};

static void release(trun_metrics *m) {
  if (--m->handles == 0) free(m);
}

static void on_conn_handle_closed(uv_handle_t *h) {
  mconn *c = h->data;
  trun_metrics *m = c->m;
  if (--c->closing_handles == 0) {
    trun_buf_free(&c->reply);
    free(c);
  }
  release(m);
}

static void conn_close(mconn *c) {
  if (c->closing) return;
  c->closing = 1;
  trun_metrics *m = c->m;
  if (c->prev)
    c->prev->next = c->next;
  else
    m->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  m->nconns--;
  c->closing_handles = 2; /* the last close callback frees c */
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->idle, on_conn_handle_closed);
}

static void on_written(uv_write_t *w, int status) {
  (void)status;
  conn_close(w->data);
}

static void reply(mconn *c, int code, const char *reason, const char *ctype, const trun_buf *body) {
  char head[256];
  size_t blen = body ? body->len : strlen(reason) + 1;
  int n = snprintf(head, sizeof(head),
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                   code, reason, ctype, blen);
  c->answered = 1;
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_timer_stop(&c->idle);
  if (trun_buf_append(&c->reply, head, (size_t)n) < 0 ||
      (body ? trun_buf_append(&c->reply, body->data, body->len)
            : (trun_buf_append(&c->reply, reason, strlen(reason)) < 0
                   ? -1
                   : trun_buf_append_u8(&c->reply, '\n'))) < 0) {
    conn_close(c);
    return;
  }
  uv_buf_t b = uv_buf_init((char *)c->reply.data, (unsigned)c->reply.len);
  c->wreq.data = c;
  if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) conn_close(c);
}

/* The request head is complete: answer it. */
static void serve(mconn *c) {
  char method[16], target[256], version[16];
  char *eol = memchr(c->req, '\n', c->len);
  size_t ll = eol ? (size_t)(eol - c->req) : c->len;
  char line[512];
  if (ll >= sizeof(line)) ll = sizeof(line) - 1;
  memcpy(line, c->req, ll);
  line[ll] = '\0';
  if (sscanf(line, "%15s %255s %15s", method, target, version) != 3 || strncmp(version, "HTTP/1.", 7) != 0) {
    reply(c, 400, "Bad Request", "text/plain; charset=utf-8", NULL);
    return;
  }
  char *q = strchr(target, '?');
  if (q) *q = '\0';
  if (c->m->probe && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)) {
    trun_buf body = {0};
    int alive = c->m->probe(c->m->arg, &body);
    if (strcmp(method, "HEAD") == 0) body.len = 0;
    reply(c, alive ? 200 : 503, alive ? "OK" : "Service Unavailable", "application/json", &body);
    trun_buf_free(&body);
    return;
  }
  if (c->m->probe) {
    reply(c, 405, "Method Not Allowed", "text/plain; charset=utf-8", NULL);
    return;
  }
  if (strcmp(target, "/metrics") != 0) {
    reply(c, 404, "Not Found", "text/plain; charset=utf-8", NULL);
    return;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    reply(c, 405, "Method Not Allowed", "text/plain; charset=utf-8", NULL);
    return;
  }
  trun_buf body = {0};
  c->m->render(c->m->arg, &body);
  if (strcmp(method, "HEAD") == 0) body.len = 0;
  reply(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", &body);
  trun_buf_free(&body);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)suggested;
  mconn *c = h->data;
  *b = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  (void)b;
  mconn *c = s->data;
  if (c->closing || c->answered) return;
  if (n < 0) {
    conn_close(c);
    return;
  }
  c->len += (size_t)n;
  /* The head ends with an empty line; HTTP/1.0 clients may use bare LFs. A read resumes where the last
   * stopped (less the 3 bytes an end may straddle): a client trickling bytes costs linear work, not
   * quadratic. */
  size_t from = c->scanned > 3 ? c->scanned - 3 : 0;
  c->m->scanned += c->len - from;
  for (size_t i = from; i + 1 < c->len; i++) {
    if ((c->req[i] == '\n' && c->req[i + 1] == '\n') ||
        (i + 3 < c->len && memcmp(c->req + i, "\r\n\r\n", 4) == 0)) {
      serve(c);
      return;
    }
  }
  c->scanned = c->len;
  if (c->len == sizeof(c->req))
    reply(c, 431, "Request Header Fields Too Large", "text/plain; charset=utf-8", NULL);
}

static void on_idle(uv_timer_t *t) { conn_close(t->data); }

unsigned long long trun_metrics_scanned(const trun_metrics *m) { return m ? m->scanned : 0; }

/* The table is full: the connection that has waited longest without a whole request (the list's tail:
 * new ones go first) makes room, so that clients that connect and send nothing never keep a scraper out.
 * 0 when every other connection is being answered. */
static int evict_idle(trun_metrics *m, const mconn *keep) {
  mconn *oldest = NULL;
  for (mconn *c = m->conns; c; c = c->next)
    if (c != keep && !c->answered && !c->closing) oldest = c;
  if (oldest == NULL) return 0;
  conn_close(oldest);
  return 1;
}

static void on_connection(uv_stream_t *l, int status) {
  trun_metrics *m = l->data;
  if (status < 0 || m->closing) return;
  mconn *c = calloc(1, sizeof(*c));
  if (c == NULL) return;
  c->m = m;
  uv_tcp_init(l->loop, &c->tcp);
  uv_timer_init(l->loop, &c->idle);
  c->tcp.data = c->idle.data = c;
  m->handles += 2;
  c->next = m->conns;
  if (m->conns) m->conns->prev = c;
  m->conns = c;
  m->nconns++;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0 || (m->nconns > TRUN_METRICS_MAX_CONNS && !evict_idle(m, c))) {
    conn_close(c);
    return;
  }
  uv_timer_start(&c->idle, on_idle, IDLE_MS, 0);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) conn_close(c);
}

static void on_listener_closed(uv_handle_t *h) { release(h->data); }

static int start(uv_loop_t *loop, const char *host, int port, trun_metrics_render render,
                 trun_metrics_probe probe, void *arg, trun_metrics **out, int *port_out) {
  trun_metrics *m = calloc(1, sizeof(*m));
  if (m == NULL) return UV_ENOMEM;
  m->render = render;
  m->probe = probe;
  m->arg = arg;
  int rc = uv_tcp_init(loop, &m->listener);
  if (rc < 0) {
    free(m);
    return rc;
  }
  m->listener.data = m;
  m->handles = 1;
  struct sockaddr_storage ss;
  if (host == NULL || host[0] == '\0') {
    uv_ip6_addr("::", port, (struct sockaddr_in6 *)&ss);
    rc = uv_tcp_bind(&m->listener, (struct sockaddr *)&ss, 0);
    if (rc < 0) {
      uv_ip4_addr("0.0.0.0", port, (struct sockaddr_in *)&ss);
      rc = uv_tcp_bind(&m->listener, (struct sockaddr *)&ss, 0);
    }
  } else if ((rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss)) == 0 ||
             (rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss)) == 0) {
    rc = uv_tcp_bind(&m->listener, (struct sockaddr *)&ss, 0);
  }
  if (rc == 0) rc = uv_listen((uv_stream_t *)&m->listener, 64, on_connection);
  if (rc < 0) {
    m->closing = 1;
    uv_close((uv_handle_t *)&m->listener, on_listener_closed);
    return rc;
  }
  int len = sizeof(ss);
  uv_tcp_getsockname(&m->listener, (struct sockaddr *)&ss, &len);
  *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
  *out = m;
  return 0;
}

int trun_metrics_start(uv_loop_t *loop, const char *host, int port, trun_metrics_render render, void *arg,
                       trun_metrics **out, int *port_out) {
  return start(loop, host, port, render, NULL, arg, out, port_out);
}

int trun_metrics_start_probe(uv_loop_t *loop, const char *host, int port, trun_metrics_probe probe, void *arg,
                             trun_metrics **out, int *port_out) {
  return start(loop, host, port, NULL, probe, arg, out, port_out);
}

void trun_metrics_close(trun_metrics *m) {
  if (m == NULL || m->closing) return;
  m->closing = 1;
  while (m->conns) conn_close(m->conns);
  uv_close((uv_handle_t *)&m->listener, on_listener_closed);
}

void trun_metrics_header(trun_buf *out, const char *name, const char *type, const char *help) {
  char line[512];
  int n = snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  if (n > 0 && (size_t)n < sizeof(line)) trun_buf_append(out, line, (size_t)n);
}

void trun_metrics_sample(trun_buf *out, const char *name, const char *labels, double value) {
  char line[512];
  int n = snprintf(line, sizeof(line), "%s%s%s%s %.17g\n", name, labels && labels[0] ? "{" : "",
                   labels ? labels : "", labels && labels[0] ? "}" : "", value);
  if (n > 0 && (size_t)n < sizeof(line)) trun_buf_append(out, line, (size_t)n);
}
