/* discover: what the node has, in one call (trun_discover_node) or by part. GPUs (NVML by dlopen; the CUDA
 * runtime by dlopen as the fallback, in a short-lived child only, so the agent never holds a CUDA context),
 * RDMA / EFA devices (sysfs), the instance's identity (IMDSv2, DMI fallback) and what AWS instance types have
 * (instance_types.h), the CPUs this process may use (cgroup quota) and CPU lists (cpulist.h), this host's
 * name, GPU utilisation sampled in a child (gpu_util.h), the node health checks (health.h) and the Xid
 * watcher (xid_watch.h). NVML's prototypes (nvml.h) and the library loaders stay inside. Test hooks
 * (environment): TRUN_NVML_LIBRARY, TRUN_CUDART_LIBRARY, TRUN_SYSFS_ROOT, TRUN_DMI_ROOT, TRUN_IMDS_ENDPOINT,
 * TRUN_CGROUP_ROOT, TRUN_SHM_PATH (the health check's /dev/shm), TRUN_PROC_ROOT (the GPU cache's /proc).
 * Facts: shared/spec/gpu-efa-nccl.md. Used by every other agent module, the launcher and the tools.
 * May use: base. */
#ifndef TRUN_DISCOVER_H
#define TRUN_DISCOVER_H

#include <stddef.h>
#include <stdint.h>

#define TRUN_MAX_GPUS 64
#define TRUN_MAX_RDMA 64

/* What the discovery child read from NVML for the health checks (agent/discover/health.h), per visible GPU,
 * when asked (TRUN_GPU_HEALTH). Each *_rc is the NVML return code of its call, TRUN_HF_MISSING when the
 * driver's library lacks the function (an older driver) or probed is 0; the values mean something only
 * when their rc is 0. */
#define TRUN_HF_MISSING (-1)
typedef struct {
  int probed;
  int remap_rc; /* nvmlDeviceGetRemappedRows */
  unsigned remap_corr, remap_unc, remap_pending, remap_failure;
  int retired_rc; /* nvmlDeviceGetRetiredPagesPendingStatus */
  int retired_pending;
  int ecc_rc; /* nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE) */
  unsigned long long ecc_volatile_unc;
  int clocks_rc; /* nvmlDeviceGetCurrentClocksEventReasons (or ...ThrottleReasons) */
  unsigned long long clock_reasons;
  int pcie_rc; /* nvmlDeviceGetCurrPcieLinkGeneration / Width and the Max ones */
  unsigned pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
  int nvlink_rc;                       /* nvmlDeviceGetNvLinkState: 0 when the GPU has NVLinks */
  int nvlink_links;                    /* links the GPU has */
  unsigned long long nvlink_down_mask; /* bit n: link n is not active */
  int recovery_rc;                     /* field 230 of nvmlDeviceGetFieldValues (r570+) */
  unsigned recovery_action;            /* nvmlDeviceGpuRecoveryAction_t */
} trun_gpu_health;

typedef struct {
  int index;         /* NVML index on the host; -1 when found through the CUDA runtime */
  int visible_index; /* index as the workers see it (after CUDA_VISIBLE_DEVICES), -1 when hidden */
  char uuid[96];     /* GPU-... (or MIG-... for a MIG device) */
  char name[96];
  char pci_bus_id[32];    /* 00000000:53:00.0 as NVML prints it (CUDA runtime ids are written alike) */
  int numa_node;          /* -1 unknown; sysfs -1 (VMs) is derived from cpu_affinity, see discover_gpu.c */
  char cpu_affinity[256]; /* cpulist, e.g. 0-47,96-143 */
  uint64_t memory_bytes;
  int switch_links;       /* active NVLinks to an NVSwitch (or a switch hidden in a VM); 0: none, direct links
                             only or no NVLink (NVML only) */
  int mnnvl;              /* in a multi-node NVLink domain (GB200 NVL72 and the like: NVML's fabric state
                             "completed" with a cluster UUID, as NCCL decides MNNVL): 1 yes, 0 no, -1 unknown
                             (no NVML, or a driver without nvmlDeviceGetGpuFabricInfo) */
  trun_gpu_health health; /* TRUN_GPU_HEALTH only */
} trun_gpu;

