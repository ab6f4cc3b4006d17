/* trun --explain: what trun found on this node and which environment it gives the workers, with reasons. */
#include <stdlib.h>

#include "agent.h"
#include "agent/nccl/nccl.h"
#include "agent_int.h"
#include "worker_env.h"

static void print_summary(const trun_node *n, FILE *out) {
  const trun_instance *in = &n->instance;
  fprintf(out, "node:\n  instance type: %s (from %s)", in->instance_type[0] ? in->instance_type : "unknown",
          in->source ? in->source : "none");
  if (in->instance_id[0]) fprintf(out, "  id: %s", in->instance_id);
  if (in->availability_zone[0]) fprintf(out, "  zone: %s", in->availability_zone);
  if (in->placement_group[0]) fprintf(out, "  placement group: %s", in->placement_group);
  fprintf(out, "\n  GPUs: %d visible (%s)\n", n->ngpu, n->gpu_source ? n->gpu_source : "none");
  for (int g = 0; g < n->ngpu; g++) {
    const trun_gpu *d = &n->gpus[g];
    fprintf(out, "    GPU%d: %s %s, PCI %s, NUMA %d, CPUs %s", g, d->name, d->uuid, d->pci_bus_id,
            d->numa_node, d->cpu_affinity[0] ? d->cpu_affinity : "unknown");
    if (d->index >= 0)
      fprintf(out, " (NVML index %d)\n", d->index);
    else
      fprintf(out, " (CUDA runtime)\n");
  }
  if (n->ngpu >= 2) {
    fprintf(out, "  GPU links:");
    for (int a = 0; a < n->ngpu; a++)
      for (int b = a + 1; b < n->ngpu; b++) fprintf(out, " %d-%d:%s", a, b, n->links[a][b]);
    fprintf(out, "\n");
  }
  int efa = 0, usable = 0;
  for (int r = 0; r < n->nrdma; r++)
    efa += n->rdma[r].is_efa, usable += n->rdma[r].is_efa && n->rdma[r].usable;
  fprintf(out, "  EFA devices: %d, usable in this container: %d\n", efa, usable);
  for (int r = 0; r < n->nrdma; r++) {
    const trun_rdma *d = &n->rdma[r];
    fprintf(out, "    %s: %s, PCI %s, NUMA %d, %s", d->name, d->driver[0] ? d->driver : "no driver",
            d->pci_bus_id[0] ? d->pci_bus_id : "unknown", d->numa_node,
            d->usable ? "usable" : "no uverbs node here");
    if (d->nearest_gpu >= 0) fprintf(out, ", nearest GPU%d", d->nearest_gpu);
    fprintf(out, "\n");
  }
  char ifs[256];
  int nif = trun_socket_interfaces(ifs, sizeof(ifs));
  fprintf(out, "  network interfaces for NCCL sockets: %s\n", nif ? ifs : "none");
  fprintf(out, "  CPUs usable (affinity, cgroup quota): %d\n", n->cpus_usable);
}

static void print_decision(const trun_env_decision *d, FILE *out) {
  if (d->set)
    fprintf(out, "  %s=%s\n", d->name, d->value);
  else
    fprintf(out, "  %s %s\n", d->name,
            d->source == TRUN_ENV_PLUGIN ? "(left to plugin, not set)" : "(not set)");
  fprintf(out, "      source: %s; %s\n", trun_env_source_name(d->source), d->reason); /* in words */
}

int trun_explain(const trun_config *cfg, char **envp, FILE *out) {
  char err[512];
  int nproc = 0;
  if (trun_nproc_resolve(cfg->nproc_spec, &nproc, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  trun_node *n = malloc(sizeof(*n));
  trun_env_plan *plan = malloc(sizeof(*plan));
  if (n == NULL || plan == NULL) {
    fprintf(stderr, "trun: error: out of memory for --explain\n");
    free(n);
    free(plan);
    return 1;
  }
  if (trun_discover_node(n, envp, TRUN_IDENTITY_ALWAYS, cfg->no_imds, err, sizeof(err)) < 0)
    fprintf(stderr, "trun: warning: GPU discovery: %s\n", err);
  trun_nccl_env_decide(n, envp, cfg->warm_start && cfg->warm_cuda ? TRUN_NCCL_WARM_CUDA : 0, plan);
  fprintf(out, "trun --explain: %s\n",
          cfg->warm_start ? "no worker is started (one --warm-start pool process is, to measure it)"
                          : "nothing is started");
  print_summary(n, out);
  fprintf(out, "workers on this node: %d (--nproc-per-node %s; auto here = %d)\n", nproc, cfg->nproc_spec,
          trun_nproc_auto(n));
  if (cfg->numa_binding) {
    fprintf(out, "--numa-binding %s:\n", cfg->numa_binding);
    for (int lr = 0; lr < nproc; lr++) {
      char cpus[1024];
      trun_numa_cpus_for(n, lr, cpus, sizeof(cpus));
      fprintf(out, "  local rank %d: %s\n", lr, cpus[0] ? cpus : "not pinned (no GPU or no NUMA CPUs known)");
    }
  }
  fprintf(out, "environment decisions (%d):\n", plan->n);
  if (plan->n == 0) fprintf(out, "  none: no NVIDIA GPU and no usable EFA device here\n");
  for (int i = 0; i < plan->n; i++) print_decision(&plan->d[i], out);
  int omp_forced;
  char **base = trun_agent_env(envp, cfg, nproc, n, &omp_forced);
  if (base) trun__agent_warm_describe(cfg, base, nproc, 1, out);
  trun_strv_free(base);
  free(plan);
  free(n);
  return 0;
}
