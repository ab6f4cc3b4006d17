/* NCCL preflight: expected bandwidth, verdict, and the agent's --preflight step (agent/nccl/preflight.h). */
#include "preflight.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/discover/discover.h"
#include "agent/proc/proc.h"
#include "base/base.h"
#include "config/config.h"

/* ---- expected bandwidth ------------------------------------------------------------------------------- */

/* Thresholds, busbw GB/s. References (spec §8, our capture): 2x H200 NVLink 327.5 (NVLS off); 8x A100 ~230,
 * 8x H100 ~370 ring / ~480 NVLS; PCIe Gen4 x16 ~20-25 per direction; 2x p4de over EFA busbw ~78 at 2 GiB
 * (400 Gbit/s = 50 GB/s of NIC), 2x p5 ~440 (3200 Gbit/s = 400 GB/s); TCP sockets between our two H200: 2.9.
 */
#define PF_NVLINK_PASS 100.0
#define PF_NVLINK_WARN 40.0
#define PF_PCIE_PASS 8.0
#define PF_PCIE_WARN 3.0
#define PF_SOCKET_PASS 1.0
#define PF_SOCKET_WARN 0.25
#define PF_EFA_PASS_SHARE 0.6 /* of the instance's network bandwidth in GB/s */
#define PF_EFA_WARN_SHARE 0.25
#define PF_EFA_GBPS_PER_DEVICE 100 /* when the instance type is unknown */

void trun_pf_expect_for(const trun_pf_layout *l, trun_pf_expect *e) {
  memset(e, 0, sizeof(*e));
  if (l->world <= 1) {
    e->fabric = "none";
    snprintf(e->why, sizeof(e->why), "one rank: no communication to measure");
  } else if (l->nodes > 1 && l->efa > 0) {
    const trun_instance_info *t = trun_instance_lookup(l->instance_type);
    int gbit = t ? t->net_gbps : l->efa * PF_EFA_GBPS_PER_DEVICE;
    double gbyte = gbit / 8.0;
    e->fabric = "efa";
    e->pass_gbps = PF_EFA_PASS_SHARE * gbyte;
    e->warn_gbps = PF_EFA_WARN_SHARE * gbyte;
    snprintf(e->why, sizeof(e->why), "%d nodes over EFA (%d device(s), %d Gbit/s%s)", l->nodes, l->efa, gbit,
             t ? " for this instance type" : " assumed: 100 per device");
  } else if (l->nodes > 1) {
    e->fabric = "socket";
    e->pass_gbps = PF_SOCKET_PASS;
    e->warn_gbps = PF_SOCKET_WARN;
    snprintf(e->why, sizeof(e->why), "%d nodes, no EFA here: NCCL's TCP sockets (a few GB/s at best)",
             l->nodes);
  } else if (l->nvlink) {
    e->fabric = "nvlink";
    e->pass_gbps = PF_NVLINK_PASS;
    e->warn_gbps = PF_NVLINK_WARN;
    snprintf(e->why, sizeof(e->why), "%d GPUs on one node over NVLink (2x H200: 327.5 GB/s measured)",
             l->local);
  } else {
    e->fabric = "pcie";
    e->pass_gbps = PF_PCIE_PASS;
    e->warn_gbps = PF_PCIE_WARN;
    snprintf(e->why, sizeof(e->why), "%d GPUs on one node over PCIe", l->local);
  }
}

double trun_pf_busbw(double bytes, double seconds, int nranks) {
  if (seconds <= 0 || nranks <= 0) return 0;
  return bytes / seconds / 1e9 * 2.0 * (nranks - 1) / nranks;
}

const char *trun_pf_verdict_name(trun_pf_verdict v) {
  switch (v) {
    case TRUN_PF_PASS: return "PASS";
    case TRUN_PF_WARN: return "WARN";
    case TRUN_PF_FAIL: return "FAIL";
    case TRUN_PF_SKIP: return "SKIP";
  }
  return "?";
}

