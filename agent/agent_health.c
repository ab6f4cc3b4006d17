/* Node health for the agent (agent/agent_int.h): the gate before the first rendezvous (--health-check), the
 * Xid watcher during the job, the records that tell the other nodes why this node left, and the other
 * nodes' records as node rank 0 reads them.
 *
 * Records are failure records (agent/proc/report.h) as JSON in the rendezvous store, one job-wide list
 * (trun_rdzv_health_publish / _read, agent/rdzv/rdzv.h). A node that never joined (a failed gate: it
 * reaches the store only to write its record, trun_rdzv_reach) and one that leaves in the middle of a round
 * (a hardware Xid) are found the same way; every agent remembers how many it has read. A record's host is
 * the node's --local-addr (else its FQDN); its node rank is -1 for a failed gate. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/proc/proc.h"
#include "agent_int.h"
#include "base/base.h"

/* How the other nodes know this one: its rendezvous address (--local-addr, or what auto found once the
 * rendezvous store was reached), else its FQDN. */
static const char *node_name(const agent *a) {
  if (a->cfg->local_addr) return a->cfg->local_addr;
  const char *auto_addr = trun_rdzv_host_addr(a->rdzv);
  return a->cfg->local_addr_auto && auto_addr[0] ? auto_addr : a->host;
}

/* This node's health record: the cause in message, exit code 3. */
static char *record_json(agent *a, int local_rank, double t, const char *message) {
  trun_failure f;
  memset(&f, 0, sizeof(f));
  int joined = trun_rdzv_info(a->rdzv)->group_world_size > 0;
  f.global_rank = joined && local_rank >= 0 ? trun_rdzv_info(a->rdzv)->base_rank + local_rank : -1;
  f.local_rank = local_rank;
  f.group_rank = joined ? trun_rdzv_info(a->rdzv)->group_rank : -1;
  f.pid = getpid();
  f.exit_code = TRUN_EXIT_UNHEALTHY;
  f.timestamp = t;
  f.host = (char *)node_name(a);
  f.message = (char *)message;
  return trun_failure_to_json(&f);
}

/* ---- the gate ----------------------------------------------------------------------------------- */

/* A node that fails the gate never joins: it reaches the rendezvous store only to leave its record, so
 * that node rank 0 can name it and the failed checks. */
static void publish_gate(agent *a, const trun_health *h) {
  const trun_config *cfg = a->cfg;
  if (cfg->max_nodes <= 1 || cfg->standalone || cfg->endpoint_port <= 0) return;
  char summary[2048], msg[2304];
  trun_health_summary(h, TRUN_HEALTH_FAIL, summary, sizeof(summary));
  snprintf(msg, sizeof(msg), "failed the health gate (--health-check=fail): %s", summary);
  char *json = record_json(a, -1, trun_wall_s(), msg);
  trun_rdzv *r = NULL;
  int rc = json ? trun_rdzv_reach(cfg, 5000, &r) : -ENOMEM;
  if (rc == 0) rc = trun_rdzv_health_publish(r, json);
  if (rc == 0) trun__agent_exclude_self(a, r, node_name(a), "health", msg);
  if (rc < 0)
    trun_warn(
        "health: could not tell the other nodes why this node stays out (rendezvous store %s:%d: %s); node "
        "rank 0 will not name it",
        cfg->endpoint_host, cfg->endpoint_port, strerror(-rc));
  trun_rdzv_free(r);
  free(json);
}

static void on_xid_readable(uv_poll_t *h, int status, int events);

