/* The run directory, and a worker's files, output streams and process (agent/agent_int.h): torchrun's log
 * layout
 * (<run dir>/attempt_N/<local rank>/{stdout,stderr}.log, error.json), --redirects / --tee /
 * --local-ranks-filter and the line prefix, then trun_spawn with the worker's environment. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/nccl/nccl.h"
#include "agent/proc/proc.h"
#include "agent_int.h"
#include "base/base.h"
#include "worker_env.h"

/* ---- the run directory and a worker's files --------------------------------------------------- */

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
int trun__agent_make_run_dir(agent *a) {
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
  int files = 0; /* -r / --tee without --log-dir: the files land in a fresh temporary directory; say where */
  for (int lr = 0; lr < a->nproc && !files; lr++)
    files = trun_config_redirects(a->cfg, lr) || trun_config_tee(a->cfg, lr);
  if (files && a->cfg->log_dir == NULL)
    trun_info(
        "the workers' --redirects / --tee logs go to %s/attempt_<N>/<local rank>/{stdout,stderr}.log "
        "(no --log-dir given)",
        a->run_dir);
  return 0;
}

/* ---- a worker's streams and process ----------------------------------------------------------- */

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
      snprintf(num, sizeof(num), "%d", trun_rdzv_info(a->rdzv)->base_rank + local_rank), val = num, skip = 7;
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
  trun_stream_on_eof(s, trun__round_stream_eof, a);
  a->stop.open_streams++;
  if (which == 1) {
    w->out = s;
  } else {
    w->err = s;
    trun_stream_keep_tail(s, &w->err_tail);
  }
  return 0;
}

int trun__agent_start_worker(agent *a, worker *w, const char *attempt_dir) {
  int lr = w->local_rank;
  char dir[PATH_MAX];
  w->error_file[0] = w->log_out[0] = w->log_err[0] = '\0';
  if (!a->files_off) {
    int rc = trun__agent_pathf(dir, sizeof(dir), "%s/%d", attempt_dir, lr);
    if (rc == 0) rc = trun__agent_mkdirs(dir);
    if (rc == 0) rc = trun__agent_pathf(w->error_file, sizeof(w->error_file), "%s/error.json", dir);
    if (rc == 0) rc = trun__agent_pathf(w->log_out, sizeof(w->log_out), "%s/stdout.log", dir);
    if (rc == 0) rc = trun__agent_pathf(w->log_err, sizeof(w->log_err), "%s/stderr.log", dir);
    if (rc < 0) {
      trun_error("cannot create %s/%d: %s; pass a shorter or writable --log-dir", attempt_dir, lr,
                 strerror(-rc));
      return -1;
    }
    unlink(w->error_file);
  }
  char **envp = trun_worker_envp(a->env, a->cfg, trun_rdzv_info(a->rdzv), a->nproc, lr,
                                 trun_rdzv_info(a->rdzv)->attempt, w->error_file);
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
    int src =
        trun__agent_warm_take(a, w, argv, envp, out_fd, err_fd) == 0 ? 0 : trun_spawn(&req, &w->pid, &what);
    if (src < 0 && w->pid <= 0) {
      trun_error("cannot start local rank %d (%s): %s failed: %s", lr, argv[0], what, strerror(-src));
    } else {
      if (src < 0) trun_error("local rank %d: %s '%s' failed: %s", lr, what, argv[0], strerror(-src));
      w->running = 1;
      a->stop.running++;
      w->start_us = (unsigned long long)trun_mono_us();
      /* Its memory cgroup's OOM kills so far: a hint beside the kernel's record (agent_failures.c). */
      w->memcg_ok =
          trun_memcg_of("", w->pid, &w->memcg) == 0 && trun_memcg_oom_kills(&w->memcg, &w->oom_base) == 0;
      trun_watchdog_add(&a->guard, w->pid);
      trun_obs_worker_start(a->obs, w->pid, trun_rdzv_info(a->rdzv)->base_rank + lr, lr,
                            trun_rdzv_info(a->rdzv)->attempt, w->ras);
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
