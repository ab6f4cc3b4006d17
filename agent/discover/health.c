/* The node health checks (agent/discover/health.h): what each check reads, its threshold and its verdict.
 *
 * GPU checks judge the visible GPUs' facts that the discovery child read (trun_gpu.health); a check's
 * status is the worst of its GPUs' (fail > warn > pass > skip), its value and reason name the GPUs that are
 * not fine (the first few). A fact whose NVML call the driver lacks, or that the GPU does not support, makes
 * that GPU's part of the check a skip with the cause; GPU_IS_LOST is a failure.
 *
 * Thresholds:
 *   nvml            NVML loads and lists the GPUs; an NVML error during discovery (init, a lost GPU) fails
 *   gpu-count       the GPUs NVML lists = the instance type's count (NVIDIA_VISIBLE_DEVICES unset or "all":
 *                   the whole node) or = the entries of an NVIDIA_VISIBLE_DEVICES list (a pod's GPUs);
 *                   fewer fails
 *   row-remap       a remapping pending (needs a GPU reset) or failed (needs a new GPU) fails
 *   retired-pages   a page retirement pending (needs a reboot) fails
 *   ecc             any volatile (since the driver loaded) uncorrected ECC error fails
 *   clocks          HW slowdown, HW thermal slowdown or HW power brake engaged fails (at start-up the GPUs
 *                   idle: none of them has a reason to be on)
 *   pcie            current link width below the maximum warns; generation below the maximum warns unless
 *                   the GPU idles (GPUs drop to a lower generation to save power when idle)
 *   nvlink          on a GPU with NVLinks, a link not active fails; all links down on an instance type
 *                   with NVSwitch fails; all down elsewhere is a PCIe-only GPU (skip)
 *   recovery-action anything but NONE fails (the driver asks for a GPU reset, a reboot, a drain)
 *   efa-ports       every port of every EFA device this container may use: state ACTIVE and phys_state
 *                   LinkUp, else fail
 *   efa-count       EFA devices in sysfs (the host's, even in a pod) = the instance type's count; fewer
 *                   fails, none warns (launched without EFA interfaces)
 *   shm             /dev/shm at least 1 GiB, else warn (the container default is 64 MiB) */
#include "health.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "base/base.h"
#include "discover.h"
#include "nvml.h"

static const struct {
  const char *name, *source;
} checks[TRUN_HC__COUNT] = {
    [TRUN_HC_NVML] = {"nvml", "NVML: nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2"},
    [TRUN_HC_GPU_COUNT] = {"gpu-count", "NVML device count vs the instance type (or NVIDIA_VISIBLE_DEVICES)"},
    [TRUN_HC_ROW_REMAP] = {"row-remap", "NVML: nvmlDeviceGetRemappedRows"},
    [TRUN_HC_RETIRED_PAGES] = {"retired-pages", "NVML: nvmlDeviceGetRetiredPagesPendingStatus"},
    [TRUN_HC_ECC] = {"ecc", "NVML: nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)"},
    [TRUN_HC_CLOCKS] = {"clocks", "NVML: nvmlDeviceGetCurrentClocksEventReasons"},
    [TRUN_HC_PCIE] = {"pcie", "NVML: nvmlDeviceGetCurrPcieLinkWidth / Generation and the Max ones"},
    [TRUN_HC_NVLINK] = {"nvlink", "NVML: nvmlDeviceGetNvLinkState"},
    [TRUN_HC_RECOVERY] = {"recovery-action",
                          "NVML: nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"},
    [TRUN_HC_EFA_PORTS] = {"efa-ports", "sysfs: class/infiniband/<dev>/ports/<n>/state, phys_state"},
    [TRUN_HC_EFA_COUNT] = {"efa-count", "sysfs: class/infiniband EFA devices vs the instance type"},
    [TRUN_HC_SHM] = {"shm", "statvfs(/dev/shm)"},
};

const char *trun_health_name(trun_health_id id) {
  return (int)id >= 0 && id < TRUN_HC__COUNT ? checks[id].name : NULL;
}

const char *trun_health_status_name(trun_health_status s) {
  switch (s) {
    case TRUN_HEALTH_PASS: return "pass";
    case TRUN_HEALTH_WARN: return "warn";
    case TRUN_HEALTH_FAIL: return "fail";
    case TRUN_HEALTH_SKIP: return "skip";
  }
  return "?";
}

/* ---- --health-checks ---------------------------------------------------------------------------- */

static int id_of(const char *name, size_t n) {
  for (int i = 0; i < TRUN_HC__COUNT; i++)
    if (strlen(checks[i].name) == n && strncmp(checks[i].name, name, n) == 0) return i;
  return -1;
}

