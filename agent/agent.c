#include "agent.h"

#include <errno.h>
#include <fcntl.h>
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

#include "doctor.h"
#include "log.h"
#include "nccl_env.h"
#include "nccl_report.h"
#include "obs.h"
#include "output.h"
#include "preflight.h"
#include "rdzv.h"
#include "report.h"
#include "spawn.h"
#include "stall.h"
#include "store_acl.h"
#include "watchdog.h"
#include "worker_env.h"

/* OUT_MEMBERSHIP: c10d nodes wait to join; the workers restart into a new world without using a restart. */
typedef enum {
  OUT_NONE = 0,
  OUT_SUCCESS,
  OUT_FAILED,
  OUT_SIGNALED,
  OUT_REMOTE_FAILED,
  OUT_MEMBERSHIP
} outcome;

typedef struct agent agent;

typedef struct {
  agent *a;
  int local_rank;
  pid_t pid;
  int running;
  int status; /* exit code, or -signal */
  double exit_time;
  int torn_down; /* stopped by the agent, not failed by itself */
  trun_stream *out, *err;
  char error_file[PATH_MAX];
  char log_out[PATH_MAX], log_err[PATH_MAX];
  double stalled_s; /* --stall-timeout found it stalled for this long (0: not) */
} worker;

struct agent {
  const trun_config *cfg;
  uv_loop_t *loop;
  char **env; /* the agent's environment as workers inherit it */
  int nproc;
  worker *w;
  int running; /* workers not yet reaped */
  int open_streams;
  int phase_stopping;
  outcome result;
  int first_failed; /* local rank of the first failure, -1 */
  int watch_lost;   /* the failure-watch connection was lost: reconnect before the next round */
  int signal_seen;  /* the terminating signal the agent got, 0 */
  int restart_count;
  int round;
  trun_rdzv rdzv;
  trun_node *node; /* what discovery found, once per agent (GPUs in a short-lived child) */
  trun_watchdog guard;
  char run_dir[PATH_MAX];
  int files_off; /* --log-dir /dev/null */
  char host[256];
  uv_signal_t sigchld;
  uv_signal_t sigs[TRUN_MAX_SIGNALS];
  int nsigs;
  uv_timer_t kill_timer;
  uv_timer_t drain_timer;
  uv_timer_t member_timer; /* c10d: heartbeats and the wait list while the workers run */
  /* Multi-node: a thread waits for the round's end key on its own connection. */
  uv_async_t remote;
  pthread_t watcher;
  int watcher_on;
  trun_client *watch_client;
  char end_value[64];
  int end_seen;         /* the watcher delivered end_value (set by the watcher thread) */
  int end_round;        /* the round whose end the watcher delivered */
  int in_round;         /* workers of this round may still run: remote ends act only then */
  trun_obs *obs;        /* events and metrics (agent/obs.h) */
  trun_stall *stall;    /* --stall-timeout (agent/stall.h), NULL when off */
  struct rlimit nofile; /* RLIMIT_NOFILE trun was started with, given back to workers */
  int nofile_raised;    /* the agent raised its soft limit to the hard one */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* snprintf for paths: -ENAMETOOLONG instead of a silently cut path. */
static int pathf(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *out, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, len, fmt, ap);
  va_end(ap);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int mkdirs(const char *path) {
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
    int rc = mkdirs(base);
    if (rc < 0) return rc;
  }
  if (snprintf(a->run_dir, sizeof(a->run_dir), "%s/%s_XXXXXX", base, a->cfg->run_id) >=
      (int)sizeof(a->run_dir))
    return -ENAMETOOLONG;
  if (mkdtemp(a->run_dir) == NULL) return -errno;
  return 0;
}

/* ---- prefixes ------------------------------------------------------------------------------------ */

