/* Internals of the rendezvous module (libuv's convention: trun__ names are private to it): the struct behind
 * rdzv.h's opaque trun_rdzv, the backend interface each of static/static.c, c10d/c10d.c and trun/trun.c
 * implements, and the helpers they share (rdzv_store.c: waits and key clean-up on the store; who serves it;
 * rdzv_conf.c: --rdzv-conf). */
#ifndef TRUN_RDZV_INT_H
#define TRUN_RDZV_INT_H

#include <sys/socket.h>

#include "rdzv.h"
#include "store_acl.h"

/* The rendezvous (rdzv.h's opaque trun_rdzv). */
struct trun_rdzv {
  const trun_config *cfg;
  int nproc;
  trun_rdzv_round info;  /* what the last round settled (the backends set it; trun_rdzv_info) */
  char key_space[512];   /* where this round's trun keys live (the doctor's exchange), without a final '/' */
  int foreign_peers;     /* peers may be torchrun agents, which publish nothing of trun's */
  char host_addr[256];   /* this node's address as published (--local-addr or FQDN) */
  char agent_tag[20];    /* random, made once per agent (kept by trun__rdzv_reset): trun__rdzv_agent_id */
  trun_store_host *host; /* the rendezvous store, when this agent serves it */
  trun_store_host *worker_host;         /* the workers' store, when this agent serves one of its own (c10d) */
  trun_client *client;                  /* this agent's connection to the rendezvous store (raw keys) */
  char token[TRUN_STORE_TOKEN_MAX + 1]; /* the job's agent token (trun_rdzv_token), on every connection */
  int token_explicit;                   /* 1: TRUN_RDZV_TOKEN or --rdzv-conf trun_token; 0: derived */
  char store_addr[256];                 /* where this agent reaches the rendezvous store */
  int store_port;
  trun_gen store_gen; /* its wire generation */
  /* The agent's hooks (trun_rdzv_opts, set by trun_rdzv_init and kept by trun__rdzv_reset). */
  int (*poll)(void *arg);
  void *poll_arg;
  const trun_rdzv_ops *be; /* the backend, chosen by trun_rdzv_init */
  void *state;             /* the backend's own state */
  struct trun_live *live;  /* liveness (rdzv_live.c), NULL for a single node */
  /* The one door of a round's fate (rdzv_door.c): the agent's callback, set by trun_rdzv_watch_open, and the
   * round it watches (atomic: the liveness thread reads it). */
  trun_rdzv_end_fn on_end;
  void *on_end_arg;
  int door_round;
  /* The reports of the rendezvous's waits, and the wait in progress (rdzv_wait.c). */
  trun_wait_hook on_wait;
  void *on_wait_arg;
  trun_wait wait;
  void (*wait_have)(struct trun_rdzv *r); /* refreshes wait.have before a report (NULL: nothing) */
  /* This node as the exclusion list names it (NULL: by its address only). */
  const trun_node *node;
  /* The job's exclusion list as read at the start of the last round (rdzv_exclude.c): every record, with
   * what is news to this node since the round before (n_excl_news of them); excluded: this node is on it
   * (trun_rdzv_next_round failed for that): the exit code of its kind, else 0. */
  trun_rdzv_exclusion *excl;
  int n_excl, n_excl_news, excl_read, excluded;
  /* Another node ended the round (trun_rdzv_store_may_go): the store may go away with it, and this node's
   * requests until the next round say nothing of their own when it does. */
  int store_may_go;
};

/* What a backend's tick learns while the workers run (the liveness thread hands it on as a fate:
 * rdzv_live.c). */
typedef enum {
  TRUN_RDZV_STEADY = 0,   /* nothing changed */
  TRUN_RDZV_NEW_NODES,    /* nodes wait to join: restart the workers into a new world (no restart used) */
  TRUN_RDZV_PEER_RESTART, /* a node of this round left it to rejoin after a failure there: restart too */
} trun_rdzv_news;

