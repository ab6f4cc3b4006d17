/* The round's failures (agent/agent_int.h): one record per failed local worker (exit code, error file,
 * stall), the job's failure report, and the announcement that ends the round on the other nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_int.h"
#include "log.h"
#include "report.h"

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

/* Static rendezvous, job-wide report: a node that neither reported a failure (seen[g]) nor saw the round
 * end is lost (its agent was killed, crashed, or its host or network went down before it could say
 * anything). One
 * record per lost node, appended at fs[n]; as the first failure (its loss is what broke the others'
 * collectives) it becomes the root cause. Returns how many were added. */
static size_t lost_nodes(agent *a, const char *seen, trun_failure *fs, size_t n) {
  double first = trun__agent_now();
  for (size_t i = 0; i < n; i++)
    if (fs[i].timestamp < first) first = fs[i].timestamp;
  size_t added = 0;
  int base = 0;
  for (int g = 0; g < a->rdzv.group_world_size; g++) {
    int alive = 0, nproc = 0;
    char host[256], msg[512];
    if (trun_rdzv_node_end(&a->rdzv, a->round, g, &alive, &nproc, host, sizeof(host)) < 0) break;
    if (!seen[g] && !alive) {
      trun_failure *f = &fs[n + added++];
      memset(f, 0, sizeof(*f));
      f->global_rank = base;
      f->local_rank = -1;
      f->group_rank = g;
      f->exit_code = 1;
      f->timestamp = first - 0.001;
      f->host = strdup(host);
      snprintf(msg, sizeof(msg),
               "node rank %d (ranks %d-%d) on host %s was lost: its trun agent did not see the round end (it "
               "was killed, crashed, or its host or network went down)",
               g, base, base + (nproc > 0 ? nproc : 1) - 1, host);
      f->message = strdup(msg);
      trun_warn("%s", msg);
    }
    base += nproc;
  }
  return added;
}

void trun__agent_report_failures(agent *a, int final) {
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
    char *seen = calloc((size_t)a->rdzv.group_world_size, 1);
    if (seen && trun_rdzv_collect_failures(&a->rdzv, a->round, 5000, &remote, &nr) == 0) {
      for (int i = 0; i < nr; i++) {
        trun_failure f;
        memset(&f, 0, sizeof(f));
        if (trun_failure_from_json(remote[i], strlen(remote[i]), &f) == 0 &&
            f.group_rank != a->rdzv.group_rank) {
          if (f.group_rank >= 0 && f.group_rank < a->rdzv.group_world_size) seen[f.group_rank] = 1;
          fs[n++] = f;
        } else {
          trun_failure_free(&f);
        }
        free(remote[i]);
      }
      free(remote);
      seen[a->rdzv.group_rank] = 1;
      n += lost_nodes(a, seen, fs, n);
    }
    free(seen);
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

void trun__agent_announce_failure(agent *a) {
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
    f.timestamp = trun__agent_now();
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