trun_pf_verdict trun_pf_judge_result(const trun_pf_expect *e, const double *bytes, const double *busbw, int n,
                                     trun_pf_result *res, char *msg, size_t len) {
  memset(res, 0, sizeof(*res));
  res->peak_gbps = -1;
  snprintf(res->fabric, sizeof(res->fabric), "%s", e->fabric);
  if (strcmp(e->fabric, "none") == 0 || n <= 0) {
    snprintf(msg, len, "%s", n <= 0 ? "nothing measured" : e->why);
    snprintf(res->cause, sizeof(res->cause), "%s", msg);
    return res->verdict = TRUN_PF_SKIP;
  }
  double peak = 0, at = 0;
  for (int i = 0; i < n; i++)
    if (busbw[i] > peak) peak = busbw[i], at = bytes[i];
  trun_pf_verdict v = peak >= e->pass_gbps   ? TRUN_PF_PASS
                      : peak >= e->warn_gbps ? TRUN_PF_WARN
                                             : TRUN_PF_FAIL;
  const char *cause = "", *likely = "";
  if (v != TRUN_PF_PASS) {
    likely = "likely cause: ";
    if (strcmp(e->fabric, "efa") == 0 && peak < 5.0)
      cause =
          "EFA fallback - busbw is at TCP-socket level although EFA devices exist (the aws-ofi-nccl plugin "
          "was not used? run with --nccl-report)";
    else if (strcmp(e->fabric, "nvlink") == 0 && peak < 30.0)
      cause =
          "P2P off - busbw is at PCIe / host-memory level on NVLink GPUs (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, "
          "or GPUs split across pods)";
    else if (strcmp(e->fabric, "efa") == 0)
      cause = "fewer EFA devices in use than the instance has, or GPUDirect RDMA off";
    else
      cause = "below what this fabric should reach", likely = "";
  }
  res->verdict = v;
  res->peak_gbps = peak;
  res->at_bytes = at;
  snprintf(res->cause, sizeof(res->cause), "%s", cause);
  snprintf(msg, len, "peak busbw %.1f GB/s at %.0f B; expected for %s (%s): pass >= %.4g, warn >= %.4g%s%s%s",
           peak, at, e->fabric, e->why, e->pass_gbps, e->warn_gbps, *cause ? "; " : "", likely, cause);
  return v;
}

trun_pf_verdict trun_pf_judge(const trun_pf_expect *e, const trun_pf_layout *l, const double *bytes,
                              const double *busbw, int n, char *msg, size_t len) {
  trun_pf_result res;
  (void)l;
  return trun_pf_judge_result(e, bytes, busbw, n, &res, msg, len);
}

int trun_pf_result_write(const char *path, const trun_pf_result *res) {
  json_t *j =
      json_pack("{s:s,s:f,s:f,s:s,s:s}", "verdict", trun_pf_verdict_name(res->verdict), "peak_busbw_gbps",
                res->peak_gbps, "at_bytes", res->at_bytes, "fabric", res->fabric, "cause", res->cause);
  if (j == NULL) {
    errno = ENOMEM;
    return -1;
  }
  int rc = json_dump_file(j, path, JSON_COMPACT);
  json_decref(j);
  return rc < 0 ? -1 : 0;
}

int trun_pf_result_read(const char *path, trun_pf_result *res) {
  memset(res, 0, sizeof(*res));
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  const char *v = json_string_value(json_object_get(j, "verdict"));
  int rc = -1;
  for (int i = TRUN_PF_PASS; v && i <= TRUN_PF_SKIP; i++)
    if (strcmp(v, trun_pf_verdict_name((trun_pf_verdict)i)) == 0) res->verdict = (trun_pf_verdict)i, rc = 0;
  if (rc == 0) {
    const char *f = json_string_value(json_object_get(j, "fabric"));
    const char *c = json_string_value(json_object_get(j, "cause"));
    res->peak_gbps = json_number_value(json_object_get(j, "peak_busbw_gbps"));
    res->at_bytes = json_number_value(json_object_get(j, "at_bytes"));
    snprintf(res->fabric, sizeof(res->fabric), "%s", f ? f : "");
    snprintf(res->cause, sizeof(res->cause), "%s", c ? c : "");
  }
  json_decref(j);
  return rc;
}

/* ---- the agent's step --------------------------------------------------------------------------------- */

static void preflight_path(char *out, size_t len) {
  const char *p = getenv("TRUN_PREFLIGHT_BIN");
  if (p && *p) {
    snprintf(out, len, "%s", p);
    return;
  }
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    snprintf(out, len, "trun-preflight");
    return;
  }
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) *slash = '\0';
  if (snprintf(out, len, "%.*s/trun-preflight", (int)(len > 32 ? len - 32 : 0), self) >= (int)len)
    out[0] = '\0';
}

