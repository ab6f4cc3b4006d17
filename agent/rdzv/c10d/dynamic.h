/* torchelastic's dynamic ("c10d") rendezvous in C (docs/dev/torchrun-internals.md "Joining and leaving"): the
 * whole state as a base64 pickle under `torch.rendezvous.<run_id>`, updated by compare-and-set; join / exit /
 * keep-alive / close operations decided from (state, this node, deadlines) exactly as torch's op executor
 * does, so that trun agents and torchrun agents (1.13 and 2.x) take part in one rendezvous.
 *
 * The pure part (trun_dyn_join_action & co.) decides and applies actions on a state held in memory; the
 * executor (trun_dyn_run_*) syncs that state with a store through a trun_client. */
#ifndef TRUN_AGENT_RDZV_DYN_H
#define TRUN_AGENT_RDZV_DYN_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/rdzv/c10d_state.h"
#include "store/store.h"

#define TRUN_DYN_SENTINEL "Y2FuaW1hZGFt" /* base64("canimadam"): "no state yet" */

typedef struct trun_dyn_settings {
  int min_nodes, max_nodes;
  int64_t join_timeout_us;      /* join_timeout (600 s) */
  int64_t last_call_us;         /* last_call_timeout (30 s) */
  int64_t close_timeout_us;     /* close_timeout (30 s) */
  int64_t heartbeat_timeout_us; /* heartbeat_timeout (5 s) */
  int64_t keep_alive_us;        /* keep_alive_interval (5 s) */
  int keep_alive_max_attempt;   /* 3 */
  int read_timeout_ms;          /* store operations (60 s) */
} trun_dyn_settings;

typedef enum {
  TRUN_DYN_SYNC = 0,
  TRUN_DYN_FINISH,
  TRUN_DYN_ERROR_CLOSED,
  TRUN_DYN_ERROR_TIMEOUT,
  TRUN_DYN_ERROR_GRACEFUL_EXIT, /* closed while this node was a spare (2.3+) */
  TRUN_DYN_KEEP_ALIVE,
  TRUN_DYN_ADD_TO_PARTICIPANTS,
  TRUN_DYN_ADD_TO_WAIT_LIST,
  TRUN_DYN_ADD_TO_REDUNDANCY_LIST,
  TRUN_DYN_REMOVE_FROM_PARTICIPANTS,
  TRUN_DYN_REMOVE_FROM_WAIT_LIST,
  TRUN_DYN_REMOVE_FROM_REDUNDANCY_LIST,
  TRUN_DYN_MARK_COMPLETE,
  TRUN_DYN_MARK_CLOSED,
} trun_dyn_action;

const char *trun_dyn_action_name(trun_dyn_action a);

/* What the operation sees: the state, this node, now (monotonic seconds for deadlines, UTC microseconds for
 * the state's datetimes). redundancy: torch >= 2.3 rules (the state has a redundancy_list). */
typedef struct trun_dyn_ctx {
  const trun_rdzv_state *st;
  const trun_rdzv_node *me;
  const trun_dyn_settings *s;
  bool redundancy;
  double now_mono, deadline_mono;
  int64_t now_us;
} trun_dyn_ctx;

trun_dyn_action trun_dyn_join_action(const trun_dyn_ctx *c);
trun_dyn_action trun_dyn_exit_action(const trun_dyn_ctx *c);
trun_dyn_action trun_dyn_keep_alive_action(const trun_dyn_ctx *c);
trun_dyn_action trun_dyn_close_action(const trun_dyn_ctx *c);
/* Applies a mutating action to st for node me at now_us. 0 or -ENOMEM. */
int trun_dyn_apply(trun_rdzv_state *st, trun_dyn_action a, const trun_rdzv_node *me,
                   const trun_dyn_settings *s, int64_t now_us);
/* Drops nodes whose last heartbeat is older than keep_alive * max_attempt (torch's _sanitize). Returns how
 * many were dropped. */
int trun_dyn_sanitize(trun_rdzv_state *st, const trun_dyn_settings *s, int64_t now_us);

/* Index of node in a list / entry array, -1 when absent. */
long trun_dyn_find_node(const trun_rdzv_node *l, size_t n, const trun_rdzv_node *me);
long trun_dyn_find_entry(const trun_rdzv_entry *l, size_t n, const trun_rdzv_node *me);
/* torch's _NodeDesc ordering: (addr, pid, local_id). */
int trun_dyn_node_cmp(const trun_rdzv_node *a, const trun_rdzv_node *b);

/* ---- executor ---------------------------------------------------------------------------------------- */

