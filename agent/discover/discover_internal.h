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

/* Every GPU NVML lists, before CUDA_ / NVIDIA_VISIBLE_DEVICES, with the links and P2P status between the
 * pairs asked for (discover_gpu.c): what the per-boot GPU cache keeps (discover_cache.c). */
typedef struct {
  int count;    /* devices listed, 0..TRUN_MAX_GPUS */
  int affinity; /* 1: every GPU's cpu_affinity was read (not only where its NUMA node needed it) */
  int full;     /* 1: links / p2p hold every pair of the list, not only the visible ones */
  trun_gpu gpus[TRUN_MAX_GPUS];                /* index = NVML index, visible_index -1, health not probed */
  char links[TRUN_MAX_GPUS][TRUN_MAX_GPUS][8]; /* as trun_node.links, by NVML index */
  char p2p[TRUN_MAX_GPUS][TRUN_MAX_GPUS][4];   /* as trun_node.p2p, by NVML index */
} trun__gpu_list;

/* trun_discover_gpus_flags in a process that is a child of the agent's already (gpu_probe.c): NVML (or the
 * CUDA runtime) right here, no further child. */
#define TRUN__GPU_HERE 0x200u

/* Resolves a MIG-<uuid> entry of CUDA_VISIBLE_DEVICES (needs NVML); 0 with out filled, -1 unknown. */
typedef int (*trun__mig_fn)(void *arg, const char *ent, const int *cand, int ncand, trun_gpu *out);
/* Applies NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES of envp to the list: node->gpus / ngpu /
 * gpus_listed, and src[v] the list index of visible GPU v (-1: a MIG device without its parent). mig NULL:
 * a MIG- entry names no GPU. 0, or -1 with err (the entry that names no GPU; the GPUs before it are kept). */
int trun__gpu_select(const trun__gpu_list *l, char *const *envp, trun__mig_fn mig, void *mig_arg,
                     trun_node *node, int *src, char *err, size_t errlen);
/* node->links / p2p of the visible GPUs from the list's (src from trun__gpu_select). */
void trun__gpu_links_to_node(const trun__gpu_list *l, const int *src, trun_node *node);

/* From agent/discover/discover_cache.c: the per-boot GPU cache. trun__gpu_cache_key: what the cache is
 * valid for, without NVML (boot id, driver version and parameters, NVML library, user, and every GPU the
 * driver lists in /proc/driver/nvidia/gpus with its UUID; TRUN_PROC_ROOT, default /proc); 0, or -1 with why
 * (no NVIDIA driver in /proc: no cache). trun__gpu_cache_load: 1 with *l from a valid file of this key that
 * has what need asks (affinity), 0 (why says what was wrong or missing). trun__gpu_cache_store: 0, or -1
 * (why). Where: $XDG_RUNTIME_DIR/trun/gpus.cache, else $TMPDIR (or /tmp)/trun-<uid>/gpus.cache; a 0600 file
 * of this user in a 0700 directory of this user, else it is not used. */
#define TRUN__GPU_CACHE_KEY 8192
int trun__gpu_cache_key(char *key, size_t keylen, char *why, size_t whylen);
int trun__gpu_cache_path(char *path, size_t len, int create, char *why, size_t whylen);
int trun__gpu_cache_load(const char *key, int need_affinity, trun__gpu_list *l, char *why, size_t whylen);
int trun__gpu_cache_store(const char *key, const trun__gpu_list *l, char *why, size_t whylen);
/* Whether the list's GPUs are exactly the ones the key names (UUIDs): a list NVML and /proc agree on. */
int trun__gpu_cache_matches(const char *key, const trun__gpu_list *l);

#endif