/* The Xid watcher, where NVML lists the GPUs: a child that dies with the agent; its pipe on the loop. */
static void start_xid_watch(agent *a) {
  const trun_node *n = a->node;
  if (strcmp(n->gpu_source ? n->gpu_source : "none", "nvml") != 0 || n->ngpu == 0) {
    trun_debug("health: no Xid watch (no GPU listed by NVML)");
    return;
  }
  char(*uuids)[96] = calloc((size_t)n->ngpu, sizeof(*uuids));
  if (uuids == NULL) return;
  for (int i = 0; i < n->ngpu; i++) snprintf(uuids[i], sizeof(uuids[i]), "%s", n->gpus[i].uuid);
  a->health.xid = trun_xid_watch_start((const char(*)[96])uuids, n->ngpu);
  free(uuids);
  if (a->health.xid == NULL) {
    trun_warn("health: cannot start the Xid watcher (fork: %s); hardware Xids during the job go unnoticed",
              strerror(errno));
    return;
  }
  uv_poll_init(a->loop, &a->health.xid_poll, trun_xid_watch_fd(a->health.xid));
  a->health.xid_poll.data = a;
  a->health.xid_poll_on = 1;
  uv_poll_start(&a->health.xid_poll, UV_READABLE, on_xid_readable);
}

/* Judges the facts of node (the gate's checks, printed, as events and metrics); the number of failed checks.
 */
static int judge(agent *a, trun_node *node, const char *derr, double t0, const char *how) {
  unsigned mask = TRUN_HEALTH_ALL;
  char err[512];
  if (trun_health_parse_checks(a->cfg->health_checks, &mask, err, sizeof(err)) < 0) mask = TRUN_HEALTH_ALL;
  trun_health *h = malloc(sizeof(*h));
  if (h == NULL) return 0;
  trun_health_run(node, a->env, derr, mask, h);
  h->elapsed_ms = trun_mono_ms() - t0;
  a->health.gate_at = trun_mono_ms();
  trun_obs_health(a->obs, h);
  int fails = 0, warns = 0;
  for (int i = 0; i < h->n; i++) {
    const trun_health_check *c = &h->c[i];
    if (c->status == TRUN_HEALTH_FAIL) fails++;
    if (c->status == TRUN_HEALTH_WARN) warns++;
    if (c->status == TRUN_HEALTH_FAIL || c->status == TRUN_HEALTH_WARN)
      fprintf(stderr, "trun: health: %s %s [%s]: %s\n", c->status == TRUN_HEALTH_FAIL ? "FAIL" : "WARN",
              c->name, c->value, c->reason);
  }
  trun_debug("health: %d check(s) in %.1f ms (%s): %d failed, %d warned", h->n, h->elapsed_ms, how, fails,
             warns);
  if (fails && a->cfg->health_check == TRUN_HEALTH_CHECK_FAIL) publish_gate(a, h);
  free(h);
  return fails;
}

/* What the probe's fresh discovery says differently from the cached facts the workers' plan used: one
 * warning (the cache is renewed already: the next launch plans with what NVML says now). */
static void compare_cached(agent *a, const trun_node *now) {
  const trun_node *was = a->node;
  char what[400] = "";
  if (now->ngpu != was->ngpu) snprintf(what, sizeof(what), "%d visible GPU(s), not %d", now->ngpu, was->ngpu);
  for (int i = 0; !what[0] && i < now->ngpu; i++) {
    if (strcmp(now->gpus[i].uuid, was->gpus[i].uuid) != 0 || now->gpus[i].numa_node != was->gpus[i].numa_node)
      snprintf(what, sizeof(what), "GPU %d is %s on NUMA node %d, not %s on %d", i, now->gpus[i].uuid,
               now->gpus[i].numa_node, was->gpus[i].uuid, was->gpus[i].numa_node);
    for (int j = 0; !what[0] && j < now->ngpu; j++)
      if (strcmp(now->links[i][j], was->links[i][j]) != 0 || strcmp(now->p2p[i][j], was->p2p[i][j]) != 0)
        snprintf(what, sizeof(what), "GPUs %d and %d are %s (P2P %s), not %s (P2P %s)", i, j,
                 now->links[i][j], now->p2p[i][j], was->links[i][j], was->p2p[i][j]);
  }
  if (what[0])
    trun_warn(
        "GPU cache: NVML now says %s; this launch planned the workers' NCCL environment from the cached "
        "facts; the cache is renewed for the next launch (--gpu-cache off: NVML at every launch)",
        what);
  else
    trun_debug("GPU cache: NVML agrees with the cached facts of the %d visible GPU(s)", now->ngpu);
}