/* The console prefix of a tee'd line: torchrun's "[<role><local_rank>]:" or the template. */
static void line_prefix(const agent *a, int local_rank, char *out, size_t len) {
  const char *t = a->cfg->log_line_prefix;
  if (t == NULL) {
    snprintf(out, len, "[%s%d]:", a->cfg->role, local_rank);
    return;
  }
  size_t o = 0;
  out[0] = '\0';
  while (*t && o + 1 < len) {
    const char *val = NULL;
    char num[16];
    size_t skip = 0;
    if (strncmp(t, "${role_name}", 12) == 0)
      val = a->cfg->role, skip = 12;
    else if (strncmp(t, "${local_rank}", 13) == 0)
      snprintf(num, sizeof(num), "%d", local_rank), val = num, skip = 13;
    else if (strncmp(t, "${rank}", 7) == 0)
      snprintf(num, sizeof(num), "%d", a->rdzv.base_rank + local_rank), val = num, skip = 7;
    else if (strncmp(t, "${hostname}", 11) == 0)
      val = a->host, skip = 11;
    if (val) {
      int n = snprintf(out + o, len - o, "%s", val);
      o += n > 0 && (size_t)n < len - o ? (size_t)n : 0;
      t += skip;
    } else {
      out[o++] = *t++;
      out[o] = '\0';
    }
  }
}

/* ---- round end ----------------------------------------------------------------------------------- */

static void maybe_finish(agent *a);

