/* build/trun-topo: what trun sees on this node. Without options a table like `nvidia-smi topo -m` (the GPUs
 * the workers see after CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, renumbered as they see them, then
 * one NIC row and column per RDMA device with its PCIe distance to each GPU); --json the same for tools.
 * Options: --json, --no-imds (no instance-metadata request), -h/--help, --version. Exit 0, or 2 for a bad
 * option. Subcommands: preflight (topo_preflight.c), health (topo_health.c: the node health checks, exit 3
 * on a failed one), hang (topo_hang.c: NCCL RAS and flight-recorder dumps through agent/hang/, exit 3 on a
 * hang).
 * A discovery problem (a CUDA_VISIBLE_DEVICES entry that names no GPU, a broken NVML) is reported on stderr
 * and what was found is still printed. Test hooks: see agent/discover/discover.h. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/discover/discover.h"
#include "agent/nccl/nccl.h"

#ifndef TRUN_VERSION_STRING /* from build/gen/trun_version.h, which the Makefile writes from VERSION */
#define TRUN_VERSION_STRING "unknown"
#endif

extern char **environ;

/* From agent/discover/discover_rdma.c. */
int trun_pci_sysfs_path(const char *bus_id, char *out, size_t outlen);
int trun_rdma_sysfs_path(const char *name, char *out, size_t outlen);
const char *trun_pci_distance(const char *path_a, int numa_a, const char *path_b, int numa_b);

static const char *usage =
    "usage: trun-topo [--json] [--no-imds]\n"
    "       trun-topo --nccl-log FILE... [--efa] [--json]\n"
    "       trun-topo preflight [trun-preflight options]\n"
    "       trun-topo health [--json] [--no-imds] [--checks LIST]\n"
    "       trun-topo hang [--ras-addr HOST:PORT] [--once [--json]] [--window S] [--interval S] [--for S]\n"
    "       trun-topo hang --fr FILE...\n"
    "  Shows the GPUs the workers would see (NVML; the CUDA runtime where NVML is missing), the RDMA/EFA\n"
    "  devices (sysfs) and how they connect, like `nvidia-smi topo -m` with NIC columns, and the P2P read\n"
    "  status of each GPU pair like `nvidia-smi topo -p2p r`.\n"
    "  --json      machine-readable: instance_type, gpu_source (nvml|cudart|none), gpus, efa, other_rdma,\n"
    "              links, p2p (OK NS CNS GNS TNS DR U N/A), nproc_auto (visible GPUs, or the\n"
    "              CPUs the cgroup allows when there are none), env (variable -> value (null = not set),\n"
    "              source user|trun|plugin, reason; what trun gives the workers)\n"
    "  --no-imds   do not ask the EC2 instance metadata service for the instance type\n"
    "  --nccl-log FILE...  read NCCL INFO logs (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,NET): per\n"
    "              communicator its ranks, nodes, local ranks, the transport of each channel connection\n"
    "              (P2P/CUMEM, P2P/IPC, SHM, NET/Libfabric[/GDRDMA], NET/IB, NET/Socket) and a verdict;\n"
    "              --json: {communicators:[{nranks,nnodes,local_ranks,transports,verdicts,...}]};\n"
    "              --efa: EFA devices existed where the log was written (else: the log's NET/OFI lines)\n"
    "  preflight   run build/trun-preflight for this node's GPUs (NCCL all-reduce 8 B..1 GiB, busbw\n"
    "              verdict); see trun-preflight --help\n"
    "  health      the node health checks of trun's gate (--health-check), each with its status and\n"
    "              reason; exit 3 when one failed; see trun-topo health --help\n"
    "  hang        watch the NCCL job's collective counts through NCCL RAS and name the ranks of a hang;\n"
    "              exit 3 on a hang; see trun-topo hang --help\n"
    "  --version   print trun-topo's version and exit\n";

typedef struct {
  char gpu_path[TRUN_MAX_GPUS][PATH_MAX];
  char nic_path[TRUN_MAX_RDMA][PATH_MAX];
} topo_paths;

