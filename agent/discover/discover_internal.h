/* Parsers behind agent/discover/discover.h, exposed for the unit tests. */
#ifndef TRUN_DISCOVER_INTERNAL_H
#define TRUN_DISCOVER_INTERNAL_H

#include <stddef.h>

#include "discover.h"

/* cgroup v2 cpu.max text ("max 100000", "200000 100000") → CPUs rounded up; 0 = no limit, -1 = malformed. */
int trun_cpu_max_parse(const char *text);
/* cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us → CPUs rounded up; 0 = no limit, -1 = malformed. */
int trun_cfs_quota_parse(const char *quota, const char *period);
/* The smallest quota from self_cgroup up to the root of the hierarchy at root; 0 = none. */
int trun_cgroup_cpu_limit(const char *root, const char *self_cgroup);
/* 1 when s looks like an EC2 instance type (family.size). */
int trun_instance_type_plausible(const char *s);
/* DMI product_name / sys_vendor → instance type in out; 1 when it is one, else 0. */
int trun_dmi_instance_type(const char *product_name, const char *sys_vendor, char *out, size_t outlen);

/* From agent/discover/discover_rdma.c: PCI ids and sysfs paths (see there). */
int trun_pci_parse(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn);
int trun_pci_sysfs_path(const char *bus_id, char *out, size_t outlen);
int trun_pci_numa_of_bus_id(const char *bus_id);
const char *trun_pci_distance(const char *path_a, int numa_a, const char *path_b, int numa_b);

/* From agent/discover/discover_cudart.c: the CUDA runtime fallback, run only in discover_gpu.c's child (it
 * copies CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER from envp into the process environment). 0 (gpu_source
 * "cudart", or untouched when no runtime / no device), or -1 with a reason in err. */
int trun_discover_cudart(trun_node *node, char *const *envp, int affinity, char *err, size_t errlen);

/* From agent/discover/health_gpu.c: the NVML calls behind the health facts (trun_gpu_health), looked up in
 * the discovery child's NVML library dl; a function the library lacks stays NULL (its fact: TRUN_HF_MISSING).
 */
#include "nvml.h"
typedef struct {
  trun_nvmlDeviceGetRemappedRows_fn remapped_rows;
  trun_nvmlDeviceGetRetiredPagesPendingStatus_fn retired_pending;
  trun_nvmlDeviceGetTotalEccErrors_fn total_ecc;
  trun_nvmlDeviceGetClocksReasons_fn clock_reasons;
  trun_nvmlDeviceGetPcieLink_fn pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
  trun_nvmlDeviceGetNvLinkState_fn nvlink_state;
  trun_nvmlDeviceGetFieldValues_fn field_values;
} trun__gpu_health_fns;
void trun__gpu_health_load(void *dl, trun__gpu_health_fns *f);
/* Reads the facts of one GPU (dev: the GPU itself; for a MIG device its parent) into h (probed = 1). */
void trun__gpu_health_read(const trun__gpu_health_fns *f, trun_nvmlDevice_t dev, trun_gpu_health *h);

#endif
