#include "worker_env.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/nccl/nccl.h"
#include "base/base.h"

/* The decided NCCL / libfabric variables and the --numa-binding plan, added to *v. 0 or -ENOMEM. */
static int node_env(char ***v, const trun_config *cfg, int nproc, const trun_node *given) {
  trun_node *own = given ? NULL : malloc(sizeof(*own));
  const trun_node *node = given ? given : own;
  trun_env_plan *plan = malloc(sizeof(*plan));
  char *numa = NULL;
  int rc = -ENOMEM;
  if (node == NULL || plan == NULL) goto out;
  char err[512];
  if (own && trun_discover_node(own, *v, trun_agent_discover_flags(cfg), cfg->no_imds, err, sizeof(err)) < 0)
    trun_warn("GPU discovery: %s; deciding the NCCL environment from the GPUs found before it", err);
  trun_nccl_env_decide(node, *v, cfg->warm_start && cfg->warm_cuda ? TRUN_NCCL_WARM_CUDA : 0, plan);
  trun_strv_unsetenv(*v, "TRUN_NUMA_PLAN");
  if ((rc = trun_nccl_env_apply(plan, v)) < 0 || !cfg->numa_binding) goto out;
  size_t cap = (size_t)nproc * 1024 + 1, len = 0;
  if ((numa = malloc(cap)) == NULL) goto out;
  numa[0] = '\0';
  for (int lr = 0; lr < nproc; lr++) {
    char cpus[1024];
    trun_numa_cpus_for(node, lr, cpus, sizeof(cpus));
    if (cpus[0] == '\0')
      trun_warn("--numa-binding: local rank %d is not pinned (%s)", lr,
                lr >= node->ngpu ? "no GPU for it" : "its GPU's NUMA CPUs are unknown or not allowed here");
    len += (size_t)snprintf(numa + len, cap - len, "%s%s", lr ? ";" : "", cpus);
  }
  rc = trun_strv_setenv(v, "TRUN_NUMA_PLAN", numa);
out:
  free(numa);
  free(plan);
  free(own);
  return rc;
}

int trun_agent_discover_flags(const trun_config *cfg) {
  /* fail: the gate judges fresh facts before joining (NVML); warn: from the cache, the gate's facts are read
   * in the background (agent_health.c) */
  return TRUN_IDENTITY_IF_EFA | (cfg->numa_binding ? 0 : TRUN_DISCOVER_NO_AFFINITY) |
         (cfg->health_check != TRUN_HEALTH_CHECK_OFF ? TRUN_DISCOVER_HEALTH : 0) |
         (cfg->gpu_cache && cfg->health_check != TRUN_HEALTH_CHECK_FAIL ? TRUN_DISCOVER_CACHE : 0);
}

char **trun_agent_env(char **envp, const trun_config *cfg, int nproc, const trun_node *node,
                      int *omp_forced) {
  char **v = trun_strv_dup(envp);
  if (v == NULL) return NULL;
  *omp_forced = 0;
  trun_strv_unsetenv(v, TRUN_RDZV_TOKEN_ENV); /* the agents' secret: workers must not write their keys */
  for (size_t i = 0; v[i]; i++)               /* nor read it from a PET_RDZV_CONF with trun_token= */
    if (strncmp(v[i], "PET_RDZV_CONF=", 14) == 0) trun_config_conf_mask(v[i] + 14);
  int rc = 0;
  const char *omp = trun_round_var_name(TRUN_RV_OMP_NUM_THREADS);
  if (trun_env_get(v, omp) == NULL && nproc > 1) {
    rc = trun_strv_setenv(&v, omp, "1");
    *omp_forced = 1;
  }
  if (rc == 0) rc = trun_strv_setenv(&v, trun_round_var_name(TRUN_RV_SIGNALS_TO_HANDLE), cfg->signals_text);
  if (rc == 0) rc = node_env(&v, cfg, nproc, node);
  if (rc < 0) {
    trun_strv_free(v);
    return NULL;
  }
  return v;
}

/* The k-th (from 0) item of list, items separated by sep, into out (len bytes): 0, or -1 when the list has no
 * such item, it is empty or it does not fit (out is then "" or partly written: the caller does not use it).
 */
static int nth_item(const char *list, char sep, int k, char *out, size_t len) {
  const char *p = list;
  for (int i = 0; i < k && p; i++) {
    p = strchr(p, sep);
    if (p) p++;
  }
  char stop[2] = {sep, '\0'};
  size_t n = p ? strcspn(p, stop) : 0;
  out[0] = '\0';
  if (n == 0 || n >= len) return -1;
  memcpy(out, p, n);
  out[n] = '\0';
  return 0;
}