typedef struct {
  char name[64];   /* rdmap16s27, mlx5_0, ... */
  char driver[32]; /* efa, mlx5_core, ... */
  int is_efa;
  char pci_bus_id[32]; /* 0000:10:1b.0 */
  int numa_node;
  int usable;      /* a /dev/infiniband/uverbsN of this device exists in this container */
  int nearest_gpu; /* visible index of the GPU it pairs with by PCI distance, -1 none */
} trun_rdma;

typedef struct {
  char instance_type[64]; /* p5.48xlarge, or "" when unknown */
  char instance_id[64];
  char availability_zone[64];
  char placement_group[128];
  const char *source; /* "imds", "dmi", "none" */
} trun_instance;

typedef struct {
  int ngpu;                                    /* visible GPUs */
  trun_gpu gpus[TRUN_MAX_GPUS];                /* visible ones, in the order the workers see them */
  char links[TRUN_MAX_GPUS][TRUN_MAX_GPUS][8]; /* "X", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS" */
  char p2p[TRUN_MAX_GPUS][TRUN_MAX_GPUS][4];   /* P2P read status: "X", "OK", "CNS", "GNS", "TNS", "DR",
                                                  "NS", "U" (nvidia-smi topo -p2p r words), "N/A" */
  const char *gpu_source;                      /* "nvml", "cudart", "none" */
  int gpus_listed; /* devices NVML listed before CUDA_ / NVIDIA_VISIBLE_DEVICES (-1: not through NVML) */
  int nrdma;
  trun_rdma rdma[TRUN_MAX_RDMA];
  trun_instance instance;
  int cpus_usable;          /* from the cgroup CPU quota and affinity */
  int gpu_cache;            /* TRUN_GPU_CACHE_*: where the GPU facts came from when the cache was asked */
  char gpu_cache_note[256]; /* why the cache was not used (debug level) */
} trun_node;

/* node->gpu_cache: not asked, read from the cache (no NVML), discovered and written to it, discovered
 * without it (gpu_cache_note says why). */
enum { TRUN_GPU_CACHE_NONE = 0, TRUN_GPU_CACHE_HIT, TRUN_GPU_CACHE_STORED, TRUN_GPU_CACHE_UNUSED };

/* Fills node->gpus / links / p2p from NVML (TRUN_NVML_LIBRARY or libnvidia-ml.so.1), honouring
 * CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES from envp; where no NVML library loads, from the CUDA
 * runtime (TRUN_CUDART_LIBRARY or libcudart.so*, in the child; it applies CUDA_VISIBLE_DEVICES itself). 0
 * (ngpu may be 0: no driver), or -1 with a reason in err for a broken installation or a CUDA_VISIBLE_DEVICES
 * entry that names no GPU. */
int trun_discover_gpus(trun_node *node, char *const *envp, char *err, size_t errlen);
/* The same with flags: TRUN_GPU_NO_AFFINITY skips the CPU affinity (NVML takes ~15 ms per GPU for it; the
 * agent needs it only for --numa-binding) unless the NUMA node must be derived from it. NVML runs in a
 * short-lived child process either way. */
#define TRUN_GPU_NO_AFFINITY 1u
/* TRUN_GPU_HEALTH: the child also reads each visible GPU's health facts (trun_gpu.health). */
#define TRUN_GPU_HEALTH 2u
/* TRUN_GPU_CACHE: the static facts (GPUs, UUIDs, PCI ids, NUMA nodes, CPU affinity, memory, links, P2P;
 * never health) from the per-boot GPU cache when it is valid for this boot, driver, NVML library, user and
 * the GPUs /proc/driver/nvidia lists, without NVML (node->gpu_cache TRUN_GPU_CACHE_HIT: with TRUN_GPU_HEALTH
 * the health facts stay unread); otherwise NVML as without it, and the cache written. Never for a MIG-
 * entry of CUDA_VISIBLE_DEVICES. TRUN_GPU_REFRESH with it: NVML in any case, and the cache written. */