static void probe_close(agent *a) {
  if (a->health.probe_poll_on) {
    uv_poll_stop(&a->health.probe_poll);
    uv_close((uv_handle_t *)&a->health.probe_poll, NULL);
    a->health.probe_poll_on = 0;
  }
  trun_gpu_probe_free(a->health.probe);
  a->health.probe = NULL;
}

static void on_probe_readable(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  agent *a = h->data;
  trun_node *now = malloc(sizeof(*now));
  char derr[512] = "";
  int rc = 0;
  int got = now ? trun_gpu_probe_poll(a->health.probe, now, &rc, derr, sizeof(derr)) : -1;
  if (got == 0) {
    free(now);
    return;
  }
  if (got < 0) {
    trun_warn("health: the GPU checks could not run in the background (%s); the node was not judged",
              now ? derr : "out of memory");
  } else {
    trun_debug("health: the GPUs' facts read in the background in %.1f ms",
               trun_mono_ms() - a->health.probe_t0);
    if (rc < 0) trun_debug("health: GPU discovery: %s", derr);
    compare_cached(a, now);
    int fails = judge(a, now, derr[0] ? derr : a->discover_err, a->health.probe_t0,
                      "in the background, the workers started");
    if (fails)
      fprintf(
          stderr,
          "trun: health: %d check(s) failed; continuing (--health-check=warn; --health-check=fail keeps an "
          "unhealthy node out of the job)\n",
          fails);
  }
  free(now);
  probe_close(a);
}

/* warn with the GPUs from the cache: the GPU facts are read by a child while the agent goes on (the
 * rendezvous, the workers' start); the verdict warns when it comes. 0, or -1 when no child could start. */
static int gate_in_background(agent *a) {
  a->health.probe_t0 = trun_mono_ms();
  if ((a->health.probe = trun_gpu_probe_start(a->node, a->env)) == NULL) return -1;
  uv_poll_init(a->loop, &a->health.probe_poll, trun_gpu_probe_fd(a->health.probe));
  a->health.probe_poll.data = a;
  a->health.probe_poll_on = 1;
  uv_poll_start(&a->health.probe_poll, UV_READABLE, on_probe_readable);
  trun_debug(
      "health: the GPUs came from the GPU cache; their checks run in the background (--health-check warn)");
  return 0;
}

int trun__agent_health_gate(agent *a) {
  const trun_config *cfg = a->cfg;
  if (cfg->health_check == TRUN_HEALTH_CHECK_OFF || a->node == NULL) return 0;
  double t0 = trun_mono_ms();
  /* The GPU count wants the instance type even without EFA (plan asks IMDS only with EFA): DMI is a file. */
  if (!a->node->instance.instance_type[0]) trun_discover_instance(a->node, 1);
  if (a->node->gpu_cache == TRUN_GPU_CACHE_HIT && cfg->health_check == TRUN_HEALTH_CHECK_WARN &&
      gate_in_background(a) == 0) {
    start_xid_watch(a);
    return 0;
  }
  const char *derr = a->discover_err;
  char fresh_err[512] = "";
  trun_node *now = NULL;
  if (a->node->gpu_cache == TRUN_GPU_CACHE_HIT && (now = malloc(sizeof(*now))) != NULL) {
    *now = *a->node; /* no child for the background: the facts now, here */
    trun_discover_gpus_flags(now, a->env, TRUN_GPU_HEALTH, fresh_err, sizeof(fresh_err));
    if (fresh_err[0]) derr = fresh_err;
  }
  int fails = judge(a, now ? now : a->node, derr, t0, "checks only; GPU discovery read the facts");
  free(now);
  if (fails && cfg->health_check == TRUN_HEALTH_CHECK_FAIL) {
    fprintf(stderr,
            "trun: health: %d check(s) failed: node %s does not join the job (--health-check=fail); exit %d, "
            "so that the scheduler replaces it (docs/health.md)\n",
            fails, node_name(a), TRUN_EXIT_UNHEALTHY);
    return -1;
  }
  if (fails)
    fprintf(stderr,
            "trun: health: %d check(s) failed; continuing (--health-check=warn; --health-check=fail keeps an "
            "unhealthy node out of the job)\n",
            fails);
  start_xid_watch(a);
  return 0;
}

