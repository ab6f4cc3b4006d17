/* trun_rdzv_preview (agent/rdzv/rdzv.h): what trun_rdzv_init and the first round would settle for a
 * configuration, worked out without a store, so that --dry-run shows the rendezvous's own choices (the
 * backend, who serves the store, the ranks it can know in advance) instead of a second copy of them. */
#include <stdio.h>
#include <string.h>

#include "rdzv_int.h"

/* Who serves the store of an elastic backend: as trun__rdzv_elastic_connect decides it. */
static void elastic_store(const trun_config *cfg, trun_rdzv_preview_info *out) {
  int explicit_host = trun_config_conf_bool(cfg->rdzv_conf, "is_host");
  out->hosts_store = explicit_host >= 0 ? explicit_host : trun__rdzv_is_this_host(cfg->endpoint_host);
  if (explicit_host >= 0)
    snprintf(out->store_how, sizeof(out->store_how), "%s (--rdzv-conf is_host=%s)",
             out->hosts_store ? "this node serves it" : "another node serves it",
             out->hosts_store ? "true" : "false");
  else if (out->hosts_store)
    snprintf(out->store_how, sizeof(out->store_how),
             "this node serves it (the endpoint names this host; it joins as a client if the port is taken)");
  else
    snprintf(out->store_how, sizeof(out->store_how),
             "the agent on %s serves it (the endpoint names another host)", cfg->endpoint_host);
}

int trun_rdzv_preview(const trun_config *cfg, int nproc, trun_rdzv_preview_info *out, char *err,
                      size_t errlen) {
  memset(out, 0, sizeof(*out));
  /* The input init refuses: the same reasons (exit 2). */
  if (trun_rdzv_conf_check(cfg, err, errlen) < 0) return -1;
  const trun_rdzv_ops *be = trun__rdzv_backend_of(cfg);
  trun_rdzv r; /* only for the address this node publishes (--local-addr or the FQDN) */
  memset(&r, 0, sizeof(r));
  trun__rdzv_reset(&r, cfg, nproc, be);
  out->backend = be->name;
  out->elastic = be->elastic;
  out->nproc = nproc;
  snprintf(out->endpoint_host, sizeof(out->endpoint_host), "%s", cfg->endpoint_host);
  out->endpoint_port = cfg->endpoint_port;
  snprintf(out->host_addr, sizeof(out->host_addr), "%s", r.host_addr);
  if (be->elastic) {
    out->min_nodes = cfg->min_nodes;
    out->max_nodes = cfg->max_nodes;
    elastic_store(cfg, out);
    /* The rendezvous numbers the nodes when they meet; a trun --node-rank is only a hint. */
    out->ranks_known = 0;
    out->group_rank = out->group_world_size = out->base_rank = out->world_size = -1;
    /* trun: the workers use the agents' store; c10d: node rank 0's, on a port it picks at the round. */
    out->master_known = be == &trun__rdzv_trun;
    if (out->master_known) {
      snprintf(out->master_addr, sizeof(out->master_addr), "%s", cfg->endpoint_host);
      out->master_port = cfg->endpoint_port;
    } else {
      out->master_port = -1;
    }
    return 0;
  }
  /* static: as static_init (a single node without a port: a private store on a free port). */
  int standalone = cfg->standalone || cfg->endpoint_port == 0;
  out->group_rank = standalone ? 0 : cfg->node_rank;
  out->group_world_size = standalone ? 1 : cfg->max_nodes;
  out->min_nodes = out->max_nodes = out->group_world_size;
  out->hosts_store = out->group_rank == 0;
  snprintf(out->store_how, sizeof(out->store_how), "%s",
           standalone         ? "this node serves it (a single node)"
           : out->hosts_store ? "this node serves it (node rank 0)"
                              : "node rank 0 serves it");
  /* The round reads every node's worker count; in advance only nproc on every node can be assumed. */
  out->ranks_known = 1;
  out->base_rank = out->group_rank * nproc;
  out->world_size = out->group_world_size * nproc;
  out->master_known = 1;
  trun__rdzv_static_master_addr(cfg, r.host_addr, out->master_addr, sizeof(out->master_addr));
  out->master_port = cfg->endpoint_port;
  return 0;
}
