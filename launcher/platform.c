/* Platform detection (launcher/platform.h): one detector per scheduler, each reading only the environment
 * given (and, for the MPI Operator, its hostfile), so that the tests can feed any environment. */
#include "platform.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

#define TRUN_HOSTLIST_MAX 100000

/* A decimal integer in [lo, hi] with nothing around it. */
static int trun_pint(const char *s, long lo, long hi, long *out) {
  if (!s || !isdigit((unsigned char)s[0])) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*end || errno == ERANGE || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* ---- hostlists -------------------------------------------------------------------------------------- */

typedef struct {
  char **v;
  int n, cap;
} trun_hosts;

static int trun_hosts_add(trun_hosts *h, const char *s, size_t len) {
  if (h->n == TRUN_HOSTLIST_MAX) return -1;
  if (h->n == h->cap) {
    int cap = h->cap ? h->cap * 2 : 16;
    char **v = realloc(h->v, (size_t)cap * sizeof(char *));
    if (!v) return -1;
    h->v = v;
    h->cap = cap;
  }
  h->v[h->n] = strndup(s, len);
  if (!h->v[h->n]) return -1;
  h->n++;
  return 0;
}

void trun_hostlist_free(char **hosts, int n) {
  for (int i = 0; i < n; i++) free(hosts[i]);
  free(hosts);
}

/* Expands item[0..len) (one comma-free-at-top-level entry) onto prefix, appending to h. */
static int trun_expand_item(const char *item, size_t len, char *prefix, size_t plen, size_t pcap,
                            trun_hosts *h, char *err, size_t errlen) {
  const char *open = memchr(item, '[', len);
  const char *close = memchr(item, ']', len);
  if (!open) {
    if (close) return trun_errf(err, errlen, "unbalanced ']' in '%.*s'", (int)len, item);
    if (plen + len >= pcap) return trun_errf(err, errlen, "host name too long in '%.*s'", (int)len, item);
    memcpy(prefix + plen, item, len);
    if (trun_hosts_add(h, prefix, plen + len) < 0)
      return trun_errf(err, errlen, "more than %d hosts, or out of memory", TRUN_HOSTLIST_MAX);
    return 0;
  }
  size_t lit = (size_t)(open - item);
  close = memchr(open, ']', len - lit);
  if (!close) return trun_errf(err, errlen, "missing ']' in '%.*s'", (int)len, item);
  if (close && memchr(open + 1, '[', (size_t)(close - open - 1)))
    return trun_errf(err, errlen, "nested '[' in '%.*s'", (int)len, item);
  if (plen + lit >= pcap) return trun_errf(err, errlen, "host name too long in '%.*s'", (int)len, item);
  memcpy(prefix + plen, item, lit);
  size_t base = plen + lit;
  const char *rest = close + 1;
  size_t restlen = len - (size_t)(rest - item);
  const char *r = open + 1;
  if (r == close) return trun_errf(err, errlen, "empty range '[]' in '%.*s'", (int)len, item);
  while (r < close) {
    const char *comma = memchr(r, ',', (size_t)(close - r));
    const char *end = comma ? comma : close;
    const char *dash = memchr(r, '-', (size_t)(end - r));
    const char *lo_end = dash ? dash : end;
    size_t width = (size_t)(lo_end - r);
    long lo, hi;
    char num[24];
    if (width == 0 || width >= sizeof(num) || (dash && (end - dash - 1 <= 0 || end - dash - 1 >= 24)))
      return trun_errf(err, errlen, "bad range '%.*s' in '%.*s'", (int)(end - r), r, (int)len, item);
    memcpy(num, r, width);
    num[width] = '\0';
    if (trun_pint(num, 0, 999999999, &lo) < 0)
      return trun_errf(err, errlen, "bad range '%.*s' in '%.*s'", (int)(end - r), r, (int)len, item);
    hi = lo;
    if (dash) {
      size_t hl = (size_t)(end - dash - 1);
      memcpy(num, dash + 1, hl);
      num[hl] = '\0';
      if (trun_pint(num, 0, 999999999, &hi) < 0 || hi < lo)
        return trun_errf(err, errlen, "bad range '%.*s' in '%.*s'", (int)(end - r), r, (int)len, item);
    }
    if (hi - lo >= TRUN_HOSTLIST_MAX)
      return trun_errf(err, errlen, "range '%.*s' has more than %d hosts", (int)(end - r), r,
                       TRUN_HOSTLIST_MAX);
    for (long x = lo; x <= hi; x++) {
      int w = snprintf(num, sizeof(num), "%0*ld", (int)width, x);
      if (base + (size_t)w >= pcap)
        return trun_errf(err, errlen, "host name too long in '%.*s'", (int)len, item);
      memcpy(prefix + base, num, (size_t)w);
      if (trun_expand_item(rest, restlen, prefix, base + (size_t)w, pcap, h, err, errlen) < 0) return -1;
    }
    r = comma ? comma + 1 : close;
    if (comma && r == close) return trun_errf(err, errlen, "empty range after ',' in '%.*s'", (int)len, item);
  }
  return 0;
}

int trun_hostlist_expand(const char *list, char ***hosts, int *n, char *err, size_t errlen) {
  trun_hosts h = {0};
  char prefix[1024];
  *hosts = NULL;
  *n = 0;
  const char *p = list;
  while (*p) {
    const char *e = p;
    int depth = 0;
    for (; *e && (*e != ',' || depth); e++) {
      if (*e == '[') depth++;
      if (*e == ']') depth--;
    }
    if (e == p || trun_expand_item(p, (size_t)(e - p), prefix, 0, sizeof(prefix), &h, err, errlen) < 0) {
      if (e == p) trun_errf(err, errlen, "empty host name in '%s'", list);
      trun_hostlist_free(h.v, h.n);
      return -1;
    }
    p = *e ? e + 1 : e;
    if (*e && !*p) {
      trun_hostlist_free(h.v, h.n);
      return trun_errf(err, errlen, "empty host name in '%s'", list);
    }
  }
  if (h.n == 0) {
    trun_hostlist_free(h.v, h.n);
    return trun_errf(err, errlen, "no hosts in '%s'", list);
  }
  *hosts = h.v;
  *n = h.n;
  return 0;
}

/* ---- results ---------------------------------------------------------------------------------------- */

static int trun_pset(trun_platform *p, trun_opt_id id, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int trun_pset(trun_platform *p, trun_opt_id id, const char *why, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  free(p->val[id]);
  p->val[id] = strdup(buf);
  p->why[id] = why;
  return p->val[id] ? 0 : -1;
}

static void trun_pnote(trun_platform *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void trun_pnote(trun_platform *p, const char *fmt, ...) {
  if (p->note[0]) trun_catf(p->note, sizeof(p->note), "; ");
  va_list ap;
  va_start(ap, fmt);
  trun_vcatf(p->note, sizeof(p->note), fmt, ap);
  va_end(ap);
}

void trun_platform_free(trun_platform *p) {
  for (int i = 0; i < TRUN_OPT__COUNT; i++) free(p->val[i]);
  memset(p, 0, sizeof(*p));
}

void trun_platform_apply(const trun_platform *p, trun_settings *cl) {
  if (!p->name) return;
  cl->platform = p->name;
  cl->platform_note = p->note[0] ? p->note : NULL;
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    if (!p->val[id] || cl->v[id].src != TRUN_SRC_DEFAULT) continue;
    cl->v[id].val = p->val[id];
    cl->v[id].src = TRUN_SRC_DETECTED;
    cl->v[id].why = p->why[id];
  }
}

/* ---- detectors: 1 detected, 0 not this platform, -1 error ------------------------------------------- */

typedef struct {
  char **envp;
  const trun_platform_host *host;
  int forced; /* TRUN_PLATFORM names this one: missing variables are errors */
  char *err;
  size_t errlen;
} trun_pctx;

#define ENV(name) trun_env_get(c->envp, name)

static int trun_need_int(trun_pctx *c, const char *var, long lo, long hi, long *out) {
  const char *s = ENV(var);
  if (trun_pint(s, lo, hi, out) < 0)
    return trun_errf(c->err, c->errlen,
                     "%s='%s' is not an integer from %ld to %ld (set TRUN_PLATFORM=none to "
                     "skip platform detection)",
                     var, s ? s : "", lo, hi);
  return 0;
}

static int trun_missing(trun_pctx *c, const char *platform, const char *vars) {
  if (!c->forced) return 0;
  return trun_errf(c->err, c->errlen, "TRUN_PLATFORM=%s but the environment lacks %s", platform, vars);
}

/* Entries of a comma-separated list ("0,1,3": 3); 0 for NULL or "". */
static long trun_list_len(const char *s) {
  if (!s || !*s) return 0;
  long n = 1;
  for (; *s; s++) n += *s == ',';
  return n;
}

static int trun_detect_slurm(trun_pctx *c, trun_platform *p) {
  const char *nn_var = ENV("SLURM_NNODES") ? "SLURM_NNODES" : "SLURM_JOB_NUM_NODES";
  const char *list_var = ENV("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
  if (!ENV("SLURM_JOB_ID") || !ENV(nn_var) || !ENV("SLURM_NODEID") || !ENV(list_var))
    return trun_missing(c, "slurm", "SLURM_JOB_ID, SLURM_NNODES, SLURM_NODEID or SLURM_JOB_NODELIST");
  p->name = "slurm";
  /* Under srun (a job step) every task is one agent: the step's tasks are the job's nodes and SLURM_PROCID
   * is this agent's rank, so that --ntasks-per-node=K gives the K agents of a node distinct ranks (with one
   * task per node these equal SLURM_NNODES and SLURM_NODEID). Outside a step (the batch script, salloc's
   * shell) the allocation's nodes count. */
  int step = ENV("SLURM_STEP_NUM_TASKS") && ENV("SLURM_PROCID");
  const char *count_var = step ? "SLURM_STEP_NUM_TASKS" : nn_var;
  const char *rank_var = step ? "SLURM_PROCID" : "SLURM_NODEID";
  if (step && ENV("SLURM_STEP_NODELIST")) list_var = "SLURM_STEP_NODELIST";
  long nnodes, rank, v, step_nodes;
  if (trun_need_int(c, count_var, 1, 1000000, &nnodes) < 0 ||
      trun_need_int(c, rank_var, 0, nnodes - 1, &rank) < 0)
    return -1;
  char **hosts;
  int nh;
  char why[256];
  if (trun_hostlist_expand(ENV(list_var), &hosts, &nh, why, sizeof(why)) < 0)
    return trun_errf(c->err, c->errlen, "%s='%s': %s (set TRUN_PLATFORM=none to skip platform detection)",
                     list_var, ENV(list_var), why);
  const char *master_why = !strcmp(list_var, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST, first host"
                           : !strcmp(list_var, "SLURM_NODELIST")    ? "SLURM_NODELIST, first host"
                                                                    : "SLURM_JOB_NODELIST, first host";
  int rc = trun_pset(p, TRUN_OPT_MASTER_ADDR, master_why, "%s", hosts[0]);
  if (!step && nh != nnodes) trun_pnote(p, "%s has %d hosts but %s=%ld", list_var, nh, nn_var, nnodes);
  if (step && trun_pint(ENV("SLURM_STEP_NUM_NODES"), 1, 1000000, &step_nodes) == 0 && nh != step_nodes)
    trun_pnote(p, "%s has %d hosts but SLURM_STEP_NUM_NODES=%ld", list_var, nh, step_nodes);
  trun_hostlist_free(hosts, nh);
  rc |= trun_pset(p, TRUN_OPT_NNODES, count_var, "%ld", nnodes);
  rc |= trun_pset(p, TRUN_OPT_NODE_RANK, rank_var, "%ld", rank);
  rc |= trun_pset(p, TRUN_OPT_RDZV_ID, "SLURM_JOB_ID", "%s", ENV("SLURM_JOB_ID"));
  /* SLURM_GPUS_ON_NODE counts the node's GPUs of the job, also when each task has its own
   * (--gpus-per-task): this task's are in SLURM_STEP_GPUS. */
  long mine = step ? trun_list_len(ENV("SLURM_STEP_GPUS")) : 0;
  if (trun_pint(ENV("SLURM_GPUS_ON_NODE"), 1, 1024, &v) == 0 && mine > 0 && mine < v)
    rc |= trun_pset(p, TRUN_OPT_NPROC_PER_NODE, "SLURM_STEP_GPUS", "%ld", mine);
  else if (trun_pint(ENV("SLURM_GPUS_ON_NODE"), 1, 1024, &v) == 0)
    rc |= trun_pset(p, TRUN_OPT_NPROC_PER_NODE, "SLURM_GPUS_ON_NODE", "%ld", v);
  else if (!step && trun_pint(ENV("SLURM_NTASKS_PER_NODE"), 1, 1024, &v) == 0)
    /* One agent for the allocation (started by the batch script): its tasks per node are the workers. In
     * a step each task is an agent, so the count says nothing about workers. */
    rc |= trun_pset(p, TRUN_OPT_NPROC_PER_NODE, "SLURM_NTASKS_PER_NODE", "%ld", v);
  return rc ? trun_errf(c->err, c->errlen, "out of memory") : 1;
}

static int trun_detect_trainer_v2(trun_pctx *c, trun_platform *p) {
  if (!ENV("KUBERNETES_SERVICE_HOST") || !ENV("PET_NNODES") || !ENV("PET_NODE_RANK") ||
      !ENV("PET_MASTER_ADDR") || (ENV("MASTER_ADDR") && ENV("WORLD_SIZE") && !c->forced))
    return trun_missing(c, "kubeflow-trainer-v2",
                        "KUBERNETES_SERVICE_HOST, PET_NNODES, PET_NODE_RANK or PET_MASTER_ADDR");
  p->name = "kubeflow-trainer-v2";
  /* PET_* are read as environment settings (they beat a config file); the torch plugin means nproc auto. */
  if (!ENV("PET_NPROC_PER_NODE") && trun_pset(p, TRUN_OPT_NPROC_PER_NODE, "Trainer v2 default", "auto") < 0)
    return trun_errf(c->err, c->errlen, "out of memory");
  return 1;
}

static int trun_detect_pytorchjob_v1(trun_pctx *c, trun_platform *p) {
  if (!ENV("KUBERNETES_SERVICE_HOST") || !ENV("MASTER_ADDR") || !ENV("MASTER_PORT") || !ENV("WORLD_SIZE") ||
      !ENV("RANK") || ((ENV("TORCHELASTIC_RUN_ID") || ENV("LOCAL_RANK")) && !c->forced))
    return trun_missing(c, "kubeflow-pytorchjob-v1",
                        "KUBERNETES_SERVICE_HOST, MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK");
  p->name = "kubeflow-pytorchjob-v1";
  long world, rank, port, per = 1;
  if (trun_need_int(c, "WORLD_SIZE", 1, 100000000, &world) < 0 ||
      trun_need_int(c, "MASTER_PORT", 1, 65535, &port) < 0)
    return -1;
  /* WORLD_SIZE = replicas x nprocPerNode when nprocPerNode is an integer, else the number of pods. */
  const char *why = "WORLD_SIZE (pods)";
  if (trun_pint(ENV("PET_NPROC_PER_NODE"), 1, 1024, &per) == 0 && per > 1 && world % per == 0) {
    why = "WORLD_SIZE / PET_NPROC_PER_NODE";
    world /= per;
  }
  if (trun_need_int(c, "RANK", 0, world - 1, &rank) < 0) return -1;
  int rc = trun_pset(p, TRUN_OPT_NNODES, why, "%ld", world);
  rc |= trun_pset(p, TRUN_OPT_NODE_RANK, "RANK (the pod's index: a node rank)", "%ld", rank);
  rc |= trun_pset(p, TRUN_OPT_MASTER_ADDR, "MASTER_ADDR", "%s", ENV("MASTER_ADDR"));
  rc |= trun_pset(p, TRUN_OPT_MASTER_PORT, "MASTER_PORT", "%ld", port);
  return rc ? trun_errf(c->err, c->errlen, "out of memory") : 1;
}

static int trun_detect_indexed(trun_pctx *c, trun_platform *p, const char *which) {
  if (!ENV("KUBERNETES_SERVICE_HOST") || !ENV("JOB_COMPLETION_INDEX"))
    return trun_missing(c, which, "KUBERNETES_SERVICE_HOST or JOB_COMPLETION_INDEX");
  p->name = which;
  long index;
  if (trun_need_int(c, "JOB_COMPLETION_INDEX", 0, 100000000, &index) < 0) return -1;
  if (trun_pset(p, TRUN_OPT_NODE_RANK, "JOB_COMPLETION_INDEX", "%ld", index) < 0)
    return trun_errf(c->err, c->errlen, "out of memory");
  /* The pod's hostname is <job>-<index> (a JobSet's Job is <jobset>-<replicated job>-<job index>); index 0
   * is <job>-0, reachable as <job>-0.<subdomain> through the headless Service named by spec.subdomain. */
  const char *host = c->host && c->host->hostname ? c->host->hostname : "";
  char suffix[32];
  int sl = snprintf(suffix, sizeof(suffix), "-%ld", index);
  size_t hl = strlen(host);
  if (hl <= (size_t)sl || strcmp(host + hl - (size_t)sl, suffix) != 0) {
    trun_pnote(p,
               "hostname '%s' does not end with -%ld, so the master address (index 0) is unknown: set "
               "--master-addr",
               host, index);
    return 1;
  }
  const char *svc = ENV("TRUN_MASTER_SERVICE");
  char fq[512] = "";
  const char *domain = NULL, *why = "hostname with index 0 + TRUN_MASTER_SERVICE";
  if (svc && *svc) {
    domain = svc;
  } else {
    const char *f = c->host ? c->host->fqdn : NULL;
    if (!f && c->host && c->host->fqdn_fn) {
      c->host->fqdn_fn(fq, sizeof(fq));
      f = fq;
    }
    if (f && strncmp(f, host, hl) == 0 && f[hl] == '.' && f[hl + 1]) {
      domain = f + hl + 1;
      why = "hostname with index 0 + the pod's subdomain";
    }
  }
  int rc;
  if (domain) {
    rc = trun_pset(p, TRUN_OPT_MASTER_ADDR, why, "%.*s0.%s", (int)(hl - (size_t)sl + 1), host, domain);
  } else {
    rc = trun_pset(p, TRUN_OPT_MASTER_ADDR, "hostname with index 0", "%.*s0", (int)(hl - (size_t)sl + 1),
                   host);
    trun_pnote(
        p,
        "the pod has no subdomain: set spec.subdomain to a headless Service, or TRUN_MASTER_SERVICE to "
        "its name, so that the master address resolves");
  }
  if (!ENV("PET_NNODES"))
    trun_pnote(p,
               "the node count is not in an Indexed Job's environment: set --nnodes, PET_NNODES or nnodes: "
               "in the config file");
  return rc ? trun_errf(c->err, c->errlen, "out of memory") : 1;
}

/* A JobSet's pods are an Indexed Job's, with the JobSet's name in JOBSET_NAME (from its label, through the
 * downward API as the JobSet examples and trun's manifests set it). */
static int trun_detect_jobset(trun_pctx *c, trun_platform *p) {
  if (!ENV("JOBSET_NAME") && !c->forced) return 0;
  return trun_detect_indexed(c, p, "jobset");
}
static int trun_detect_indexed_job(trun_pctx *c, trun_platform *p) {
  return trun_detect_indexed(c, p, "indexed-job");
}

/* "host slots=N" (Open MPI) or "host:N" (Intel MPI / MPICH); '#' starts a comment. */
static int trun_detect_mpi(trun_pctx *c, trun_platform *p) {
  static const char *const vars[] = {"OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_HOST_FILE",
                                     "HYDRA_HOST_FILE"};
  const char *path = NULL, *var = NULL;
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]) && !path; i++)
    if (ENV(vars[i]) && *ENV(vars[i])) path = ENV(var = vars[i]);
  if (!path && (ENV("K_MPI_JOB_ROLE") || c->forced) && c->host && c->host->mpi_hostfile &&
      access(c->host->mpi_hostfile, R_OK) == 0)
    path = var = c->host->mpi_hostfile;
  if (!path) return trun_missing(c, "mpi-operator", "OMPI_MCA_orte_default_hostfile or /etc/mpi/hostfile");
  p->name = "mpi-operator";
  FILE *f = fopen(path, "r");
  if (!f)
    return trun_errf(c->err, c->errlen, "cannot read the MPI hostfile %s (from %s): %s", path, var,
                     strerror(errno));
  char line[1024], first[512] = "";
  long n = 0, rank = -1, slots = -1;
  int same_slots = 1;
  const char *host = c->host && c->host->hostname ? c->host->hostname : "";
  while (fgets(line, sizeof(line), f)) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *h = line + strspn(line, " \t\r\n");
    size_t hl = strcspn(h, " \t\r\n:");
    if (hl == 0) continue;
    long s = -1;
    char *rest = h + hl;
    if (*rest == ':')
      s = strtol(rest + 1, NULL, 10);
    else if ((rest = strstr(rest, "slots=")))
      s = strtol(rest + 6, NULL, 10);
    h[hl] = '\0';
    if (n == 0) snprintf(first, sizeof(first), "%s", h);
    if (rank < 0 && *host &&
        (!strcmp(h, host) || (!strncmp(h, host, strlen(host)) && h[strlen(host)] == '.')))
      rank = n;
    if (n == 0)
      slots = s;
    else if (s != slots)
      same_slots = 0;
    n++;
  }
  fclose(f);
  if (n == 0) return trun_errf(c->err, c->errlen, "the MPI hostfile %s (from %s) lists no hosts", path, var);
  int rc = trun_pset(p, TRUN_OPT_NNODES, "MPI hostfile lines", "%ld", n);
  rc |= trun_pset(p, TRUN_OPT_MASTER_ADDR, "MPI hostfile, first host", "%s", first);
  long wr, ws;
  if (rank >= 0)
    rc |= trun_pset(p, TRUN_OPT_NODE_RANK, "this host's line in the MPI hostfile", "%ld", rank);
  else if (trun_pint(ENV("OMPI_COMM_WORLD_SIZE"), 1, 1000000, &ws) == 0 && ws == n &&
           trun_pint(ENV("OMPI_COMM_WORLD_RANK"), 0, n - 1, &wr) == 0)
    rc |= trun_pset(p, TRUN_OPT_NODE_RANK, "OMPI_COMM_WORLD_RANK (one trun per host)", "%ld", wr);
  else
    trun_pnote(p, "host '%s' is not in %s: set --node-rank", host, path);
  if (same_slots && slots > 0)
    rc |= trun_pset(p, TRUN_OPT_NPROC_PER_NODE, "MPI hostfile slots", "%ld", slots);
  return rc ? trun_errf(c->err, c->errlen, "out of memory") : 1;
}

