/* The loops of the TCPStore server (opts.threads > 1: worker threads, see the comment on struct shard in
 * server_int.h): their start and stop, the hand-off of accepted sockets, and the work other threads give
 * a shard (sockets to adopt, replies they queued, access rules, evictions, stop). Calls server_admit.c,
 * server_io.c and server_conn.c only (layers: server_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "server_int.h"

static void on_handoff_closed(uv_handle_t *h) {
  trun_server *s = h->data;
  free(h);
  trun__server_handle_closed(s);
}

void trun__hand_off(trun_server *s, uv_stream_t *listener, shard *dst) {
  uv_tcp_t *t = malloc(sizeof(*t));
  if (t == NULL || uv_tcp_init(s->loop, t) < 0) {
    trun_error("out of memory accepting a connection on port %d", s->port);
    free(t);
    return;
  }
  t->data = s;
  s->handles_open++;
  int rc = uv_accept(listener, (uv_stream_t *)t);
  uv_os_fd_t fd = -1;
  if (rc == 0) rc = uv_fileno((uv_handle_t *)t, &fd);
  int dup_fd = rc == 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
  if (rc == 0 && dup_fd < 0) rc = -errno;
  uv_close((uv_handle_t *)t, on_handoff_closed);
  if (rc < 0) {
    trun_warn("accept on port %d failed: %s", s->port, uv_strerror(rc));
    return;
  }
  pthread_mutex_lock(&dst->mu);
  if (dst->nfds == dst->capfds) {
    size_t cap = dst->capfds ? dst->capfds * 2 : 64;
    int *n = realloc(dst->fds, cap * sizeof(*n));
    if (n == NULL) {
      pthread_mutex_unlock(&dst->mu);
      close(dup_fd);
      trun_error("out of memory handing a connection on port %d to a store thread", s->port);
      return;
    }
    dst->fds = n;
    dst->capfds = cap;
  }
  dst->fds[dst->nfds++] = dup_fd;
  pthread_mutex_unlock(&dst->mu);
  uv_async_send(&dst->async);
}

/* ---- shards ----------------------------------------------------------------------------------- */

void trun__shard_close_all(shard *sh) {
  while (sh->conns) trun__conn_close(sh->conns, NULL);
  pthread_mutex_lock(&sh->mu);
  for (size_t i = 0; i < sh->nfds; i++) close(sh->fds[i]);
  sh->nfds = 0;
  pthread_mutex_unlock(&sh->mu);
}

void trun__on_shard_handle_closed(uv_handle_t *h) {
  shard *sh = h->data;
  if (sh->index == 0) trun__server_handle_closed(sh->srv);
}

/* Work from other threads: adopt handed-off sockets, send replies they queued, re-check the access rules,
 * stop (worker shards). */
static void on_shard_async(uv_async_t *a) {
  shard *sh = a->data;
  pthread_mutex_lock(&sh->mu);
  int stop = sh->stop;
  int *fds = sh->fds;
  size_t nfds = sh->nfds;
  sh->fds = NULL;
  sh->nfds = sh->capfds = 0;
  conn *woken = trun__shard_take_remote(sh);
  pthread_mutex_unlock(&sh->mu);
  for (size_t i = 0; i < nfds; i++) {
    if (stop)
      close(fds[i]);
    else
      trun__shard_adopt(sh, fds[i]);
  }
  free(fds);
  /* The list has its own link: closing one of them may wake others onto the flush queue meanwhile. A
   * connection closed meanwhile is still allocated (freed in the loop's close phase). */
  for (conn *c = woken, *next; c; c = next) {
    next = c->anext;
    c->anext = NULL;
    if (c->closing) continue;
    if (c->doomed)
      trun__conn_close(c, c->doomed);
    else
      trun__conn_flush(c);
  }
  trun__shard_recheck_acl(sh);
  if (__atomic_exchange_n(&sh->evict, 0, __ATOMIC_ACQ_REL)) trun__shard_evict(sh);
  trun__shard_flush_woken(sh);
  if (stop) {
    trun__shard_close_all(sh);
    uv_close((uv_handle_t *)&sh->reaper, trun__on_shard_handle_closed);
    uv_close((uv_handle_t *)&sh->async, trun__on_shard_handle_closed);
    trun__shard_turn_close(sh, trun__on_shard_handle_closed);
  }
}

static void *shard_main(void *arg) {
  shard *sh = arg;
  uv_run(sh->loop, UV_RUN_DEFAULT);
  uv_loop_close(sh->loop);
  return NULL;
}

static shard *shard_new(trun_server *s, int index) {
  shard *sh = calloc(1, sizeof(*sh));
  if (sh == NULL) return NULL;
  sh->srv = s;
  sh->index = index;
  pthread_mutex_init(&sh->mu, NULL);
  if (index == 0) {
    sh->loop = s->loop;
  } else {
    sh->loop = &sh->own;
    if (uv_loop_init(sh->loop) < 0) {
      pthread_mutex_destroy(&sh->mu);
      free(sh);
      return NULL;
    }
  }
  uv_idle_init(sh->loop, &sh->reaper);
  sh->reaper.data = sh;
  uv_async_init(sh->loop, &sh->async, on_shard_async);
  sh->async.data = sh;
  trun__shard_turn_init(sh);
  return sh;
}

void trun__shards_stop(trun_server *s) {
  for (int i = 1; i < s->nshards; i++) {
    shard *sh = s->shards[i];
    pthread_mutex_lock(&sh->mu);
    sh->stop = 1;
    pthread_mutex_unlock(&sh->mu);
    uv_async_send(&sh->async);
  }
  for (int i = 1; i < s->nshards; i++) pthread_join(s->shards[i]->thread, NULL);
}

int trun__shards_start(trun_server *s, int n) {
  s->shards = calloc((size_t)n, sizeof(*s->shards));
  if (s->shards == NULL) return UV_ENOMEM;
  if ((s->shards[0] = shard_new(s, 0)) == NULL) return UV_ENOMEM;
  s->nshards = 1;
  s->handles_open += 4;
  /* Worker threads take no process signals: the hosting program's loop handles them. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = 0;
  for (int i = 1; i < n && rc == 0; i++) {
    shard *sh = shard_new(s, i);
    if (sh == NULL) {
      rc = UV_ENOMEM;
      break;
    }
    int e = pthread_create(&sh->thread, NULL, shard_main, sh);
    if (e != 0) {
      trun_error("pthread_create for store thread %d: %s", i, strerror(e));
      uv_close((uv_handle_t *)&sh->reaper, NULL);
      uv_close((uv_handle_t *)&sh->async, NULL);
      trun__shard_turn_close(sh, NULL);
      uv_run(sh->loop, UV_RUN_DEFAULT);
      uv_loop_close(sh->loop);
      pthread_mutex_destroy(&sh->mu);
      free(sh);
      rc = -e;
      break;
    }
    s->shards[s->nshards++] = sh;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}
