/* The few NVML types and entry points trun uses, declared here (never from NVIDIA's nvml.h, so the build
 * needs no NVIDIA headers). Values and layouts: shared/spec/gpu-efa-nccl.md §5 (from go-nvml's nvml.h); those
 * of the health checks and events (remapped rows, ECC, clock event reasons, PCIe link, field values, event
 * sets) from NVIDIA's public nvml.h of the r570 drivers. trun resolves the versioned exports with dlsym at
 * run time; tests/fakes/nvml_shim.c implements the same prototypes for the tests. */
#ifndef TRUN_NVML_H
#define TRUN_NVML_H

typedef int trun_nvmlReturn_t;
typedef struct trun_nvmlDevice_st *trun_nvmlDevice_t; /* opaque */

enum {
  TRUN_NVML_SUCCESS = 0,
  TRUN_NVML_ERROR_UNINITIALIZED = 1,
  TRUN_NVML_ERROR_INVALID_ARGUMENT = 2,
  TRUN_NVML_ERROR_NOT_SUPPORTED = 3,
  TRUN_NVML_ERROR_NOT_FOUND = 6,
  TRUN_NVML_ERROR_INSUFFICIENT_SIZE = 7,
  TRUN_NVML_ERROR_DRIVER_NOT_LOADED = 9,
  TRUN_NVML_ERROR_TIMEOUT = 10,
  TRUN_NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  TRUN_NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  TRUN_NVML_ERROR_GPU_IS_LOST = 15,
  TRUN_NVML_ERROR_UNKNOWN = 999,
};

/* nvmlGpuTopologyLevel_t */
enum {
  TRUN_NVML_TOPOLOGY_INTERNAL = 0,
  TRUN_NVML_TOPOLOGY_SINGLE = 10,
  TRUN_NVML_TOPOLOGY_MULTIPLE = 20,
  TRUN_NVML_TOPOLOGY_HOSTBRIDGE = 30,
  TRUN_NVML_TOPOLOGY_NODE = 40,
  TRUN_NVML_TOPOLOGY_SYSTEM = 50,
};

/* nvmlGpuP2PCapsIndex_t and nvmlGpuP2PStatus_t */
enum { TRUN_NVML_P2P_CAPS_INDEX_READ = 0 };
enum {
  TRUN_NVML_P2P_STATUS_OK = 0,
  TRUN_NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1,
  TRUN_NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
  TRUN_NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
  TRUN_NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
  TRUN_NVML_P2P_STATUS_NOT_SUPPORTED = 5,
  TRUN_NVML_P2P_STATUS_UNKNOWN = 6,
};

/* nvmlIntNvLinkDeviceType_t */
enum { TRUN_NVML_NVLINK_DEVICE_TYPE_GPU = 0, TRUN_NVML_NVLINK_DEVICE_TYPE_SWITCH = 2 };

#define TRUN_NVML_NVLINK_MAX_LINKS 36 /* 12 (CUDA <= 11.7), 18 (11.8-13.2), 36 (13.3) */

/* nvmlPciInfo_t (v2/v3 layout, 68 bytes). Callers pass a larger buffer (trun_nvml_pci) in case a future
 * driver writes more. */
typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32]; /* "%08X:%02X:%02X.0" */
} trun_nvmlPciInfo_t;

typedef union {
  trun_nvmlPciInfo_t info;
  char pad[256];
} trun_nvml_pci;

/* nvmlMemory_t (v1) */
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} trun_nvmlMemory_t;

/* nvmlUtilization_t: percent of the last sample period (1/6 s to 1 s) a kernel ran / memory was read or
 * written. */
typedef struct {
  unsigned int gpu;
  unsigned int memory;
} trun_nvmlUtilization_t;

/* nvmlGpuFabricInfo_t (nvmlDeviceGetGpuFabricInfo, r525+ drivers): whether the GPU has registered with an
 * NVLink fabric and the UUID of its cluster (all zero: no multi-node NVLink domain; NCCL's MNNVL check). */
typedef struct {
  unsigned char cluster_uuid[16];
  trun_nvmlReturn_t status;
  unsigned int clique_id;
  unsigned char state; /* nvmlGpuFabricState_t */
} trun_nvmlGpuFabricInfo_t;
enum { TRUN_NVML_GPU_FABRIC_STATE_COMPLETED = 3 };

/* nvmlMemoryErrorType_t, nvmlEccCounterType_t (nvmlDeviceGetTotalEccErrors) */
enum { TRUN_NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { TRUN_NVML_VOLATILE_ECC = 0 };

/* nvmlClocksEventReasons (the older name: nvmlClocksThrottleReasons), bits of one unsigned long long */
#define TRUN_NVML_CLOCKS_EVENT_GPU_IDLE 0x1ULL
#define TRUN_NVML_CLOCKS_EVENT_HW_SLOWDOWN 0x8ULL
#define TRUN_NVML_CLOCKS_EVENT_HW_THERMAL_SLOWDOWN 0x40ULL
#define TRUN_NVML_CLOCKS_EVENT_HW_POWER_BRAKE_SLOWDOWN 0x80ULL

/* nvmlDeviceGpuRecoveryAction_t, read through nvmlDeviceGetFieldValues with field 230
 * (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, drivers r570 and later) */
#define TRUN_NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230
enum {
  TRUN_NVML_GPU_RECOVERY_ACTION_NONE = 0,
  TRUN_NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1,
  TRUN_NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2,
  TRUN_NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3,
  TRUN_NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4,
  TRUN_NVML_GPU_RECOVERY_ACTION_GPU_RESET_BUS = 5,
};

/* nvmlFieldValue_t (40 bytes): the value is a union of 8 bytes; valueType says which member (1 = unsigned
 * int). */
typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  trun_nvmlReturn_t nvmlReturn;
  union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
  } value;
} trun_nvmlFieldValue_t;

