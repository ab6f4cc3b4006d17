/* The round's failures (agent/agent_int.h): one record per failed local worker (exit code, error file,
 * stall), the job's failure report, and the announcement that ends the round on the other nodes. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/proc/proc.h"
#include "agent_int.h"
#include "base/base.h"

/* The kernel's OOM-kill records since the round's first worker started (read once per report). */
#define OOM_LOG_MAX 64
typedef struct {
  trun_kmsg_oom rec[OOM_LOG_MAX];
  int n;       /* records, or -errno: the kernel log cannot be read */
  int initial; /* this agent is in the initial PID namespace: the records' pids are the workers' */
} oom_log;

/* Inside a PID namespace a record's victim is matched by time: it died within this long of the record. */
#define OOM_MATCH_US 5000000ull

static void read_oom_log(agent *a, oom_log *log) {
  unsigned long long since = 0;
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].start_us && (since == 0 || a->w[i].start_us < since)) since = a->w[i].start_us;
  log->n = trun_kmsg_oom_kills("/dev/kmsg", since, log->rec, OOM_LOG_MAX);
  log->initial = trun_pidns_initial("");
}

/* The kernel's record of worker i's OOM kill, NULL. In the initial PID namespace: the record naming its pid
 * (certain). Inside one (a pod: the records name the host's pids, which this agent cannot see): a record
 * made while it ran, whose victim it likely is: of the workers that a SIGKILL not sent by trun ended and
 * that ran then, it was reaped first after the record (within OOM_MATCH_US), and its memory cgroup's
 * counter moved (kills: the counter's change, -1 unknown). */
static const trun_kmsg_oom *oom_record_of(agent *a, int i, const oom_log *log, long long kills) {
  const worker *w = &a->w[i];
  for (int k = log->n; k-- > 0;) {
    const trun_kmsg_oom *r = &log->rec[k];
    if (r->us < w->start_us) continue;
    if (log->initial) {
      if (r->pid == w->pid) return r;
      continue;
    }
    if (kills == 0 || w->exit_us < r->us || w->exit_us - r->us > OOM_MATCH_US) continue;
    int first = 1;
    for (int j = 0; j < a->nproc && first; j++) {
      const worker *o = &a->w[j];
      if (j != i && o->status == -SIGKILL && !o->sigkill_sent && o->start_us <= r->us &&
          o->exit_us >= r->us && o->exit_us < w->exit_us)
        first = 0;
    }
    if (first) return r;
  }
  return NULL;
}

/* Why worker i died, in one line (proc/cause.h): f->cause and f->cause_kind. A worker the teardown stopped
 * gets one only when it says more than its signal. */
static void set_cause(agent *a, int i, trun_failure *f, const oom_log *log /* NULL: out of memory */) {
  worker *w = &a->w[i];
  char tail[TRUN_TAIL_MAX], cause[1024];
  if (w->timer_scope[0]) { /* the watchdog's own kill: not memory, not a plain signal */
    char sig[32];
    snprintf(cause, sizeof(cause), "torch's file-timer watchdog: scope '%s' expired, killed with %s",
             w->timer_scope, trun_signal_name(w->timer_signal, sig, sizeof(sig)));
    f->cause = strdup(cause);
    f->cause_kind = strdup(trun_cause_name(TRUN_CAUSE_TIMER));
    return;
  }
  if (w->err_tail.total == 0 && w->log_err[0] && (trun_config_redirects(a->cfg, i) & 2))
    (void)trun_tail_from_file(&w->err_tail, w->log_err); /* a --redirects log: best effort */
  trun_tail_text(&w->err_tail, tail, sizeof(tail));
  trun_cause_in in = {.exit_code = w->status,
                      .stderr_tail = tail,
                      .message = f->message,
                      .oom_kills = -1,
                      .memcg_limit = -1,
                      .stalled_s = w->stalled_s,
                      .stuck = w->stuck[0] ? w->stuck : NULL,
                      .hang = w->hang[0] ? w->hang : NULL};
  long long kills;
  if (w->memcg_ok && trun_memcg_oom_kills(&w->memcg, &kills) == 0) {
    in.oom_kills = kills - w->oom_base;
    in.memcg = w->memcg.dir;
    in.memcg_limit = trun_memcg_limit(&w->memcg);
  }
  in.sent_by_trun = w->sigkill_sent;
  in.kmsg_err = log == NULL ? -ENOMEM : log->n < 0 ? log->n : 0;
  const trun_kmsg_oom *r =
      log && w->status == -SIGKILL && !w->sigkill_sent ? oom_record_of(a, i, log, in.oom_kills) : NULL;
  if (r && log->initial)
    in.oom_kernel = r->text;
  else if (r)
    in.oom_likely = r->text;
  if (a->health.unhealthy && i == a->health.lr && i == a->round.result.culprit && !w->stuck[0])
    in.xid = a->health.msg;
  trun_cause_kind k = trun_cause_describe(&in, cause, sizeof(cause));
  if (k == TRUN_CAUSE_NONE || (f->torn_down && (k == TRUN_CAUSE_SIGNAL || k == TRUN_CAUSE_EXIT))) return;
  size_t n = strlen(cause);
  if (k == TRUN_CAUSE_STARTUP && (!a->cfg->no_python || a->cfg->run_path) && a->env &&
      n < sizeof(cause) - 16) {
    snprintf(cause + n, sizeof(cause) - n, "; interpreter: "); /* "No module named 'torch'": which Python? */
    n = strlen(cause);
    trun_agent_describe_python(a->env, cause + n, sizeof(cause) - n);
  }
  f->cause = strdup(cause);
  f->cause_kind = strdup(trun_cause_name(k));
}

