/* The restart policy of the agent (agent.c's rounds): how many restarts this run may still use when the job
 * was requeued before (--restart-offset, else $SLURM_RESTART_COUNT: each requeue counts as one restart, so
 * that --max-restarts is the job's total), the back-off before a restart (--restart-backoff), and the crash
 * loop verdict (--crash-loop K:SECONDS: K failed rounds in a row, each ended within SECONDS of its start).
 * docs/supervision.md#restarts. Part of the agent module (its own header like worker_env.h). */
#ifndef TRUN_RESTART_POLICY_H
#define TRUN_RESTART_POLICY_H

#include "base/base.h"
#include "config/config.h"

/* The longest back-off (unless --restart-backoff itself is longer). */
#define TRUN_BACKOFF_MAX_S 60.0

typedef struct {
  int max_restarts;     /* --max-restarts: the job's total */
  int offset;           /* restarts used before this run (requeues) */
  char offset_from[48]; /* where offset came from: "--restart-offset", "SLURM_RESTART_COUNT", "" (none) */
  double backoff;       /* --restart-backoff */
  int loop_rounds;      /* --crash-loop K, 0: off */
  double loop_window;   /* --crash-loop SECONDS (60 when off): a failure within it is fast */
  int fast_streak;      /* failed rounds in a row that ended within loop_window of their start */
} trun_restart_policy;

/* From the configuration and the agent's environment (SLURM_RESTART_COUNT when --restart-offset is unset;
 * a malformed value is said on stderr and taken as 0). */
void trun_restart_policy_init(trun_restart_policy *p, const trun_config *cfg, char **envp);
/* Restarts this run may use: --max-restarts less the offset, at least 0. */
int trun_restart_policy_remaining(const trun_restart_policy *p);
/* A round failed after ran_s seconds of its workers: 1 when that makes a crash loop (stop), else 0. */
int trun_restart_policy_failed(trun_restart_policy *p, double ran_s);
/* A round ended otherwise (a node lost, a membership change): the streak starts again. */
void trun_restart_policy_reset(trun_restart_policy *p);
/* Seconds to wait before the next restart: none after one fast failure (a one-off crash restarts at once),
 * backoff x 2^(streak - 2) from the second fast failure in a row on, else 0. */
double trun_restart_policy_delay(const trun_restart_policy *p);
/* Restarts left at the job's attempt (trun_rdzv_round.attempt: 0 at the job's start, one more per restart,
 * the same on every node; a spare that joins at attempt 2 has two fewer): the remaining less attempt, >= 0.
 */
int trun_restart_policy_left(const trun_restart_policy *p, int attempt);
/* What follows a round that needs a restart (failed: 1 when its workers failed, here or on another node,
 * after ran_s seconds; 0 for a node lost, which starts the fast-failure streak again), at the job's
 * attempt: a restart, or the end by a crash loop (checked first) or by restarts spent. */
typedef enum { TRUN_RESTART_GO, TRUN_RESTART_CRASH_LOOP, TRUN_RESTART_SPENT } trun_restart_next;
trun_restart_next trun_restart_policy_next(trun_restart_policy *p, int failed, double ran_s, int attempt);
/* The exit code once no restart is left: TRUN_EXIT_NO_PROGRESS when requeues spent part of the budget
 * (another requeue cannot restart anything), else 1 (torchrun's). */
int trun_restart_policy_exhausted_code(const trun_restart_policy *p);

#endif