struct trun_rdzv_ops {
  const char *name;
  int elastic; /* a round may go on with other nodes than the last one's */
  /* The wire generation of its store for cfg (NULL: V2). c10d: that of the torch --rdzv-conf torch_version
   * names (1.13, 2.0 and 2.1 had no VALIDATE), else V2. */
  trun_gen (*store_gen)(const trun_config *cfg);
  /* Hosts or reaches the store; sets everything init owes r. 0 or -1 with a reason. */
  int (*init)(trun_rdzv *r, char *err, size_t errlen);
  /* One round: sets the round's fields of r. 0 or -1 with a reason. */
  int (*next_round)(trun_rdzv *r, int round, char *err, size_t errlen);
  /* --store-allow-peers: before the round (round: the agent's count) this node says where it connects
   * from; after it the stores it hosts admit only the round's nodes. 0, or -1 with a reason. NULL: none. */
  int (*publish_addr)(trun_rdzv *r, int round);
  int (*admit_round)(trun_rdzv *r, int round, char *err, size_t errlen);
  /* Tick interval in ms while the workers run (0 or NULL: no ticks), and the tick, which the rendezvous's
   * thread (rdzv_live.c) runs on its own connection c. */
  int (*tick_ms)(const trun_rdzv *r);
  trun_rdzv_news (*tick)(trun_rdzv *r, trun_client *c, int *nodes);
  /* Nodes waiting that were not in the round, asked after a failure here (trun_rdzv_failed_here tells the
   * agent through the door); NULL: 0. */
  int (*new_nodes_waiting)(trun_rdzv *r);
  /* Whether a round ends through the end key (trun_rdzv_ends_by_key). */
  int (*ends_by_key)(const trun_rdzv *r);
  void (*finish)(trun_rdzv *r, int code, int signaled);
  void (*close)(trun_rdzv *r);
};

extern const trun_rdzv_ops trun__rdzv_static, trun__rdzv_c10d, trun__rdzv_trun;
/* rdzv_backend.c: the backend cfg asks for: static for --standalone and a job without an endpoint port. */
const trun_rdzv_ops *trun__rdzv_backend_of(const trun_config *cfg);

/* ---- rdzv_store.c ---- */
/* Options for a connection to the job's rendezvous store from outside any round (--rdzv-status,
 * --list-excluded, a node that never joins): cfg's endpoint, raw keys, the generation a c10d store of that
 * torch speaks, timeout_ms for the connect and each request, no connect error lines (the caller says why). */
void trun__rdzv_outside_opts(const trun_config *cfg, int timeout_ms, trun_client_opts *o);
/* The one place an agent's connection to the job's rendezvous store is described: r's store address, port
 * and generation (set them first), raw keys, the agents' token, timeout_ms for each request (the connect
 * keeps the client's default: the same), no connect error lines (the caller says why). Callers change only
 * what their connection needs (connect_timeout_ms, quiet_errors). */
void trun__rdzv_agent_opts(const trun_rdzv *r, int timeout_ms, trun_client_opts *o);
/* Waits until key exists (at most timeout_ms), in slices so that r->poll can interrupt: 0, -ETIMEDOUT,
 * -EINTR or another negative errno. */
int trun__rdzv_wait_key(trun_rdzv *r, const char *key, int timeout_ms);
/* trun_client_connect retried in slices so that r->poll can interrupt: 0 or a negative errno. Connected,
 * it settles --local-addr auto (trun__rdzv_auto_addr). */
int trun__rdzv_connect_polling(trun_rdzv *r, trun_client_opts *o, int timeout_ms);
/* The value of key k on c, cut to len - 1 bytes: 1 present, 0 absent ("" in out), or a negative errno. */
int trun__rdzv_get_text(trun_client *c, const char *k, char *out, size_t len);
/* The counter k (an ADD key) read without writing it, as a reader outside the job may (the store closes a
 * connection without the agents' token that ADDs, even 0, to their key space): *n, 0 when k is missing.
 * 0, -EPROTO when k holds no integer, or a negative errno. */
int trun__rdzv_get_count(trun_client *c, const char *k, int64_t *n);
/* Deletes every key of the last attempt's workers: all but the agents' own /trun/ keys. 0 or -errno. */
int trun__rdzv_wipe_worker_keys(trun_rdzv *r);
/* Resets r for a backend's init, keeping the agent's hooks (poll, on_wait, node) and agent_tag (made the
 * first time); sets cfg, nproc, host_addr (--local-addr or the FQDN). */
