/* The bounded TCP relay (relay.h). Each client and its target are a pair of libuv streams: bytes read from
 * one side are written to the other with the read's own buffer; a side stops being read while more than
 * max_pending bytes wait to be written toward the other, and starts again once half of them are written. An
 * EOF becomes a shutdown of the other side after what was queued; a pair closes once both sides have sent
 * EOF and both shutdowns are done, or at once on any error. libuv calls every write, shutdown and connect
 * callback (cancelled ones too) before a handle's close callback, so a pair is freed in the last one. */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RELAY_READ_BYTES 65536 /* one read at most */
#define RELAY_BACKLOG 64

typedef struct relay_pair relay_pair;

typedef struct {
  uv_tcp_t tcp;
  relay_pair *p;
  size_t queued; /* bytes being written toward this side */
  int open;      /* tcp initialised and its close callback not yet run */
  int reading;   /* this side is being read */
  int eof;       /* this side sent EOF */
  int shut;      /* a shutdown toward this side was asked ... */
  int shut_done; /* ... and is done */
  uv_shutdown_t sreq;
} relay_side;

struct relay_pair {
  trun_relay *r;
  relay_side c, t; /* the client and its target */
  uv_connect_t conn;
  struct sockaddr_in tgt[TRUN_RELAY_MAX_TARGETS]; /* the targets when the client came, tried in turn */
  int ntgt, ti;
  int closing;
  relay_pair *next, **pprev; /* r->pairs, while not closing */
};

struct trun_relay {
  uv_loop_t *loop;
  uv_tcp_t server;
  int server_open;
  int closing;
  trun_relay_limits lim;
  struct sockaddr_in tgt[TRUN_RELAY_MAX_TARGETS];
  int ntgt;
  relay_pair *pairs; /* open pairs */
  int nalloc;        /* pairs not yet freed */
  trun_relay_stats st;
};

typedef struct {
  uv_write_t req;
  char *base;
  size_t n;
  relay_side *dst;
} relay_write;

static relay_side *other(relay_side *s) { return s == &s->p->c ? &s->p->t : &s->p->c; }

static void relay_maybe_free(trun_relay *r) {
  if (r->closing && !r->server_open && r->nalloc == 0) free(r);
}

static void pair_maybe_free(relay_pair *p) {
  if (!p->closing || p->c.open || p->t.open) return;
  trun_relay *r = p->r;
  free(p);
  r->nalloc--;
  relay_maybe_free(r);
}

static void on_side_closed(uv_handle_t *h) {
  relay_side *s = h->data;
  s->open = 0;
  pair_maybe_free(s->p);
}

static void close_side(relay_side *s) {
  if (s->open && !uv_is_closing((uv_handle_t *)&s->tcp)) uv_close((uv_handle_t *)&s->tcp, on_side_closed);
}

static void close_pair(relay_pair *p) {
  if (p->closing) return;
  p->closing = 1;
  p->r->st.clients--;
  *p->pprev = p->next;
  if (p->next) p->next->pprev = p->pprev;
  close_side(&p->c);
  close_side(&p->t);
  pair_maybe_free(p);
}

