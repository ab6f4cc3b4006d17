/* The settings table (config/options.h): every option's spellings, default, environment variable and --help
 * text, in torchrun's --help groups; and the small helpers every reader of the table shares. */
#include "options.h"

#include <string.h>

#define TRUN_G_SIZE "Worker/node size related arguments"
#define TRUN_G_RDZV "Rendezvous related arguments"
#define TRUN_G_USER "User-code launch related arguments"
#define TRUN_G_COMPAT "Backwards compatible parameters with caffe2.distributed.launch"
#define TRUN_G_TRUN "trun"

static const trun_opt_desc trun_opts[TRUN_OPT__COUNT] = {
    [TRUN_OPT_NNODES] = {"nnodes", NULL, 0, 0, "1:1", "PET_NNODES", TRUN_G_SIZE, "NNODES",
                         "Number of nodes, or the range of nodes in form <minimum_nodes>:<maximum_nodes>."},
    [TRUN_OPT_NPROC_PER_NODE] = {"nproc-per-node", "nproc_per_node", 0, 0, "1", "PET_NPROC_PER_NODE",
                                 TRUN_G_SIZE, "NPROC_PER_NODE",
                                 "Number of workers per node; an integer or one of cpu, gpu, auto."},
    [TRUN_OPT_RDZV_BACKEND] = {"rdzv-backend", "rdzv_backend", 0, 0, "static", "PET_RDZV_BACKEND",
                               TRUN_G_RDZV, "RDZV_BACKEND",
                               "Rendezvous backend: static, c10d (torchrun's, elastic), or trun (trun's fast "
                               "elastic rendezvous for all-trun fleets)."},
    [TRUN_OPT_RDZV_ENDPOINT] = {"rdzv-endpoint", "rdzv_endpoint", 0, 0, "", "PET_RDZV_ENDPOINT", TRUN_G_RDZV,
                                "RDZV_ENDPOINT",
                                "Rendezvous backend endpoint; usually in form <host>:<port>."},
    [TRUN_OPT_RDZV_ID] = {"rdzv-id", "rdzv_id", 0, 0, "none", "PET_RDZV_ID", TRUN_G_RDZV, "RDZV_ID",
                          "User-defined group id (the job id), shared by all nodes of the job."},
    [TRUN_OPT_RDZV_CONF] = {"rdzv-conf", "rdzv_conf", 0, 0, "", "PET_RDZV_CONF", TRUN_G_RDZV, "RDZV_CONF",
                            "Additional rendezvous configuration (<key1>=<value1>,<key2>=<value2>,...)."},
    [TRUN_OPT_STANDALONE] =
        {"standalone", NULL, 0, 1, NULL, "PET_STANDALONE", TRUN_G_RDZV, NULL,
         "Start a local standalone rendezvous for a single-node job (trun's own single-node "
         "rendezvous - shown as static - on a free port with a random run id; torchrun "
         "uses c10d there, the workers see the same); the rdzv options are ignored and "
         "--nnodes above 1 is refused."},
    [TRUN_OPT_MAX_RESTARTS] = {"max-restarts", "max_restarts", 0, 0, "0", "PET_MAX_RESTARTS", TRUN_G_USER,
                               "MAX_RESTARTS", "Maximum number of worker group restarts before failing."},
    [TRUN_OPT_MONITOR_INTERVAL] = {"monitor-interval", "monitor_interval", 0, 0, "0.1",
                                   "PET_MONITOR_INTERVAL", TRUN_G_USER, "MONITOR_INTERVAL",
                                   "Interval, in seconds, to monitor the state of workers."},
    [TRUN_OPT_START_METHOD] = {"start-method", "start_method", 0, 0, "spawn", "PET_START_METHOD", TRUN_G_USER,
                               "{spawn,fork,forkserver}",
                               "Multiprocessing start method to use when creating workers."},
    [TRUN_OPT_EVENT_LOG_HANDLER] = {"event-log-handler", "event_log_handler", 0, 0, "null",
                                    "PET_EVENT_LOG_HANDLER", TRUN_G_USER, "EVENT_LOG_HANDLER",
                                    "Name of a registered event logging handler."},
    [TRUN_OPT_ROLE] = {"role", NULL, 0, 0, "default", "PET_ROLE", TRUN_G_USER, "ROLE",
                       "User-defined role for the workers."},
    [TRUN_OPT_MODULE] = {"module", NULL, 'm', 1, NULL, "PET_MODULE", TRUN_G_USER, NULL,
                         "Change each process to interpret the launch script as a Python module, executing "
                         "with the same behavior as 'python -m'."},
    [TRUN_OPT_NO_PYTHON] = {"no-python", "no_python", 0, 1, NULL, "PET_NO_PYTHON", TRUN_G_USER, NULL,
                            "Skip prepending the training script with 'python' - just execute it directly. "
                            "Useful when the script is not a Python script."},
    [TRUN_OPT_RUN_PATH] = {"run-path", "run_path", 0, 1, NULL, "PET_RUN_PATH", TRUN_G_USER, NULL,
                           "Run the training script with runpy.run_path in the same interpreter. The script "
                           "must be provided as an abs path (e.g. /abs/path/script.py). Takes precedence "
                           "over --no-python."},
    [TRUN_OPT_LOG_DIR] =
        {"log-dir", "log_dir", 0, 0, NULL, "PET_LOG_DIR", TRUN_G_USER, "LOG_DIR",
         "Base directory to use for log files (e.g. /var/log/torch/elastic). The same "
         "directory is re-used for multiple runs (a unique job-level sub-directory is "
         "created with rdzv_id as the prefix). Unset: a fresh /tmp/torchelastic_* directory."},
    [TRUN_OPT_REDIRECTS] =
        {"redirects", NULL, 'r', 0, "0", "PET_REDIRECTS", TRUN_G_USER, "REDIRECTS",
         "Redirect std streams into a log file in the log directory (e.g. [-r 3] redirects "
         "both stdout+stderr for all workers, [-r 0:1,1:2] redirects stdout for local rank "
         "0 and stderr for local rank 1)."},
    [TRUN_OPT_TEE] = {"tee", NULL, 't', 0, "0", "PET_TEE", TRUN_G_USER, "TEE",
                      "Tee std streams into a log file and also to console (see --redirects for format)."},
    [TRUN_OPT_LOCAL_RANKS_FILTER] =
        {"local-ranks-filter", "local_ranks_filter", 0, 0, "", "PET_LOCAL_RANKS_FILTER", TRUN_G_USER,
         "LOCAL_RANKS_FILTER",
         "Only show logs from specified ranks in console (e.g. [--local_ranks_filter "
         "0,1,2] will only show logs from rank 0, 1 and 2). This will only apply to "
         "stdout and stderr, not to log files saved via --redirect or --tee."},
    [TRUN_OPT_DUPLICATE_STDOUT_FILTERS] = {"duplicate-stdout-filters", "duplicate_stdout_filters", 0, 0, "",
                                           "PET_DUPLICATE_STDOUT_FILTERS", TRUN_G_USER,
                                           "DUPLICATE_STDOUT_FILTERS",
                                           "Comma-separated strings (',,' for a literal comma); tee'd stdout "
                                           "lines containing one are also written to "
                                           "attempt_N/filtered_stdout.log."},
    [TRUN_OPT_DUPLICATE_STDERR_FILTERS] = {"duplicate-stderr-filters", "duplicate_stderr_filters", 0, 0, "",
                                           "PET_DUPLICATE_STDERR_FILTERS", TRUN_G_USER,
                                           "DUPLICATE_STDERR_FILTERS",
                                           "Comma-separated strings (',,' for a literal comma); tee'd stderr "
                                           "lines containing one are also written to "
                                           "attempt_N/filtered_stderr.log."},
    [TRUN_OPT_NODE_RANK] = {"node-rank", "node_rank", 0, 0, "0", "PET_NODE_RANK", TRUN_G_COMPAT, "NODE_RANK",
                            "Rank of the node for multi-node distributed training (static backend only)."},
    [TRUN_OPT_MASTER_ADDR] = {"master-addr", "master_addr", 0, 0, "127.0.0.1", "PET_MASTER_ADDR",
                              TRUN_G_COMPAT, "MASTER_ADDR",
                              "Address of the master node (rank 0); static backend only. IPv6 as [::1]."},
    [TRUN_OPT_MASTER_PORT] = {"master-port", "master_port", 0, 0, "29500", "PET_MASTER_PORT", TRUN_G_COMPAT,
                              "MASTER_PORT",
                              "Port on the master node (rank 0) used for communication during distributed "
                              "training; static backend only."},
    [TRUN_OPT_LOCAL_ADDR] = {"local-addr", "local_addr", 0, 0, NULL, "PET_LOCAL_ADDR", TRUN_G_COMPAT,
                             "LOCAL_ADDR",
                             "Address of the local node; used as its rendezvous identity and, where it "
                             "hosts the workers' store, as their MASTER_ADDR. Unset: the fully qualified "
                             "host name. auto: the local address of its connection to the rendezvous "
                             "store (no DNS needed: containers, pods without a headless Service)."},
    [TRUN_OPT_LOGS_SPECS] = {"logs-specs", "logs_specs", 0, 0, NULL, NULL, TRUN_G_COMPAT, "LOGS_SPECS",
                             "torchrun.logs_specs group entrypoint name (a LogsSpecs plugin)."},
    [TRUN_OPT_NUMA_BINDING] = {"numa-binding", "numa_binding", 0, 0, NULL, NULL, TRUN_G_COMPAT, "{node}",
                               "Pin each worker to the CPUs of its GPU's NUMA node (GPU index = local rank). "
                               "torchrun's socket, exclusive and core-complex are not implemented."},
    [TRUN_OPT_SIGNALS_TO_HANDLE] = {"signals-to-handle", "signals_to_handle", 0, 0,
                                    "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "PET_SIGNALS_TO_HANDLE", TRUN_G_COMPAT,
                                    "SIGNALS_TO_HANDLE",
                                    "Comma-separated list of signals the launcher forwards to its workers "
                                    "(e.g. add SIGUSR1,SIGUSR2)."},
    [TRUN_OPT_SHUTDOWN_TIMEOUT] = {"shutdown-timeout", "shutdown_timeout", 0, 0, NULL, "PET_SHUTDOWN_TIMEOUT",
                                   TRUN_G_COMPAT, "SHUTDOWN_TIMEOUT",
                                   "Seconds between the forwarded signal and SIGKILL when stopping workers. "
                                   "Unset: $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30."},
    [TRUN_OPT_VIRTUAL_LOCAL_RANK] =
        {"virtual-local-rank", "virtual_local_rank", 0, 1, NULL, "PET_VIRTUAL_LOCAL_RANK", TRUN_G_COMPAT,
         NULL,
         "Give every worker LOCAL_RANK=0 and narrow CUDA_VISIBLE_DEVICES to its own "
         "GPU."},
    [TRUN_OPT_DRY_RUN] = {"dry-run", "dry_run", 0, 1, NULL, "TRUN_DRY_RUN", TRUN_G_TRUN, NULL,
                          "Print the resolved plan - nodes, ranks, each local rank's environment - and start "
                          "nothing."},
    [TRUN_OPT_RDZV_STATUS] = {"rdzv-status", NULL, 0, 1, NULL, NULL, TRUN_G_TRUN, NULL,
                              "Print the rendezvous state of the job whose store --rdzv-endpoint (or "
                              "--master-addr / --master-port) and --rdzv-id name - its backend and size as "
                              "the store holds them, round, members, missing, waiting and lost nodes - and "
                              "start nothing; no script needed. Exit 0, 1 (store unreachable or unreadable), "
                              "2 (bad input)."},
    [TRUN_OPT_LOG_LINE_PREFIX] =
        {"log-line-prefix", "log_line_prefix", 0, 0, NULL, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
         TRUN_G_TRUN, "TEMPLATE",
         "The prefix of tee'd console lines, with ${role_name} ${local_rank} ${rank} "
         "${hostname}. Unset: \"[${role_name}${local_rank}]:\"."},
    [TRUN_OPT_EXPLAIN] =
        {"explain", NULL, 0, 1, NULL, NULL, TRUN_G_TRUN, NULL,
         "Print what was found on this node (GPUs, links, EFA, instance type) and each NCCL / "
         "libfabric variable the workers get: value, source (user, trun, left to plugin) and "
         "reason; start nothing. The training script may be left out."},
    [TRUN_OPT_NO_IMDS] = {"no-imds", "no_imds", 0, 1, NULL, NULL, TRUN_G_TRUN, NULL,
                          "Do not ask the EC2 instance metadata service for the instance type (DMI only)."},
    [TRUN_OPT_CONFIG] = {"config", NULL, 0, 0, NULL, "TRUN_CONFIG", TRUN_G_TRUN, "FILE",
                         "YAML file with settings (keys are the option names; script and args too). "
                         "Precedence: command line > environment > file > detected platform > default."},
    [TRUN_OPT_PRINT_CONFIG] = {"print-config", "print_config", 0, 1, NULL, NULL, TRUN_G_TRUN, NULL,
                               "Print the effective value and source of every setting, then exit."},
    [TRUN_OPT_HOSTFILE] = {"hostfile", NULL, 0, 0, NULL, NULL, TRUN_G_TRUN, "HOSTFILE",
                           "Start one agent per host of this file (lines 'host [slots=N]', '#' comments) "
                           "through --rsh, with this command line plus --nnodes, --node-rank and "
                           "--master-addr (the first host); output lines get a '[host] ' prefix."},
    [TRUN_OPT_RSH] = {"rsh", NULL, 0, 0,
                      "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=10", NULL,
                      TRUN_G_TRUN, "CMD",
                      "Remote shell command of --hostfile, split on blanks, run as CMD HOST TRUN ARGS... "
                      "(arguments quoted for the remote shell)."},
    [TRUN_OPT_ON_SPLIT_PODS] =
        {"on-split-pods", "on_split_pods", 0, 0, "warn", "TRUN_ON_SPLIT_PODS", TRUN_G_TRUN, "{warn,fail}",
         "When several agents run on one physical host (split pods: NCCL then uses the "
         "network instead of NVLink) or two agents see the same GPU: warn, or fail "
         "(exit 1 before the workers start). Node rank 0 prints the report."},
    [TRUN_OPT_NCCL_REPORT] =
        {"nccl-report", "nccl_report", 0, 1, NULL, "TRUN_NCCL_REPORT", TRUN_G_TRUN, NULL,
         "Log NCCL's transport choices per rank (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,P2P,"
         "NET, NCCL_DEBUG_FILE=<log dir>/attempt_N/<local rank>/nccl.%h.%p.log; user "
         "values kept) and print, 30 s after the workers start and at their end, each "
         "communicator's transports "
         "(P2P, SHM, NET/Libfabric, NET/Socket) and a verdict."},
    [TRUN_OPT_PREFLIGHT] =
        {"preflight", NULL, 0, 1, NULL, "TRUN_PREFLIGHT", TRUN_G_TRUN, NULL,
         "Before the workers: one trun-preflight per local GPU joins one NCCL communicator "
         "over all ranks, runs all-reduce 8 B..1 GiB and prints busbw with a pass / warn / "
         "fail verdict; fail stops the job (exit 1). Skipped on a host without GPUs."},
    [TRUN_OPT_PREFLIGHT_PASS] = {"preflight-pass", "preflight_pass", 0, 0, NULL, "TRUN_PREFLIGHT_PASS",
                                 TRUN_G_TRUN, "GBPS",
                                 "--preflight verdict: PASS when the peak busbw is at least GBPS (GB/s). "
                                 "Unset: the expected bandwidth of the layout (NVLink, PCIe, EFA, sockets)."},
    [TRUN_OPT_PREFLIGHT_WARN] = {"preflight-warn", "preflight_warn", 0, 0, NULL, "TRUN_PREFLIGHT_WARN",
                                 TRUN_G_TRUN, "GBPS",
                                 "--preflight verdict: WARN when the peak busbw is at least GBPS, below it "
                                 "FAIL. Unset: the layout's. Given with --preflight-pass: at most that."},
    [TRUN_OPT_EVENTS] = {"events", NULL, 0, 0, NULL, "TRUN_EVENTS", TRUN_G_TRUN, "FILE|fd:N",
                         "Write a JSON-lines event stream (discovery, rendezvous rounds, worker start/exit, "
                         "restarts, stalls, failures, job end) to FILE (appended) or descriptor N."},
    [TRUN_OPT_METRICS_PORT] = {"metrics-port", "metrics_port", 0, 0, NULL, "TRUN_METRICS_PORT", TRUN_G_TRUN,
                               "PORT",
                               "Serve Prometheus metrics at http://<host>:PORT/metrics (0: a free port, "
                               "printed on stderr)."},
    [TRUN_OPT_STALL_TIMEOUT] =
        {"stall-timeout", "stall_timeout", 0, 0, NULL, "TRUN_STALL_TIMEOUT", TRUN_G_TRUN, "SECONDS",
         "Restart the workers (like a failure) when a worker shows no output and no CPU "
         "time for SECONDS. Unset or 0: off."},
    [TRUN_OPT_STALL_SIGNAL] = {"stall-signal", "stall_signal", 0, 0, NULL, "TRUN_STALL_SIGNAL", TRUN_G_TRUN,
                               "SIGNAL",
                               "Send SIGNAL (e.g. SIGUSR1 for a faulthandler stack dump) to a stalled worker "
                               "and wait 5 s before the restart."},
    [TRUN_OPT_HANG_TIMEOUT] =
        {"hang-timeout", "hang_timeout", 0, 0, "300", "TRUN_HANG_TIMEOUT", TRUN_G_TRUN, "SECONDS",
         "Once NCCL RAS shows a collective hung (counts frozen while ranks disagree, 15 s), restart the "
         "workers SECONDS later with the rank behind as the root cause. 0: name it only."},
    [TRUN_OPT_STORE_ALLOW_PEERS] = {"store-allow-peers", "store_allow_peers", 0, 1, NULL,
                                    "TRUN_STORE_ALLOW_PEERS", TRUN_G_TRUN, NULL,
                                    "Static rendezvous: once every node joined, node rank 0's store admits "
                                    "only the joined nodes' addresses and its own."},
    [TRUN_OPT_STORE_THREADS] =
        {"store-threads", "store_threads", 0, 0, "auto", "TRUN_STORE_THREADS", TRUN_G_TRUN, "N|auto",
         "Threads (event loops) of the TCPStore servers this agent hosts, 1-64. auto: 4 "
         "with 32 or more usable CPUs, 2 with 8 or more, else 1."},
    [TRUN_OPT_GPU_CACHE] =
        {"gpu-cache", "gpu_cache", 0, 0, "on", "TRUN_GPU_CACHE", TRUN_G_TRUN, "{on,off}",
         "on: the GPUs' fixed facts (devices, PCI ids, NUMA nodes, NVLinks) come from a per-boot cache in "
         "the user's runtime directory when it matches this boot, driver and set of GPUs, so that a launch "
         "needs no NVML; off: NVML at every launch."},
    [TRUN_OPT_HEALTH_CHECK] =
        {"health-check", "health_check", 0, 0, "warn", "TRUN_HEALTH_CHECK", TRUN_G_TRUN, "{off,warn,fail}",
         "Before the first rendezvous, check this node (GPU count, memory errors, clocks, PCIe, NVLink, "
         "the driver's recovery action, EFA ports, /dev/shm) and during the job watch for hardware Xids: "
         "warn, or fail (exit 3 before joining, so that the scheduler replaces the node), or off."},
    [TRUN_OPT_HEALTH_CHECKS] =
        {"health-checks", "health_checks", 0, 0, "all", "TRUN_HEALTH_CHECKS", TRUN_G_TRUN, "LIST",
         "The checks --health-check runs: all, or names separated by commas; -name "
         "leaves one out (e.g. --health-checks=-pcie,-shm: with '=', as a value led by '-' "
         "is read as an option otherwise). See trun-topo health."},
    [TRUN_OPT_WATCH_STDIN] = {"watch-stdin", "watch_stdin", 0, 1, NULL, NULL, TRUN_G_TRUN, NULL,
                              "Tie the job to stdin (--hostfile gives it to every host's agent): once the "
                              "launcher's first line came, the end of stdin (the ssh session is gone) stops "
                              "the job as SIGHUP would, and a line naming a signal (SIGINT, SIGTERM, SIGHUP, "
                              "SIGQUIT) acts as that signal."},
    [TRUN_OPT_EXIT_BARRIER_TIMEOUT] =
        {"exit-barrier-timeout", "exit_barrier_timeout", 0, 0, NULL, "PET_EXIT_BARRIER_TIMEOUT",
         TRUN_G_COMPAT, "EXIT_BARRIER_TIMEOUT",
         "Seconds the agents wait for each other at the end of the job (the exit "
         "barrier). Unset: $TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT, else 300."},
    [TRUN_OPT_WARM_START] = {"warm-start", "warm_start", 0, 1, NULL, "PET_WARM_START", TRUN_G_TRUN, NULL,
                             "Start workers from a pool of pre-started Pythons that have already imported "
                             "--warm-start-modules (started with the agent and refilled after each start), "
                             "so that first starts and restarts skip the import; a worker the pool cannot "
                             "run exactly as a cold one starts cold, with the reason."},
    [TRUN_OPT_WARM_START_MODULES] = {"warm-start-modules", "warm_start_modules", 0, 0,
                                     "torch,torch.distributed", "PET_WARM_START_MODULES", TRUN_G_TRUN, "LIST",
                                     "Modules the --warm-start pool imports, separated by commas (none may "
                                     "initialise CUDA)."},
    [TRUN_OPT_WARM_START_CUDA] = {"warm-start-cuda", "warm_start_cuda", 0, 1, NULL, "PET_WARM_START_CUDA",
                                  TRUN_G_TRUN, NULL,
                                  "With --warm-start: each pool process also makes the CUDA context of its "
                                  "worker's GPU (device LOCAL_RANK) before the worker is handed to it, so "
                                  "that a restart skips that too; each GPU then holds one more context "
                                  "(about 0.5 GiB) while the workers run."},
    [TRUN_OPT_WARM_START_NCCL] =
        {"warm-start-nccl", "warm_start_nccl", 0, 1, NULL, "PET_WARM_START_NCCL", TRUN_G_TRUN, NULL,
         "With --warm-start-cuda: each pool process for a restart also does NCCL's "
         "once-a-process set-up (a one-rank communicator, made and destroyed) so that "
         "a restarted worker's first communicator is quicker (about 0.3-0.4 s); its "
         "NCCL RAS then serves on a port of its own, which the agent asks."},
    [TRUN_OPT_RESTART_BACKOFF] =
        {"restart-backoff", "restart_backoff", 0, 0, "1", "PET_RESTART_BACKOFF", TRUN_G_TRUN, "SECONDS",
         "Wait before restarting workers that failed within the --crash-loop window a second time in a "
         "row: SECONDS, doubled for each further one, at most 60 s (the first restarts at once). 0: never "
         "wait (torchrun)."},
    [TRUN_OPT_CRASH_LOOP] = {"crash-loop", "crash_loop", 0, 0, "3:60", "PET_CRASH_LOOP", TRUN_G_TRUN,
                             "K:SECONDS",
                             "Stop with exit code 5 (do not requeue) after K failed rounds in a row whose "
                             "workers all ended within SECONDS of their start. 0: off (the back-off still "
                             "counts failures within 60 s)."},
    [TRUN_OPT_RESTART_OFFSET] = {"restart-offset", "restart_offset", 0, 0, NULL, "PET_RESTART_OFFSET",
                                 TRUN_G_TRUN, "N",
                                 "Restarts the job already used before this run (scheduler requeues), "
                                 "counted against --max-restarts. Unset: $SLURM_RESTART_COUNT, else 0."},
    [TRUN_OPT_LIST_EXCLUDED] = {"list-excluded", "list_excluded", 0, 0, NULL, "TRUN_LIST_EXCLUDED",
                                TRUN_G_TRUN, "{slurm,json}",
                                "Print the nodes the job's rendezvous (--rdzv-endpoint, --rdzv-id) excludes "
                                "now, as a Slurm --exclude "
                                "host list or as JSON, and start nothing."},
};

