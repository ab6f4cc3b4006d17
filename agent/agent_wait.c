/* The agent's own waits (agent/rdzv/rdzv.h, "waits"): the hook that turns every wait's report into the
 * "waiting" event and metric, and the wait for workers that do not exit after the stop signal. */
#include <stdio.h>
#include <string.h>

#include "agent_int.h"

void trun__agent_wait_hook(void *arg, const trun_wait_info *w) {
  agent *a = arg;
  trun_obs_waiting(a->obs, w);
}

/* Which workers still run, at most a few by rank and pid. */
static void stop_have(agent *a) {
  enum { NAMED = 8 };
  char names[400] = "";
  size_t nl = 0;
  int named = 0;
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].running && named++ < NAMED && nl < sizeof(names))
      nl += (size_t)snprintf(names + nl, sizeof(names) - nl, "%srank %d (pid %d)", nl ? ", " : "",
                             trun_rdzv_info(a->rdzv)->base_rank + i, (int)a->w[i].pid);
  snprintf(a->stop_wait.wait.have, sizeof(a->stop_wait.wait.have),
           "%d of %d still run: %s%s; SIGKILL at the time-out", a->stop.running, a->nproc, names,
           named > NAMED ? ", ..." : "");
}

static void on_stop_wait_timer(uv_timer_t *t) {
  agent *a = t->data;
  if (!trun_wait_due(&a->stop_wait.wait)) return;
  stop_have(a);
  trun_wait_report(&a->stop_wait.wait);
}

void trun__agent_stop_wait_begin(agent *a, int sig) {
  char name[32];
  trun_signal_name(sig, name, sizeof(name));
  trun_wait_begin(&a->stop_wait.wait, "workers_stop", a->cfg->shutdown_timeout, "--shutdown-timeout",
                  trun__agent_wait_hook, a, "the workers to exit after %s (workers that ignore it)", name);
  uv_timer_start(&a->stop_wait.timer, on_stop_wait_timer, 1000, 1000);
}

void trun__agent_stop_wait_end(agent *a) {
  uv_timer_stop(&a->stop_wait.timer);
  trun_wait_end(&a->stop_wait.wait);
}
