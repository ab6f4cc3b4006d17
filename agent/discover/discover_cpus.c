/* CPUs this process may use: the affinity mask, capped by the cgroup CPU quota (v2 cpu.max, or v1
 * cpu.cfs_quota_us / cpu.cfs_period_us), rounded up, at least 1.
 *
 * Which hierarchy: TRUN_CGROUP_ROOT (default /sys/fs/cgroup) holding cgroup.controllers is a cgroup v2
 * (unified) mount; otherwise it is a v1 (or hybrid) layout with the cpu controller in a sub-directory
 * (cpu,cpuacct / cpu / cpuacct,cpu). Our cgroup's path comes from /proc/self/cgroup ("0::/path" for v2,
 * "N:cpu,cpuacct:/path" for v1). In a container that path is often the host's view while the mount shows
 * the container's own cgroup as its root, so when root/path does not exist we use the root itself.
 * A quota applies to the whole subtree, so the limit is the smallest one from our cgroup up to the root.
 * Nothing here is cached: every call reads the files again. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "cpulist.h"
#include "discover.h"
#include "discover_internal.h"

/* Internal, exposed for tests/unit/test_instance.c (which declares them itself). Each returns the CPU
 * limit rounded up (>= 1), 0 when there is no limit, or -EINVAL when the text is malformed. */

#define TRUN_CGROUP_PATH_MAX 4096

static int ceil_div(unsigned long long q, unsigned long long p) {
  unsigned long long n = q / p + (q % p != 0);
  if (n < 1) n = 1;
  return n > INT_MAX ? INT_MAX : (int)n;
}

/* Parses an unsigned decimal at *s (no sign), advancing *s; -1 when there is none or it overflows. */
static int parse_u64(const char **s, unsigned long long *out) {
  const char *p = *s;
  if (*p < '0' || *p > '9') return -1;
  unsigned long long v = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    unsigned long long d = (unsigned long long)(*p - '0');
    if (v > (~0ULL - d) / 10) return -1;
    v = v * 10 + d;
  }
  *s = p;
  *out = v;
  return 0;
}

static int only_space_left(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return *p == '\0';
}

/* cgroup v2 cpu.max: "$MAX $PERIOD" where $MAX is "max" or microseconds; "max" alone is accepted. */
int trun_cpu_max_parse(const char *text) {
  if (text == NULL) return -EINVAL;
  const char *p = text;
  while (*p == ' ' || *p == '\t') p++;
  unsigned long long quota = 0, period = 100000;
  int unlimited = 0;
  if (strncmp(p, "max", 3) == 0) {
    unlimited = 1;
    p += 3;
  } else if (parse_u64(&p, &quota) < 0) {
    return -EINVAL;
  }
  if (*p == ' ' || *p == '\t') {
    while (*p == ' ' || *p == '\t') p++;
    if (!only_space_left(p) && parse_u64(&p, &period) < 0) return -EINVAL;
  }
  if (!only_space_left(p)) return -EINVAL;
  if (unlimited) return 0;
  if (period == 0 || quota == 0) return -EINVAL;
  return ceil_div(quota, period);
}