int trun_health_parse_checks(const char *list, unsigned *mask, char *err, size_t errlen) {
  char names[512] = "";
  for (int i = 0; i < TRUN_HC__COUNT; i++)
    snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "", checks[i].name);
  unsigned in = 0, out = 0;
  int any_plain = 0, any = 0;
  const char *p = list ? list : "";
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    while (n && (*p == ' ' || *p == '\t')) p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n > 0) {
      int neg = p[0] == '-';
      const char *w = p + neg;
      size_t wn = n - (size_t)neg;
      int id = id_of(w, wn);
      if (!neg && wn == 3 && strncmp(w, "all", 3) == 0) {
        in |= TRUN_HEALTH_ALL;
      } else if (id < 0) {
        snprintf(err, errlen, "'%.*s' names no check (checks: %s; 'all'; '-name' leaves one out)", (int)n, p,
                 names);
        return -1;
      } else if (neg) {
        out |= 1u << id;
      } else {
        in |= 1u << id;
      }
      any_plain |= !neg;
      any = 1;
    }
    p = e ? e + 1 : p + strlen(p);
  }
  if (!any) {
    snprintf(err, errlen, "the list names no check (checks: %s; 'all')", names);
    return -1;
  }
  if (!any_plain) in = TRUN_HEALTH_ALL;
  *mask = in & ~out;
  if (*mask == 0) {
    snprintf(err, errlen, "'%s' leaves no check to run (use --health-check off to turn them off)", list);
    return -1;
  }
  return 0;
}

/* ---- gathering ---------------------------------------------------------------------------------- */

static void read_line(const char *path, char *out, size_t len) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  if (!fgets(out, (int)len, f)) out[0] = '\0';
  fclose(f);
  out[strcspn(out, "\n")] = '\0';
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void read_ports(const char *dev, trun_health_env *env, int r) {
  const char *root = getenv("TRUN_SYSFS_ROOT");
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/ports", root && *root ? root : "/sys", dev);
  DIR *d = opendir(dir);
  env->nports[r] = 0;
  if (d == NULL) return;
  int nums[TRUN_HEALTH_MAX_PORTS], n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < TRUN_HEALTH_MAX_PORTS)
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') nums[n++] = atoi(e->d_name);
  closedir(d);
  qsort(nums, (size_t)n, sizeof(int), cmp_int);
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX + 64];
    env->port_num[r][i] = nums[i];
    snprintf(path, sizeof(path), "%s/%d/state", dir, nums[i]);
    read_line(path, env->port_state[r][i], sizeof(env->port_state[r][i]));
    snprintf(path, sizeof(path), "%s/%d/phys_state", dir, nums[i]);
    read_line(path, env->port_phys[r][i], sizeof(env->port_phys[r][i]));
  }
  env->nports[r] = n;
}

void trun_health_gather(const trun_node *node, char *const *envp, const char *discovery_error,
                        trun_health_env *env) {
  memset(env, 0, sizeof(*env));
  env->nvidia_visible = trun_env_get(envp, "NVIDIA_VISIBLE_DEVICES");
  env->discovery_error = discovery_error;
  for (int r = 0; r < node->nrdma && r < TRUN_MAX_RDMA; r++)
    if (node->rdma[r].is_efa) read_ports(node->rdma[r].name, env, r);
  const char *shm = getenv("TRUN_SHM_PATH");
  env->shm_path = shm && *shm ? shm : "/dev/shm";
  struct statvfs st;
  if (statvfs(env->shm_path, &st) == 0)
    env->shm_bytes = (long long)st.f_blocks * (long long)st.f_frsize;
  else
    env->shm_bytes = -errno;
}

/* ---- verdicts ----------------------------------------------------------------------------------- */

/* One check being judged: its status so far and the subjects that are not fine. */
typedef struct {
  trun_health_check *c;
  int bad;           /* subjects listed in value / reason */
  int omitted;       /* more that were not listed */
  char skip[384];    /* why (some GPU of) the check cannot run: the reason when nothing could be judged */
  char skip_val[64]; /* the value then */
} verdict;

static void worsen(verdict *v, trun_health_status s) {
  if (s > v->c->status) v->c->status = s;
}

/* A subject (a GPU, a device) that is not fine: its status, its value and reason (shortened after 4). */
static void subject(verdict *v, trun_health_status s, const char *value, const char *reason) {
  worsen(v, s);
  if (v->bad >= 4) {
    v->omitted++;
    return;
  }
  trun_catf(v->c->value, sizeof(v->c->value), "%s%s", v->bad ? "; " : "", value);
  trun_catf(v->c->reason, sizeof(v->c->reason), "%s%s", v->bad ? " " : "", reason);
  v->bad++;
}