static void pair_check_done(relay_pair *p) {
  if (!p->closing && p->c.eof && p->t.eof && p->c.shut_done && p->t.shut_done) close_pair(p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  buf->base = malloc(RELAY_READ_BYTES);
  buf->len = buf->base ? RELAY_READ_BYTES : 0; /* 0: the read callback gets UV_ENOBUFS */
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void start_read(relay_side *s) {
  if (s->reading || s->eof || s->p->closing) return;
  if (uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read) < 0) {
    close_pair(s->p);
    return;
  }
  s->reading = 1;
}

static void stop_read(relay_side *s) {
  if (!s->reading) return;
  uv_read_stop((uv_stream_t *)&s->tcp);
  s->reading = 0;
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  relay_side *d = req->data;
  if (d->p->closing) return;
  if (status < 0) {
    close_pair(d->p);
    return;
  }
  d->shut_done = 1;
  pair_check_done(d->p);
}

static void on_write(uv_write_t *req, int status) {
  relay_write *w = (relay_write *)req;
  relay_side *d = w->dst;
  relay_pair *p = d->p;
  d->queued -= w->n;
  p->r->st.pending -= w->n;
  free(w->base);
  free(w);
  if (p->closing) return;
  if (status < 0) {
    close_pair(p);
    return;
  }
  if (d->queued <= p->r->lim.max_pending / 2) start_read(other(d));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  relay_side *s = st->data, *d = other(s);
  relay_pair *p = s->p;
  if (nread > 0 && !p->closing) {
    relay_write *w = malloc(sizeof(*w));
    if (w == NULL) {
      free(buf->base);
      close_pair(p);
      return;
    }
    *w = (relay_write){.base = buf->base, .n = (size_t)nread, .dst = d};
    uv_buf_t b = uv_buf_init(buf->base, (unsigned)nread);
    d->queued += w->n;
    p->r->st.pending += w->n;
    if (uv_write(&w->req, (uv_stream_t *)&d->tcp, &b, 1, on_write) < 0) {
      d->queued -= w->n;
      p->r->st.pending -= w->n;
      free(w->base);
      free(w);
      close_pair(p);
      return;
    }
    if (d->queued >= p->r->lim.max_pending) stop_read(s); /* the other side holds this one back */
    return;
  }
  free(buf->base);
  if (nread == 0 || p->closing) return;
  if (nread != UV_EOF) { /* a reset, or no memory for the read */
    close_pair(p);
    return;
  }
  s->eof = 1;
  stop_read(s);
  if (!d->shut) {
    d->shut = 1;
    d->sreq.data = d;
    if (uv_shutdown(&d->sreq, (uv_stream_t *)&d->tcp, on_shutdown) < 0) {
      close_pair(p);
      return;
    }
  }
  pair_check_done(p);
}

static void try_target(relay_pair *p);

static void on_target_failed_closed(uv_handle_t *h) {
  relay_side *t = h->data;
  relay_pair *p = t->p;
  t->open = 0;
  if (p->closing) {
    pair_maybe_free(p);
    return;
  }
  p->ti++;
  try_target(p);
}

static void on_connect(uv_connect_t *req, int status) {
  relay_pair *p = req->data;
  if (p->closing) return; /* cancelled: close_pair closes the handle */
  if (status < 0) {       /* refused (a worker gone), unreachable: the next target */
    uv_close((uv_handle_t *)&p->t.tcp, on_target_failed_closed);
    return;
  }
  p->r->st.accepted++;
  uv_tcp_nodelay(&p->c.tcp, 1);
  uv_tcp_nodelay(&p->t.tcp, 1);
  start_read(&p->c);
  start_read(&p->t);
}

static void try_target(relay_pair *p) {
  if (p->ti >= p->ntgt) {
    p->r->st.no_target++;
    close_pair(p);
    return;
  }
  if (uv_tcp_init(p->r->loop, &p->t.tcp) < 0) {
    close_pair(p);
    return;
  }
  p->t.tcp.data = &p->t;
  p->t.open = 1;
  p->conn.data = p;
  if (uv_tcp_connect(&p->conn, &p->t.tcp, (const struct sockaddr *)&p->tgt[p->ti], on_connect) < 0)
    uv_close((uv_handle_t *)&p->t.tcp, on_target_failed_closed);
}

static void on_conn(uv_stream_t *server, int status) {
  trun_relay *r = server->data;
  if (status < 0 || r->closing) return;
  relay_pair *p = calloc(1, sizeof(*p));
  if (p == NULL) return;
  p->r = r;
  p->c.p = p->t.p = p;
  r->nalloc++;
  r->st.clients++;
  p->next = r->pairs;
  p->pprev = &r->pairs;
  if (r->pairs) r->pairs->pprev = &p->next;
  r->pairs = p;
  if (uv_tcp_init(r->loop, &p->c.tcp) < 0) {
    close_pair(p);
    return;
  }
  p->c.tcp.data = &p->c;
  p->c.open = 1;
  if (uv_accept(server, (uv_stream_t *)&p->c.tcp) < 0) {
    close_pair(p);
    return;
  }
  if (r->st.clients > r->lim.max_clients) {
    r->st.turned_away++;
    close_pair(p);
    return;
  }
  memcpy(p->tgt, r->tgt, sizeof(p->tgt));
  p->ntgt = r->ntgt;
  try_target(p);
}

static void on_server_closed(uv_handle_t *h) {
  trun_relay *r = h->data;
  r->server_open = 0;
  relay_maybe_free(r);
}

int trun_relay_open(uv_loop_t *loop, int fd, const trun_relay_limits *lim, trun_relay **out,
                    const char **step) {
  *out = NULL;
  *step = NULL;
  trun_relay *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    *step = "calloc";
    return -ENOMEM;
  }
  r->loop = loop;
  r->lim = *lim;
  if (r->lim.max_clients < 1) r->lim.max_clients = 1;
  if (r->lim.max_pending < 1) r->lim.max_pending = 1;
  int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) {
    int e = errno;
    free(r);
    *step = "fcntl(F_DUPFD_CLOEXEC)";
    return -e;
  }
  int rc = uv_tcp_init(loop, &r->server);
  if (rc < 0) {
    close(dup_fd);
    free(r);
    *step = "uv_tcp_init";
    return rc;
  }
  r->server.data = r;
  r->server_open = 1;
  rc = uv_tcp_open(&r->server, dup_fd);
  if (rc < 0) {
    close(dup_fd);
    *step = "uv_tcp_open";
  } else if ((rc = uv_listen((uv_stream_t *)&r->server, RELAY_BACKLOG, on_conn)) < 0) {
    *step = "listen";
  }
  if (rc < 0) {
    r->closing = 1;
    uv_close((uv_handle_t *)&r->server, on_server_closed); /* frees r */
    return rc;
  }
  *out = r;
  return 0;
}

int trun_relay_targets(trun_relay *r, const char (*addrs)[64], int n) {
  r->ntgt = 0;
  for (int i = 0; i < n && r->ntgt < TRUN_RELAY_MAX_TARGETS; i++) {
    const char *colon = strrchr(addrs[i], ':');
    if (colon == NULL || colon == addrs[i] || (size_t)(colon - addrs[i]) >= 16) continue;
    char host[16], *end;
    memcpy(host, addrs[i], (size_t)(colon - addrs[i]));
    host[colon - addrs[i]] = '\0';
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || errno != 0 || port < 1 || port > 65535) continue;
    if (uv_ip4_addr(host, (int)port, &r->tgt[r->ntgt]) < 0) continue;
    r->ntgt++;
  }
  return r->ntgt;
}

void trun_relay_stats_get(const trun_relay *r, trun_relay_stats *st) { *st = r->st; }

void trun_relay_close(trun_relay *r) {
  if (r == NULL || r->closing) return;
  r->closing = 1;
  while (r->pairs) close_pair(r->pairs);
  /* The caller's descriptor shares the socket: stop its listening (connections waiting are refused) and leave
   * it bound, holding the port as before. */
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&r->server, &fd) == 0) shutdown(fd, SHUT_RD);
  uv_close((uv_handle_t *)&r->server, on_server_closed);
}
