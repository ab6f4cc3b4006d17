/* The agent: plan → rendezvous → spawn → supervise → restart or report.
 * Exit codes (torchrun's): 0 every worker succeeded, 1 a worker failed (restarts used up), the agent was
 * stopped by a signal, or the rendezvous failed; 2 bad input (the launcher's). */
#ifndef TRUN_AGENT_H
#define TRUN_AGENT_H

#include <stdio.h>

#include "config/config.h"

/* Runs the job described by cfg with envp as the base environment; returns the exit code. */
int trun_agent_run(const trun_config *cfg, char **envp);
/* --dry-run: prints the resolved plan and starts nothing. Returns the exit code. */
int trun_agent_dry_run(const trun_config *cfg, char **envp, FILE *out);
/* Local worker count for --nproc-per-node (int, cpu, gpu, auto). 0 or -1 with a reason. */
int trun_nproc_resolve(const char *spec, int *nproc, char *err, size_t errlen);

#endif
