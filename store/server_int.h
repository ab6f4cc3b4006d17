/* Internals of the TCPStore server shared by its files (libuv's convention: trun__ names are private).
 *
 * The files are layers by concern, top to bottom: each calls only files below it, never one above, so
 * their calls make no circle (scripts/check-layers.py --calls); a callback handed to libuv or to the key
 * space is a function of the same file or of one below, so none comes back up through a pointer either.
 *   server.c        start and close, the listeners, accept (at most opts.turn_conns a turn), the
 *                   options and counters (server.h).
 *                   May call: server_shard.c, server_admit.c, server_io.c, server_conn.c.
 *   server_shard.c  the loops: worker threads' start and stop, the hand-off of accepted sockets, the work
 *                   other threads give a shard (sockets to adopt, replies, access rules, evictions, stop).
 *                   May call: server_admit.c, server_io.c, server_conn.c.
 *   server_admit.c  who gets in: a new connection's peer, the access rules at accept and after a change,
 *                   the connection limits, probation beyond the per-peer limit, eviction.
 *                   May call: server_io.c, server_conn.c, server_acl.c.
 *   server_io.c     a connection's traffic on its shard's loop: read, parse, run its requests (held while
 *                   its output is full, deferred past the strangers' share of a turn), write, flush; the
 *                   ends of strangers' connections beyond a turn's share put off to later turns; the
 *                   waiters' callbacks (wake-ups, watch updates) and the connections they doom.
 *                   May call: server_conn.c, server_exec.c, server_acl.c.
 *   server_conn.c   a connection's state and end: its input buffer within the input budget, the queues of
 *                   its shard it is on (deferred, to end, flush, replies from other threads), the push limit,
 *                   close and refuse; the free of the server once its last handle closed.
 *                   May call: server_exec.c, server_auth.c, server_acl.c.
 *   server_exec.c   one request on the key space under kv_mu, the wait budgets, owned keys.
 *                   May call: server_auth.c.
 *   server_auth.c   the agents' key space and token. May call: server_acl.c.
 *   server_acl.c    the access rules (CIDR allow-list), the open connections per address, the connections
 *                   on probation by address and the shards' eviction queues. May call: nothing. */
#ifndef TRUN_STORE_SERVER_INT_H
#define TRUN_STORE_SERVER_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "base/base.h"
#include "kv.h"
#include "server.h"

#define READ_CHUNK 65536
#define TRUN__PROBATION_BUCKETS 1024 /* the connections on probation, hashed by address (server_admit.c) */

/* Counters are read by other threads (trun_server_get_stats): relaxed atomics. */
#define STAT_ADD(s, f, d) __atomic_add_fetch(&(s)->stats.f, (uint64_t)(int64_t)(d), __ATOMIC_RELAXED)

/* One allow-list entry: an address and a prefix length (IPv4 in a[0..4), IPv6 in a[0..16)). */
typedef struct {
  int family;
  uint8_t a[16];
  int prefix;
} acl_entry;

/* A root of the agents' key space (trun_server_protect): prefix, then, with after, decimal digits and after.
 */
typedef struct {
  char *prefix;
  char *after;
} prot_rule;

typedef struct conn conn;
typedef struct shard shard;

/* Threading. A server has opts.threads shards, each a libuv loop with its own connections: shard 0 runs on
 * the caller's loop and owns the listener, the others run on threads of their own. Accepted sockets are
 * dealt round-robin; a connection lives on its shard until it closes. One mutex (kv_mu) guards the key space
 * and every registration in it. A write that wakes a waiter of another shard queues the reply bytes on that
 * connection (xout, under its shard's mu) and pokes the shard's async handle; the owner moves them to the
 * connection's output before it handles the connection's next request or on that poke, so a wake-up is
 * never sent after a later reply (CANCEL_WAIT after STOP_WAITING). With one shard nothing crosses threads
 * but the access rules. */