/* cgroup v1: cpu.cfs_quota_us ("-1" = no limit) and cpu.cfs_period_us. */
int trun_cfs_quota_parse(const char *quota, const char *period) {
  if (quota == NULL || period == NULL) return -EINVAL;
  const char *q = quota, *p = period;
  while (*q == ' ' || *q == '\t') q++;
  while (*p == ' ' || *p == '\t') p++;
  if (q[0] == '-') {
    if (q[1] == '1' && only_space_left(q + 2)) return 0;
    return -EINVAL;
  }
  unsigned long long qv = 0, pv = 0;
  if (parse_u64(&q, &qv) < 0 || !only_space_left(q)) return -EINVAL;
  if (parse_u64(&p, &pv) < 0 || !only_space_left(p)) return -EINVAL;
  if (qv == 0 || pv == 0) return -EINVAL;
  return ceil_div(qv, pv);
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The limit in one cgroup directory: >0, 0 none (or no files), negative when malformed. */
static int limit_at(const char *dir, int v2) {
  char path[TRUN_CGROUP_PATH_MAX + 32], a[128], b[128];
  size_t n = strlen(dir);
  if (n + 32 > sizeof(path)) return 0;
  memcpy(path, dir, n);
  if (v2) {
    memcpy(path + n, "/cpu.max", sizeof("/cpu.max"));
    if (trun_read_small(path, a, sizeof(a)) < 0) return 0;
    return trun_cpu_max_parse(a);
  }
  memcpy(path + n, "/cpu.cfs_quota_us", sizeof("/cpu.cfs_quota_us"));
  if (trun_read_small(path, a, sizeof(a)) < 0) return 0;
  memcpy(path + n, "/cpu.cfs_period_us", sizeof("/cpu.cfs_period_us"));
  if (trun_read_small(path, b, sizeof(b)) < 0) return 0;
  return trun_cfs_quota_parse(a, b);
}

/* Finds our cgroup's path in /proc/self/cgroup text: the "0::" line for v2, or the v1 line whose
 * controller list names "cpu" (its controller list is copied to controllers). "/" when absent. */
static void self_path(const char *self_cgroup, int v2, char *out, size_t outlen, char *controllers,
                      size_t clen) {
  snprintf(out, outlen, "/");
  if (controllers) controllers[0] = '\0';
  if (self_cgroup == NULL) return;
  const char *line = self_cgroup;
  while (*line) {
    const char *end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    const char *c1 = memchr(line, ':', n);
    const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line)) : NULL;
    if (c2) {
      const char *ctl = c1 + 1;
      size_t ctl_len = (size_t)(c2 - ctl);
      int match = 0;
      if (v2) {
        match = ctl_len == 0 && c1 - line == 1 && line[0] == '0';
      } else {
        for (const char *t = ctl; t < c2;) {
          const char *comma = memchr(t, ',', (size_t)(c2 - t));
          size_t tl = comma ? (size_t)(comma - t) : (size_t)(c2 - t);
          if (tl == 3 && memcmp(t, "cpu", 3) == 0) match = 1;
          t += tl + (comma != NULL);
        }
      }
      size_t plen = n - (size_t)(c2 + 1 - line);
      if (match && plen > 0 && c2[1] == '/' && plen < outlen) {
        memcpy(out, c2 + 1, plen);
        out[plen] = '\0';
        if (controllers && ctl_len < clen) {
          memcpy(controllers, ctl, ctl_len);
          controllers[ctl_len] = '\0';
        }
        return;
      }
    }
    line += n + (end != NULL);
  }
}

/* The smallest quota from our cgroup (self_cgroup: /proc/self/cgroup's text) up to the hierarchy's
 * root under root: >= 1, or 0 when nothing limits us (or no cgroup files are there). */
int trun_cgroup_cpu_limit(const char *root, const char *self_cgroup) {
  if (root == NULL || root[0] == '\0') return 0;
  char probe[TRUN_CGROUP_PATH_MAX], base[TRUN_CGROUP_PATH_MAX], rel[TRUN_CGROUP_PATH_MAX];
  char ctl[256];
  if (strlen(root) + 300 >= sizeof(probe)) return 0; /* leaves room for a file or controller name */
  snprintf(probe, sizeof(probe), "%s/cgroup.controllers", root);
  int v2 = access(probe, F_OK) == 0;
  self_path(self_cgroup, v2, rel, sizeof(rel), ctl, sizeof(ctl));
  if (v2) {
    snprintf(base, sizeof(base), "%s", root);
  } else {
    /* The v1 cpu controller's mount: named after the controller list, or one of the usual names. */
    const char *names[] = {ctl, "cpu", "cpu,cpuacct", "cpuacct,cpu"};
    base[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
      if (names[i][0] == '\0' || strchr(names[i], '/')) continue;
      snprintf(base, sizeof(base), "%s/%s", root, names[i]);
      if (is_dir(base)) break;
      base[0] = '\0';
    }
    if (base[0] == '\0') return 0;
  }
  /* Start at base + rel when it exists (a path with ".." is never followed), else at base. */
  char dir[TRUN_CGROUP_PATH_MAX];
  size_t base_len = strlen(base);
  int n = snprintf(dir, sizeof(dir), "%s%s", base, strcmp(rel, "/") == 0 ? "" : rel);
  if (n < 0 || (size_t)n >= sizeof(dir) || strstr(rel, "/..") || !is_dir(dir))
    snprintf(dir, sizeof(dir), "%s", base);
  size_t len = strlen(dir);
  while (len > base_len && dir[len - 1] == '/') dir[--len] = '\0';
  int best = 0;
  for (;;) {
    int l = limit_at(dir, v2);
    if (l > 0 && (best == 0 || l < best)) best = l;
    if (len <= base_len) break;
    char *slash = strrchr(dir, '/');
    if (slash == NULL || (size_t)(slash - dir) < base_len) break;
    *slash = '\0';
    len = (size_t)(slash - dir);
  }
  return best;
}