/* Fills out (when given): verdict, cause (printf-style), no measurement. */
static void outcome(trun_pf_outcome *out, const char *verdict, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void outcome(trun_pf_outcome *out, const char *verdict, const char *fmt, ...) {
  if (out == NULL) return;
  memset(out, 0, sizeof(*out));
  snprintf(out->verdict, sizeof(out->verdict), "%s", verdict);
  out->peak_gbps = -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->cause, sizeof(out->cause), fmt, ap);
  va_end(ap);
}

/* The outcome from local rank 0's result file (rank 0's verdict, this node's measurement). */
static void outcome_from_result(trun_pf_outcome *out, const char *path, int status0) {
  trun_pf_result res;
  if (out == NULL) return;
  if (trun_pf_result_read(path, &res) < 0) {
    if (status0 == TRUN_PF_EXIT_SKIP)
      outcome(out, "skip", "trun-preflight skipped (its line above says why)");
    else
      outcome(out, status0 == TRUN_PF_EXIT_FAIL ? "fail" : "error",
              "trun-preflight (local rank 0, exit %d) left no result in %s", status0, path);
    return;
  }
  outcome(out, "", "%s", res.cause);
  const char *name = trun_pf_verdict_name(res.verdict);
  for (size_t i = 0; name[i] && i + 1 < sizeof(out->verdict); i++)
    out->verdict[i] = (char)(name[i] - 'A' + 'a');
  out->peak_gbps = res.peak_gbps;
  out->at_bytes = res.at_bytes;
  snprintf(out->fabric, sizeof(out->fabric), "%s", res.fabric);
}

/* trun-preflight's options after argv[0..argc): TRUN_PREFLIGHT_ARGS split on blanks (*copy holds them: the
 * caller frees it), then --pass / --warn from --preflight-pass / --preflight-warn (trun-preflight takes the
 * last value, and trun's own options beat the environment); argv NULL-terminated within cap. The new argc. */
static int pf_options(const trun_config *cfg, char **argv, int argc, int cap, char **copy, char *pass,
                      char *warn) {
  const char *extra = getenv("TRUN_PREFLIGHT_ARGS");
  *copy = extra ? strdup(extra) : NULL;
  for (char *save = NULL, *t = *copy ? strtok_r(*copy, " \t", &save) : NULL; t && argc < cap - 5;
       t = strtok_r(NULL, " \t", &save))
    argv[argc++] = t;
  if (cfg->preflight_pass >= 0) {
    snprintf(pass, 32, "%g", cfg->preflight_pass);
    argv[argc++] = "--pass";
    argv[argc++] = pass;
  }
  if (cfg->preflight_warn >= 0) {
    snprintf(warn, 32, "%g", cfg->preflight_warn);
    argv[argc++] = "--warn";
    argv[argc++] = warn;
  }
  argv[argc] = NULL;
  return argc;
}

int trun_preflight_local_start(char **env, const trun_config *cfg, int ngpu, const char *result, pid_t *pid,
                               char *err, size_t errlen) {
  char pf[PATH_MAX], self[PATH_MAX], np[16];
  *pid = 0;
  preflight_path(pf, sizeof(pf));
  if (access(pf, X_OK) != 0) {
    snprintf(err, errlen, "%s is not an executable (%s); build it with make, or set TRUN_PREFLIGHT_BIN", pf,
             strerror(errno));
    return -1;
  }
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    snprintf(err, errlen, "cannot find the trun binary (/proc/self/exe: %s)", strerror(errno));
    return -1;
  }
  self[n] = '\0';
  snprintf(np, sizeof(np), "%d", ngpu);
  /* A job of its own on this node: no health gate, no restart, no run directory. */
  char *argv[96] = {
      self, "--standalone", "--nproc-per-node", np, "--no-python", "--health-check", "off", "--max-restarts",
      "0",  "--log-dir",    "/dev/null",        pf};
  char *copy = NULL, pass[32], warn[32];
  pf_options(cfg, argv, 12, 96, &copy, pass, warn);
  /* The agent's environment without the settings it read from there (PET_*, TRUN_*): the child's are the
   * command line's above. */
  char **e = trun_strv_dup(env);
  for (int id = 0; e && id < TRUN_OPT__COUNT; id++) {
    const trun_opt_desc *d = trun_opt_desc_of((trun_opt_id)id);
    if (d && d->env) trun_strv_unsetenv(e, d->env);
  }
  if (e) trun_strv_unsetenv(e, "TRUN_PREFLIGHT_KEY");
  if (e == NULL || (result && result[0] && trun_strv_setenv(&e, "TRUN_PREFLIGHT_RESULT", result) < 0)) {
    trun_strv_free(e);
    free(copy);
    snprintf(err, errlen, "out of memory building the local preflight's environment");
    return -1;
  }
  trun_spawn_req req = {.argv = argv, .envp = e, .stdout_fd = -1, .stderr_fd = -1};
  const char *what = "";
  int rc = trun_spawn(&req, pid, &what);
  trun_strv_free(e);
  free(copy);
  if (rc < 0) {
    snprintf(err, errlen, "cannot start %s: %s failed: %s", self, what, strerror(-rc));
    if (*pid > 0) waitpid(*pid, NULL, 0);
    *pid = 0;
    return -1;
  }
  return 0;
}

