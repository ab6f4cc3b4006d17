/* rdzv: how the agents of a job meet, behind one interface the agent drives without knowing the backend,
 * as torch's agent drives a RendezvousHandler: init, next round, the fate of a round across nodes, finish,
 * close. Three backends implement it, each in its folder, reached only through their ops table
 * (rdzv_int.h): static (static/; also --standalone), torchelastic's c10d dynamic rendezvous (c10d/: c10d.c
 * over the state machine in dynamic.c, its pickled state in c10d_state.c), and trun's own elastic
 * rendezvous (trun/: trun.c over fast.c). The stores an agent hosts run on threads of their own
 * (store_host.h), with the access rules of store_acl.h. Every fate of a round (its end for the job, a lost
 * store, nodes joining, peers rejoined, this node cut off, a failure here that nodes waiting make a
 * membership change, the losses of the round before) reaches the agent by one door: one typed
 * trun_rdzv_end through the callback given to trun_rdzv_watch_open (rdzv_door.c); only this module reads or
 * writes the store's end values. What init and the first round would settle, without a store, is
 * trun_rdzv_preview's (rdzv_preview.c, for --dry-run).
 * May use: base, store, config, discover (this host's name and CPUs). Used by the agent and its nccl and
 * observe modules, which read the round's result through trun_rdzv_info and the accessors (trun_rdzv is
 * opaque) and write their keys in the store only through rdzv's functions (docs/rendezvous.md, "Key space").
 */
#ifndef TRUN_RDZV_H
#define TRUN_RDZV_H

#include <stdio.h>

#include "agent/discover/discover.h"
#include "base/base.h"
#include "config/config.h"
#include "store/store.h"
#include "store_host.h"

typedef struct trun_rdzv_ops trun_rdzv_ops; /* rdzv_int.h */
typedef struct trun_rdzv_exclusion trun_rdzv_exclusion;

/* The rendezvous of this agent: opaque (rdzv_int.h); trun_rdzv_new makes one, trun_rdzv_init starts it. */
typedef struct trun_rdzv trun_rdzv;

/* What the last round settled (trun_rdzv_info): what torch's RendezvousInfo gives its agent, the ranks and
 * the workers' store. */
typedef struct trun_rdzv_round {
  int round; /* the round number (static: the agent's; c10d, trun: the store's) */
  /* The job's attempt (TORCHELASTIC_RESTART_COUNT): before trun_rdzv_next_round the agent's own count of
   * restarts (trun_rdzv_set_attempt); after it (c10d, trun) the round's, the same on every node of the
   * round, spares and late joiners included (the highest count of its nodes, kept in the rendezvous:
   * rdzv_attempt.c). */
  int attempt;
  long long round_id;                  /* the round's identity in the store (c10d: its round counter) */
  int group_rank, group_world_size;    /* this node among the round's nodes */
  int base_rank, world_size;           /* this node's first global rank; all workers */
  int role_base_rank, role_world_size; /* one role: same as the global ones */
  char master_addr[256];               /* the workers' store */
  int master_port;
  int workers_host_store; /* TORCHELASTIC_USE_AGENT_STORE=False: worker rank 0 serves (torch 1.13's c10d) */
} trun_rdzv_round;

/* The agent's hooks, given to trun_rdzv_init. Every one may be NULL. */
typedef struct trun_rdzv_opts {
  /* Called about once a second while a call waits on the store; non-zero aborts the wait with -EINTR
   * (the agent lets its loop handle signals there). */
  int (*poll)(void *arg);
  void *poll_arg;
  /* The reports of the rendezvous's waits (NULL: only the lines on stderr). */
  trun_wait_hook on_wait;
  void *on_wait_arg;
  /* This node as the exclusion list names it (NULL: by its address only). */
  const trun_node *node;
} trun_rdzv_opts;

#define TRUN_RDZV_MAX_LOSSES 16 /* the losses of one round that trun_rdzv keeps */

