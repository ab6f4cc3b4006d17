/* torch's flight recorder for the workers (agent/agent_int.h): the variables that make every NCCL worker keep
 * its last collectives and dump them on request, and a directory of this job's node for the dumps.
 *
 * Set for the workers, each only when trun's own environment does not name it (the user's value wins), and
 * only on a node with a GPU (a node without one runs no NCCL job) and a flight recorder the user did not turn
 * off (TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_FR_BUFFER_SIZE = 0):
 *   TORCH_NCCL_TRACE_BUFFER_SIZE=2000     entries kept per process (torch's own default since it turned on);
 *                                          a user's TORCH_FR_BUFFER_SIZE instead (the dump pipe reads this
 * name); for torch 2.11 and later TORCH_FR_BUFFER_SIZE=2000 instead (fr_new_names)
 * TORCH_NCCL_DUMP_ON_TIMEOUT=1          dump when torch's watchdog fires; and the heartbeat monitor looks at
 * the dump pipe every second instead of every 8 minutes TORCH_FR_DUMP_TEMP_FILE,
 * TORCH_NCCL_DEBUG_INFO_TEMP_FILE = <dir>/rank_   where rank R dumps (<dir>/rank_R; the second name is the
 * one torch 2.2 to 2.6 read) TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<dir>/rank_   torch makes the FIFO
 * <dir>/rank_R.pipe: a byte there dumps rank R and the job goes on (agent_hang.c writes it at a hang) <dir>:
 * <run dir>/flight_recorder (kept) with --log-dir, else a fresh ${TMPDIR:-/tmp}/trun_fr_<run id>_XXXXXX
 * removed at exit; mode 0700 either way. The list is trun__agent_fr_vars, for --dry-run and the docs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/hang/hang.h"
#include "agent_int.h"
#include "worker_env.h"

const char *const trun__agent_fr_vars[] = {"TORCH_NCCL_TRACE_BUFFER_SIZE",
                                           "TORCH_FR_BUFFER_SIZE",
                                           "TORCH_NCCL_DUMP_ON_TIMEOUT",
                                           "TORCH_FR_DUMP_TEMP_FILE",
                                           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                                           "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
                                           NULL};

/* torch 2.11 and later name the buffer size TORCH_FR_BUFFER_SIZE and warn on every rank when the old name
 * is set ("TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated"), and likewise for TORCH_NCCL_DEBUG_INFO_TEMP_FILE
 * (TORCH_FR_DUMP_TEMP_FILE); their dump pipe reads the new name (checked on 2.11:
 * bench/results/2026-11-29-h200x1-fr-names/). torch 2.8 to 2.10 know the new name too, but whether their
 * dump pipe does is not checked, so they, and a torch trun cannot find, get the old name, which every
 * torch's pipe reads. 1: the new name. */
static int fr_new_names(const trun_config *cfg, char *const *env) {
  int major = 0, minor = 0;
  char where[PATH_MAX];
  if (trun_worker_torch_version(cfg, env, &major, &minor, where, sizeof(where)) != 0) {
    trun_debug(
        "flight recorder: the workers' torch was not found by its files; its buffer size goes by the "
        "name every torch reads (TORCH_NCCL_TRACE_BUFFER_SIZE)");
    return 0;
  }
  int fresh = major > 2 || (major == 2 && minor >= 11);
  trun_debug("flight recorder: the workers' torch is %d.%d (%s): its buffer size goes by the name %s", major,
             minor, where, fresh ? "TORCH_FR_BUFFER_SIZE" : "TORCH_NCCL_TRACE_BUFFER_SIZE");
  return fresh;
}

/* 1 when the user turned the flight recorder off (a buffer size of 0). */
static int fr_off(char *const *env) {
  const char *n = trun_env_get(env, "TORCH_FR_BUFFER_SIZE");
  if (n == NULL) n = trun_env_get(env, "TORCH_NCCL_TRACE_BUFFER_SIZE");
  return n != NULL && strtol(n, NULL, 10) <= 0;
}