/* Starts trun-preflight (argv) for each local rank, with the rank's environment (rank_env) plus the round's
 * key and, for local rank 0, the result file. Returns how many started (pids[0..n) set); sets *stop, and
 * out, when one could not be started. */
static int start_ranks(char **argv, int nproc, const char *key, const char *result, trun_pf_rank_env rank_env,
                       void *arg, pid_t *pids, trun_pf_outcome *out, int *stop) {
  int started = 0;
  for (int lr = 0; lr < nproc; lr++) {
    char **e = rank_env(arg, lr);
    if (e == NULL || trun_strv_setenv(&e, "TRUN_PREFLIGHT_KEY", key) < 0 ||
        (lr == 0 && result[0] && trun_strv_setenv(&e, "TRUN_PREFLIGHT_RESULT", result) < 0)) {
      trun_strv_free(e);
      trun_error("--preflight: out of memory building local rank %d's environment", lr);
      outcome(out, "error", "out of memory building local rank %d's environment", lr);
      *stop = 1;
      return started;
    }
    trun_spawn_req req = {.argv = argv, .envp = e, .stdout_fd = -1, .stderr_fd = -1};
    const char *what = "";
    int rc = trun_spawn(&req, &pids[lr], &what);
    trun_strv_free(e);
    if (rc < 0) {
      trun_error("--preflight: cannot start %s for local rank %d: %s failed: %s", argv[0], lr, what,
                 strerror(-rc));
      if (pids[lr] > 0) waitpid(pids[lr], NULL, 0);
      pids[lr] = 0;
      outcome(out, "error", "cannot start %s for local rank %d: %s failed: %s", argv[0], lr, what,
              strerror(-rc));
      *stop = 1;
      return started;
    }
    started++;
  }
  return started;
}

/* Waits for the started ranks: status[lr] becomes the exit code (128 + signal; TRUN_PF_EXIT_ERROR when it
 * cannot be had), -1 for a rank never started. After timeout seconds the rest are killed (status 124): then
 * it returns 1, out says so. */
static int reap_ranks(const pid_t *pids, int *status, int nproc, int started, double timeout,
                      trun_pf_outcome *out) {
  double t0 = trun_mono_s();
  int left = started;
  for (int lr = 0; lr < nproc; lr++) status[lr] = -1;
  while (left > 0) {
    for (int lr = 0; lr < nproc; lr++) {
      if (pids[lr] <= 0 || status[lr] != -1) continue;
      int st;
      pid_t w = waitpid(pids[lr], &st, WNOHANG);
      if (w == pids[lr] || (w < 0 && errno == ECHILD)) {
        status[lr] =
            w == pids[lr] ? (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)) : TRUN_PF_EXIT_ERROR;
        left--;
      }
    }
    if (left > 0 && trun_mono_s() - t0 > timeout) {
      trun_error(
          "--preflight: still running after %.0f s: init timeout (a node without --preflight, or NCCL "
          "cannot connect); killing it. Set TRUN_PREFLIGHT_TIMEOUT to wait longer",
          timeout);
      for (int lr = 0; lr < nproc; lr++)
        if (pids[lr] > 0 && status[lr] == -1) kill(-pids[lr], SIGKILL), kill(pids[lr], SIGKILL);
      for (int lr = 0; lr < nproc; lr++)
        if (pids[lr] > 0 && status[lr] == -1) waitpid(pids[lr], NULL, 0), status[lr] = 124;
      outcome(out, "error", "trun-preflight still running after %.0f s (init timeout): killed", timeout);
      return 1;
    }
    if (left > 0) usleep(50 * 1000);
  }
  return 0;
}

