/* --nproc-per-node resolution. `gpu` / `auto` count the GPUs the workers will see: NVML
 * (agent/discover/discover.h, honouring CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES) or the CUDA runtime
 * where no NVML library loads, and, where neither lists a GPU, the /dev/nvidiaN nodes the driver creates for
 * this container (TRUN_DEV_ROOT, default /dev) narrowed by CUDA_VISIBLE_DEVICES. `auto` without GPUs = the
 * CPUs the cgroup quota and affinity allow. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "agent/discover/discover.h"
#include "agent_int.h"
#include "base/base.h"

extern char **environ;

static int count_dev_nodes(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd) {
    if (cvd[0] == '\0' || strcmp(cvd, "-1") == 0 || strcmp(cvd, "none") == 0) return 0;
    int n = 1;
    for (const char *p = cvd; *p; p++) n += *p == ',';
    return n;
  }
  const char *root = getenv("TRUN_DEV_ROOT");
  DIR *d = opendir(root && *root ? root : "/dev");
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, "nvidia", 6) == 0 && isdigit((unsigned char)e->d_name[6])) n++;
  closedir(d);
  return n;
}

/* The GPUs node lists ("nvml" or "cudart"), else the /dev/nvidiaN nodes. */
static int count_node_gpus(const trun_node *node) {
  if (node->gpu_source && strcmp(node->gpu_source, "none") != 0) return node->ngpu;
  return count_dev_nodes();
}

static int count_visible_gpus(void) {
  trun_node *node = calloc(1, sizeof(*node));
  if (node == NULL) return count_dev_nodes();
  char err[512] = "";
  int rc = trun_discover_gpus(node, environ, err, sizeof(err));
  if (rc < 0) /* like CUDA: the GPUs before the entry that names none */
    trun_warn("counting GPUs for --nproc-per-node: %s; using the %d GPU(s) before it", err, node->ngpu);
  int n = count_node_gpus(node);
  free(node);
  return n;
}

/* `cpu` keeps torchrun's meaning, os.cpu_count(): every online CPU, whatever the affinity or quota. */
static int cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int resolve(const char *spec, const trun_node *node, int *nproc, char *err, size_t errlen) {
  if (strcmp(spec, "cpu") == 0) {
    *nproc = cpu_count();
    return 0;
  }
  if (strcmp(spec, "gpu") == 0 || strcmp(spec, "auto") == 0) {
    int g = node ? count_node_gpus(node) : count_visible_gpus();
    if (g > 0) {
      *nproc = g;
      return 0;
    }
    if (strcmp(spec, "gpu") == 0) {
      snprintf(err, errlen,
               "--nproc-per-node gpu: no GPU is visible here (NVML lists none, no /dev/nvidiaN, or "
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

int trun_nproc_resolve(const char *spec, int *nproc, char *err, size_t errlen) {
  return resolve(spec, NULL, nproc, err, errlen);
}

int trun__nproc_resolve_node(const char *spec, const trun_node *node, int *nproc, char *err, size_t errlen) {
  return resolve(spec, node, nproc, err, errlen);
}
