/* trun --dry-run (agent/agent.h): the plan of this node without starting anything: the rendezvous as it
 * would go (trun_rdzv_preview: the backend, who serves the store, the ranks known in advance), each local
 * rank's command line and torchrun environment, and whether the workers would start warm. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "agent/proc/proc.h"
#include "agent/rdzv/rdzv.h"
#include "agent_int.h"
#include "worker_env.h"

/* The workers' rendezvous values as the preview knows them: a stand-in for the round that the workers'
 * environment is built from (the unknown ones are printed as such, not from here). */
static void preview_round(const trun_rdzv_preview_info *p, trun_rdzv_round *r) {
  memset(r, 0, sizeof(*r));
  r->group_rank = p->ranks_known ? p->group_rank : 0;
  r->group_world_size = p->ranks_known ? p->group_world_size : 1;
  r->base_rank = r->role_base_rank = p->ranks_known ? p->base_rank : 0;
  r->world_size = r->role_world_size = p->ranks_known ? p->world_size : p->nproc;
  snprintf(r->master_addr, sizeof(r->master_addr), "%s", p->master_addr);
  r->master_port = p->master_port > 0 ? p->master_port : 0;
}

/* A variable (a row of proc's round_vars.h) the preview cannot know: how --dry-run shows it (NULL: its value
 * is known). */
static const char *unknown_value(const trun_rdzv_preview_info *p, trun_round_var_id id) {
  unsigned flags = trun_round_vars[id].flags;
  if ((!p->ranks_known && (flags & TRUN_RV_RANKS)) || (!p->master_known && (flags & TRUN_RV_MASTER)))
    return "<decided at the rendezvous>";
  if (id == TRUN_RV_MASTER_PORT && p->master_port == 0) return "<free port>";
  return NULL;
}

/* The plan's head: nodes, the rendezvous and its store, this node's workers. */
static void print_plan(const trun_config *cfg, const trun_rdzv_preview_info *p, FILE *out) {
  char port[16], nodes[32];
  snprintf(port, sizeof(port), "%d", p->endpoint_port);
  if (p->min_nodes == p->max_nodes)
    snprintf(nodes, sizeof(nodes), "%d", p->max_nodes);
  else
    snprintf(nodes, sizeof(nodes), "%d:%d", p->min_nodes, p->max_nodes);
  fprintf(out, "trun --dry-run: nothing is started\n");
  if (p->ranks_known)
    fprintf(out, "nodes: %s (this node: group rank %d)", nodes, p->group_rank);
  else
    fprintf(out, "nodes: %s (this node: group rank decided at the rendezvous)", nodes);
  fprintf(out, "  rendezvous: %s%s at %s:%s  run id: %s\n", p->backend,
          cfg->standalone ? " (--standalone: trun's single-node rendezvous; torchrun's c10d)" : "",
          p->endpoint_host, p->endpoint_port == 0 ? "<free port>" : port, cfg->run_id);
  fprintf(out, "rendezvous store: %s\n", p->store_how);
  if (p->ranks_known)
    fprintf(out, "workers on this node: %d (global ranks %d-%d of %d%s)\n", p->nproc, p->base_rank,
            p->base_rank + p->nproc - 1, p->world_size,
            p->group_world_size > 1 ? ", assuming every node runs the same count" : "");
  else
    fprintf(out, "workers on this node: %d (global ranks decided at the rendezvous of %s nodes)\n", p->nproc,
            nodes);
}

