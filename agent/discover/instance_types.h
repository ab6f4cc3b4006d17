/* The accelerated EC2 instance types trun knows (shared/spec/gpu-efa-nccl.md §2): GPUs, EFA devices, network
 * bandwidth and the GPU fabric. Used by the split-pod doctor (EFA per GPU) and the preflight (expected
 * bandwidth). */
#ifndef TRUN_INSTANCE_TYPES_H
#define TRUN_INSTANCE_TYPES_H

typedef struct {
  const char *type; /* "p5.48xlarge" */
  int gpus;
  int efa;      /* EFA devices (network cards used by NCCL) */
  int net_gbps; /* instance network bandwidth, Gbit/s */
  int nvswitch; /* 1: NVSwitch (every GPU pair NVLink-connected), 0: PCIe only */
} trun_instance_info;

/* The row for an exact instance type name, or NULL. */
const trun_instance_info *trun_instance_lookup(const char *type);

#endif
