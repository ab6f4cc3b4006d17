/* GPUs through the CUDA runtime, the fallback where no NVML library loads (a container with libcudart but
 * without the driver's libnvidia-ml). libcudart is loaded with dlopen (TRUN_CUDART_LIBRARY, else
 * libcudart.so, .so.13, .so.12, .so.11.0) and its few prototypes are written here (no CUDA headers).
 * CUDA calls initialise the driver, so this runs only in the short-lived discovery child of
 * discover_gpu.c, never in the agent.
 *
 * The runtime applies CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER) itself: the child copies both from the
 * envp it was given into its own environment and takes the devices as the runtime lists them, in the order
 * the workers will see them; trun does not apply the list a second time. NVIDIA_VISIBLE_DEVICES is the
 * container runtime's business (it already limited what the driver shows).
 *
 * Per device: name, UUID and total memory (cudaGetDeviceProperties[_v2]: only the stable head of
 * cudaDeviceProp is read, into a generous buffer), PCI bus id (cudaDeviceGetPCIBusId, rewritten as NVML
 * prints it), NUMA node and CPU affinity from sysfs by the PCI id (numa_node, local_cpulist; numa_node -1
 * → trun_numa_of_cpulist). Per pair: P2P from cudaDeviceCanAccessPeer ("OK" or "NS"); the link is the
 * PCIe distance of the two sysfs paths (PIX/PXB/PHB/NODE/SYS): the runtime cannot count NVLinks. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "discover.h"
#include "discover_internal.h"

typedef int (*cuda_count_fn)(int *);
typedef int (*cuda_props_fn)(void *, int);
typedef int (*cuda_pci_fn)(char *, int, int);
typedef int (*cuda_peer_fn)(int *, int, int);
typedef const char *(*cuda_errstr_fn)(int);

enum { CUDA_SUCCESS = 0, CUDA_ERROR_INSUFFICIENT_DRIVER = 35, CUDA_ERROR_NO_DEVICE = 100 };

/* The head of cudaDeviceProp, unchanged since CUDA 10 (name, uuid, luid, luidDeviceNodeMask,
 * totalGlobalMem); the runtime writes the whole struct (about 1 KiB in CUDA 12/13) into pad. */
typedef union {
  struct {
    char name[256];
    unsigned char uuid[16];
    char luid[8];
    unsigned int luid_device_node_mask;
    size_t total_global_mem;
  } head;
  char pad[8192];
} cuda_props;

/* Reads <pci function>/local_cpulist into out ("" when unknown). */
static void sysfs_local_cpulist(const char *bus_id, char *out, size_t outlen) {
  out[0] = '\0';
  char path[PATH_MAX], file[PATH_MAX + 16];
  if (trun_pci_sysfs_path(bus_id, path, sizeof(path)) < 0) return;
  snprintf(file, sizeof(file), "%s/local_cpulist", path);
  FILE *f = fopen(file, "r");
  if (!f) return;
  if (!fgets(out, (int)outlen, f)) out[0] = '\0';
  fclose(f);
  out[strcspn(out, "\n")] = '\0';
}

static void *open_cudart(char *tried, size_t len) {
  const char *lib = getenv("TRUN_CUDART_LIBRARY");
  if (lib && *lib) {
    snprintf(tried, len, "%s", lib);
    return dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  }
  static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                      "libcudart.so.11.0", NULL};
  snprintf(tried, len, "libcudart.so");
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

/* envp's value of name into the process environment (unset when envp has none). */
static void env_from(char *const *envp, const char *name) {
  const char *v = trun_env_get(envp, name);
  if (v)
    setenv(name, v, 1);
  else
    unsetenv(name);
}

static void fill_gpu(trun_gpu *g, int d, const cuda_props *p, const char *pci, int affinity) {
  memset(g, 0, sizeof(*g));
  g->index = -1;
  g->mnnvl = -1; /* the CUDA runtime cannot say */
  g->visible_index = d;
  size_t len = strnlen(p->head.name, sizeof(p->head.name));
  if (len >= sizeof(g->name)) len = sizeof(g->name) - 1;
  memcpy(g->name, p->head.name, len);
  const unsigned char *u = p->head.uuid;
  snprintf(g->uuid, sizeof(g->uuid),
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
           u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  g->memory_bytes = p->head.total_global_mem;
  unsigned dom, bus, slot, fn;
  if (trun_pci_parse(pci, &dom, &bus, &slot, &fn) == 0)
    snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "%08X:%02X:%02X.%X", dom, bus, slot, fn);
  g->numa_node = g->pci_bus_id[0] ? trun_pci_numa_of_bus_id(g->pci_bus_id) : -1;
  if (affinity || g->numa_node < 0)
    sysfs_local_cpulist(g->pci_bus_id, g->cpu_affinity, sizeof(g->cpu_affinity));
  if (g->numa_node < 0) g->numa_node = trun_numa_of_cpulist(g->cpu_affinity);
}