struct shard {
  trun_server *srv;
  int index;
  uv_loop_t *loop; /* shard 0: the caller's; else &own */
  uv_loop_t own;
  pthread_t thread;
  uv_idle_t reaper; /* closes doomed connections outside the key space's callbacks */
  uv_async_t async; /* work from other threads: sockets to adopt, queued replies, access rules, stop */
  int ndoomed;
  uv_prepare_t turn; /* each loop turn, before polling: the strangers' work budget anew, deferred conns run */
  uv_idle_t kick;    /* active while connections are deferred or wait to end: the loop does not block */
  size_t spent;      /* work of connections without the agent token in this turn (opts.turn_work) */
  conn *dhead, *dtail; /* deferred connections, in the order they were put off */
  conn *ehead, *etail; /* connections their peers closed, to close in later turns (opts.turn_conns) */
  int ended;           /* connections without the agent token closed for their peer in this turn */
  conn *conns;         /* modified by this shard's thread only, under srv->conns_mu */
  conn *flushq; /* connections of this shard that got bytes outside their own request: flushed before the
                   callback that queued them returns (trun__shard_flush_woken) */
  unsigned acl_seen;
  pthread_mutex_t mu; /* guards everything below */
  int *fds;           /* accepted sockets for this shard to adopt */
  size_t nfds, capfds;
  conn *xq; /* connections with bytes in xout */
  int stop;
  int evict;                /* atomic: a connection of this shard was marked for eviction (conn.evict) */
  conn *evictq;             /* under srv->conns_mu: its connections marked for eviction, to close */
  uint8_t rbuf[READ_CHUNK]; /* shared read buffer, see on_alloc */
};

struct trun_server {
  uv_loop_t *loop;
  uv_tcp_t listeners[TRUN_SERVER_MAX_LISTENERS];
  int nlisteners;
  uv_prepare_t accept_turn; /* each turn of the caller's loop: the accept budget anew (opts.turn_conns) */
  uv_idle_t accept_kick;    /* active while a listener waits for the next turn: the loop does not block */
  int accept_later[TRUN_SERVER_MAX_LISTENERS]; /* a connection is left in listener i for the next turn */
  int turn_accepted;                           /* connections accepted in this turn */
  trun_server_opts opts;
  trun_kv *kv;
  pthread_mutex_t kv_mu;    /* the key space and the waiters' registrations */
  shard *cur;               /* under kv_mu: the shard whose request is being handled */
  pthread_mutex_t conns_mu; /* the shards' connection lists, for per-peer counting across shards */
  uint64_t conn_seq;        /* under conns_mu: accept order of connections (conn.seq) */
  trun_kv *peers;           /* under conns_mu: open connections per address (trun__peer_count) */
  /* Under conns_mu: the connections on probation (not yet evicted) by peers' keyed hash of their address,
   * so that admitting one looks only at those of its bucket (server_admit.c). */
  conn *probation[TRUN__PROBATION_BUCKETS];
  unsigned probation_walk_max; /* the most bucket entries one admission has looked at (for tests) */
  shard **shards;
  int nshards;
  unsigned next_shard;
  trun_server_stats stats;
  int port;
  int closing;
  int handles_open; /* on the caller's loop: listeners, shard 0's handles and connections, hand-off sockets */
  void (*done)(void *arg);
  void *done_arg;
  /* Access control: changed from any thread under acl_mu; acl_gen tells open connections to re-check. */
  pthread_mutex_t acl_mu;
  acl_entry *acl;
  size_t nacl, capacl;
  int acl_on;
  unsigned acl_gen;
  unsigned refused_logged;
  unsigned budget_logged; /* closes for the wait budgets logged so far */
  /* Owned keys (trun_server_own_keys), set before connections come; read under kv_mu. */
  char *own_marker;
  trun_server_gone_fn own_gone;
  void *own_arg;
  /* The agents' key space (server_auth.c), set before connections come; read under kv_mu. */
  char *token; /* NULL: no agent token, every connection is a stranger */
  prot_rule *prot;
  size_t nprot;
  char *addr_marker; /* trun_server_address_keys; NULL: none */
};

