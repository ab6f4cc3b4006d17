#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agent_int.h"
#include "doctor.h"
#include "log.h"
#include "nccl_env.h"
#include "nccl_report.h"
#include "obs.h"
#include "output.h"
#include "preflight.h"
#include "rdzv.h"
#include "report.h"
#include "stall.h"
#include "store_acl.h"
#include "watchdog.h"
#include "worker_env.h"

double trun__agent_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* snprintf for paths: -ENAMETOOLONG instead of a silently cut path. */
int trun__agent_pathf(char *out, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, len, fmt, ap);
  va_end(ap);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int trun__agent_mkdirs(const char *path) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp)) return -ENAMETOOLONG;
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -errno;
      *p = '/';
    }
  if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -errno;
  return 0;
}

/* torchrun's layout: <log-dir or /tmp/torchelastic_XXXXXX>/<run_id>_XXXXXX/attempt_N/<local_rank>/ */
static int make_run_dir(agent *a) {
  const char *base = a->cfg->log_dir;
  char tmpbase[PATH_MAX];
  if (base && strcmp(base, "/dev/null") == 0) {
    a->files_off = 1;
    return 0;
  }
  if (base == NULL) {
    const char *t = getenv("TMPDIR");
    snprintf(tmpbase, sizeof(tmpbase), "%s/torchelastic_XXXXXX", t && t[0] ? t : "/tmp");
    if (mkdtemp(tmpbase) == NULL) return -errno;
    base = tmpbase;
  } else {
    int rc = trun__agent_mkdirs(base);
    if (rc < 0) return rc;
  }
  if (snprintf(a->run_dir, sizeof(a->run_dir), "%s/%s_XXXXXX", base, a->cfg->run_id) >=
      (int)sizeof(a->run_dir))
    return -ENAMETOOLONG;
  if (mkdtemp(a->run_dir) == NULL) return -errno;
  return 0;
}

/* ---- round end ----------------------------------------------------------------------------------- */

static void maybe_finish(agent *a);

void trun__agent_on_stream_eof(void *arg) {
  agent *a = arg;
  a->open_streams--;
  maybe_finish(a);
}

static void on_drain_timeout(uv_timer_t *t) {
  agent *a = t->data;
  /* Workers are gone but something they started still holds their output pipe: stop reading it. */
  for (int i = 0; i < a->nproc; i++) {
    worker *w = &a->w[i];
    if (w->out && trun_stream_is_open(w->out)) {
      trun_stream_close(w->out), w->out = NULL, a->open_streams--;
    }
    if (w->err && trun_stream_is_open(w->err)) {
      trun_stream_close(w->err), w->err = NULL, a->open_streams--;
    }
  }
  maybe_finish(a);
}

/* The round is over once every worker is reaped, its output drained, and (multi-node) the job-wide end
 * of the round is known. */
static void maybe_finish(agent *a) {
  if (a->running > 0) return;
  if (a->open_streams > 0) {
    if (!uv_is_active((uv_handle_t *)&a->drain_timer))
      uv_timer_start(&a->drain_timer, on_drain_timeout, 2000, 0);
    return;
  }
  uv_timer_stop(&a->kill_timer);
  uv_timer_stop(&a->drain_timer);
  uv_stop(a->loop);
}

static void kill_groups(agent *a, int sig) {
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].pid > 0 && (a->w[i].running || sig == SIGKILL)) {
      if (kill(-a->w[i].pid, sig) < 0 && errno == ESRCH && a->w[i].running) kill(a->w[i].pid, sig);
    }
}

static void on_kill_timer(uv_timer_t *t) {
  agent *a = t->data;
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].running)
      trun_warn("rank %d (local %d, pid %d) still runs %.0f s after the stop signal: sending SIGKILL",
                a->rdzv.base_rank + i, i, (int)a->w[i].pid, a->cfg->shutdown_timeout);
  kill_groups(a, SIGKILL);
}

/* Stops every running worker: sig to its process group, SIGKILL after the shutdown timeout. */
static void begin_stop(agent *a, int sig, int torn_down) {
  if (a->phase_stopping) return;
  a->phase_stopping = 1;
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].running && torn_down) a->w[i].torn_down = 1;
  kill_groups(a, sig);
  uv_timer_start(&a->kill_timer, on_kill_timer, (uint64_t)(a->cfg->shutdown_timeout * 1000), 0);
  maybe_finish(a);
}

