/* Split-pod doctor: after each rendezvous round every trun agent publishes its host identity (instance id,
 * boot id, host name, GPU UUIDs, usable EFA devices) under <key_base>/doctor/<group rank>; group rank 0
 * reads them and reports (stderr, one block):
 *   (a) several agents on one physical host (same boot id, or same EC2 instance id): NCCL sees them as
 *       different nodes and their GPUs talk over EFA / TCP instead of NVLink — which agents, GPUs each, the
 *       measured cost, the fix;
 *   (b) one GPU UUID seen by two agents (error);
 *   (c) fewer usable EFA devices than the GPUs need on an EFA instance type (warning).
 * Test hooks (environment): TRUN_BOOT_ID (the boot id itself), TRUN_PROC_ROOT (default /proc). */
#ifndef TRUN_DOCTOR_H
#define TRUN_DOCTOR_H

#include <jansson.h>
#include <stdio.h>

#include "agent/discover/discover.h"
#include "agent/rdzv/rdzv.h"

#define TRUN_DOCTOR_MAX_FINDINGS 32

typedef struct {
  int group_rank;
  int nproc;
  char hostname[256];
  char boot_id[64];
  char instance_id[64];
  char instance_type[64];
  int ngpu;
  char gpus[TRUN_MAX_GPUS][96]; /* UUIDs of the GPUs this agent's workers see */
  int nefa;
  char efa[TRUN_MAX_RDMA][64]; /* usable EFA devices (a uverbs node in this container) */
} trun_host_id;

typedef enum { TRUN_DOCTOR_WARN = 1, TRUN_DOCTOR_ERROR = 2 } trun_doctor_severity;

typedef struct {
  trun_doctor_severity severity;
  char kind[16]; /* "split", "gpu-clash", "efa" */
  char text[2048];
} trun_doctor_finding;

typedef struct {
  int n;
  trun_doctor_finding f[TRUN_DOCTOR_MAX_FINDINGS];
  int split;        /* (a) findings */
  int errors;       /* severity ERROR */
  int gpu_clash;    /* (b) findings */
  int efa;          /* (c) findings */
  int max_per_host; /* the most agents on one physical host (1: no split) */
} trun_doctor_findings;

/* What this agent's doctor step found, for the "doctor" event. Group rank 0 analyzed (analyzed = 1): agents
 * checked, missing, the findings' counts; the others know only the action (and that only with
 * --on-split-pods=fail). action: "none" (nothing found), "continue" (findings, --on-split-pods=warn, or a
 * non-zero group rank without a verdict to wait for), "stop". */
typedef struct {
  int analyzed;
  int agents, missing;
  int split, max_per_host, gpu_clash, efa;
  int fail_on_findings;
  const char *action;
} trun_doctor_outcome;

/* This agent's identity from a discovered node. */
void trun_doctor_identity(const trun_node *node, int group_rank, int nproc, trun_host_id *out);
json_t *trun_doctor_identity_json(const trun_host_id *id);
/* 0, or -1 when j is not an identity object. */
int trun_doctor_identity_from_json(const json_t *j, trun_host_id *out);
/* Pure analysis over every agent's identity (in any order). */
void trun_doctor_analyze(const trun_host_id *ids, int n, trun_doctor_findings *out);
/* The report block; missing = agents that did not publish (torchrun agents in a mixed fleet). */
void trun_doctor_print(FILE *out, const trun_doctor_findings *f, int nagents, int missing);

/* Publishes self under doctor/<group rank> of the round's exchange (trun_rdzv_exchange_set: the round's key
 * space, static and trun /trun/<run_id>/r<round>; c10d <round prefix>trun). Group rank 0 waits at most
 * wait_ms for the others, analyzes and prints the report, and publishes doctor/verdict ("ok" or "fail";
 * "fail" when fail_on_findings and there is a split or an error). With fail_on_findings the other agents
 * wait for the verdict. Returns 1 when this agent must stop (verdict "fail"), 0 otherwise (store problems
 * are warned about and do not stop the job). */
int trun_doctor_exchange(trun_rdzv *r, const trun_host_id *self, int wait_ms, int fail_on_findings,
                         trun_doctor_outcome *out);
/* The agent's hook after each rendezvous round (cfg: the job's; nproc: this node's workers): discovers this
 * node (envp's CUDA_VISIBLE_DEVICES) and exchanges in the round's key space, waiting briefly for peers that
 * may be torchrun agents (trun_rdzv_foreign_peers). */
int trun_doctor_round(trun_rdzv *r, const trun_config *cfg, int nproc, char **envp, const trun_node *node,
                      trun_doctor_outcome *out);

#endif