/* A node the liveness of a round found gone (the record lost/<g> in the round's key space). */
typedef struct trun_rdzv_loss {
  int node;           /* its group rank in that round */
  long long round_id; /* that round */
  char addr[256];     /* its address */
  char id[320];       /* its identity in the rendezvous: "addr pid local_id tag" (older agents: no tag) */
  char cause[256];    /* "its connection to the rendezvous store closed (from A)", "3 heartbeats missed
                         (3.2 s without one)", "it left the job: WHY" */
  char by[16];        /* who saw it: "store" (the store host) or a group rank */
  double at;          /* wall-clock seconds when it was seen */
} trun_rdzv_loss;

/* The job's agent token (docs/store.md): TRUN_RDZV_TOKEN_ENV when set, else --rdzv-conf trun_token, else one
 * derived from the run id and the backend (it keeps out clients that do not mean harm, not an adversary who
 * knows the run id). Every trun agent presents it on its connections to the rendezvous store; the store an
 * agent hosts lets only those connections write the job's key space. 1 explicit, 0 derived, -1 with a
 * reason (an explicit token that is not 16 to 100 printable characters; exit 2). The agent never passes
 * TRUN_RDZV_TOKEN_ENV to its workers. */
#define TRUN_RDZV_TOKEN_ENV "TRUN_RDZV_TOKEN"
/* 1 when this agent hosts the rendezvous store of a job of several nodes whose token is the derived one
 * (no TRUN_RDZV_TOKEN, no trun_token): anyone who reaches the store and learns the run id can write the
 * agents' key space. The agent says so once per job (this is true on one agent only). */
int trun_rdzv_token_public(const trun_rdzv *r);
int trun_rdzv_token(const trun_config *cfg, char *out, size_t len, char *err, size_t errlen);
/* ---- the exclusion list (rdzv_exclude.c, rdzv_export.c) ---- */
#define TRUN_RDZV_MAX_EXCLUSIONS 4096 /* records read in one go */
#define TRUN_RDZV_EXCL_SKEW_S 300.0   /* how far ahead of this clock a record's "at" may be (clock skew) */

/* A node as the exclusion list names it: the same node has the same host and, where both records know them,
 * the same instance id and a GPU UUID in common (a replaced machine under the old name is another node). A
 * record of one agent (a node cut off: agent set) names that agent only, not another on the same host (two
 * agents of one box, pods with the host's network). */
#define TRUN_RDZV_AGENT_ID_MAX 320 /* an agent's rendezvous id (trun__rdzv_agent_id), its 0 included */
typedef struct trun_rdzv_node_id {
  char host[256];                     /* how the other nodes know it: --local-addr, else its FQDN */
  char hostname[256];                 /* its short host name (Slurm's node name) */
  char instance[64];                  /* its instance id, "" unknown */
  char gpus[1024];                    /* its GPU UUIDs, comma-separated, "" unknown */
  char agent[TRUN_RDZV_AGENT_ID_MAX]; /* one agent: its id in the rendezvous, "addr pid local_id tag" (the
                                         tag: random, once per agent); "": the node, whichever agent */
} trun_rdzv_node_id;

enum { TRUN_RDZV_EXCL_NEW = 1, TRUN_RDZV_EXCL_ENDED = 2 };

struct trun_rdzv_exclusion {
  trun_rdzv_node_id id;
  char kind[16];    /* "health", "xid", "failures", "cut_off" */
  char cause[512];  /* what the node did, in words */
  double at, until; /* wall-clock seconds: when it was excluded, when that ends */
  int index;        /* its place in the job's list (1..) */
  int news; /* in trun_rdzv_exclusion_list: TRUN_RDZV_EXCL_NEW and/or _ENDED since the last round, else 0 */
  int ended;
};

/* How a line names an excluded node: "HOST (NAME)", or "HOST" when its host name is not known or is the
 * same as HOST; a record of one agent adds its pid: "HOST (NAME, agent pid P)", "HOST (agent pid P)". */
void trun_rdzv_node_name(const trun_rdzv_node_id *id, char *out, size_t len);
/* This node's identity: host (its rendezvous address), its host name, and from node (NULL: none) its
 * instance id and GPU UUIDs; agent "" (the node). */
