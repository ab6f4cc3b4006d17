/* torchrun's command line: the option table, argv + PET_* environment parsing and --help (launcher/cli.h).
 * Parsing follows Python argparse as torchrun configures it: long options with a separate or '='-joined
 * value, unambiguous prefixes, -m/-r/-t short forms (clustered too: -mr3), the first positional is the
 * script and everything after it belongs to the script. Nothing is allocated: values point into argv,
 * envp or the static strings below. */
#include "cli.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRUN_G_SIZE "Worker/node size related arguments"
#define TRUN_G_RDZV "Rendezvous related arguments"
#define TRUN_G_USER "User-code launch related arguments"
#define TRUN_G_COMPAT "Backwards compatible parameters with caffe2.distributed.launch"
#define TRUN_G_TRUN "trun"

#define TRUN_HELP_WIDTH 100
#define TRUN_HELP_COL 24

/* Pseudo ids beyond the table, matched like options: --help and --version. */
enum { TRUN_PSEUDO_HELP = TRUN_OPT__COUNT, TRUN_PSEUDO_VERSION, TRUN_PSEUDO__END };

static const char trun_flag_on[] = "1";

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
    [TRUN_OPT_STANDALONE] = {"standalone", NULL, 0, 1, NULL, "PET_STANDALONE", TRUN_G_RDZV, NULL,
                             "Start a local standalone rendezvous backend (c10d on a free port with a random "
                             "run id); the rdzv options are ignored. Useful for single-node jobs."},
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
                             "Address of the local node; used as its rendezvous identity. Unset: the "
                             "fully qualified host name."},
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
    [TRUN_OPT_STORE_ALLOW_PEERS] = {"store-allow-peers", "store_allow_peers", 0, 1, NULL,
                                    "TRUN_STORE_ALLOW_PEERS", TRUN_G_TRUN, NULL,
                                    "Static rendezvous: once every node joined, node rank 0's store admits "
                                    "only the joined nodes' addresses and its own."},
    [TRUN_OPT_STORE_THREADS] =
        {"store-threads", "store_threads", 0, 0, NULL, "TRUN_STORE_THREADS", TRUN_G_TRUN, "N|auto",
         "Threads (event loops) of the TCPStore servers this agent hosts, 1-64. auto: 4 "
         "with 32 or more usable CPUs, 2 with 8 or more, else 1. (default: auto)"},
    [TRUN_OPT_WATCH_STDIN] = {"watch-stdin", "watch_stdin", 0, 1, NULL, NULL, TRUN_G_TRUN, NULL,
                              "Tie the job to stdin (--hostfile gives it to every host's agent): once the "
                              "launcher's first line came, the end of stdin (the ssh session is gone) stops "
                              "the job as SIGHUP would, and a line naming a signal (SIGINT, SIGTERM, SIGHUP, "
                              "SIGQUIT) acts as that signal."},
};

static const char *const trun_groups[] = {TRUN_G_SIZE, TRUN_G_RDZV, TRUN_G_USER, TRUN_G_COMPAT, TRUN_G_TRUN};

