/* Warm start (--warm-start, docs/warm-start.md): one pre-started Python per local worker slot that has
 * already imported the warm modules (torch, torch.distributed) and becomes that slot's worker when the
 * agent hands it the worker's argv, environment, stdout and stderr over a control socket.
 *
 * A pool process is started by trun_spawn exactly like a cold worker (its own session, PDEATHSIG, default
 * signals, stdin /dev/null, the slot's CPU pinning and open-file limit) and registered with the guard, so
 * once handed over it is the worker: its pid, process group and guard are the cold worker's. It runs the
 * slot's Python with "-u" and the bootstrap of warm_boot.c (isolated from the agent's cwd: it imports
 * nothing before sys.path is the cold worker's), with the slot's environment minus the variables only the
 * rendezvous decides (trun_warm_round_var); a worker whose final environment differs from it in anything
 * else, whose argv is not "<the same python> -u (-c code | -m module | script) ...", or whose script is not a
 * regular file, starts cold, with the reason. */
#ifndef TRUN_WARM_H
#define TRUN_WARM_H

#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "watchdog.h"

typedef struct trun_warm trun_warm;

/* The bootstrap (warm_boot.c). */
extern const char trun__warm_boot[];

/* A pool for nslots local worker slots importing modules ("torch,torch.distributed"); nofile: the
 * RLIMIT_NOFILE its processes get back (NULL: inherit), guard: where their sessions are registered (may be
 * NULL). NULL when out of memory. */
trun_warm *trun_warm_new(int nslots, const char *modules, const struct rlimit *nofile, trun_watchdog *guard);
/* Kills every pool process not handed over (SIGKILL to its session), reaps it and frees the pool. */
void trun_warm_free(trun_warm *p);

/* Starts slot's pool process, if the slot has none and is not disabled: python (the worker's interpreter),
 * tail (the worker's argv after "<python> -u": its script, -m module or -c code and their arguments; the
 * imports see the sys.argv and sys.path[0] it gives, and only a worker with this argv starts warm), cpus
 * (the slot's CPU pinning, NULL none), envp (the slot's environment before the rendezvous; copied). 0 started
 * or nothing to do, -1 (said on stderr; the slot is disabled and its workers start cold). */
int trun_warm_fill(trun_warm *p, int slot, const char *python, char *const *tail, const char *cpus,
                   char *const *envp);
/* --warm-start-cuda: slot's pool processes started from now on make the CUDA primary context of device
 * ordinal (as the slot's CUDA_VISIBLE_DEVICES numbers them) after their imports, through the driver library
 * lib (NULL: libcuda.so.1), so that the worker finds it made; ordinal < 0: none (the default). nccl
 * (--warm-start-nccl): they then also make and destroy a one-rank NCCL communicator on that device with the
 * libnccl the imports loaded, so that NCCL's once-a-process set-up (its kernels) is done before the
 * handover; their NCCL RAS serves clients on a loopback port the pool holds for them (trun_warm_ras). A
 * process already started keeps what it was started with. */
void trun_warm_set_cuda(trun_warm *p, int slot, int ordinal, int nccl, const char *lib);
/* Into out (len bytes): the NCCL RAS client address ("127.0.0.1:<port>") the worker that trun_warm_take
 * last handed slot's pool process serves on (--warm-start-nccl, its pool process said its RAS listens
 * there), "" none (no such worker, or it started cold). */
void trun_warm_ras(const trun_warm *p, int slot, char *out, size_t len);

/* Whether environment variable NAME (with or without "=value") is one only the rendezvous decides (RANK,
 * MASTER_ADDR, TORCHELASTIC_*, ...: read by torch when the worker runs, never at import) and so may differ
 * between a pool process and the worker it becomes: the TRUN_RV_WARM rows of round_vars.h. */
int trun_warm_round_var(const char *name);

/* Why slot's worker with argv and envp cannot start warm: 0 it can; 1 with the reason in why (a short
 * phrase, e.g. "OMP_NUM_THREADS differs from the pool's environment"). */
int trun_warm_check(const trun_warm *p, int slot, char *const *argv, char *const *envp, char *why,
                    size_t len);

/* Hands slot's pool process the worker (argv, envp, out_fd / err_fd as its fds 1 and 2, -1 = the agent's
 * own), without waiting on it (the argv and environment go in a memfd; see send_worker): 0 with *pid the
 * worker's pid (the slot is empty afterwards), 1 with the reason in why when the worker must start cold
 * instead (no pool process, it is still importing, it failed, the send failed, trun_warm_check says no).
 * Only a process that said "ready" is handed a worker. */
int trun_warm_take(trun_warm *p, int slot, char *const *argv, char *const *envp, int out_fd, int err_fd,
                   pid_t *pid, char *why, size_t len);

/* Reads, without waiting, what the pool processes said: the number of slots whose pool process is still
 * importing (alive, not ready, not failed). */
int trun_warm_importing(trun_warm *p);

/* The agent reaped pid with status: 1 when it was a pool process (replaced when it had been ready, the slot
 * disabled with a line on stderr when it failed before), 0 when not one of the pool's. */
int trun_warm_reaped(trun_warm *p, pid_t pid, int status);

/* Waits up to timeout_ms for slot's pool process to have imported its modules: 0 ready, -1 with the reason in
 * why (not ready in time, it failed, it exited). */
int trun_warm_wait_ready(trun_warm *p, int slot, int timeout_ms, char *why, size_t len);
/* Resident memory of slot's pool process in KiB (VmRSS), or -1 when it has none or it cannot be read. */
long trun_warm_rss_kb(const trun_warm *p, int slot);
/* The pid of slot's pool process, 0 when none. */
pid_t trun_warm_pid(const trun_warm *p, int slot);

#endif
