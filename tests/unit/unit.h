/* Tiny helpers shared by the Check unit tests: an in-process trun_server on a libuv loop running on its
 * own pthread, raw loopback sockets, and hex strings. Everything is static inline so that a test that uses
 * only part of it still builds with -Werror. */
#ifndef TRUN_TESTS_UNIT_H
#define TRUN_TESTS_UNIT_H

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#include "server.h"

/* ---- in-process server ------------------------------------------------------------------------ */

typedef struct unit_server {
  uv_loop_t loop;
  uv_async_t async;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  trun_server *srv;
  int port;
  int stop;                                   /* set by unit_server_stop */
  void (*call_fn)(trun_server *s, void *arg); /* a call waiting to run on the loop thread */
  void *call_arg;
  int call_done;
} unit_server;

static inline void unit_server_on_async_(uv_async_t *a) {
  unit_server *us = a->data;
  pthread_mutex_lock(&us->mu);
  if (us->call_fn && !us->call_done) {
    us->call_fn(us->srv, us->call_arg);
    us->call_done = 1;
    pthread_cond_broadcast(&us->cv);
  }
  int stop = us->stop;
  pthread_mutex_unlock(&us->mu);
  if (stop && us->srv) {
    trun_server_close(us->srv, NULL, NULL);
    us->srv = NULL;
    uv_close((uv_handle_t *)&us->async, NULL);
  }
}

static inline void *unit_server_thread_(void *arg) {
  unit_server *us = arg;
  uv_run(&us->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* Starts a server on 127.0.0.1 (opts NULL: defaults; opts->host and opts->port are overridden with
 * 127.0.0.1 and 0) and runs its loop on a new thread. Returns the port, or a negative libuv error. */
static inline int unit_server_start(unit_server *us, const trun_server_opts *opts) {
  memset(us, 0, sizeof(*us));
  trun_server_opts o;
  if (opts)
    o = *opts;
  else
    trun_server_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = 0;
  int rc = uv_loop_init(&us->loop);
  if (rc < 0) return rc;
  pthread_mutex_init(&us->mu, NULL);
  pthread_cond_init(&us->cv, NULL);
  us->async.data = us;
  if ((rc = uv_async_init(&us->loop, &us->async, unit_server_on_async_)) < 0) return rc;
  if ((rc = trun_server_start(&us->loop, &o, &us->srv)) < 0) {
    uv_close((uv_handle_t *)&us->async, NULL);
    uv_run(&us->loop, UV_RUN_DEFAULT);
    uv_loop_close(&us->loop);
    return rc;
  }
  us->port = trun_server_port(us->srv);
  if (pthread_create(&us->thread, NULL, unit_server_thread_, us) != 0) return UV_EAGAIN;
  return us->port;
}

/* Runs fn(server, arg) on the loop thread and returns once it ran. */
static inline void unit_server_call(unit_server *us, void (*fn)(trun_server *s, void *arg), void *arg) {
  pthread_mutex_lock(&us->mu);
  while (us->call_fn) pthread_cond_wait(&us->cv, &us->mu);
  us->call_fn = fn;
  us->call_arg = arg;
  us->call_done = 0;
  pthread_mutex_unlock(&us->mu);
  uv_async_send(&us->async);
  pthread_mutex_lock(&us->mu);
  while (!us->call_done) pthread_cond_wait(&us->cv, &us->mu);
  us->call_fn = NULL;
  pthread_cond_broadcast(&us->cv);
  pthread_mutex_unlock(&us->mu);
}

static inline void unit_server_stats_fn_(trun_server *s, void *arg) {
  trun_server_get_stats(s, (trun_server_stats *)arg);
}

/* The server's counters, read on the loop thread. */
static inline void unit_server_stats(unit_server *us, trun_server_stats *st) {
  unit_server_call(us, unit_server_stats_fn_, st);
}

/* Closes the server and every connection, joins the thread and closes the loop. */
static inline void unit_server_stop(unit_server *us) {
  pthread_mutex_lock(&us->mu);
  us->stop = 1;
  pthread_mutex_unlock(&us->mu);
  uv_async_send(&us->async);
  pthread_join(us->thread, NULL);
  uv_loop_close(&us->loop);
  pthread_cond_destroy(&us->cv);
  pthread_mutex_destroy(&us->mu);
}

/* ---- raw loopback sockets --------------------------------------------------------------------- */

/* A blocking TCP socket connected to 127.0.0.1:port with TCP_NODELAY, or -1. A receive timeout of
 * 20 s only keeps a broken test from hanging; no assertion depends on it. */
static inline int unit_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct timeval tv = {.tv_sec = 20};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

/* 0 when every byte was sent, -1 otherwise (never raises SIGPIPE). */
static inline int unit_send(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Reads exactly n bytes: 0, or -1 on EOF / error / the safety timeout. */
static inline int unit_recv(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n > 0) {
    ssize_t k = recv(fd, b, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

/* 1 when the peer closed the connection (EOF or reset) before sending anything more, else 0. */
static inline int unit_eof(int fd) {
  uint8_t b;
  for (;;) {
    ssize_t k = recv(fd, &b, 1, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0 || (k < 0 && (errno == ECONNRESET || errno == EPIPE))) return 1;
    return 0;
  }
}

/* 1 when bytes are ready to read right now (does not wait), else 0. */
static inline int unit_readable_now(int fd) {
  uint8_t b;
  ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return k > 0;
}

/* ---- bytes ------------------------------------------------------------------------------------ */

/* Decodes hex (whitespace ignored) into out (cap bytes); returns the length, or -1 when malformed. */
static inline long unit_unhex(const char *hex, uint8_t *out, size_t cap) {
  size_t n = 0;
  int hi = -1;
  for (const char *p = hex; *p; p++) {
    int v;
    if (*p >= '0' && *p <= '9')
      v = *p - '0';
    else if (*p >= 'a' && *p <= 'f')
      v = *p - 'a' + 10;
    else if (*p >= 'A' && *p <= 'F')
      v = *p - 'A' + 10;
    else if (*p == ' ' || *p == '\n' || *p == '\t')
      continue;
    else
      return -1;
    if (hi < 0) {
      hi = v;
      continue;
    }
    if (n >= cap) return -1;
    out[n++] = (uint8_t)(hi << 4 | v);
    hi = -1;
  }
  return hi < 0 ? (long)n : -1;
}

/* Formats n bytes as hex into a static buffer (for failure messages; not thread-safe). */
static inline const char *unit_hex(const void *p, size_t n) {
  static char s[1024];
  const uint8_t *b = p;
  size_t i = 0;
  for (; i < n && 2 * i + 4 < sizeof(s); i++) snprintf(s + 2 * i, 3, "%02x", b[i]);
  if (i < n)
    strcpy(s + 2 * i, "..");
  else
    s[2 * i] = '\0';
  return s;
}

/* Runs a suite (CK_FORK as the environment says) and returns the process exit status. */
static inline int unit_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