int trun__agent_fr_env(char ***env, int ngpu, const char *dir, const trun_config *cfg) {
  if (ngpu <= 0 || fr_off(*env)) return 0;
  char prefix[PATH_MAX];
  if (snprintf(prefix, sizeof(prefix), "%s/rank_", dir) >= (int)sizeof(prefix)) return -ENAMETOOLONG;
  int user_file =
      trun_env_get(*env, "TORCH_FR_DUMP_TEMP_FILE") || trun_env_get(*env, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
  const char *fr_size = trun_env_get(*env, "TORCH_FR_BUFFER_SIZE");
  int fresh = fr_new_names(cfg, *env), old_set = trun_env_get(*env, "TORCH_NCCL_TRACE_BUFFER_SIZE") != NULL;
  struct {
    const char *name, *value;
    int keep;
  } set[] = {
      /* an older torch's dump pipe reads the old name only: a user's TORCH_FR_BUFFER_SIZE is copied into it
       */
      {"TORCH_NCCL_TRACE_BUFFER_SIZE", fr_size ? fr_size : "2000", fresh},
      {"TORCH_FR_BUFFER_SIZE", "2000", !fresh || old_set},
      {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1", 0},
      {"TORCH_FR_DUMP_TEMP_FILE", prefix, user_file},
      {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix, user_file || fresh}, /* torch 2.2 to 2.6; 2.11 warns */
      {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", prefix, 0},
  };
  for (size_t k = 0; k < sizeof(set) / sizeof(set[0]); k++)
    if (!set[k].keep && trun_env_get(*env, set[k].name) == NULL &&
        trun_strv_setenv(env, set[k].name, set[k].value) < 0)
      return -ENOMEM;
  return 0;
}

int trun__agent_fr_open(agent *a) {
  a->fr.dir[0] = '\0';
  if (a->node == NULL || a->node->ngpu <= 0 || fr_off(a->env)) return 0;
  if (a->cfg->log_dir && !a->files_off) {
    if (snprintf(a->fr.dir, sizeof(a->fr.dir), "%s/flight_recorder", a->run_dir) >= (int)sizeof(a->fr.dir) ||
        mkdir(a->fr.dir, 0700) < 0) {
      trun_warn("flight recorder: cannot create %s: %s; the workers' dumps stay where torch puts them",
                a->fr.dir, strerror(errno));
      a->fr.dir[0] = '\0';
      return 0;
    }
  } else {
    const char *t = getenv("TMPDIR");
    if (snprintf(a->fr.dir, sizeof(a->fr.dir), "%s/trun_fr_%s_XXXXXX", t && t[0] ? t : "/tmp",
                 a->cfg->run_id) >= (int)sizeof(a->fr.dir) ||
        mkdtemp(a->fr.dir) == NULL) {
      trun_warn(
          "flight recorder: cannot create a directory under %s: %s; the workers' dumps stay where torch "
          "puts them",
          t && t[0] ? t : "/tmp", strerror(errno));
      a->fr.dir[0] = '\0';
      return 0;
    }
    a->fr.remove = 1;
  }
  if (trun__agent_fr_env(&a->env, a->node->ngpu, a->fr.dir, a->cfg) < 0) return -1;
  trun_debug("flight recorder: the workers dump to %s/rank_<rank> (pipe %s/rank_<rank>.pipe)", a->fr.dir,
             a->fr.dir);
  return 0;
}

void trun__agent_fr_close(agent *a) {
  if (!a->fr.remove || a->fr.dir[0] == '\0') return;
  a->fr.remove = 0;
  int dfd = open(a->fr.dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (d == NULL) {
    if (dfd >= 0) close(dfd);
    trun_debug("flight recorder: %s: %s (not removed)", a->fr.dir, strerror(errno));
    return;
  }
  for (struct dirent *e; (e = readdir(d)) != NULL;) /* what the workers left: dumps and FIFOs */
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && unlinkat(dfd, e->d_name, 0) < 0)
      trun_debug("flight recorder: %s/%s: %s (not removed)", a->fr.dir, e->d_name, strerror(errno));
  closedir(d);
  if (rmdir(a->fr.dir) < 0)
    trun_warn("flight recorder: cannot remove %s: %s; remove it by hand", a->fr.dir, strerror(errno));
}

size_t trun__agent_fr_ask(const char *dump_prefix, const char *pipe_prefix, int base_rank, int n, char *line,
                          size_t len) {
  line[0] = '\0';
  if (n <= 0 || dump_prefix[0] == '\0' || pipe_prefix[0] == '\0') return 0;
  if (n > TRUN_FR_MAX_RANKS) n = TRUN_FR_MAX_RANKS;
  trun_fr_rank *r = calloc((size_t)n, sizeof(*r));
  if (r == NULL) return 0;
  for (int i = 0; i < n; i++) r[i].rank = base_rank + i;
  size_t got = trun_fr_probe(dump_prefix, pipe_prefix, r, (size_t)n, TRUN__FR_PROBE_MS);
  if (got > 0) trun_fr_summarize(r, (size_t)n, line, len);
  trun_fr_ranks_clear(r, (size_t)n);
  free(r);
  return got;
}

/* ---- every rank in NCCL: equal counts frozen, the flight recorder asked twice ------------------------- */

void trun__agent_fr_spin_init(trun__fr_spin *s, char *const *env) {
  memset(s, 0, sizeof(*s));
  const char *w = trun_env_get(env, "TRUN_HANG_SPIN_WINDOW");
  double v = w ? strtod(w, NULL) : 0;
  s->window = v >= 2 && v <= 86400 ? v : TRUN__FR_SPIN_WINDOW_S;
  if (w && s->window != v)
    trun_warn("TRUN_HANG_SPIN_WINDOW=%s is not 2..86400 seconds: %.0f s is used", w, s->window);
  s->gap = s->window / 3 < 2 ? 2 : s->window / 3 > 30 ? 30 : s->window / 3;
}

static void spin_forget(trun__fr_spin *s) {
  trun_fr_ranks_clear(s->prev, s->nprev);
  free(s->prev);
  s->prev = NULL;
  s->nprev = 0;
  s->next = 0;
}

void trun__agent_fr_spin_free(trun__fr_spin *s) { spin_forget(s); }

int trun__agent_fr_spin_step(trun__fr_spin *s, double quiet, double now, const char *dump_prefix,
                             const char *pipe_prefix, int base_rank, int n, trun__fr_spin_verdict *out) {
  if (quiet < s->window || n <= 0 || !dump_prefix[0] || !pipe_prefix[0]) {
    spin_forget(s); /* counts moved or disagree (RAS's detector's case), or nothing to ask */
    return 0;
  }
  if (now < s->next) return 0;
  if (n > TRUN_FR_MAX_RANKS) n = TRUN_FR_MAX_RANKS;
  trun_fr_rank *cur = calloc((size_t)n, sizeof(*cur));
  if (cur == NULL) return 0;
  for (int i = 0; i < n; i++) cur[i].rank = base_rank + i;
  trun_fr_probe(dump_prefix, pipe_prefix, cur, (size_t)n, TRUN__FR_PROBE_MS);
  int hung = 0;
  if (s->prev && s->nprev == (size_t)n) {
    memset(out, 0, sizeof(*out));
    hung = trun_fr_spin(s->prev, cur, (size_t)n, out->culprit, &out->nculprit, out->line, sizeof(out->line));
    out->quiet = quiet;
  }
  trun_fr_ranks_clear(s->prev, s->nprev);
  free(s->prev);
  s->prev = cur, s->nprev = (size_t)n;
  s->next = now + s->gap;
  return hung;
}

/* The loop's side: names it once per round; with the culprit among this node's workers, --hang-timeout
 * seconds after it was named the round stops for it, as for a hang RAS names. */
void trun__agent_fr_spin_report(agent *a, const trun__fr_spin_verdict *v, int *named, int *acted) {
  const trun_config *cfg = a->cfg;
  int base = trun_rdzv_info(a->rdzv)->base_rank;
  worker *ours[TRUN_FR_SPIN_MAX];
  int nours = 0;
  char names[512] = "";
  size_t nn = 0;
  for (size_t k = 0; k < v->nculprit && nours < TRUN_FR_SPIN_MAX; k++) {
    int lr = v->culprit[k] - base;
    if (lr < 0 || lr >= a->nproc || a->w[lr].pid <= 0) continue;
    ours[nours++] = &a->w[lr];
    if (nn < sizeof(names))
      nn += (size_t)snprintf(names + nn, sizeof(names) - nn, "%srank %d (local %d, pid %d)", nn ? ", " : "",
                             v->culprit[k], lr, (int)a->w[lr].pid);
  }
  if (!*named) {
    *named = 1;
    char act[160];
    if (cfg->hang_timeout > 0)
      snprintf(act, sizeof(act), "restarting the workers in %.0f s unless it moves (--hang-timeout)",
               cfg->hang_timeout);
    else
      snprintf(act, sizeof(act), "not acted on (--hang-timeout 0)");
    if (nours > 0)
      trun_error(
          "hang: %s: every rank of this node is in a collective that does not complete, counts frozen "
          "for %.0f s: %s; %s",
          names, v->quiet, v->line, act);
    else
      trun_error(
          "hang: every rank of this node is in a collective that does not complete, counts frozen for "
          "%.0f s: %s; %s",
          v->quiet, v->line, act);
    char pub[1024];
    if (snprintf(pub, sizeof(pub),
                 "%s%severy rank of node rank %d in a collective that does not complete: %s; %s", names,
                 nours ? ": " : "", trun_rdzv_info(a->rdzv)->group_rank, v->line,
                 act) < 0) /* a line cut to what --rdzv-status shows is fine */
      pub[0] = '\0';
    trun_rdzv_publish_hang(a->rdzv, pub); /* for --rdzv-status */
    for (int i = 0; i < nours; i++)
      trun_obs_hang(a->obs, ours[i]->pid, base + ours[i]->local_rank, ours[i]->local_rank, "", "", 0,
                    v->quiet, v->line, v->line);
    if (nours == 0) trun_obs_hang(a->obs, 0, -1, -1, "", "", 0, v->quiet, v->line, v->line);
  }
  if (cfg->hang_timeout <= 0 || *acted || a->stop.stopping) return;
  if (v->quiet < v->named_quiet + cfg->hang_timeout) return;
  if (nours == 0) { /* no rank to blame: the whole round is stuck, and it is stopped all the same */
    for (int lr = 0; lr < a->nproc && nours < TRUN_FR_SPIN_MAX; lr++)
      if (a->w[lr].pid > 0 && a->w[lr].running) ours[nours++] = &a->w[lr];
    if (nours == 0) return;
    snprintf(names, sizeof(names), "every rank of this node (culprit unknown)");
  }
  *acted = 1;
  trun_error(
      "hang: %s still in a collective that does not complete after %.0f s (--hang-timeout): restarting "
      "the workers",
      names, cfg->hang_timeout);
  for (int i = 0; i < nours; i++)
    snprintf(ours[i]->hang, sizeof(ours[i]->hang),
             "hang (flight recorder): every rank of its node in a collective that does not complete, counts "
             "frozen for %.0f s: %s; stopped by --hang-timeout %.0f",
             v->quiet, v->line, cfg->hang_timeout);
  trun__round_stop(a, OUT_FAILED, ours[0]->local_rank, TRUN__CAUSE_HANG);
  for (int i = 0; i < nours; i++) ours[i]->torn_down = 0; /* root causes, not bystanders */
}