static const char *nic_gpu(const trun_node *n, const topo_paths *p, int r, int g) {
  if (!p->nic_path[r][0] || !p->gpu_path[g][0]) return "N/A";
  return trun_pci_distance(p->nic_path[r], n->rdma[r].numa_node, p->gpu_path[g], n->gpus[g].numa_node);
}

static const char *nic_nic(const trun_node *n, const topo_paths *p, int a, int b) {
  if (a == b) return "X";
  if (!p->nic_path[a][0] || !p->nic_path[b][0]) return "N/A";
  return trun_pci_distance(p->nic_path[a], n->rdma[a].numa_node, p->nic_path[b], n->rdma[b].numa_node);
}

static void print_numa(int numa) {
  if (numa >= 0)
    printf("%d", numa);
  else
    printf("N/A");
}

static void print_table(const trun_node *n, const topo_paths *p) {
  if (n->ngpu == 0 && n->nrdma == 0) { /* a CPU box: no matrix and no legend for it */
    printf("no NVIDIA GPU (GPU discovery: %s) and no RDMA device here: no topology to show\n",
           n->gpu_source && n->gpu_source[0] ? n->gpu_source : "none");
    return;
  }
  printf("\t");
  for (int g = 0; g < n->ngpu; g++) printf("GPU%d\t", g);
  for (int r = 0; r < n->nrdma; r++) printf("NIC%d\t", r);
  printf("CPU Affinity\tNUMA Affinity\n");
  for (int g = 0; g < n->ngpu; g++) {
    printf("GPU%d\t", g);
    for (int h = 0; h < n->ngpu; h++) printf("%s\t", g == h ? " X " : n->links[g][h]);
    for (int r = 0; r < n->nrdma; r++) printf("%s\t", nic_gpu(n, p, r, g));
    printf("%s\t", n->gpus[g].cpu_affinity[0] ? n->gpus[g].cpu_affinity : "N/A");
    print_numa(n->gpus[g].numa_node);
    printf("\n");
  }
  for (int r = 0; r < n->nrdma; r++) {
    printf("NIC%d\t", r);
    for (int g = 0; g < n->ngpu; g++) printf("%s\t", nic_gpu(n, p, r, g));
    for (int s = 0; s < n->nrdma; s++) printf("%s\t", r == s ? " X " : nic_nic(n, p, r, s));
    printf("\t");
    print_numa(n->rdma[r].numa_node);
    printf("\n");
  }
  if (n->ngpu) {
    printf("\nP2P read");
    for (int g = 0; g < n->ngpu; g++) printf("\tGPU%d", g);
    printf("\n");
    for (int g = 0; g < n->ngpu; g++) {
      printf("GPU%d", g);
      for (int h = 0; h < n->ngpu; h++) printf("\t%s", g == h ? " X " : n->p2p[g][h]);
      printf("\n");
    }
  }
  printf(
      "\nLegend:\n\n"
      "  X    = Self\n"
      "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., "
      "QPI/UPI)\n"
      "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a "
      "NUMA node\n"
      "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
      "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
      "  PIX  = Connection traversing at most a single PCIe bridge\n"
      "  NV#  = Connection traversing a bonded set of # NVLinks\n");
  if (n->ngpu)
    printf(
        "\nP2P Legend (nvidia-smi topo -p2p r):\n\n"
        "  OK   = Status Ok\n"
        "  CNS  = Chipset not supported\n"
        "  GNS  = GPU not supported\n"
        "  TNS  = Topology not supported\n"
        "  DR   = Disabled by the driver's registry key\n"
        "  NS   = Not supported\n"
        "  U    = Unknown\n"
        "  N/A  = Not known\n");
  if (n->nrdma) {
    printf("\nNIC Legend:\n\n");
    for (int r = 0; r < n->nrdma; r++) {
      const trun_rdma *d = &n->rdma[r];
      printf("  NIC%d: %s (%s, %s, %s)\n", r, d->name, d->driver[0] ? d->driver : "no driver",
             d->pci_bus_id[0] ? d->pci_bus_id : "no PCI address",
             d->usable ? "usable" : "no uverbs node here");
    }
  }
  printf("\nGPUs: %d (%s), GPU index = as the workers see it", n->ngpu, n->gpu_source);
  if (n->ngpu && strcmp(n->gpu_source, "cudart") == 0) {
    printf(" (the CUDA runtime: CUDA_VISIBLE_DEVICES applied by it; NVLinks not visible)");
  } else if (n->ngpu) {
    printf("; NVML index:");
    for (int g = 0; g < n->ngpu; g++) printf(" %d", n->gpus[g].index);
  }
  printf("\nInstance type: %s\n", n->instance.instance_type[0] ? n->instance.instance_type : "unknown");
}