void trun__rdzv_reset(trun_rdzv *r, const trun_config *cfg, int nproc, const trun_rdzv_ops *be);
/* This agent's id in the rendezvous, its alive/<g> value and what a cut-off record names it by:
 * "addr pid local_id tag" (local_id 0; tag r->agent_tag, left out while ""): two agents of one host (the
 * same address; pids of their own PID namespaces may be equal) have different ones. */
void trun__rdzv_agent_id(const trun_rdzv *r, char *out, size_t len);
/* torch's _matches_machine_hostname, plus this host's interface addresses (so that an address given on a
 * secondary NIC or in a network namespace counts too): 1 when host names this machine. */
int trun__rdzv_is_this_host(const char *host);
/* The elastic backends' store: served here when this host is the endpoint (is_host, or torch's guess:
 * the endpoint names this host), then reached with wire generation gen. 0 or -1 with a reason. */
int trun__rdzv_elastic_connect(trun_rdzv *r, trun_gen gen, char *err, size_t errlen);
/* The end-of-round protocol of the static and trun backends, in the key space /trun/<run_id>/r<round>/:
 * "end" (first announcement wins), "done" (nodes that succeeded), "failure/<group rank>". */
void trun__rdzv_round_key(const trun_rdzv *r, int round, const char *what, char *out, size_t len);
/* Stops the stores, closes the connection. */
void trun__rdzv_close_stores(trun_rdzv *r);

/* ---- rdzv_wait.c ---- */
/* Starts r->wait unless one is in progress (a wait inside a wait reports as the outer one): 1 started (end
 * it with trun__rdzv_wait_end), 0 not. have: refreshes r->wait.have before each report (NULL: none). */
int trun__rdzv_wait_begin(trun_rdzv *r, const char *kind, double timeout_s, const char *timeout_key,
                          void (*have)(trun_rdzv *r), const char *what_fmt, ...)
    __attribute__((format(printf, 6, 7)));
void trun__rdzv_wait_end(trun_rdzv *r, int started);
/* Between the slices of a wait: reports r->wait when due, then asks r->poll. Non-zero: interrupted. As a
 * poll hook (trun_dyn, trun_fast): arg is r. */
int trun__rdzv_poll(void *arg);
/* A trun_client_opts.on_connect_error for r's store connections (arg r): the cause of r->wait. */
void trun__rdzv_connect_error(void *arg, int stage, int err, const char *said);
/* ---- rdzv_attempt.c ---- */
/* Before an elastic round: raises the job's attempt in the rendezvous store to r->attempt. After it:
 * r->attempt becomes the round's attempt, the same for every node of the round. 0 or a negative errno (said;
 * r->attempt is then left as it was). */
int trun__rdzv_attempt_propose(trun_rdzv *r);
int trun__rdzv_attempt_settle(trun_rdzv *r);

/* ---- rdzv_exclude.c ---- */
/* Before a round: reads the job's exclusion list into r->excl (marking news) and, where this node is on it,
 * sets r->excluded and returns -1 with the cause in err. */
int trun__rdzv_exclusion_round(trun_rdzv *r, char *err, size_t errlen);

/* s (NULL: "") into out, cut to len - 1 bytes, with every C0 control and DEL as a C escape (\n, \t, \xNN):
 * words of a record any token holder (or, for open keys, anyone) wrote reach terminals as text. */
void trun__rdzv_escape(const char *s, char *out, size_t len);
/* 1 when s is a name as a node's identity holds it: non-empty (unless empty_ok), not starting with '-'
 * (an option), only letters, digits and the characters of extra. A host name that is not one goes nowhere
 * (a Slurm --exclude list above all). */
int trun__rdzv_name_ok(const char *s, const char *extra, int empty_ok);

/* ---- rdzv_job.c: the job's record, for --rdzv-status ---- */
/* What every trun agent of a job publishes in its rendezvous store under /trun/<run_id>/job (JSON; the first
 * agent's stands, compare-and-set): the job as its agents were started, which a reader without the job's
 * command line (trun --rdzv-status) cannot know from the rendezvous keys alone. Open to read: nothing in it
 * is secret (no token, no --rdzv-conf but torch_version). */
