/* Environment decisions (agent/nccl/nccl_env.h). Each rule's comment names the spec section it rests on
 * (shared/spec/gpu-efa-nccl.md) and its source keys (O1 = aws-ofi-nccl platform code, L1 = libfabric EFA
 * provider, N1/N5 = NCCL paths.cc / socket.cc, ...). What the rules do:
 *  - usable EFA devices (a uverbs node in this container, §1): FI_PROVIDER=efa; FI_EFA_USE_DEVICE_RDMA=1
 *    only on instance types with GPUDirect RDMA (§2 table); the variables aws-ofi-nccl inserts itself
 *    (FI_EFA_FORK_SAFE, NCCL_PROTO, NCCL_BUFFSIZE, ...; §3) are listed as left to the plugin;
 *  - NVIDIA GPUs: never NCCL_TOPO_FILE (§2), NCCL_P2P_LEVEL=NVL when every visible pair is NVLink (§4),
 *    NCCL_SOCKET_IFNAME = the up interfaces that are not lo/docker/veth/virbr/eni (§4 N5, §7);
 *  - anything the user set stays as it is (source user). */
#include "nccl_env.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/discover/discover.h"
#include "agent/proc/proc.h"
#include "base/base.h"

static const char *sysfs_root(void) {
  const char *r = getenv("TRUN_SYSFS_ROOT");
  return r && *r ? r : "/sys";
}

const char *trun_env_source_name(trun_env_source s) {
  switch (s) {
    case TRUN_ENV_USER: return "user";
    case TRUN_ENV_TRUN: return "trun";
    case TRUN_ENV_PLUGIN: return "plugin";
  }
  return "?";
}

static int is_one_of(const char *s, const char *const *list) {
  for (; *list; list++)
    if (strcmp(s, *list) == 0) return 1;
  return 0;
}