static json_t *to_json(const trun_node *n, const topo_paths *p) {
  json_t *root = json_object();
  json_object_set_new(root, "instance_type", json_string(n->instance.instance_type));
  json_object_set_new(root, "gpu_source", json_string(n->gpu_source));
  json_t *gpus = json_array();
  for (int g = 0; g < n->ngpu; g++) {
    const trun_gpu *d = &n->gpus[g];
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(d->visible_index));
    json_object_set_new(o, "nvml_index", json_integer(d->index));
    json_object_set_new(o, "uuid", json_string(d->uuid));
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "pci_bus_id", json_string(d->pci_bus_id));
    json_object_set_new(o, "numa_node", json_integer(d->numa_node));
    json_object_set_new(o, "cpu_affinity", json_string(d->cpu_affinity));
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t)d->memory_bytes));
    json_array_append_new(gpus, o);
  }
  json_object_set_new(root, "gpus", gpus);
  json_t *efa = json_array(), *other = json_array();
  for (int r = 0; r < n->nrdma; r++) {
    const trun_rdma *d = &n->rdma[r];
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "driver", json_string(d->driver));
    json_object_set_new(o, "pci_bus_id", json_string(d->pci_bus_id));
    json_object_set_new(o, "numa_node", json_integer(d->numa_node));
    json_object_set_new(o, "usable", json_boolean(d->usable));
    json_object_set_new(o, "nearest_gpu", json_integer(d->nearest_gpu));
    json_t *dist = json_array();
    for (int g = 0; g < n->ngpu; g++) json_array_append_new(dist, json_string(nic_gpu(n, p, r, g)));
    json_object_set_new(o, "gpu_distance", dist);
    json_array_append_new(d->is_efa ? efa : other, o);
  }
  json_object_set_new(root, "efa", efa);
  json_object_set_new(root, "other_rdma", other);
  json_t *links = json_array();
  for (int g = 0; g < n->ngpu; g++) {
    json_t *row = json_array();
    for (int h = 0; h < n->ngpu; h++) json_array_append_new(row, json_string(n->links[g][h]));
    json_array_append_new(links, row);
  }
  json_object_set_new(root, "links", links);
  json_t *p2p = json_array();
  for (int g = 0; g < n->ngpu; g++) {
    json_t *row = json_array();
    for (int h = 0; h < n->ngpu; h++) json_array_append_new(row, json_string(n->p2p[g][h]));
    json_array_append_new(p2p, row);
  }
  json_object_set_new(root, "p2p", p2p);
  json_object_set_new(root, "nproc_auto", json_integer(trun_nproc_auto(n)));
  trun_env_plan *plan = malloc(sizeof(*plan));
  json_t *env = json_object();
  if (plan) {
    trun_nccl_env_decide(n, environ, 0, plan);
    for (int i = 0; i < plan->n; i++) {
      const trun_env_decision *d = &plan->d[i];
      json_object_set_new(env, d->name,
                          json_pack("{s:o, s:s, s:s}", "value", d->set ? json_string(d->value) : json_null(),
                                    "source", trun_env_source_name(d->source), "reason", d->reason));
    }
    free(plan);
  }
  json_object_set_new(root, "env", env);
  return root;
}

