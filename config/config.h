/* config: what a trun job is asked to do. The settings table and the values with their sources
 * (options.h), the YAML config file (yaml_file.h), --print-config (print.h), and here the typed configuration
 * the agent runs from, checked and converted from the settings (the --rdzv-conf values in rdzv_conf.c).
 * May use: base (environment vectors); outside trun, libc and libyaml only. Used by the launcher, which fills
 * the settings, and by the agent and its modules, which read the typed configuration. */
#ifndef TRUN_CONFIG_H
#define TRUN_CONFIG_H

#include <stddef.h>

#include "options.h"
#include "print.h"
#include "yaml_file.h"

#define TRUN_MAX_LOCAL 1024
#define TRUN_MAX_SIGNALS 16
/* --hang-timeout's default: well inside torch's NCCL watchdog (10 min), so that trun's restart comes first,
 * and long enough for a rank that writes a checkpoint while the others wait for it in a barrier. */
#define TRUN_HANG_TIMEOUT_DEFAULT_S 300.0

/* --health-check: what a failed node health check does (agent/discover/health.h). */
enum { TRUN_HEALTH_CHECK_OFF = 0, TRUN_HEALTH_CHECK_WARN, TRUN_HEALTH_CHECK_FAIL };

/* TRUN_RDZV_TRUN: trun's own elastic rendezvous (agent/rdzv/trun/fast.h), --rdzv-backend trun. */
typedef enum { TRUN_RDZV_STATIC = 0, TRUN_RDZV_C10D, TRUN_RDZV_TRUN } trun_rdzv_backend;

typedef struct {
  int min_nodes, max_nodes;
  int nnodes_given;       /* --nnodes / PET_NNODES set, or detected (not the default) */
  const char *nproc_spec; /* "4", "cpu", "auto", "gpu" */
  trun_rdzv_backend backend;
  int backend_given;       /* --rdzv-backend / PET_RDZV_BACKEND set (not the default) */
  char endpoint_host[256]; /* rendezvous store host */
  int endpoint_port;       /* -1 when absent */
  char run_id[128];
  const char *rdzv_conf;
  int standalone;
  int max_restarts;
  double monitor_interval;
  const char *role;
  int module, no_python, run_path;
  const char *log_dir;                     /* NULL: a fresh /tmp/torchelastic_XXXXXX */
  int redirect_all, tee_all;               /* 0..3 for every local rank */
  signed char redirect_lr[10], tee_lr[10]; /* per local rank 0..9 (torchrun's regex), -1 = unset */
  int ranks_filter_set;
  unsigned char ranks_filter[TRUN_MAX_LOCAL]; /* 1 = shown on the console */
  int node_rank;
  int node_rank_given; /* --node-rank / PET_NODE_RANK set (a hint for --rdzv-backend trun) */
  char master_addr[256];
  int master_port;
  int master_port_given;
  const char *local_addr; /* NULL: the FQDN, or auto (local_addr_auto) until the agent has connected */
  int local_addr_auto;    /* --local-addr auto: the local address of the rendezvous store connection */
  int signals[TRUN_MAX_SIGNALS];
  int nsignals;
  const char *signals_text;
  double shutdown_timeout;     /* seconds between the forwarded signal and SIGKILL */
  double exit_barrier_timeout; /* seconds the exit barrier waits for the other agents (default 300) */
  int virtual_local_rank;
  int dry_run;
  int rdzv_status;             /* --rdzv-status: print a job's rendezvous (agent/rdzv/rdzv.h) */
  int explain;                 /* --explain: print the node and the environment decisions, start nothing */
  const char *list_excluded;   /* --list-excluded slurm|json: print the job's exclusion list, start nothing */
  int no_imds;                 /* --no-imds: no instance-metadata request */
  int gpu_cache;               /* --gpu-cache on (1) | off (0): the per-boot GPU cache */
  const char *numa_binding;    /* --numa-binding: NULL or "node" */
  const char *log_line_prefix; /* NULL: torchrun's "[${role_name}${local_rank}]:" */
  int print_config;            /* --print-config: the script may be missing */
  int on_split_pods_fail;      /* --on-split-pods fail */
  int nccl_report;             /* --nccl-report */
  int preflight;               /* --preflight */
  double preflight_pass;       /* --preflight-pass GB/s, -1: the layout's expected bandwidth */
  double preflight_warn;       /* --preflight-warn GB/s, -1: the layout's */
  const char *events;          /* --events FILE or fd:N, NULL: off */
  int metrics_port;            /* --metrics-port, -1: off, 0: a free port */
  double stall_timeout;        /* --stall-timeout seconds, 0: off */
  int stall_signal;            /* --stall-signal, 0: none */
  double hang_timeout;         /* --hang-timeout seconds after a hang is named, 0: name only */
  int store_allow_peers;       /* --store-allow-peers */
  int store_threads;           /* --store-threads: 1..64, 0 = auto */
  int health_check;            /* --health-check: TRUN_HEALTH_CHECK_OFF, _WARN (default) or _FAIL */
  const char *health_checks;   /* --health-checks: "all" or a list (checked by the agent: exit 2) */
  int watch_stdin;             /* --watch-stdin: the launcher's session on stdin (agent/agent_stdin.c) */
  int warm_start;              /* --warm-start (agent/proc/warm.h) */
  int warm_cuda;               /* --warm-start-cuda: the pool makes each slot's CUDA context */
  int warm_nccl;               /* --warm-start-nccl: ... and NCCL's once-a-process set-up */
  const char *warm_modules;    /* --warm-start-modules: "mod,mod.sub" */
  double restart_backoff;      /* --restart-backoff seconds (agent/restart_policy.h), 0: none */
  int crash_loop_rounds;       /* --crash-loop K, 0: off */
  double crash_loop_window;    /* --crash-loop SECONDS */
  int restart_offset;          /* --restart-offset, -1: unset ($SLURM_RESTART_COUNT, else 0) */
  const char *script;
  char **script_args;
  int nscript_args;
} trun_config;