void trun_rdzv_node_identity(const char *host, const trun_node *node, trun_rdzv_node_id *id);
/* --rdzv-conf trun_exclude_seconds: how long an exclusion lasts (default 1800; 0: none are made). */
double trun_rdzv_exclude_seconds(const trun_config *cfg);
/* --rdzv-conf trun_wait_health_interval: how often an agent waiting in the rendezvous (a spare) runs its
 * health gate again, in seconds (default 60; 0: never). */
double trun_rdzv_wait_health_interval(const trun_config *cfg);
/* --rdzv-conf trun_exclude_failures: K, a node whose workers were the first to fail K rounds in a row is
 * excluded (default 3; 0: never). */
int trun_rdzv_exclude_failures(const trun_config *cfg);
/* Adds node id to the job's exclusion list on c (a connection to the rendezvous store with raw keys) for
 * trun_exclude_seconds, with kind and cause. 0 (also when exclusions are off), or a negative errno. */
int trun_rdzv_exclude(trun_client *c, const trun_config *cfg, const trun_rdzv_node_id *id, const char *kind,
                      const char *cause);
/* 1 when exclusion e names node id (a record of one agent: id's agent is that one). */
int trun_rdzv_exclusion_matches(const trun_rdzv_exclusion *e, const trun_rdzv_node_id *id);
/* The job's exclusion records after the first `from` ones, ended ones too, read on c: *out (the caller
 * frees it) and *n (records that are not trun's are left out: host names of other characters than a host's,
 * a time ahead of this clock). Each lasts at most cap_s (trun_rdzv_exclude_seconds) from its "at", and its
 * words hold no control characters (escaped). How many records were read, or a negative errno. */
int trun_rdzv_exclusions(trun_client *c, const char *run_id, double cap_s, int from,
                         trun_rdzv_exclusion **out, int *n);
/* The exclusions in force now (for a status view): as trun_rdzv_exclusions from the first, without the
 * ended ones. 0 or a negative errno. */
int trun_rdzv_excluded_now(trun_client *c, const char *run_id, double cap_s, trun_rdzv_exclusion **out,
                           int *n);
/* trun --list-excluded FORMAT: reads the list from the job's rendezvous store (cfg's endpoint and run id)
 * and prints the exclusions in force as a Slurm --exclude host list ("slurm") or JSON ("json"). The exit
 * code: 0, 1 (the store cannot be read), 2 (a bad format or no endpoint). */
int trun_rdzv_excluded_print(const trun_config *cfg, const char *format, FILE *out);

/* The agent token (trun_rdzv_token) and --rdzv-conf, whose values config/ checked already (rdzv_conf.c
 * there): keys trun does not read are said on stderr. 0, or -1 with the reason (the caller exits 2). */
int trun_rdzv_conf_check(const trun_config *cfg, char *err, size_t errlen);
/* A rendezvous not started yet (NULL: out of memory): its round info all 0, no connection. */
trun_rdzv *trun_rdzv_new(void);
/* trun_rdzv_close, then frees r (NULL: nothing). */
void trun_rdzv_free(trun_rdzv *r);
/* Chooses the backend (static for --standalone and --rdzv-backend static, c10d, trun), then hosts the
 * rendezvous store where this node is its host and connects to it, with the agent's hooks (opts, NULL:
 * none). 0 or -1 with a reason in err. */
int trun_rdzv_init(trun_rdzv *r, const trun_config *cfg, int nproc, const trun_rdzv_opts *opts, char *err,
                   size_t errlen);
/* The job's rendezvous store reached from outside any round (a node that failed its health gate and never
 * joins: it only leaves its record and its exclusion there): a connection to cfg's endpoint with the job's
 * agent token, timeout_ms for the connect and each request, no backend. *out (trun_rdzv_free closes it),
 * 0, or a negative errno (*out NULL). */
int trun_rdzv_reach(const trun_config *cfg, int timeout_ms, trun_rdzv **out);

/* ---- what the agent and its modules read (rdzv.c) ---- */
/* What the last round settled (all 0 before the first one). */
const trun_rdzv_round *trun_rdzv_info(const trun_rdzv *r);
/* Before trun_rdzv_next_round: the agent's own count of restarts, which an elastic round raises to the
 * job's (trun_rdzv_round.attempt). */
