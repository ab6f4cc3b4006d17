/* TCPStore server on a libuv loop: both torch wire generations on one port. */
#ifndef TRUN_STORE_SERVER_H
#define TRUN_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "codec.h"
#include "kv.h"

typedef struct trun_server trun_server;

typedef struct {
  const char *host; /* NULL or "": "::" dual-stack, else 0.0.0.0 */
  int port;         /* 0: a free port, see trun_server_port */
  trun_limits limits;
  trun_gen legacy;        /* generation of connections that do not start with VALIDATE */
  int backlog;            /* 0: net.core.somaxconn */
  size_t max_pending_out; /* stop reading a connection whose unsent replies exceed this */
} trun_server_opts;

typedef struct {
  uint64_t connections; /* open now */
  uint64_t accepted;    /* since start */
  uint64_t rejected;    /* closed for bad input */
  uint64_t ops;         /* requests handled */
  uint64_t waiting;     /* connections with a pending WAIT */
} trun_server_stats;

void trun_server_opts_default(trun_server_opts *o);
/* Binds and listens. Returns 0 or a negative libuv error; *out is set on success. */
int trun_server_start(uv_loop_t *loop, const trun_server_opts *o, trun_server **out);
int trun_server_port(const trun_server *s);
/* The key space, for an agent that hosts the store and reads or writes it in-process. */
trun_kv *trun_server_kv(trun_server *s);
void trun_server_get_stats(const trun_server *s, trun_server_stats *st);
/* Closes the listener and every connection; the server is freed once libuv has released the handles
 * (run the loop). done may be NULL. */
void trun_server_close(trun_server *s, void (*done)(void *arg), void *arg);

#endif
