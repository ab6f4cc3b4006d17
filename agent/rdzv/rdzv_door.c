/* The one door of a round's fate (agent/rdzv/rdzv_int.h: trun__rdzv_door_*; rdzv.h: trun_rdzv_end_fn): every
 * way a round can end reaches the agent as one trun_rdzv_end through the one callback the agent gave
 * trun_rdzv_watch_open, from whichever thread of the rendezvous learnt it: the end watcher (the end key's
 * kinds, a lost store connection) or the liveness thread (JOINING and REJOINED from the backend's tick,
 * CUT_OFF from its judge), or the agent's own thread where a call of its answers through the door (rdzv.c:
 * MEMBER for a failure here while nodes wait, the past round's losses at the next round's start). It sits
 * at the bottom of the module, below them all. */
#include "rdzv_int.h"

void trun__rdzv_door_set(trun_rdzv *r, trun_rdzv_end_fn on_end, void *arg) {
  r->on_end_arg = arg;
  __atomic_store_n(&r->on_end, on_end, __ATOMIC_RELEASE);
}

void trun__rdzv_door_round(trun_rdzv *r, int round) {
  __atomic_store_n(&r->door_round, round, __ATOMIC_RELEASE);
}

void trun__rdzv_door_post(trun_rdzv *r, trun_rdzv_end *e) {
  trun_rdzv_end_fn on_end = __atomic_load_n(&r->on_end, __ATOMIC_ACQUIRE);
  if (on_end == NULL) return;
  e->round = __atomic_load_n(&r->door_round, __ATOMIC_ACQUIRE);
  on_end(r->on_end_arg, e);
}