/* Events: nvmlEventTypeXidCriticalError; nvmlEventData_t (v2 layout, 32 bytes; eventData is the Xid, 999 for
 * an unknown one). nvmlEventSetWait_v2 returns TRUN_NVML_ERROR_TIMEOUT when nothing came. */
#define TRUN_NVML_EVENT_TYPE_XID_CRITICAL_ERROR 0x8ULL
typedef struct trun_nvmlEventSet_st *trun_nvmlEventSet_t; /* opaque */
typedef struct {
  trun_nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} trun_nvmlEventData_t;

/* Prototypes, by exported symbol name (used as function pointer types). */
typedef trun_nvmlReturn_t (*trun_nvmlInit_v2_fn)(void);
typedef trun_nvmlReturn_t (*trun_nvmlShutdown_fn)(void);
typedef const char *(*trun_nvmlErrorString_fn)(trun_nvmlReturn_t);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetCount_v2_fn)(unsigned int *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int, trun_nvmlDevice_t *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetHandleByUUID_fn)(const char *, trun_nvmlDevice_t *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetDeviceHandleFromMigDeviceHandle_fn)(trun_nvmlDevice_t,
                                                                                  trun_nvmlDevice_t *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetUUID_fn)(trun_nvmlDevice_t, char *, unsigned int);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetName_fn)(trun_nvmlDevice_t, char *, unsigned int);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetPciInfo_fn)(trun_nvmlDevice_t, trun_nvmlPciInfo_t *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetMemoryInfo_fn)(trun_nvmlDevice_t, trun_nvmlMemory_t *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetUtilizationRates_fn)(trun_nvmlDevice_t,
                                                                   trun_nvmlUtilization_t *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetCpuAffinity_fn)(trun_nvmlDevice_t, unsigned int,
                                                              unsigned long *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetNumaNodeId_fn)(trun_nvmlDevice_t, unsigned int *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetTopologyCommonAncestor_fn)(trun_nvmlDevice_t, trun_nvmlDevice_t,
                                                                         int *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetP2PStatus_fn)(trun_nvmlDevice_t, trun_nvmlDevice_t, int, int *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetNvLinkState_fn)(trun_nvmlDevice_t, unsigned int, int *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetNvLinkRemotePciInfo_fn)(trun_nvmlDevice_t, unsigned int,
                                                                      trun_nvmlPciInfo_t *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetNvLinkRemoteDeviceType_fn)(trun_nvmlDevice_t, unsigned int,
                                                                         int *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetGpuFabricInfo_fn)(trun_nvmlDevice_t,
                                                                trun_nvmlGpuFabricInfo_t *);
/* The health checks (agent/discover/health_gpu.c) and the Xid watcher (xid_watch.c). */
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetRemappedRows_fn)(trun_nvmlDevice_t, unsigned int *corr,
                                                               unsigned int *unc, unsigned int *pending,
                                                               unsigned int *failure);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetRetiredPagesPendingStatus_fn)(trun_nvmlDevice_t,
                                                                            int *pending); /* enable state */
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetTotalEccErrors_fn)(trun_nvmlDevice_t, int error_type,
                                                                 int counter_type, unsigned long long *count);
/* nvmlDeviceGetCurrentClocksEventReasons (r535+) or nvmlDeviceGetCurrentClocksThrottleReasons (older) */
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetClocksReasons_fn)(trun_nvmlDevice_t, unsigned long long *);
/* nvmlDeviceGetCurrPcieLinkGeneration, ...GetMaxPcieLinkGeneration, ...GetCurrPcieLinkWidth,
 * ...GetMaxPcieLinkWidth */
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetPcieLink_fn)(trun_nvmlDevice_t, unsigned int *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceGetFieldValues_fn)(trun_nvmlDevice_t, int count,
                                                              trun_nvmlFieldValue_t *values);
typedef trun_nvmlReturn_t (*trun_nvmlEventSetCreate_fn)(trun_nvmlEventSet_t *);
typedef trun_nvmlReturn_t (*trun_nvmlDeviceRegisterEvents_fn)(trun_nvmlDevice_t, unsigned long long types,
                                                              trun_nvmlEventSet_t);
typedef trun_nvmlReturn_t (*trun_nvmlEventSetWait_fn)(trun_nvmlEventSet_t, trun_nvmlEventData_t *,
                                                      unsigned int timeout_ms);
typedef trun_nvmlReturn_t (*trun_nvmlEventSetFree_fn)(trun_nvmlEventSet_t);

#endif
