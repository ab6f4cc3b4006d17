/* The settings trun takes: every option of torchrun's command line and trun's own, as one table (name,
 * spellings, flag or value, default, PET_* / TRUN_* environment variable, --help text), and the value of each
 * with its source. The command line (launcher/cli.h), the detected platform (launcher/platform.h) and the
 * config file (config/yaml_file.h) all fill one trun_settings; config/config.h types it. */
#ifndef TRUN_OPTIONS_H
#define TRUN_OPTIONS_H

#include <stddef.h>

typedef enum {
  TRUN_OPT_NNODES,
  TRUN_OPT_NPROC_PER_NODE,
  TRUN_OPT_RDZV_BACKEND,
  TRUN_OPT_RDZV_ENDPOINT,
  TRUN_OPT_RDZV_ID,
  TRUN_OPT_RDZV_CONF,
  TRUN_OPT_STANDALONE,
  TRUN_OPT_MAX_RESTARTS,
  TRUN_OPT_MONITOR_INTERVAL,
  TRUN_OPT_START_METHOD,
  TRUN_OPT_EVENT_LOG_HANDLER,
  TRUN_OPT_ROLE,
  TRUN_OPT_MODULE,
  TRUN_OPT_NO_PYTHON,
  TRUN_OPT_RUN_PATH,
  TRUN_OPT_LOG_DIR,
  TRUN_OPT_REDIRECTS,
  TRUN_OPT_TEE,
  TRUN_OPT_LOCAL_RANKS_FILTER,
  TRUN_OPT_DUPLICATE_STDOUT_FILTERS,
  TRUN_OPT_DUPLICATE_STDERR_FILTERS,
  TRUN_OPT_NODE_RANK,
  TRUN_OPT_MASTER_ADDR,
  TRUN_OPT_MASTER_PORT,
  TRUN_OPT_LOCAL_ADDR,
  TRUN_OPT_LOGS_SPECS,
  TRUN_OPT_NUMA_BINDING,
  TRUN_OPT_SIGNALS_TO_HANDLE,
  TRUN_OPT_SHUTDOWN_TIMEOUT,
  TRUN_OPT_VIRTUAL_LOCAL_RANK,
  /* trun's own options */
  TRUN_OPT_DRY_RUN,
  TRUN_OPT_RDZV_STATUS, /* --rdzv-status: print the job's rendezvous state from its store, start nothing */
  TRUN_OPT_LOG_LINE_PREFIX,
  TRUN_OPT_EXPLAIN,
  TRUN_OPT_NO_IMDS,
  TRUN_OPT_CONFIG,            /* --config FILE: settings from a YAML file (config/yaml_file.h) */
  TRUN_OPT_PRINT_CONFIG,      /* --print-config: print every setting with its source, then exit */
  TRUN_OPT_HOSTFILE,          /* --hostfile FILE: one agent per host over --rsh (launcher/hostfile.h) */
  TRUN_OPT_RSH,               /* --rsh CMD: the remote shell command of --hostfile */
  TRUN_OPT_ON_SPLIT_PODS,     /* --on-split-pods warn|fail: the doctor's split-pod / GPU-clash findings
                                 (agent/nccl/doctor.h) */
  TRUN_OPT_NCCL_REPORT,       /* --nccl-report: NCCL INFO logs per rank, transport report at the end
                                 (agent/nccl/nccl_log.h) */
  TRUN_OPT_PREFLIGHT,         /* --preflight: NCCL all-reduce check before the workers (tools/preflight.c) */
  TRUN_OPT_PREFLIGHT_PASS,    /* --preflight-pass GBPS: busbw at or above it passes (else the table's) */
  TRUN_OPT_PREFLIGHT_WARN,    /* --preflight-warn GBPS: busbw at or above it warns, below it fails */
  TRUN_OPT_EVENTS,            /* --events FILE|fd:N: JSON-lines event stream (agent/observe/events.h) */
  TRUN_OPT_METRICS_PORT,      /* --metrics-port P: Prometheus endpoint (agent/observe/metrics.h) */
  TRUN_OPT_STALL_TIMEOUT,     /* --stall-timeout S: hang detection (agent/observe/stall.h) */
  TRUN_OPT_STALL_SIGNAL,      /* --stall-signal SIG: sent to a stalled worker before the restart */
  TRUN_OPT_HANG_TIMEOUT,      /* --hang-timeout S: restart after a RAS-found hang (agent_hang.c) */
  TRUN_OPT_STORE_ALLOW_PEERS, /* --store-allow-peers: the store admits only the job's hosts */
  TRUN_OPT_STORE_THREADS,     /* --store-threads: event loops of the stores this agent hosts */
  TRUN_OPT_GPU_CACHE,     /* --gpu-cache on|off: the per-boot GPU cache (agent/discover/discover_cache.c) */
  TRUN_OPT_HEALTH_CHECK,  /* --health-check off|warn|fail: the node health gate (agent/discover/health.h) */
  TRUN_OPT_HEALTH_CHECKS, /* --health-checks LIST: which checks the gate runs */
  TRUN_OPT_WATCH_STDIN,   /* --watch-stdin: stop on stdin's end, signals as lines (hostfile agents) */
  TRUN_OPT_EXIT_BARRIER_TIMEOUT, /* --exit-barrier-timeout S: the exit barrier's wait (pytorch#157318) */
  TRUN_OPT_WARM_START, /* --warm-start: workers from a pool of pre-started interpreters (agent/proc/warm.h) */
  TRUN_OPT_WARM_START_MODULES, /* --warm-start-modules LIST: what the pool imports */
  TRUN_OPT_WARM_START_CUDA,    /* --warm-start-cuda: the pool makes each slot's CUDA context */
  TRUN_OPT_WARM_START_NCCL,    /* --warm-start-nccl: ... and does NCCL's once-a-process set-up */
  TRUN_OPT_RESTART_BACKOFF,    /* --restart-backoff S: wait before restarting after a fast failure */
  TRUN_OPT_CRASH_LOOP,     /* --crash-loop K:S: K failed rounds in a row, each within S s: stop (exit 5) */
  TRUN_OPT_RESTART_OFFSET, /* --restart-offset N: restarts the job used before (requeues) */
  TRUN_OPT_LIST_EXCLUDED, /* --list-excluded slurm|json: print the job's exclusion list (agent/rdzv/rdzv.h) */
  TRUN_OPT__COUNT
} trun_opt_id;