int trun__agent_health_recheck(agent *a) {
  const trun_config *cfg = a->cfg;
  double every = trun_rdzv_wait_health_interval(cfg);
  if (cfg->health_check != TRUN_HEALTH_CHECK_FAIL || a->node == NULL || a->health.unhealthy || every <= 0 ||
      trun_mono_ms() - a->health.gate_at < every * 1000)
    return 0;
  unsigned mask = TRUN_HEALTH_ALL;
  char err[512];
  if (trun_health_parse_checks(cfg->health_checks, &mask, err, sizeof(err)) < 0) mask = TRUN_HEALTH_ALL;
  /* The GPUs' facts as they are now (NVML in a child), on a copy: the workers' plan keeps the first. */
  trun_health *h = malloc(sizeof(*h));
  trun_node *now = malloc(sizeof(*now));
  if (h == NULL || now == NULL) {
    free(h);
    free(now);
    return 0;
  }
  *now = *a->node;
  char derr[512] = "";
  if (trun_discover_gpus_flags(now, a->env, TRUN_GPU_HEALTH, derr, sizeof(derr)) < 0)
    trun_debug("health: GPU discovery: %s", derr);
  trun_health_run(now, a->env, derr[0] ? derr : a->discover_err, mask, h);
  free(now);
  a->health.gate_at = trun_mono_ms();
  int fails = 0;
  for (int i = 0; i < h->n; i++)
    if (h->c[i].status == TRUN_HEALTH_FAIL) {
      fails++;
      fprintf(stderr, "trun: health: FAIL %s [%s]: %s\n", h->c[i].name, h->c[i].value, h->c[i].reason);
    }
  if (fails) {
    trun_obs_health(a->obs, h);
    char summary[400];
    trun_health_summary(h, TRUN_HEALTH_FAIL, summary, sizeof(summary));
    snprintf(a->health.msg, sizeof(a->health.msg),
             "failed the health gate while it waited in the rendezvous (--health-check=fail): %s", summary);
    a->health.unhealthy = 1;
    a->health.kind = "health";
    a->health.lr = -1;
    a->health.time = trun_wall_s();
    trun_error("%s; node %s leaves the job and exits %d, so that the scheduler replaces it", a->health.msg,
               node_name(a), TRUN_EXIT_UNHEALTHY);
  }
  free(h);
  return fails > 0;
}

/* ---- Xids during the job ------------------------------------------------------------------------ */

static void on_xid(agent *a, const trun_xid_event *e) {
  int hardware = 0;
  const char *meaning = trun_xid_meaning(e->xid, &hardware);
  const trun_gpu *g = e->gpu >= 0 && e->gpu < a->node->ngpu ? &a->node->gpus[e->gpu] : NULL;
  char what[512];
  if (g)
    snprintf(what, sizeof(what), "GPU %d %s Xid %llu: %s", g->visible_index, g->uuid, e->xid, meaning);
  else
    snprintf(what, sizeof(what), "a GPU (NVML did not say which) Xid %llu: %s", e->xid, meaning);
  trun_obs_xid(a->obs, g ? g->visible_index : -1, g ? g->uuid : "", e->xid, meaning, hardware);
  if (g && g->visible_index >= 0 && g->visible_index < TRUN_ROUND_XID_GPUS)
    a->health.round_xid[g->visible_index] =
        e->xid; /* a hang of its rank consults it (trun__agent_hang_hardware) */
  if (!hardware) {
    trun_warn("%s (not the hardware's: the job's own failure handling applies)", what);
    return;
  }
  if (a->health.unhealthy) {
    trun_error("also %s", what);
    return;
  }
  a->health.unhealthy = 1;
  snprintf(a->health.msg, sizeof(a->health.msg), "%s", what);
  a->health.lr = g && g->visible_index < a->nproc ? g->visible_index : -1;
  a->health.time = e->time;
  trun_error("%s: node %s leaves the job and exits %d, so that the scheduler replaces it", what, node_name(a),
             TRUN_EXIT_UNHEALTHY);
  /* In a round the loop runs on its own: leave now, then stop the workers. Otherwise the agent waits on
   * the store (its connection busy): rounds() sees a->health.unhealthy when the wait returns. */
  if (a->stop.in_round) {
    trun__agent_leave_unhealthy(a);
    trun__round_stop(a, OUT_FAILED, a->health.lr, TRUN__CAUSE_UNHEALTHY);
  }
}