#define TRUN_GPU_CACHE 4u
#define TRUN_GPU_REFRESH 8u
int trun_discover_gpus_flags(trun_node *node, char *const *envp, unsigned flags, char *err, size_t errlen);
/* The health facts read in the background (gpu_probe.c): a short-lived child (dies with the agent, no
 * inherited descriptors) runs trun_discover_gpus_flags(TRUN_GPU_HEALTH | TRUN_GPU_CACHE | TRUN_GPU_REFRESH)
 * on a copy of base, so that the GPU cache is also checked against what NVML says now and renewed.
 * trun_gpu_probe_start: NULL when it cannot fork (errno). trun_gpu_probe_fd: readable when the child wrote or
 * ended. trun_gpu_probe_poll: 1 with *out (the copy, GPU facts fresh), *rc and err as the discovery left
 * them; 0 while it runs; -1 when it ended without a result (err says why). Never blocks.
 * trun_gpu_probe_free: stops a child that still runs. */
typedef struct trun_gpu_probe trun_gpu_probe;
trun_gpu_probe *trun_gpu_probe_start(const trun_node *base, char *const *envp);
int trun_gpu_probe_fd(const trun_gpu_probe *p);
int trun_gpu_probe_poll(trun_gpu_probe *p, trun_node *out, int *rc, char *err, size_t errlen);
void trun_gpu_probe_free(trun_gpu_probe *p);

/* Fills node->rdma from TRUN_SYSFS_ROOT (default /sys)/class/infiniband and /dev/infiniband. */
int trun_discover_rdma(trun_node *node);
/* Fills node->instance: IMDSv2 (TRUN_IMDS_ENDPOINT, default http://169.254.169.254) within ~1 s total,
 * then DMI (TRUN_DMI_ROOT, default /sys/class/dmi/id) product_name. no_imds skips the network. */
int trun_discover_instance(trun_node *node, int no_imds);
/* CPUs this process may use: affinity, capped by the cgroup v2 (cpu.max) or v1 (cfs quota/period) quota
 * under TRUN_CGROUP_ROOT (default /sys/fs/cgroup), rounded up, at least 1. */
int trun_discover_cpus(void);
/* The NUMA node of a CPU set: the only node under TRUN_SYSFS_ROOT (default /sys)/devices/system/node, else
 * the node whose cpulist contains every CPU of cpulist; -1 when none (or cpulist is empty / malformed). */
int trun_numa_of_cpulist(const char *cpulist);

/* The whole node (discover_node.c). When to ask for the instance identity in trun_discover_node;
 * TRUN_DISCOVER_NO_AFFINITY may be or'ed in (no per-GPU CPU affinity: see trun_discover_gpus_flags). */
enum { TRUN_IDENTITY_NEVER = 0, TRUN_IDENTITY_ALWAYS, TRUN_IDENTITY_IF_EFA };
#define TRUN_DISCOVER_NO_AFFINITY 0x100
/* Or'ed in: the GPUs' health facts too (TRUN_GPU_HEALTH, for the node health checks). */
#define TRUN_DISCOVER_HEALTH 0x200
/* Or'ed in: the GPUs from the per-boot cache where it is valid (TRUN_GPU_CACHE). */
#define TRUN_DISCOVER_CACHE 0x400
/* Fills node (zeroed first): GPUs from NVML honouring envp's CUDA_VISIBLE_DEVICES, RDMA devices, the
 * instance identity per identity (IMDS unless no_imds, then DMI), usable CPUs. 0, or -1 with err set when
 * GPU discovery reported a problem (what was found is kept). */
int trun_discover_node(trun_node *node, char *const *envp, int identity, int no_imds, char *err,
                       size_t errlen);

/* Python's socket.getfqdn() for this host: the first name with a dot among the reverse name of the host
 * name's address and its aliases, else the reverse name, else the host name. */
void trun_fqdn(char *out, size_t len);

#include "cpulist.h"
#include "gpu_util.h"
#include "health.h"
#include "instance_types.h"
#include "xid_watch.h"

#endif