int trun_agent_dry_run(const trun_config *cfg, char **envp, FILE *out) {
  char err[512];
  int nproc;
  if (trun_nproc_resolve(cfg->nproc_spec, &nproc, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  if (trun__agent_check_ranks_filter(cfg, nproc, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s\n", err);
    return 2;
  }
  trun_rdzv_preview_info pv;
  if (trun_rdzv_preview(cfg, nproc, &pv, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  trun_rdzv_round r;
  preview_round(&pv, &r);
  int omp_forced;
  trun_node *node = calloc(1, sizeof(*node));
  char derr[512];
  if (node &&
      trun_discover_node(node, envp, trun_agent_discover_flags(cfg), cfg->no_imds, derr, sizeof(derr)) < 0)
    trun_warn("GPU discovery: %s; deciding the NCCL environment from the GPUs found before it", derr);
  char **base = node ? trun_agent_env(envp, cfg, nproc, node, &omp_forced) : NULL;
  char frdir[PATH_MAX]; /* where trun__agent_fr_open would put the dumps */
  const char *t = getenv("TMPDIR");
  if (cfg->log_dir && strcmp(cfg->log_dir, "/dev/null") != 0)
    snprintf(frdir, sizeof(frdir), "%s/%s_XXXXXX/flight_recorder", cfg->log_dir, cfg->run_id);
  else
    snprintf(frdir, sizeof(frdir), "%s/trun_fr_%s_XXXXXX", t && t[0] ? t : "/tmp", cfg->run_id);
  if (base && trun__agent_fr_env(&base, node->ngpu, frdir, cfg) < 0) {
    trun_strv_free(base);
    base = NULL;
  }
  free(node);
  print_plan(cfg, &pv, out);
  fprintf(out, "restarts: %d  stop grace: %.0f s  signals: %s\n", cfg->max_restarts, cfg->shutdown_timeout,
          cfg->signals_text);
  if (!cfg->no_python || cfg->run_path) {
    char py[PATH_MAX + 128];
    trun_agent_describe_python(envp, py, sizeof(py));
    fprintf(out, "interpreter: %s\n", py);
  }
  int code = 0;
  for (int lr = 0; base && lr < nproc; lr++) {
    char ef[PATH_MAX];
    snprintf(ef, sizeof(ef), "<log dir>/attempt_0/%d/error.json", lr);
    char **env = trun_worker_envp(base, cfg, &r, pv.nproc, lr, 0,
                                  cfg->log_dir && strcmp(cfg->log_dir, "/dev/null") == 0 ? "" : ef);
    char **argv = env ? trun_worker_argv(cfg, env, lr) : NULL;
    if (argv == NULL) {
      trun_error("cannot build local rank %d's environment", lr);
      trun_strv_free(env);
      code = 2;
      break;
    }
    fprintf(out, "local rank %d:", lr);
    for (char **p = argv; *p; p++) fprintf(out, " %s", *p);
    fprintf(out, "\n");
    for (trun_round_var_id i = 0; i < TRUN_RV_COUNT; i++) {
      if (!(trun_round_vars[i].flags & TRUN_RV_SHOWN)) continue;
      const char *v = trun_env_get(env, trun_round_vars[i].name), *unknown = unknown_value(&pv, i);
      if (v) fprintf(out, "  %s=%s\n", trun_round_vars[i].name, unknown ? unknown : v);
    }
    for (const char *const *k = trun__agent_fr_vars; *k; k++) { /* torch's flight recorder (agent_fr.c) */
      const char *v = trun_env_get(env, *k);
      if (v) fprintf(out, "  %s=%s\n", *k, v);
    }
    if (trun_env_get(env, "PYTHONFAULTHANDLER") == NULL) /* agent_hangstack.c */
      fprintf(out, "  PYTHONFAULTHANDLER=1 (a hang's culprit prints its Python stack)\n");
    const char *ras = trun_round_var_name(TRUN_RV_NCCL_RAS_ADDR);
    if (trun_env_get(env, ras) == NULL) /* the agent reserves it (agent_rasport.c) */
      fprintf(out, "  %s=127.0.0.1:<free port of this node's agent> (the job's own NCCL RAS port)\n", ras);
    trun_strv_free(argv);
    trun_strv_free(env);
  }
  fprintf(out, "(plus the rest of trun's environment, inherited unchanged)\n");
  if (base) trun__agent_warm_describe(cfg, base, nproc, 0, out);
  trun_strv_free(base);
  return code;
}
