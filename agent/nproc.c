/* --nproc-per-node resolution. GPU counting here reads the device nodes the NVIDIA driver creates for the
 * GPUs this container may use; hardware discovery (NVML) refines it. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "discover.h"

static int count_visible_gpus(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd) {
    if (cvd[0] == '\0' || strcmp(cvd, "-1") == 0 || strcmp(cvd, "none") == 0) return 0;
    int n = 1;
    for (const char *p = cvd; *p; p++) n += *p == ',';
    return n;
  }
  DIR *d = opendir("/dev");
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, "nvidia", 6) == 0 && isdigit((unsigned char)e->d_name[6])) n++;
  closedir(d);
  return n;
}

/* `cpu` keeps torchrun's meaning, os.cpu_count(): every online CPU, whatever the affinity or quota. */
static int cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int trun_nproc_resolve(const char *spec, int *nproc, char *err, size_t errlen) {
  if (strcmp(spec, "cpu") == 0) {
    *nproc = cpu_count();
    return 0;
  }
  if (strcmp(spec, "gpu") == 0 || strcmp(spec, "auto") == 0) {
    int g = count_visible_gpus();
    if (g > 0) {
      *nproc = g;
      return 0;
    }
    if (strcmp(spec, "gpu") == 0) {
      snprintf(err, errlen,
               "--nproc-per-node gpu: no GPU is visible here (no /dev/nvidiaN, or "
               "CUDA_VISIBLE_DEVICES is empty); give a number or use auto");
      return -1;
    }
    *nproc = trun_discover_cpus(); /* `auto` without GPUs: what the cgroup quota and affinity allow */
    return 0;
  }
  *nproc = atoi(spec);
  if (*nproc < 1) {
    snprintf(err, errlen, "--nproc-per-node '%s' is not a positive number", spec);
    return -1;
  }
  return 0;
}
