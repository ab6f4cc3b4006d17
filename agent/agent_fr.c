/* torch's flight recorder for the workers (agent/agent_int.h): the variables that make every NCCL worker keep
 * its last collectives and dump them on request, and a directory of this job's node for the dumps.
 *
 * Set for the workers, each only when trun's own environment does not name it (the user's value wins), and
 * only on a node with a GPU (a node without one runs no NCCL job) and a flight recorder the user did not turn
 * off (TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_FR_BUFFER_SIZE = 0):
 *   TORCH_NCCL_TRACE_BUFFER_SIZE=2000     entries kept per process (torch's own default since it turned on);
 *                                          a user's TORCH_FR_BUFFER_SIZE instead (the dump pipe reads this
 * name) TORCH_NCCL_DUMP_ON_TIMEOUT=1          dump when torch's watchdog fires; and the heartbeat monitor
 * looks at the dump pipe every second instead of every 8 minutes TORCH_FR_DUMP_TEMP_FILE,
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

const char *const trun__agent_fr_vars[] = {
    "TORCH_NCCL_TRACE_BUFFER_SIZE",    "TORCH_NCCL_DUMP_ON_TIMEOUT",      "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", NULL};

/* 1 when the user turned the flight recorder off (a buffer size of 0). */
static int fr_off(char *const *env) {
  const char *n = trun_env_get(env, "TORCH_FR_BUFFER_SIZE");
  if (n == NULL) n = trun_env_get(env, "TORCH_NCCL_TRACE_BUFFER_SIZE");
  return n != NULL && strtol(n, NULL, 10) <= 0;
}

int trun__agent_fr_env(char ***env, int ngpu, const char *dir) {
  if (ngpu <= 0 || fr_off(*env)) return 0;
  char prefix[PATH_MAX];
  if (snprintf(prefix, sizeof(prefix), "%s/rank_", dir) >= (int)sizeof(prefix)) return -ENAMETOOLONG;
  int user_file =
      trun_env_get(*env, "TORCH_FR_DUMP_TEMP_FILE") || trun_env_get(*env, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
  const char *fr_size = trun_env_get(*env, "TORCH_FR_BUFFER_SIZE");
  struct {
    const char *name, *value;
    int keep;
  } set[] = {
      /* torch's dump pipe reads this name only: a user's TORCH_FR_BUFFER_SIZE is copied into it */
      {"TORCH_NCCL_TRACE_BUFFER_SIZE", fr_size ? fr_size : "2000", 0},
      {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1", 0},
      {"TORCH_FR_DUMP_TEMP_FILE", prefix, user_file},
      {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix, user_file},
      {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", prefix, 0},
  };
  for (size_t k = 0; k < sizeof(set) / sizeof(set[0]); k++)
    if (!set[k].keep && trun_env_get(*env, set[k].name) == NULL &&
        trun_strv_setenv(env, set[k].name, set[k].value) < 0)
      return -ENOMEM;
  return 0;
}

int trun__agent_fr_open(agent *a) {
  a->fr_dir[0] = '\0';
  if (a->node == NULL || a->node->ngpu <= 0 || fr_off(a->env)) return 0;
  if (a->cfg->log_dir && !a->files_off) {
    if (snprintf(a->fr_dir, sizeof(a->fr_dir), "%s/flight_recorder", a->run_dir) >= (int)sizeof(a->fr_dir) ||
        mkdir(a->fr_dir, 0700) < 0) {
      trun_warn("flight recorder: cannot create %s: %s; the workers' dumps stay where torch puts them",
                a->fr_dir, strerror(errno));
      a->fr_dir[0] = '\0';
      return 0;
    }
  } else {
    const char *t = getenv("TMPDIR");
    if (snprintf(a->fr_dir, sizeof(a->fr_dir), "%s/trun_fr_%s_XXXXXX", t && t[0] ? t : "/tmp",
                 a->cfg->run_id) >= (int)sizeof(a->fr_dir) ||
        mkdtemp(a->fr_dir) == NULL) {
      trun_warn(
          "flight recorder: cannot create a directory under %s: %s; the workers' dumps stay where torch "
          "puts them",
          t && t[0] ? t : "/tmp", strerror(errno));
      a->fr_dir[0] = '\0';
      return 0;
    }
    a->fr_remove = 1;
  }
  if (trun__agent_fr_env(&a->env, a->node->ngpu, a->fr_dir) < 0) return -1;
  trun_debug("flight recorder: the workers dump to %s/rank_<rank> (pipe %s/rank_<rank>.pipe)", a->fr_dir,
             a->fr_dir);
  return 0;
}

void trun__agent_fr_close(agent *a) {
  if (!a->fr_remove || a->fr_dir[0] == '\0') return;
  a->fr_remove = 0;
  int dfd = open(a->fr_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (d == NULL) {
    if (dfd >= 0) close(dfd);
    trun_debug("flight recorder: %s: %s (not removed)", a->fr_dir, strerror(errno));
    return;
  }
  for (struct dirent *e; (e = readdir(d)) != NULL;) /* what the workers left: dumps and FIFOs */
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && unlinkat(dfd, e->d_name, 0) < 0)
      trun_debug("flight recorder: %s/%s: %s (not removed)", a->fr_dir, e->d_name, strerror(errno));
  closedir(d);
  if (rmdir(a->fr_dir) < 0)
    trun_warn("flight recorder: cannot remove %s: %s; remove it by hand", a->fr_dir, strerror(errno));
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