void trun_rdzv_set_attempt(trun_rdzv *r, int attempt);
/* 1 while this agent has its connection to the rendezvous store (after trun_rdzv_init or _reach). */
int trun_rdzv_connected(const trun_rdzv *r);
/* This node's address as the other nodes know it: --local-addr, what --local-addr auto found once the store
 * was reached, else the FQDN ("" before trun_rdzv_init). */
const char *trun_rdzv_host_addr(const trun_rdzv *r);
/* Where this agent reaches the rendezvous store (its port into *port), for a message. */
const char *trun_rdzv_store_addr(const trun_rdzv *r, int *port);
/* 1 when the round's peers may be torchrun agents, which publish nothing of trun's (c10d). */
int trun_rdzv_foreign_peers(const trun_rdzv *r);
/* The counters of the stores this agent hosts (the rendezvous store, the workers' store), summed into
 * *sum: all 0 when it hosts none. */
void trun_rdzv_store_stats(const trun_rdzv *r, trun_server_stats *sum);
/* The job's exclusion list as read at the start of the last round: *out, how many (news marked). */
int trun_rdzv_exclusion_list(const trun_rdzv *r, const trun_rdzv_exclusion **out);
/* When this node is on the job's exclusion list (trun_rdzv_next_round failed for that), the exit code its
 * kind calls for (trun_rdzv_exclusion_code), else 0. */
int trun_rdzv_excluded(const trun_rdzv *r);
/* The exit code of a node refused for an exclusion of this kind (base/exit.h): the node's hardware
 * ("health", "xid", "preflight", "stuck") 3; "cut_off" (its network) 4; anything else ("failures": what its
 * workers did) 6, so that a drain rule on 3 never drains a node for a link flap or a job's own crashes. */
int trun_rdzv_exclusion_code(const char *kind);
/* The kind of the rendezvous's wait in progress, else of its last one ("" before any; trun_wait_info). */
const char *trun_rdzv_wait_kind(const trun_rdzv *r);
/* This agent's connection to the rendezvous store is shut down: no request waits on it any more (a stuck
 * store while the agent stops). */
void trun_rdzv_hang_up(trun_rdzv *r);
/* Another node ended this round (it failed, or the store was lost): the store may close with its host (a
 * node whose restarts are spent exits at once), so this agent's requests until the next round fail without
 * error lines of their own (the agent says once what it could not learn). */
void trun_rdzv_store_may_go(trun_rdzv *r);

/* A named hang for `--rdzv-status` (rdzv_job.c): line (cut to 1023 bytes) as /trun/<run_id>/hang in the job's
 * store, the last one named standing; nothing for a private store (--standalone). 0 or a negative errno. */
int trun_rdzv_publish_hang(trun_rdzv *r, const char *line);

/* ---- the round's exchange (rdzv.c): keys of the agents' own, <round key space>/<name> ---- */
/* Sets name to value. 0, -ENOTCONN without a connection, or another negative errno. */
int trun_rdzv_exchange_set(trun_rdzv *r, const char *name, const char *value);
/* Waits at most timeout_ms for name and reads it into *out (the caller frees it). 0 or a negative errno. */
int trun_rdzv_exchange_get(trun_rdzv *r, const char *name, trun_buf *out, int timeout_ms);
/* Waits at most wait_ms for all n names; vals[i] gets those present then (the others stay empty; the
 * caller frees each). How many are present, or a negative errno when the wait failed otherwise than by
 * its time-out (then none is read). */
int trun_rdzv_exchange_collect(trun_rdzv *r, const char *const *names, int n, int wait_ms, trun_buf *vals);
/* The full key of name, for a message. */
void trun_rdzv_exchange_key(const trun_rdzv *r, const char *name, char *out, size_t len);

/* ---- the job's health records (rdzv_health.c) ----
 * Failure records (JSON) of nodes that left the job unhealthy or never joined it, one job-wide list in the
 * rendezvous store: /trun/<run_id>/health/n counts them (ADD), /trun/<run_id>/health/<i> (i = 1..n). */
