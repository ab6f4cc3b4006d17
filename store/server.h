/* TCPStore server on a libuv loop: both torch wire generations on one port. */
#ifndef TRUN_STORE_SERVER_H
#define TRUN_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "codec.h"

typedef struct trun_server trun_server;

#define TRUN_SERVER_MAX_LISTENERS 8
/* Connections from one address admitted beyond max_conns_per_peer for the job's agents to get in. */
#define TRUN_SERVER_PEER_RESERVE 16
/* Defaults of trun_server_opts_default: one reply at most 128 MiB (two largest values), the input all
 * connections buffer together at most 1 GiB. */
#define TRUN_SERVER_DEFAULT_MAX_REPLY ((size_t)128 << 20)
#define TRUN_SERVER_DEFAULT_MAX_INPUT ((size_t)1 << 30)
/* What one wait registration costs against the wait budgets below, beside its key's bytes. */
#define TRUN_SERVER_WAIT_REG_COST 256
/* Wait registrations (WAIT, BARRIER, WATCH_KEY; counted as TRUN_SERVER_WAIT_REG_COST + the key each): 1 MiB
 * for one connection, 256 MiB for all together. Connections that presented the agent token are not limited.
 */
#define TRUN_SERVER_DEFAULT_MAX_WAIT_CONN ((size_t)1 << 20)
#define TRUN_SERVER_DEFAULT_MAX_WAIT_TOTAL ((size_t)256 << 20)
/* The work (keys and KiB of requests, see trun_server_opts.turn_work) that connections without the agent
 * token get per turn of a loop, all together. */
#define TRUN_SERVER_DEFAULT_TURN_WORK 32768
/* Connections accepted per turn of the caller's loop (the one with the listeners), and connections without
 * the agent token whose peers left closed per turn of each loop: a flood of connects waits in the listen
 * queue, and a flood of ends for later turns, while the established connections are served every turn. */
#define TRUN_SERVER_DEFAULT_TURN_CONNS 64

typedef struct {
  const char *host; /* NULL or "": "::" dual-stack, else 0.0.0.0 */
  /* Instead of host: listen on each of these numeric addresses, all on one port (a name that resolves to
   * several loopback addresses); nhosts at most TRUN_SERVER_MAX_LISTENERS. */
  const char *const *hosts;
  int nhosts;
  int port; /* 0: a free port, see trun_server_port */
  trun_limits limits;
  trun_gen legacy;        /* generation of connections that do not start with VALIDATE */
  int backlog;            /* 0: net.core.somaxconn */
  size_t max_pending_out; /* a connection whose unsent replies exceed this: its requests wait (none is run
                             or read) until they drain to half of it */
  size_t max_reply;       /* 0: no limit; else a request whose reply would be larger closes the conn, and
                             so do pushed watch updates beyond max_pending_out + max_reply unread */
  size_t max_input_total; /* 0: no limit; else the input buffered by all connections together; a
                             connection whose request would take it beyond is closed */
  int max_conns_per_peer; /* 0: no limit; else more from one address are refused, except, on a server
                             with an agent token, peer_reserve more on probation: each must
                             present the token before any request but PING (else it is closed); one more
                             evicts the peer's oldest such connection that has not presented it yet */
  int max_conns;          /* 0: no limit; else connections beyond it are refused (keeps the host's fds) */
  size_t max_conn_memory; /* 0: no limit; else a request that needs more input buffer closes the conn */
  int threads;            /* event loops serving connections (default 1: only the caller's loop); each
                             further one runs on a thread of its own, see trun_server_start */
  size_t max_wait_conn;   /* 0: no limit; else a connection's wait registrations (TRUN_SERVER_WAIT_REG_COST +
                             key   each) at most this: a WAIT / BARRIER / WATCH_KEY beyond it closes the conn */
  size_t max_wait_total;  /* 0: no limit; else every connection's registrations together; the connection
                             whose request would take them beyond is closed */
  int peer_reserve;       /* connections on probation beyond max_conns_per_peer (default
                             TRUN_SERVER_PEER_RESERVE; at least 1) */
  size_t turn_work;       /* 0: no limit; else the requests of connections without the agent token run at
                             most this much work per turn of a loop (a request costs 1 + its keys + its
                             size / 256), the rest in later turns: agents' requests never wait behind more */
  int turn_conns;         /* 0: no limit; else connections accepted per turn of the caller's loop at most
                             (default TRUN_SERVER_DEFAULT_TURN_CONNS), the rest stay in the listen queue
                             for later turns; and as many connections without the agent token whose peer
                             left closed per turn of each loop, the rest (not read) in later turns:
                             established connections never wait behind a flood of connects or ends */
} trun_server_opts;

#define TRUN_SERVER_MAX_THREADS 64

typedef struct {
  uint64_t connections;     /* open now */
  uint64_t accepted;        /* since start */
  uint64_t rejected;        /* closed for bad input */
  uint64_t ops;             /* requests handled */
  uint64_t waiting;         /* connections with a pending WAIT */
  uint64_t refused;         /* closed by the access rules (allow-list, per-peer limit) */
  uint64_t input_bytes;     /* input buffered now by every connection (partial requests, held requests) */
  uint64_t wait_bytes;      /* wait and watch registrations now, as counted against max_wait_total */
  uint64_t over_budget;     /* connections closed for a wait over max_wait_conn or max_wait_total */
  uint64_t deferred;        /* times a connection's requests were put off to a later turn (turn_work) */
  uint64_t accepts_put_off; /* times a listener's connections were left for a later turn (turn_conns) */
  uint64_t ends_put_off;    /* connections whose peer left, closed in a later turn (turn_conns) */
} trun_server_stats;