int trun_discover_cudart(trun_node *node, char *const *envp, int affinity, char *err, size_t errlen) {
  char tried[PATH_MAX];
  env_from(envp, "CUDA_VISIBLE_DEVICES");
  env_from(envp, "CUDA_DEVICE_ORDER");
  void *dl = open_cudart(tried, sizeof(tried));
  if (!dl) return 0; /* no CUDA runtime either: a GPU-less host as far as trun can tell */
  cuda_count_fn count_fn = (cuda_count_fn)dlsym(dl, "cudaGetDeviceCount");
  cuda_props_fn props_fn = (cuda_props_fn)dlsym(dl, "cudaGetDeviceProperties_v2");
  if (!props_fn) props_fn = (cuda_props_fn)dlsym(dl, "cudaGetDeviceProperties");
  cuda_pci_fn pci_fn = (cuda_pci_fn)dlsym(dl, "cudaDeviceGetPCIBusId");
  cuda_peer_fn peer_fn = (cuda_peer_fn)dlsym(dl, "cudaDeviceCanAccessPeer");
  cuda_errstr_fn errstr = (cuda_errstr_fn)dlsym(dl, "cudaGetErrorString");
  if (!count_fn || !props_fn || !pci_fn) {
    snprintf(err, errlen,
             "CUDA runtime %s lacks cudaGetDeviceCount / cudaGetDeviceProperties / cudaDeviceGetPCIBusId "
             "(not a libcudart?); point TRUN_CUDART_LIBRARY at libcudart.so or install the NVIDIA driver's "
             "libnvidia-ml.so.1",
             tried);
    dlclose(dl);
    return -1;
  }
  int count = 0, rc = count_fn(&count);
  if (rc == CUDA_ERROR_NO_DEVICE || rc == CUDA_ERROR_INSUFFICIENT_DRIVER) {
    dlclose(dl); /* no GPU visible, or no driver under the runtime */
    return 0;
  }
  if (rc != CUDA_SUCCESS) {
    snprintf(err, errlen,
             "cudaGetDeviceCount failed in %s: %s (%d); check the NVIDIA driver (nvidia-smi) and "
             "CUDA_VISIBLE_DEVICES",
             tried, errstr ? errstr(rc) : "CUDA error", rc);
    dlclose(dl);
    return -1;
  }
  if (count > TRUN_MAX_GPUS) count = TRUN_MAX_GPUS;
  cuda_props *p = malloc(sizeof(*p));
  if (!p) {
    snprintf(err, errlen, "out of memory listing GPUs");
    dlclose(dl);
    return -1;
  }
  node->gpu_source = "cudart";
  int ret = 0;
  for (int d = 0; d < count; d++) {
    char pci[64] = "";
    memset(p, 0, sizeof(*p));
    if ((rc = props_fn(p, d)) != CUDA_SUCCESS || (rc = pci_fn(pci, (int)sizeof(pci), d)) != CUDA_SUCCESS) {
      snprintf(err, errlen,
               "CUDA device %d: cudaGetDeviceProperties / cudaDeviceGetPCIBusId failed: %s (%d); "
               "check the GPU with nvidia-smi",
               d, errstr ? errstr(rc) : "CUDA error", rc);
      ret = -1;
      break;
    }
    pci[sizeof(pci) - 1] = '\0';
    fill_gpu(&node->gpus[node->ngpu++], d, p, pci, affinity);
  }
  free(p);
  char path[2][PATH_MAX];
  for (int a = 0; a < node->ngpu; a++)
    for (int b = 0; b < node->ngpu; b++) {
      int can = 0;
      if (a == b) {
        snprintf(node->links[a][b], sizeof(node->links[a][b]), "X");
        snprintf(node->p2p[a][b], sizeof(node->p2p[a][b]), "X");
        continue;
      }
      const trun_gpu *ga = &node->gpus[a], *gb = &node->gpus[b];
      int have = trun_pci_sysfs_path(ga->pci_bus_id, path[0], sizeof(path[0])) == 0 &&
                 trun_pci_sysfs_path(gb->pci_bus_id, path[1], sizeof(path[1])) == 0;
      snprintf(node->links[a][b], sizeof(node->links[a][b]), "%s",
               have ? trun_pci_distance(path[0], ga->numa_node, path[1], gb->numa_node) : "N/A");
      snprintf(node->p2p[a][b], sizeof(node->p2p[a][b]), "%s",
               !peer_fn || peer_fn(&can, a, b) != CUDA_SUCCESS ? "N/A"
               : can                                           ? "OK"
                                                               : "NS");
    }
  dlclose(dl);
  return ret;
}
