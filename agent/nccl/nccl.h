/* nccl: what trun knows and decides about NCCL. The NCCL / libfabric environment for this node with the
 * reason for each variable (nccl_env.h), NCCL's INFO logs parsed into transports per peer pair
 * (nccl_log.h) and the agent's transport report (nccl_report.h), the NCCL all-reduce preflight
 * (preflight.h, the trun-preflight tool), and the topology doctor that finds split pods and GPU clashes
 * across agents (doctor.h).
 * May use: base, config, discover, proc, rdzv (the doctor and the preflight exchange through the rendezvous's
 * functions, never the store's). Used by the agent, observe and the tools. */
#ifndef TRUN_NCCL_H
#define TRUN_NCCL_H

#include "doctor.h"
#include "nccl_env.h"
#include "nccl_log.h"
#include "nccl_report.h"
#include "preflight.h"

#endif
