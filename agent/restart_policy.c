/* The restart policy (restart_policy.h). */
#include "restart_policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/proc/proc.h"
#include "base/base.h"

void trun_restart_policy_init(trun_restart_policy *p, const trun_config *cfg, char **envp) {
  memset(p, 0, sizeof(*p));
  p->max_restarts = cfg->max_restarts;
  p->backoff = cfg->restart_backoff;
  p->loop_rounds = cfg->crash_loop_rounds;
  p->loop_window = cfg->crash_loop_window;
  if (cfg->restart_offset >= 0) {
    p->offset = cfg->restart_offset;
    snprintf(p->offset_from, sizeof(p->offset_from), "--restart-offset");
    return;
  }
  const char *s = trun_env_get(envp, "SLURM_RESTART_COUNT");
  if (s == NULL || s[0] == '\0') return;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end != '\0' || v < 0 || v > 1000000) {
    trun_warn("SLURM_RESTART_COUNT='%.32s' is not a count of requeues: taken as 0 (set --restart-offset)", s);
    return;
  }
  p->offset = (int)v;
  snprintf(p->offset_from, sizeof(p->offset_from), "SLURM_RESTART_COUNT");
}

int trun_restart_policy_remaining(const trun_restart_policy *p) {
  return p->offset >= p->max_restarts ? 0 : p->max_restarts - p->offset;
}

int trun_restart_policy_left(const trun_restart_policy *p, int attempt) {
  int budget = trun_restart_policy_remaining(p);
  return budget > attempt ? budget - attempt : 0;
}

trun_restart_next trun_restart_policy_next(trun_restart_policy *p, int failed, double ran_s, int attempt) {
  int loop = 0;
  if (failed)
    loop = trun_restart_policy_failed(p, ran_s);
  else
    trun_restart_policy_reset(p);
  if (loop) return TRUN_RESTART_CRASH_LOOP;
  return trun_restart_policy_left(p, attempt) == 0 ? TRUN_RESTART_SPENT : TRUN_RESTART_GO;
}

int trun_restart_policy_failed(trun_restart_policy *p, double ran_s) {
  if (!(ran_s < p->loop_window)) {
    p->fast_streak = 0;
    return 0;
  }
  p->fast_streak++;
  return p->loop_rounds > 0 && p->fast_streak >= p->loop_rounds;
}

void trun_restart_policy_reset(trun_restart_policy *p) { p->fast_streak = 0; }

double trun_restart_policy_delay(const trun_restart_policy *p) {
  /* The first fast failure restarts at once (a one-off crash recovers as fast as it can); the back-off
   * starts with the second in a row. */
  if (p->backoff <= 0 || p->fast_streak < 2) return 0;
  double cap = p->backoff > TRUN_BACKOFF_MAX_S ? p->backoff : TRUN_BACKOFF_MAX_S;
  double d = p->backoff * ldexp(1.0, p->fast_streak > 31 ? 29 : p->fast_streak - 2);
  return d > cap ? cap : d;
}

int trun_restart_policy_exhausted_code(const trun_restart_policy *p) {
  return p->offset > 0 ? TRUN_EXIT_NO_PROGRESS : 1;
}