/* Names every rank that neither passed nor skipped (one killed at the time-out was said already); out from
 * the result file unless failed (a start failure or the time-out said it). 1 when any rank failed. */
static int judge_ranks(const trun_rdzv_round *r, const pid_t *pids, const int *status, int nproc, int failed,
                       const char *result, trun_pf_outcome *out) {
  int stop = failed;
  if (!failed && pids[0] > 0) outcome_from_result(out, result, status[0]);
  for (int lr = 0; lr < nproc; lr++) {
    if (pids[lr] <= 0 || status[lr] == TRUN_PF_EXIT_OK || status[lr] == TRUN_PF_EXIT_SKIP) continue;
    if (status[lr] == 124) continue;
    stop = 1;
    trun_error("--preflight: local rank %d (rank %d) %s (exit %d); see its lines above", lr,
               r->base_rank + lr, status[lr] == TRUN_PF_EXIT_FAIL ? "measured a FAIL verdict" : "failed",
               status[lr]);
    if (!failed && status[lr] != TRUN_PF_EXIT_FAIL)
      outcome(out, "error", "trun-preflight of local rank %d (rank %d) failed (exit %d)", lr,
              r->base_rank + lr, status[lr]);
    failed = 1;
  }
  return stop;
}

int trun_preflight_agent(char **env, const trun_config *cfg, const trun_rdzv_round *r, int nproc,
                         int restart_count, trun_pf_rank_env rank_env, void *arg, trun_pf_outcome *out) {
  trun_node *node = calloc(1, sizeof(*node));
  char err[512];
  outcome(out, "error", "out of memory");
  if (node == NULL) return 0;
  if (trun_discover_gpus(node, env, err, sizeof(err)) < 0) trun_warn("--preflight: GPU discovery: %s", err);
  int ngpu = node->ngpu;
  free(node);
  if (ngpu == 0) {
    fprintf(stderr, "trun: --preflight: skipped on node rank %d: no GPU visible here\n", r->group_rank);
    outcome(out, "skip", "no GPU visible on this node");
    return 0;
  }
  char path[PATH_MAX], key[512];
  preflight_path(path, sizeof(path));
  if (access(path, X_OK) != 0) {
    trun_error("--preflight: %s is not an executable (%s); build it with make, or set TRUN_PREFLIGHT_BIN",
               path, strerror(errno));
    outcome(out, "error", "%s is not an executable (%s)", path, strerror(errno));
    return 1;
  }
  pid_t *pids = calloc((size_t)nproc, sizeof(pid_t));
  int *status = calloc((size_t)nproc, sizeof(int));
  if (pids == NULL || status == NULL) {
    free(pids);
    free(status);
    return 0;
  }
  /* Local rank 0's trun-preflight writes its result here (verdict, peak busbw, cause) for the event. */
  const char *tmpdir = getenv("TMPDIR");
  char result[PATH_MAX];
  snprintf(result, sizeof(result), "%s/trun-preflight-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  int rfd = mkstemp(result);
  if (rfd >= 0)
    close(rfd);
  else
    result[0] = '\0';
  snprintf(key, sizeof(key), "trun_preflight/%s/%lld/%d", cfg->run_id, r->round_id, restart_count);
  const char *to = getenv("TRUN_PREFLIGHT_TIMEOUT");
  double timeout = to && *to ? atof(to) : 600;
  int stop = 0;
  char *argv[64] = {path}, *extra_copy = NULL, pass[32], warn[32];
  pf_options(cfg, argv, 1, 64, &extra_copy, pass, warn);
  fprintf(stderr, "trun: --preflight: %d local rank(s) of %d run %s\n", nproc, r->world_size, path);
  int started = start_ranks(argv, nproc, key, result, rank_env, arg, pids, out, &stop);
  if (reap_ranks(pids, status, nproc, started, timeout, out)) stop = 1;
  stop = judge_ranks(r, pids, status, nproc, stop, result, out);
  if (stop)
    fprintf(stderr, "trun: --preflight failed on node rank %d: not starting the workers\n", r->group_rank);
  if (result[0]) unlink(result);
  free(extra_copy);
  free(pids);
  free(status);
  return stop;
}
