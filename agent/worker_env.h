/* Each worker's command line and environment: exactly torchrun's contract
 * (docs/dev/torchrun-internals.md "The workers' argv and environment"). */
#ifndef TRUN_WORKER_ENV_H
#define TRUN_WORKER_ENV_H

#include "agent/discover/discover.h"
#include "agent/proc/proc.h"
#include "agent/rdzv/rdzv.h"
#include "config/config.h"

/* The agent's own environment as the workers inherit it: a copy of envp with OMP_NUM_THREADS=1 when unset
 * and nproc > 1 (*omp_forced set; torchrun prints a warning) and TORCHELASTIC_SIGNALS_TO_HANDLE; plus the
 * NCCL / libfabric variables trun decides for this node (agent/nccl/nccl_env.h; discovery here, IMDS only
 * when usable EFA devices exist; a variable already in envp is never changed), and with --numa-binding the
 * per-local-rank CPU lists in TRUN_NUMA_PLAN ("list0;list1;..."), which trun_worker_envp consumes. */
char **trun_agent_env(char **envp, const trun_config *cfg, int nproc, const trun_node *node, int *omp_forced);
/* trun_discover_node's identity/flags for the agent: instance identity only with usable EFA, per-GPU CPU
 * affinity only for --numa-binding, the GPUs' health facts unless --health-check off, the per-boot GPU cache
 * unless --gpu-cache off or --health-check fail (which judges fresh facts before joining). node NULL above:
 * trun_agent_env discovers with these itself. */
int trun_agent_discover_flags(const trun_config *cfg);

/* Worker local_rank's environment in round r (trun_rdzv_info) of a node of nproc workers, for attempt
 * restart_count: base with the per-round rows of proc's round_vars.h set, in its order. error_file "" when
 * log files are off.
 * TRUN_CPU_AFFINITY = the CPUs the worker is pinned to (its TRUN_NUMA_PLAN entry), removed when none. */
char **trun_worker_envp(char **base, const trun_config *cfg, const trun_rdzv_round *r, int nproc,
                        int local_rank, int restart_count, const char *error_file);
/* The cpulist a worker with environment envp is to be pinned to (TRUN_CPU_AFFINITY), or NULL. */
const char *trun_worker_cpus(char *const *envp);
/* The Python of the environment trun is installed in, as torchrun runs its workers with the Python that
 * started it: when the program at exe lives in a venv's or conda environment's bin/ (../pyvenv.cfg or
 * ../conda-meta exists) and that directory holds an executable python3, out = that path and 0; else -1. */
int trun_env_python(const char *exe, char *out, size_t len);
/* The workers' Python: $PYTHON_EXEC, else the Python of the environment this trun is installed in
 * (trun_env_python of /proc/self/exe, written to buf), else "python3" (searched on PATH at exec). *how (when
 * how is not NULL) says which rule chose it, in words. */
const char *trun_worker_python(char *const *envp, char *buf, size_t len, const char **how);
/* execvp's search: the first executable regular file called name in envp's PATH ("/usr/local/bin:/usr/bin:
 * /bin" when unset). 0 with out set, or -1. */
int trun_worker_which(const char *name, char *const *envp, char *out, size_t len);
/* The torch that the workers' Python would import, found by reading files, no interpreter started
 * (agent/torch_version.c): 0 with *major / *minor and where (the torch directory), or -1 when none was
 * found (--no-python, a layout it does not know: callers keep what works with any torch). */
int trun_worker_torch_version(const trun_config *cfg, char *const *envp, int *major, int *minor, char *where,
                              size_t wlen);
/* [python, -u, (-m), script, args...] or [script, args...] (--no-python), with ${local_rank} replaced.
 * python: $PYTHON_EXEC, else the Python of the environment this trun is installed in (trun_env_python of
 * /proc/self/exe), else python3 from PATH. */
char **trun_worker_argv(const trun_config *cfg, char *const *envp, int local_rank);

#endif
