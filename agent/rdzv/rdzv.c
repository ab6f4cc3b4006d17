/* The rendezvous interface (agent/rdzv/rdzv.h): picks the backend and hands every call to it, with what is
 * the same for all of them around the calls (the --store-allow-peers steps of a round). */
#include <stdio.h>
#include <string.h>

#include "rdzv_int.h"

int trun_rdzv_init(trun_rdzv *r, const trun_config *cfg, int nproc, char *err, size_t errlen) {
  const trun_rdzv_ops *be = &trun__rdzv_static;
  if (!cfg->standalone && cfg->endpoint_port != 0) {
    if (cfg->backend == TRUN_RDZV_C10D) be = &trun__rdzv_c10d;
    if (cfg->backend == TRUN_RDZV_FAST) be = &trun__rdzv_trun;
  }
  trun__rdzv_reset(r, cfg, nproc, be);
  return be->init(r, err, errlen);
}

int trun_rdzv_next_round(trun_rdzv *r, int round, char *err, size_t errlen) {
  if (r->be->publish_addr && r->be->publish_addr(r, round) < 0)
    trun_debug("could not publish this node's address for --store-allow-peers");
  if (r->be->next_round(r, round, err, errlen) < 0) return -1;
  if (r->cfg->store_allow_peers && r->be->admit_round && r->be->admit_round(r, round, err, errlen) < 0)
    return -1;
  return 0;
}

int trun_rdzv_tick_ms(const trun_rdzv *r) {
  if (r->be == NULL || r->be->tick == NULL || r->be->tick_ms == NULL) return 0;
  int ms = r->be->tick_ms(r);
  return ms < 100 ? 100 : ms;
}

trun_rdzv_news trun_rdzv_tick(trun_rdzv *r, int *nodes) {
  *nodes = 0;
  return r->be && r->be->tick ? r->be->tick(r, nodes) : TRUN_RDZV_STEADY;
}

int trun_rdzv_new_nodes_waiting(trun_rdzv *r) {
  return r->be && r->be->new_nodes_waiting ? r->be->new_nodes_waiting(r) : 0;
}

int trun_rdzv_ends_by_key(const trun_rdzv *r) { return r->be && r->be->ends_by_key && r->be->ends_by_key(r); }

void trun_rdzv_finish(trun_rdzv *r, int code, int signaled) {
  if (r->be && r->be->finish) r->be->finish(r, code, signaled);
}

void trun_rdzv_close(trun_rdzv *r) {
  if (r->be && r->be->close)
    r->be->close(r);
  else
    trun__rdzv_close_stores(r);
}

const char *trun_rdzv_backend_name(const trun_rdzv *r) { return r->be ? r->be->name : "none"; }
