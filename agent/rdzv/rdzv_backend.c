/* Which backend a rendezvous runs and what its ops table says of it (agent/rdzv/rdzv_int.h), at the bottom of
 * the module: every file above reaches a backend (static/, c10d/, trun/) only through its trun_rdzv_ops,
 * never by a name of its own. */
#include "rdzv_int.h"

const trun_rdzv_ops *trun__rdzv_backend_of(const trun_config *cfg) {
  if (!cfg->standalone && cfg->endpoint_port != 0) {
    if (cfg->backend == TRUN_RDZV_C10D) return &trun__rdzv_c10d;
    if (cfg->backend == TRUN_RDZV_TRUN) return &trun__rdzv_trun;
  }
  return &trun__rdzv_static;
}

int trun_rdzv_ends_by_key(const trun_rdzv *r) { return r->be && r->be->ends_by_key && r->be->ends_by_key(r); }

const char *trun_rdzv_backend_name(const trun_rdzv *r) { return r->be ? r->be->name : "none"; }

int trun_rdzv_elastic(const trun_rdzv *r) { return r->be && r->be->elastic; }
