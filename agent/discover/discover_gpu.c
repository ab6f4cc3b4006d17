/* GPUs through NVML, loaded with dlopen (TRUN_NVML_LIBRARY, default libnvidia-ml.so.1, the name NCCL
 * loads). NVML only: no CUDA call here, so the agent never holds a CUDA context. Every symbol is looked up
 * with dlsym; the ones trun cannot do without are nvmlInit_v2, nvmlDeviceGetCount_v2 and
 * nvmlDeviceGetHandleByIndex_v2, the rest only leave a field unknown when missing.
 *
 * Visibility (shared/spec/gpu-efa-nccl.md §5), applied to the devices NVML lists, in this order:
 * - NVIDIA_VISIBLE_DEVICES (container runtime): unset, "", "void" or "all" → no filter (inside a
 *   container the runtime has already limited what NVML sees); "none" → no GPUs; a list of UUIDs keeps the
 *   listed devices that NVML shows (in NVML order); a list of indices is applied only when every index
 *   names a device NVML shows, otherwise it is taken as already applied by the runtime.
 * - CUDA_VISIBLE_DEVICES (from envp): unset → all; "" → none; otherwise a comma list of indices (into the
 *   list left by the step above), GPU-<uuid> (a prefix is enough when it names exactly one GPU) or
 *   MIG-<uuid>. The workers see the entries renumbered 0..k-1 in list order. Like CUDA, the first entry
 *   that names no GPU (bad number, out of range, unknown or ambiguous UUID, repeated device) hides itself
 *   and everything after it: node keeps the GPUs before it and the call returns -1 with the entry in err.
 * CUDA_DEVICE_ORDER is not looked at: indices are NVML's (PCI bus order), which is what CUDA uses with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID and, for identical GPUs, with its default too.
 *
 * Links between visible GPUs: "NV<n>" with n = NVLinks from one to the other, counted as NCCL does: for
 * each active link of a GPU the remote PCI id; a remote that is another GPU counts for that pair, any other
 * remote (an NVSwitch, or an empty id when the switch is hidden in a VM) is a switch link, and two GPUs with
 * switch links reach each other over min(switch links of each). Otherwise the PCIe level from
 * nvmlDeviceGetTopologyCommonAncestor: SINGLE PIX, MULTIPLE PXB, HOSTBRIDGE PHB, NODE NODE, SYSTEM SYS,
 * as nvidia-smi topo -m prints them; "N/A" when NVML cannot say.
 *
 * P2P per pair: nvmlDeviceGetP2PStatus with the READ capability, in the words of nvidia-smi topo -p2p r:
 * OK, CNS (chipset), GNS (GPU), TNS (topology), NS (not supported), U (unknown), and DR (disabled by the
 * driver's registry key; trun's word); "N/A" when NVML cannot say.
 *
 * NUMA node: the PCI function's numa_node in sysfs (what nvidia-smi's "NUMA Affinity" shows), else NVML's
 * own NUMA id (only where the GPU memory is a NUMA node, Grace), else (VMs, where sysfs says -1) the node
 * whose cpulist holds the GPU's CPU affinity, or the only node (trun_numa_of_cpulist).
 *
 * With TRUN_GPU_HEALTH the same child reads each visible GPU's health facts (health_gpu.c; for a MIG device
 * its parent's), so that the gate's checks cost no second NVML start.
 *
 * No NVML library at all: the CUDA runtime in the same child (discover_cudart.c), never in the agent. */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "cpulist.h"
#include "discover.h"
#include "discover_internal.h"
#include "nvml.h"

typedef struct {
  void *dl;
  trun_nvmlInit_v2_fn init;
  trun_nvmlShutdown_fn shutdown;
  trun_nvmlErrorString_fn error_string;
  trun_nvmlDeviceGetCount_v2_fn get_count;
  trun_nvmlDeviceGetHandleByIndex_v2_fn by_index;
  trun_nvmlDeviceGetHandleByUUID_fn by_uuid;
  trun_nvmlDeviceGetDeviceHandleFromMigDeviceHandle_fn mig_parent;
  trun_nvmlDeviceGetUUID_fn uuid;
  trun_nvmlDeviceGetName_fn name;
  trun_nvmlDeviceGetPciInfo_fn pci;
  trun_nvmlDeviceGetMemoryInfo_fn memory;
  trun_nvmlDeviceGetCpuAffinity_fn cpu_affinity;
  trun_nvmlDeviceGetNumaNodeId_fn numa_id;
  trun_nvmlDeviceGetTopologyCommonAncestor_fn ancestor;
  trun_nvmlDeviceGetP2PStatus_fn p2p_status;
  trun_nvmlDeviceGetNvLinkState_fn nvlink_state;
  trun_nvmlDeviceGetNvLinkRemotePciInfo_fn nvlink_remote_pci;
  trun_nvmlDeviceGetNvLinkRemoteDeviceType_fn nvlink_remote_type;
  trun_nvmlDeviceGetGpuFabricInfo_fn fabric;
} trun_nvml;