typedef struct trun__rdzv_job {
  trun_rdzv_backend backend;
  int min_nodes, max_nodes;
  char nproc[16];         /* --nproc-per-node as given: a number, gpu, cpu or auto */
  char torch_version[16]; /* --rdzv-conf torch_version ("": not given) */
  char host[256];         /* the agent that wrote it (escaped) */
  long long pid;
  double at; /* wall-clock seconds */
} trun__rdzv_job;
/* The key of the job's record: /trun/<run_id>/job. */
void trun__rdzv_job_key(const char *run_id, char *out, size_t len);
/* After the backend's init: publishes r's job unless one is there; where the stored one has another backend
 * or size, says so once (the rendezvous of such nodes does not complete). Failures are only debug lines:
 * the record serves readers outside the job. */
void trun__rdzv_job_publish(trun_rdzv *r);
/* Reads the job's record of run_id on c: 1 (into *out), 0 none, -EPROTO a value no trun agent writes
 * (why says what is wrong with it), or another negative errno from the store. */
int trun__rdzv_job_read(trun_client *c, const char *run_id, trun__rdzv_job *out, char *why, size_t whylen);
/* A record's n bytes (untrusted: anyone with the job's token writes /trun/<run_id>/) as job run_id's into
 * *out: 0, or -EPROTO with why (not JSON, over 4 KiB, a backend or size trun never writes, another run id,
 * nproc_per_node or torch_version with other characters than theirs). The words (host) are escaped. */
int trun__rdzv_job_parse(const void *data, size_t n, const char *run_id, trun__rdzv_job *out, char *why,
                         size_t whylen);
/* A backend's name: "static", "c10d", "trun". */
const char *trun__rdzv_backend_text(trun_rdzv_backend b);

/* ---- rdzv_addr.c ---- */
/* The numeric text of an IPv4 or IPv6 address: 0, or -1 for another family. */
int trun__rdzv_sa_text(const struct sockaddr *sa, char *text, size_t len);
/* 1 for 127.0.0.0/8, ::1 and IPv4-mapped 127/8. */
int trun__rdzv_sa_loopback(const struct sockaddr *sa);
/* --local-addr auto, once r->client is connected: r->host_addr becomes the local address of that connection;
 * where it is loopback (this node serves the rendezvous store), the source of the route to the endpoint. */
void trun__rdzv_auto_addr(trun_rdzv *r);
/* The workers' MASTER_ADDR under the static backend (static/static.c, and its preview): the endpoint's host,
 * or with a single node this host's address host_addr (127.0.0.1 where that name does not resolve here). */
void trun__rdzv_static_master_addr(const trun_config *cfg, const char *host_addr, char *out, size_t len);

/* ---- rdzv_live.c ---- */
/* Starts the liveness thread (several nodes only) and, where this agent hosts the store, its owned keys. */
int trun__rdzv_live_start(trun_rdzv *r);
/* The round r settled: heartbeat and watch in its key space. */
void trun__rdzv_live_round(trun_rdzv *r);
void trun__rdzv_live_stop(trun_rdzv *r);
double trun__rdzv_live_interval(const trun_config *cfg);
int trun__rdzv_live_misses(const trun_config *cfg);
/* Reads lost/<g> of key space ks on c into out (out->round_id is left to the caller). 0, -ENOENT (no
 * record), or another negative errno. */
int trun__rdzv_loss_read(trun_client *c, const char *ks, int g, trun_rdzv_loss *out);
/* The loss records of key space ks (a round of world nodes), at most max, into out: how many. */
int trun__rdzv_losses(trun_rdzv *r, const char *ks, int world, trun_rdzv_loss *out, int max);

/* ---- rdzv_door.c: the one door of a round's fate ---- */
/* The agent's callback for every fate of r's rounds (trun_rdzv_watch_open). */
void trun__rdzv_door_set(trun_rdzv *r, trun_rdzv_end_fn on_end, void *arg);
/* The round whose fates the door hands on now (trun_rdzv_watch_start). */
void trun__rdzv_door_round(trun_rdzv *r, int round);
/* Hands e, stamped with the door's round, to the agent (nothing before trun__rdzv_door_set). Any thread. */
void trun__rdzv_door_post(trun_rdzv *r, trun_rdzv_end *e);