char **trun_worker_envp(char **base, const trun_config *cfg, const trun_rdzv_round *r, int nproc,
                        int local_rank, int restart_count, const char *error_file) {
  char **v = trun_strv_dup(base);
  if (v == NULL) return NULL;
  char lr_s[16], rank_s[16], grank_s[16], rrank_s[16], lws_s[16], ws_s[16], gws_s[16], rws_s[16];
  char port_s[16], restart_s[16], maxr_s[16];
  snprintf(lr_s, sizeof(lr_s), "%d", local_rank);
  snprintf(rank_s, sizeof(rank_s), "%d", r->base_rank + local_rank);
  snprintf(grank_s, sizeof(grank_s), "%d", r->group_rank);
  snprintf(rrank_s, sizeof(rrank_s), "%d", r->role_base_rank + local_rank);
  snprintf(lws_s, sizeof(lws_s), "%d", nproc);
  snprintf(ws_s, sizeof(ws_s), "%d", r->world_size);
  snprintf(gws_s, sizeof(gws_s), "%d", r->group_world_size);
  snprintf(rws_s, sizeof(rws_s), "%d", r->role_world_size);
  snprintf(port_s, sizeof(port_s), "%d", r->master_port);
  snprintf(restart_s, sizeof(restart_s), "%d", restart_count);
  snprintf(maxr_s, sizeof(maxr_s), "%d", cfg->max_restarts);
  const char *cvd = trun_env_get(base, trun_round_var_name(TRUN_RV_CUDA_VISIBLE_DEVICES));
  char cvd_one[256];
  if (cfg->virtual_local_rank) {
    /* One GPU per worker, seen as device 0: the local_rank-th entry of the parent's list. */
    if (cvd && nth_item(cvd, ',', local_rank, cvd_one, sizeof(cvd_one)) < 0) {
      trun_strv_free(v);
      errno = EINVAL;
      return NULL;
    }
    if (!cvd) snprintf(cvd_one, sizeof(cvd_one), "%d", local_rank);
  }
  const char *nccl_async = trun_env_get(base, trun_round_var_name(TRUN_RV_NCCL_ASYNC_ERROR_HANDLING));
  const char *set[TRUN_RV_COUNT] = {
      [TRUN_RV_LOCAL_RANK] = cfg->virtual_local_rank ? "0" : lr_s,
      [TRUN_RV_RANK] = rank_s,
      [TRUN_RV_GROUP_RANK] = grank_s,
      [TRUN_RV_ROLE_RANK] = rrank_s,
      [TRUN_RV_ROLE_NAME] = cfg->role,
      [TRUN_RV_LOCAL_WORLD_SIZE] = lws_s,
      [TRUN_RV_WORLD_SIZE] = ws_s,
      [TRUN_RV_GROUP_WORLD_SIZE] = gws_s,
      [TRUN_RV_ROLE_WORLD_SIZE] = rws_s,
      [TRUN_RV_MASTER_ADDR] = r->master_addr,
      [TRUN_RV_MASTER_PORT] = port_s,
      [TRUN_RV_RESTART_COUNT] = restart_s,
      [TRUN_RV_MAX_RESTARTS] = maxr_s,
      [TRUN_RV_RUN_ID] = cfg->run_id,
      [TRUN_RV_USE_AGENT_STORE] = r->workers_host_store ? "False" : "True",
      [TRUN_RV_NCCL_ASYNC_ERROR_HANDLING] = nccl_async ? nccl_async : "1",
      [TRUN_RV_ERROR_FILE] = error_file,
      [TRUN_RV_CUDA_VISIBLE_DEVICES] = cfg->virtual_local_rank ? cvd_one : NULL,
  };
  /* The table's per-round rows in its order (torchrun's), each from set[] (NULL: left as base has it). */
  for (size_t k = 0; k < TRUN_RV_COUNT; k++)
    if ((trun_round_vars[k].flags & TRUN_RV_PER_ROUND) && set[k] &&
        trun_strv_setenv(&v, trun_round_vars[k].name, set[k]) < 0) {
      trun_strv_free(v);
      return NULL;
    }
  /* --numa-binding: this rank's entry of the plan, or no pinning at all. */
  const char *plan = trun_env_get(base, "TRUN_NUMA_PLAN");
  char cpus[1024] = "";
  if (plan && nth_item(plan, ';', local_rank, cpus, sizeof(cpus)) < 0) cpus[0] = '\0';
  trun_strv_unsetenv(v, "TRUN_NUMA_PLAN");
  trun_strv_unsetenv(v, "TRUN_CPU_AFFINITY");
  if (cpus[0] && trun_strv_setenv(&v, "TRUN_CPU_AFFINITY", cpus) < 0) {
    trun_strv_free(v);
    return NULL;
  }
  return v;
}