int trun__agent_hang_hardware(agent *a, int lr, const char *hang) {
  int ngpu = a->node ? a->node->ngpu : 0;
  if (ngpu <= 0 || a->health.unhealthy || lr < 0) return 0;
  int vi = lr % ngpu;
  unsigned long long x = vi < TRUN_ROUND_XID_GPUS ? a->health.round_xid[vi] : 0;
  if (x == 0 || x == 13 || x == 31 || x == 43 || x == 45) return 0; /* none, or the application's */
  const trun_gpu *g = NULL;
  for (int i = 0; i < ngpu; i++)
    if (a->node->gpus[i].visible_index == vi) g = &a->node->gpus[i];
  a->health.unhealthy = 1;
  a->health.kind = "xid";
  snprintf(a->health.msg, sizeof(a->health.msg),
           "GPU %d %s Xid %llu (%s) while rank %d hung in a collective (NCCL RAS)", vi, g ? g->uuid : "", x,
           trun_xid_meaning(x, NULL), trun_rdzv_info(a->rdzv)->base_rank + lr);
  a->health.lr = lr;
  a->health.time = trun_wall_s();
  trun_error(
      "%s: the hang has hardware evidence: node %s leaves the job and exits %d, so that the scheduler "
      "replaces it (the hang: %.300s)",
      a->health.msg, node_name(a), TRUN_EXIT_UNHEALTHY, hang);
  if (a->stop.in_round) trun__agent_leave_unhealthy(a);
  return 1;
}

static void on_xid_readable(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  agent *a = h->data;
  trun_xid_event ev[8];
  int ready = 0, n;
  char err[256] = "";
  while ((n = trun_xid_watch_read(a->health.xid, ev, 8, &ready, err, sizeof(err))) > 0)
    for (int i = 0; i < n; i++) on_xid(a, &ev[i]);
  if (n < 0) {
    trun_warn("health: the Xid watcher ended (%s); hardware Xids during the job go unnoticed", err);
    uv_poll_stop(h);
    trun_xid_watch_stop(a->health.xid);
    a->health.xid = NULL;
  } else if (ready) {
    trun_debug("health: watching %d GPU(s) for Xid events", a->node->ngpu);
  }
}

/* ==== The single place where this node leaves the job because it is unhealthy (a hardware Xid) ==== */
void trun__agent_leave_unhealthy(agent *a) {
  if (a->health.left || !a->health.unhealthy) return;
  a->health.left = 1;
  if (a->cfg->max_nodes > 1 && trun_rdzv_connected(a->rdzv)) {
    char *json = record_json(a, a->health.lr, a->health.time, a->health.msg);
    int rc = json ? trun_rdzv_health_publish(a->rdzv, json) : -ENOMEM;
    if (rc < 0)
      trun_warn("health: could not publish this node's cause in the rendezvous store: %s", strerror(-rc));
    free(json);
    trun__agent_exclude_self(a, a->rdzv, node_name(a), a->health.kind ? a->health.kind : "xid",
                             a->health.msg);
  }
  /* The other nodes start their next round at once instead of after this node's heartbeat expires: its
   * loss record names the Xid (rdzv_live.c; in a round only: between rounds the rendezvous notices). */
  if (trun_rdzv_leave_now(a->rdzv, a->health.msg) < 0)
    trun_debug("health: not in a round: the other nodes notice this node's absence at the next rendezvous");
}

