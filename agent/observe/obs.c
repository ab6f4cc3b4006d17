#include "obs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/discover/discover.h"
#include "base/base.h"
#include "events.h"
#include "metrics.h"
#include "store/store.h"

#define MAX_CODES 64
#define MAX_HEALTH 16
/* Scopes counted by trun_timer_expired_total (more go to the last one, scope="(other)"). */
#define MAX_SCOPES 32

struct trun_obs {
  trun_events *ev;
  trun_metrics *metrics;
  const trun_rdzv *r;
  /* metrics */
  int round;            /* last completed rendezvous round, -1 none */
  double rdzv_started;  /* monotonic seconds */
  double rdzv_duration; /* seconds, of the last round */
  unsigned long restarts;
  int running, succeeded, failed, stopped;
  unsigned long stalls;
  unsigned long hangs;
  struct {
    char scope[96]; /* escaped for a label value */
    unsigned long n;
  } scopes[MAX_SCOPES];
  int nscopes;
  unsigned long nodes_lost;
  int cfg_warm;                           /* --warm-start: its metric is shown */
  unsigned long starts_warm, starts_cold; /* --warm-start */
  double recovery_s;                      /* the last recovery, -1: none yet */
  unsigned long exclusions;               /* exclusions seen (node_excluded events) */
  int excluded;                           /* exclusions in force at the last round */
  struct {
    char label[32];
    unsigned long n;
  } codes[MAX_CODES];
  int ncodes;
  unsigned long causes[TRUN_CAUSE__COUNT]; /* root causes of failed rounds, by kind (proc/cause.h) */
  struct {
    const char *check; /* a static name (health.c's table, or "xid") */
    int failed;
  } health[MAX_HEALTH];
  int nhealth;
  /* The wait in progress (agent/rdzv/rdzv.h, "waits"): its kind ("" none) and seconds so far. */
  char wait_kind[24];
  double wait_s;
};

/* trun_health_failed{check}: set (or add) the check's value. */
static void health_metric(trun_obs *o, const char *check, int failed) {
  int i;
  for (i = 0; i < o->nhealth && strcmp(o->health[i].check, check) != 0; i++) {
  }
  if (i == o->nhealth) {
    if (o->nhealth == MAX_HEALTH) return;
    o->health[o->nhealth++].check = check;
  }
  o->health[i].failed = failed;
}

/* "3" for an exit code, "SIGTERM" for -15. */
static void status_label(int status, char *out, size_t len) {
  if (status >= 0)
    snprintf(out, len, "%d", status);
  else
    trun_signal_name(-status, out, len);
}

