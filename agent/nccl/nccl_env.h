/* The NCCL / libfabric environment trun gives the workers, decided from what discovery found
 * (agent/discover/discover.h) and the user's environment. Facts and rules: shared/spec/gpu-efa-nccl.md §2-§4;
 * every decision carries its reason in words (users read it: --explain, trun-topo --json); the spec sections
 * and sources it rests on are comments beside each rule. A variable the user set is never changed. */
#ifndef TRUN_NCCL_ENV_H
#define TRUN_NCCL_ENV_H

#include <stdio.h>

#include "agent/discover/discover.h"
#include "config/config.h"

#define TRUN_ENV_MAX 64

typedef enum {
  TRUN_ENV_USER = 0, /* the user's value, kept as it is */
  TRUN_ENV_TRUN,     /* a trun rule: set to value, or (set == 0) deliberately left unset */
  TRUN_ENV_PLUGIN    /* left to the aws-ofi-nccl plugin, which fills it in at init; trun does not set it */
} trun_env_source;

typedef struct {
  char name[64];
  char value[256]; /* the value the workers get; "" when set == 0 */
  int set;         /* 1: the workers see name=value */
  trun_env_source source;
  char reason[512]; /* in words, without references to design notes */
} trun_env_decision;

typedef struct {
  int n;
  trun_env_decision d[TRUN_ENV_MAX];
} trun_env_plan;

/* Decides the environment for node given the user's envp (NULL-terminated) and flags (TRUN_NCCL_*). Order:
 * libfabric / EFA, the variables left to the plugin, NCCL topology and sockets, then any other NCCL_* / FI_*
 * / OFI_NCCL_* / RDMAV_* the user set. Never fails; rows beyond TRUN_ENV_MAX are dropped. */
#define TRUN_NCCL_WARM_CUDA 1u /* --warm-start-cuda: the workers are replacements to be ready fast */
void trun_nccl_env_decide(const trun_node *node, char *const *envp, unsigned flags, trun_env_plan *plan);
const char *trun_env_source_name(trun_env_source s);
/* 1 when the GPUDirect RDMA column of spec §2 says yes for this instance type. */
int trun_instance_has_gdr(const char *instance_type);
/* The up network interfaces under TRUN_SYSFS_ROOT (default /sys)/class/net that NCCL may use for its
 * sockets: not lo, docker*, veth*, virbr*, eni* (host side of pod veths). Comma list in name order into out
 * ("" when none); returns how many. */
int trun_socket_interfaces(char *out, size_t outlen);
/* Sets every trun row with set == 1 in *env unless *env already has the variable. 0 or -ENOMEM. */
int trun_nccl_env_apply(const trun_env_plan *plan, char ***env);

/* CPUs for --numa-binding of the worker on visible GPU g: TRUN_SYSFS_ROOT/devices/system/node/node<N>/cpulist
 * of the GPU's NUMA node, else the GPU's CPU affinity from NVML. 0 with out filled, or -1 (nothing known). */
int trun_gpu_numa_cpulist(const trun_gpu *g, char *out, size_t outlen);

/* --numa-binding node for local rank lr: trun_gpu_numa_cpulist of visible GPU lr, restricted to the CPUs this
 * process may use (sched_getaffinity). "" when lr has no GPU, nothing is known or nothing is left. */
void trun_numa_cpus_for(const trun_node *node, int lr, char *out, size_t outlen);

/* --nproc-per-node auto for node: visible GPUs, or the CPUs the cgroup allows when there are none. */
int trun_nproc_auto(const trun_node *node);

#endif