void trun__agent_health_stuck(agent *a, worker *w) {
  if (a->health.unhealthy) return;
  a->health.unhealthy = 1;
  snprintf(a->health.msg, sizeof(a->health.msg),
           "rank %d (local %d, pid %d) on %s: SIGKILL did not end it: %.200s",
           trun_rdzv_info(a->rdzv)->base_rank + w->local_rank, w->local_rank, (int)w->pid, a->host, w->stuck);
  a->health.kind = "stuck"; /* a hang in the kernel: the node's trouble, exit 3 (base/exit.h) */
  a->health.lr = w->local_rank;
  a->health.time = w->exit_time;
  trun__agent_leave_unhealthy(a);
}

int trun__agent_unhealthy_exit(agent *a) {
  fprintf(stderr,
          "trun: node %s is unhealthy: %s; exit %d, so that the scheduler replaces it (docs/health.md)\n",
          node_name(a), a->health.msg, TRUN_EXIT_UNHEALTHY);
  return TRUN_EXIT_UNHEALTHY;
}

void trun__agent_after_round_health(agent *a) { trun__agent_failure_streak(a, node_name(a)); }

/* ---- what the other nodes published ------------------------------------------------------------- */

/* 1 when fs[0..n) already holds this record (the static backend's collected root cause of the same node). */
static int known(const trun_failure *fs, size_t n, const trun_failure *f) {
  for (size_t i = 0; i < n; i++)
    if (fs[i].message && f->message && strcmp(fs[i].message, f->message) == 0 && fs[i].host && f->host &&
        strcmp(fs[i].host, f->host) == 0)
      return 1;
  return 0;
}

void trun__agent_health_news(agent *a, trun_failure *fs, size_t *n, size_t cap) {
  if (a->cfg->max_nodes <= 1 || !trun_rdzv_connected(a->rdzv) ||
      a->cfg->health_check == TRUN_HEALTH_CHECK_OFF)
    return;
  char **rec = NULL;
  int nrec = 0;
  if (trun_rdzv_health_read(a->rdzv, a->health.seen, &rec, &nrec) < 0) return;
  for (int i = 0; i < nrec; i++) {
    a->health.seen++;
    trun_failure f;
    memset(&f, 0, sizeof(f));
    int ok = trun_failure_from_json(rec[i], strlen(rec[i]), &f) == 0;
    free(rec[i]);
    if (!ok || (f.pid == getpid() && f.host && strcmp(f.host, node_name(a)) == 0)) {
      trun_failure_free(&f);
      continue;
    }
    if (trun_rdzv_info(a->rdzv)->group_rank == 0) {
      char who[64] = "";
      if (f.group_rank >= 0) snprintf(who, sizeof(who), "node rank %d, ", f.group_rank);
      fprintf(stderr, "trun: health: node %s (%sexit %d) left the job: %s\n", f.host ? f.host : "?", who,
              f.exit_code, f.message ? f.message : "unhealthy");
      trun_obs_node_unhealthy(a->obs, &f);
    }
    if (fs && n && *n < cap && !known(fs, *n, &f))
      fs[(*n)++] = f;
    else
      trun_failure_free(&f);
  }
  free(rec);
}

void trun__agent_health_close(agent *a) {
  if (a->health.probe) {
    trun_debug("health: the job ended before the GPU checks in the background did (%.0f ms); not judged",
               trun_mono_ms() - a->health.probe_t0);
    probe_close(a);
  }
  if (a->health.xid_poll_on) {
    uv_poll_stop(&a->health.xid_poll);
    uv_close((uv_handle_t *)&a->health.xid_poll, NULL);
    a->health.xid_poll_on = 0;
  }
  trun_xid_watch_stop(a->health.xid);
  a->health.xid = NULL;
}