static void render(void *arg, trun_buf *out) {
  trun_obs *o = arg;
  char lab[96];
  trun_metrics_header(out, "trun_up", "gauge", "1 while the trun agent runs.");
  trun_metrics_sample(out, "trun_up", NULL, 1);
  trun_metrics_header(out, "trun_restarts_total", "counter", "Worker group restarts (failures and stalls).");
  trun_metrics_sample(out, "trun_restarts_total", NULL, (double)o->restarts);
  trun_metrics_header(out, "trun_workers", "gauge", "This node's workers of the current attempt, by state.");
  trun_metrics_sample(out, "trun_workers", "state=\"running\"", o->running);
  trun_metrics_sample(out, "trun_workers", "state=\"succeeded\"", o->succeeded);
  trun_metrics_sample(out, "trun_workers", "state=\"failed\"", o->failed);
  trun_metrics_sample(out, "trun_workers", "state=\"stopped\"", o->stopped);
  trun_metrics_header(out, "trun_rendezvous_round", "gauge",
                      "The last completed rendezvous round (-1: none).");
  trun_metrics_sample(out, "trun_rendezvous_round", NULL, o->round);
  trun_metrics_header(out, "trun_rendezvous_duration_seconds", "gauge",
                      "How long the last rendezvous round took.");
  trun_metrics_sample(out, "trun_rendezvous_duration_seconds", NULL, o->rdzv_duration);
  trun_metrics_header(out, "trun_stalls_total", "counter", "Workers found stalled by --stall-timeout.");
  trun_metrics_sample(out, "trun_stalls_total", NULL, (double)o->stalls);
  trun_metrics_header(out, "trun_hangs_total", "counter",
                      "Hung collectives NCCL RAS showed with a culprit among this node's workers.");
  trun_metrics_sample(out, "trun_hangs_total", NULL, (double)o->hangs);
  trun_metrics_header(
      out, "trun_timer_expired_total", "counter",
      "Workers killed by torch's file-timer watchdog (TORCHELASTIC_ENABLE_FILE_TIMER), by scope.");
  for (int i = 0; i < o->nscopes; i++) {
    char slab[128];
    snprintf(slab, sizeof(slab), "scope=\"%s\"", o->scopes[i].scope);
    trun_metrics_sample(out, "trun_timer_expired_total", slab, (double)o->scopes[i].n);
  }
  trun_metrics_header(out, "trun_nodes_lost_total", "counter", "Nodes of this node's rounds found lost.");
  trun_metrics_sample(out, "trun_nodes_lost_total", NULL, (double)o->nodes_lost);
  trun_metrics_header(out, "trun_exclusions_total", "counter",
                      "Exclusions of nodes from the job this node learnt of (issue 30: docs/rendezvous.md).");
  trun_metrics_sample(out, "trun_exclusions_total", NULL, (double)o->exclusions);
  trun_metrics_header(out, "trun_nodes_excluded", "gauge", "Exclusions in force at this node's last round.");
  trun_metrics_sample(out, "trun_nodes_excluded", NULL, (double)o->excluded);
  trun_metrics_header(out, "trun_recovery_seconds", "gauge",
                      "Seconds from the last node loss until this node's workers ran again (-1: none yet).");
  trun_metrics_sample(out, "trun_recovery_seconds", NULL, o->recovery_s);
  if (o->cfg_warm) {
    trun_metrics_header(
        out, "trun_worker_starts_total", "counter",
        "Workers started with --warm-start, by how (warm: from the pool; cold: a new Python).");
    trun_metrics_sample(out, "trun_worker_starts_total", "start=\"warm\"", (double)o->starts_warm);
    trun_metrics_sample(out, "trun_worker_starts_total", "start=\"cold\"", (double)o->starts_cold);
  }
  trun_server_stats sum = {0};
  if (o->r) trun_rdzv_store_stats(o->r, &sum);
  trun_metrics_header(out, "trun_store_connections", "gauge",
                      "Open connections to the store(s) this agent hosts (0 when it hosts none).");
  trun_metrics_sample(out, "trun_store_connections", NULL, (double)sum.connections);
  trun_metrics_header(out, "trun_store_ops_total", "counter", "Requests the hosted store(s) served.");
  trun_metrics_sample(out, "trun_store_ops_total", NULL, (double)sum.ops);
  trun_metrics_header(out, "trun_store_refused_total", "counter",
                      "Connections the hosted store(s) refused (allow-list, per-peer limit).");
  trun_metrics_sample(out, "trun_store_refused_total", NULL, (double)sum.refused);
  if (o->nhealth) {
    trun_metrics_header(
        out, "trun_health_failed", "gauge",
        "1 when this node failed the health check (the gate's checks, and xid: a hardware Xid).");
    for (int i = 0; i < o->nhealth; i++) {
      snprintf(lab, sizeof(lab), "check=\"%s\"", o->health[i].check);
      trun_metrics_sample(out, "trun_health_failed", lab, o->health[i].failed);
    }
  }
  trun_metrics_header(out, "trun_failure_causes_total", "counter",
                      "Deaths by cause: each failed round's root cause by kind (oom_kill, cuda_oom, "
                      "nccl_error, ...), and each worker SIGKILL could not end (stuck).");
  for (int k = 1; k < TRUN_CAUSE__COUNT; k++) {
    snprintf(lab, sizeof(lab), "cause=\"%s\"", trun_cause_name((trun_cause_kind)k));
    trun_metrics_sample(out, "trun_failure_causes_total", lab, (double)o->causes[k]);
  }
  trun_metrics_header(out, "trun_wait_seconds", "gauge",
                      "Seconds the agent's current wait has lasted, by what it waits for (none: no wait).");
  snprintf(lab, sizeof(lab), "wait=\"%s\"", o->wait_kind[0] ? o->wait_kind : "none");
  trun_metrics_sample(out, "trun_wait_seconds", lab, o->wait_kind[0] ? o->wait_s : 0);
  trun_metrics_header(out, "trun_worker_exit_total", "counter", "Worker exits by exit code or signal name.");
  for (int i = 0; i < o->ncodes; i++) {
    snprintf(lab, sizeof(lab), "code=\"%s\"", o->codes[i].label);
    trun_metrics_sample(out, "trun_worker_exit_total", lab, (double)o->codes[i].n);
  }
}