/* Appends json to the list. 0, -ENOTCONN without a connection, or another negative errno. */
int trun_rdzv_health_publish(trun_rdzv *r, const char *json);
/* The records after the first `from`, in order, up to the first that cannot be read yet (written right
 * after the count: the next call reads it): *out (the caller frees each string and the array), *n. 0 or a
 * negative errno. */
int trun_rdzv_health_read(trun_rdzv *r, int from, char ***out, int *n);
/* Adds node id to the job's exclusion list on r's connection (trun_rdzv_exclude). 0, -ENOTCONN without a
 * connection, or another negative errno. */
int trun_rdzv_exclude_node(trun_rdzv *r, const trun_rdzv_node_id *id, const char *kind, const char *cause);

/* The next round (round: the agent's count of rounds so far; the backend may settle on another number,
 * trun_rdzv_info's round): joins, waits for the other nodes, assigns ranks and the workers' store; with
 * --store-allow-peers the stores this node hosts then admit only the round's nodes. 0 or -1 with a reason. */
int trun_rdzv_next_round(trun_rdzv *r, int round, char *err, size_t errlen);
/* This node's workers failed (the round is over here: after trun_rdzv_watch_stop), and no other end came
 * first: what that failure is for the job, where the backend knows more, comes through the door (the
 * caller's thread calls the callback before this returns): c10d, nodes that were not in this round wait to
 * join (another agent saw them first and stopped its workers, which broke ours): a MEMBER end, cause "join",
 * `nodes` how many. Nothing comes otherwise (no node waits; the static and trun backends end a round by
 * its key). */
void trun_rdzv_failed_here(trun_rdzv *r);

/* ---- the end of a round across nodes (the static backend with several nodes, and trun's) ---- */
/* 1 when a round ends for every node through one key in the store: every node's workers succeeded, one
 * node failed first, or the membership changed (trun_rdzv_end); then every node publishes its failure
 * records there, and node rank 0 prints the job-wide report. */
int trun_rdzv_ends_by_key(const trun_rdzv *r);

/* A round's fate, the one value by which the rendezvous tells the agent how a round ends (the one door:
 * trun_rdzv_watch_open's callback). Most kinds are how the round ended for the job, as the round's end key
 * in the store says (the rendezvous writes and reads that key; nobody else parses it; the store is open to
 * anyone with the job's token: a value no trun agent writes reads as TRUN_RDZV_END_INVALID, never as another
 * kind): each round has at most one of those. JOINING, REJOINED and CUT_OFF are what the rendezvous's
 * liveness thread learns while the workers run, without an end key: they come again every time it looks
 * (the agent acts on the first that finds its workers running). Two come on the caller's thread, from a
 * call of the agent's: MEMBER after trun_rdzv_failed_here (c10d: nodes wait to join), and at the start of a
 * round (trun_rdzv_next_round) one NODE_LOST with `past` set for each loss record of the round before (the
 * losses this node learnt only then, its workers having stopped before its watcher saw them). */
typedef enum trun_rdzv_end_kind {
  TRUN_RDZV_END_NONE = 0,   /* no end known yet (the round runs, or nothing watches: a single node) */
  TRUN_RDZV_END_OK,         /* every node's workers succeeded */
  TRUN_RDZV_END_FAILED,     /* node `node`'s workers failed first: every node stops to restart together */
  TRUN_RDZV_END_MEMBER,     /* the membership changes (nodes wait to join, a node's heartbeat stopped):
                               every node restarts its workers into a new world; `cause` says why */
  TRUN_RDZV_END_NODE_LOST,  /* the liveness found node `node` gone; `loss` is its record where one was read;
                               `past`: a loss of the round before, told at the next one's start */
  TRUN_RDZV_END_STORE_LOST, /* this node lost its connection to the rendezvous store (not a value of the
                               key: the watcher's wait, or the agent's own request, failed); `err` */
  TRUN_RDZV_END_INVALID,    /* the key holds a value no trun agent writes; `cause` shows it */
  TRUN_RDZV_END_JOINING,    /* c10d: `nodes` new nodes wait to join: every node restarts its workers into a
                               new world (no restart used) */
  TRUN_RDZV_END_REJOINED,   /* c10d: `nodes` nodes of this round left it to rejoin after a failure there:
                               this node restarts its workers too (a restart, as on those nodes) */
  TRUN_RDZV_END_CUT_OFF,    /* this node's liveness heartbeats have had no answer from the rendezvous store
                               for twice the liveness window (trun_heartbeat_interval x
                               trun_heartbeat_misses): it is cut off from the job; `cause` says so */
} trun_rdzv_end_kind;