struct conn {
  uv_tcp_t tcp;
  trun_server *srv;
  shard *sh;
  conn *prev, *next;
  int listed;       /* in sh->conns */
  int peer_counted; /* under conns_mu: counted in srv->peers (trun__peer_count) */
  trun_gen gen;
  trun_buf in;       /* bytes not yet parsed */
  size_t in_acct;    /* in.cap as counted in srv->stats.input_bytes */
  int in_over;       /* on_alloc refused to grow `in` (the server's input budget) */
  size_t need;       /* do not parse again before in.len reaches this */
  trun_req_state ps; /* where the parse of the request at in[0] goes on */
  int held;          /* requests wait in `in` until the output drains (max_pending_out) */
  trun_buf out;      /* replies not yet handed to the kernel or libuv */
  trun_buf wbuf;     /* bytes of the write in flight */
  uv_write_t wreq;
  int writing;
  int reading;
  int closing;
  const char *doomed;  /* close reason set inside a key-space callback */
  conn *fprev, *fnext; /* in sh->flushq while fqueued; a closing connection is never there */
  int fqueued;
  conn *anext;         /* in on_shard_async's local list of connections with replies from other threads */
  trun_buf xout;       /* under sh->mu: replies queued by other shards' threads */
  conn *xprev, *xnext; /* in sh->xq while xqueued (under sh->mu; read without it as an atomic hint) */
  int xqueued;
  const char *xfail; /* under sh->mu: why replies queued by another thread were lost (c closes) */
  int xwatch;        /* under sh->mu: xout holds a watch update (bounded by trun__push_limit) */
  trun_waiter w;
  char peer[64];
  acl_entry addr; /* the peer's address (prefix unused); family 0 when unknown */
  unsigned acl_gen;
  trun_buf owned, owned_val; /* under kv_mu: the key this connection owns (trun_server_own_keys) and the
                                value it set; owned.len 0: none */
  int agent;                 /* under kv_mu: presented the job's agent token (server_auth.c) */
  int deferred;              /* in sh->dhead's list: its requests wait for a later turn (turn_work) */
  int probation;       /* atomic: admitted beyond max_conns_per_peer; must present the agent token first */
  int evict;           /* under conns_mu: an over-the-limit newcomer evicts it; its shard closes it */
  conn *bprev, *bnext; /* under conns_mu: in srv->probation[] while blisted */
  int blisted;
  conn *vprev, *vnext; /* under conns_mu: in sh->evictq while vqueued */
  int vqueued;
  uint64_t seq; /* under conns_mu: accept order */
  conn *dprev, *dnext;
  int end_later; /* in sh->ehead's list: its peer closed it; closed in a later turn (turn_conns) */
  conn *eprev, *enext;
  char why[320]; /* the reason of a refusal that names the request */
};

/* ---- server_acl.c ----------------------------------------------------------------------------- */
/* The address of sa (IPv4-mapped IPv6 as IPv4). 0, or -1 for another family. */
int trun__sockaddr_entry(const struct sockaddr *sa, acl_entry *e);
int trun__addr_allowed(trun_server *s, const acl_entry *addr);
/* Under conns_mu: adds delta to the open connections of addr (family 0: the peers of unknown address,
 * together); *now (may be NULL) is the count after. A hash lookup (the connection list is never walked):
 * admitting N connections costs O(N), not O(N^2). 0 or -ENOMEM. */
int trun__peer_count(trun_server *s, const acl_entry *addr, int delta, int64_t *now);
/* Under conns_mu: the connections on probation (srv->probation[], by srv->peers' keyed hash of their address,
 * so that no peer can choose addresses that pile up in one bucket) and each shard's queue of connections
 * marked for eviction (sh->evictq). */
unsigned trun__probation_bucket(const trun_server *s, const acl_entry *a);
void trun__probation_add(conn *c);
void trun__probation_drop(conn *c);
void trun__evict_queue(conn *c);
void trun__evict_dequeue(conn *c);
/* c leaves both (it closes). */
void trun__probation_forget(conn *c);

/* ---- server_auth.c, under kv_mu --------------------------------------------------------------- */
/* Before r executes: 1 when it was the agent token's CHECK (answered), 0 to execute it, or -EACCES /
 * -ENOMEM with *why set (the connection is closed): a write to the agents' key space by a connection that
 * did not present the token, or a wrong token. */
int trun__server_auth_request(conn *c, const trun_req *r, const char **why);
/* Whether c's SET of key makes c its owner (trun_server_own_keys). */
int trun__key_owned(const conn *c, trun_slice key);
/* 1 when LIST must not show key to c: it is the agents' (a protected key space) and c presented no agent
 * token. The run id in those keys is what the derived token is made from (docs/store.md). */
int trun__key_hidden(const conn *c, trun_slice key);
void trun__server_auth_free(trun_server *s);

/* ---- server_exec.c, under kv_mu --------------------------------------------------------------- */
/* Executes one request. Returns 0, or a negative errno with *why set (the connection is closed). */
int trun__exec_request(conn *c, const trun_req *r, const char **why);
/* On c's thread, as c ends: the key it owns still holds its value: its owner is gone (own_gone). */
void trun__conn_gone(conn *c);

/* ---- server_conn.c ---------------------------------------------------------------------------- */
/* Frees the server and what it holds; its handles are closed. */
void trun__server_free(trun_server *s);
/* A handle on the caller's loop was closed: the last one frees the server once it is closing. */
void trun__server_handle_closed(trun_server *s);
/* The unsent replies that a push (wake-up, watch update) may take a connection's output to; 0: no limit. */
size_t trun__push_limit(const trun_server *s);
/* Owner thread: c's replies not yet sent. */
static inline size_t trun__pending_out(const conn *c) { return c->out.len + c->wbuf.len; }
/* Gives c's input buffer back, and its share of the server's input budget. */
void trun__conn_in_release(conn *c);
/* Makes room for extra more input bytes in c->in within the server's input budget, counted before any
 * allocation. 0, -ENOBUFS over the budget, -ENOMEM. */