/* One device NVML lists (before visibility), with what discovery found about it. */
typedef struct {
  trun_nvmlDevice_t dev;
  trun_gpu g;
  unsigned dom, bus, slot, fn; /* parsed pci_bus_id; has_pci says whether it parsed */
  int has_pci;
} trun_nvml_dev;

/* Copies src into dst (size n), truncating. */
static void copy_str(char *dst, size_t n, const char *src) {
  size_t len = strnlen(src, n - 1);
  memcpy(dst, src, len);
  dst[len] = '\0';
}

static const char *nvml_err(const trun_nvml *n, trun_nvmlReturn_t rc) {
  const char *s = n->error_string ? n->error_string(rc) : NULL;
  return s ? s : "NVML error";
}

static void *sym(void *dl, const char *name) { return dlsym(dl, name); }

/* Opens the library and resolves the symbols. 1 loaded, 0 no library, -1 unusable (err says why). */
static int nvml_open(trun_nvml *n, char *err, size_t errlen) {
  memset(n, 0, sizeof(*n));
  const char *lib = getenv("TRUN_NVML_LIBRARY");
  if (!lib || !*lib) lib = "libnvidia-ml.so.1";
  n->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!n->dl) return 0;
  n->init = (trun_nvmlInit_v2_fn)sym(n->dl, "nvmlInit_v2");
  n->shutdown = (trun_nvmlShutdown_fn)sym(n->dl, "nvmlShutdown");
  n->error_string = (trun_nvmlErrorString_fn)sym(n->dl, "nvmlErrorString");
  n->get_count = (trun_nvmlDeviceGetCount_v2_fn)sym(n->dl, "nvmlDeviceGetCount_v2");
  n->by_index = (trun_nvmlDeviceGetHandleByIndex_v2_fn)sym(n->dl, "nvmlDeviceGetHandleByIndex_v2");
  n->by_uuid = (trun_nvmlDeviceGetHandleByUUID_fn)sym(n->dl, "nvmlDeviceGetHandleByUUID");
  n->mig_parent = (trun_nvmlDeviceGetDeviceHandleFromMigDeviceHandle_fn)sym(
      n->dl, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
  n->uuid = (trun_nvmlDeviceGetUUID_fn)sym(n->dl, "nvmlDeviceGetUUID");
  n->name = (trun_nvmlDeviceGetName_fn)sym(n->dl, "nvmlDeviceGetName");
  n->pci = (trun_nvmlDeviceGetPciInfo_fn)sym(n->dl, "nvmlDeviceGetPciInfo_v3");
  if (!n->pci) n->pci = (trun_nvmlDeviceGetPciInfo_fn)sym(n->dl, "nvmlDeviceGetPciInfo_v2");
  n->memory = (trun_nvmlDeviceGetMemoryInfo_fn)sym(n->dl, "nvmlDeviceGetMemoryInfo");
  n->cpu_affinity = (trun_nvmlDeviceGetCpuAffinity_fn)sym(n->dl, "nvmlDeviceGetCpuAffinity");
  n->numa_id = (trun_nvmlDeviceGetNumaNodeId_fn)sym(n->dl, "nvmlDeviceGetNumaNodeId");
  n->ancestor =
      (trun_nvmlDeviceGetTopologyCommonAncestor_fn)sym(n->dl, "nvmlDeviceGetTopologyCommonAncestor");
  n->p2p_status = (trun_nvmlDeviceGetP2PStatus_fn)sym(n->dl, "nvmlDeviceGetP2PStatus");
  n->nvlink_state = (trun_nvmlDeviceGetNvLinkState_fn)sym(n->dl, "nvmlDeviceGetNvLinkState");
  n->nvlink_remote_pci =
      (trun_nvmlDeviceGetNvLinkRemotePciInfo_fn)sym(n->dl, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  n->nvlink_remote_type =
      (trun_nvmlDeviceGetNvLinkRemoteDeviceType_fn)sym(n->dl, "nvmlDeviceGetNvLinkRemoteDeviceType");
  n->fabric = (trun_nvmlDeviceGetGpuFabricInfo_fn)sym(n->dl, "nvmlDeviceGetGpuFabricInfo");
  if (!n->init || !n->get_count || !n->by_index) {
    trun_errf(
        err, errlen,
        "NVML library %s lacks nvmlInit_v2 / nvmlDeviceGetCount_v2 / nvmlDeviceGetHandleByIndex_v2 "
        "(driver too old or a broken install); install a matching NVIDIA driver or unset TRUN_NVML_LIBRARY",
        lib);
    dlclose(n->dl);
    n->dl = NULL;
    return -1;
  }
  return 1;
}

static void nvml_close(trun_nvml *n) {
  if (!n->dl) return;
  if (n->shutdown) n->shutdown();
  dlclose(n->dl);
  n->dl = NULL;
}

/* Multi-node NVLink as NCCL decides it: the fabric registration completed and the cluster UUID is not all
 * zero (an HGX board's NVSwitches register with state "completed" and a zero UUID). 1, 0, or -1 unknown. */
static int fabric_mnnvl(const trun_nvml *n, trun_nvmlDevice_t dev) {
  if (!n->fabric) return -1;
  trun_nvmlGpuFabricInfo_t f;
  memset(&f, 0, sizeof(f));
  trun_nvmlReturn_t rc = n->fabric(dev, &f);
  if (rc == TRUN_NVML_ERROR_NOT_SUPPORTED) return 0; /* no NVLink fabric at all */
  if (rc != TRUN_NVML_SUCCESS) return -1;
  if (f.state != TRUN_NVML_GPU_FABRIC_STATE_COMPLETED || f.status != TRUN_NVML_SUCCESS) return 0;
  for (size_t i = 0; i < sizeof(f.cluster_uuid); i++)
    if (f.cluster_uuid[i]) return 1;
  return 0;
}

static void fill_device(const trun_nvml *n, unsigned idx, trun_nvml_dev *d, int affinity) {
  trun_gpu *g = &d->g;
  memset(g, 0, sizeof(*g));
  g->index = (int)idx;
  g->visible_index = -1;
  g->numa_node = -1;
  if (n->uuid && n->uuid(d->dev, g->uuid, sizeof(g->uuid)) != TRUN_NVML_SUCCESS) g->uuid[0] = '\0';
  g->uuid[sizeof(g->uuid) - 1] = '\0';
  if (n->name && n->name(d->dev, g->name, sizeof(g->name)) != TRUN_NVML_SUCCESS) g->name[0] = '\0';
  g->name[sizeof(g->name) - 1] = '\0';
  trun_nvml_pci pci;
  memset(&pci, 0, sizeof(pci));
  if (n->pci && n->pci(d->dev, &pci.info) == TRUN_NVML_SUCCESS) {
    pci.info.busId[sizeof(pci.info.busId) - 1] = '\0';
    snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "%s", pci.info.busId);
    d->has_pci = trun_pci_parse(g->pci_bus_id, &d->dom, &d->bus, &d->slot, &d->fn) == 0;
  }
  trun_nvmlMemory_t mem;
  if (n->memory && n->memory(d->dev, &mem) == TRUN_NVML_SUCCESS) g->memory_bytes = mem.total;
  /* NUMA: sysfs, NVML's NUMA id, then the CPU affinity (see the top of this file). */
  if (d->has_pci) g->numa_node = trun_pci_numa_of_bus_id(g->pci_bus_id);
  unsigned numa;
  if (g->numa_node < 0 && n->numa_id && n->numa_id(d->dev, &numa) == TRUN_NVML_SUCCESS)
    g->numa_node = (int)numa;
  unsigned long mask[64];
  memset(mask, 0, sizeof(mask));
  if ((affinity || g->numa_node < 0) && n->cpu_affinity &&
      n->cpu_affinity(d->dev, 64, mask) == TRUN_NVML_SUCCESS)
    trun_mask_to_cpulist(mask, 64, g->cpu_affinity, sizeof(g->cpu_affinity));
  if (g->numa_node < 0) g->numa_node = trun_numa_of_cpulist(g->cpu_affinity);
  g->mnnvl = fabric_mnnvl(n, d->dev);
}