/* The longest failure record a node's end carries (longer ones read as unknown). */
#define TRUN_RDZV_FAILURE_MAX 16384

typedef struct trun_rdzv_end {
  trun_rdzv_end_kind kind;
  int round;           /* the round that ended (the agent's round number, r->round) */
  int node;            /* FAILED, NODE_LOST: that node's group rank in the round; -1 for the others */
  int err;             /* STORE_LOST: the errno; else 0 */
  int nodes;           /* JOINING, REJOINED, MEMBER from trun_rdzv_failed_here: how many nodes wait; else 0 */
  int past;            /* NODE_LOST: 1 when the loss is of the round before this one, told by
                          trun_rdzv_next_round (no end of a running round: `round` is that round), else 0 */
  char cause[512];     /* MEMBER: the words the change came with ("join", "lost:<g>"); STORE_LOST: the
                          errno's text; INVALID: the value, cut, with '?' for bytes that are not printable;
                          CUT_OFF: since when and which store; else "" */
  trun_rdzv_loss loss; /* NODE_LOST: the lost node's record (lost/<g>), read on the watcher's connection */
  int loss_known;      /* NODE_LOST: 1 when loss holds that record, 0 when none could be read */
  char failure[TRUN_RDZV_FAILURE_MAX]; /* FAILED: the failure record node `node` published (a JSON object,
                                          trun_rdzv_announce_failure), read as soon as the end was known; ""
                                          when none could be read (the store was gone, or it was too long) */
} trun_rdzv_end;

/* The end of round as a store loss with errno err (the agent's own request to the store failed). */
void trun_rdzv_end_store_lost(trun_rdzv_end *e, int round, int err);

/* The end watcher (rdzv_watch.c): while a round's workers run, a thread waits on a connection of its own to
 * the rendezvous store for the round's end key, decodes it into a trun_rdzv_end (reading a failed or lost
 * node's record there too, since the agent's loop never waits on the store) and hands it to the caller's
 * callback, the one door by which every fate of a round reaches the agent: the end key's kinds from the
 * watcher, JOINING / REJOINED / CUT_OFF from the liveness thread (and, on the caller's thread, the answers of
 * trun_rdzv_failed_here and trun_rdzv_next_round). */
typedef struct trun_rdzv_watch trun_rdzv_watch;
/* Called on a thread of the rendezvous (the watcher's, the liveness's), or on the caller's inside
 * trun_rdzv_failed_here and trun_rdzv_next_round, with a round's fate (end: valid during the call only: the
 * callee copies what it keeps; end->round: the round trun_rdzv_watch_start watches, or for a past loss the
 * round that lost the node). It must not block: the agent copies the value and wakes its loop (one
 * uv_async_send). */
typedef void (*trun_rdzv_end_fn)(void *arg, const trun_rdzv_end *end);
/* After trun_rdzv_init: on_end(arg, ...) as the one door of every round's fate (a single node's too), and
 * the watcher and its connection where a round can end on other nodes (the static and trun backends with
 * several nodes; a lost node, with liveness, on every backend); *out NULL where there is nothing to watch (a
 * single node: no end but the workers' own). 0, or -1 with the reason in err. */
int trun_rdzv_watch_open(trun_rdzv *r, trun_rdzv_end_fn on_end, void *arg, trun_rdzv_watch **out, char *err,
                         size_t errlen);
/* Before the round's workers start: watches round (r's key space as next_round settled it). Where the last
 * round lost the watcher's connection, a new one is opened first (not when no round follows, so that an agent
 * whose store host died exits at once). A watcher that cannot start is said on stderr. w NULL: nothing. */