static int has_prefix(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* §2 table, column GDR: the plugin's gdr_required platforms. */
int trun_instance_has_gdr(const char *t) {
  static const char *const gdr[] = {"p4d.24xlarge",     "p4de.24xlarge",      "p5.48xlarge",
                                    "p5e.48xlarge",     "p5en.48xlarge",      "p6-b200.48xlarge",
                                    "p6-b300.48xlarge", "p6e-gb200.36xlarge", NULL};
  return t && is_one_of(t, gdr);
}

/* §3: NCCL_BUFFSIZE / NCCL_P2P_NET_CHUNKSIZE set by the plugin on p4d/p4de/p5*\/p6*\/g7e (v1.16.0+). */
static int plugin_sets_buffsize(const char *t) {
  return has_prefix(t, "p4d.") || has_prefix(t, "p4de.") || has_prefix(t, "p5") || has_prefix(t, "p6") ||
         has_prefix(t, "g7e.");
}

/* §3: the p5+ blocks (NVLS chunk sizes, NET_FORCE_FLUSH; NVLS_ENABLE=0 on old NCCL). */
static int plugin_p5_block(const char *t) { return has_prefix(t, "p5") || has_prefix(t, "p6"); }

/* §3: NCCL_NETDEVS_POLICY only in the P5en / P6-B200 block. */
static int plugin_sets_netdevs(const char *t) { return has_prefix(t, "p5en.") || has_prefix(t, "p6-b200."); }

/* §2: where the plugin provides the topology file: static XML (p4d, p4de, g5.48xl) or generated (p5*). */
static const char *plugin_topo_kind(const char *t) {
  static const char *const fixed[] = {"p4d.24xlarge", "p4de.24xlarge", "g5.48xlarge", NULL};
  static const char *const made[] = {"p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", NULL};
  if (is_one_of(t, fixed)) return "its static topology XML"; /* O4 */
  if (is_one_of(t, made))                                    /* O5 */
    return "a generated topology with the NIC groups, NCCL_TOPO_FILE=/proc/self/fd/N";
  return NULL;
}

static trun_env_decision *add(trun_env_plan *p, const char *name, trun_env_source src, const char *value,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static trun_env_decision *add(trun_env_plan *p, const char *name, trun_env_source src, const char *value,
                              const char *fmt, ...) {
  if (p->n >= TRUN_ENV_MAX) return NULL;
  trun_env_decision *d = &p->d[p->n++];
  memset(d, 0, sizeof(*d));
  snprintf(d->name, sizeof(d->name), "%s", name);
  d->source = src;
  d->set = value != NULL;
  snprintf(d->value, sizeof(d->value), "%s", value ? value : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->reason, sizeof(d->reason), fmt, ap);
  va_end(ap);
  return d;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int trun_socket_interfaces(char *out, size_t outlen) {
  static const char *const skip[] = {"docker", "veth", "virbr", "eni", NULL};
  char dir[4096];
  out[0] = '\0';
  snprintf(dir, sizeof(dir), "%s/class/net", sysfs_root());
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  char *names[256];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < 256) {
    const char *nm = e->d_name;
    if (nm[0] == '.' || strcmp(nm, "lo") == 0) continue;
    int skipped = 0;
    for (const char *const *s = skip; *s; s++) skipped |= has_prefix(nm, *s);
    if (skipped) continue;
    char path[4096 + 300], state[32] = "";
    snprintf(path, sizeof(path), "%s/%s/operstate", dir, nm);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(state, sizeof(state), f) == NULL) state[0] = '\0';
    fclose(f);
    state[strcspn(state, "\n")] = '\0';
    if (strcmp(state, "up") != 0 && strcmp(state, "unknown") != 0) continue; /* NCCL needs RUNNING (N5) */
    if ((names[n] = strdup(nm)) != NULL) n++;
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof(char *), cmp_str);
  size_t len = 0;
  int kept = 0;
  for (int i = 0; i < n; i++) {
    size_t k = strlen(names[i]);
    if (len + k + 2 < outlen) {
      if (len) out[len++] = ',';
      memcpy(out + len, names[i], k + 1);
      len += k;
      kept++;
    }
    free(names[i]);
  }
  return kept;
}

static void decide_efa(const trun_node *node, int efa, trun_env_plan *p) {
  const char *t = node->instance.instance_type;
  const char *tn = t[0] ? t : "this instance (type unknown)";
  /* The reasons are what users read (--explain, trun-topo --json): words only. Their sources, in the
   * design notes' tags, stay in these comments. */
  /* §3; O1, O3 */
  add(p, "FI_PROVIDER", TRUN_ENV_TRUN, "efa",
      "%d usable EFA device(s); the plugin filters to efa itself when unset, set explicitly so "
      "libfabric never picks a TCP provider (needed by plugins <= v1.5.0)",
      efa);
  if (node->ngpu > 0 && trun_instance_has_gdr(t)) /* §2; O1, O3, A1 */
    add(p, "FI_EFA_USE_DEVICE_RDMA", TRUN_ENV_TRUN, "1",
        "%s has GPUDirect RDMA (plugin gdr_required); libfabric >= 1.18 turns it on by itself, "
        "plugins <= v1.6 need it",
        t);
  else if (node->ngpu == 0) /* §2; L1 */
    add(p, "FI_EFA_USE_DEVICE_RDMA", TRUN_ENV_TRUN, NULL,
        "no NVIDIA GPU here, no GPUDirect RDMA to ask for; libfabric's default from the device");
  else /* §2; L1 */
    add(p, "FI_EFA_USE_DEVICE_RDMA", TRUN_ENV_TRUN, NULL,
        "%s has no GPUDirect RDMA in trun's instance table; =1 fails on devices without RDMA read, "
        "libfabric's default from the device",
        tn);
  /* §3; O1, O2, O3 */
  add(p, "FI_EFA_FORK_SAFE", TRUN_ENV_PLUGIN, NULL,
      "the plugin always sets it to 1 on CUDA builds (since v1.1.5); never RDMAV_FORK_SAFE");
  /* §3; O1, O7 */
  add(p, "OFI_NCCL_PROTOCOL", TRUN_ENV_PLUGIN, NULL,
      "SENDRECV or RDMA, the default comes from the plugin's platform block for %s", tn);
  if (node->ngpu == 0) return;
  /* §3; O1, O3 */
  add(p, "NCCL_PROTO", TRUN_ENV_PLUGIN, NULL,
      "the plugin sets simple only when the endpoint lacks 128-byte in-order delivery");
  /* §3; O1, O8 */
  add(p, "NCCL_TUNER_PLUGIN", TRUN_ENV_PLUGIN, NULL,
      "v1.16.0+ carries its own tuner, enabled on AWS, and names itself here");
  if (plugin_sets_buffsize(t)) { /* §3; O2 */
    add(p, "NCCL_BUFFSIZE", TRUN_ENV_PLUGIN, NULL, "the plugin sets 8388608 on %s (v1.16.0+)", t);
    add(p, "NCCL_P2P_NET_CHUNKSIZE", TRUN_ENV_PLUGIN, NULL, "the plugin sets 524288 on %s (v1.16.0+)", t);
  }
  if (plugin_p5_block(t)) { /* §3; O1, O2 */
    add(p, "NCCL_NVLSTREE_MAX_CHUNKSIZE", TRUN_ENV_PLUGIN, NULL, "the p5+ block sets 524288 (v1.8.0+)");
    add(p, "NCCL_NVLS_CHUNKSIZE", TRUN_ENV_PLUGIN, NULL, "the p5+ block sets 524288 (by v1.11)");
    add(p, "NCCL_NET_FORCE_FLUSH", TRUN_ENV_PLUGIN, NULL, "the p5+ block sets 0");
    add(p, "NCCL_NVLS_ENABLE", TRUN_ENV_PLUGIN, NULL,
        "the plugin sets 0 only for NCCL < 2.18.5 (v1.7.3+); trun never touches it");
  }
  if (plugin_sets_netdevs(t)) /* §3; O1 */
    add(p, "NCCL_NETDEVS_POLICY", TRUN_ENV_PLUGIN, NULL,
        "the P5en/P6-B200 block sets max:1 (HEAD, NCCL >= 2.28.3)");
}

/* --warm-start-cuda: NCCL's memory through cuMem costs a replacement's communicator set-up ~0.27 s on 4 x
 * H200 (crash -> 4 replacements all-reduced 1.23 s, 0.96 s with NCCL_CUMEM_ENABLE=0; busbw the same at 8 MiB
 * and 1 GiB: bench/results/2026-11-28-h200x4-recovery4), ~0.15 s of 0.25 s on 2 x H200 (-h200x2-cumem). Two
 * things need cuMem: NVLink SHARP (NVLS), only where an NVSwitch connects the GPUs, and multi-node NVLink
 * (MNNVL, GB200-class domains). So the variable is set where NVML saw no switch link, and on a switch node
 * where the job turned NVLS off (NCCL_NVLS_ENABLE=0) and NVML says no GPU is in a multi-node NVLink domain.
 */
static int nvls_off(char *const *envp) {
  const char *v = trun_env_get(envp, "NCCL_NVLS_ENABLE");
  if (!v || !*v) return 0;
  char *end = NULL;
  errno = 0;
  long n = strtol(v, &end, 10);
  return errno == 0 && end && *end == '\0' && n == 0; /* NCCL reads the value as a number; 0 is off */
}

static void decide_cumem(const trun_node *node, char *const *envp, trun_env_plan *p) {
  int sw = -1, mn = 0, mn_unknown = 0;
  for (int g = 0; g < node->ngpu; g++) {
    if (node->gpus[g].switch_links > 0) sw = g;
    if (node->gpus[g].mnnvl > 0) mn = 1;
    if (node->gpus[g].mnnvl < 0) mn_unknown = 1;
  }
  if (node->gpu_source == NULL || strcmp(node->gpu_source, "nvml") != 0)
    add(p, "NCCL_CUMEM_ENABLE", TRUN_ENV_TRUN, NULL,
        "--warm-start-cuda: NVML could not say whether an NVSwitch connects the GPUs (NVLink SHARP needs "
        "NCCL's cuMem memory); NCCL's default");
  else if (sw >= 0 && !nvls_off(envp))
    add(p, "NCCL_CUMEM_ENABLE", TRUN_ENV_TRUN, NULL,
        "--warm-start-cuda: GPU %d reaches an NVSwitch (%d links), where NVLink SHARP needs NCCL's cuMem "
        "memory; NCCL's default (with NCCL_NVLS_ENABLE=0 trun would turn cuMem off for a faster restart)",
        sw, node->gpus[sw].switch_links);
  else if (sw >= 0 && (mn || mn_unknown))
    add(p, "NCCL_CUMEM_ENABLE", TRUN_ENV_TRUN, NULL,
        "--warm-start-cuda: NVLink SHARP is off (NCCL_NVLS_ENABLE=0), but %s, and multi-node NVLink needs "
        "NCCL's cuMem memory; NCCL's default",
        mn ? "a GPU is in a multi-node NVLink domain"
           : "NVML could not say whether the GPUs are in a "
             "multi-node NVLink domain");
  else if (sw >= 0)
    add(p, "NCCL_CUMEM_ENABLE", TRUN_ENV_TRUN, "0",
        "--warm-start-cuda: replacements set up NCCL faster without cuMem memory (same bandwidth); the GPUs "
        "reach an NVSwitch, but NVLink SHARP is off (NCCL_NVLS_ENABLE=0) and no GPU is in a multi-node "
        "NVLink domain, so nothing here needs cuMem");
  else
    add(p, "NCCL_CUMEM_ENABLE", TRUN_ENV_TRUN, "0",
        "--warm-start-cuda: replacements set up NCCL faster without cuMem memory (about 0.27 s of 1.23 s on "
        "4 GPUs, same bandwidth); no NVSwitch here, so no NVLink SHARP to lose");
}

static void decide_nccl(const trun_node *node, int efa, trun_env_plan *p) {
  const char *t = node->instance.instance_type;
  const char *kind = efa > 0 ? plugin_topo_kind(t) : NULL;
  if (kind) /* §2 */
    add(p, "NCCL_TOPO_FILE", TRUN_ENV_PLUGIN, NULL,
        "on %s the plugin supplies %s when it is unset; setting one would disable that", t, kind);
  else /* §2 */
    add(p, "NCCL_TOPO_FILE", TRUN_ENV_TRUN, NULL,
        "trun never writes a topology file; NCCL detects the topology (a user's file is honoured)");

  int all_nv = node->ngpu >= 2, bad_a = -1, bad_b = -1;
  for (int a = 0; all_nv && a < node->ngpu; a++)
    for (int b = 0; b < node->ngpu; b++)
      if (a != b && strncmp(node->links[a][b], "NV", 2) != 0) {
        all_nv = 0, bad_a = a, bad_b = b;
        break;
      }
  if (all_nv) /* §4; N1 */
    add(p, "NCCL_P2P_LEVEL", TRUN_ENV_TRUN, "NVL",
        "every pair of the %d visible GPUs is NVLink (%s); P2P over NVLink only", node->ngpu,
        node->links[0][1]);
  else if (node->ngpu < 2) /* §4; N1 */
    add(p, "NCCL_P2P_LEVEL", TRUN_ENV_TRUN, NULL, "one visible GPU, no local pair; NCCL's default");
  else /* §4; N1 */
    add(p, "NCCL_P2P_LEVEL", TRUN_ENV_TRUN, NULL, "GPUs %d and %d are %s, not NVLink; NCCL's default (PXB)",
        bad_a, bad_b, node->links[bad_a][bad_b]);

  char ifs[200];
  int nif = trun_socket_interfaces(ifs, sizeof(ifs) - 1);
  if (nif > 0) {
    char value[sizeof(ifs) + 1];
    snprintf(value, sizeof(value), "=%s", ifs);
    add(p, "NCCL_SOCKET_IFNAME", TRUN_ENV_TRUN, value, /* §4, §7; N5 */
        "bootstrap/TCP sockets on the up interfaces, exact names, without lo/docker*/veth*/virbr*/eni*");
  } else {
    add(p, "NCCL_SOCKET_IFNAME", TRUN_ENV_TRUN, NULL, /* §4; N5 */
        "no up interface besides lo/docker*/veth*/virbr*/eni*; NCCL's own order");
  }
}

/* Rows whose variable the user set become the user's (value kept, reason says what trun would have done). */
static void apply_user(trun_env_plan *p, char *const *envp) {
  for (int i = 0; i < p->n; i++) {
    trun_env_decision *d = &p->d[i];
    const char *v = trun_env_get(envp, d->name);
    if (v == NULL) continue;
    char was[96];
    if (d->set)
      snprintf(was, sizeof(was), "trun would set %s", d->value);
    else
      snprintf(was, sizeof(was), "%s",
               d->source == TRUN_ENV_PLUGIN ? "left to the plugin" : "trun leaves it unset");
    char reason[sizeof(d->reason)];
    snprintf(reason, sizeof(reason), "set by the user, never changed (%s: %.360s)", was, d->reason);
    memcpy(d->reason, reason, sizeof(d->reason));
    d->reason[sizeof(d->reason) - 1] = '\0';
    snprintf(d->value, sizeof(d->value), "%s", v);
    d->set = 1;
    d->source = TRUN_ENV_USER;
  }
  static const char *const families[] = {"NCCL_", "FI_", "OFI_NCCL_", "RDMAV_", NULL};
  for (char *const *e = envp; e && *e; e++) {
    int ours = 0;
    for (const char *const *f = families; *f; f++) ours |= has_prefix(*e, *f);
    const char *eq = strchr(*e, '=');
    if (!ours || eq == NULL || (size_t)(eq - *e) >= sizeof(p->d[0].name)) continue;
    char name[sizeof(p->d[0].name)];
    memcpy(name, *e, (size_t)(eq - *e));
    name[eq - *e] = '\0';
    int seen = 0;
    for (int i = 0; i < p->n && !seen; i++) seen = strcmp(p->d[i].name, name) == 0;
    if (!seen) add(p, name, TRUN_ENV_USER, eq + 1, "set by the user, passed on unchanged");
  }
}

void trun_nccl_env_decide(const trun_node *node, char *const *envp, unsigned flags, trun_env_plan *plan) {
  memset(plan, 0, sizeof(*plan));
  int efa = 0;
  for (int r = 0; r < node->nrdma; r++) efa += node->rdma[r].is_efa && node->rdma[r].usable;
  if (efa > 0) decide_efa(node, efa, plan);
  if (node->ngpu > 0) decide_nccl(node, efa, plan);
  if (node->ngpu > 0 && (flags & TRUN_NCCL_WARM_CUDA)) decide_cumem(node, envp, plan);
  apply_user(plan, envp);
}

int trun_nccl_env_apply(const trun_env_plan *plan, char ***env) {
  for (int i = 0; i < plan->n; i++) {
    const trun_env_decision *d = &plan->d[i];
    if (d->source != TRUN_ENV_TRUN || !d->set || trun_env_get(*env, d->name)) continue;
    if (trun_strv_setenv(env, d->name, d->value) < 0) return -ENOMEM;
  }
  return 0;
}

int trun_gpu_numa_cpulist(const trun_gpu *g, char *out, size_t outlen) {
  if (g->numa_node >= 0) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/devices/system/node/node%d/cpulist", sysfs_root(), g->numa_node);
    FILE *f = fopen(path, "r");
    if (f) {
      char *ok = fgets(out, (int)outlen, f);
      fclose(f);
      if (ok) {
        out[strcspn(out, "\n")] = '\0';
        if (out[0]) return 0;
      }
    }
  }
  if (g->cpu_affinity[0]) {
    snprintf(out, outlen, "%s", g->cpu_affinity);
    return 0;
  }
  out[0] = '\0';
  return -1;
}

int trun_nproc_auto(const trun_node *node) { return node->ngpu > 0 ? node->ngpu : trun_discover_cpus(); }

void trun_numa_cpus_for(const trun_node *node, int lr, char *out, size_t outlen) {
  char list[1024];
  unsigned long want[TRUN_CPU_LONGS], have[TRUN_CPU_LONGS];
  out[0] = '\0';
  if (lr < 0 || lr >= node->ngpu || trun_gpu_numa_cpulist(&node->gpus[lr], list, sizeof(list)) < 0 ||
      trun_cpulist_to_mask(list, want, TRUN_CPU_LONGS) < 0)
    return;
  memset(have, 0, sizeof(have));
  if (sched_getaffinity(0, sizeof(have), (cpu_set_t *)(void *)have) == 0)
    for (unsigned i = 0; i < TRUN_CPU_LONGS; i++) want[i] &= have[i];
  trun_mask_to_cpulist(want, TRUN_CPU_LONGS, out, outlen);
}