static const char *p2p_label(const trun_nvml *n, trun_nvmlDevice_t a, trun_nvmlDevice_t b) {
  int status = -1;
  if (!n->p2p_status || n->p2p_status(a, b, TRUN_NVML_P2P_CAPS_INDEX_READ, &status) != TRUN_NVML_SUCCESS)
    return "N/A";
  switch (status) {
    case TRUN_NVML_P2P_STATUS_OK: return "OK";
    case TRUN_NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED: return "CNS";
    case TRUN_NVML_P2P_STATUS_GPU_NOT_SUPPORTED: return "GNS";
    case TRUN_NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: return "TNS";
    case TRUN_NVML_P2P_STATUS_DISABLED_BY_REGKEY: return "DR";
    case TRUN_NVML_P2P_STATUS_NOT_SUPPORTED: return "NS";
    default: return "U";
  }
}

static int same_pci(const trun_nvml_dev *d, unsigned dom, unsigned bus, unsigned slot, unsigned fn) {
  return d->has_pci && d->dom == dom && d->bus == bus && d->slot == slot && d->fn == fn;
}

/* NVLink counts: direct[i][j] links from all[i] to all[j], sw[i] links from all[i] to anything else. */
static void count_nvlinks(const trun_nvml *n, const trun_nvml_dev *all, int count,
                          int (*direct)[TRUN_MAX_GPUS], int *sw, const int *want) {
  if (!n->nvlink_state) return;
  for (int i = 0; i < count; i++) {
    if (!want[i]) continue;
    for (unsigned link = 0; link < TRUN_NVML_NVLINK_MAX_LINKS; link++) {
      int active = 0;
      trun_nvmlReturn_t rc = n->nvlink_state(all[i].dev, link, &active);
      if (rc == TRUN_NVML_ERROR_INVALID_ARGUMENT || rc == TRUN_NVML_ERROR_NOT_SUPPORTED) break;
      if (rc != TRUN_NVML_SUCCESS || !active) continue;
      int type = -1;
      if (n->nvlink_remote_type && n->nvlink_remote_type(all[i].dev, link, &type) != TRUN_NVML_SUCCESS)
        type = -1;
      trun_nvml_pci pci;
      memset(&pci, 0, sizeof(pci));
      unsigned dom, bus, slot, fn;
      int peer = -1;
      if (type != TRUN_NVML_NVLINK_DEVICE_TYPE_SWITCH && n->nvlink_remote_pci &&
          n->nvlink_remote_pci(all[i].dev, link, &pci.info) == TRUN_NVML_SUCCESS) {
        pci.info.busId[sizeof(pci.info.busId) - 1] = '\0';
        if (trun_pci_parse(pci.info.busId, &dom, &bus, &slot, &fn) == 0)
          for (int j = 0; j < count; j++)
            if (j != i && same_pci(&all[j], dom, bus, slot, fn)) peer = j;
      }
      if (peer >= 0)
        direct[i][peer]++;
      else
        sw[i]++;
    }
  }
}