/* Checks and converts every setting. Returns 0, or -1 with a one-line reason (naming the option and, for an
 * environment value, the variable) in err; the caller exits 2. */
int trun_config_from_settings(const trun_settings *cl, char **envp, trun_config *cfg, char *err,
                              size_t errlen);
/* --rdzv-conf (rdzv_conf.c): the value of key in conf ("k=v,k=v"), cut to len - 1 bytes: 1 found, 0 absent.
 */
int trun_config_conf_get(const char *conf, const char *key, char *out, size_t len);
/* Masks, in place, the value of every "trun_token=" in s (an --rdzv-conf value, or any command-line word or
 * environment string that may hold one) with '*', so that printing s or showing it in /proc shows no agent
 * token. Returns the number of values masked. */
int trun_config_conf_mask(char *s);
/* torch's get_as_bool of key in conf: 1 true, 0 false, -1 absent, -2 not a boolean. */
int trun_config_conf_bool(const char *conf, const char *key);
/* Every key=value of conf (NULL: none) has a value of the form its key takes: 0, or -1 with the reason in err
 * (the caller exits 2). unknown (may be NULL) hears of each key that trun does not read. */
int trun_config_rdzv_conf_check(const char *conf, void (*unknown)(void *arg, const char *key), void *arg,
                                char *err, size_t errlen);
/* Streams (bit 1 stdout, bit 2 stderr) redirected to files / tee'd for a local rank. */
int trun_config_redirects(const trun_config *cfg, int local_rank);
/* A random UUID (version 4) as text, as Python's str(uuid.uuid4()): --standalone's run id, the watchdog's
 * FIFO. */
void trun_uuid4(char *out, size_t len);
int trun_config_tee(const trun_config *cfg, int local_rank);
int trun_config_console_shows(const trun_config *cfg, int local_rank);

#endif
