/* trun --nccl-report: NCCL's transport choices, per node, at start-up and at the end of each round.
 * Each worker gets (unless the user set them) NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,P2P,NET and
 * NCCL_DEBUG_FILE=<attempt dir>/<local rank>/nccl.%h.%p.log, so the console is not flooded. A thread
 * reads those files TRUN_NCCL_REPORT_AFTER seconds (default 30) after the workers start and prints the
 * report (agent/nccl/nccl_log.h) once NCCL has logged a connection; when the workers end it prints it again
 * if anything changed since (or for the first time). */
#ifndef TRUN_NCCL_REPORT_H
#define TRUN_NCCL_REPORT_H

#include "config/config.h"

typedef struct trun_nccl_report trun_nccl_report;

/* Worker environment for a rank whose log directory is rank_dir. 0 or -ENOMEM. */
int trun_nccl_report_env(char ***envp, const char *rank_dir);
/* Starts the report of one round (attempt_dir holds <local rank>/nccl.*.log); env = the agent's environment
 * (user-set NCCL_DEBUG / NCCL_DEBUG_FILE are noted). NULL when the report is off or files are off. */
trun_nccl_report *trun_nccl_report_start(const trun_config *cfg, char *const *env, const char *attempt_dir);
/* The round is over: final report (if new), thread joined, r freed. NULL is fine. */
void trun_nccl_report_finish(trun_nccl_report *r);

#endif