const trun_opt_desc *trun_cli_desc(trun_opt_id id) {
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

/* ---- errors ----------------------------------------------------------------------------------------- */

static void trun_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void trun_errf(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* Appends to err (kept NUL-terminated, truncated when full). */
static void trun_errcat(char *err, size_t errlen, const char *s) {
  if (!err || errlen == 0) return;
  size_t n = strlen(err);
  if (n + 1 >= errlen) return;
  snprintf(err + n, errlen - n, "%s", s);
}

/* "--nproc-per-node/--nproc_per_node" or "-r/--redirects": argparse's name for an option in errors. */
static void trun_opt_argname(int id, char *buf, size_t len) {
  const trun_opt_desc *d = &trun_opts[id];
  char shortbuf[8] = "";
  if (d->short_name) snprintf(shortbuf, sizeof(shortbuf), "-%c/", d->short_name);
  if (d->alias)
    snprintf(buf, len, "%s--%s/--%s", shortbuf, d->name, d->alias);
  else
    snprintf(buf, len, "%s--%s", shortbuf, d->name);
}

/* ---- option spellings ------------------------------------------------------------------------------- */

/* The k-th long spelling (k = 0, 1) of option or pseudo id, or NULL. */
static const char *trun_spelling(int id, int k) {
  if (id == TRUN_PSEUDO_HELP) return k == 0 ? "help" : NULL;
  if (id == TRUN_PSEUDO_VERSION) return k == 0 ? "version" : NULL;
  if (id < 0 || id >= TRUN_OPT__COUNT) return NULL;
  return k == 0 ? trun_opts[id].name : trun_opts[id].alias;
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

/* The long spelling closest to word[0..len), when close enough to be a likely typo; else NULL. */
static const char *trun_suggest(const char *word, size_t len) {
  const char *best = NULL;
  size_t bestd = (size_t)-1;
  for (int id = 0; id < TRUN_PSEUDO__END; id++) {
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (!s) continue;
      size_t d = trun_edit_distance(word, len, s);
      if (d < bestd) {
        bestd = d;
        best = s;
      }
    }
  }
  if (best && (bestd <= 2 || bestd * 3 <= len)) return best;
  return NULL;
}

static void trun_err_unknown(const char *dashes, const char *word, size_t len, char *err, size_t errlen) {
  const char *s = trun_suggest(word, len);
  if (s)
    trun_errf(err, errlen, "unrecognized option '%s%.*s'; did you mean --%s?", dashes, (int)len, word, s);
  else
    trun_errf(err, errlen, "unrecognized option '%s%.*s'", dashes, (int)len, word);
}

static void trun_err_ambiguous(const char *word, size_t len, char *err, size_t errlen) {
  trun_errf(err, errlen, "ambiguous option: --%.*s could match", (int)len, word);
  const char *sep = " ";
  for (int id = 0; id < TRUN_PSEUDO__END; id++) {
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (!s || strncmp(s, word, len) != 0) continue;
      trun_errcat(err, errlen, sep);
      trun_errcat(err, errlen, "--");
      trun_errcat(err, errlen, s);
      sep = ", ";
    }
  }
}

/* Resolves a long option name (without dashes and '=value') to an id: an exact spelling, else the one
 * option whose spellings it prefixes. Returns the id, or -1 with the reason in err. */
static int trun_match_long(const char *word, size_t len, char *err, size_t errlen) {
  int found = -1, nfound = 0;
  for (int id = 0; id < TRUN_PSEUDO__END; id++) {
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (s && strlen(s) == len && strncmp(s, word, len) == 0) return id;
    }
  }
  for (int id = 0; id < TRUN_PSEUDO__END && len > 0; id++) {
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (!s || strncmp(s, word, len) != 0) continue;
      if (id != found) {
        found = id;
        nfound++;
      }
      break;
    }
  }
  if (nfound == 1) return found;
  if (nfound > 1)
    trun_err_ambiguous(word, len, err, errlen);
  else
    trun_err_unknown("--", word, len, err, errlen);
  return -1;
}

/* ---- argv ------------------------------------------------------------------------------------------- */

typedef struct {
  int argc;
  char **argv;
  int i; /* the argv item being parsed */
  trun_cmdline *out;
  char *err;
  size_t errlen;
} trun_argp;

static void trun_set_cli(trun_argp *p, int id, const char *val) {
  p->out->v[id].val = val;
  p->out->v[id].src = TRUN_SRC_CLI;
}

/* Stores the value of option id: explicit ("--opt=v", "-rv"; NULL when none) or the next argv item. */
static int trun_take_value(trun_argp *p, int id, const char *explicit_val) {
  char name[96];
  if (trun_opts[id].is_flag) {
    if (explicit_val) {
      trun_opt_argname(id, name, sizeof(name));
      trun_errf(p->err, p->errlen, "argument %s: ignored explicit argument '%s'", name, explicit_val);
      return -1;
    }
    trun_set_cli(p, id, trun_flag_on);
    return 0;
  }
  if (!explicit_val) {
    if (p->i + 1 >= p->argc) {
      trun_opt_argname(id, name, sizeof(name));
      trun_errf(p->err, p->errlen, "argument %s: expected one argument", name);
      return -1;
    }
    explicit_val = p->argv[++p->i];
  }
  trun_set_cli(p, id, explicit_val);
  return 0;
}