static const char *const trun_groups[] = {TRUN_G_SIZE, TRUN_G_RDZV, TRUN_G_USER, TRUN_G_COMPAT, TRUN_G_TRUN};

const char *trun_opt_group(int i) {
  return i >= 0 && i < (int)(sizeof(trun_groups) / sizeof(trun_groups[0])) ? trun_groups[i] : NULL;
}

const trun_opt_desc *trun_opt_desc_of(trun_opt_id id) {
  if ((int)id < 0 || id >= TRUN_OPT__COUNT) return NULL;
  return &trun_opts[id];
}

const char *trun_src_name(trun_src s) {
  switch (s) {
    case TRUN_SRC_DEFAULT: return "default";
    case TRUN_SRC_DETECTED: return "detected";
    case TRUN_SRC_FILE: return "file";
    case TRUN_SRC_ENV: return "env";
    case TRUN_SRC_CLI: return "cli";
  }
  return "?";
}

/* Edit distance between a[0..alen) and b, or a large number for words too long to compare. */
size_t trun_edit_distance(const char *a, size_t alen, const char *b) {
  enum { MAXW = 64 };
  size_t blen = strlen(b);
  if (alen >= MAXW || blen >= MAXW) return (size_t)-1;
  size_t row[MAXW + 1];
  for (size_t j = 0; j <= blen; j++) row[j] = j;
  for (size_t i = 1; i <= alen; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= blen; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[blen];
}
