/* GPU utilisation for hang detection (agent/observe/stall.h), without NVML in the agent: a sampler child
 * process (forked; it closes every inherited descriptor but its pipe and dies with the agent) loads NVML
 * (TRUN_NVML_LIBRARY or libnvidia-ml.so.1), and every interval writes one line with the utilisation
 * (nvmlDeviceGetUtilizationRates, percent of the last sample period a kernel ran) of each GPU it was given
 * by UUID. The agent reads the pipe without blocking. */
#ifndef TRUN_GPU_UTIL_H
#define TRUN_GPU_UTIL_H

#include <stddef.h>

typedef struct trun_gpu_util trun_gpu_util;

/* Starts the sampler for the GPUs uuids[0..n) (n <= 64). NULL when n is 0 or no process can be made. */
trun_gpu_util *trun_gpu_util_start(const char (*uuids)[96], int n, double interval_s);
/* What the sampler wrote since the last call: 1 and util[0..n) from its newest line (-1: NVML could not say
 * for that GPU), 0 nothing new, -1 the sampler ended (err says why: no NVML, ...). Never blocks. */
int trun_gpu_util_read(trun_gpu_util *g, int *util, char *err, size_t errlen);
/* Ends the sampler and frees g (NULL: nothing). */
void trun_gpu_util_stop(trun_gpu_util *g);

#endif
