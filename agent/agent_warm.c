/* --warm-start on the agent's side (agent/proc/warm.h, docs/warm-start.md): the pool's slot environments,
 * filling it as soon as the workers' base environment is known and after each group starts, and taking a
 * worker from it. */
#include <string.h>

#include "agent_int.h"
#include "store/store.h"
#include "worker_env.h"

/* Slot lr's environment before the rendezvous: the worker's, without what only the rendezvous decides
 * (those variables are left as the agent's own environment has them). NULL when out of memory. */
static char **slot_env(agent *a, int lr) {
  trun_rdzv r;
  memset(&r, 0, sizeof(r));
  r.cfg = a->cfg;
  r.nproc = a->nproc;
  char **v = trun_worker_envp(a->env, a->cfg, &r, lr, 0, "");
  for (size_t i = 0; v && v[i];) {
    size_t n = strcspn(v[i], "=");
    char name[256];
    if (!trun_warm_round_var(v[i]) || n >= sizeof(name)) {
      i++;
      continue;
    }
    memcpy(name, v[i], n);
    name[n] = '\0';
    const char *own = trun_strv_getenv(a->env, name);
    if (own == NULL) {
      trun_strv_unsetenv(v, name); /* shifts the rest down: look at i again */
    } else if (strcmp(own, v[i] + n + 1) != 0) {
      if (trun_strv_setenv(&v, name, own) < 0) {
        trun_strv_free(v);
        return NULL;
      }
      i++;
    } else {
      i++;
    }
  }
  return v;
}

void trun__agent_warm_fill(agent *a) {
  if (!a->cfg->warm_start || a->cfg->no_python) return;
  if (a->warm == NULL) {
    a->warm = trun_warm_new(a->nproc, a->cfg->warm_modules, a->nofile_raised ? &a->nofile : NULL, &a->guard);
    if (a->warm == NULL) {
      trun_warn("--warm-start: out of memory for the pool; workers start cold");
      return;
    }
  }
  for (int lr = 0; lr < a->nproc; lr++) {
    if (trun_warm_pid(a->warm, lr) > 0) continue;
    char **env = slot_env(a, lr);
    char **argv = env ? trun_worker_argv(a->cfg, env, lr) : NULL;
    if (argv)
      trun_warm_fill(a->warm, lr, argv[0], trun_worker_cpus(env), env);
    else
      trun_warn("--warm-start: local rank %d: out of memory building its pool process; it starts cold", lr);
    trun_strv_free(argv);
    trun_strv_free(env);
  }
}

int trun__agent_warm_take(agent *a, worker *w, char *const *argv, char *const *envp, int out_fd, int err_fd) {
  if (!a->cfg->warm_start) return 1;
  char why[512];
  if (a->cfg->no_python)
    snprintf(why, sizeof(why), "--no-python workers are not Python");
  else if (trun_warm_take(a->warm, w->local_rank, argv, envp, out_fd, err_fd, &w->pid, why, sizeof(why)) ==
           0) {
    trun_debug("local rank %d starts warm (pool process %d)", w->local_rank, (int)w->pid);
    trun_obs_warm_start(a->obs, 1);
    return 0;
  }
  trun_info("--warm-start: local rank %d starts cold: %s", w->local_rank, why);
  trun_obs_warm_start(a->obs, 0);
  return 1;
}