static const struct {
  const char *name;
  int (*fn)(trun_pctx *c, trun_platform *p);
} trun_detectors[] = {
    /* In this order: Trainer v2 runs on JobSet, PyTorchJob v1 elastic sets PET_* too. */
    {"slurm", trun_detect_slurm},
    {"kubeflow-trainer-v2", trun_detect_trainer_v2},
    {"kubeflow-pytorchjob-v1", trun_detect_pytorchjob_v1},
    {"mpi-operator", trun_detect_mpi},
    {"jobset", trun_detect_jobset},
    {"indexed-job", trun_detect_indexed_job},
};
#define TRUN_NDETECTORS (sizeof(trun_detectors) / sizeof(trun_detectors[0]))

int trun_platform_detect(char **envp, const trun_platform_host *host, trun_platform *out, char *err,
                         size_t errlen) {
  memset(out, 0, sizeof(*out));
  trun_pctx c = {.envp = envp, .host = host, .err = err, .errlen = errlen};
  const char *want = trun_env_get(envp, "TRUN_PLATFORM");
  if (want && (!strcmp(want, "none") || !strcmp(want, "off"))) return 0;
  int any = !want || !*want || !strcmp(want, "auto");
  for (size_t i = 0; i < TRUN_NDETECTORS; i++) {
    if (!any && strcmp(want, trun_detectors[i].name) != 0) continue;
    c.forced = !any;
    int rc = trun_detectors[i].fn(&c, out);
    if (rc < 0) {
      trun_platform_free(out);
      return -1;
    }
    if (rc > 0 || !any) return 0;
    trun_platform_free(out); /* a detector that declined leaves nothing behind */
  }
  if (!any) {
    trun_errf(err, errlen, "TRUN_PLATFORM='%s' is not one of auto, none", want);
    for (size_t i = 0; i < TRUN_NDETECTORS; i++) {
      size_t n = strlen(err);
      snprintf(err + n, errlen > n ? errlen - n : 0, ", %s", trun_detectors[i].name);
    }
    return -1;
  }
  return 0;
}