/* Marks --help/--version; returns 1 when id was one of them. */
static int trun_take_pseudo(trun_argp *p, int id) {
  if (id == TRUN_PSEUDO_HELP)
    p->out->help = 1;
  else if (id == TRUN_PSEUDO_VERSION)
    p->out->version = 1;
  else
    return 0;
  return 1;
}

/* "--name", "--name=value", "--prefix[=value]". */
static int trun_parse_long(trun_argp *p) {
  const char *word = p->argv[p->i] + 2;
  const char *eq = strchr(word, '=');
  size_t len = eq ? (size_t)(eq - word) : strlen(word);
  int id = trun_match_long(word, len, p->err, p->errlen);
  if (id < 0) return -1;
  if (id >= TRUN_OPT__COUNT) {
    if (eq) {
      trun_errf(p->err, p->errlen, "argument --%s: ignored explicit argument '%s'", trun_spelling(id, 0),
                eq + 1);
      return -1;
    }
    return trun_take_pseudo(p, id) ? 0 : -1;
  }
  return trun_take_value(p, id, eq ? eq + 1 : NULL);
}

static int trun_short_id(char c) {
  if (c == 'h') return TRUN_PSEUDO_HELP;
  for (int id = 0; id < TRUN_OPT__COUNT; id++)
    if (trun_opts[id].short_name && trun_opts[id].short_name == c) return id;
  return -1;
}

/* "-m", "-r VALUE", "-rVALUE", "-r=VALUE" and clusters such as "-mt3" (flags go on with the next letter). */
static int trun_parse_short(trun_argp *p) {
  const char *arg = p->argv[p->i];
  for (size_t j = 1; arg[j]; j++) {
    int id = trun_short_id(arg[j]);
    if (id < 0) {
      if (j == 1)
        trun_err_unknown("-", arg + 1, strlen(arg + 1), p->err, p->errlen);
      else
        trun_errf(p->err, p->errlen, "unrecognized option '-%c' in '%s'", arg[j], arg);
      return -1;
    }
    if (trun_take_pseudo(p, id)) return 0;
    const char *rest = arg + j + 1;
    if (*rest == '=') rest++;
    if (trun_opts[id].is_flag && arg[j + 1] != '=') {
      trun_set_cli(p, id, trun_flag_on);
      continue;
    }
    return trun_take_value(p, id, arg[j + 1] ? rest : NULL);
  }
  return 0;
}

/* argparse's negative-number test: such an argument is a positional, not an option. */
static int trun_is_negative_number(const char *arg) {
  if (arg[0] != '-' || !arg[1]) return 0;
  char *end;
  strtod(arg, &end);
  return *end == '\0' && (isdigit((unsigned char)arg[1]) || arg[1] == '.');
}

static void trun_take_script(trun_argp *p, int at) {
  p->out->script = p->argv[at];
  p->out->script_src = TRUN_SRC_CLI;
  p->out->script_args = p->argv + at + 1;
  p->out->nscript_args = p->argc - at - 1;
}

/* Walks argv up to the script. Returns 0 or -1 (err set). */
static int trun_parse_argv(trun_argp *p) {
  for (p->i = 1; p->i < p->argc && !p->out->help && !p->out->version; p->i++) {
    const char *arg = p->argv[p->i];
    int rc;
    if (strcmp(arg, "--") == 0) {
      if (p->i + 1 < p->argc) trun_take_script(p, p->i + 1);
      return 0;
    }
    if (arg[0] != '-' || arg[1] == '\0' || trun_is_negative_number(arg)) {
      trun_take_script(p, p->i);
      return 0;
    }
    rc = arg[1] == '-' ? trun_parse_long(p) : trun_parse_short(p);
    if (rc < 0) return -1;
  }
  return 0;
}

/* ---- environment and defaults ----------------------------------------------------------------------- */