int trun_obs_open(const trun_config *cfg, uv_loop_t *loop, const char *host, trun_obs **out, char *err,
                  size_t errlen) {
  trun_obs *o = calloc(1, sizeof(*o));
  if (o == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  o->round = -1;
  o->recovery_s = -1;
  o->cfg_warm = cfg->warm_start;
  if (cfg->events && trun_events_open(cfg->events, host, &o->ev, err, errlen) < 0) {
    free(o);
    return -1;
  }
  if (cfg->metrics_port >= 0) {
    int port = 0;
    int rc = trun_metrics_start(loop, NULL, cfg->metrics_port, render, o, &o->metrics, &port);
    if (rc < 0) {
      snprintf(err, errlen, "--metrics-port %d: cannot listen: %s; pick another port (0: any free one)",
               cfg->metrics_port, uv_strerror(rc));
      trun_events_close(o->ev);
      free(o);
      return -1;
    }
    trun_info("serving Prometheus metrics on port %d (GET /metrics)", port);
    trun_events_emit(o->ev, "metrics", json_pack("{s:i}", "port", port));
  }
  *out = o;
  return 0;
}

void trun_obs_set_rdzv(trun_obs *o, const trun_rdzv *r) {
  if (o == NULL) return;
  o->r = r;
  trun_events_set_group_rank(o->ev, r ? trun_rdzv_info(r)->group_rank : -1);
}

void trun_obs_discovery(trun_obs *o, int nproc, char **envp, const trun_node *given) {
  if (o == NULL || o->ev == NULL) return;
  trun_node *node = given ? NULL : calloc(1, sizeof(*node));
  char err[256] = "";
  int ngpu = given ? given->ngpu : 0;
  if (node && trun_discover_gpus_flags(node, envp, TRUN_GPU_NO_AFFINITY, err, sizeof(err)) == 0)
    ngpu = node->ngpu;
  json_t *f = json_pack("{s:i,s:i,s:i}", "nproc", nproc, "gpus", ngpu, "cpus", trun_discover_cpus());
  const trun_node *src = given ? given : node;
  if (src && src->gpu_source) json_object_set_new(f, "gpu_source", json_string(src->gpu_source));
  trun_events_emit(o->ev, "discovery", f);
  free(node);
}

void trun_obs_rdzv_start(trun_obs *o, int round) {
  if (o == NULL) return;
  o->rdzv_started = trun_mono_s();
  trun_events_set_group_rank(o->ev, -1); /* a round's ranks are not known before its end */
  trun_events_emit(o->ev, "rendezvous_start", json_pack("{s:i}", "round", round));
}

void trun_obs_rdzv_end(trun_obs *o, int round, const char *error) {
  if (o == NULL) return;
  double d = trun_mono_s() - o->rdzv_started;
  if (error) {
    trun_events_emit(
        o->ev, "rendezvous_end",
        json_pack("{s:i,s:f,s:b,s:s}", "round", round, "duration_s", d, "ok", 0, "error", error));
    return;
  }
  o->round = round;
  o->rdzv_duration = d;
  o->running = o->succeeded = o->failed = o->stopped = 0;
  const trun_rdzv_round *ri = o->r ? trun_rdzv_info(o->r) : NULL;
  trun_events_set_group_rank(o->ev, ri ? ri->group_rank : -1);
  json_t *f = json_pack("{s:i,s:f,s:b}", "round", round, "duration_s", d, "ok", 1);
  if (ri) {
    json_object_set_new(f, "world_size", json_integer(ri->world_size));
    json_object_set_new(f, "base_rank", json_integer(ri->base_rank));
    json_object_set_new(f, "nnodes", json_integer(ri->group_world_size));
    json_object_set_new(f, "master_addr", json_string(ri->master_addr));
    json_object_set_new(f, "master_port", json_integer(ri->master_port));
  }
  trun_events_emit(o->ev, "rendezvous_end", f);
}

void trun_obs_worker_start(trun_obs *o, pid_t pid, int rank, int local_rank, int attempt,
                           const char *nccl_ras) {
  if (o == NULL) return;
  o->running++;
  json_t *f = json_pack("{s:i,s:i,s:i,s:i}", "pid", (int)pid, "rank", rank, "local_rank", local_rank,
                        "attempt", attempt);
  if (f && nccl_ras && nccl_ras[0]) json_object_set_new(f, "nccl_ras", json_string(nccl_ras));
  trun_events_emit(o->ev, "worker_start", f);
}

void trun_obs_warm_start(trun_obs *o, int warm) {
  if (o == NULL) return;
  if (warm)
    o->starts_warm++;
  else
    o->starts_cold++;
}

void trun_obs_worker_exit(trun_obs *o, pid_t pid, int rank, int local_rank, int status, int torn_down) {
  if (o == NULL) return;
  if (o->running > 0) o->running--;
  if (status == 0)
    o->succeeded++;
  else if (torn_down)
    o->stopped++;
  else
    o->failed++;
  char label[32];
  status_label(status, label, sizeof(label));
  int i;
  for (i = 0; i < o->ncodes && strcmp(o->codes[i].label, label) != 0; i++) {
  }
  if (i == o->ncodes && o->ncodes < MAX_CODES)
    snprintf(o->codes[o->ncodes++].label, sizeof(label), "%s", label);
  if (i < o->ncodes) o->codes[i].n++;
  json_t *f = json_pack("{s:i,s:i,s:i}", "pid", (int)pid, "rank", rank, "local_rank", local_rank);
  if (status >= 0)
    json_object_set_new(f, "exit_code", json_integer(status));
  else
    json_object_set_new(f, "signal", json_string(label));
  json_object_set_new(f, "stopped_by_agent", json_boolean(torn_down));
  trun_events_emit(o->ev, "worker_exit", f);
}

void trun_obs_restart(trun_obs *o, int attempt, int remaining) {
  if (o == NULL) return;
  o->restarts++;
  trun_events_emit(o->ev, "restart", json_pack("{s:i,s:i}", "attempt", attempt, "remaining", remaining));
}

void trun_obs_membership(trun_obs *o, int waiting) {
  if (o == NULL) return;
  trun_events_emit(o->ev, "membership_change", json_pack("{s:i}", "waiting", waiting));
}

void trun_obs_insecure_token(trun_obs *o, const char *run_id, const char *message) {
  if (o == NULL) return;
  trun_events_emit(o->ev, "insecure_token", json_pack("{s:s,s:s}", "run_id", run_id, "message", message));
}

void trun_obs_waiting(trun_obs *o, const trun_wait_info *w) {
  if (o == NULL) return;
  snprintf(o->wait_kind, sizeof(o->wait_kind), "%s", w->done ? "" : w->kind);
  o->wait_s = w->waited_s;
  json_t *f = json_pack("{s:s,s:s,s:s,s:f,s:b}", "wait", w->kind, "for", w->what, "state",
                        w->done ? "done" : "waiting", "waited_s", w->waited_s, "done", w->done);
  if (f && w->have[0]) json_object_set_new(f, "have", json_string(w->have));
  if (f && w->cause[0]) json_object_set_new(f, "cause", json_string(w->cause));
  if (f && w->left_s >= 0) json_object_set_new(f, "left_s", json_real(w->left_s));
  trun_events_emit(o->ev, "waiting", f);
}

void trun_obs_node_lost(trun_obs *o, const trun_rdzv_loss *l) {
  if (o == NULL) return;
  o->nodes_lost++;
  trun_events_emit(o->ev, "node_lost",
                   json_pack("{s:i,s:I,s:s,s:s,s:s,s:f}", "node", l->node, "round", (json_int_t)l->round_id,
                             "address", l->addr, "cause", l->cause, "seen_by", l->by, "detected_at", l->at));
}

void trun_obs_exclusion(trun_obs *o, const trun_rdzv_exclusion *e, int active) {
  if (o == NULL) return;
  o->excluded = active;
  if (e == NULL || e->news == 0) return;
  if (e->news & TRUN_RDZV_EXCL_NEW) o->exclusions++;
  for (int bit = TRUN_RDZV_EXCL_NEW; bit <= TRUN_RDZV_EXCL_ENDED; bit <<= 1)
    if (e->news & bit)
      trun_events_emit(
          o->ev, bit == TRUN_RDZV_EXCL_NEW ? "node_excluded" : "exclusion_ended",
          json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:f,s:f}", "excluded_host", e->id.host, "hostname",
                    e->id.hostname, "instance", e->id.instance, "kind", e->kind, "cause", e->cause, "gpus",
                    e->id.gpus, "agent", e->id.agent, "at", e->at, "until", e->until));
}

