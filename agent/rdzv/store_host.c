#include "store_host.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "store/store.h"

struct trun_store_host {
  uv_loop_t loop;
  uv_async_t stop;
  trun_server *srv;
  pthread_t thread;
  char addr[INET6_ADDRSTRLEN]; /* see trun_store_host_addr */
};

static void on_stop(uv_async_t *a) {
  trun_store_host *h = a->data;
  trun_server_close(h->srv, NULL, NULL);
  uv_close((uv_handle_t *)&h->stop, NULL);
}

static void *run(void *arg) {
  trun_store_host *h = arg;
  uv_run(&h->loop, UV_RUN_DEFAULT);
  return NULL;
}

int trun_store_host_start(const char *host, int port, trun_store_host **out, int *port_out) {
  trun_store_host_opts o = {.host = host, .port = port};
  return trun_store_host_start_opts(&o, out, port_out);
}

trun_server *trun_store_host_server(trun_store_host *h) { return h->srv; }

const char *trun_store_host_addr(const trun_store_host *h) { return h->addr; }

/* The address of the first listener when it is a numeric one (not a wildcard), else 127.0.0.1. */
static void local_addr(const trun_store_host_opts *o, char *out, size_t len) {
  const char *first = o->nhosts > 0 ? o->hosts[0] : o->host;
  unsigned char a[sizeof(struct in6_addr)];
  int numeric = first && (inet_pton(AF_INET, first, a) == 1 || inet_pton(AF_INET6, first, a) == 1);
  int wildcard = numeric && (strcmp(first, "0.0.0.0") == 0 || strcmp(first, "::") == 0);
  snprintf(out, len, "%s", numeric && !wildcard ? first : "127.0.0.1");
}

int trun_store_host_start_opts(const trun_store_host_opts *ho, trun_store_host **out, int *port_out) {
  trun_store_host *h = calloc(1, sizeof(*h));
  if (h == NULL) return UV_ENOMEM;
  int rc = uv_loop_init(&h->loop);
  if (rc < 0) {
    free(h);
    return rc;
  }
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.host = ho->host;
  o.hosts = ho->hosts;
  o.nhosts = ho->nhosts;
  o.port = ho->port;
  o.max_conns_per_peer = ho->max_conns_per_peer;
  o.max_conns = ho->max_conns;
  o.max_conn_memory = ho->max_conn_memory;
  o.threads = ho->threads > 0 ? ho->threads : 1;
  rc = trun_server_start(&h->loop, &o, &h->srv);
  /* Before the loop runs: no connection is accepted yet (the listener is on this loop). */
  if (rc == 0 && ho->configure) rc = ho->configure(h->srv, ho->configure_arg);
  if (rc == 0) rc = uv_async_init(&h->loop, &h->stop, on_stop);
  if (rc < 0) {
    if (h->srv) trun_server_close(h->srv, NULL, NULL);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    uv_loop_close(&h->loop);
    free(h);
    return rc;
  }
  h->stop.data = h;
  local_addr(ho, h->addr, sizeof(h->addr));
  *port_out = trun_server_port(h->srv);
  /* The thread takes no process signals: the agent's loop handles them. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = pthread_create(&h->thread, NULL, run, h);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    on_stop(&h->stop);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    uv_loop_close(&h->loop);
    free(h);
    return -rc;
  }
  *out = h;
  return 0;
}

void trun_store_host_stop(trun_store_host *h) {
  if (h == NULL) return;
  uv_async_send(&h->stop);
  pthread_join(h->thread, NULL);
  uv_loop_close(&h->loop);
  free(h);
}
