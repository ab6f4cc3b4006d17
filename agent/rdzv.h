/* Rendezvous for the static and standalone backends: who hosts the store, group ranks, global ranks,
 * the workers' MASTER_ADDR/PORT, per-round barriers, and the job-wide failure / success signal. */
#ifndef TRUN_RDZV_H
#define TRUN_RDZV_H

#include "client.h"
#include "config.h"
#include "store_host.h"

typedef struct {
  const trun_config *cfg;
  int nproc;
  int group_rank, group_world_size;
  int base_rank, world_size;           /* this node's first global rank; all workers */
  int role_base_rank, role_world_size; /* one role: same as the global ones */
  char master_addr[256];               /* the workers' store */
  int master_port;
  char host_addr[256];   /* this node's address as published (--local-addr or FQDN) */
  trun_store_host *host; /* set when this agent serves the store */
  trun_client *client;   /* this agent's connection to the store (raw keys) */
  /* Called about once a second while a call waits on the store; non-zero aborts the wait with -EINTR
   * (the agent lets its loop handle signals there). May be NULL. */
  int (*poll)(void *arg);
  void *poll_arg;
  /* c10d dynamic rendezvous (rdzv_c10d.c): torchelastic's state machine, torch's agent key protocol. */
  int dynamic;
  struct trun_dyn *dyn;
  int gen113;                   /* the peers speak torch 1.13's agent protocol (`fqdn` node keys) */
  int workers_host_store;       /* TORCHELASTIC_USE_AGENT_STORE=False: worker rank 0 serves (1.13) */
  trun_store_host *worker_host; /* the workers' store this agent serves as group rank 0 (torch >= 2.5) */
  int worker_port;
  long long dyn_round;     /* the c10d round of the last completed rendezvous */
  char round_prefix[400];  /* "/torch.rendezvous.<run_id>.<round>/" */
  char cached_master[256]; /* the workers' store of an earlier round (torch caches it) */
  int cached_port;
  /* --rdzv-backend trun (rdzv_fast.c): trun's elastic rendezvous; then the static protocol's round keys. */
  int fast;
  struct trun_fast *fst;
  int round_no; /* the round number the rendezvous settled on (fast: decided by the store) */
} trun_rdzv;

/* Waits until key exists (at most timeout_ms), in slices so that r->poll can interrupt: 0, -ETIMEDOUT,
 * -EINTR or another negative errno. */
int trun_rdzv_wait_key(trun_rdzv *r, const char *key, int timeout_ms);
/* Deletes every key of the last attempt's workers: all but the agents' own /trun/ keys. 0 or -errno. */
int trun_rdzv_wipe_worker_keys(trun_rdzv *r);
/* trun_client_connect retried in slices so that r->poll can interrupt: 0 or a negative errno. */
int trun_rdzv_connect_polling(trun_rdzv *r, trun_client_opts *o, int timeout_ms);
/* Hosts (node rank 0 / standalone) or reaches the store. 0 or -1 with a reason in err.
 * r->poll / r->poll_arg are kept: set them before. */
int trun_rdzv_init(trun_rdzv *r, const trun_config *cfg, int nproc, char *err, size_t errlen);
/* Round `round`: waits until every agent has stopped its workers, clears the last attempt's worker keys
 * (the host), and assigns ranks. 0 or -1 with a reason. */
int trun_rdzv_round(trun_rdzv *r, int round, char *err, size_t errlen);
/* Tells every agent that round `round` failed on this node. */
int trun_rdzv_announce_failure(trun_rdzv *r, int round, const char *failure_json);
/* This node's workers all succeeded in `round`. */
int trun_rdzv_announce_success(trun_rdzv *r, int round);
/* Key whose value ends a round: "ok" (every node succeeded) or "fail:<group rank>". */
void trun_rdzv_end_key(const trun_rdzv *r, int round, char *key, size_t len);
/* Failure reports published by every node for `round` (JSON objects); the caller frees each string
 * and the array. Waits at most timeout_ms for missing ones; *n = how many were read. */
int trun_rdzv_collect_failures(trun_rdzv *r, int round, int timeout_ms, char ***out, int *n);
/* The key node g sets once it has seen the end of `round` (its end-of-round watcher): a node that never
 * does is lost. */
void trun_rdzv_seen_end_key(const trun_rdzv *r, int round, int g, char *key, size_t len);
/* What the store knows of node g in `round`: *seen_end (it saw the round end), its workers and the host it
 * joined from ("?" if it did not say). 0 or a negative errno. */
int trun_rdzv_node_end(trun_rdzv *r, int round, int g, int *seen_end, int *nproc, char *host, size_t hostlen);
/* Exit barrier: every agent calls it once the job is over; the host waits (bounded) for the others
 * so that it does not take the store away while they still read from it. host_wait_ms > 0 (a failed job):
 * the others wait (bounded) for the host to get there, i.e. to have printed the job's failure report. */
void trun_rdzv_leave(trun_rdzv *r, int round, int timeout_ms, int host_wait_ms);
void trun_rdzv_close(trun_rdzv *r);
/* ---- c10d dynamic rendezvous (rdzv_c10d.c) ---- */
/* Checks --rdzv-conf for the c10d backend: 0, or -1 with the reason (the caller exits 2). */
int trun_rdzv_conf_check(const trun_config *cfg, char *err, size_t errlen);
int trun_rdzv_c10d_init(trun_rdzv *r, const trun_config *cfg, int nproc, char *err, size_t errlen);
/* next_rendezvous + torch's rank assignment and workers' store address. 0 or -1 with a reason. */
int trun_rdzv_c10d_round(trun_rdzv *r, char *err, size_t errlen);
/* While the workers run: heartbeat when due. Returns the number of nodes waiting to join (>= 0) or a
 * negative errno. */
int trun_rdzv_c10d_tick(trun_rdzv *r);
/* Nodes in the wait list that were not participants of this node's round (new members), from the state
 * of the last tick, or read now (fresh != 0). A participant of the round in the wait list is a peer that
 * restarted after a failure. >= 0 or a negative errno. */
int trun_rdzv_c10d_new_waiting(trun_rdzv *r, int fresh);
/* torch's exit barrier for this round (errors only logged). */
void trun_rdzv_c10d_exit_barrier(trun_rdzv *r, int timeout_ms);
/* torch's shutdown(): closes the rendezvous for good. */
void trun_rdzv_c10d_shutdown(trun_rdzv *r);
void trun_rdzv_c10d_close(trun_rdzv *r);
/* --rdzv-backend trun: the same store host rules, trun's fast rendezvous (rdzv_fast.h). */
int trun_rdzv_fast_init(trun_rdzv *r, const trun_config *cfg, int nproc, char *err, size_t errlen);
int trun_rdzv_fast_round(trun_rdzv *r, char *err, size_t errlen);
/* While the workers run: heartbeat, watch the next node. 1 the next node is gone (round ended), 0, <0. */
int trun_rdzv_fast_tick(trun_rdzv *r);
/* The job is over: later joiners give up. */
void trun_rdzv_fast_shutdown(trun_rdzv *r);
/* Seconds from --rdzv-conf key (def when absent). */
double trun_rdzv_conf_seconds(const trun_config *cfg, const char *key, double def);

/* Python's socket.getfqdn() for this host. */
void trun_fqdn(char *out, size_t len);

#endif
