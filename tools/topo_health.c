/* `trun-topo health [--json] [--no-imds] [--checks LIST]`: the node health checks the agent's gate runs
 * (agent/discover/health.h), for this node alone: GPU discovery with the health facts (NVML in a short-lived
 * child), RDMA devices, the instance type (IMDS within 1 s unless --no-imds, then DMI), then every check.
 * The table gives each check's status, value, threshold and reason; --json the same with its source, the
 * node's summary and elapsed_ms (the wall time of discovery and checks, what the gate adds to a start).
 * Exit: 0 when no check failed (warnings and skips included), 3 when one failed (the agent's unhealthy
 * code: a Slurm prolog or a Kubernetes pre-flight can act on it), 2 for a bad option or check list. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/discover/discover.h"
#include "agent/observe/observe.h"
#include "base/base.h"

extern char **environ;

int trun_topo_health(int argc, char **argv);

static const char *usage =
    "usage: trun-topo health [--json] [--no-imds] [--checks LIST]\n"
    "  Runs the node health checks of trun's gate (--health-check): NVML, GPU count, row remapping,\n"
    "  retired pages, ECC, clock slowdowns, PCIe link, NVLinks, the driver's recovery action, EFA ports\n"
    "  and count, /dev/shm. Each check: pass, warn, fail, or skip when it cannot run here.\n"
    "  --json        {host, instance_type, gpu_source, gpus, efa, status, elapsed_ms, checks:[{name,\n"
    "                status, value, threshold, reason, source}]}\n"
    "  --no-imds     the instance type from DMI only (no instance-metadata request)\n"
    "  --checks LIST all (default), or check names separated by commas; -name leaves one out\n"
    "  Exit: 0 no check failed, 3 a check failed, 2 bad usage.\n";

static const char *upper(trun_health_status s) {
  switch (s) {
    case TRUN_HEALTH_PASS: return "PASS";
    case TRUN_HEALTH_WARN: return "WARN";
    case TRUN_HEALTH_FAIL: return "FAIL";
    case TRUN_HEALTH_SKIP: return "skip";
  }
  return "?";
}

static void print_table(const trun_node *n, const trun_health *h, int nefa) {
  char host[256];
  trun_fqdn(host, sizeof(host));
  printf("trun-topo health: %s, %s, %d GPU(s) (%s), %d EFA device(s)\n", host,
         n->instance.instance_type[0] ? n->instance.instance_type : "instance type unknown", n->ngpu,
         n->gpu_source, nefa);
  int count[4] = {0};
  for (int i = 0; i < h->n; i++) {
    const trun_health_check *c = &h->c[i];
    count[c->status]++;
    printf("%-5s %-16s %s%s%s%s\n", upper(c->status), c->name, c->value,
           c->threshold[0] ? " (threshold " : "", c->threshold, c->threshold[0] ? ")" : "");
    printf("      %s\n", c->reason);
  }
  printf("verdict: %s: %d passed, %d warned, %d failed, %d could not run; %.1f ms\n",
         h->worst == TRUN_HEALTH_FAIL   ? "FAIL"
         : h->worst == TRUN_HEALTH_WARN ? "WARN"
                                        : "PASS",
         count[TRUN_HEALTH_PASS], count[TRUN_HEALTH_WARN], count[TRUN_HEALTH_FAIL], count[TRUN_HEALTH_SKIP],
         h->elapsed_ms);
}

static void print_json(const trun_node *n, const trun_health *h, int nefa) {
  char host[256];
  trun_fqdn(host, sizeof(host));
  json_t *checks = json_array();
  for (int i = 0; i < h->n; i++) json_array_append_new(checks, trun_obs_health_json(&h->c[i]));
  trun_health_status worst = h->worst == TRUN_HEALTH_SKIP ? TRUN_HEALTH_PASS : h->worst;
  json_t *root =
      json_pack("{s:s,s:s,s:s,s:i,s:i,s:s,s:f,s:o}", "host", host, "instance_type", n->instance.instance_type,
                "gpu_source", n->gpu_source, "gpus", n->ngpu, "efa", nefa, "status",
                trun_health_status_name(worst), "elapsed_ms", h->elapsed_ms, "checks", checks);
  char *s = json_dumps(root, JSON_INDENT(2));
  if (s) printf("%s\n", s);
  free(s);
  json_decref(root);
}

int trun_topo_health(int argc, char **argv) {
  int as_json = 0, no_imds = 0;
  unsigned mask = TRUN_HEALTH_ALL;
  for (int i = 1; i < argc; i++) {
    char err[512];
    if (strcmp(argv[i], "--json") == 0) {
      as_json = 1;
    } else if (strcmp(argv[i], "--no-imds") == 0) {
      no_imds = 1;
    } else if (strcmp(argv[i], "--checks") == 0 || strncmp(argv[i], "--checks=", 9) == 0) {
      const char *list = argv[i][8] == '=' ? argv[i] + 9 : (i + 1 < argc ? argv[++i] : NULL);
      if (list == NULL) {
        fprintf(stderr, "trun-topo health: --checks needs a list of checks; see trun-topo health --help\n");
        return 2;
      }
      if (trun_health_parse_checks(list, &mask, err, sizeof(err)) < 0) {
        fprintf(stderr, "trun-topo health: --checks: %s\n", err);
        return 2;
      }
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage, stdout);
      return 0;
    } else {
      fprintf(stderr, "trun-topo health: unknown option '%s'; see trun-topo health --help\n", argv[i]);
      return 2;
    }
  }
  trun_node *n = calloc(1, sizeof(*n));
  trun_health *h = malloc(sizeof(*h));
  if (n == NULL || h == NULL) {
    fprintf(stderr, "trun-topo health: out of memory\n");
    free(n);
    free(h);
    return 1;
  }
  double t0 = trun_mono_ms();
  char err[512] = "";
  n->instance.source = "none";
  trun_discover_gpus_flags(n, environ, TRUN_GPU_NO_AFFINITY | TRUN_GPU_HEALTH, err, sizeof(err));
  trun_discover_rdma(n);
  trun_discover_instance(n, no_imds);
  trun_health_run(n, environ, err, mask, h);
  h->elapsed_ms = trun_mono_ms() - t0;
  int nefa = 0;
  for (int r = 0; r < n->nrdma; r++) nefa += n->rdma[r].is_efa;
  if (as_json)
    print_json(n, h, nefa);
  else
    print_table(n, h, nefa);
  int code = h->worst == TRUN_HEALTH_FAIL ? TRUN_EXIT_UNHEALTHY : 0;
  free(h);
  free(n);
  return code;
}