void trun_obs_recovered(trun_obs *o, int world_size, int nnodes, double seconds) {
  if (o == NULL) return;
  o->recovery_s = seconds;
  trun_events_emit(
      o->ev, "recovered",
      json_pack("{s:i,s:i,s:f}", "world_size", world_size, "nnodes", nnodes, "seconds", seconds));
}

void trun_obs_stuck(trun_obs *o, pid_t pid, int rank, int local_rank, const char *state) {
  if (o == NULL) return;
  o->causes[TRUN_CAUSE_STUCK]++;
  trun_events_emit(o->ev, "worker_stuck",
                   json_pack("{s:i,s:i,s:i,s:s}", "pid", (int)pid, "rank", rank, "local_rank", local_rank,
                             "state", state ? state : ""));
}

void trun_obs_stall(trun_obs *o, pid_t pid, int rank, int local_rank, double idle_s, int signal) {
  if (o == NULL) return;
  o->stalls++;
  json_t *f = json_pack("{s:i,s:i,s:i,s:f}", "pid", (int)pid, "rank", rank, "local_rank", local_rank,
                        "idle_s", idle_s);
  if (signal > 0) {
    char name[32];
    trun_signal_name(signal, name, sizeof(name));
    json_object_set_new(f, "signal", json_string(name));
  }
  trun_events_emit(o->ev, "stall", f);
}