static size_t collect_failures(agent *a, trun_failure *fs) {
  size_t n = 0;
  oom_log *log = calloc(1, sizeof(*log));
  if (log) read_oom_log(a, log);
  for (int i = 0; i < a->nproc; i++) {
    worker *w = &a->w[i];
    if (w->status == 0 && !w->hang[0]) continue; /* a culprit of a hang that exited 0 is one too */
    trun_failure *f = &fs[n++];
    memset(f, 0, sizeof(*f));
    f->global_rank = trun_rdzv_info(a->rdzv)->base_rank + i;
    f->local_rank = i;
    f->group_rank = trun_rdzv_info(a->rdzv)->group_rank;
    f->pid = w->pid;
    f->exit_code = w->status;
    f->timestamp = w->exit_time;
    f->host = strdup(a->host);
    f->torn_down =
        w->torn_down && i != a->round.result.culprit && !w->hang[0]; /* a hang's culprit: a root cause */
    if (w->log_err[0] && (trun_config_redirects(a->cfg, i) & 2)) f->log_path = strdup(w->log_err);
    if (w->error_file[0]) {
      int rc = trun_errfile_read(w->error_file, f);
      if (rc == -EBADMSG)
        trun_warn("rank %d's error file %s is not torchelastic JSON", f->global_rank, w->error_file);
    }
    if (a->health.unhealthy && i == a->health.lr && i == a->round.result.culprit) {
      /* A hardware Xid on this worker's GPU: the root cause, not the signal that stopped the worker. */
      char *msg = NULL;
      if (asprintf(&msg, "%s%s%s", a->health.msg, f->message ? "; then: " : "",
                   f->message ? f->message : "") >= 0) {
        free(f->message);
        f->message = msg;
      }
      f->timestamp = a->health.time;
    }
    if (w->timer_scope[0]) {
      char *msg = NULL, sig[32];
      if (asprintf(&msg, "torch's file-timer watchdog: scope '%s' expired, killed with %s%s%s",
                   w->timer_scope, trun_signal_name(w->timer_signal, sig, sizeof(sig)),
                   f->message ? "; then: " : "", f->message ? f->message : "") >= 0) {
        free(f->message);
        f->message = msg;
      }
    }
    set_cause(a, i, f, log);
    if (w->hang[0]) {
      char *msg = NULL, stack[768], tail[TRUN_TAIL_MAX];
      /* Asked for its Python stack before the stop (agent_hangstack.c): its frames go with the cause. */
      trun_tail_text(&w->err_tail, tail, sizeof(tail));
      if (f->cause && trun_cause_pystack(tail, 12, stack, sizeof(stack)) > 0 &&
          asprintf(&msg, "%s; its Python stack (innermost first): %s", f->cause, stack) >= 0) {
        free(f->cause);
        f->cause = msg;
        msg = NULL;
      }
      if (asprintf(&msg, "%s%s%s", w->hang, f->message ? "; then: " : "", f->message ? f->message : "") >=
          0) {
        free(f->message);
        f->message = msg;
      }
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
  free(log);
  return n;
}

/* Node g of the round, lost: one record, the root cause (its loss is what broke the others' collectives).
 * The cause is the liveness record lost/<g> when there is one (l: authoritative, rdzv_live.c), else the
 * static job's inference (a node that neither reported a failure nor saw the round end). Where the store
 * says so (static), the record names the node's ranks, its host and the address it joined from. */
static void lost_record(agent *a, int g, const trun_rdzv_loss *l, double at, trun_failure *f) {
  trun_rdzv_node_info nd;
  if (trun_rdzv_node_end(a->rdzv, trun_rdzv_info(a->rdzv)->round, g, &nd) < 0) memset(&nd, 0, sizeof(nd));
  const char *host = nd.host[0] ? nd.host : l && l->addr[0] ? l->addr : "?";
  char where[448], cause[400];
  if (nd.nproc > 0)
    snprintf(where, sizeof(where), "(ranks %d-%d) on host %s", nd.base_rank, nd.base_rank + nd.nproc - 1,
             host);
  else
    snprintf(where, sizeof(where), "(%s)", host);
  if (l)
    snprintf(cause, sizeof(cause), "%s (seen by %s)", l->cause,
             strcmp(l->by, "store") == 0 ? "the rendezvous store's host" : l->by);
  else
    snprintf(cause, sizeof(cause),
             "its trun agent did not see the round end (it was killed, crashed, or its host or network went "
             "down)");
  memset(f, 0, sizeof(*f));
  f->global_rank = -1;
  f->local_rank = -1;
  f->group_rank = g;
  f->node_lost = 1;
  f->timestamp = at;
  f->host = strdup(host);
  if (asprintf(&f->message, "node rank %d %s was lost: %s", g, where, cause) < 0) f->message = NULL;
}

/* A node of the round was lost (liveness): it is the root cause; this node's workers that failed with it
 * (a crashed peer resets their connections) are bystanders. */
static size_t add_lost_node(agent *a, trun_failure *fs, size_t n) {
  if (a->round.result.kind != OUT_PEER_LOST || !a->round.lost_known) return n;
  for (size_t i = 0; i < n; i++) fs[i].torn_down = 1;
  lost_record(a, a->round.lost.node, &a->round.lost, a->round.lost.at, &fs[n]);
  return n + 1;
}

/* Node rank 0's job-wide report of a round that ended by a failure: a node that reported none (seen[g]) was
 * lost if the liveness recorded it (lost/<g>; it ended the round too late to be its end) or, without a
 * record, if it did not see the round end (its agent was killed, crashed, or its host or network went down
 * before it could say anything). One record per lost node, appended at fs[n], timed before the first
 * failure so that it is the root cause. Returns how many were added. */
static size_t lost_nodes(agent *a, const char *seen, trun_failure *fs, size_t n) {
  double first = trun_wall_s();
  for (size_t i = 0; i < n; i++)
    if (fs[i].timestamp < first) first = fs[i].timestamp;
  size_t added = 0;
  for (int g = 0; g < trun_rdzv_info(a->rdzv)->group_world_size; g++) {
    if (seen[g]) continue;
    trun_rdzv_loss l;
    trun_rdzv_node_info nd;
    int rc = trun_rdzv_loss_of(a->rdzv, NULL, g, &l);
    if (rc != 0 && rc != -ENOENT) break; /* the store is gone */
    if (rc == -ENOENT &&
        (trun_rdzv_node_end(a->rdzv, trun_rdzv_info(a->rdzv)->round, g, &nd) < 0 || nd.seen_end))
      continue;
    trun_failure *f = &fs[n + added++];
    lost_record(a, g, rc == 0 ? &l : NULL, rc == 0 && l.at < first ? l.at : first - 0.001, f);
    if (f->message) trun_warn("%s", f->message);
  }
  return added;
}

/* Room for the other nodes' health records (agent_health.c) in one report. */
#define HEALTH_NEWS_MAX 16

/* Another node's workers failed first (the round's end names it, a->round.end): its published record at *f,
 * and this node's failures (fs[0..n)) become its victims. 1 when added, 0 when that record is not known (the
 * store was gone before it could be read), -1 when another node did not fail first. */
static int remote_root(agent *a, trun_failure *fs, size_t n, trun_failure *f) {
  if (a->round.end.kind != TRUN_RDZV_END_FAILED || a->round.end.node == trun_rdzv_info(a->rdzv)->group_rank)
    return -1;
  memset(f, 0, sizeof(*f));
  if (!a->round.end.failure[0] ||
      trun_failure_from_json(a->round.end.failure, strlen(a->round.end.failure), f) != 0) {
    trun_failure_free(f);
    return 0;
  }
  if (f->group_rank != a->round.end.node)
    trun_warn("node rank %d's failure record names node rank %d", a->round.end.node, f->group_rank);
  f->group_rank = a->round.end.node;
  f->torn_down = 0;
  for (size_t i = 0; i < n; i++) fs[i].torn_down = 1;
  return 1;
}

/* Where this node cannot name the rank that failed first: which node, if known, and why not. */
static void remote_unknown(agent *a, int final) {
  char why[320];
  int g = a->round.end.kind == TRUN_RDZV_END_FAILED ? a->round.end.node : -1;
  if (g >= 0)
    snprintf(why, sizeof(why), "node rank %d failed first; its record could not be read (%s)", g,
             a->round.end.failure[0] ? "it is not a failure record" : "the rendezvous store was gone");
  else if (a->round.end.kind == TRUN_RDZV_END_STORE_LOST) {
    int port;
    const char *addr = trun_rdzv_store_addr(a->rdzv, &port);
    snprintf(why, sizeof(why),
             "the rendezvous store at %.128s:%d closed (%.64s): the node that hosts it ended or was lost",
             addr, port, a->round.end.cause);
  } else
    snprintf(why, sizeof(why), "a node of this round left it to rejoin; which rank failed is not known%s",
             trun_rdzv_ends_by_key(a->rdzv) ? "" : " (a torchrun agent publishes nothing of it)");
  trun_warn("root cause: another node failed: %s", why);
  trun_obs_remote_unknown(a->obs, final, g, why);
}

/* The root cause in one line (fs[root]): its rank, where, why. */
static void say_root(agent *a, const trun_failure *f) {
  int other = f->group_rank != trun_rdzv_info(a->rdzv)->group_rank;
  const char *why = f->cause ? f->cause : other ? f->message : NULL; /* another node's agent stopped: why */
  if (f->node_lost || why == NULL) return;
  char node[48] = "";
  if (other) snprintf(node, sizeof(node), " (node rank %d)", f->group_rank);
  if (f->local_rank < 0) /* the agent of that node was stopped: no rank of its own */
    trun_warn("root cause: node rank %d on %s: %s", f->group_rank, f->host ? f->host : "?", why);
  else
    trun_warn("root cause: rank %d (local %d, pid %d) on %s%s: %s", f->global_rank, f->local_rank,
              (int)f->pid, f->host ? f->host : "?", node, why);
}

/* Node rank 0's job-wide report: the other nodes' failure records after this node's fs[0..n), and the nodes
 * lost without one; the node that failed first (the round's end) is the root cause, this node's failures
 * its victims. The new count. */
static size_t add_job_records(agent *a, trun_failure *fs, size_t n) {
  int me = trun_rdzv_info(a->rdzv)->group_rank, world = trun_rdzv_info(a->rdzv)->group_world_size;
  char **rec = NULL;
  int nr = 0;
  char *seen = calloc((size_t)world, 1);
  if (seen && trun_rdzv_collect_failures(a->rdzv, trun_rdzv_info(a->rdzv)->round, 5000, &rec, &nr) == 0) {
    for (int i = 0; i < nr; i++) {
      trun_failure f;
      memset(&f, 0, sizeof(f));
      if (trun_failure_from_json(rec[i], strlen(rec[i]), &f) == 0 && f.group_rank != me) {
        if (f.group_rank >= 0 && f.group_rank < world) seen[f.group_rank] = 1;
        fs[n++] = f;
      } else {
        trun_failure_free(&f);
      }
      free(rec[i]);
    }
    free(rec);
    seen[me] = 1;
    n += lost_nodes(a, seen, fs, n);
  }
  free(seen);
  if (a->round.end.kind == TRUN_RDZV_END_FAILED && a->round.end.node != me)
    for (size_t i = 0; i < n; i++)
      if (fs[i].group_rank == me && !fs[i].node_lost) fs[i].torn_down = 1;
  return n;
}

void trun__agent_report_failures(agent *a, int final) {
  int me = trun_rdzv_info(a->rdzv)->group_rank;
  size_t cap = (size_t)a->nproc + (size_t)trun_rdzv_info(a->rdzv)->group_world_size + HEALTH_NEWS_MAX +
               2; /* + a lost node, + the remote root cause */
  trun_failure *fs = calloc(cap, sizeof(*fs));
  if (fs == NULL) return;
  size_t n = add_lost_node(a, fs, collect_failures(a, fs));
  /* Job-wide: node rank 0 adds the other nodes' root causes (a lost node's is here already, and the others
   * published none: every node prints the same root cause). */
  int jobwide = final && trun_rdzv_ends_by_key(a->rdzv) && trun_rdzv_info(a->rdzv)->group_world_size > 1 &&
                me == 0 && a->round.result.kind != OUT_PEER_LOST;
  /* Elsewhere: the root cause that the node which failed first published, or plainly that another failed. */
  int remote = jobwide ? -1 : remote_root(a, fs, n, &fs[n]);
  int unknown = !jobwide && remote != 1 && (remote == 0 || a->round.result.kind == OUT_REMOTE_FAILED);
  if (remote == 1) n++;
  int peer_final =
      final && a->round.result.kind == OUT_REMOTE_FAILED && me != 0; /* the report is another node's */
  if (jobwide) n = add_job_records(a, fs, n);
  /* A node that left unhealthy (a hardware Xid) is this round's root cause, not the time-outs it left. */
  if (a->round.result.kind != OUT_CUT_OFF)
    trun__agent_health_news(a, fs, &n, cap); /* cut off: the store is not there */
  int root = trun_failure_root(fs, n);
  /* One "failure" event per root cause in the job: on the node that owns it (a lost node's: on each). */
  int own = root >= 0 && (fs[root].node_lost || fs[root].group_rank == me);
  if (unknown && (root < 0 || own)) /* this node's failures are victims: none of them is a root cause */
    remote_unknown(a, final);
  else if (root >= 0) {
    trun_obs_failure(a->obs, fs, n, final, own);
    say_root(a, &fs[root]);
  }
  if (peer_final) {
    fprintf(stderr, "trun: node rank %d: workers stopped because %s; %s\n", me,
            a->round.end.kind == TRUN_RDZV_END_FAILED ? "another node failed first"
            : !trun_rdzv_ends_by_key(a->rdzv)         ? "another node failed"
                                                      : "the store was lost",
            trun_rdzv_ends_by_key(a->rdzv) ? "node rank 0 prints the job's failure report"
                                           : "the agent of that node prints its failure report");
  } else if (final && n > 0) {
    trun_report_print(stderr, a->cfg->script, fs, n);
    const char *parent = getenv("TORCHELASTIC_ERROR_FILE");
    if (parent && parent[0] && root >= 0) trun_errfile_write_parent(parent, &fs[root]);
  }
  for (size_t i = 0; i < n; i++) trun_failure_free(&fs[i]);
  free(fs);
}

int trun__agent_announce_failure(agent *a, trun_rdzv_end *now) {
  trun_failure *fs = calloc((size_t)a->nproc + 1, sizeof(*fs));
  if (fs == NULL) return -ENOMEM;
  size_t n = collect_failures(a, fs);
  int root = trun_failure_root(fs, n);
  char *json = NULL;
  if (root >= 0 && !fs[root].torn_down) {
    json = trun_failure_to_json(&fs[root]);
  } else {
    trun_failure f;
    char name[32], msg[640];
    memset(&f, 0, sizeof(f));
    f.global_rank = trun_rdzv_info(a->rdzv)->base_rank;
    f.local_rank = -1;
    f.group_rank = trun_rdzv_info(a->rdzv)->group_rank;
    f.pid = getpid();
    f.exit_code = a->health.unhealthy ? TRUN_EXIT_UNHEALTHY : a->stop.signal_seen ? -a->stop.signal_seen : 1;
    f.timestamp = a->health.unhealthy ? a->health.time : trun_wall_s();
    f.host = a->host;
    if (a->health.unhealthy)
      snprintf(msg, sizeof(msg), "%s", a->health.msg);
    else
      snprintf(msg, sizeof(msg), "the trun agent of node rank %d was stopped by %s",
               trun_rdzv_info(a->rdzv)->group_rank,
               a->stop.signal_seen ? trun_signal_name(a->stop.signal_seen, name, sizeof(name)) : "an error");
    f.message = msg;
    json = trun_failure_to_json(&f);
  }
  int rc = trun_rdzv_announce_failure(a->rdzv, trun_rdzv_info(a->rdzv)->round, json, now);
  if (rc < 0)
    trun_warn("could not tell the other nodes that this node failed (rendezvous store unreachable)");
  free(json);
  for (size_t i = 0; i < n; i++) trun_failure_free(&fs[i]);
  free(fs);
  return rc;
}
