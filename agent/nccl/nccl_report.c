/* trun --nccl-report (agent/nccl/nccl_report.h). */
#include "nccl_report.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "agent/discover/discover.h"
#include "agent/proc/proc.h"
#include "base/base.h"
#include "nccl_log.h"

struct trun_nccl_report {
  char attempt_dir[PATH_MAX];
  int after_s;
  int efa;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  char *printed; /* the JSON of the last printed report */
};

int trun_nccl_report_env(char ***envp, const char *rank_dir) {
  char file[PATH_MAX + 32];
  int rc = 0;
  if (trun_env_get(*envp, "NCCL_DEBUG") == NULL) rc = trun_strv_setenv(envp, "NCCL_DEBUG", "INFO");
  if (rc == 0 && trun_env_get(*envp, "NCCL_DEBUG_SUBSYS") == NULL)
    rc = trun_strv_setenv(envp, "NCCL_DEBUG_SUBSYS", "INIT,P2P,NET");
  if (rc == 0 && trun_env_get(*envp, "NCCL_DEBUG_FILE") == NULL) {
    snprintf(file, sizeof(file), "%s/nccl.%%h.%%p.log", rank_dir);
    rc = trun_strv_setenv(envp, "NCCL_DEBUG_FILE", file);
  }
  return rc;
}

/* Reads every <attempt>/<rank>/nccl.*.log; prints the report when it has connections (or final) and differs
 * from the last one printed. */
static void report_once(trun_nccl_report *r, int final) {
  char pat[PATH_MAX + 32];
  snprintf(pat, sizeof(pat), "%s/*/nccl.*.log", r->attempt_dir);
  glob_t g;
  memset(&g, 0, sizeof(g));
  int grc = glob(pat, 0, NULL, &g);
  if (grc != 0) {
    if (final)
      fprintf(stderr, "trun: --nccl-report: no NCCL log file matches %s (did the workers use NCCL?)\n", pat);
    globfree(&g);
    return;
  }
  trun_nccl_log *l = trun_nccl_log_new();
  if (l == NULL) {
    globfree(&g);
    return;
  }
  trun_nccl_log_set_efa(l, r->efa);
  for (size_t i = 0; i < g.gl_pathc; i++) trun_nccl_log_feed_file(l, g.gl_pathv[i]);
  json_t *j = trun_nccl_log_json(l);
  char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  int conns = 0;
  size_t k;
  json_t *c;
  json_array_foreach(json_object_get(j, "communicators"), k, c) conns +=
      json_object_size(json_object_get(c, "transports")) > 0;
  json_decref(j);
  if (s && (conns > 0 || final) && (r->printed == NULL || strcmp(r->printed, s) != 0)) {
    fprintf(stderr, "trun: --nccl-report %s (%zu log file(s) under %s):\n",
            final ? "at the end of the round" : "after the workers' start", g.gl_pathc, r->attempt_dir);
    trun_nccl_log_print(l, stderr);
    free(r->printed);
    r->printed = s;
    s = NULL;
  }
  free(s);
  trun_nccl_log_free(l);
  globfree(&g);
}

static void *report_thread(void *arg) {
  trun_nccl_report *r = arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += r->after_s;
  pthread_mutex_lock(&r->mu);
  while (!r->done)
    if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT) break;
  int early = !r->done;
  pthread_mutex_unlock(&r->mu);
  if (early) report_once(r, 0);
  return NULL;
}

trun_nccl_report *trun_nccl_report_start(const trun_config *cfg, char *const *env, const char *attempt_dir) {
  if (!cfg->nccl_report) return NULL;
  if (attempt_dir == NULL || attempt_dir[0] == '\0') {
    trun_warn("--nccl-report needs log files (--log-dir is /dev/null): no report");
    return NULL;
  }
  const char *dbg = trun_env_get(env, "NCCL_DEBUG"), *file = trun_env_get(env, "NCCL_DEBUG_FILE");
  if (dbg && strcasecmp(dbg, "INFO") != 0 && strcasecmp(dbg, "TRACE") != 0)
    trun_warn("--nccl-report: NCCL_DEBUG=%s (yours) logs no transports; the report needs NCCL_DEBUG=INFO",
              dbg);
  if (file) {
    trun_warn(
        "--nccl-report: NCCL_DEBUG_FILE=%s is yours: NCCL logs go there; run "
        "`trun-topo --nccl-log <those files>` for the report",
        file);
    return NULL;
  }
  trun_nccl_report *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  snprintf(r->attempt_dir, sizeof(r->attempt_dir), "%s", attempt_dir);
  const char *after = getenv("TRUN_NCCL_REPORT_AFTER");
  r->after_s = after && *after ? atoi(after) : 30;
  trun_node *node = calloc(1, sizeof(*node));
  if (node && trun_discover_rdma(node) >= 0)
    for (int i = 0; i < node->nrdma; i++) r->efa += node->rdma[i].is_efa && node->rdma[i].usable;
  free(node);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  if (pthread_create(&r->thread, NULL, report_thread, r) != 0) {
    trun_warn("--nccl-report: cannot start the report thread; the report comes when the workers end");
    r->done = -1;
  }
  return r;
}

void trun_nccl_report_finish(trun_nccl_report *r) {
  if (r == NULL) return;
  if (r->done == 0) {
    pthread_mutex_lock(&r->mu);
    r->done = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
  }
  report_once(r, 1);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r->printed);
  free(r);
}
