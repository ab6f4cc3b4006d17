/* The agent's part of the job's exclusion list (agent/agent_int.h; the list itself: agent/rdzv/rdzv.h): this
 * node put on it (a failed health gate, a hardware Xid, its workers failing first round after round), and the
 * list's news each round as events, metrics and, on node rank 0, a line on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"

void trun__agent_exclude_self(agent *a, trun_rdzv *r, const char *host, const char *kind, const char *cause) {
  if (a->cfg->max_nodes <= 1 || a->cfg->standalone || r == NULL || !trun_rdzv_connected(r)) return;
  trun_rdzv_node_id id;
  trun_rdzv_node_identity(host, a->node, &id);
  int rc = trun_rdzv_exclude_node(r, &id, kind, cause);
  if (rc < 0)
    trun_warn("could not put node %s on the job's exclusion list (%s: %s): %s; it may be let back in", host,
              kind, cause, strerror(-rc));
}

void trun__agent_exclusion_news(agent *a) {
  const trun_rdzv_exclusion *excl;
  int n_excl = trun_rdzv_exclusion_list(a->rdzv, &excl);
  int active = 0;
  for (int i = 0; i < n_excl; i++) active += !excl[i].ended;
  trun_obs_exclusion(a->obs, NULL, active);
  for (int i = 0; i < n_excl; i++) {
    const trun_rdzv_exclusion *e = &excl[i];
    if (e->news == 0) continue;
    trun_obs_exclusion(a->obs, e, active);
    if (trun_rdzv_info(a->rdzv)->group_rank != 0) continue;
    char name[sizeof(e->id.host) + sizeof(e->id.hostname) + 48];
    trun_rdzv_node_name(&e->id, name, sizeof(name));
    if (e->news & TRUN_RDZV_EXCL_NEW)
      fprintf(stderr, "trun: node %s is excluded from the job for %.0f s: %s: %s\n", name, e->until - e->at,
              e->kind, e->cause);
    if (e->news & TRUN_RDZV_EXCL_ENDED)
      fprintf(stderr, "trun: the exclusion of node %s (%s: %s) has ended; it may join again\n", name, e->kind,
              e->cause);
  }
}

void trun__agent_failure_streak(agent *a, const char *host) {
  int k = trun_rdzv_exclude_failures(a->cfg);
  if (k <= 0 || !trun_rdzv_ends_by_key(a->rdzv) || !trun_rdzv_elastic(a->rdzv)) return;
  /* A failure of this node ends the round: the first node to announce a failure was this one, whose workers
   * failed first while the others' ran. Any other end (success, a membership change, another node's failure)
   * breaks the streak. */
  if (!(a->round.end.kind == TRUN_RDZV_END_FAILED &&
        a->round.end.node == trun_rdzv_info(a->rdzv)->group_rank)) {
    a->fail_streak = 0;
    return;
  }
  if (++a->fail_streak < k) return;
  char cause[256];
  snprintf(cause, sizeof(cause),
           "its workers were the first to fail in %d rounds in a row while the other nodes' ran "
           "(--rdzv-conf trun_exclude_failures=%d)",
           a->fail_streak, k);
  trun__agent_exclude_self(a, a->rdzv, host, "failures", cause);
}
