/* Node health checks: is this node fit to join a job? Each check has a name, its source (an NVML call, a
 * sysfs file, statvfs), a threshold, a status (pass, warn, fail, or skip when it cannot run here: no NVML,
 * a driver without the call, no EFA device) and the reason in words with what to do. The GPU facts come
 * from the discovery child (trun_discover_gpus_flags with TRUN_GPU_HEALTH): the caller never maps NVML.
 * Used by the agent's gate before the first rendezvous (--health-check) and by `trun-topo health`.
 * Checks, thresholds and reasons: docs/health.md. */
#ifndef TRUN_HEALTH_H
#define TRUN_HEALTH_H

#include <stddef.h>

#include "discover.h"

/* Ordered: a check's status is the worst of its subjects'; skip is below pass (some GPU could be judged). */
typedef enum {
  TRUN_HEALTH_SKIP = 0,
  TRUN_HEALTH_PASS,
  TRUN_HEALTH_WARN,
  TRUN_HEALTH_FAIL
} trun_health_status;

/* The checks, in the order they are listed. */
typedef enum {
  TRUN_HC_NVML = 0,      /* NVML loads and lists the GPUs */
  TRUN_HC_GPU_COUNT,     /* GPUs NVML lists vs the instance type's (or NVIDIA_VISIBLE_DEVICES's) count */
  TRUN_HC_ROW_REMAP,     /* nvmlDeviceGetRemappedRows: a remapping pending or failed */
  TRUN_HC_RETIRED_PAGES, /* nvmlDeviceGetRetiredPagesPendingStatus (GPUs before A100) */
  TRUN_HC_ECC,           /* volatile uncorrected ECC errors */
  TRUN_HC_CLOCKS,        /* HW slowdown, HW thermal, HW power brake clock event reasons */
  TRUN_HC_PCIE,          /* PCIe link width / generation below the maximum */
  TRUN_HC_NVLINK,        /* NVLinks down */
  TRUN_HC_RECOVERY,      /* the driver's GPU recovery action (r570+) */
  TRUN_HC_EFA_PORTS,     /* EFA ports ACTIVE and LinkUp */
  TRUN_HC_EFA_COUNT,     /* EFA devices vs the instance type's count */
  TRUN_HC_SHM,           /* /dev/shm large enough for NCCL */
  TRUN_HC__COUNT
} trun_health_id;

#define TRUN_HEALTH_ALL ((1u << TRUN_HC__COUNT) - 1)

typedef struct {
  const char *name;   /* "row-remap": --health-checks, events, the metric's label */
  const char *source; /* where the value comes from */
  trun_health_status status;
  char value[256];     /* what was found */
  char threshold[128]; /* what passes */
  char reason[768];    /* the verdict in words, with what to do */
} trun_health_check;

typedef struct {
  int n; /* checks run (those in the mask), in trun_health_id order */
  trun_health_check c[TRUN_HC__COUNT];
  trun_health_status worst;
  double elapsed_ms; /* the caller's: discovery plus the checks */
} trun_health;

/* What the checks need beside the node: gathered by trun_health_gather (environment, sysfs, statvfs) or
 * set by hand in tests. */
#define TRUN_HEALTH_MAX_PORTS 4
typedef struct {
  const char *nvidia_visible;  /* NVIDIA_VISIBLE_DEVICES, NULL when unset */
  const char *discovery_error; /* GPU discovery's error ("" or NULL: none) */
  long long shm_bytes;         /* size of /dev/shm (TRUN_SHM_PATH), -errno when statvfs failed */
  const char *shm_path;
  int nports[64]; /* per node->rdma[r]: ports found under class/infiniband/<dev>/ports */
  char port_state[64][TRUN_HEALTH_MAX_PORTS][24]; /* "4: ACTIVE" */
  char port_phys[64][TRUN_HEALTH_MAX_PORTS][24];  /* "5: LinkUp" */
  int port_num[64][TRUN_HEALTH_MAX_PORTS];
} trun_health_env;

/* /dev/shm below this warns (the container default is 64 MiB). */
#define TRUN_HEALTH_SHM_MIN (1LL << 30)

/* The name of a check ("gpu-count"), NULL for an id outside the table. */
const char *trun_health_name(trun_health_id id);
/* "pass", "warn", "fail", "skip". */
const char *trun_health_status_name(trun_health_status s);
/* A --health-checks list: "all", or names separated by commas; "-name" entries leave checks out of all
 * (e.g. "-pcie,-shm"). 0 and the mask, or -1 with the cause in err (a name that is no check, an empty
 * list, a list that leaves nothing). */
int trun_health_parse_checks(const char *list, unsigned *mask, char *err, size_t errlen);
/* Fills env for node: NVIDIA_VISIBLE_DEVICES from envp, the EFA ports from TRUN_SYSFS_ROOT (default /sys),
 * /dev/shm's size (TRUN_SHM_PATH overrides the path). */
void trun_health_gather(const trun_node *node, char *const *envp, const char *discovery_error,
                        trun_health_env *env);
/* The verdicts of the checks in mask for node (with its GPUs' health facts, its RDMA devices and instance
 * type) and env. Pure: no I/O. */
void trun_health_judge(const trun_node *node, const trun_health_env *env, unsigned mask, trun_health *out);
/* trun_health_gather then trun_health_judge. */
void trun_health_run(const trun_node *node, char *const *envp, const char *discovery_error, unsigned mask,
                     trun_health *out);
/* Failed checks as one line: "gpu-count (...); ecc (...)", their reasons shortened; "" when none. */
void trun_health_summary(const trun_health *h, trun_health_status at_least, char *out, size_t len);

#endif
