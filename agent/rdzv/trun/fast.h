/* trun's own elastic rendezvous (`--rdzv-backend trun`) for fleets of trun agents, over the plain TCPStore
 * protocol (any TCPStore can host it). A node's join costs O(1) store operations and bytes: an atomic ADD
 * gives its join index, a SET publishes its descriptor, a WAIT blocks until the round is committed, a GET
 * reads its assignment; one coordinator (the first to commit) reads the roster with one MULTI_GET and writes
 * every assignment with one MULTI_SET. Same elastic rules as torch's c10d rendezvous: --nnodes MIN:MAX,
 * last call once MIN nodes joined, join timeout, late nodes restart the round (spares beyond MAX wait),
 * nodes that stop heartbeating are dropped, closed when the job ends.
 *
 * Keys (under "/trun/<run_id>/"): round (current round number, "closed" once the job is over), and per
 * round R "r<R>/": seq (ADD:
 * join index), node/<i> ("nproc hint pid addr"), commit (number of participants), coord (ADD: coordinator
 * election), assign/<i> ("group_rank group_world base_rank world_size"), waiting (ADD), hb/<g> (ADD
 * heartbeat counters), end (how the round ended: "ok", "fail:<g>", "member:<why>"). */
#ifndef TRUN_AGENT_RDZV_FAST_H
#define TRUN_AGENT_RDZV_FAST_H

#include <stdint.h>

#include "store/store.h"

typedef struct trun_fast_settings {
  int min_nodes, max_nodes;
  int join_timeout_ms;
  int last_call_ms;
  int keep_alive_ms; /* heartbeat period */
  int keep_alive_max_attempt;
} trun_fast_settings;

typedef struct trun_fast {
  trun_client *c; /* not owned; raw keys */
  char base[200]; /* "/trun/<run_id>/" */
  trun_fast_settings s;
  char addr[256];
  int64_t pid;
  int nproc;
  int hint;               /* --node-rank hint, -1 none */
  int (*poll)(void *arg); /* called about every 100 ms while waiting; non-zero aborts with -EINTR */
  void *poll_arg;
  /* Called by the coordinator after the commit, before the assignments are written (every participant has
   * stopped its workers by then): the agent clears the last attempt's worker keys. May be NULL. */
  int (*on_commit)(void *arg);
  void *on_commit_arg;
  /* the last round this node took part in (-1: none yet) and its result */
  int64_t round;
  int index; /* join index (1-based) */
  int group_rank, group_world;
  int base_rank, world_size;
  int coordinator;
  /* heartbeat watch of the successor node */
  int64_t succ_seen;
  double succ_since;
  uint64_t ops, bytes_out, bytes_in;
  char err[512];
} trun_fast;

void trun_fast_init(trun_fast *f, trun_client *c, const char *run_id, const char *addr, int64_t pid,
                    int nproc, int hint, const trun_fast_settings *s);
/* Joins the next round (after the last one ended). 0 with group_rank / group_world / base_rank / world_size
 * set, -ETIMEDOUT (fewer than MIN nodes within the join timeout), -ECANCELED (the job is over: closed),
 * -EINTR (poll), -EPROTO (a value no trun agent writes), or another negative errno from the store. f->err
 * says why. */
int trun_fast_join(trun_fast *f);
/* While the workers run: bump this node's heartbeat; watch the next node's. Returns 1 when the next node
 * stopped heartbeating (the round is then ended with "member:lost:<g>"), 0, or a negative errno. */
int trun_fast_tick(trun_fast *f);
/* Ends the current round (first writer wins). */
int trun_fast_end(trun_fast *f, const char *why);
/* Marks the rendezvous closed (the job is over): late nodes give up. */
int trun_fast_close(trun_fast *f);

#endif