void trun_rdzv_watch_start(trun_rdzv_watch *w, int round);
/* The store does not answer (this node is cut off, or stuck while it stops): the watcher's wait ends now
 * (its connection is cut; the end reads STORE_LOST). */
void trun_rdzv_watch_cut(trun_rdzv_watch *w);
/* The caller found the store lost on its own connection: the next round's watcher opens a new one. */
void trun_rdzv_watch_reconnect(trun_rdzv_watch *w);
/* The round is over on this node: waits for the watcher (the end key is set by now, by this node or another;
 * bounded, then its connection is cut). A backend whose end key is set only when a node is lost (c10d) has
 * nothing else to wake the watcher after a round without a loss: its connection is cut first. A lost
 * connection is reopened by the next trun_rdzv_watch_start. */
void trun_rdzv_watch_stop(trun_rdzv_watch *w);
/* Stops the watcher, closes its connection, frees w (NULL: nothing). Before trun_rdzv_close. */
void trun_rdzv_watch_close(trun_rdzv_watch *w);

/* This node's workers all succeeded in round; then waits (polling) until the round's end key exists (the
 * end reaches the agent through the watcher's callback). 0, -EINTR (poll), or another negative errno. */
int trun_rdzv_announce_success(trun_rdzv *r, int round);
/* Publishes this node's failure record (a JSON object, NULL: none) and ends the round for every node (every
 * backend with several nodes: on c10d only trun agents read it), unless another end came first. now (may be
 * NULL): the round's end as the store holds it after this call: FAILED by this node, or the end that came
 * first (another node's failure with its record, a membership change, a lost node). 0 or a negative errno
 * (now: STORE_LOST). */
int trun_rdzv_announce_failure(trun_rdzv *r, int round, const char *failure_json, trun_rdzv_end *now);
/* The round's end as the store holds it now, without waiting (a node whose workers stopped for a reason it
 * did not see: a c10d peer that left to rejoin): out->kind NONE when no end is set. Its requests are quiet
 * (the caller says what it could not learn). 0 or a negative errno (out: STORE_LOST). */
int trun_rdzv_end_now(trun_rdzv *r, int round, trun_rdzv_end *out);
/* Failure records published by every node for round (JSON objects); the caller frees each string and the
 * array. Waits at most timeout_ms (for all of them together) for missing ones; *n = how many were read. */
int trun_rdzv_collect_failures(trun_rdzv *r, int round, int timeout_ms, char ***out, int *n);
/* What the store knows of node g in a round of the static backend, for a failure report that names it. */
typedef struct trun_rdzv_node_info {
  int seen_end;   /* its end watcher saw the round end (alive then): a node without it was lost */
  int base_rank;  /* its first global rank */
  int nproc;      /* its workers (0: it did not say) */
  char host[336]; /* "name (address its store connection came from)", "name" or "" when unknown */
} trun_rdzv_node_info;
/* 0 or a negative errno (the store is gone). */
int trun_rdzv_node_end(trun_rdzv *r, int round, int g, trun_rdzv_node_info *out);

/* ---- liveness (rdzv_live.c) ---- */
/* The round's workers stopped on this node: it leaves the round cleanly (its alive key goes, so no watcher
 * calls it lost). */
void trun_rdzv_round_done(trun_rdzv *r);
/* The same, waiting at most timeout_ms (< 0: a request time-out) for the thread's request in flight: 1 when
 * the store did not answer in time (the thread's connection was abandoned, the node left without deleting
 * its key: the others see it gone), else 0. A stopping agent uses it so that a stuck store cannot hold its
 * exit. */
int trun_rdzv_round_done_within(trun_rdzv *r, int timeout_ms);
/* What the loss record of r's round says of node g, read on c (NULL: this agent's own connection). 0, -ENOENT
 * (no record), or a negative errno. */