static void on_stream_eof(void *arg) {
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
  w->exit_time = now_s();
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

static void on_signal(uv_signal_t *h, int sig) {
  agent *a = h->data;
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
    if (rc == 0) a->end_value[n] = '\0';
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

static int open_log(const char *path) { return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644); }

/* Sets up one stream (1 = stdout, 2 = stderr) of worker w: fd the child gets, or -1 to inherit. */
static int setup_stream(agent *a, worker *w, int which, const char *path, int *child_fd) {
  int lr = w->local_rank;
  int bit = which == 1 ? 1 : 2;
  int redirected = !a->files_off && (trun_config_redirects(a->cfg, lr) & bit);
  int teed = redirected && (trun_config_tee(a->cfg, lr) & bit);
  int shown = trun_config_console_shows(a->cfg, lr);
  *child_fd = -1;
  int file = -1;
  if (redirected && (file = open_log(path)) < 0) {
    trun_error("cannot create log file %s: %s; check --log-dir", path, strerror(errno));
    return -1;
  }
  if (redirected && !teed) {
    *child_fd = file; /* straight into the file, like torchrun */
    return 0;
  }
  int console = (!redirected || teed) && shown ? which : -1;
  if (console < 0 && file < 0) {
    *child_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    return *child_fd < 0 ? -1 : 0;
  }
  char prefix[512] = "";
  if (teed || a->cfg->log_line_prefix) line_prefix(a, lr, prefix, sizeof(prefix));
  trun_stream *s;
  int rc = trun_stream_open(a->loop, console, file, prefix, &s, child_fd);
  if (file >= 0) close(file);
  if (rc < 0) {
    trun_error("cannot create the output pipe of local rank %d: %s", lr, strerror(-rc));
    return -1;
  }
  trun_stream_on_eof(s, on_stream_eof, a);
  a->open_streams++;
  if (which == 1)
    w->out = s;
  else
    w->err = s;
  return 0;
}

static int start_worker(agent *a, worker *w, const char *attempt_dir) {
  int lr = w->local_rank;
  char dir[PATH_MAX];
  w->error_file[0] = w->log_out[0] = w->log_err[0] = '\0';
  if (!a->files_off) {
    int rc = pathf(dir, sizeof(dir), "%s/%d", attempt_dir, lr);
    if (rc == 0) rc = mkdirs(dir);
    if (rc == 0) rc = pathf(w->error_file, sizeof(w->error_file), "%s/error.json", dir);
    if (rc == 0) rc = pathf(w->log_out, sizeof(w->log_out), "%s/stdout.log", dir);
    if (rc == 0) rc = pathf(w->log_err, sizeof(w->log_err), "%s/stderr.log", dir);
    if (rc < 0) {
      trun_error("cannot create %s/%d: %s; pass a shorter or writable --log-dir", attempt_dir, lr,
                 strerror(-rc));
      return -1;
    }
    unlink(w->error_file);
  }
  char **envp = trun_worker_envp(a->env, a->cfg, &a->rdzv, lr, a->restart_count, w->error_file);
  if (envp && a->cfg->nccl_report && !a->files_off && trun_nccl_report_env(&envp, dir) < 0)
    trun_strv_free(envp), envp = NULL;
  char **argv = envp ? trun_worker_argv(a->cfg, envp, lr) : NULL;
  if (argv == NULL) {
    trun_error(
        "cannot build local rank %d's environment (%s)", lr,
        a->cfg->virtual_local_rank ? "CUDA_VISIBLE_DEVICES has fewer entries than workers" : "out of memory");
    trun_strv_free(envp);
    return -1;
  }
  int out_fd = -1, err_fd = -1, rc = -1;
  if (setup_stream(a, w, 1, w->log_out, &out_fd) == 0 && setup_stream(a, w, 2, w->log_err, &err_fd) == 0) {
    trun_spawn_req req = {.argv = argv,
                          .envp = envp,
                          .stdout_fd = out_fd,
                          .stderr_fd = err_fd,
                          .cpus = trun_worker_cpus(envp),
                          .nofile = a->nofile_raised ? &a->nofile : NULL};
    const char *what = "";
    int src = trun_spawn(&req, &w->pid, &what);
    if (src < 0 && w->pid <= 0) {
      trun_error("cannot start local rank %d (%s): %s failed: %s", lr, argv[0], what, strerror(-src));
    } else {
      if (src < 0) trun_error("local rank %d: %s '%s' failed: %s", lr, what, argv[0], strerror(-src));
      w->running = 1;
      a->running++;
      trun_watchdog_add(&a->guard, w->pid);
      trun_obs_worker_start(a->obs, w->pid, a->rdzv.base_rank + lr, lr, a->restart_count);
      trun_stall_watch(a->stall, lr, w->pid, w->out, w->err, w->log_out, w->log_err);
      rc = 0;
    }
  }
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  trun_strv_free(argv);
  trun_strv_free(envp);
  return rc;
}

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
      pathf(attempt_dir, sizeof(attempt_dir), "%s/attempt_%d", a->run_dir, a->restart_count) < 0)
    a->files_off = 1;
  if (a->watch_client) {
    a->watcher_on = pthread_create(&a->watcher, NULL, watch_end, a) == 0;
    if (!a->watcher_on) trun_warn("cannot start the failure watcher; other nodes' failures go unnoticed");
  }
  trun_stall_begin(a->stall, a->nproc);
  for (int i = 0; i < a->nproc; i++) {
    a->w[i].a = a;
    a->w[i].local_rank = i;
    if (start_worker(a, &a->w[i], attempt_dir) < 0) {
      a->w[i].status = 127;
      a->w[i].exit_time = now_s();
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

/* ---- failures ------------------------------------------------------------------------------------ */

static size_t collect_failures(agent *a, trun_failure *fs) {
  size_t n = 0;
  for (int i = 0; i < a->nproc; i++) {
    worker *w = &a->w[i];
    if (w->status == 0) continue;
    trun_failure *f = &fs[n++];
    memset(f, 0, sizeof(*f));
    f->global_rank = a->rdzv.base_rank + i;
    f->local_rank = i;
    f->group_rank = a->rdzv.group_rank;
    f->pid = w->pid;
    f->exit_code = w->status;
    f->timestamp = w->exit_time;
    f->host = strdup(a->host);
    f->torn_down = w->torn_down && i != a->first_failed;
    if (w->log_err[0] && (trun_config_redirects(a->cfg, i) & 2)) f->log_path = strdup(w->log_err);
    if (w->error_file[0]) {
      int rc = trun_errfile_read(w->error_file, f);
      if (rc == -EBADMSG)
        trun_warn("rank %d's error file %s is not torchelastic JSON", f->global_rank, w->error_file);
    }
    if (w->stalled_s > 0) {
      char *msg = NULL;
      if (asprintf(&msg, "stalled for %.0f s (no output, no CPU time; --stall-timeout)%s%s", w->stalled_s,
                   f->message ? "; then: " : "", f->message ? f->message : "") >= 0) {
        free(f->message);
        f->message = msg;
      }
    }
  }
  return n;
}

static void report_failures(agent *a, int final) {
  trun_failure *fs = calloc((size_t)a->nproc + (size_t)a->rdzv.group_world_size, sizeof(*fs));
  if (fs == NULL) return;
  size_t n = collect_failures(a, fs);
  int root;
  if (final && a->result == OUT_REMOTE_FAILED && a->rdzv.group_rank != 0) {
    fprintf(stderr,
            "trun: node rank %d: workers stopped because %s; node rank 0 prints the job's failure report\n",
            a->rdzv.group_rank,
            a->rdzv.dynamic || strncmp(a->end_value, "fail:", 5) == 0 ? "another node failed"
                                                                      : "the store was lost");
    final = 0;
  }
  if (final && !a->rdzv.dynamic && a->rdzv.group_world_size > 1 && a->rdzv.group_rank == 0) {
    /* Job-wide: add the other nodes' root causes. */
    char **remote = NULL;
    int nr = 0;
    if (trun_rdzv_collect_failures(&a->rdzv, a->round, 5000, &remote, &nr) == 0) {
      for (int i = 0; i < nr; i++) {
        trun_failure f;
        memset(&f, 0, sizeof(f));
        if (trun_failure_from_json(remote[i], strlen(remote[i]), &f) == 0 &&
            f.group_rank != a->rdzv.group_rank)
          fs[n++] = f;
        else
          trun_failure_free(&f);
        free(remote[i]);
      }
      free(remote);
    }
  }
  trun_obs_failure(a->obs, fs, n, final);
  if (final && n > 0) {
    trun_report_print(stderr, a->cfg->script, fs, n);
    const char *parent = getenv("TORCHELASTIC_ERROR_FILE");
    root = trun_failure_root(fs, n);
    if (parent && parent[0] && root >= 0) trun_errfile_write_parent(parent, &fs[root]);
  }
  for (size_t i = 0; i < n; i++) trun_failure_free(&fs[i]);
  free(fs);
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

/* Publishes this node's failure (its root cause, or that the agent was stopped by a signal) and ends the
 * round for every node: "fail:<group rank>" in the round's end key. */
static void announce_failure(agent *a) {
  trun_failure *fs = calloc((size_t)a->nproc + 1, sizeof(*fs));
  if (fs == NULL) return;
  size_t n = collect_failures(a, fs);
  int root = trun_failure_root(fs, n);
  char *json = NULL;
  if (root >= 0 && !fs[root].torn_down) {
    json = trun_failure_to_json(&fs[root]);
  } else {
    trun_failure f;
    char name[32], msg[256];
    memset(&f, 0, sizeof(f));
    f.global_rank = a->rdzv.base_rank;
    f.local_rank = -1;
    f.group_rank = a->rdzv.group_rank;
    f.pid = getpid();
    f.exit_code = a->signal_seen ? -a->signal_seen : 1;
    f.timestamp = now_s();
    f.host = a->host;
    snprintf(msg, sizeof(msg), "the trun agent of node rank %d was stopped by %s", a->rdzv.group_rank,
             a->signal_seen ? trun_signal_name(a->signal_seen, name, sizeof(name)) : "an error");
    f.message = msg;
    json = trun_failure_to_json(&f);
  }
  if (trun_rdzv_announce_failure(&a->rdzv, a->round, json) < 0)
    trun_warn("could not tell the other nodes that this node failed (rendezvous store unreachable)");
  free(json);
  for (size_t i = 0; i < n; i++) trun_failure_free(&fs[i]);
  free(fs);
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
  if (a->result == OUT_FAILED || a->result == OUT_SIGNALED) announce_failure(a);
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
      report_failures(a, 0);
      code = 1;
      break;
    }
    int final = remaining == 0;
    report_failures(a, final);
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
    trun_rdzv_leave(&a->rdzv, a->round, code == 0 ? 300000 : 5000);
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