void trun_server_opts_default(trun_server_opts *o);
/* Binds and listens. Returns 0 or a negative libuv error (UV_EINVAL for threads outside 0..64 or nhosts
 * outside 0..TRUN_SERVER_MAX_LISTENERS); *out is
 * set on success. With threads > 1 the server starts threads - 1 threads, each with its own loop, and deals
 * accepted connections round-robin over them and the caller's loop; they block every signal and are
 * joined by trun_server_close. */
int trun_server_start(uv_loop_t *loop, const trun_server_opts *o, trun_server **out);
int trun_server_port(const trun_server *s);
/* Safe from any thread. */
void trun_server_get_stats(const trun_server *s, trun_server_stats *st);

/* Access control, callable from any thread while the server runs. Off by default: every peer is served.
 * trun_server_allow adds "ADDR" or "ADDR/PREFIX" (IPv4 or IPv6; an IPv4-mapped IPv6 peer matches IPv4
 * rules): 0, -EINVAL for text that is not one, -ENOMEM. trun_server_allow_enforce(s, 1) admits only peers
 * that match a rule: new connections are refused at accept, open ones are closed at their next read. */
int trun_server_allow(trun_server *s, const char *cidr);
void trun_server_allow_enforce(trun_server *s, int on);
/* Replaces the whole list by rules[0..n) at once (open connections are checked against the new list): 0,
 * -EINVAL (the list is unchanged) or -ENOMEM. */
int trun_server_allow_replace(trun_server *s, const char *const *rules, size_t n);
/* Whether a peer at sa would be admitted now. */
int trun_server_peer_allowed(trun_server *s, const struct sockaddr *sa);
/* Parses "ADDR[/PREFIX]" ([v6] brackets allowed): 0 or -EINVAL. */
int trun_server_parse_cidr(const char *text, int *family, uint8_t addr[16], int *prefix);
/* The agents' key space. trun_server_protect adds a root: a key that begins with prefix, then (with after)
 * one or more decimal digits and after, then '/' is the agents' (e.g. "/trun/<run_id>/", or
 * "/torch.rendezvous.<run_id>." with after "/trun"). Once a token is set (trun_server_agent_token, 16 to 100
 * bytes), only connections that presented it may write those keys: a SET, APPEND, COMPARE_SET, ADD, DELETE,
 * BARRIER, QUEUE_PUSH / POP or MULTI_SET of one from any other closes the connection (counted as refused,
 * logged with the key); reads stay open. A connection presents the token with a CHECK of the single key
 * TRUN_STORE_TOKEN_KEY followed by it (client.h: trun_client_opts.agent_token): READY when it matches, the
 * connection is closed when it does not, NOT_READY (an ordinary missing key) on a server without a token.
 * Every other key keeps torch's semantics. Call before the server has connections. 0, -EINVAL, -ENOMEM. */
int trun_server_agent_token(trun_server *s, const char *token);
int trun_server_protect(trun_server *s, const char *prefix, const char *after);
/* Address keys: an agent's SET of "<root>/<marker><digits>" or "<root>/<segment><marker><digits>" (marker
 * e.g. "/addr/") must hold the bare numeric address the connection comes from (IPv4-mapped as IPv4), else
 * the connection is closed: what such a key says is a fact the server saw, never a prefix or another
 * node's address. 0, -EINVAL (marker not starting with '/'), -ENOMEM. */
int trun_server_address_keys(trun_server *s, const char *marker);
/* Owned keys, for liveness: a key of the agents' key space of the form "<root>/<marker><digits>" or
 * "<root>/<segment><marker><digits>" (marker e.g. "/alive/", no other match counts) is owned by the agent
 * connection that last SET it; a connection without the token owns nothing. When that connection ends (the
 * peer closed or reset it, or the server refused it) while the key still holds the value it set, the server
 * calls gone(arg, s, key, value, peer) on the thread that served the connection, with the key space locked:
 * gone may write it through trun_server_compare_set and trun_server_add (waiters are woken as for a
 * request) and must not block. A DELETE of the key by its owner releases it; so
 * does the server's own close. Call before the server has connections; gone NULL turns it off. 0 or -ENOMEM.
 */
typedef void (*trun_server_gone_fn)(void *arg, trun_server *s, trun_slice key, trun_slice value,
                                    const char *peer);
int trun_server_own_keys(trun_server *s, const char *marker, trun_server_gone_fn gone, void *arg);
/* The key space in-process, only from inside a gone callback: what COMPARE_SET and ADD requests do (reply:
 * the value now, valid until the key changes). 0 or a negative errno. */
int trun_server_compare_set(trun_server *s, trun_slice key, trun_slice expected, trun_slice desired,
                            trun_slice *reply);
int trun_server_add(trun_server *s, trun_slice key, int64_t delta, int64_t *result);

/* Closes the listener and every connection; the server is freed once libuv has released the handles
 * (run the loop). done may be NULL. */
void trun_server_close(trun_server *s, void (*done)(void *arg), void *arg);

#endif