int trun__conn_in_reserve(conn *c, size_t extra);
/* Closes c for rc of trun__conn_in_reserve (the input budget, or memory). */
void trun__conn_in_refused(conn *c, int rc);
/* c's requests wait for a later turn: it stops reading until the turn runs them (server_io.c). */
void trun__conn_defer(conn *c);
/* Takes c off its shard's deferred list. */
void trun__conn_undefer(conn *c);
/* c's peer closed it beyond the turn's share of such ends (turn_conns): it is not read, and closes in a
 * later turn (server_io.c, oldest first). */
void trun__conn_end_later(conn *c);
/* Takes c off its shard's list of connections to end. */
void trun__conn_unend(conn *c);
/* Owner thread: c got bytes outside its own request (a wake-up or watch update from another connection's
 * request or end): flushed when the shard's current callback ends (trun__shard_flush_woken). */
void trun__conn_queue_flush(conn *c);
/* Owner thread: takes c off the flush queue. */
void trun__conn_unqueue_flush(conn *c);
/* Queues bytes for c from a thread that is not c's (under kv_mu): they go out through c's shard. With
 * strings, key, old and new_ follow p as protocol strings (a WATCH_KEY update). */
void trun__conn_queue_remote(conn *c, const uint8_t *p, size_t n, trun_slice key, trun_slice old,
                             trun_slice new_, int strings);
/* Owner thread: moves what other threads queued for c into its output, in order. 0, or -1 when c has to
 * close (c->xfail: a reply was lost to memory, or c does not read its watch updates). */
int trun__conn_take_remote(conn *c);
/* Owner thread, sh->mu held: trun__conn_take_remote for every connection of sh with queued replies; one
 * that lost some is doomed (c->doomed = c->xfail). Returns them linked by anext. */
conn *trun__shard_take_remote(shard *sh);
/* Closes c (why: logged and counted as rejected; NULL: the peer left): its waits and watches end, the key
 * it owns is gone; freed once libuv lets go. */
void trun__conn_close(conn *c, const char *why);
/* Closes a connection the access rules or limits do not admit: counted, and logged for the first few only
 * (a scanner must not flood the log). */
void trun__conn_refuse(conn *c, const char *why);

/* ---- server_io.c ------------------------------------------------------------------------------ */
/* A connection of shard sh (its socket not open yet), counted; NULL (logged) when out of memory. */
conn *trun__conn_new(shard *sh);
/* c is admitted: starts reading. */
void trun__conn_start(conn *c);
/* Hands c's replies to the kernel or libuv; runs held requests as the output drains; then reads or not. */
void trun__conn_flush(conn *c);
/* Owner thread: flushes every queued connection. Every callback of a shard's loop that may run a request or
 * close a connection (a close wakes the waiters of the keys it owned) ends with it. */
void trun__shard_flush_woken(shard *sh);
/* Starts the turn and kick handles of sh on its loop. */
void trun__shard_turn_init(shard *sh);
/* Closes them (cb: as for the shard's other handles). */
void trun__shard_turn_close(shard *sh, uv_close_cb cb);

/* ---- server_admit.c --------------------------------------------------------------------------- */
/* On shard 0: accepts a connection from listener and admits it. */
void trun__shard_accept(shard *sh, uv_stream_t *listener);
/* On shard sh's thread: a socket accepted by shard 0 for it. */
void trun__shard_adopt(shard *sh, int fd);
/* On a shard's loop after the rules changed: connections they no longer admit are closed now, not at
 * their next request (a connection parked in WAIT or WATCH_KEY would otherwise keep receiving). */
void trun__shard_recheck_acl(shard *sh);
/* On a shard's loop: closes its connections marked for eviction (sh->evictq); sh->evict says some are. */
void trun__shard_evict(shard *sh);

/* ---- server_shard.c --------------------------------------------------------------------------- */
/* Closes every connection of sh and the sockets waiting to be adopted. */
void trun__shard_close_all(shard *sh);
void trun__on_shard_handle_closed(uv_handle_t *h);
/* Accepts into a handle of the caller's loop and passes a duplicate of the socket to shard dst. */
void trun__hand_off(trun_server *s, uv_stream_t *listener, shard *dst);
/* Creates shard 0 on the caller's loop and starts n - 1 worker shards. 0 or a negative libuv error. */
int trun__shards_start(trun_server *s, int n);
/* Stops and joins the worker shards; their connections close on their own threads. */
void trun__shards_stop(trun_server *s);

#endif
