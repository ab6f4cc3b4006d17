/* NCCL preflight: what bandwidth the job's layout should reach, the verdict for measured all-reduce busbw,
 * and the agent's `--preflight` step (one build/trun-preflight per local rank, before the workers).
 * The measuring program is tools/preflight.c (CUDA runtime and NCCL by dlopen; nothing of CUDA in the agent).
 * Reference numbers: shared/spec/gpu-efa-nccl.md §8 (nccl-tests), our H200 x2 capture (327.5 GB/s NVLink,
 * 2.9 GB/s over TCP sockets). */
#ifndef TRUN_PREFLIGHT_H
#define TRUN_PREFLIGHT_H

#include <stddef.h>
#include <sys/types.h>

#include "agent/rdzv/rdzv.h"
#include "config/config.h"

typedef enum { TRUN_PF_PASS = 0, TRUN_PF_WARN, TRUN_PF_FAIL, TRUN_PF_SKIP } trun_pf_verdict;

/* What the job spans, from discovery and the rank environment. */
typedef struct {
  int world;  /* ranks in the communicator */
  int nodes;  /* WORLD_SIZE / LOCAL_WORLD_SIZE */
  int local;  /* ranks on this node */
  int nvlink; /* the local GPUs are NVLink-connected (NVML NV# links) */
  int efa;    /* usable EFA devices on this node */
  char instance_type[64];
} trun_pf_layout;

/* The bandwidth class and its thresholds (busbw, GB/s): pass at or above pass_gbps, warn at or above
 * warn_gbps, fail below. */
typedef struct {
  const char *fabric; /* "nvlink", "pcie", "efa", "socket", "none" */
  double pass_gbps, warn_gbps;
  char why[256];
} trun_pf_expect;

/* Expected bandwidth for a layout (the table in preflight.c). */
void trun_pf_expect_for(const trun_pf_layout *l, trun_pf_expect *e);
/* nccl-tests' all_reduce bus bandwidth: algbw * 2(n-1)/n, algbw = bytes / seconds / 1e9. */
double trun_pf_busbw(double bytes, double seconds, int nranks);
/* Verdict over measured (bytes[i], busbw[i]): the peak busbw against e's thresholds. msg gets one line with
 * the peak, the thresholds and, on warn / fail, a named likely cause. */
trun_pf_verdict trun_pf_judge(const trun_pf_expect *e, const trun_pf_layout *l, const double *bytes,
                              const double *busbw, int n, char *msg, size_t len);
const char *trun_pf_verdict_name(trun_pf_verdict v);

/* A verdict with its parts: the peak busbw (GB/s, -1 when nothing was measured), the size it was reached at,
 * the fabric and, on warn / fail, the named likely cause ("" on pass). */
typedef struct {
  trun_pf_verdict verdict;
  double peak_gbps, at_bytes;
  char fabric[16];
  char cause[256];
} trun_pf_result;

/* trun_pf_judge, filling res as well. */
trun_pf_verdict trun_pf_judge_result(const trun_pf_expect *e, const double *bytes, const double *busbw, int n,
                                     trun_pf_result *res, char *msg, size_t len);
/* The result as one JSON object {"verdict": "PASS", "peak_busbw_gbps", "at_bytes", "fabric", "cause"} written
 * to path (trun-preflight's $TRUN_PREFLIGHT_RESULT, read back by the agent). 0, or -1 (errno). */
int trun_pf_result_write(const char *path, const trun_pf_result *res);
/* Reads what trun_pf_result_write wrote. 0, or -1 (missing or malformed). */
int trun_pf_result_read(const char *path, trun_pf_result *res);

/* trun-preflight's exit codes. */
enum {
  TRUN_PF_EXIT_OK = 0,
  TRUN_PF_EXIT_ERROR = 1,
  TRUN_PF_EXIT_USAGE = 2,
  TRUN_PF_EXIT_FAIL = 3,
  TRUN_PF_EXIT_SKIP = 4
};

/* What the agent's step found, for the "preflight" event: verdict "pass", "warn", "fail", "skip" or "error"
 * (a trun-preflight that could not measure: start failure, crash, time-out); peak_gbps / at_bytes / fabric
 * as local rank 0's trun-preflight measured them (peak_gbps -1: none); cause: why, for all but "pass". */
typedef struct {
  char verdict[8];
  double peak_gbps, at_bytes;
  char fabric[16];
  char cause[512];
} trun_pf_outcome;

/* The workers' environment of local rank lr (malloc'ed, freed with trun_strv_free), as the agent builds it;
 * NULL when out of memory. */
typedef char **(*trun_pf_rank_env)(void *arg, int lr);

/* The agent's --preflight step for this round: a one-line skip when this node has no GPU (env: the agent's
 * environment); otherwise one trun-preflight (next to the trun binary, or $TRUN_PREFLIGHT_BIN;
 * TRUN_PREFLIGHT=1 is --preflight) per local rank with the workers' rank environment (rank_env), waited for
 * (at most $TRUN_PREFLIGHT_TIMEOUT s, default 600); r: the round (trun_rdzv_info). Fills out (may be NULL).
 * 0: continue; 1: stop the job. */
int trun_preflight_agent(char **env, const trun_config *cfg, const trun_rdzv_round *r, int nproc,
                         int restart_count, trun_pf_rank_env rank_env, void *arg, trun_pf_outcome *out);

/* The local part of --preflight for a node that waits in the rendezvous (a spare): starts, as a child in a
 * session of its own, `trun --standalone --nproc-per-node ngpu --no-python <trun-preflight> [options]` (what
 * `trun-topo preflight` runs: this node's GPUs alone), options as trun_preflight_agent's; its local rank 0
 * writes its result to result (may be NULL or ""). env: the agent's environment (its PET_* / TRUN_* settings
 * left out). 0 with *pid set, or -1 with the reason in err. The caller waits for *pid. */
int trun_preflight_local_start(char **env, const trun_config *cfg, int ngpu, const char *result, pid_t *pid,
                               char *err, size_t errlen);

#endif