void trun_obs_hang(trun_obs *o, pid_t pid, int rank, int local_rank, const char *comm, const char *kind,
                   unsigned long long count, double frozen_s, const char *why, const char *fr) {
  if (o == NULL) return;
  o->hangs++;
  json_t *f = json_pack("{s:i,s:i,s:i,s:s,s:s,s:I,s:f,s:s,s:s}", "pid", (int)pid, "rank", rank, "local_rank",
                        local_rank, "communicator", comm, "collective", kind, "count", (json_int_t)count,
                        "frozen_s", frozen_s, "why", why, "flight_recorder", fr ? fr : "");
  trun_events_emit(o->ev, "hang", f);
}

/* A scope as a Prometheus label value: \\, \" and \n escaped, cut to fit (never inside an escape). */
static void label_value(const char *in, char *out, size_t len) {
  size_t o = 0;
  for (const char *p = in; *p; p++) {
    const char *rep = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
    size_t need = rep ? 2 : 1;
    if (o + need + 1 > len) break;
    if (rep)
      memcpy(out + o, rep, 2);
    else
      out[o] = *p;
    o += need;
  }
  out[o] = '\0';
}

void trun_obs_timer_expired(trun_obs *o, pid_t pid, int rank, int local_rank, const char *scope, int signal) {
  if (o == NULL) return;
  char lab[sizeof(o->scopes[0].scope)];
  label_value(scope, lab, sizeof(lab));
  int i;
  for (i = 0; i < o->nscopes && strcmp(o->scopes[i].scope, lab) != 0; i++) {
  }
  if (i == o->nscopes) {
    if (o->nscopes == MAX_SCOPES) snprintf(lab, sizeof(lab), "(other)");
    for (i = 0; i < o->nscopes && strcmp(o->scopes[i].scope, lab) != 0; i++) {
    }
    if (i == o->nscopes && o->nscopes == MAX_SCOPES) i = MAX_SCOPES - 1;
    if (i == o->nscopes) snprintf(o->scopes[o->nscopes++].scope, sizeof(lab), "%s", lab);
  }
  o->scopes[i].n++;
  json_t *f =
      json_pack("{s:i,s:i,s:i,s:s}", "pid", (int)pid, "rank", rank, "local_rank", local_rank, "scope", scope);
  if (signal > 0) {
    char name[32];
    trun_signal_name(signal, name, sizeof(name));
    json_object_set_new(f, "signal", json_string(name));
  }
  trun_events_emit(o->ev, "timer_expired", f);
}