/* --nccl-log FILE...: exit 0, or 2 when a file cannot be read. */
static int nccl_log_main(char **files, int nfiles, int as_json, int efa) {
  trun_nccl_log *l = trun_nccl_log_new();
  if (l == NULL) {
    fprintf(stderr, "trun-topo: out of memory\n");
    return 1;
  }
  trun_nccl_log_set_efa(l, efa);
  for (int i = 0; i < nfiles; i++) {
    int rc = trun_nccl_log_feed_file(l, files[i]);
    if (rc < 0) {
      fprintf(stderr, "trun-topo: --nccl-log: cannot read %s: %s\n", files[i], strerror(-rc));
      trun_nccl_log_free(l);
      return 2;
    }
  }
  if (as_json) {
    json_t *j = trun_nccl_log_json(l);
    char *s = json_dumps(j, JSON_INDENT(2));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(j);
  } else {
    trun_nccl_log_print(l, stdout);
  }
  trun_nccl_log_free(l);
  return 0;
}

int trun_topo_preflight(int argc, char **argv); /* tools/topo_preflight.c */
int trun_topo_health(int argc, char **argv);    /* tools/topo_health.c */
int trun_topo_hang(int argc, char **argv);      /* tools/topo_hang.c */

int main(int argc, char **argv) {
  int as_json = 0, no_imds = 0, efa = 0, nfiles = 0, nccl_log = 0;
  if (argc > 1 && strcmp(argv[1], "preflight") == 0) return trun_topo_preflight(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "health") == 0) return trun_topo_health(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "hang") == 0) return trun_topo_hang(argc - 1, argv + 1);
  char **files = calloc((size_t)argc, sizeof(char *));
  if (files == NULL) {
    fprintf(stderr, "trun-topo: out of memory (calloc of %d argument slots)\n", argc);
    return 1;
  }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--nccl-log") == 0) {
      nccl_log = 1;
      while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) files[nfiles++] = argv[++i];
    } else if (strcmp(argv[i], "--efa") == 0) {
      efa = 1;
    } else if (strcmp(argv[i], "--json") == 0) {
      as_json = 1;
    } else if (strcmp(argv[i], "--no-imds") == 0) {
      no_imds = 1;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage, stdout);
      free(files);
      return 0;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("trun-topo %s\n", TRUN_VERSION_STRING);
      free(files);
      return 0;
    } else {
      fprintf(stderr, "trun-topo: unknown option '%s'; see trun-topo --help\n", argv[i]);
      free(files);
      return 2;
    }
  }
  if (nccl_log) {
    if (nfiles == 0) {
      fprintf(stderr, "trun-topo: --nccl-log needs at least one log file; see trun-topo --help\n");
      free(files);
      return 2;
    }
    int rc = nccl_log_main(files, nfiles, as_json, efa);
    free(files);
    return rc;
  }
  free(files);
  trun_node *n = calloc(1, sizeof(*n));
  topo_paths *p = calloc(1, sizeof(*p));
  if (!n || !p) {
    fprintf(stderr, "trun-topo: out of memory\n");
    free(n);
    free(p);
    return 1;
  }
  n->instance.source = "none";
  char err[512];
  if (trun_discover_gpus(n, environ, err, sizeof(err)) < 0) fprintf(stderr, "trun-topo: GPUs: %s\n", err);
  int rc = trun_discover_rdma(n);
  if (rc < 0)
    fprintf(stderr, "trun-topo: RDMA devices: cannot read class/infiniband under TRUN_SYSFS_ROOT (%s)\n",
            strerror(-rc));
  trun_discover_instance(n, no_imds);
  for (int g = 0; g < n->ngpu; g++)
    if (trun_pci_sysfs_path(n->gpus[g].pci_bus_id, p->gpu_path[g], sizeof(p->gpu_path[g])) < 0)
      p->gpu_path[g][0] = '\0';
  for (int r = 0; r < n->nrdma; r++)
    if (trun_rdma_sysfs_path(n->rdma[r].name, p->nic_path[r], sizeof(p->nic_path[r])) < 0)
      p->nic_path[r][0] = '\0';
  if (as_json) {
    json_t *j = to_json(n, p);
    char *s = json_dumps(j, JSON_INDENT(2));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(j);
  } else {
    print_table(n, p);
  }
  free(p);
  free(n);
  return 0;
}
