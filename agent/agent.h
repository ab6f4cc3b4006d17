/* agent: the life cycle of one node's workers: plan → rendezvous → spawn → supervise → restart or report
 * (agent.c; a worker's files, streams and process in agent_workers.c; failure records and the report in
 * agent_failures.c; the workers' torchrun environment in worker_env.c; --nproc-per-node in nproc.c;
 * --explain in explain.c; --dry-run in agent_dryrun.c; --watch-stdin in agent_stdin.c).
 * May use: base, config, discover, proc, rdzv, nccl, observe, hang. Used by the launcher.
 * Exit codes: base/exit.h's table (TRUN_EXIT_*), the one every path uses.
 */
#ifndef TRUN_AGENT_H
#define TRUN_AGENT_H

#include <stdio.h>

#include "base/base.h"
#include "config/config.h"

/* Runs the job described by cfg with envp as the base environment; returns the exit code. */
int trun_agent_run(const trun_config *cfg, char **envp);
/* --dry-run: prints the resolved plan and starts nothing. Returns the exit code. */
int trun_agent_dry_run(const trun_config *cfg, char **envp, FILE *out);
/* Local worker count for --nproc-per-node (int, cpu, gpu, auto). 0 or -1 with a reason. */
int trun_nproc_resolve(const char *spec, int *nproc, char *err, size_t errlen);
/* trun --explain: discovers the node (IMDS unless cfg->no_imds), prints the summary and every decision
 * (variable, value, source, reason) to out, starts nothing. Returns the exit code (0; 2 for a bad
 * --nproc-per-node). */
int trun_explain(const trun_config *cfg, char **envp, FILE *out);
/* Before anything starts (agent_script.c): the workers' interpreter (unless --no-python) and the script (a
 * file; an executable for --no-python; a top-level module the interpreter finds for -m) exist. 0, or -1
 * with the reason in err (exit 2). */
int trun_agent_check_script(const trun_config *cfg, char **envp, char *err, size_t len);
/* The workers' interpreter as a path and the rule that chose it, e.g. "/usr/bin/python3 (the first
 * python3 on PATH; set PYTHON_EXEC to choose another)". */
void trun_agent_describe_python(char **envp, char *out, size_t len);

#endif