static void worker_exited(agent *a, worker *w, int status) {
  char sname[32];
  w->running = 0;
  a->running--;
  w->exit_time = trun__agent_now();
  w->status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  trun_obs_worker_exit(a->obs, w->pid, a->rdzv.base_rank + w->local_rank, w->local_rank, w->status,
                       w->torn_down);
  trun_stall_exited(a->stall, w->local_rank);
  if (w->status < 0)
    trun_debug("rank %d (local %d, pid %d) killed by %s", a->rdzv.base_rank + w->local_rank, w->local_rank,
               (int)w->pid, trun_signal_name(-w->status, sname, sizeof(sname)));
  if (!a->phase_stopping) {
    if (w->status != 0) {
      a->result = OUT_FAILED;
      a->first_failed = w->local_rank;
      begin_stop(a, SIGTERM, 1);
    } else if (a->running == 0) {
      a->result = OUT_SUCCESS;
    }
  }
  maybe_finish(a);
}

static void on_sigchld(uv_signal_t *h, int signum) {
  (void)signum;
  agent *a = h->data;
  int status;
  pid_t pid;
  /* Reap everything: workers, and (as subreaper or PID 1) any orphan that was re-parented to us. */
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (int i = 0; i < a->nproc; i++)
      if (a->w[i].pid == pid && a->w[i].running) {
        worker_exited(a, &a->w[i], status);
        break;
      }
  }
}

