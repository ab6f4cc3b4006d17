/* The whole node in one call (agent/discover/discover.h): GPUs, RDMA devices, the instance identity when
 * asked, usable CPUs. */
#include <string.h>

#include "discover.h"

int trun_discover_node(trun_node *node, char *const *envp, int identity, int no_imds, char *err,
                       size_t errlen) {
  memset(node, 0, sizeof(*node));
  node->instance.source = "none";
  node->gpu_source = "none";
  err[0] = '\0';
  unsigned flags = ((identity & TRUN_DISCOVER_NO_AFFINITY) ? TRUN_GPU_NO_AFFINITY : 0) |
                   ((identity & TRUN_DISCOVER_HEALTH) ? TRUN_GPU_HEALTH : 0) |
                   ((identity & TRUN_DISCOVER_CACHE) ? TRUN_GPU_CACHE : 0);
  int rc = trun_discover_gpus_flags(node, envp, flags, err, errlen);
  identity &= ~(TRUN_DISCOVER_NO_AFFINITY | TRUN_DISCOVER_HEALTH | TRUN_DISCOVER_CACHE);
  trun_discover_rdma(node);
  int efa = 0;
  for (int r = 0; r < node->nrdma; r++) efa += node->rdma[r].is_efa && node->rdma[r].usable;
  if (identity == TRUN_IDENTITY_ALWAYS || (identity == TRUN_IDENTITY_IF_EFA && efa > 0))
    trun_discover_instance(node, no_imds);
  node->cpus_usable = trun_discover_cpus();
  return rc < 0 ? -1 : 0;
}
