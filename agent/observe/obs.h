/* Observability hooks of the agent: each call records one happening in the event stream (--events,
 * agent/observe/events.h) and in the Prometheus metrics (--metrics-port, agent/observe/metrics.h). Both are
 * optional; the hooks are cheap no-ops for what is off. Event names and fields: docs/observability.md. */
#ifndef TRUN_OBS_H
#define TRUN_OBS_H

#include <jansson.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/discover/discover.h"
#include "agent/nccl/nccl.h"
#include "agent/proc/proc.h"
#include "agent/rdzv/rdzv.h"
#include "config/config.h"

typedef struct trun_obs trun_obs;

/* Opens the event stream and the metrics endpoint on loop. 0, or -1 with a reason in err (bad --events
 * path or --metrics-port in use: the caller exits 2). */
int trun_obs_open(const trun_config *cfg, uv_loop_t *loop, const char *host, trun_obs **out, char *err,
                  size_t errlen);
/* The rendezvous state: group rank for events, the hosted stores for trun_store_* metrics. */
void trun_obs_set_rdzv(trun_obs *o, const trun_rdzv *r);
void trun_obs_discovery(trun_obs *o, int nproc, char **envp, const trun_node *node);
void trun_obs_rdzv_start(trun_obs *o, int round);
/* error: NULL on success. */
void trun_obs_rdzv_end(trun_obs *o, int round, const char *error);
void trun_obs_worker_start(trun_obs *o, pid_t pid, int rank, int local_rank, int attempt,
                           const char *nccl_ras);
/* --warm-start: a worker started warm (from the pool) or cold: trun_worker_starts_total{start}. */
void trun_obs_warm_start(trun_obs *o, int warm);
/* status: exit code, or -signal; torn_down: stopped by the agent. */
void trun_obs_worker_exit(trun_obs *o, pid_t pid, int rank, int local_rank, int status, int torn_down);
void trun_obs_restart(trun_obs *o, int attempt, int remaining);
void trun_obs_membership(trun_obs *o, int waiting);
/* The job has no secret agent token (trun_rdzv_token_public): "insecure_token" event with its run id and
 * the warning's words. */
void trun_obs_insecure_token(trun_obs *o, const char *run_id, const char *message);
/* A wait of the agent reports (agent/rdzv/rdzv.h, "waits"): the "waiting" event, and the trun_wait_seconds
 * metric while it lasts (its done report clears it). */
void trun_obs_waiting(trun_obs *o, const trun_wait_info *w);
/* A node of the round is lost (the liveness record, agent/rdzv/rdzv.h). */
void trun_obs_node_lost(trun_obs *o, const trun_rdzv_loss *l);
/* The workers run again after a loss: world, nodes, and seconds from the loss to this moment. */
void trun_obs_recovered(trun_obs *o, int world_size, int nnodes, double seconds);
/* A worker SIGKILL did not end (state: "still in state D ..."): "worker_stuck" event, and
 * trun_failure_causes_total{cause="stuck"}. */
void trun_obs_stuck(trun_obs *o, pid_t pid, int rank, int local_rank, const char *state);
void trun_obs_stall(trun_obs *o, pid_t pid, int rank, int local_rank, double idle_s, int signal);
/* NCCL RAS shows a hung collective whose culprit is worker pid (rank, local_rank) of this node: "hang" event
 * (communicator, collective kind and count the others wait in, seconds frozen, what the culprit launched),
 * trun_hangs_total. */
void trun_obs_hang(trun_obs *o, pid_t pid, int rank, int local_rank, const char *comm, const char *kind,
                   unsigned long long count, double frozen_s, const char *why, const char *fr);
/* torch's file-timer watchdog (ftimer.h) expired scope in worker pid (rank, local_rank; -1 -1: a process
 * of a worker's group) and sends it signal (0: none): "timer_expired" event,
 * trun_timer_expired_total{scope}. */
void trun_obs_timer_expired(trun_obs *o, pid_t pid, int rank, int local_rank, const char *scope, int signal);
/* The split-pod doctor's verdict after a rendezvous round (agent/nccl/doctor.h). */
void trun_obs_doctor(trun_obs *o, int round, const trun_doctor_outcome *d);
/* The --preflight verdict (agent/nccl/preflight.h). */
void trun_obs_preflight(trun_obs *o, int round, const trun_pf_outcome *p);
/* The failures of a round (fs[0..n), local and collected): the root cause goes out as "failure" where it is
 * this node's (own; a lost node's too: it cannot say it), else as "remote_failure" (another node failed
 * first; the same fields), so that one event of the job names the root cause. trun_failure_causes_total
 * counts own root causes only. */
void trun_obs_failure(trun_obs *o, const trun_failure *fs, size_t n, int final, int own);
/* Another node failed first and its record could not be read: "remote_failure" with known false, node_rank
 * (-1: which node is not known) and why. */
void trun_obs_remote_unknown(trun_obs *o, int final, int node_rank, const char *why);
/* The node health checks before the first rendezvous (agent/discover/health.h): one "health" event per check,
 * and trun_health_failed{check} = 1 for each failed one (0 for the others). */
void trun_obs_health(trun_obs *o, const trun_health *h);
/* An Xid on visible GPU gpu (-1 unknown) of this node; hardware: it means the hardware and the node leaves
 * the job ("xid" event; trun_health_failed{check="xid"} = 1). */
void trun_obs_xid(trun_obs *o, int gpu, const char *uuid, unsigned long long xid, const char *meaning,
                  int hardware);
/* Another node left the job unhealthy (a failed gate or a hardware Xid; node rank 0 learns it from the
 * store): "node_unhealthy" event with its host, node rank and cause. */
void trun_obs_node_unhealthy(trun_obs *o, const trun_failure *f);
/* An exclusion of the job's list that is news to this node (agent/rdzv/rdzv.h): "node_excluded" (e->news
 * TRUN_RDZV_EXCL_NEW) or "exclusion_ended" (TRUN_RDZV_EXCL_ENDED) with the node, kind, cause and times;
 * trun_exclusions_total counts the first, trun_nodes_excluded is how many are in force (active). */
void trun_obs_exclusion(trun_obs *o, const trun_rdzv_exclusion *e, int active);
/* One health check as JSON: name, status, value, threshold, reason, source (the "health" event's fields and
 * trun-topo health --json's entries). */
json_t *trun_obs_health_json(const trun_health_check *c);
/* Emits job_end, closes the endpoint and the stream (run the loop afterwards to release handles). */
void trun_obs_close(trun_obs *o, int code);

#endif
