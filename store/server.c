/* TCPStore server (server.h): its start and close, the listeners, accept, its options and counters. The
 * top of the server's files: calls server_shard.c, server_admit.c, server_io.c and server_conn.c (layers:
 * server_int.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "server_int.h"

void trun_server_opts_default(trun_server_opts *o) {
  memset(o, 0, sizeof(*o));
  trun_limits_default(&o->limits);
  o->legacy = TRUN_GEN_LEGACY113;
  o->max_pending_out = 4u << 20;
  o->max_reply = TRUN_SERVER_DEFAULT_MAX_REPLY;
  o->max_input_total = TRUN_SERVER_DEFAULT_MAX_INPUT;
  o->max_wait_conn = TRUN_SERVER_DEFAULT_MAX_WAIT_CONN;
  o->max_wait_total = TRUN_SERVER_DEFAULT_MAX_WAIT_TOTAL;
  o->turn_work = TRUN_SERVER_DEFAULT_TURN_WORK;
  o->turn_conns = TRUN_SERVER_DEFAULT_TURN_CONNS;
  o->peer_reserve = TRUN_SERVER_PEER_RESERVE;
  o->threads = 1;
}

int trun_server_port(const trun_server *s) { return s->port; }

void trun_server_get_stats(const trun_server *s, trun_server_stats *st) {
  st->connections = __atomic_load_n(&s->stats.connections, __ATOMIC_RELAXED);
  st->accepted = __atomic_load_n(&s->stats.accepted, __ATOMIC_RELAXED);
  st->rejected = __atomic_load_n(&s->stats.rejected, __ATOMIC_RELAXED);
  st->ops = __atomic_load_n(&s->stats.ops, __ATOMIC_RELAXED);
  st->waiting = __atomic_load_n(&s->stats.waiting, __ATOMIC_RELAXED);
  st->refused = __atomic_load_n(&s->stats.refused, __ATOMIC_RELAXED);
  st->input_bytes = __atomic_load_n(&s->stats.input_bytes, __ATOMIC_RELAXED);
  st->wait_bytes = __atomic_load_n(&s->stats.wait_bytes, __ATOMIC_RELAXED);
  st->over_budget = __atomic_load_n(&s->stats.over_budget, __ATOMIC_RELAXED);
  st->deferred = __atomic_load_n(&s->stats.deferred, __ATOMIC_RELAXED);
  st->accepts_put_off = __atomic_load_n(&s->stats.accepts_put_off, __ATOMIC_RELAXED);
  st->ends_put_off = __atomic_load_n(&s->stats.ends_put_off, __ATOMIC_RELAXED);
}

static int somaxconn(void) {
  FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
  int v = 0;
  if (f) {
    if (fscanf(f, "%d", &v) != 1) v = 0;
    fclose(f);
  }
  return v > 0 ? v : 4096;
}

/* Accepts the connection pending on listener l and deals it to a shard. */
static void accept_one(trun_server *s, uv_stream_t *l) {
  s->turn_accepted++;
  shard *dst = s->shards[s->next_shard++ % (unsigned)s->nshards];
  if (dst->index != 0) {
    trun__hand_off(s, l, dst);
    return;
  }
  trun__shard_accept(dst, l);
}

static void on_accept_kick(uv_idle_t *h) {
  (void)h; /* only keeps the loop from blocking while a listener waits for the next turn */
}

/* libuv accepts in a loop while the listener has connections queued: a flood of connects would keep the
 * loop there, and the established connections (the agents' heartbeats) would wait for the whole queue.
 * After opts.turn_conns in one turn, the connection is left in the listener: libuv stops watching it until
 * it is accepted, which the next turn does (on_accept_turn), after the poll served the others. */
static void on_connection(uv_stream_t *l, int status) {
  trun_server *s = l->data;
  if (status < 0) {
    trun_warn("accept on port %d failed: %s", s->port, uv_strerror(status));
    return;
  }
  if (s->opts.turn_conns > 0 && s->turn_accepted >= s->opts.turn_conns) {
    s->accept_later[(uv_tcp_t *)l - s->listeners] = 1;
    STAT_ADD(s, accepts_put_off, 1);
    if (!uv_is_active((uv_handle_t *)&s->accept_kick)) uv_idle_start(&s->accept_kick, on_accept_kick);
    return;
  }
  accept_one(s, (uv_stream_t *)l);
}

/* Each turn of the caller's loop, before it polls: a new accept budget, first spent on the connections left
 * in the listeners last turn (accepting one makes libuv watch its listener again). */
static void on_accept_turn(uv_prepare_t *h) {
  trun_server *s = h->data;
  s->turn_accepted = 0;
  if (!uv_is_active((uv_handle_t *)&s->accept_kick)) return;
  uv_idle_stop(&s->accept_kick);
  for (int i = 0; i < s->nlisteners && !s->closing; i++) {
    if (!s->accept_later[i]) continue;
    s->accept_later[i] = 0;
    accept_one(s, (uv_stream_t *)&s->listeners[i]);
  }
}

/* ---- life cycle ------------------------------------------------------------------------------- */