static const char *trun_env_lookup(char **envp, const char *name) {
  size_t n = strlen(name);
  for (char **e = envp; e && *e; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

/* Python's int(): optional blanks and sign, digits with single '_' between them. Returns 0 and sets
 * *nonzero, or -1 when s is not an integer. */
static int trun_parse_pyint(const char *s, int *nonzero) {
  *nonzero = 0;
  while (isspace((unsigned char)*s)) s++;
  if (*s == '+' || *s == '-') s++;
  if (!isdigit((unsigned char)*s)) return -1;
  for (; isdigit((unsigned char)*s) || *s == '_'; s++) {
    if (*s == '_' && !isdigit((unsigned char)s[1])) return -1;
    if (*s != '0' && *s != '_') *nonzero = 1;
  }
  while (isspace((unsigned char)*s)) s++;
  return *s ? -1 : 0;
}

/* Fills every option not given on the command line from its environment variable, else its default. */
static int trun_apply_env(trun_cmdline *out, char **envp, char *err, size_t errlen) {
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    const trun_opt_desc *d = &trun_opts[id];
    if (out->v[id].src == TRUN_SRC_CLI) continue;
    const char *ev = d->env ? trun_env_lookup(envp, d->env) : NULL;
    out->v[id].val = d->def;
    out->v[id].src = TRUN_SRC_DEFAULT;
    if (!ev) continue;
    out->v[id].src = TRUN_SRC_ENV;
    out->v[id].val = ev;
    if (!d->is_flag) continue;
    int on;
    if (trun_parse_pyint(ev, &on) < 0) {
      trun_errf(err, errlen, "invalid value '%s' in environment variable %s for --%s: expected an integer",
                ev, d->env, d->name);
      return -1;
    }
    out->v[id].val = on ? trun_flag_on : NULL;
  }
  return 0;
}

int trun_cli_parse(int argc, char **argv, char **envp, trun_cmdline *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (err && errlen) err[0] = '\0';
  trun_argp p = {.argc = argc, .argv = argv, .out = out, .err = err, .errlen = errlen};
  if (trun_parse_argv(&p) < 0) return -1;
  if (trun_apply_env(out, envp, err, errlen) < 0) return -1;
  if (!out->script && !out->help && !out->version && !out->v[TRUN_OPT_EXPLAIN].val &&
      !out->v[TRUN_OPT_CONFIG].val && !out->v[TRUN_OPT_PRINT_CONFIG].val) {
    trun_errf(err, errlen, "the following arguments are required: training_script");
    return -1;
  }
  return 0;
}

/* ---- --help ----------------------------------------------------------------------------------------- */

/* Writes text word-wrapped to TRUN_HELP_WIDTH; the cursor is at column col, continuation lines start at
 * column indent. Ends the line. */
static void trun_help_wrap(FILE *f, const char *text, int col, int indent) {
  const char *w = text;
  int first = 1;
  while (*w) {
    while (*w == ' ') w++;
    if (!*w) break;
    int len = (int)strcspn(w, " ");
    if (!first && col + 1 + len > TRUN_HELP_WIDTH) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
      first = 1;
    }
    if (!first) {
      fputc(' ', f);
      col++;
    }
    fprintf(f, "%.*s", len, w);
    col += len;
    first = 0;
    w += len;
  }
  fputc('\n', f);
}

/* One entry: "  invocation" then the help text in the help column (on the next line when too long). */
static void trun_help_entry(FILE *f, const char *invocation, const char *help) {
  int col = fprintf(f, "  %s", invocation);
  if (col + 2 <= TRUN_HELP_COL) {
    fprintf(f, "%*s", TRUN_HELP_COL - col, "");
  } else {
    fprintf(f, "\n%*s", TRUN_HELP_COL, "");
  }
  trun_help_wrap(f, help, TRUN_HELP_COL, TRUN_HELP_COL);
}