static int is_stop_signal(int sig) {
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

static void handle_signal(agent *a, int sig) {
  char name[32];
  trun_signal_name(sig, name, sizeof(name));
  if (!is_stop_signal(sig)) {
    trun_info("%s: forwarded to the workers", name);
    kill_groups(a, sig);
    return;
  }
  if (a->signal_seen) {
    trun_warn("second %s: killing the workers now", name);
    kill_groups(a, SIGKILL);
    return;
  }
  a->signal_seen = sig;
  a->result = OUT_SIGNALED;
  trun_warn("%s: forwarding it to the workers; SIGKILL in %.0f s (send it again to kill now)", name,
            a->cfg->shutdown_timeout);
  begin_stop(a, sig, 1);
}

static void on_signal(uv_signal_t *h, int sig) { handle_signal(h->data, sig); }

/* ---- --watch-stdin: the session of the launcher that started this agent ---------------------------- */

#define TRUN_STDIN_HELLO "trun-watch-stdin 1"

static void stdin_stop(agent *a) {
  if (!a->stdin_on) return;
  a->stdin_on = 0;
  uv_poll_stop(&a->stdin_poll);
  uv_close((uv_handle_t *)&a->stdin_poll, NULL);
}

/* One line from the launcher: its hello, or the name of a stop signal to act on. */
static void stdin_line(agent *a, const char *line) {
  static const int stop[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  char name[32];
  if (strcmp(line, TRUN_STDIN_HELLO) == 0) {
    a->stdin_hello = 1;
    trun_debug("--watch-stdin: the launcher's session is on stdin; its end stops the job");
    return;
  }
  for (size_t i = 0; i < sizeof(stop) / sizeof(stop[0]); i++)
    if (strcmp(line, trun_signal_name(stop[i], name, sizeof(name))) == 0) {
      trun_info("--watch-stdin: the launcher sent %s", name);
      handle_signal(a, stop[i]);
      return;
    }
  trun_warn("--watch-stdin: ignoring the line '%.40s' on stdin (want %s, SIGINT, SIGTERM, SIGHUP or SIGQUIT)",
            line, TRUN_STDIN_HELLO);
}

static void on_stdin(uv_poll_t *h, int status, int events) {
  (void)events;
  agent *a = h->data;
  char buf[256];
  ssize_t n = status < 0 ? -1 : read(0, buf, sizeof(buf));
  if (n < 0 && status >= 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    stdin_stop(a);
    if (!a->stdin_hello) {
      trun_warn(
          "--watch-stdin: stdin ended before the launcher's first line: not tied to it (does the --rsh "
          "command pass stdin on? ssh -n does not)");
      return;
    }
    trun_warn("--watch-stdin: stdin ended: the launcher or its ssh session is gone; stopping as on SIGHUP");
    handle_signal(a, SIGHUP);
    return;
  }
  for (ssize_t i = 0; i < n; i++) {
    if (buf[i] == '\n') {
      a->stdin_line[a->stdin_len] = '\0';
      a->stdin_len = 0;
      stdin_line(a, a->stdin_line);
    } else if (a->stdin_len < sizeof(a->stdin_line) - 1) {
      a->stdin_line[a->stdin_len++] = buf[i];
    }
  }
}

static void watch_stdin(agent *a) {
  int rc = uv_poll_init(a->loop, &a->stdin_poll, 0);
  if (rc == 0) {
    a->stdin_poll.data = a;
    a->stdin_on = 1;
    rc = uv_poll_start(&a->stdin_poll, UV_READABLE | UV_DISCONNECT, on_stdin);
    if (rc < 0) stdin_stop(a);
  }
  if (rc < 0)
    trun_warn("--watch-stdin: cannot watch stdin (%s; a file or /dev/null?): not tied to the launcher",
              uv_strerror(rc));
}

/* ---- multi-node end of round ---------------------------------------------------------------------- */

static void *watch_end(void *arg) {
  agent *a = arg;
  char k[512];
  int round = a->round;
  trun_rdzv_end_key(&a->rdzv, round, k, sizeof(k));
  trun_buf v = {0};
  for (;;) {
    int rc = trun_client_get(a->watch_client, trun_str(k), &v, 3600 * 1000);
    if (rc == -ETIMEDOUT) continue;
    size_t n = rc == 0 ? (v.len < sizeof(a->end_value) - 1 ? v.len : sizeof(a->end_value) - 1) : 0;
    if (rc == 0)
      memcpy(a->end_value, v.data, n);
    else
      snprintf(a->end_value, sizeof(a->end_value), "lost:%d", -rc);
    if (rc == 0) {
      a->end_value[n] = '\0';
      /* Alive at the end of the round: node rank 0's job-wide report tells lost nodes from the others. */
      trun_rdzv_seen_end_key(&a->rdzv, round, a->rdzv.group_rank, k, sizeof(k));
      trun_client_set(a->watch_client, trun_str(k), trun_str("1"));
    }
    break;
  }
  trun_buf_free(&v);
  a->end_round = round;
  a->end_seen = 1;
  uv_async_send(&a->remote);
  return NULL;
}

static void on_remote(uv_async_t *h) {
  agent *a = h->data;
  /* A late wake-up from an earlier round's watcher, or the round is over (agent_main reads end_value). */
  if (!a->in_round || !a->end_seen || a->end_round != a->round) return;
  if (strncmp(a->end_value, "fail:", 5) == 0 && !a->phase_stopping) {
    trun_warn("node %s failed: stopping this node's workers to restart together", a->end_value + 5);
    a->result = OUT_REMOTE_FAILED;
    begin_stop(a, SIGTERM, 1);
  } else if (strncmp(a->end_value, "member:", 7) == 0 && !a->phase_stopping) {
    trun_info("the job's membership changes (%s): restarting the workers into a new world", a->end_value + 7);
    a->result = OUT_MEMBERSHIP;
    begin_stop(a, SIGTERM, 1);
  } else if (strncmp(a->end_value, "lost:", 5) == 0 && !a->phase_stopping) {
    trun_error("lost the rendezvous store (%s): stopping the workers", strerror(atoi(a->end_value + 5)));
    a->result = OUT_REMOTE_FAILED;
    begin_stop(a, SIGTERM, 1);
  }
  maybe_finish(a);
}

/* ---- c10d membership ------------------------------------------------------------------------------ */

/* torchrun's monitor step for a healthy group: keep the heartbeat fresh; nodes in the wait list mean a new
 * world, so the workers stop and every agent joins the next round (not counted as a restart). */
static void on_member_tick(uv_timer_t *t) {
  agent *a = t->data;
  if (a->phase_stopping || a->running == 0) return;
  if (a->rdzv.fast) {
    /* trun's backend: a lost node ends the round in the store; the end watcher stops the workers. */
    trun_rdzv_fast_tick(&a->rdzv);
    return;
  }
  int waiting = trun_rdzv_c10d_tick(&a->rdzv);
  if (waiting <= 0 || a->phase_stopping || a->result != OUT_NONE) return;
  int fresh = trun_rdzv_c10d_new_waiting(&a->rdzv, 0);
  if (fresh > 0) {
    trun_info("%d new node(s) wait to join the c10d rendezvous: restarting the workers into a new world",
              fresh);
    a->result = OUT_MEMBERSHIP;
    trun_obs_membership(a->obs, fresh);
  } else {
    /* Only peers of this round wait: one of them restarted after a failure (see membership_or_failure). */
    trun_warn("%d node(s) of this round left it to rejoin (a failure there): restarting the workers",
              waiting);
    a->result = OUT_REMOTE_FAILED;
  }
  begin_stop(a, SIGTERM, 1);
}

/* A c10d round ended by a worker failure: if new nodes wait to join, another agent saw them first and
 * stopped its workers, which broke ours (their collective lost a peer). That is the membership change, not
 * a failure: torchrun would spend a restart on it when its monitor sees the failure before the wait list;
 * trun checks the wait list first, so joining never costs a restart. Only nodes that were not in this
 * round count: a peer of this round in the wait list restarted after a failure, which every node counts,
 * so that all agents keep one restart count (torch <= 2.5 workers prefix their store keys with it). */
static void membership_or_failure(agent *a) {
  int fresh = trun_rdzv_c10d_new_waiting(&a->rdzv, 1);
  if (fresh <= 0) return;
  trun_info(
      "a worker failed while %d new node(s) wait to join the c10d rendezvous: taking it as the "
      "membership change (not counted as a restart)",
      fresh);
  a->result = OUT_MEMBERSHIP;
  trun_obs_membership(a->obs, fresh);
}

/* ---- workers ------------------------------------------------------------------------------------- */

/* --stall-timeout: a worker showed no sign of life (and got --stall-signal and its grace): tear the round
 * down like a failure of that worker, so that it counts as a restart and the report names it. */
static void on_stall(void *arg, int local_rank, double idle_s, int sig, int stop) {
  agent *a = arg;
  worker *w = &a->w[local_rank];
  if (!stop) {
    /* Found: recorded now, so that the report names the stall even if the signal ends the worker. */
    w->stalled_s = idle_s;
    trun_obs_stall(a->obs, w->pid, a->rdzv.base_rank + local_rank, local_rank, idle_s, sig);
    return;
  }
  if (a->phase_stopping || !w->running) return;
  trun_error("rank %d (local %d, pid %d) stalled for %.0f s (no output, no CPU time): restarting the workers",
             a->rdzv.base_rank + local_rank, local_rank, (int)w->pid, idle_s);
  a->result = OUT_FAILED;
  a->first_failed = local_rank;
  begin_stop(a, SIGTERM, 1);
  w->torn_down = 0; /* the root cause, not a bystander */
}

/* One attempt: start every local worker and supervise them until the round ends. */
static void run_round(agent *a) {
  char attempt_dir[PATH_MAX] = "";
  a->result = OUT_NONE;
  a->first_failed = -1;
  a->phase_stopping = 0;
  a->end_seen = 0;
  a->end_value[0] = '\0';
  memset(a->w, 0, sizeof(worker) * (size_t)a->nproc);
  if (!a->files_off &&
      trun__agent_pathf(attempt_dir, sizeof(attempt_dir), "%s/attempt_%d", a->run_dir, a->restart_count) < 0)
    a->files_off = 1;
  if (a->watch_client) {
    a->watcher_on = pthread_create(&a->watcher, NULL, watch_end, a) == 0;
    if (!a->watcher_on) trun_warn("cannot start the failure watcher; other nodes' failures go unnoticed");
  }
  trun_stall_begin(a->stall, a->nproc);
  for (int i = 0; i < a->nproc; i++) {
    a->w[i].a = a;
    a->w[i].local_rank = i;
    if (trun__agent_start_worker(a, &a->w[i], attempt_dir) < 0) {
      a->w[i].status = 127;
      a->w[i].exit_time = trun__agent_now();
      a->result = OUT_FAILED;
      a->first_failed = i;
      begin_stop(a, SIGTERM, 1);
      break;
    }
  }
  trun_debug("round %d: started %d workers (ranks %d-%d of %d)", a->round, a->nproc, a->rdzv.base_rank,
             a->rdzv.base_rank + a->nproc - 1, a->rdzv.world_size);
  a->in_round = 1;
  if (a->rdzv.dynamic || a->rdzv.fast) {
    uint64_t every = (uint64_t)(a->cfg->monitor_interval * 1000);
    if (a->rdzv.fast) every = (uint64_t)(trun_rdzv_conf_seconds(a->cfg, "keep_alive_interval", 5) * 1000);
    uv_timer_start(&a->member_timer, on_member_tick, every < 100 ? 100 : every, every < 100 ? 100 : every);
  }
  maybe_finish(a); /* a worker may have failed to start */
  trun_nccl_report *rep = trun_nccl_report_start(a->cfg, a->env, a->files_off ? NULL : attempt_dir);
  uv_run(a->loop, UV_RUN_DEFAULT);
  trun_nccl_report_finish(rep);
  uv_timer_stop(&a->member_timer);
  trun_stall_end(a->stall);
  a->in_round = 0;
}

/* ---- life cycle ---------------------------------------------------------------------------------- */

static int setup_signals(agent *a) {
  int rc = uv_signal_init(a->loop, &a->sigchld);
  if (rc == 0) rc = uv_signal_start(&a->sigchld, on_sigchld, SIGCHLD);
  a->sigchld.data = a;
  for (int i = 0; rc == 0 && i < a->cfg->nsignals; i++) {
    rc = uv_signal_init(a->loop, &a->sigs[i]);
    if (rc == 0) rc = uv_signal_start(&a->sigs[i], on_signal, a->cfg->signals[i]);
    a->sigs[i].data = a;
    a->nsigs = i + 1;
  }
  signal(SIGPIPE, SIG_IGN);
  return rc;
}

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void teardown(agent *a) {
  for (int i = 0; i < a->nproc; i++) {
    if (a->w[i].out) trun_stream_close(a->w[i].out);
    if (a->w[i].err) trun_stream_close(a->w[i].err);
    a->w[i].out = a->w[i].err = NULL;
  }
  close_handle((uv_handle_t *)&a->sigchld);
  for (int i = 0; i < a->nsigs; i++) close_handle((uv_handle_t *)&a->sigs[i]);
  stdin_stop(a);
  close_handle((uv_handle_t *)&a->kill_timer);
  close_handle((uv_handle_t *)&a->drain_timer);
  close_handle((uv_handle_t *)&a->member_timer);
  close_handle((uv_handle_t *)&a->remote);
  uv_run(a->loop, UV_RUN_DEFAULT);
  uv_loop_close(a->loop);
}

static void close_streams(agent *a) {
  for (int i = 0; i < a->nproc; i++) {
    if (a->w[i].out) trun_stream_close(a->w[i].out);
    if (a->w[i].err) trun_stream_close(a->w[i].err);
    a->w[i].out = a->w[i].err = NULL;
  }
  a->open_streams = 0;
}

/* Joins the end-of-round watcher. The end key is set by now (by this node or another), so the thread
 * returns; if the store is unreachable it returns with an error. A bounded join guards the rest. */
static void join_watcher(agent *a) {
  if (!a->watcher_on) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 15;
  if (pthread_timedjoin_np(a->watcher, NULL, &ts) != 0) {
    trun_warn("the end-of-round watcher did not finish; cutting its store connection");
    shutdown(trun_client_fd(a->watch_client), SHUT_RDWR);
    pthread_join(a->watcher, NULL);
  }
  a->watcher_on = 0;
  if (!a->end_seen || strncmp(a->end_value, "lost:", 5) == 0) {
    /* The watch connection is gone: the next round, if any, opens a new one (reconnect_watch). */
    trun_client_close(a->watch_client);
    a->watch_client = NULL;
    a->watch_lost = 1;
  }
}

/* Before a round after the watch connection was lost: open a new one (not when no round follows, so that
 * an agent whose store host died exits at once instead of waiting for the store to come back). */
static void reconnect_watch(agent *a) {
  if (!a->watch_lost) return;
  a->watch_lost = 0;
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = a->rdzv.host ? "127.0.0.1" : a->cfg->endpoint_host;
  o.port = a->rdzv.master_port;
  o.key_prefix = "";
  o.connect_timeout_ms = 60000;
  if (trun_client_connect(&o, &a->watch_client) < 0) a->watch_client = NULL;
}

/* Multi-node end of a round: tell the others how this node ended, learn how the job's round ended. */
static void end_round_multinode(agent *a) {
  if (a->result == OUT_SUCCESS) {
    /* This node is done; the round is done when every node is, or when one failed. */
    char k[512];
    trun_rdzv_announce_success(&a->rdzv, a->round);
    trun_rdzv_end_key(&a->rdzv, a->round, k, sizeof(k));
    int rc = trun_rdzv_wait_key(&a->rdzv, k, 7 * 24 * 3600 * 1000);
    if (rc == -EINTR)
      a->result = OUT_SIGNALED;
    else if (rc < 0)
      a->result = OUT_REMOTE_FAILED, snprintf(a->end_value, sizeof(a->end_value), "lost:%d", -rc);
  }
  if (a->result == OUT_FAILED || a->result == OUT_SIGNALED) trun__agent_announce_failure(a);
  join_watcher(a);
  /* The end key holds the first announcement: "member:" before our "fail:" means the membership change
   * came first and stopped a peer, which is what broke our workers (not counted as a restart). */
  if (strncmp(a->end_value, "member:", 7) == 0 && a->result != OUT_SIGNALED) a->result = OUT_MEMBERSHIP;
  if (a->result == OUT_SUCCESS && strncmp(a->end_value, "ok", 2) != 0) a->result = OUT_REMOTE_FAILED;
}

/* While the agent waits on the store: let the loop run signal handlers; stop waiting after a stop signal. */
static int poll_signals(void *arg) {
  agent *a = arg;
  uv_run(a->loop, UV_RUN_NOWAIT);
  return a->signal_seen != 0;
}

static int agent_main(agent *a) {
  char err[512];
  int omp_forced = 0;
  if ((a->node = calloc(1, sizeof(*a->node))) != NULL &&
      trun_discover_node(a->node, a->env, trun_agent_discover_flags(a->cfg), a->cfg->no_imds, err,
                         sizeof(err)) < 0)
    trun_warn("GPU discovery: %s; deciding the NCCL environment from the GPUs found before it", err);
  a->env = trun_agent_env(a->env, a->cfg, a->nproc, a->node, &omp_forced);
  if (a->env == NULL) {
    trun_error("out of memory copying the environment");
    return 1;
  }
  if (omp_forced)
    fprintf(stderr,
            "*****************************************\n"
            "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
            "your system being overloaded, please further tune the variable for optimal performance in "
            "your application as needed. \n"
            "*****************************************\n");
  int rc = make_run_dir(a);
  if (rc < 0) {
    trun_error("cannot create the log directory under %s: %s; pass a writable --log-dir",
               a->cfg->log_dir ? a->cfg->log_dir : "/tmp", strerror(-rc));
    return 1;
  }
  a->rdzv.poll = poll_signals;
  a->rdzv.poll_arg = a;
  trun_obs_discovery(a->obs, a->nproc, a->env, a->node);
  trun_stall_use_gpus(a->stall, a->node);
  if (trun_rdzv_init(&a->rdzv, a->cfg, a->nproc, err, sizeof(err)) < 0) {
    trun_error("%s", err);
    return 1;
  }
  trun_obs_set_rdzv(a->obs, &a->rdzv);
  if (!a->rdzv.dynamic && (a->rdzv.group_world_size > 1 || a->rdzv.fast)) {
    trun_client_opts o;
    trun_client_opts_default(&o);
    o.host = a->rdzv.host ? "127.0.0.1" : a->cfg->endpoint_host;
    o.port = a->rdzv.master_port;
    o.key_prefix = "";
    if (trun_client_connect(&o, &a->watch_client) < 0) {
      trun_error("cannot open the failure-watch connection to %s:%d", o.host, o.port);
      return 1;
    }
  }
  int remaining = a->cfg->max_restarts;
  int code = 1;
  for (a->round = 0;; a->round++) {
    trun_obs_rdzv_start(a->obs, a->round);
    if (trun_store_acl_publish(&a->rdzv, a->round) < 0)
      trun_debug("could not publish this node's address for --store-allow-peers");
    if (trun_rdzv_round(&a->rdzv, a->round, err, sizeof(err)) < 0 ||
        (a->cfg->store_allow_peers && trun_store_acl_apply(&a->rdzv, a->round, err, sizeof(err)) < 0)) {
      trun_obs_rdzv_end(a->obs, a->round, err);
      trun_error("%s", err);
      code = 1;
      break;
    }
    if (a->rdzv.fast) a->round = a->rdzv.round_no; /* the store decides trun rounds */
    reconnect_watch(a);
    trun_obs_rdzv_end(a->obs, a->round, NULL);
    /* Split pods / GPU clash (agent/doctor.h); --preflight on the first round (agent/preflight.h). */
    trun_doctor_outcome doc;
    int stop = trun_doctor_round(&a->rdzv, a->env, a->round, a->node, &doc);
    trun_obs_doctor(a->obs, a->round, &doc);
    if (!stop && a->cfg->preflight && a->round == 0) {
      trun_pf_outcome pf;
      stop = trun_preflight_agent(a->env, a->cfg, &a->rdzv, a->nproc, a->round, a->restart_count, &pf);
      trun_obs_preflight(a->obs, a->round, &pf);
    }
    if (stop) {
      code = 1;
      break;
    }
    run_round(a);
    close_streams(a);
    kill_groups(a, SIGKILL); /* whatever the workers left in their process groups */
    if (!a->rdzv.dynamic && (a->rdzv.group_world_size > 1 || a->rdzv.fast)) end_round_multinode(a);
    if (a->result == OUT_FAILED && a->rdzv.dynamic) membership_or_failure(a);
    if (a->result == OUT_MEMBERSHIP) continue; /* same attempt number, like torchrun */
    if (a->result == OUT_SUCCESS) {
      code = 0;
      break;
    }
    if (a->result == OUT_SIGNALED) {
      trun__agent_report_failures(a, 0);
      code = 1;
      break;
    }
    int final = remaining == 0;
    trun__agent_report_failures(a, final);
    if (final) {
      code = 1;
      break;
    }
    remaining--;
    a->restart_count++;
    trun_warn("restarting the workers (attempt %d, %d restart(s) left)", a->restart_count, remaining);
    trun_obs_restart(a->obs, a->restart_count, remaining);
  }
  if (a->rdzv.dynamic) {
    /* torchrun: the exit barrier after success (1.13: also after the last failure), then shutdown()
     * closes the rendezvous unless the agent was stopped by a signal. */
    if (a->rdzv.client && (code == 0 || (a->rdzv.gen113 && a->result != OUT_SIGNALED)))
      trun_rdzv_c10d_exit_barrier(&a->rdzv, 300000);
    if (a->rdzv.client && a->result != OUT_SIGNALED) trun_rdzv_c10d_shutdown(&a->rdzv);
  } else if (a->rdzv.client) {
    /* After a failure (not a signal: then every node is being stopped) wait for node rank 0's report. */
    trun_rdzv_leave(&a->rdzv, a->round, code == 0 ? 300000 : 5000, code == 0 || a->signal_seen ? 0 : 15000);
    if (a->rdzv.fast && code == 0) trun_rdzv_fast_shutdown(&a->rdzv);
  }
  return code;
}

/* The stores the agent hosts take one descriptor per connection: the soft open-file limit goes up to the
 * hard one (a common soft limit of 1024 is used up by a thousand idle peers), the stores stop accepting
 * TRUN_STORE_FD_RESERVE short of it (agent/store_acl.h), and workers get the limit trun was started with. */
static void raise_nofile(agent *a) {
  if (getrlimit(RLIMIT_NOFILE, &a->nofile) < 0) {
    trun_debug("getrlimit(RLIMIT_NOFILE): %s; the open-file limit stays as it is", strerror(errno));
    return;
  }
  if (a->nofile.rlim_cur >= a->nofile.rlim_max) return;
  struct rlimit up = {a->nofile.rlim_max, a->nofile.rlim_max};
  if (setrlimit(RLIMIT_NOFILE, &up) < 0) {
    trun_debug("setrlimit(RLIMIT_NOFILE, %llu): %s; the open-file limit stays %llu",
               (unsigned long long)up.rlim_cur, strerror(errno), (unsigned long long)a->nofile.rlim_cur);
    return;
  }
  a->nofile_raised = 1;
}

int trun_agent_run(const trun_config *cfg, char **envp) {
  agent a;
  memset(&a, 0, sizeof(a));
  a.cfg = cfg;
  a.env = envp;
  char err[256];
  if (trun_rdzv_conf_check(cfg, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  if (trun_nproc_resolve(cfg->nproc_spec, &a.nproc, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  trun_fqdn(a.host, sizeof(a.host));
  raise_nofile(&a);
  a.w = calloc((size_t)a.nproc, sizeof(worker));
  a.loop = malloc(sizeof(uv_loop_t));
  int lrc = a.w && a.loop ? uv_loop_init(a.loop) : UV_ENOMEM;
  if (lrc < 0) {
    trun_error("cannot start the agent: %s: %s", a.w && a.loop ? "uv_loop_init" : "calloc/malloc",
               uv_strerror(lrc));
    free(a.w);
    free(a.loop);
    return 1;
  }
  /* Orphans of our workers come back to us (we reap them); as PID 1 that is already so. */
  if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
    trun_warn("prctl(PR_SET_CHILD_SUBREAPER): %s; orphaned grandchildren go to init", strerror(errno));
  if (trun_watchdog_start(&a.guard) < 0)
    trun_warn(
        "cannot start the guard process: workers are still killed with the agent (PDEATHSIG), "
        "their own children may not be");
  uv_timer_init(a.loop, &a.kill_timer);
  uv_timer_init(a.loop, &a.drain_timer);
  uv_timer_init(a.loop, &a.member_timer);
  a.kill_timer.data = a.drain_timer.data = a.member_timer.data = &a;
  uv_async_init(a.loop, &a.remote, on_remote);
  a.remote.data = &a;
  if (setup_signals(&a) < 0) {
    trun_error("cannot install signal handlers");
    return 1;
  }
  if (cfg->watch_stdin) watch_stdin(&a);
  if (trun_obs_open(cfg, a.loop, a.host, &a.obs, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s\n", err);
    return 2;
  }
  a.stall = trun_stall_new(a.loop, cfg->stall_timeout, cfg->stall_signal, on_stall, &a);
  char **orig_env = a.env;
  int code = agent_main(&a);
  join_watcher(&a);
  if (a.watch_client) trun_client_close(a.watch_client);
  trun_obs_close(a.obs, code);
  trun_stall_close(a.stall);
  trun_rdzv_close(&a.rdzv);
  teardown(&a);
  trun_watchdog_stop(&a.guard);
  if (a.env != orig_env) trun_strv_free(a.env);
  free(a.w);
  free(a.node);
  free(a.loop);
  return code;
}

int trun_agent_dry_run(const trun_config *cfg, char **envp, FILE *out) {
  char err[256];
  int nproc;
  if (trun_nproc_resolve(cfg->nproc_spec, &nproc, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  trun_rdzv r;
  memset(&r, 0, sizeof(r));
  r.cfg = cfg;
  r.nproc = nproc;
  int standalone = cfg->standalone || cfg->endpoint_port == 0;
  r.group_rank = standalone ? 0 : cfg->node_rank;
  r.group_world_size = standalone ? 1 : cfg->max_nodes;
  r.base_rank = r.role_base_rank = r.group_rank * nproc;
  r.world_size = r.role_world_size = r.group_world_size * nproc;
  if (cfg->local_addr)
    snprintf(r.host_addr, sizeof(r.host_addr), "%s", cfg->local_addr);
  else
    trun_fqdn(r.host_addr, sizeof(r.host_addr));
  snprintf(r.master_addr, sizeof(r.master_addr), "%s", standalone ? r.host_addr : cfg->endpoint_host);
  r.master_port = cfg->endpoint_port;
  int omp_forced;
  char **base = trun_agent_env(envp, cfg, nproc, NULL, &omp_forced);
  fprintf(out, "trun --dry-run: nothing is started\n");
  fprintf(out, "nodes: %d (this node: group rank %d)  rendezvous: %s at %s:%s  run id: %s\n",
          r.group_world_size, r.group_rank, cfg->backend == TRUN_RDZV_STATIC ? "static" : "c10d",
          cfg->endpoint_host,
          r.master_port == 0 ? "<free port>" : (snprintf(err, sizeof(err), "%d", r.master_port), err),
          cfg->run_id);
  fprintf(out, "workers on this node: %d (global ranks %d-%d of %d%s)\n", nproc, r.base_rank,
          r.base_rank + nproc - 1, r.world_size,
          r.group_world_size > 1 ? ", assuming every node runs the same count" : "");
  fprintf(out, "restarts: %d  stop grace: %.0f s  signals: %s\n", cfg->max_restarts, cfg->shutdown_timeout,
          cfg->signals_text);
  static const char *const shown[] = {"LOCAL_RANK",
                                      "RANK",
                                      "GROUP_RANK",
                                      "ROLE_RANK",
                                      "ROLE_NAME",
                                      "LOCAL_WORLD_SIZE",
                                      "WORLD_SIZE",
                                      "GROUP_WORLD_SIZE",
                                      "ROLE_WORLD_SIZE",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "TORCHELASTIC_RESTART_COUNT",
                                      "TORCHELASTIC_MAX_RESTARTS",
                                      "TORCHELASTIC_RUN_ID",
                                      "TORCHELASTIC_USE_AGENT_STORE",
                                      "TORCHELASTIC_ERROR_FILE",
                                      "TORCHELASTIC_SIGNALS_TO_HANDLE",
                                      "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                      "OMP_NUM_THREADS",
                                      "CUDA_VISIBLE_DEVICES"};
  int code = 0;
  for (int lr = 0; base && lr < nproc; lr++) {
    char ef[PATH_MAX];
    snprintf(ef, sizeof(ef), "<log dir>/attempt_0/%d/error.json", lr);
    char **env = trun_worker_envp(base, cfg, &r, lr, 0,
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
    for (size_t i = 0; i < sizeof(shown) / sizeof(shown[0]); i++) {
      const char *v = trun_strv_getenv(env, shown[i]);
      if (v)
        fprintf(out, "  %s=%s\n", shown[i],
                strcmp(shown[i], "MASTER_PORT") == 0 && r.master_port == 0 ? "<free port>" : v);
    }
    trun_strv_free(argv);
    trun_strv_free(env);
  }
  fprintf(out, "(plus the rest of trun's environment, inherited unchanged)\n");
  trun_strv_free(base);
  return code;
}