static int bind_host(trun_server *s, uv_tcp_t *l, const char *host, int port) {
  struct sockaddr_storage ss;
  int rc;
  if (host == NULL || host[0] == '\0') {
    rc = uv_ip6_addr("::", port, (struct sockaddr_in6 *)&ss);
    if (rc == 0) rc = uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
    if (rc == 0) return 0;
    uv_ip4_addr("0.0.0.0", port, (struct sockaddr_in *)&ss);
    return uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
  }
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) == 0 ||
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) == 0)
    return uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
  uv_getaddrinfo_t req;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  rc = uv_getaddrinfo(s->loop, &req, NULL, host, ps, &hints);
  if (rc < 0) return rc;
  rc = UV_EADDRNOTAVAIL;
  for (struct addrinfo *ai = req.addrinfo; ai; ai = ai->ai_next)
    if ((rc = uv_tcp_bind(l, ai->ai_addr, 0)) == 0) break;
  uv_freeaddrinfo(req.addrinfo);
  return rc;
}

static int listener_port(uv_tcp_t *l) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  if (uv_tcp_getsockname(l, (struct sockaddr *)&ss, &len) < 0) return -1;
  return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
}

/* Opens one listener per address (opts.hosts), or one for opts.host; every one after the first on the
 * port the first got. 0 or a negative libuv error. */
static int listen_all(trun_server *s) {
  const trun_server_opts *o = &s->opts;
  int n = o->nhosts > 0 ? o->nhosts : 1, port = o->port, rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    uv_tcp_t *l = &s->listeners[i];
    if ((rc = uv_tcp_init(s->loop, l)) < 0) break;
    l->data = s;
    s->nlisteners++;
    s->handles_open++;
    rc = bind_host(s, l, o->nhosts > 0 ? o->hosts[i] : o->host, port);
    if (rc == 0) rc = uv_listen((uv_stream_t *)l, o->backlog > 0 ? o->backlog : somaxconn(), on_connection);
    if (rc == 0 && i == 0 && (port = listener_port(l)) < 0) rc = UV_EINVAL;
  }
  s->port = port;
  return rc;
}

static void on_listener_closed(uv_handle_t *h) { trun__server_handle_closed(h->data); }

/* The accept turn's handles on the caller's loop; neither keeps it running. */
static void accept_turn_init(trun_server *s) {
  uv_prepare_init(s->loop, &s->accept_turn);
  s->accept_turn.data = s;
  uv_prepare_start(&s->accept_turn, on_accept_turn);
  uv_unref((uv_handle_t *)&s->accept_turn);
  uv_idle_init(s->loop, &s->accept_kick);
  s->accept_kick.data = s;
  uv_unref((uv_handle_t *)&s->accept_kick);
  s->handles_open += 2;
}

/* Closes the listeners and shard 0's handles (the worker shards are stopped already). */
static void server_close_handles(trun_server *s) {
  if (s->accept_turn.loop) {
    uv_close((uv_handle_t *)&s->accept_turn, on_listener_closed);
    uv_close((uv_handle_t *)&s->accept_kick, on_listener_closed);
  }
  for (int i = 0; i < s->nlisteners; i++) uv_close((uv_handle_t *)&s->listeners[i], on_listener_closed);
  if (s->shards && s->shards[0]) {
    uv_close((uv_handle_t *)&s->shards[0]->reaper, trun__on_shard_handle_closed);
    uv_close((uv_handle_t *)&s->shards[0]->async, trun__on_shard_handle_closed);
    trun__shard_turn_close(s->shards[0], trun__on_shard_handle_closed);
  }
}

int trun_server_start(uv_loop_t *loop, const trun_server_opts *o, trun_server **out) {
  /* libuv writes with write(2), not send(MSG_NOSIGNAL): a reply to a peer that is gone would raise
   * SIGPIPE and kill the process. Ignore it unless the program chose a disposition itself. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  if (o->threads < 0 || o->threads > TRUN_SERVER_MAX_THREADS) return UV_EINVAL;
  if (o->nhosts < 0 || o->nhosts > TRUN_SERVER_MAX_LISTENERS || (o->nhosts > 0 && o->hosts == NULL))
    return UV_EINVAL;
  trun_server *s = calloc(1, sizeof(*s));
  if (s == NULL) return UV_ENOMEM;
  s->loop = loop;
  s->opts = *o;
  if (s->opts.threads == 0) s->opts.threads = 1;
  pthread_mutex_init(&s->acl_mu, NULL);
  pthread_mutex_init(&s->kv_mu, NULL);
  pthread_mutex_init(&s->conns_mu, NULL);
  if (s->opts.max_pending_out == 0) s->opts.max_pending_out = 4u << 20;
  s->kv = trun_kv_new();
  s->peers = trun_kv_new();
  if (s->kv == NULL || s->peers == NULL) {
    trun__server_free(s);
    return UV_ENOMEM;
  }
  int rc = trun__shards_start(s, s->opts.threads);
  if (rc == 0) accept_turn_init(s);
  if (rc == 0) rc = listen_all(s);
  if (rc < 0) {
    s->closing = 1;
    trun__shards_stop(s);
    server_close_handles(s);
    if (s->handles_open == 0) trun__server_free(s); /* nothing to wait for: no handle was opened */
    return rc;
  }
  *out = s;
  return 0;
}

void trun_server_close(trun_server *s, void (*done)(void *arg), void *arg) {
  if (s->closing) return;
  s->closing = 1;
  s->done = done;
  s->done_arg = arg;
  trun__shards_stop(s);
  trun__shard_close_all(s->shards[0]);
  server_close_handles(s);
}
