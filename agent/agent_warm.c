/* --warm-start on the agent's side (agent/proc/warm.h, docs/warm-start.md): the pool's slot environments,
 * filling it as soon as the workers' base environment is known and after each group starts, waiting (on the
 * loop) for pool processes still importing before a group starts, and taking a worker from it. */
#include <stdio.h>
#include <string.h>

#include "agent_int.h"
#include "base/base.h"
#include "worker_env.h"

/* Slot lr's environment before the rendezvous: the worker's, without what only the rendezvous decides
 * (those variables are left as the agent's own environment has them). NULL when out of memory. */
static char **slot_env(char **base, const trun_config *cfg, int nproc, int lr) {
  trun_rdzv_round r;
  memset(&r, 0, sizeof(r));
  char **v = trun_worker_envp(base, cfg, &r, nproc, lr, 0, "");
  for (size_t i = 0; v && v[i];) {
    size_t n = strcspn(v[i], "=");
    char name[256];
    if (!trun_warm_round_var(v[i]) || n >= sizeof(name)) {
      i++;
      continue;
    }
    memcpy(name, v[i], n);
    name[n] = '\0';
    const char *own = trun_env_get(base, name);
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
  if (a->warm.pool == NULL) {
    a->warm.pool =
        trun_warm_new(a->nproc, a->cfg->warm_modules, a->nofile_raised ? &a->nofile : NULL, &a->guard);
    if (a->warm.pool == NULL) {
      trun_warn("--warm-start: out of memory for the pool; workers start cold");
      return;
    }
  }
  for (int lr = 0; lr < a->nproc; lr++) {
    if (trun_warm_pid(a->warm.pool, lr) > 0) continue;
    char **env = slot_env(a->env, a->cfg, a->nproc, lr);
    char **argv = env ? trun_worker_argv(a->cfg, env, lr) : NULL;
    /* --warm-start-cuda: the device the worker's LOCAL_RANK names (0 with --virtual-local-rank, whose
     * CUDA_VISIBLE_DEVICES holds its one GPU). TRUN_CUDA_DRIVER_LIBRARY: the tests' fake driver.
     * --warm-start-nccl: only in pool processes for a restart, which get ready while the workers run; the
     * first start waits for its pool, and NCCL's set-up there (about 0.9 s) costs more than the worker
     * saves (about 0.4 s). */
    if (a->cfg->warm_cuda)
      trun_warm_set_cuda(a->warm.pool, lr, a->cfg->virtual_local_rank ? 0 : lr,
                         a->cfg->warm_nccl && a->warm.started,
                         trun_env_get(a->env, "TRUN_CUDA_DRIVER_LIBRARY"));
    if (argv && argv[1] && argv[2])
      trun_warm_fill(a->warm.pool, lr, argv[0], argv + 2, trun_worker_cpus(env), env);
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
  else if (trun_warm_take(a->warm.pool, w->local_rank, argv, envp, out_fd, err_fd, &w->pid, why,
                          sizeof(why)) == 0) {
    trun_warm_ras(a->warm.pool, w->local_rank, w->ras, sizeof(w->ras));
    trun_debug("local rank %d starts warm (pool process %d%s%s)", w->local_rank, (int)w->pid,
               w->ras[0] ? "; its NCCL RAS serves on " : "", w->ras);
    trun_obs_warm_start(a->obs, 1);
    return 0;
  }
  trun_info("--warm-start: local rank %d starts cold: %s", w->local_rank, why);
  trun_obs_warm_start(a->obs, 0);
  return 1;
}

/* How long a group's start waits for pool processes still importing (a hung import: then cold), and how
 * often it looks. */
#define TRUN_WARM_WAIT_S 60
#define WAIT_TICK_MS 10

static void on_wait_tick(uv_timer_t *t) {
  agent *a = t->data;
  if (a->stop.signal_seen || trun_warm_importing(a->warm.pool) == 0 || trun_wall_s() >= a->warm.wait_until)
    uv_stop(t->loop);
}

int trun__agent_warm_wait(agent *a) {
  if (a->warm.pool == NULL || a->stop.signal_seen) return a->stop.signal_seen ? -1 : 0;
  int n = trun_warm_importing(a->warm.pool);
  if (n == 0) return 0;
  trun_debug("--warm-start: waiting for %d pool process(es) still importing %s", n, a->cfg->warm_modules);
  a->warm.wait_until = trun_wall_s() + TRUN_WARM_WAIT_S;
  uv_timer_start(&a->wait_timer, on_wait_tick, WAIT_TICK_MS, WAIT_TICK_MS);
  uv_run(a->loop, UV_RUN_DEFAULT);
  uv_timer_stop(&a->wait_timer);
  if (a->stop.signal_seen) return -1;
  if ((n = trun_warm_importing(a->warm.pool)) > 0)
    trun_warn("--warm-start: %d pool process(es) not ready after %d s; those workers start cold", n,
              TRUN_WARM_WAIT_S);
  return 0;
}

void trun__agent_warm_describe(const trun_config *cfg, char **base, int nproc, int measure, FILE *out) {
  if (!cfg->warm_start) {
    fprintf(out, "warm start: off (workers start cold; --warm-start starts them from a pool)\n");
    return;
  }
  if (cfg->no_python) {
    fprintf(out, "warm start: on, but every worker starts cold: --no-python workers are not Python\n");
    return;
  }
  trun_config c = *cfg; /* --explain may come without a script: only the interpreter matters here */
  if (c.script == NULL) c.script = "script.py", c.nscript_args = 0;
  char **env = slot_env(base, cfg, nproc, 0);
  char **argv = env ? trun_worker_argv(&c, env, 0) : NULL;
  if (argv == NULL) {
    fprintf(out, "warm start: on (out of memory describing it)\n");
    trun_strv_free(env);
    return;
  }
  fprintf(
      out,
      "warm start: on: each of the %d workers starts from a pool process (%s -u, importing %s) started with "
      "the agent and refilled after each start; a worker that cannot start exactly as a cold one starts "
      "cold with the reason\n",
      nproc, argv[0], cfg->warm_modules[0] ? cfg->warm_modules : "nothing");
  if (cfg->warm_cuda)
    fprintf(out, "  each pool process also makes its worker's CUDA context (--warm-start-cuda)%s\n",
            cfg->warm_nccl
                ? "; those for a restart also do NCCL's once-a-process set-up, their RAS then serving "
                  "on a port of their own (--warm-start-nccl)"
                : "");
  if (measure) {
    trun_warm *p = trun_warm_new(1, cfg->warm_modules, NULL, NULL);
    char why[512] = "out of memory";
    double t0 = trun_wall_s();
    if (p && argv[1] && argv[2] && trun_warm_fill(p, 0, argv[0], argv + 2, trun_worker_cpus(env), env) == 0 &&
        trun_warm_wait_ready(p, 0, 300000, why, sizeof(why)) == 0) {
      long kb = trun_warm_rss_kb(p, 0);
      fprintf(
          out,
          "  pool memory: %.0f MiB resident per pool process (measured now: one started, ready in %.1f s, "
          "stopped), %.0f MiB for this node's %d\n",
          kb / 1024.0, trun_wall_s() - t0, kb * (double)nproc / 1024.0, nproc);
    } else {
      fprintf(out, "  pool memory: not measured: %s; the workers would start cold\n", why);
    }
    trun_warm_free(p);
  }
  trun_strv_free(argv);
  trun_strv_free(env);
}