/* Sources in increasing precedence: detected (launcher/platform.h) fills defaults, a config file beats it. */
typedef enum { TRUN_SRC_DEFAULT = 0, TRUN_SRC_DETECTED, TRUN_SRC_FILE, TRUN_SRC_ENV, TRUN_SRC_CLI } trun_src;

typedef struct {
  const char *name;  /* canonical long spelling without dashes, e.g. "nproc-per-node" */
  const char *alias; /* the underscore spelling ("nproc_per_node") or NULL */
  char short_name;   /* 'm', 'r', 't' or 0 */
  int is_flag;       /* takes no value: present => "1" */
  const char *def;   /* default value text, NULL = unset */
  const char *env;   /* PET_* fallback or NULL */
  const char *group; /* --help section */
  const char *metavar;
  const char *help;
} trun_opt_desc;

typedef struct {
  const char *val; /* NULL = unset; points into argv/environ/defaults, or a config file / platform held by
                     the caller for as long as the settings */
  trun_src src;
  int line, col;   /* TRUN_SRC_FILE: 1-based position of the value in the config file */
  const char *why; /* TRUN_SRC_DETECTED: the variable it was detected from, e.g. "SLURM_NNODES" (or NULL) */
} trun_opt_val;

/* Every setting's value text with its source, from whichever of the command line, the environment, a config
 * file, the detected platform or the defaults gave it (launcher/ fills it; trun_config_from_settings types
 * it). */
typedef struct {
  trun_opt_val v[TRUN_OPT__COUNT];
  const char *script; /* training_script (NULL when absent) */
  char **script_args; /* points into argv */
  int nscript_args;
  int help;    /* --help given */
  int version; /* --version given */
  /* Set by trun_yaml_apply / trun_platform_apply (NULL otherwise): */
  const char *config_path;   /* the config file the TRUN_SRC_FILE values came from */
  const char *platform;      /* the platform the TRUN_SRC_DETECTED values came from, e.g. "slurm" */
  const char *platform_note; /* what the platform could not tell and what to do, or NULL */
  trun_src script_src;       /* TRUN_SRC_CLI, or TRUN_SRC_FILE when script (and args) came from the file */
  int script_line, script_col;
  int args_line; /* TRUN_SRC_FILE: the line of args: (0 when the file has none) */
} trun_settings;

/* The table entry of id, or NULL for an id outside it. */
const trun_opt_desc *trun_opt_desc_of(trun_opt_id id);
/* The --help sections in their order: the i-th, or NULL past the last. */
const char *trun_opt_group(int i);
/* "default", "detected", "file", "env", "cli". */
const char *trun_src_name(trun_src s);
/* Levenshtein distance between a[0..alen) and b; (size_t)-1 for words longer than 63 bytes. */
size_t trun_edit_distance(const char *a, size_t alen, const char *b);

#endif