/* The cause of a skip, kept once (the first GPU's). */
static void skipped(verdict *v, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void skipped(verdict *v, const char *value, const char *fmt, ...) {
  if (v->skip[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->skip, sizeof(v->skip), fmt, ap);
  va_end(ap);
  snprintf(v->skip_val, sizeof(v->skip_val), "%s", value);
}

static void finish(verdict *v, const char *pass_value, const char *pass_reason) {
  trun_health_check *c = v->c;
  if (v->omitted) trun_catf(c->value, sizeof(c->value), "; and %d more", v->omitted);
  if (c->status == TRUN_HEALTH_SKIP && v->skip[0]) {
    snprintf(c->value, sizeof(c->value), "%s", v->skip_val);
    snprintf(c->reason, sizeof(c->reason), "cannot run: %s.", v->skip);
    return;
  }
  if (v->bad == 0) {
    if (!c->value[0]) snprintf(c->value, sizeof(c->value), "%s", pass_value);
    if (!c->reason[0]) snprintf(c->reason, sizeof(c->reason), "%s", pass_reason);
  }
}

static const char *gpu_label(const trun_gpu *g, char *buf, size_t len) {
  snprintf(buf, len, "GPU %d %s", g->visible_index, g->uuid[0] ? g->uuid : "(no UUID)");
  return buf;
}

/* A GPU's fact that could not be read: skip with the cause, or fail for a lost GPU. 1 when rc was not 0. */
static int unreadable(verdict *v, const trun_gpu *g, int rc, const char *call, const char *why_unsupported) {
  char lab[160], val[384], why[384];
  if (rc == 0) return 0;
  gpu_label(g, lab, sizeof(lab));
  if (rc == TRUN_NVML_ERROR_GPU_IS_LOST) {
    snprintf(val, sizeof(val), "%s: GPU is lost", lab);
    snprintf(
        why, sizeof(why),
        "%s: NVML says the GPU is lost (fallen off the bus); reset it or reboot the node, replace it if it "
        "happens again.",
        lab);
    subject(v, TRUN_HEALTH_FAIL, val, why);
    return 1;
  }
  if (rc == TRUN_HF_MISSING)
    skipped(v, "not read", "the driver's NVML lacks %s (an older driver)", call);
  else if (rc == TRUN_NVML_ERROR_NOT_SUPPORTED)
    skipped(v, "not supported", "%s is not supported on %s%s", call, g->name[0] ? g->name : lab,
            why_unsupported ? why_unsupported : "");
  else
    skipped(v, "error", "%s failed on %s (NVML error %d)", call, lab, rc);
  return 1;
}

/* The GPUs that were probed, or a skip when there are none. 1 when the check may look at them. */
static int gpus_probed(const trun_node *node, verdict *v) {
  int any = 0;
  for (int i = 0; i < node->ngpu; i++) any |= node->gpus[i].health.probed;
  if (any) return 1;
  snprintf(v->c->value, sizeof(v->c->value), "no GPU");
  snprintf(v->c->reason, sizeof(v->c->reason), "cannot run: %s.",
           node->ngpu == 0
               ? "no GPU is visible here"
               : "the GPUs were not found through NVML (no libnvidia-ml), so their state is unknown");
  return 0;
}

static void check_nvml(const trun_node *node, const trun_health_env *env, verdict *v) {
  trun_health_check *c = v->c;
  const char *err = env->discovery_error ? env->discovery_error : "";
  int nvml_error = strncmp(err, "nvml", 4) == 0 || strncmp(err, "NVML", 4) == 0;
  snprintf(c->threshold, sizeof(c->threshold), "NVML loads and lists every GPU");
  if (nvml_error) {
    c->status = TRUN_HEALTH_FAIL;
    snprintf(c->value, sizeof(c->value), "error");
    snprintf(c->reason, sizeof(c->reason), "%s", err);
  } else if (strcmp(node->gpu_source ? node->gpu_source : "none", "nvml") == 0) {
    c->status = TRUN_HEALTH_PASS;
    snprintf(c->value, sizeof(c->value), "%d GPU(s) listed, %d visible", node->gpus_listed, node->ngpu);
    snprintf(c->reason, sizeof(c->reason), "NVML works.");
  } else {
    snprintf(c->value, sizeof(c->value), "%s",
             node->gpu_source && strcmp(node->gpu_source, "cudart") == 0
                 ? "no NVML (GPUs through the CUDA runtime)"
                 : "no NVML");
    snprintf(
        c->reason, sizeof(c->reason), "cannot run: %s.",
        node->gpu_source && strcmp(node->gpu_source, "cudart") == 0
            ? "libnvidia-ml.so.1 does not load; the GPUs were found through the CUDA runtime and the GPU "
              "checks cannot read their state"
            : "no NVIDIA driver or NVML library here; the GPU checks do not apply");
  }
  if (err[0] && !nvml_error) {
    c->status = c->status < TRUN_HEALTH_WARN ? TRUN_HEALTH_WARN : c->status;
    trun_catf(c->reason, sizeof(c->reason), " GPU discovery: %s", err);
  }
}

/* Entries of a comma list that are not blank. */
static int list_entries(const char *s) {
  int n = 0, in = 0;
  for (; *s; s++) {
    if (*s == ',') {
      in = 0;
    } else if (*s != ' ' && !in) {
      in = 1;
      n++;
    }
  }
  return n;
}

static void check_gpu_count(const trun_node *node, const trun_health_env *env, verdict *v) {
  trun_health_check *c = v->c;
  const char *nvd = env->nvidia_visible;
  const char *type = node->instance.instance_type;
  snprintf(c->threshold, sizeof(c->threshold), ">= the instance type's GPUs (or NVIDIA_VISIBLE_DEVICES's)");
  if (node->gpus_listed < 0) {
    snprintf(c->value, sizeof(c->value), "no NVML");
    snprintf(c->reason, sizeof(c->reason), "cannot run: NVML does not list the GPUs here.");
    return;
  }
  int want = -1;
  char from[192];
  if (nvd && *nvd && strcmp(nvd, "all") != 0 && strcmp(nvd, "void") != 0 && strcmp(nvd, "none") != 0) {
    want = list_entries(nvd);
    snprintf(from, sizeof(from), "the %d GPU(s) NVIDIA_VISIBLE_DEVICES gives this container", want);
  } else if (nvd && (strcmp(nvd, "void") == 0 || strcmp(nvd, "none") == 0)) {
    snprintf(c->value, sizeof(c->value), "%d listed", node->gpus_listed);
    snprintf(c->reason, sizeof(c->reason),
             "cannot run: NVIDIA_VISIBLE_DEVICES=%s, so the GPUs came by other means (CDI); which ones this "
             "container should have is not known.",
             nvd);
    return;
  } else if (!type[0]) {
    snprintf(c->value, sizeof(c->value), "%d listed", node->gpus_listed);
    snprintf(c->reason, sizeof(c->reason),
             "cannot run: the instance type is unknown (no IMDS answer, no DMI product name), so there is no "
             "expected count.");
    return;
  } else {
    const trun_instance_info *info = trun_instance_lookup(type);
    if (info == NULL) {
      snprintf(c->value, sizeof(c->value), "%d listed", node->gpus_listed);
      snprintf(c->reason, sizeof(c->reason), "cannot run: trun's table has no GPU count for %s.", type);
      return;
    }
    want = info->gpus;
    snprintf(from, sizeof(from), "the %d GPU(s) of a %s (the whole node: NVIDIA_VISIBLE_DEVICES%s)", want,
             type, nvd ? "=all" : " unset");
  }
  snprintf(c->threshold, sizeof(c->threshold), ">= %d", want);
  snprintf(c->value, sizeof(c->value), "%d", node->gpus_listed);
  if (node->gpus_listed < want) {
    c->status = TRUN_HEALTH_FAIL;
    snprintf(
        c->reason, sizeof(c->reason),
        "NVML lists %d GPU(s), not %s: a GPU is missing (fallen off the bus, or not bound to the driver); "
        "check dmesg for Xid 79 and nvidia-smi, then reset or replace the node.",
        node->gpus_listed, from);
  } else {
    c->status = TRUN_HEALTH_PASS;
    snprintf(c->reason, sizeof(c->reason), "NVML lists %s.", from);
  }
}

/* A GPU check that judges each probed GPU alone: the fact's return code (by offset in trun_gpu_health), the
 * NVML call to name when it cannot be read, and the judge of a GPU whose fact was read (PASS when fine, else
 * its status with val and why filled in). */
typedef trun_health_status (*gpu_judge)(const trun_gpu *g, const char *lab, char *val, size_t vlen, char *why,
                                        size_t wlen);
typedef struct {
  const char *threshold;
  size_t rc_offset;
  const char *call, *unsupported; /* unsupported: what NOT_SUPPORTED means there, or NULL */
  gpu_judge judge;
  const char *pass_value; /* printf format with the count of GPUs that passed */
  const char *pass_reason;
} gpu_check;

static void judge_gpus(const trun_node *node, verdict *v, const gpu_check *gc) {
  snprintf(v->c->threshold, sizeof(v->c->threshold), "%s", gc->threshold);
  if (!gpus_probed(node, v)) return;
  int ok = 0;
  for (int i = 0; i < node->ngpu; i++) {
    const trun_gpu *g = &node->gpus[i];
    const trun_gpu_health *h = &g->health;
    if (!h->probed ||
        unreadable(v, g, *(const int *)((const char *)h + gc->rc_offset), gc->call, gc->unsupported))
      continue;
    char lab[160], val[384], why[512];
    gpu_label(g, lab, sizeof(lab));
    trun_health_status st = gc->judge(g, lab, val, sizeof(val), why, sizeof(why));
    if (st == TRUN_HEALTH_PASS)
      ok++;
    else
      subject(v, st, val, why);
  }
  if (ok) worsen(v, TRUN_HEALTH_PASS);
  char pv[96];
  snprintf(pv, sizeof(pv), gc->pass_value, ok);
  finish(v, pv, gc->pass_reason);
}

static trun_health_status judge_remap(const trun_gpu *g, const char *lab, char *val, size_t vlen, char *why,
                                      size_t wlen) {
  const trun_gpu_health *h = &g->health;
  if (!h->remap_failure && !h->remap_pending) return TRUN_HEALTH_PASS;
  snprintf(val, vlen, "%s: %s (%u rows remapped for uncorrectable, %u for correctable errors)", lab,
           h->remap_failure ? "remapping failed" : "remapping pending", h->remap_unc, h->remap_corr);
  snprintf(why, wlen, "%s: %s", lab,
           h->remap_failure
               ? "a row remapping failed: the GPU's memory cannot be repaired; replace the GPU."
               : "a row remapping is pending: reset the GPU (or reboot) to apply it before it runs "
                 "a job.");
  return TRUN_HEALTH_FAIL;
}

static trun_health_status judge_retired(const trun_gpu *g, const char *lab, char *val, size_t vlen, char *why,
                                        size_t wlen) {
  if (!g->health.retired_pending) return TRUN_HEALTH_PASS;
  snprintf(val, vlen, "%s: retirement pending", lab);
  snprintf(why, wlen, "%s: memory pages wait to be retired: reboot the node (or reset the GPU).", lab);
  return TRUN_HEALTH_FAIL;
}

static trun_health_status judge_ecc(const trun_gpu *g, const char *lab, char *val, size_t vlen, char *why,
                                    size_t wlen) {
  unsigned long long n = g->health.ecc_volatile_unc;
  if (n == 0) return TRUN_HEALTH_PASS;
  snprintf(val, vlen, "%s: %llu", lab, n);
  snprintf(
      why, wlen,
      "%s: %llu uncorrectable ECC error(s) since the driver loaded: its memory is failing; reset the GPU, "
      "replace it if they come back.",
      lab, n);
  return TRUN_HEALTH_FAIL;
}

static trun_health_status judge_clocks(const trun_gpu *g, const char *lab, char *val, size_t vlen, char *why,
                                       size_t wlen) {
  unsigned long long r = g->health.clock_reasons;
  const unsigned long long bad = TRUN_NVML_CLOCKS_EVENT_HW_SLOWDOWN |
                                 TRUN_NVML_CLOCKS_EVENT_HW_THERMAL_SLOWDOWN |
                                 TRUN_NVML_CLOCKS_EVENT_HW_POWER_BRAKE_SLOWDOWN;
  if (!(r & bad)) return TRUN_HEALTH_PASS;
  char what[96] = "";
  if (r & TRUN_NVML_CLOCKS_EVENT_HW_SLOWDOWN) trun_catf(what, sizeof(what), "HW slowdown");
  if (r & TRUN_NVML_CLOCKS_EVENT_HW_THERMAL_SLOWDOWN)
    trun_catf(what, sizeof(what), "%sHW thermal slowdown", what[0] ? ", " : "");
  if (r & TRUN_NVML_CLOCKS_EVENT_HW_POWER_BRAKE_SLOWDOWN)
    trun_catf(what, sizeof(what), "%sHW power brake", what[0] ? ", " : "");
  snprintf(val, vlen, "%s: %s (reasons 0x%llx)", lab, what, r);
  snprintf(why, wlen,
           "%s: %s engaged while idle: its clocks are cut by half or more (overheating, or the power supply "
           "asserts the brake); check cooling and power (nvidia-smi -q -d PERFORMANCE).",
           lab, what);
  return TRUN_HEALTH_FAIL;
}

static trun_health_status judge_pcie(const trun_gpu *g, const char *lab, char *val, size_t vlen, char *why,
                                     size_t wlen) {
  const trun_gpu_health *h = &g->health;
  int idle = h->clocks_rc == 0 && (h->clock_reasons & TRUN_NVML_CLOCKS_EVENT_GPU_IDLE);
  int narrow = h->pcie_width < h->pcie_width_max;
  int slow = h->pcie_gen < h->pcie_gen_max && !idle;
  if (!narrow && !slow) return TRUN_HEALTH_PASS;
  snprintf(val, vlen, "%s: Gen%u x%u of Gen%u x%u", lab, h->pcie_gen, h->pcie_width, h->pcie_gen_max,
           h->pcie_width_max);
  snprintf(
      why, wlen,
      "%s: its PCIe link runs %s (Gen%u x%u, the maximum is Gen%u x%u): host transfers and GPUDirect RDMA "
      "slow down; re-seat the GPU or its riser, check lspci -vv for the link.",
      lab, narrow ? "narrower than it can" : "at a lower generation while busy", h->pcie_gen, h->pcie_width,
      h->pcie_gen_max, h->pcie_width_max);
  return TRUN_HEALTH_WARN;
}

static const char *recovery_words(unsigned a) {
  switch (a) {
    case TRUN_NVML_GPU_RECOVERY_ACTION_GPU_RESET: return "a GPU reset (GPU_RESET)";
    case TRUN_NVML_GPU_RECOVERY_ACTION_NODE_REBOOT: return "a reboot of the node (NODE_REBOOT)";
    case TRUN_NVML_GPU_RECOVERY_ACTION_DRAIN_P2P: return "draining peer-to-peer traffic (DRAIN_P2P)";
    case TRUN_NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET:
      return "a drain and a reset: it runs at reduced capacity (DRAIN_AND_RESET)";
    case TRUN_NVML_GPU_RECOVERY_ACTION_GPU_RESET_BUS: return "a reset of its bus (GPU_RESET_BUS)";
    default: return "an action trun does not know";
  }
}

static trun_health_status judge_recovery(const trun_gpu *g, const char *lab, char *val, size_t vlen,
                                         char *why, size_t wlen) {
  unsigned a = g->health.recovery_action;
  if (a == TRUN_NVML_GPU_RECOVERY_ACTION_NONE) return TRUN_HEALTH_PASS;
  snprintf(val, vlen, "%s: %u", lab, a);
  snprintf(why, wlen, "%s: the driver asks for %s before it runs work again.", lab, recovery_words(a));
  return TRUN_HEALTH_FAIL;
}

#define RC(field) offsetof(trun_gpu_health, field)
static const gpu_check remap_check = {
    "no remapping pending or failed",     RC(remap_rc), "nvmlDeviceGetRemappedRows",
    " (row remapping came with A100)",    judge_remap,  "%d GPU(s): none pending or failed",
    "No row remapping pending or failed."};
static const gpu_check retired_check = {"no page retirement pending",
                                        RC(retired_rc),
                                        "nvmlDeviceGetRetiredPagesPendingStatus",
                                        " (GPUs from A100 on remap rows instead: see row-remap)",
                                        judge_retired,
                                        "%d GPU(s): none pending",
                                        "No page retirement pending."};
static const gpu_check ecc_check = {"0 volatile uncorrected",
                                    RC(ecc_rc),
                                    "nvmlDeviceGetTotalEccErrors",
                                    " (or ECC is off: nvidia-smi -q -d ECC)",
                                    judge_ecc,
                                    "%d GPU(s): 0",
                                    "No uncorrectable ECC error since the driver loaded."};
static const gpu_check clocks_check = {"no HW slowdown, HW thermal or HW power brake",
                                       RC(clocks_rc),
                                       "nvmlDeviceGetCurrentClocksEventReasons",
                                       NULL,
                                       judge_clocks,
                                       "%d GPU(s): none",
                                       "No hardware slowdown."};
static const gpu_check pcie_check = {
    "width = max; generation = max unless idle",
    RC(pcie_rc),
    "nvmlDeviceGetCurrPcieLinkWidth",
    NULL,
    judge_pcie,
    "%d GPU(s) at full width",
    "Every PCIe link at its full width (a lower generation while idle is power saving)."};
static const gpu_check recovery_check = {"NONE (0)",
                                         RC(recovery_rc),
                                         "the GPU recovery action field (driver r570 or later)",
                                         " (this driver does not report it)",
                                         judge_recovery,
                                         "%d GPU(s): NONE",
                                         "The driver asks for no recovery action."};
#undef RC

static void check_nvlink(const trun_node *node, verdict *v) {
  snprintf(v->c->threshold, sizeof(v->c->threshold), "every NVLink active");
  if (!gpus_probed(node, v)) return;
  const trun_instance_info *info = trun_instance_lookup(node->instance.instance_type);
  int nvswitch = info && info->nvswitch;
  int ok = 0, total = 0;
  for (int i = 0; i < node->ngpu; i++) {
    const trun_gpu *g = &node->gpus[i];
    const trun_gpu_health *h = &g->health;
    if (!h->probed) continue;
    if (h->nvlink_rc == TRUN_NVML_ERROR_NOT_SUPPORTED || (h->nvlink_rc == 0 && h->nvlink_links == 0)) {
      skipped(v, "no NVLink", "%s has no NVLink", g->name[0] ? g->name : "the GPU");
      continue;
    }
    if (unreadable(v, g, h->nvlink_rc, "nvmlDeviceGetNvLinkState", NULL)) continue;
    int down = 0;
    char links[160] = "";
    for (int l = 0; l < h->nvlink_links && l < 64; l++)
      if (h->nvlink_down_mask >> l & 1) {
        down++;
        trun_catf(links, sizeof(links), "%s%d", down > 1 ? "," : "", l);
      }
    if (down == h->nvlink_links && !nvswitch) {
      skipped(v, "no NVLink active",
              "no NVLink of %s is active and the instance type does not say NVSwitch (a PCIe-only GPU, or no "
              "NVLink bridge)",
              g->name[0] ? g->name : "the GPU");
      continue;
    }
    total += h->nvlink_links;
    if (down == 0) {
      ok++;
      continue;
    }
    char lab[160], val[384], why[512];
    gpu_label(g, lab, sizeof(lab));
    snprintf(val, sizeof(val), "%s: %d of %d down (link %s)", lab, down, h->nvlink_links, links);
    snprintf(
        why, sizeof(why),
        "%s: NVLink %s of %d not active: NCCL loses that bandwidth or falls back to PCIe; reset the GPU, "
        "check nvidia-smi nvlink -s and the fabric manager.",
        lab, links, h->nvlink_links);
    subject(v, TRUN_HEALTH_FAIL, val, why);
  }
  if (ok) worsen(v, TRUN_HEALTH_PASS);
  char pv[64];
  snprintf(pv, sizeof(pv), "%d GPU(s), %d links active", ok, total);
  finish(v, pv, "Every NVLink active.");
}

static void check_efa_ports(const trun_node *node, const trun_health_env *env, verdict *v) {
  snprintf(v->c->threshold, sizeof(v->c->threshold), "state ACTIVE, phys_state LinkUp");
  int devs = 0, ports = 0;
  for (int r = 0; r < node->nrdma && r < TRUN_MAX_RDMA; r++) {
    const trun_rdma *d = &node->rdma[r];
    if (!d->is_efa || !d->usable) continue;
    devs++;
    if (env->nports[r] == 0) {
      char val[256], why[384];
      snprintf(val, sizeof(val), "%s: no ports in sysfs", d->name);
      snprintf(why, sizeof(why),
               "%s: sysfs shows no port under class/infiniband/%s/ports: is the efa driver bound?", d->name,
               d->name);
      subject(v, TRUN_HEALTH_FAIL, val, why);
      continue;
    }
    for (int p = 0; p < env->nports[r]; p++) {
      const char *st = env->port_state[r][p], *ph = env->port_phys[r][p];
      ports++;
      if (strstr(st, "ACTIVE") && strstr(ph, "LinkUp")) continue;
      char val[256], why[384];
      snprintf(val, sizeof(val), "%s port %d: %s / %s", d->name, env->port_num[r][p], st[0] ? st : "?",
               ph[0] ? ph : "?");
      snprintf(
          why, sizeof(why),
          "%s port %d is not up (state '%s', phys_state '%s'): NCCL cannot use this network card; check the "
          "instance's EFA interfaces, reboot or replace the node.",
          d->name, env->port_num[r][p], st, ph);
      subject(v, TRUN_HEALTH_FAIL, val, why);
    }
  }
  if (devs == 0) {
    snprintf(v->c->value, sizeof(v->c->value), "no EFA device");
    snprintf(v->c->reason, sizeof(v->c->reason), "cannot run: no EFA device is usable in this container.");
    return;
  }
  if (v->bad == 0) worsen(v, TRUN_HEALTH_PASS);
  char pv[64];
  snprintf(pv, sizeof(pv), "%d device(s), %d port(s) up", devs, ports);
  finish(v, pv, "Every EFA port is ACTIVE and LinkUp.");
}

static void check_efa_count(const trun_node *node, verdict *v) {
  trun_health_check *c = v->c;
  int n = 0;
  for (int r = 0; r < node->nrdma; r++) n += node->rdma[r].is_efa;
  const char *type = node->instance.instance_type;
  const trun_instance_info *info = trun_instance_lookup(type);
  snprintf(c->value, sizeof(c->value), "%d", n);
  snprintf(c->threshold, sizeof(c->threshold), ">= the instance type's EFA devices");
  if (!type[0] || info == NULL) {
    snprintf(c->reason, sizeof(c->reason), "cannot run: %s%s.",
             type[0] ? "trun's table has no EFA count for " : "the instance type is unknown",
             type[0] ? type : "");
    return;
  }
  snprintf(c->threshold, sizeof(c->threshold), ">= %d (%s)", info->efa, type);
  if (n >= info->efa) {
    c->status = TRUN_HEALTH_PASS;
    snprintf(c->reason, sizeof(c->reason), "%d EFA device(s), as a %s has.", n, type);
  } else if (n == 0) {
    c->status = TRUN_HEALTH_WARN;
    snprintf(
        c->reason, sizeof(c->reason),
        "no EFA device, where a %s can have %d: the instance was launched without EFA network interfaces, so "
        "NCCL between nodes goes over TCP sockets.",
        type, info->efa);
  } else {
    c->status = TRUN_HEALTH_FAIL;
    snprintf(
        c->reason, sizeof(c->reason),
        "%d EFA device(s) of the %d a %s has: a network card is missing (not on the PCI bus, or its driver "
        "failed: dmesg | grep efa); replace the node.",
        n, info->efa, type);
  }
}

static void human_bytes(long long b, char *out, size_t len) {
  if (b >= (1LL << 30))
    snprintf(out, len, "%.1f GiB", (double)b / (double)(1LL << 30));
  else
    snprintf(out, len, "%lld MiB", b >> 20);
}

static void check_shm(const trun_health_env *env, verdict *v) {
  trun_health_check *c = v->c;
  snprintf(c->threshold, sizeof(c->threshold), ">= 1 GiB");
  const char *path = env->shm_path ? env->shm_path : "/dev/shm";
  const char *fix =
      "docker run --shm-size=1g (or --ipc=host); in Kubernetes mount an emptyDir with medium: Memory at "
      "/dev/shm";
  if (env->shm_bytes < 0) {
    c->status = TRUN_HEALTH_WARN;
    snprintf(c->value, sizeof(c->value), "missing");
    snprintf(c->reason, sizeof(c->reason),
             "%s cannot be read (%s): NCCL's shared-memory transport and DataLoader workers need it; %s.",
             path, strerror((int)-env->shm_bytes), fix);
    return;
  }
  char size[64];
  human_bytes(env->shm_bytes, size, sizeof(size));
  snprintf(c->value, sizeof(c->value), "%s", size);
  if (env->shm_bytes >= TRUN_HEALTH_SHM_MIN) {
    c->status = TRUN_HEALTH_PASS;
    snprintf(c->reason, sizeof(c->reason), "%s has %s.", path, size);
  } else {
    c->status = TRUN_HEALTH_WARN;
    snprintf(c->reason, sizeof(c->reason),
             "%s is only %s (a container's default is 64 MiB): NCCL fails with 'Error while creating shared "
             "memory "
             "segment' and DataLoader workers die with a bus error; %s.",
             path, size, fix);
  }
}

void trun_health_judge(const trun_node *node, const trun_health_env *env, unsigned mask, trun_health *out) {
  memset(out, 0, sizeof(*out));
  for (int id = 0; id < TRUN_HC__COUNT; id++) {
    if (!(mask & (1u << id))) continue;
    trun_health_check *c = &out->c[out->n++];
    c->name = checks[id].name;
    c->source = checks[id].source;
    c->status = TRUN_HEALTH_SKIP;
    verdict v;
    memset(&v, 0, sizeof(v));
    v.c = c;
    switch ((trun_health_id)id) {
      case TRUN_HC_NVML: check_nvml(node, env, &v); break;
      case TRUN_HC_GPU_COUNT: check_gpu_count(node, env, &v); break;
      case TRUN_HC_ROW_REMAP: judge_gpus(node, &v, &remap_check); break;
      case TRUN_HC_RETIRED_PAGES: judge_gpus(node, &v, &retired_check); break;
      case TRUN_HC_ECC: judge_gpus(node, &v, &ecc_check); break;
      case TRUN_HC_CLOCKS: judge_gpus(node, &v, &clocks_check); break;
      case TRUN_HC_PCIE: judge_gpus(node, &v, &pcie_check); break;
      case TRUN_HC_NVLINK: check_nvlink(node, &v); break;
      case TRUN_HC_RECOVERY: judge_gpus(node, &v, &recovery_check); break;
      case TRUN_HC_EFA_PORTS: check_efa_ports(node, env, &v); break;
      case TRUN_HC_EFA_COUNT: check_efa_count(node, &v); break;
      case TRUN_HC_SHM: check_shm(env, &v); break;
      case TRUN_HC__COUNT: break;
    }
    if (c->status > out->worst) out->worst = c->status;
  }
}

void trun_health_run(const trun_node *node, char *const *envp, const char *discovery_error, unsigned mask,
                     trun_health *out) {
  trun_health_env *env = malloc(sizeof(*env));
  if (env == NULL) {
    memset(out, 0, sizeof(*out));
    return;
  }
  trun_health_gather(node, envp, discovery_error, env);
  trun_health_judge(node, env, mask, out);
  free(env);
}

void trun_health_summary(const trun_health *h, trun_health_status at_least, char *out, size_t len) {
  out[0] = '\0';
  for (int i = 0; i < h->n; i++) {
    const trun_health_check *c = &h->c[i];
    if (c->status < at_least || c->status == TRUN_HEALTH_SKIP) continue;
    trun_catf(out, len, "%s%s %s [%s]: %s", out[0] ? "; " : "",
              c->status == TRUN_HEALTH_FAIL ? "FAIL" : "WARN", c->name, c->value, c->reason);
  }
}