static const char *level_label(int level) {
  switch (level) {
    case TRUN_NVML_TOPOLOGY_INTERNAL: return "X";
    case TRUN_NVML_TOPOLOGY_SINGLE: return "PIX";
    case TRUN_NVML_TOPOLOGY_MULTIPLE: return "PXB";
    case TRUN_NVML_TOPOLOGY_HOSTBRIDGE: return "PHB";
    case TRUN_NVML_TOPOLOGY_NODE: return "NODE";
    case TRUN_NVML_TOPOLOGY_SYSTEM: return "SYS";
    default: return "N/A";
  }
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Copies the next comma-separated entry of *p (whitespace trimmed) into out; 0 when the list is done. */
static int next_entry(const char **p, char *out, size_t outlen) {
  const char *s = *p;
  if (!s) return 0;
  const char *end = strchr(s, ',');
  const char *stop = end ? end : s + strlen(s);
  while (s < stop && is_space(*s)) s++;
  const char *e = stop;
  while (e > s && is_space(e[-1])) e--;
  size_t len = (size_t)(e - s);
  if (len >= outlen) len = outlen - 1;
  memcpy(out, s, len);
  out[len] = '\0';
  *p = end ? end + 1 : NULL;
  return 1;
}

/* Non-negative decimal index, or -1. */
static long parse_index(const char *s) {
  if (!*s) return -1;
  long v = 0;
  for (const char *c = s; *c; c++) {
    if (!isdigit((unsigned char)*c) || v > 100000) return -1;
    v = v * 10 + (*c - '0');
  }
  return v;
}

/* NVIDIA_VISIBLE_DEVICES → keep[] over all[0..count). */
static void apply_nvidia_visible(const char *v, const trun_gpu *all, int count, int *keep) {
  for (int i = 0; i < count; i++) keep[i] = 1;
  if (!v || !*v || strcmp(v, "void") == 0 || strcmp(v, "all") == 0) return;
  if (strcmp(v, "none") == 0) {
    for (int i = 0; i < count; i++) keep[i] = 0;
    return;
  }
  int sel[TRUN_MAX_GPUS] = {0};
  int all_indices_exist = 1, any_index = 0;
  const char *p = v;
  char ent[128];
  while (next_entry(&p, ent, sizeof(ent))) {
    long idx = parse_index(ent);
    if (idx >= 0) {
      any_index = 1;
      if (idx < count)
        sel[idx] = 1;
      else
        all_indices_exist = 0;
      continue;
    }
    for (int i = 0; i < count; i++)
      if (*ent && strcmp(all[i].uuid, ent) == 0) sel[i] = 1;
  }
  if (any_index && !all_indices_exist) {
    /* Host indices in a container that already shows only those GPUs: keep what NVML lists, except that
     * UUID entries still select. */
    int any_uuid = 0;
    for (int i = 0; i < count; i++) any_uuid |= sel[i];
    if (!any_uuid) return;
  }
  for (int i = 0; i < count; i++) keep[i] = sel[i];
}

/* Matches a GPU-<uuid> prefix among cand; the index into all, -1 none, -2 ambiguous. */
static int match_uuid_prefix(const char *ent, const trun_gpu *all, const int *cand, int ncand) {
  int found = -1;
  size_t n = strlen(ent);
  for (int k = 0; k < ncand; k++) {
    const char *u = all[cand[k]].uuid;
    if (strncmp(u, ent, n) == 0) {
      if (strcmp(u, ent) == 0) return cand[k];
      if (found >= 0) return -2;
      found = cand[k];
    }
  }
  return found;
}

/* The MIG resolver of an NVML session: the session and its devices. */
typedef struct {
  const trun_nvml *n;
  const trun_nvml_dev *all;
  const trun__gpu_list *l;
} mig_ctx;

/* Looks up a MIG-<uuid>: fills out from its parent GPU (uuid = the MIG uuid); 0, or -1 when unknown. */
static int resolve_mig(void *arg, const char *ent, const int *cand, int ncand, trun_gpu *out) {
  const mig_ctx *m = arg;
  if (!m->n->by_uuid) return -1;
  trun_nvmlDevice_t mig = NULL, parent = NULL;
  if (m->n->by_uuid(ent, &mig) != TRUN_NVML_SUCCESS) return -1;
  if (m->n->mig_parent && m->n->mig_parent(mig, &parent) == TRUN_NVML_SUCCESS) {
    for (int k = 0; k < ncand; k++)
      if (m->all[cand[k]].dev == parent) {
        *out = m->l->gpus[cand[k]];
        copy_str(out->uuid, sizeof(out->uuid), ent);
        return 0;
      }
    return -1; /* its parent is hidden by NVIDIA_VISIBLE_DEVICES */
  }
  memset(out, 0, sizeof(*out));
  out->index = -1;
  out->numa_node = -1;
  out->mnnvl = -1;
  copy_str(out->uuid, sizeof(out->uuid), ent);
  snprintf(out->name, sizeof(out->name), "MIG device");
  return 0;
}

int trun__gpu_select(const trun__gpu_list *l, char *const *envp, trun__mig_fn mig, void *mig_arg,
                     trun_node *node, int *src, char *err, size_t errlen) {
  node->ngpu = 0;
  node->gpus_listed = l->count;
  /* Candidates in CUDA order after NVIDIA_VISIBLE_DEVICES. */
  int keep[TRUN_MAX_GPUS];
  apply_nvidia_visible(trun_env_get(envp, "NVIDIA_VISIBLE_DEVICES"), l->gpus, l->count, keep);
  int cand[TRUN_MAX_GPUS], ncand = 0;
  for (int i = 0; i < l->count; i++)
    if (keep[i]) cand[ncand++] = i;
  int ret = 0;
  const char *cvd = trun_env_get(envp, "CUDA_VISIBLE_DEVICES");
  if (!cvd) {
    for (int k = 0; k < ncand; k++) {
      node->gpus[node->ngpu] = l->gpus[cand[k]];
      src[node->ngpu++] = cand[k];
    }
  } else {
    const char *p = cvd;
    char ent[128];
    while (*cvd && next_entry(&p, ent, sizeof(ent)) && node->ngpu < TRUN_MAX_GPUS) {
      int pick = -1;
      trun_gpu m;
      int is_mig = 0;
      long idx = parse_index(ent);
      if (idx >= 0) {
        pick = idx < ncand ? cand[idx] : -1;
      } else if (strncmp(ent, "GPU-", 4) == 0 && ent[4]) {
        pick = match_uuid_prefix(ent, l->gpus, cand, ncand);
      } else if (strncmp(ent, "MIG-", 4) == 0 && ent[4] && mig) {
        is_mig = mig(mig_arg, ent, cand, ncand, &m) == 0;
      }
      for (int v = 0; pick >= 0 && v < node->ngpu; v++)
        if (src[v] == pick) pick = -3; /* the same GPU twice */
      for (int v = 0; is_mig && v < node->ngpu; v++)
        if (strcmp(node->gpus[v].uuid, m.uuid) == 0) is_mig = 0;
      if (pick < 0 && !is_mig) {
        trun_errf(
            err, errlen,
            "CUDA_VISIBLE_DEVICES entry '%s' (in '%s') names no %sGPU%s: like CUDA, it and the entries after "
            "it are hidden; fix CUDA_VISIBLE_DEVICES (%d GPU%s here, see trun-topo)",
            ent, cvd, pick == -3 ? "new " : "", pick == -2 ? " uniquely" : "", ncand, ncand == 1 ? "" : "s");
        ret = -1;
        break;
      }
      if (is_mig) {
        int parent = -1;
        for (int k = 0; k < l->count; k++)
          if (m.index >= 0 && l->gpus[k].index == m.index) parent = k;
        node->gpus[node->ngpu] = m;
        src[node->ngpu++] = parent;
      } else {
        node->gpus[node->ngpu] = l->gpus[pick];
        src[node->ngpu++] = pick;
      }
    }
  }
  for (int v = 0; v < node->ngpu; v++) node->gpus[v].visible_index = v;
  return ret;
}

void trun__gpu_links_to_node(const trun__gpu_list *l, const int *src, trun_node *node) {
  for (int a = 0; a < node->ngpu; a++)
    if (src[a] >= 0) node->gpus[a].switch_links = l->gpus[src[a]].switch_links;
  for (int a = 0; a < node->ngpu; a++)
    for (int b = 0; b < node->ngpu; b++) {
      int i = src[a], j = src[b];
      const char *link = "N/A", *p2p = "N/A";
      if (a == b || (i >= 0 && i == j))
        link = p2p = "X";
      else if (i >= 0 && j >= 0)
        link = l->links[i][j], p2p = l->p2p[i][j];
      snprintf(node->links[a][b], sizeof(node->links[a][b]), "%s", link);
      snprintf(node->p2p[a][b], sizeof(node->p2p[a][b]), "%s", p2p);
    }
}

/* The list's links and P2P status for the pairs of want (NVML calls: per GPU its NVLinks, per pair the P2P
 * status and, without NVLink, the PCIe level). */
static void fill_links(const trun_nvml *n, const trun_nvml_dev *all, trun__gpu_list *l, const int *want) {
  int(*direct)[TRUN_MAX_GPUS] = calloc(TRUN_MAX_GPUS, sizeof(*direct));
  int sw[TRUN_MAX_GPUS] = {0};
  if (direct) count_nvlinks(n, all, l->count, direct, sw, want);
  for (int i = 0; i < l->count; i++) l->gpus[i].switch_links = sw[i];
  for (int i = 0; i < l->count; i++)
    for (int j = 0; j < l->count; j++) {
      char *lk = l->links[i][j];
      if (!want[i] || !want[j]) continue;
      if (i == j) {
        snprintf(lk, sizeof(l->links[i][j]), "X");
        snprintf(l->p2p[i][j], sizeof(l->p2p[i][j]), "X");
        continue;
      }
      snprintf(l->p2p[i][j], sizeof(l->p2p[i][j]), "%s", p2p_label(n, all[i].dev, all[j].dev));
      int nv = direct ? direct[i][j] + (sw[i] && sw[j] ? (sw[i] < sw[j] ? sw[i] : sw[j]) : 0) : 0;
      if (nv > 0) {
        snprintf(lk, sizeof(l->links[i][j]), "NV%d", nv > 999 ? 999 : nv);
        continue;
      }
      int level = -1;
      if (!n->ancestor || n->ancestor(all[i].dev, all[j].dev, &level) != TRUN_NVML_SUCCESS) level = -1;
      snprintf(lk, sizeof(l->links[i][j]), "%s", level_label(level));
    }
  free(direct);
}

/* cudart: whether the CUDA runtime may be tried when no NVML library loads (only in the child). l: the whole
 * list for the cache (every pair's links, TRUN__GPU_FULL), or NULL; l->count stays -1 unless NVML listed
 * every device. */
#define TRUN__GPU_FULL 0x100u
static int discover_here(trun_node *node, char *const *envp, unsigned flags, int cudart, trun__gpu_list *l,
                         char *err, size_t errlen) {
  int affinity = !(flags & TRUN_GPU_NO_AFFINITY);
  if (err && errlen) err[0] = '\0';
  node->ngpu = 0;
  node->gpus_listed = -1;
  node->gpu_source = "none";
  memset(node->links, 0, sizeof(node->links));
  memset(node->p2p, 0, sizeof(node->p2p));
  trun_nvml n;
  int rc = nvml_open(&n, err, errlen);
  if (rc == 0 && cudart) return trun_discover_cudart(node, envp, affinity, err, errlen);
  if (rc <= 0) return rc;
  trun_nvmlReturn_t nr = n.init();
  if (nr == TRUN_NVML_ERROR_DRIVER_NOT_LOADED || nr == TRUN_NVML_ERROR_LIBRARY_NOT_FOUND) {
    dlclose(n.dl); /* a driver library without a loaded driver: a GPU-less host */
    return 0;
  }
  if (nr != TRUN_NVML_SUCCESS) {
    trun_errf(err, errlen,
              "nvmlInit_v2 failed: %s (%d); check the NVIDIA driver (nvidia-smi) or unset TRUN_NVML_LIBRARY",
              n.error_string ? nvml_err(&n, nr) : "NVML error", nr);
    dlclose(n.dl);
    return -1;
  }
  unsigned count = 0;
  nr = n.get_count(&count);
  if (nr != TRUN_NVML_SUCCESS) {
    trun_errf(err, errlen, "nvmlDeviceGetCount_v2 failed: %s (%d); check the NVIDIA driver (nvidia-smi)",
              nvml_err(&n, nr), nr);
    nvml_close(&n);
    return -1;
  }
  if (count > TRUN_MAX_GPUS) count = TRUN_MAX_GPUS;
  node->gpus_listed = (int)count;
  trun_nvml_dev *all = calloc(TRUN_MAX_GPUS, sizeof(*all));
  trun__gpu_list *own = l ? NULL : malloc(sizeof(*own));
  trun__gpu_list *list = l ? l : own;
  if (!all || !list) {
    trun_errf(err, errlen, "out of memory listing GPUs");
    free(all);
    free(own);
    nvml_close(&n);
    return -1;
  }
  memset(list, 0, sizeof(*list));
  list->count = -1;
  for (unsigned i = 0; i < count; i++) {
    nr = n.by_index(i, &all[i].dev);
    if (nr != TRUN_NVML_SUCCESS) {
      trun_errf(err, errlen,
                "nvmlDeviceGetHandleByIndex_v2(%u) failed: %s (%d); check the GPU with nvidia-smi", i,
                nvml_err(&n, nr), nr);
      free(all);
      free(own);
      nvml_close(&n);
      return -1;
    }
    fill_device(&n, i, &all[i], affinity);
    list->gpus[i] = all[i].g;
  }
  list->count = (int)count;
  list->affinity = affinity;
  node->gpu_source = "nvml";

  int src[TRUN_MAX_GPUS]; /* index into all for each visible GPU (-1: a MIG device without parent info) */
  mig_ctx mc = {&n, all, list};
  int ret = trun__gpu_select(list, envp, resolve_mig, &mc, node, src, err, errlen);
  if (flags & TRUN_GPU_HEALTH) {
    trun__gpu_health_fns hf;
    trun__gpu_health_load(n.dl, &hf);
    for (int v = 0; v < node->ngpu; v++)
      if (src[v] >= 0) trun__gpu_health_read(&hf, all[src[v]].dev, &node->gpus[v].health);
  }
  /* Links between the visible GPUs (every listed pair for the cache). */
  int want[TRUN_MAX_GPUS] = {0};
  list->full = (flags & TRUN__GPU_FULL) != 0;
  for (int i = 0; list->full && i < list->count; i++) want[i] = 1;
  for (int v = 0; v < node->ngpu; v++)
    if (src[v] >= 0) want[src[v]] = 1;
  fill_links(&n, all, list, want);
  trun__gpu_links_to_node(list, src, node);
  free(all);
  free(own);
  nvml_close(&n);
  return ret;
}

/* NVML (or the CUDA runtime) runs in a short-lived child: the agent never maps the driver libraries (its
 * memory stays small) and holds no driver state or CUDA context. Without a child (fork failed) NVML runs
 * here and the CUDA runtime is not tried. The child writes the result into a shared anonymous mapping; the
 * static strings node->gpu_source points to are at the same addresses in both (fork, no exec). */
typedef struct {
  trun_node node;
  int rc;
  char err[512];
  trun__gpu_list list; /* count -1: NVML did not list every device */
} shared_result;

/* Whether an NVIDIA driver is there to ask: its control node /dev/nvidiactl (bare metal, and every
 * container the NVIDIA runtime gives GPUs), /dev/dxg (WSL), or a library named by hand (the tests' fakes).
 * Without one there is nothing to find, whatever libraries are installed (a CUDA toolkit's libcudart on a
 * CPU-only box): no child, no dlopen. */
static int driver_present(void) {
  const char *nvml = getenv("TRUN_NVML_LIBRARY"), *cudart = getenv("TRUN_CUDART_LIBRARY");
  if ((nvml && *nvml) || (cudart && *cudart)) return 1;
  return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
}

/* The GPUs from the cache when it holds them for this key: 1 (node filled, rc in *rc), 0 (note says why). */
static int from_cache(trun_node *node, char *const *envp, unsigned flags, const char *key, int *rc, char *err,
                      size_t errlen) {
  trun__gpu_list *l = malloc(sizeof(*l));
  if (l == NULL) {
    snprintf(node->gpu_cache_note, sizeof(node->gpu_cache_note), "out of memory");
    return 0;
  }
  int hit = trun__gpu_cache_load(key, !(flags & TRUN_GPU_NO_AFFINITY), l, node->gpu_cache_note,
                                 sizeof(node->gpu_cache_note));
  if (hit) {
    int src[TRUN_MAX_GPUS];
    if (err && errlen) err[0] = '\0';
    memset(node->links, 0, sizeof(node->links));
    memset(node->p2p, 0, sizeof(node->p2p));
    *rc = trun__gpu_select(l, envp, NULL, NULL, node, src, err, errlen);
    trun__gpu_links_to_node(l, src, node);
    node->gpu_source = "nvml";
    node->gpu_cache = TRUN_GPU_CACHE_HIT;
  }
  free(l);
  return hit;
}

/* Writes the cache from a list NVML gave whole (count -1: it did not) when /proc names the same GPUs. */
static void store(trun_node *node, const char *key, const trun__gpu_list *l) {
  if (l->count < 0 || !l->full) return;
  if (!trun__gpu_cache_matches(key, l))
    snprintf(node->gpu_cache_note, sizeof(node->gpu_cache_note),
             "NVML lists other GPUs than /proc/driver/nvidia/gpus; not cached");
  else if (trun__gpu_cache_store(key, l, node->gpu_cache_note, sizeof(node->gpu_cache_note)) == 0)
    node->gpu_cache = TRUN_GPU_CACHE_STORED;
}

int trun_discover_gpus_flags(trun_node *node, char *const *envp, unsigned flags, char *err, size_t errlen) {
  node->gpu_cache = TRUN_GPU_CACHE_NONE;
  node->gpu_cache_note[0] = '\0';
  if (!driver_present()) {
    if (err && errlen) err[0] = '\0';
    node->ngpu = 0;
    node->gpus_listed = -1;
    node->gpu_source = "none";
    memset(node->links, 0, sizeof(node->links));
    memset(node->p2p, 0, sizeof(node->p2p));
    return 0;
  }
  /* The cache: not for MIG devices (only NVML resolves them); a hit reads no health facts. */
  char *key = NULL;
  if (flags & TRUN_GPU_CACHE) {
    const char *cvd = trun_env_get(envp, "CUDA_VISIBLE_DEVICES");
    node->gpu_cache = TRUN_GPU_CACHE_UNUSED;
    if (cvd && strstr(cvd, "MIG-"))
      snprintf(node->gpu_cache_note, sizeof(node->gpu_cache_note),
               "CUDA_VISIBLE_DEVICES names a MIG device, which only NVML resolves");
    else if ((key = malloc(TRUN__GPU_CACHE_KEY)) == NULL)
      snprintf(node->gpu_cache_note, sizeof(node->gpu_cache_note), "out of memory");
    else if (trun__gpu_cache_key(key, TRUN__GPU_CACHE_KEY, node->gpu_cache_note,
                                 sizeof(node->gpu_cache_note)) < 0) {
      free(key);
      key = NULL;
    } else {
      int rc;
      if (flags & TRUN_GPU_REFRESH)
        snprintf(node->gpu_cache_note, sizeof(node->gpu_cache_note), "asked to discover afresh");
      else if (from_cache(node, envp, flags, key, &rc, err, errlen)) {
        free(key);
        return rc;
      }
    }
  }
  if (flags & TRUN__GPU_HERE) { /* already in a child of the agent's (gpu_probe.c) */
    trun__gpu_list *l = key ? malloc(sizeof(*l)) : NULL;
    if (l) l->count = -1; /* NVML may not get to list them */
    int rc = discover_here(node, envp, flags | (l ? TRUN__GPU_FULL : 0), 1, l, err, errlen);
    if (l) store(node, key, l);
    free(l);
    free(key);
    return rc;
  }
  shared_result *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    free(key);
    return discover_here(node, envp, flags, 0, NULL, err, errlen);
  }
  memcpy(&sh->node, node, sizeof(*node));
  sh->rc = -1;
  sh->list.count = -1;
  snprintf(sh->err, sizeof(sh->err), "GPU discovery child ended without a result");
  pid_t pid = fork();
  if (pid == 0) {
    sh->rc = discover_here(&sh->node, envp, flags | (key ? TRUN__GPU_FULL : 0), 1, &sh->list, sh->err,
                           sizeof(sh->err));
    _exit(0);
  }
  int rc;
  if (pid < 0) {
    rc = discover_here(node, envp, flags, 0, NULL, err, errlen);
  } else {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    memcpy(node, &sh->node, sizeof(*node));
    rc = sh->rc;
    if (err && errlen) snprintf(err, errlen, "%s", sh->err);
    if (key) store(node, key, &sh->list);
  }
  munmap(sh, sizeof(*sh));
  free(key);
  return rc;
}

int trun_discover_gpus(trun_node *node, char *const *envp, char *err, size_t errlen) {
  return trun_discover_gpus_flags(node, envp, 0, err, errlen);
}