/* ---- rdzv.c ---- */
/* At a round's start (trun_rdzv_next_round, before the door moves to the new round): each loss record of
 * the round before (key space prev_ks, prev_world nodes; trun__rdzv_losses) through the door as a NODE_LOST
 * end with `past` set, stamped with that round (its loss's round_id: prev_round_id, as the watcher stamps a
 * loss it saw, so the agent tells each loss once). Nothing for a round of one node or none. */
void trun__rdzv_tell_losses(trun_rdzv *r, const char *prev_ks, int prev_world, long long prev_round_id);

/* ---- rdzv_end_key.c: the end key's values ---- */
/* The value of the round's end key for an end of kind OK, FAILED (node), MEMBER (why) or NODE_LOST (node),
 * into out: "ok", "fail:<g>", "member:<why>", "gone:<g>". 0, or -EINVAL for a kind that is never written. */
int trun__rdzv_end_encode(trun_rdzv_end_kind kind, int node, const char *why, char *out, size_t len);
/* Decodes the end key's value v (n bytes, untrusted: any bytes at all) of a round of world nodes (<= 0: any
 * group rank) into out: OK, FAILED, MEMBER, NODE_LOST, or INVALID for anything else (a group rank that is not
 * 0..world-1 in decimal, a "lost:" no store holds, trailing bytes). out->round is left to the caller. */
void trun__rdzv_end_decode(const void *v, size_t n, int world, trun_rdzv_end *out);
/* Node g's failure record in key space ks ("<ks>/failure/<g>", trun_rdzv_announce_failure) on c into out
 * (len bytes, NUL-terminated). 0, -ENOENT (none), -E2BIG (longer than len - 1), or a negative errno. */
int trun__rdzv_failure_read(trun_client *c, const char *ks, int g, char *out, size_t len);
/* The store's host, leaving after a failure: waits at most timeout_ms until every other node of the round
 * has seen its end ("seen_end/<g>", set by its watcher after it read the failure record) or left it (no
 * "alive/<g>": also a torchrun agent), so that no trun agent loses the root cause with the store. */
void trun__rdzv_wait_saw_end(trun_rdzv *r, int timeout_ms);

/* ---- rdzv_end.c ---- */
/* The exit barrier: every node counts itself out of round; the host waits (bounded) for the others so that
 * it does not take the store away while they still read from it. host_wait_ms > 0 (a failed job): the others
 * first wait (bounded) for the host to get there, i.e. to have printed the job's failure report. */
void trun__rdzv_leave(trun_rdzv *r, int round, int timeout_ms, int host_wait_ms);
/* How long the nodes other than the host wait for the job's failure report before they leave: after a
 * failure, not after a signal (then every node is being stopped). */
int trun__rdzv_host_wait_ms(int code, int signaled);
/* --exit-barrier-timeout in ms (INT_MAX at most): how long a successful job's exit barrier waits. */
int trun__rdzv_exit_barrier_ms(const trun_rdzv *r);

/* ---- store_acl.c ---- */
/* --store-allow-peers by published addresses (static, trun): every node publishes the address its store
 * connection comes from; the hosting node then admits those, loopback and its own. */
int trun__rdzv_publish_addr(trun_rdzv *r, int round);
int trun__rdzv_admit_published(trun_rdzv *r, int round, char *err, size_t errlen);
/* The round's key of node g's published address. */
void trun__rdzv_addr_key(const trun_rdzv *r, int round, int g, char *out, size_t len);

/* ---- rdzv_token.c ---- */
/* The rendezvous store this agent (arg: its trun_rdzv) hosts, set up before it serves anyone
 * (trun_store_host_configure_fn): only connections with r->token may write the job's key space there
 * (/trun/<run_id>/..., /torch.rendezvous.<run_id>.<round>/trun/...), and a node's address key holds the
 * address its connection comes from. 0 or a negative errno. */
int trun__rdzv_guard_server(trun_server *s, void *arg);

/* ---- rdzv_conf.c ---- */
/* Seconds from --rdzv-conf key (def when absent or not a positive number). */
double trun__rdzv_conf_seconds(const trun_config *cfg, const char *key, double def);

#endif
