/* Blocking TCPStore client for the agent: torch-compatible requests over one TCP connection.
 * Every call returns 0 (or a documented non-negative result) or a negative errno:
 * -ETIMEDOUT (deadline passed), -ECONNRESET / -EPIPE (server went away), -EPROTO (reply that makes no
 * sense), -ENOTSUP (the generation lacks the operation), -ENOMEM, -EINVAL (bad argument), -ENOTCONN (an
 * earlier failure that could leave the stream out of step closed the connection; connect again).
 * Keys are user keys: the client prepends opts.key_prefix ("/" by default, as torch's Python client does),
 * so a key written here is the same key a torch process reads with store.get(key). */
#ifndef TRUN_STORE_CLIENT_H
#define TRUN_STORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "codec.h"
#include "proto.h"

typedef struct trun_client trun_client;

typedef struct {
  const char *host; /* name or address; IPv6 first, then IPv4, as torch */
  int port;
  trun_gen gen;           /* TRUN_GEN_V2 (default: VALIDATE + PING handshake) or a legacy one */
  int timeout_ms;         /* default per-operation timeout (default 300000, torch's) */
  int connect_timeout_ms; /* how long connect keeps retrying (default: timeout_ms) */
  int backoff_initial_ms; /* first retry delay (default 100); x1.5 each retry, +-50% jitter, cap */
  int backoff_max_ms;     /* retry delay cap (default 5000) */
  const char *key_prefix; /* default "/"; "" for raw wire keys */
  int quiet_connect;      /* 1: a connect time-out is returned without logging (the caller reports it) */
  int quiet_errors;       /* 1: a failed request is logged at debug level only (the caller reports it) */
  /* Called after each failed connect attempt (NULL: none), so that a caller that waits can say why: stage
   * TRUN_CONNECT_RESOLVE (the name does not resolve; err EHOSTUNREACH), TRUN_CONNECT_TCP (connect: err its
   * errno) or TRUN_CONNECT_HANDSHAKE (the server closed or garbled VALIDATE/PING: err ECONNRESET, EPROTO);
   * cause: the failure in words. */
  void (*on_connect_error)(void *arg, int stage, int err, const char *cause);
  void *on_connect_error_arg;
  /* A trun agent's token for the job's key space (server.h: trun_server_agent_token), presented on every
   * connect; NULL: none. A server that does not know it closes the connection: trun_client_connect then
   * fails with -EACCES. */
  const char *agent_token;
} trun_client_opts;

#define TRUN_CONNECT_RESOLVE 1
#define TRUN_CONNECT_TCP 2
#define TRUN_CONNECT_HANDSHAKE 3
/* The words for a failed connect to a store at host (on_connect_error's stage, err and what the client
 * said): the cause and, for a name that does not resolve, the Kubernetes readiness hint (client_cause.c). */
void trun_client_connect_cause(int stage, int err, const char *said, const char *host, char *out, size_t len);

/* The wire key whose CHECK presents an agent token (followed by the token), and the token's length bounds. */
#define TRUN_STORE_TOKEN_KEY "/trun/.agent-token/"
#define TRUN_STORE_TOKEN_MIN 16
#define TRUN_STORE_TOKEN_MAX 100

void trun_client_opts_default(trun_client_opts *o);
/* Connects (retrying refused/reset/unreachable with backoff until connect_timeout_ms) and, for V2,
 * sends VALIDATE + PING and checks the echoed nonce. */
int trun_client_connect(const trun_client_opts *o, trun_client **out);
void trun_client_close(trun_client *c);
/* 1 when the server took c's agent token (the job's key space is guarded there), 0 otherwise. */
int trun_client_is_agent(const trun_client *c);
/* The connection's socket fd (for poll by an event loop); -1 when closed. */
int trun_client_fd(const trun_client *c);
/* From now on, failed requests of c are logged as with opts.quiet_errors (1) or not (0): for a caller that
 * expects the server may go away (the job's end) and says so itself. */
void trun_client_set_quiet(trun_client *c, int quiet);
/* Frees c but keeps its connected (non-blocking) socket open and returns it, for an event loop that speaks
 * the protocol itself after the handshake; -1 when c was not connected. */
int trun_client_release_fd(trun_client *c);

int trun_client_set(trun_client *c, trun_slice key, trun_slice val);
/* torch's get: WAIT for the key (timeout_ms < 0: the default), then GET into *out (replaced). */
int trun_client_get(trun_client *c, trun_slice key, trun_buf *out, int timeout_ms);
int trun_client_add(trun_client *c, trun_slice key, int64_t delta, int64_t *result);
/* *out = the server's reply (see torch's compare_set rules). */
int trun_client_compare_set(trun_client *c, trun_slice key, trun_slice expected, trun_slice desired,
                            trun_buf *out);
/* Blocks until every key exists. On timeout sends CANCEL_WAIT (V2) or reconnects (legacy, which has no
 * cancel) so the connection stays in step, and returns -ETIMEDOUT. */
int trun_client_wait(trun_client *c, size_t n, const trun_slice *keys, int timeout_ms);
/* 1 all exist, 0 not all. */
int trun_client_check(trun_client *c, size_t n, const trun_slice *keys);
/* 1 deleted, 0 absent. */
int trun_client_delete(trun_client *c, trun_slice key);
int trun_client_append(trun_client *c, trun_slice key, trun_slice val);
/* WAIT for all keys then MULTI_GET; vals is an array of n buffers (each replaced). */
int trun_client_multi_get(trun_client *c, size_t n, const trun_slice *keys, trun_buf *vals, int timeout_ms);
int trun_client_multi_set(trun_client *c, size_t n, const trun_slice *keys, const trun_slice *vals);
int trun_client_num_keys(trun_client *c, int64_t *out);
int trun_client_ping(trun_client *c);
/* LIST: calls fn for each key (prefix stripped; keys without the prefix skipped). */
int trun_client_list(trun_client *c, void (*fn)(void *arg, trun_slice key), void *arg);
int trun_client_queue_push(trun_client *c, trun_slice key, trun_slice val);
/* Blocking pop like torch (WAIT then QUEUE_POP); -ETIMEDOUT when empty past timeout. */
int trun_client_queue_pop(trun_client *c, trun_slice key, trun_buf *out, int timeout_ms);
int trun_client_queue_len(trun_client *c, trun_slice key, int64_t *out);

/* Parses "HOST:PORT" or "[V6ADDR]:PORT" into host (NUL-terminated, at most cap bytes) and *port; 0 or
 * -EINVAL. */
int trun_client_parse_target(const char *s, char *host, size_t cap, int *port);
/* Parses a generation name: "v2" (torch >= 2.2), "1.13" or "2.0" (legacy numbering), "2.1"; 0 or -EINVAL. */
int trun_client_parse_gen(const char *s, trun_gen *out);

/* Convenience: a slice of a NUL-terminated string. */
static inline trun_slice trun_str(const char *s) {
  trun_slice r = {(const uint8_t *)s, 0};
  while (s[r.n]) r.n++;
  return r;
}

#endif