int trun_rdzv_loss_of(const trun_rdzv *r, trun_client *c, int g, trun_rdzv_loss *out);
/* This node is cut off: any request of the rendezvous's thread stuck on the dead connection returns now. */
void trun_rdzv_abandon(trun_rdzv *r);
/* The liveness heartbeat's interval in ms (0: no liveness). While the workers run, a node whose heartbeats
 * have had no answer for twice the liveness window hears it as a CUT_OFF fate, about once an interval. */
int trun_rdzv_live_ms(const trun_rdzv *r);
/* This node leaves the job now (a hardware fault, a stop signal): its loss record with why, and the
 * round's end, so that the others go on at once instead of after the heartbeat expiry. 0 or -errno. */
int trun_rdzv_leave_now(trun_rdzv *r, const char *why);

/* Before the round's workers start: the MASTER_ADDR they are about to get resolves here and, where it
 * resolves only to loopback on a node of several, something serves the workers' store there (rdzv_addr.c).
 * 0, or -1 with the cause and the fix in err (--local-addr auto, a headless Service). */
int trun_rdzv_check_master(trun_rdzv *r, char *err, size_t errlen);
/* This node leaves the job before its workers ran (trun_rdzv_leave_now with why), and waits at most
 * timeout_ms until the round's end says so, so that the other nodes stop at once even when this agent
 * exits right after. 0 (also with one node: nothing to tell), or a negative errno. */
int trun_rdzv_leave_job(trun_rdzv *r, const char *why, int timeout_ms);

/* The job is over (code: the agent's exit code; signaled: it was stopped by a signal): the backend's exit
 * barrier and, where the backend has one, its shutdown, as torchrun does them. */
void trun_rdzv_finish(trun_rdzv *r, int code, int signaled);
/* Stops the stores this agent hosts, closes the connection, frees the backend's state. */
void trun_rdzv_close(trun_rdzv *r);
/* --rdzv-status: the rendezvous state of the job cfg names (endpoint, run id), read from its store with one
 * connection, printed to out: the job's backend and size as the store holds them (cfg's, where given and
 * contradicted, named), round, members, missing, waiting and lost nodes, the attempt. Returns 0, 1 (the
 * store is unreachable or its state unreadable; said on stderr) or 2 (no endpoint). */
int trun_rdzv_status(const trun_config *cfg, FILE *out);
/* The name of the backend in use: "static", "c10d" or "trun". */
const char *trun_rdzv_backend_name(const trun_rdzv *r);

/* ---- the preview (rdzv_preview.c) ---- */
/* What the rendezvous would do for a configuration, known without a store (--dry-run). */
typedef struct trun_rdzv_preview_info {
  const char *backend;     /* "static", "c10d" or "trun": the backend trun_rdzv_init would choose */
  int elastic;             /* a round may go on without a node of the last one (c10d, trun) */
  char endpoint_host[256]; /* the rendezvous endpoint */
  int endpoint_port;       /* 0: a free port, picked when the store starts */
  char host_addr[256];     /* this node's address as it would publish it (--local-addr or the FQDN) */
  int hosts_store;         /* this node would serve the rendezvous store */
  char store_how[384];     /* who serves it and why, in words ("this node serves it (node rank 0)") */
  int min_nodes, max_nodes;
  int nproc;
  /* ranks_known (static): this node's place, assuming every node runs nproc workers (the round reads their
   * counts). 0 (c10d, trun): decided at the rendezvous; the four are -1. */
  int ranks_known;
  int group_rank, group_world_size, base_rank, world_size;
  /* master_known: the workers' MASTER_ADDR / MASTER_PORT (0: a free port picked at init); 0 (c10d): node
   * rank 0's, decided at the rendezvous (master_port -1). */
  int master_known;
  char master_addr[256];
  int master_port;
} trun_rdzv_preview_info;
/* Fills out for cfg and nproc workers a node: 0, or -1 with the reason init would give (a bad --rdzv-conf or
 * agent token: the caller exits 2). Connects to nothing. */
int trun_rdzv_preview(const trun_config *cfg, int nproc, trun_rdzv_preview_info *out, char *err,
                      size_t errlen);
/* 1 when a round may go on without a node of the last one (c10d, trun); 0 for the static backend. */
int trun_rdzv_elastic(const trun_rdzv *r);

#endif
