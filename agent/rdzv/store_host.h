/* The agent's TCPStore server, on its own libuv loop in its own thread, so that the agent's blocking
 * store client (rendezvous) and its supervision loop never stall the workers' store. */
#ifndef TRUN_STORE_HOST_H
#define TRUN_STORE_HOST_H

#include <stddef.h>

#include "store/store.h"

typedef struct trun_store_host trun_store_host;

/* Sets the server up before it serves anyone (trun_server_agent_token, trun_server_protect ...): 0 or a
 * negative errno (the start fails with it). */
typedef int (*trun_store_host_configure_fn)(trun_server *s, void *arg);

typedef struct {
  const char *host;         /* NULL: every address */
  const char *const *hosts; /* instead of host: each of these numeric addresses (see trun_server_opts) */
  int nhosts;
  int port;                               /* 0: a free port */
  int max_conns_per_peer;                 /* 0: no limit */
  int max_conns;                          /* 0: no limit (see trun_server_opts) */
  size_t max_conn_memory;                 /* 0: no limit (see trun_server_opts) */
  int threads;                            /* event loops (see trun_server_opts); 0: one */
  trun_store_host_configure_fn configure; /* NULL: none */
  void *configure_arg;
} trun_store_host_opts;

/* Listens on host:port (NULL host: every address; port 0: a free port). Returns 0 or a negative libuv
 * error; *port_out gets the bound port. */
int trun_store_host_start(const char *host, int port, trun_store_host **out, int *port_out);
int trun_store_host_start_opts(const trun_store_host_opts *o, trun_store_host **out, int *port_out);
/* The numeric address a client on this host reaches the store at: the first address it listens on, or
 * 127.0.0.1 when it listens on every address. */
const char *trun_store_host_addr(const trun_store_host *h);
/* The server, for its thread-safe calls only (trun_server_get_stats, trun_server_allow*,
 * trun_server_peer_allowed): it runs in the host's thread. */
trun_server *trun_store_host_server(trun_store_host *h);
/* Stops the server, joins the thread and frees everything. */
void trun_store_host_stop(trun_store_host *h);

#endif
