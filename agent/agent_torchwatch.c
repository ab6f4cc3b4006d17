/* What torch's LocalElasticAgent serves its workers and probes besides the rendezvous (agent/agent_int.h):
 * the file-timer watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1: the FIFO of agent/observe/ftimer.h, its path
 * handed to the workers as TORCHELASTIC_TIMER_FILE; an expired scope kills the worker with the request's
 * signal, and the normal failure path restarts the group) and the health-check port
 * (TORCHELASTIC_HEALTH_CHECK_PORT: alive while the watchdog made progress within
 * TRUN_HEALTH_PORT_TIMEOUT_S, as torch's alive callback). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/observe/observe.h"
#include "agent/proc/proc.h"
#include "agent_int.h"
#include "base/base.h"
#include "config/config.h"

/* The local worker whose process group pid belongs to (the worker itself or a process it started), NULL. */
static worker *worker_of(agent *a, pid_t pid) {
  pid_t pg = getpgid(pid);
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].running && a->w[i].pid > 0 && (a->w[i].pid == pid || a->w[i].pid == pg)) return &a->w[i];
  return NULL;
}

/* Only this node's running workers (and processes of their groups) may hold timers. */
static int accept_pid(void *arg, pid_t pid) {
  agent *a = arg;
  return a->stop.in_round && worker_of(a, pid) != NULL;
}

static void on_expired(void *arg, pid_t pid, const char *scope, int sig) {
  agent *a = arg;
  char sname[32];
  worker *w = a->stop.in_round ? worker_of(a, pid) : NULL;
  if (w == NULL) {
    trun_warn(
        "file-timer watchdog: scope '%.200s' of pid %d expired, but pid %d is no process of this node's "
        "running workers: not signalled",
        scope, (int)pid, (int)pid);
    return;
  }
  int rank = trun_rdzv_info(a->rdzv)->base_rank + w->local_rank;
  trun_obs_timer_expired(a->obs, pid, w->pid == pid ? rank : -1, w->pid == pid ? w->local_rank : -1, scope,
                         sig);
  if (sig <= 0) {
    trun_warn(
        "file-timer watchdog: scope '%.200s' of rank %d (pid %d) expired; its request named no signal: "
        "not signalled (as torch)",
        scope, rank, (int)pid);
    return;
  }
  trun_signal_name(sig, sname, sizeof(sname));
  trun_error("file-timer watchdog: scope '%.200s' of rank %d (local %d, pid %d) expired: sending %s", scope,
             rank, w->local_rank, (int)pid, sname);
  if (w->timer_scope[0] == '\0') {
    snprintf(w->timer_scope, sizeof(w->timer_scope), "%s", scope);
    w->timer_signal = sig;
  }
  if (kill(pid, sig) < 0 && errno != ESRCH)
    trun_error("file-timer watchdog: kill(%d, %s): %s", (int)pid, sname, strerror(errno));
}

/* torch's /tmp/watchdog_timer_<uuid4>, under $TMPDIR when set. */
static int default_path(agent *a, char *out, size_t len) {
  const char *tmp = trun_env_get(a->env, "TMPDIR");
  char id[40];
  trun_uuid4(id, sizeof(id));
  if (trun__agent_pathf(out, len, "%s/watchdog_timer_%s", tmp && tmp[0] ? tmp : "/tmp", id) < 0) {
    trun_error(
        "file-timer watchdog: the FIFO's path under TMPDIR=%.200s is too long; set TORCHELASTIC_TIMER_FILE",
        tmp ? tmp : "");
    return -1;
  }
  return 0;
}

static int file_timer(agent *a) {
  const char *on = trun_env_get(a->env, "TORCHELASTIC_ENABLE_FILE_TIMER");
  if (on == NULL || strcmp(on, "1") != 0) return 0;
  char path[PATH_MAX], err[512];
  const char *given = trun_env_get(a->env, "TORCHELASTIC_TIMER_FILE");
  if (given && given[0])
    snprintf(path, sizeof(path), "%s", given);
  else if (default_path(a, path, sizeof(path)) < 0)
    return -1;
  a->ftimer = trun_ftimer_open(a->loop, path, on_expired, a, err, sizeof(err));
  if (a->ftimer == NULL) {
    trun_error(
        "TORCHELASTIC_ENABLE_FILE_TIMER=1: cannot make the file-timer watchdog's FIFO: %s; set "
        "TORCHELASTIC_TIMER_FILE to a path in a writable directory",
        err);
    return -1;
  }
  trun_ftimer_set_accept(a->ftimer, accept_pid);
  trun_watchdog_remove_on_exit(&a->guard, path); /* the FIFO goes with an agent killed by SIGKILL too */
  if (trun_strv_setenv(&a->env, "TORCHELASTIC_TIMER_FILE", path) < 0) {
    trun_error("out of memory setting TORCHELASTIC_TIMER_FILE");
    return -1;
  }
  trun_info("file-timer watchdog: reading the workers' timer requests from %s (TORCHELASTIC_TIMER_FILE)",
            path);
  return 0;
}

/* torch's alive callback: the watchdog's last progress time (now without a watchdog); alive within the
 * timeout torch's agent gives its health-check server. */
static int probe(void *arg, trun_buf *out) {
  agent *a = arg;
  double now = trun_wall_s(), last = a->ftimer ? trun_ftimer_last_progress(a->ftimer) : now;
  int alive = now - last <= TRUN_HEALTH_PORT_TIMEOUT_S;
  char body[192];
  int n = snprintf(body, sizeof(body),
                   "{\"alive\": %s, \"last_progress_time\": %lld, \"timeout_s\": %d, \"file_timer\": %s}\n",
                   alive ? "true" : "false", (long long)last, TRUN_HEALTH_PORT_TIMEOUT_S,
                   a->ftimer ? "true" : "false");
  trun_buf_append(out, body, (size_t)n);
  return alive;
}

static int health_port(agent *a) {
  const char *v = trun_env_get(a->env, "TORCHELASTIC_HEALTH_CHECK_PORT");
  if (v == NULL) return 0;
  char *end = NULL;
  errno = 0;
  long port = strtol(v, &end, 10);
  if (v[0] == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535) {
    trun_error(
        "TORCHELASTIC_HEALTH_CHECK_PORT='%.40s' is not a port 0-65535 (0: a free one); fix or unset it", v);
    return -2;
  }
  int got = 0, rc = trun_metrics_start_probe(a->loop, NULL, (int)port, probe, a, &a->probe, &got);
  if (rc < 0) {
    trun_error("TORCHELASTIC_HEALTH_CHECK_PORT=%ld: cannot listen: %s; pick another port (0: a free one)",
               port, uv_strerror(rc));
    return -2;
  }
  trun_info("answering health probes on port %d (TORCHELASTIC_HEALTH_CHECK_PORT; 200 alive, 503 not)", got);
  return 0;
}

void trun__agent_torchwatch_round(agent *a) { trun_ftimer_clear(a->ftimer); }

int trun__agent_torchwatch_open(agent *a) {
  int rc = file_timer(a);
  return rc < 0 ? rc : health_port(a);
}

void trun__agent_torchwatch_close(agent *a) {
  trun_ftimer_close(a->ftimer);
  a->ftimer = NULL;
  trun_metrics_close(a->probe);
  a->probe = NULL;
}