void trun_obs_doctor(trun_obs *o, int round, const trun_doctor_outcome *d) {
  if (o == NULL || d == NULL) return;
  json_t *f = json_pack("{s:i,s:b}", "round", round, "analyzed", d->analyzed);
  if (d->analyzed) {
    json_object_set_new(f, "agents", json_integer(d->agents));
    json_object_set_new(f, "missing", json_integer(d->missing));
    json_object_set_new(f, "split_pods", json_boolean(d->split > 0));
    json_object_set_new(f, "agents_per_host", json_integer(d->max_per_host));
    json_object_set_new(f, "gpu_clash", json_boolean(d->gpu_clash > 0));
    json_object_set_new(f, "efa_warning", json_boolean(d->efa > 0));
  }
  json_object_set_new(f, "on_split_pods", json_string(d->fail_on_findings ? "fail" : "warn"));
  json_object_set_new(f, "action", json_string(d->action ? d->action : "continue"));
  trun_events_emit(o->ev, "doctor", f);
}

void trun_obs_preflight(trun_obs *o, int round, const trun_pf_outcome *p) {
  if (o == NULL || p == NULL) return;
  json_t *f = json_pack("{s:i,s:s}", "round", round, "verdict", p->verdict);
  if (p->peak_gbps >= 0) {
    json_object_set_new(f, "peak_busbw_gbps", json_real(p->peak_gbps));
    json_object_set_new(f, "at_bytes", json_integer((json_int_t)p->at_bytes));
  }
  if (p->fabric[0]) json_object_set_new(f, "fabric", json_string(p->fabric));
  if (p->cause[0]) json_object_set_new(f, "cause", json_string(p->cause));
  trun_events_emit(o->ev, "preflight", f);
}

