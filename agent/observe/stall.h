/* Hang detection (--stall-timeout, off by default): a worker is live while it writes output (through the
 * agent's pipes or into its log files), its process group uses CPU time (/proc/<pid>/stat utime, stime,
 * cutime, cstime of every process whose process group is the worker's) above TRUN_STALL_CPU_FRACTION of
 * one CPU since its last sign of life, or (with NVML, trun_stall_use_gpus) its GPU (visible GPU local rank
 * mod GPUs) was busy at least $TRUN_STALL_GPU_UTIL percent (default TRUN_STALL_GPU_UTIL_DEFAULT, 0: GPU
 * utilisation does not count) in the newest sample of agent/discover/gpu_util.h's sampler process. A worker
 * without any for the timeout is stalled (at most one per round): --stall-signal goes to its process
 * group, and the round is stopped TRUN_STALL_GRACE_MS later. */
#ifndef TRUN_STALL_H
#define TRUN_STALL_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/discover/discover.h"
#include "agent/proc/proc.h"

#define TRUN_STALL_GRACE_MS 5000
/* CPU time below this fraction of one CPU is background noise, not a sign of life. */
#define TRUN_STALL_CPU_FRACTION 0.05
/* GPU utilisation (percent) from which a worker's GPU is busy. */
#define TRUN_STALL_GPU_UTIL_DEFAULT 10

typedef struct trun_stall trun_stall;
/* local_rank stalled for idle_s seconds. Called with stop = 0 when found (signal: what is sent to it
 * right after, 0 for none), then with stop = 1 when the round should be torn down (at once without a
 * signal, after the grace with one; not if the round ended meanwhile). */
typedef void (*trun_stall_cb)(void *arg, int local_rank, double idle_s, int signal, int stop);

/* NULL when timeout_s <= 0 (off); every function below accepts NULL. */
trun_stall *trun_stall_new(uv_loop_t *loop, double timeout_s, int signal, trun_stall_cb cb, void *arg);
/* The node's visible GPUs (node->gpus, in the workers' order): starts the GPU utilisation sampler when
 * there are any and $TRUN_STALL_GPU_UTIL is not 0. */
void trun_stall_use_gpus(trun_stall *s, const trun_node *node);
/* A new round with nproc workers: forgets the last one and starts watching. */
void trun_stall_begin(trun_stall *s, int nproc);
/* Worker local_rank started: its pid (= process group), streams (may be NULL) and log files ("" none). */
void trun_stall_watch(trun_stall *s, int local_rank, pid_t pid, trun_stream *out, trun_stream *err,
                      const char *log_out, const char *log_err);
void trun_stall_exited(trun_stall *s, int local_rank);
/* The round is over (or being torn down): stops checking. */
void trun_stall_end(trun_stall *s);
/* Closes the timers (run the loop afterwards to release them). */
void trun_stall_close(trun_stall *s);
/* CPU ticks (utime + stime + cutime + cstime) of every process in process group pgrp, read from
 * proc_root (NULL: /proc). */
unsigned long long trun_pgrp_cpu_ticks(const char *proc_root, pid_t pgrp);

#endif