/* "-r, --redirects REDIRECTS" / "--nproc-per-node, --nproc_per_node NPROC_PER_NODE". */
static void trun_help_invocation(const trun_opt_desc *d, char *buf, size_t len) {
  char shortbuf[8] = "";
  if (d->short_name) snprintf(shortbuf, sizeof(shortbuf), "-%c, ", d->short_name);
  snprintf(buf, len, "%s--%s%s%s%s%s", shortbuf, d->name, d->alias ? ", --" : "", d->alias ? d->alias : "",
           d->metavar ? " " : "", d->metavar ? d->metavar : "");
}

/* The help text with the default and the environment variable appended. */
static void trun_help_text(const trun_opt_desc *d, char *buf, size_t len) {
  int n;
  if (d->is_flag)
    n = snprintf(buf, len, "%s", d->help);
  else if (!d->def)
    n = snprintf(buf, len, "%s (default: unset", d->help);
  else if (!*d->def)
    n = snprintf(buf, len, "%s (default: \"\"", d->help);
  else
    n = snprintf(buf, len, "%s (default: %s", d->help, d->def);
  if (n < 0 || (size_t)n >= len) return;
  const char *open = d->is_flag ? " (" : "; ";
  if (d->env)
    snprintf(buf + n, len - n, "%senv: %s)", open, d->env);
  else if (!d->is_flag)
    snprintf(buf + n, len - n, ")");
}

/* "[--nnodes NNODES]" items of the usage line, wrapped under "usage: trun ". */
static void trun_help_usage(FILE *f) {
  static const char lead[] = "usage: trun ";
  int indent = (int)sizeof(lead) - 1;
  int col = fprintf(f, "%s[-h] [--version]", lead);
  char item[128];
  for (int id = 0; id < TRUN_OPT__COUNT + 1; id++) {
    if (id == TRUN_OPT__COUNT)
      snprintf(item, sizeof(item), "training_script ...");
    else if (trun_opts[id].short_name) {
      snprintf(item, sizeof(item), "[-%c%s%s]", trun_opts[id].short_name, trun_opts[id].metavar ? " " : "",
               trun_opts[id].metavar ? trun_opts[id].metavar : "");
    } else {
      snprintf(item, sizeof(item), "[--%s%s%s]", trun_opts[id].name, trun_opts[id].metavar ? " " : "",
               trun_opts[id].metavar ? trun_opts[id].metavar : "");
    }
    int len = (int)strlen(item);
    if (col + 1 + len > TRUN_HELP_WIDTH)
      col = fprintf(f, "\n%*s", indent, "") - 1;
    else
      col += fprintf(f, " ");
    col += fprintf(f, "%s", item);
  }
  fputc('\n', f);
}

void trun_cli_help(FILE *f) {
  char inv[160], text[1024];
  trun_help_usage(f);
  fputc('\n', f);
  trun_help_wrap(f,
                 "trun: a torchrun-compatible launcher; spawns and supervises the workers of a "
                 "(multi-node) distributed job.",
                 0, 0);
  fprintf(f, "\npositional arguments:\n");
  trun_help_entry(f, "training_script",
                  "Full path to the (single GPU) training program/script to be launched in parallel, "
                  "followed by all the arguments for the training script.");
  trun_help_entry(f, "training_script_args",
                  "Passed to every worker verbatim; ${local_rank} in an argument becomes the worker's "
                  "local rank.");
  fprintf(f, "\noptions:\n");
  trun_help_entry(f, "-h, --help", "show this help message and exit");
  trun_help_entry(f, "--version", "show trun's version and exit");
  for (size_t g = 0; g < sizeof(trun_groups) / sizeof(trun_groups[0]); g++) {
    fprintf(f, "\n%s:\n", trun_groups[g]);
    for (int id = 0; id < TRUN_OPT__COUNT; id++) {
      const trun_opt_desc *d = &trun_opts[id];
      if (strcmp(d->group, trun_groups[g]) != 0) continue;
      trun_help_invocation(d, inv, sizeof(inv));
      trun_help_text(d, text, sizeof(text));
      trun_help_entry(f, inv, text);
    }
  }
  fputc('\n', f);
  trun_help_wrap(f,
                 "An option that is not on the command line takes the value of the environment variable "
                 "shown (PET_<NAME>) when that is set, else its default.",
                 0, 0);
}