const char *trun_worker_cpus(char *const *envp) { return trun_env_get(envp, "TRUN_CPU_AFFINITY"); }

/* Replaces every "${local_rank}" in arg. */
static char *subst_local_rank(const char *arg, int local_rank) {
  static const char macro[] = "${local_rank}";
  char lr[16];
  snprintf(lr, sizeof(lr), "%d", local_rank);
  size_t count = 0;
  for (const char *p = strstr(arg, macro); p; p = strstr(p + 1, macro)) count++;
  size_t len = strlen(arg) + count * strlen(lr) + 1;
  char *out = malloc(len), *o = out;
  if (out == NULL) return NULL;
  const char *p = arg;
  for (const char *m = strstr(p, macro); m; m = strstr(p, macro)) {
    memcpy(o, p, (size_t)(m - p));
    o += m - p;
    memcpy(o, lr, strlen(lr));
    o += strlen(lr);
    p = m + sizeof(macro) - 1;
  }
  strcpy(o, p);
  return out;
}

int trun_worker_which(const char *name, char *const *envp, char *out, size_t len) {
  const char *path = trun_env_get(envp, "PATH");
  if (path == NULL) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path;; p++) {
    size_t dl = strcspn(p, ":");
    int n = snprintf(out, len, "%.*s%s%s", (int)dl, dl ? p : ".", "/", name);
    struct stat st;
    if (n > 0 && (size_t)n < len && stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
      return 0;
    p += dl;
    if (*p == '\0') return -1;
  }
}

int trun_env_python(const char *exe, char *out, size_t len) {
  const char *slash = strrchr(exe, '/');
  if (slash == NULL || slash == exe) return -1;
  int dir = (int)(slash - exe);
  char probe[PATH_MAX];
  int n = snprintf(probe, sizeof(probe), "%.*s/../pyvenv.cfg", dir, exe);
  if (n < 0 || (size_t)n >= sizeof(probe)) return -1;
  int in_env = access(probe, F_OK) == 0;
  if (!in_env) {
    snprintf(probe, sizeof(probe), "%.*s/../conda-meta", dir, exe);
    in_env = access(probe, F_OK) == 0;
  }
  if (!in_env) return -1;
  n = snprintf(out, len, "%.*s/python3", dir, exe);
  if (n < 0 || (size_t)n >= len || access(out, X_OK) != 0) return -1;
  return 0;
}

const char *trun_worker_python(char *const *envp, char *buf, size_t len, const char **how) {
  const char *python = trun_env_get(envp, "PYTHON_EXEC");
  if (python != NULL && python[0] != '\0') {
    if (how) *how = "PYTHON_EXEC";
    return python;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) exe[n] = '\0';
  if (n > 0 && trun_env_python(exe, buf, len) == 0) {
    if (how) *how = "the environment trun is installed in";
    return buf;
  }
  if (how) *how = "the first python3 on PATH";
  return "python3";
}

char **trun_worker_argv(const trun_config *cfg, char *const *envp, int local_rank) {
  size_t n = (size_t)cfg->nscript_args + 8;
  char **v = calloc(n, sizeof(char *));
  if (v == NULL) return NULL;
  size_t i = 0;
  char env_python[PATH_MAX];
  const char *python = trun_worker_python(envp, env_python, sizeof(env_python), NULL);
  int ok = 1;
  if (cfg->run_path) {
    /* torchrun runs runpy.run_path in a child interpreter; so does this. */
    ok = (v[i++] = strdup(python)) && (v[i++] = strdup("-u")) && (v[i++] = strdup("-c")) &&
         (v[i++] = strdup("import runpy, sys; sys.argv = sys.argv[1:]; "
                          "runpy.run_path(sys.argv[0], run_name='__main__')"));
  } else if (!cfg->no_python) {
    ok = (v[i++] = strdup(python)) && (v[i++] = strdup("-u"));
    if (ok && cfg->module) ok = (v[i++] = strdup("-m")) != NULL;
  }
  if (ok) ok = (v[i++] = strdup(cfg->script)) != NULL;
  for (int a = 0; ok && a < cfg->nscript_args; a++)
    ok = (v[i++] = subst_local_rank(cfg->script_args[a], local_rank)) != NULL;
  if (!ok) {
    trun_strv_free(v);
    return NULL;
  }
  return v;
}
