/* The rendezvous interface (agent/rdzv/rdzv.h): picks the backend and hands every call to it, with what is
 * the same for all of them around the calls (the --store-allow-peers steps of a round). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_int.h"

const trun_rdzv_ops *trun__rdzv_backend_of(const trun_config *cfg) {
  if (!cfg->standalone && cfg->endpoint_port != 0) {
    if (cfg->backend == TRUN_RDZV_C10D) return &trun__rdzv_c10d;
    if (cfg->backend == TRUN_RDZV_FAST) return &trun__rdzv_trun;
  }
  return &trun__rdzv_static;
}

const char *trun_rdzv_config_backend_name(const trun_config *cfg) { return trun__rdzv_backend_of(cfg)->name; }

int trun_rdzv_init(trun_rdzv *r, const trun_config *cfg, int nproc, char *err, size_t errlen) {
  const trun_rdzv_ops *be = trun__rdzv_backend_of(cfg);
  trun__rdzv_reset(r, cfg, nproc, be);
  int explicit_token = trun_rdzv_token(cfg, r->token, sizeof(r->token), err, errlen);
  if (explicit_token < 0) return -1;
  r->token_explicit = explicit_token;
  if (be->init(r, err, errlen) < 0) return -1;
  if (trun__rdzv_live_start(r) < 0) {
    snprintf(err, errlen, "out of memory starting the liveness thread");
    trun_rdzv_close(r);
    return -1;
  }
  return 0;
}

/* The losses of the round before this one (the records lost/<g> in its key space), for the agent's
 * node_lost / recovered reports. */
static void read_prev_losses(trun_rdzv *r, const char *prev_ks, int prev_world) {
  r->n_prev_lost = 0;
  if (prev_ks[0] == '\0' || prev_world < 2) return;
  if (r->prev_lost == NULL && (r->prev_lost = calloc(TRUN_RDZV_MAX_LOSSES, sizeof(*r->prev_lost))) == NULL)
    return;
  r->n_prev_lost = trun__rdzv_losses(r, prev_ks, prev_world, r->prev_lost, TRUN_RDZV_MAX_LOSSES);
}

int trun_rdzv_next_round(trun_rdzv *r, int round, char *err, size_t errlen) {
  char prev_ks[sizeof(r->key_space)];
  int prev_world = r->group_world_size;
  snprintf(prev_ks, sizeof(prev_ks), "%s", r->key_space);
  if (r->be->publish_addr && r->be->publish_addr(r, round) < 0)
    trun_debug("could not publish this node's address for --store-allow-peers");
  if (r->be->elastic && trun__rdzv_exclusion_round(r, err, errlen) < 0) return -1;
  if (r->be->elastic) trun__rdzv_attempt_propose(r);
  if (r->be->next_round(r, round, err, errlen) < 0) return -1;
  if (r->be->elastic) trun__rdzv_attempt_settle(r);
  if (r->cfg->store_allow_peers && r->be->admit_round && r->be->admit_round(r, round, err, errlen) < 0)
    return -1;
  read_prev_losses(r, prev_ks, prev_world);
  trun__rdzv_live_round(r);
  return 0;
}

int trun_rdzv_new_nodes_waiting(trun_rdzv *r) {
  return r->be && r->be->new_nodes_waiting ? r->be->new_nodes_waiting(r) : 0;
}

int trun_rdzv_leave_job(trun_rdzv *r, const char *why, int timeout_ms) {
  if (r->live == NULL) return 0;
  int rc = trun_rdzv_leave_now(r, why);
  if (rc < 0) return rc;
  char k[sizeof(r->key_space) + 8];
  snprintf(k, sizeof(k), "%s/end", r->key_space); /* the loss record ends the round (rdzv_live.c) */
  return trun__rdzv_wait_key(r, k, timeout_ms);
}

int trun_rdzv_ends_by_key(const trun_rdzv *r) { return r->be && r->be->ends_by_key && r->be->ends_by_key(r); }

void trun_rdzv_finish(trun_rdzv *r, int code, int signaled) {
  if (r->be && r->be->finish) r->be->finish(r, code, signaled);
}

void trun_rdzv_close(trun_rdzv *r) {
  trun__rdzv_live_stop(r); /* first: it leaves its round cleanly while the store is still there */
  free(r->prev_lost);
  r->prev_lost = NULL;
  free(r->excl);
  r->excl = NULL;
  r->n_excl = 0;
  r->n_prev_lost = 0;
  if (r->be && r->be->close)
    r->be->close(r);
  else
    trun__rdzv_close_stores(r);
}

const char *trun_rdzv_backend_name(const trun_rdzv *r) { return r->be ? r->be->name : "none"; }

int trun_rdzv_elastic(const trun_rdzv *r) { return r->be && r->be->elastic; }