typedef struct trun_dyn {
  trun_client *c; /* not owned; raw keys (key_prefix "") */
  char key[320];  /* "/torch.rendezvous.<run_id>" as on the wire */
  char run_id[128];
  trun_rdzv_node me;
  trun_dyn_settings s;
  trun_rdzv_layout hint; /* layout written while the store holds no state that tells */
  trun_rdzv_layout lay;  /* layout of the last state read (fields UNKNOWN where it did not tell) */
  trun_rdzv_state st;
  char *token; /* base64 last seen; NULL = the sentinel */
  bool dirty;
  double last_sync;       /* monotonic seconds, -1 never */
  int (*poll)(void *arg); /* called while sleeping between syncs; non-zero aborts with -EINTR */
  void *poll_arg;
  trun_rdzv_node *roster; /* the participants of the round trun_dyn_next joined (addr owned) */
  size_t n_roster;
  /* Recovery (issue 22): nodes known lost (pruned from every state this node reads, as torch's sanitizer
   * prunes nodes whose heartbeat expired), and the nodes of the last round less those (trun_dyn_regroup):
   * once they are all participants again (and at least MIN), the last call ends at once. Both owned;
   * empty: none. */
  trun_rdzv_node *dead;
  size_t n_dead;
  trun_rdzv_node *expect;
  size_t n_expect;
  double expect_since; /* monotonic seconds the regroup began (trun_dyn_regroup) */
  /* Called about every second while a join waits (NULL: none): the caller may mark nodes dead. */
  void (*refresh)(void *arg);
  void *refresh_arg;
  double last_refresh;               /* monotonic seconds of the last refresh call, 0 never */
  uint64_t bytes_out, bytes_in, ops; /* store traffic of this node's rendezvous */
  char err[768];                     /* the last failure's reason */
} trun_dyn;

/* Sets up d (me.addr copied) and writes the sentinel if the key is absent (compare_set(key, "", sentinel)).
 * 0 or a negative errno (d->err says why). */
int trun_dyn_init(trun_dyn *d, trun_client *c, const char *run_id, const char *addr, int64_t pid,
                  int64_t local_id, const trun_dyn_settings *s, const trun_rdzv_layout *hint);
void trun_dyn_free(trun_dyn *d);
/* Layout of the states this node writes: the last state's where it told, else the hint. */
void trun_dyn_write_layout(const trun_dyn *d, trun_rdzv_layout *out);
/* next_rendezvous: exit op, then join op until this node is a participant of a complete round.
 * 0 (*rank, *world, *round set), -ETIMEDOUT (join_timeout), -ECANCELED (closed), -ESHUTDOWN (closed while
 * a spare: torch's graceful exit), -EINTR (poll), -EPROTO (corrupt state), other negative errno (store). */
int trun_dyn_next(trun_dyn *d, int *rank, int *world, int64_t *round);
/* How long a regroup polls fast: a node of the last round that is not back by then is slow (its workers
 * ignore SIGTERM) or gone, and the join goes on at torch's pace. */
#define TRUN_DYN_REGROUP_FAST_S 10.0
/* The pause in ms before a join syncs the state again, from the state it read last: 50 while this node
 * regroups with the nodes of the last round (n_expect, for TRUN_DYN_REGROUP_FAST_S), 100 as a spare or in
 * the wait list, else 1000 (torch's); the short ones one step longer per 64 participants, at most 1000. */
int trun_dyn_pause_ms(const trun_dyn *d);
/* Heartbeat if due (keep-alive op, heartbeat_timeout). 0 or negative errno. */
int trun_dyn_keep_alive(trun_dyn *d);
/* Nodes in the wait list (sync, cached for 1 s like torch; fresh != 0: read the store now). >= 0 or
 * negative errno. */
int trun_dyn_num_waiting(trun_dyn *d, int fresh);
/* Of those, the nodes that were not participants of this node's round: new members. A participant of the
 * round in the wait list is a peer that restarted after a failure. >= 0 or negative errno. */
int trun_dyn_num_new_waiting(trun_dyn *d, int fresh);
/* The next round waits for the nodes of the last one (the roster less the dead) instead of the last call,
 * polling fast (trun_dyn_pause_ms): trun_dyn_next calls it for every round after one this node was in,
 * trun_dyn_mark_dead again as nodes are found lost. 0 or -ENOMEM. */
int trun_dyn_regroup(trun_dyn *d);
/* Node n (of the last round) is lost: dropped from the states this node reads from now on, and the survivors
 * of the last round (its roster less the lost) are what the next round waits for instead of the last call.
 * 0, 1 when n was already known, -ENOMEM. */
int trun_dyn_mark_dead(trun_dyn *d, const trun_rdzv_node *n);
/* Drops the dead nodes from st (participants, wait and redundancy lists, heartbeats), as torch's sanitizer
 * drops expired ones. Returns how many entries went. */
int trun_dyn_prune(trun_rdzv_state *st, const trun_rdzv_node *dead, size_t n_dead,
                   const trun_dyn_settings *s);
/* 1 when st is an incomplete round whose participants hold every expected node and at least MIN nodes while
 * its last call still runs, and no node waits to join (wait or redundancy list: it is on its way, a new
 * member or a spare for a lost node's place): the deadline may end now. */
int trun_dyn_expected_in(const trun_rdzv_state *st, const trun_rdzv_node *expect, size_t n_expect,
                         const trun_dyn_settings *s, int64_t now_us);

/* shutdown(): marks the rendezvous closed (close op, close_timeout). 0 or negative errno. */
int trun_dyn_close(trun_dyn *d);
/* Syncs with the store once (get or compare_set). 1 set won, 0 lost or plain read, negative errno. */
int trun_dyn_sync(trun_dyn *d);

#endif