void trun_obs_failure(trun_obs *o, const trun_failure *fs, size_t n, int final, int own) {
  if (o == NULL || n == 0) return;
  int root = trun_failure_root(fs, n);
  if (root < 0) return;
  const trun_failure *f = &fs[root];
  for (int k = 1; own && f->cause_kind && k < TRUN_CAUSE__COUNT; k++)
    if (strcmp(f->cause_kind, trun_cause_name((trun_cause_kind)k)) == 0) o->causes[k]++;
  if (o->ev == NULL) return;
  char label[32];
  status_label(f->exit_code, label, sizeof(label));
  json_t *j = json_pack("{s:b,s:i,s:i,s:i,s:i,s:s}", "final", final, "rank", f->global_rank, "local_rank",
                        f->local_rank, "node_rank", f->group_rank, "pid", (int)f->pid, "root_host",
                        f->host ? f->host : "");
  if (f->node_lost)
    json_object_set_new(j, "node_lost", json_true());
  else if (f->exit_code >= 0)
    json_object_set_new(j, "exit_code", json_integer(f->exit_code));
  else
    json_object_set_new(j, "signal", json_string(label));
  if (f->message) json_object_set_new(j, "message", json_string(f->message));
  if (f->cause) json_object_set_new(j, "cause", json_string(f->cause));
  if (f->cause_kind) json_object_set_new(j, "cause_kind", json_string(f->cause_kind));
  json_object_set_new(j, "failures", json_integer((json_int_t)n));
  if (!own) json_object_set_new(j, "known", json_true());
  trun_events_emit(o->ev, own ? "failure" : "remote_failure", j);
}

void trun_obs_remote_unknown(trun_obs *o, int final, int node_rank, const char *why) {
  if (o == NULL || o->ev == NULL) return;
  trun_events_emit(o->ev, "remote_failure",
                   json_pack("{s:b,s:b,s:i,s:s}", "final", final, "known", 0, "node_rank", node_rank,
                             "message", why ? why : ""));
}

void trun_obs_health(trun_obs *o, const trun_health *h) {
  if (o == NULL || h == NULL) return;
  for (int i = 0; i < h->n; i++) {
    health_metric(o, h->c[i].name, h->c[i].status == TRUN_HEALTH_FAIL);
    trun_events_emit(o->ev, "health", trun_obs_health_json(&h->c[i]));
  }
}

void trun_obs_xid(trun_obs *o, int gpu, const char *uuid, unsigned long long xid, const char *meaning,
                  int hardware) {
  if (o == NULL) return;
  if (hardware) health_metric(o, "xid", 1);
  trun_events_emit(
      o->ev, "xid",
      json_pack("{s:i,s:s,s:I,s:s,s:b,s:s}", "gpu", gpu, "uuid", uuid ? uuid : "", "xid", (json_int_t)xid,
                "meaning", meaning, "hardware", hardware, "action", hardware ? "leave" : "none"));
}

void trun_obs_node_unhealthy(trun_obs *o, const trun_failure *f) {
  if (o == NULL || f == NULL) return;
  trun_events_emit(o->ev, "node_unhealthy",
                   json_pack("{s:s,s:i,s:f,s:s}", "root_host", f->host ? f->host : "", "node_rank",
                             f->group_rank, "time", f->timestamp, "message", f->message ? f->message : ""));
}

json_t *trun_obs_health_json(const trun_health_check *c) {
  return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "name", c->name, "status", trun_health_status_name(c->status),
                   "value", c->value, "threshold", c->threshold, "reason", c->reason, "source", c->source);
}

void trun_obs_close(trun_obs *o, int code) {
  if (o == NULL) return;
  size_t dropped = trun_events_dropped(o->ev);
  json_t *f = json_pack("{s:i,s:i}", "code", code, "restarts", (int)o->restarts);
  if (dropped) json_object_set_new(f, "events_dropped", json_integer((json_int_t)dropped));
  trun_events_emit(o->ev, "job_end", f);
  if (dropped) trun_warn("%zu events were dropped: the event stream's reader did not keep up", dropped);
  trun_events_close(o->ev);
  trun_metrics_close(o->metrics);
  free(o);
}