/* CPUs in our affinity mask (any size of machine), or the online count when that fails. */
static int affinity_count(void) {
  for (int ncpu = 1024; ncpu <= 1 << 20; ncpu *= 2) {
    cpu_set_t *set = CPU_ALLOC(ncpu);
    if (set == NULL) break;
    size_t sz = CPU_ALLOC_SIZE(ncpu);
    CPU_ZERO_S(sz, set);
    if (sched_getaffinity(0, sz, set) == 0) {
      int n = CPU_COUNT_S(sz, set);
      CPU_FREE(set);
      if (n > 0) return n;
      break;
    }
    int e = errno;
    CPU_FREE(set);
    if (e != EINVAL) break;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (n > INT_MAX ? INT_MAX : (int)n) : 1;
}

int trun_discover_cpus(void) {
  int cpus = affinity_count();
  const char *root = getenv("TRUN_CGROUP_ROOT");
  if (root == NULL || root[0] == '\0') root = "/sys/fs/cgroup";
  char self[8192];
  int limit = trun_cgroup_cpu_limit(
      root, trun_read_small("/proc/self/cgroup", self, sizeof(self)) >= 0 ? self : NULL);
  if (limit > 0 && limit < cpus) cpus = limit;
  return cpus < 1 ? 1 : cpus;
}

/* node<N> → N, or -1 for other names. */
static int node_number(const char *name) {
  if (strncmp(name, "node", 4) != 0 || name[4] < '0' || name[4] > '9') return -1;
  char *end;
  long v = strtol(name + 4, &end, 10);
  return *end == '\0' && v <= INT_MAX ? (int)v : -1;
}

int trun_numa_of_cpulist(const char *cpulist) {
  const char *sys = getenv("TRUN_SYSFS_ROOT");
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/devices/system/node", sys && *sys ? sys : "/sys");
  unsigned long *want = calloc(2 * TRUN_CPU_LONGS, sizeof(unsigned long));
  DIR *d = opendir(dir);
  if (want == NULL || d == NULL) {
    free(want);
    if (d) closedir(d);
    return -1;
  }
  unsigned long *have = want + TRUN_CPU_LONGS;
  int have_want = cpulist && trun_cpulist_to_mask(cpulist, want, TRUN_CPU_LONGS) == 0 &&
                  trun_mask_count(want, TRUN_CPU_LONGS) > 0;
  int nodes = 0, only = -1, found = -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int n = node_number(e->d_name);
    if (n < 0) continue;
    nodes++;
    only = n;
    char path[PATH_MAX + 300], text[8192];
    snprintf(path, sizeof(path), "%s/%s/cpulist", dir, e->d_name);
    if (!have_want || found >= 0 || trun_read_small(path, text, sizeof(text)) < 0 ||
        trun_cpulist_to_mask(text, have, TRUN_CPU_LONGS) < 0)
      continue;
    int inside = 1;
    for (unsigned i = 0; i < TRUN_CPU_LONGS && inside; i++) inside = (want[i] & ~have[i]) == 0;
    if (inside) found = n;
  }
  closedir(d);
  free(want);
  return nodes == 1 ? only : found;
}
