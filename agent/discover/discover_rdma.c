/* RDMA devices (EFA and others) from sysfs (shared/spec/gpu-efa-nccl.md §1), and the PCI helpers that GPU
 * discovery and trun-topo share.
 *
 * For each TRUN_SYSFS_ROOT (default /sys)/class/infiniband/<dev>: realpath(<dev>/device) is the PCI function
 * (its basename the address), basename(readlink(device/driver)) the driver, device/numa_node the NUMA node
 * (climbing PCI parents while it says -1). EFA = driver "efa", or PCI vendor 0x1d0f with device 0xefaX.
 * Usable = some class/infiniband_verbs/uverbsN/ibdev names the device and TRUN_DEV_ROOT (default /dev)/
 * infiniband/uverbsN exists: in a pod sysfs lists every host device but only the allocated uverbs nodes are
 * there. Devices come out sorted by PCI address.
 *
 * nearest_gpu: the visible GPU whose sysfs PCI path (realpath of bus/pci/devices/<bdf>) shares the longest
 * prefix with the device's; ties go to a GPU on the same NUMA node, then to the lowest visible index.
 *
 * Distance labels (nvidia-smi topo -m words) between two PCI paths /sys/devices/pciDDDD:BB/<bridges>/<dev>:
 * different root complexes → NODE on the same (known) NUMA node, else SYS; same root complex and nothing
 * deeper in common → PHB; a common bridge with at most one more bridge below it on either side → PIX (one
 * PCIe switch), more → PXB. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "discover.h"

/* Internal, shared with discover_gpu.c, tools/topo.c and tests/unit/test_discover.c (which declare them). */
int trun_pci_parse(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn);
int trun_pci_sysfs_path(const char *bus_id, char *out, size_t outlen);
int trun_pci_numa_of_bus_id(const char *bus_id);
const char *trun_pci_distance(const char *path_a, int numa_a, const char *path_b, int numa_b);
int trun_rdma_sysfs_path(const char *name, char *out, size_t outlen);

/* Copies src into dst (size n), truncating. */
static void copy_str(char *dst, size_t n, const char *src) {
  size_t len = strnlen(src, n - 1);
  memcpy(dst, src, len);
  dst[len] = '\0';
}

static const char *sysfs_root(void) {
  const char *r = getenv("TRUN_SYSFS_ROOT");
  return r && *r ? r : "/sys";
}

static const char *dev_root(void) {
  const char *r = getenv("TRUN_DEV_ROOT");
  return r && *r ? r : "/dev";
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads up to max hex digits (at least one) into *v; advances *s. */
static int hexnum(const char **s, int max, unsigned *v) {
  unsigned x = 0;
  int n = 0;
  while (n < max && hexval(**s) >= 0) {
    x = x * 16 + (unsigned)hexval(**s);
    (*s)++;
    n++;
  }
  if (n == 0) return -1;
  *v = x;
  return 0;
}

/* "[domain:]bus:dev.fn" in hex, any case, domain up to 8 digits (NVML) or 4 (sysfs). 0 or -EINVAL. */
int trun_pci_parse(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn) {
  unsigned a, b, c, f;
  const char *p = s;
  if (!s || hexnum(&p, 8, &a) < 0 || *p++ != ':' || hexnum(&p, 2, &b) < 0) return -EINVAL;
  if (*p == ':') {
    p++;
    if (hexnum(&p, 2, &c) < 0) return -EINVAL;
  } else {
    c = b;
    b = a;
    a = 0;
  }
  if (*p++ != '.' || hexnum(&p, 1, &f) < 0 || *p != '\0') return -EINVAL;
  if (b > 0xff || c > 0x1f || f > 7) return -EINVAL;
  *dom = a & 0xffff;
  *bus = b;
  *dev = c;
  *fn = f;
  return 0;
}

/* realpath of <sysfs>/bus/pci/devices/<dddd:bb:dd.f> for an NVML or sysfs bus id; 0 or -errno. */
int trun_pci_sysfs_path(const char *bus_id, char *out, size_t outlen) {
  unsigned d, b, s, f;
  if (trun_pci_parse(bus_id, &d, &b, &s, &f) < 0) return -EINVAL;
  char link[PATH_MAX], real[PATH_MAX];
  snprintf(link, sizeof(link), "%s/bus/pci/devices/%04x:%02x:%02x.%x", sysfs_root(), d, b, s, f);
  if (!realpath(link, real)) return -errno;
  if (strlen(real) >= outlen) return -ENAMETOOLONG;
  memcpy(out, real, strlen(real) + 1);
  return 0;
}

static int read_int_file(const char *path, int *v) {
  FILE *f = fopen(path, "r");
  if (!f) return -errno;
  int ok = fscanf(f, "%d", v) == 1;
  fclose(f);
  return ok ? 0 : -EINVAL;
}

static int is_bdf(const char *name) {
  unsigned d, b, s, f;
  return trun_pci_parse(name, &d, &b, &s, &f) == 0 && strchr(name, ':') != strrchr(name, ':');
}

/* numa_node of a PCI function dir, climbing BDF-shaped parents while it reads -1; -1 unknown. */
static int pci_numa(const char *path) {
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s", path);
  for (;;) {
    char file[PATH_MAX + 16];
    int v;
    snprintf(file, sizeof(file), "%s/numa_node", p);
    if (read_int_file(file, &v) == 0 && v >= 0) return v;
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) return -1;
    *slash = '\0';
    const char *base = strrchr(p, '/');
    if (!is_bdf(base ? base + 1 : p)) return -1;
  }
}

int trun_pci_numa_of_bus_id(const char *bus_id) {
  char path[PATH_MAX];
  if (trun_pci_sysfs_path(bus_id, path, sizeof(path)) < 0) return -1;
  return pci_numa(path);
}

/* The components of a sysfs PCI path after ".../devices/": splits into comp (pointers into buf). */
static int pci_components(const char *path, char *buf, size_t buflen, char **comp, int maxcomp) {
  const char *d = strstr(path, "/devices/");
  if (!d) return 0;
  snprintf(buf, buflen, "%s", d + strlen("/devices/"));
  int n = 0;
  for (char *save = NULL, *t = strtok_r(buf, "/", &save); t && n < maxcomp; t = strtok_r(NULL, "/", &save))
    comp[n++] = t;
  return n;
}

const char *trun_pci_distance(const char *path_a, int numa_a, const char *path_b, int numa_b) {
  char ba[PATH_MAX], bb[PATH_MAX];
  char *ca[64], *cb[64];
  int na = path_a ? pci_components(path_a, ba, sizeof(ba), ca, 64) : 0;
  int nb = path_b ? pci_components(path_b, bb, sizeof(bb), cb, 64) : 0;
  int c = 0;
  while (c < na && c < nb && strcmp(ca[c], cb[c]) == 0) c++;
  if (c == 0) return numa_a >= 0 && numa_a == numa_b ? "NODE" : "SYS";
  if (c >= na || c >= nb) return "PIX"; /* one is below the other (a bridge and its device) */
  if (c == 1) return "PHB";
  int below_a = na - c - 1, below_b = nb - c - 1;
  return below_a <= 1 && below_b <= 1 ? "PIX" : "PXB";
}

/* Shared prefix length in components (for nearest_gpu). */
static int common_components(const char *path_a, const char *path_b) {
  char ba[PATH_MAX], bb[PATH_MAX];
  char *ca[64], *cb[64];
  int na = pci_components(path_a, ba, sizeof(ba), ca, 64);
  int nb = pci_components(path_b, bb, sizeof(bb), cb, 64);
  int c = 0;
  while (c < na && c < nb && strcmp(ca[c], cb[c]) == 0) c++;
  return c;
}

/* realpath of class/infiniband/<name>/device; 0 or -errno. */
int trun_rdma_sysfs_path(const char *name, char *out, size_t outlen) {
  char link[PATH_MAX], real[PATH_MAX];
  snprintf(link, sizeof(link), "%s/class/infiniband/%s/device", sysfs_root(), name);
  if (!realpath(link, real)) return -errno;
  if (strlen(real) >= outlen) return -ENAMETOOLONG;
  memcpy(out, real, strlen(real) + 1);
  return 0;
}

static int read_hex_file(const char *path, unsigned *v) {
  FILE *f = fopen(path, "r");
  if (!f) return -errno;
  int ok = fscanf(f, "%x", v) == 1;
  fclose(f);
  return ok ? 0 : -EINVAL;
}

/* Is there a /dev/infiniband/uverbsN whose sysfs ibdev is name? */
static int uverbs_usable(const char *name) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/class/infiniband_verbs", sysfs_root());
  DIR *d = opendir(dir);
  if (!d) return 0;
  int usable = 0;
  struct dirent *e;
  while (!usable && (e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "uverbs", 6) != 0) continue;
    char file[PATH_MAX + 300], ibdev[128] = "";
    snprintf(file, sizeof(file), "%s/%s/ibdev", dir, e->d_name);
    FILE *f = fopen(file, "r");
    if (!f) continue;
    if (!fgets(ibdev, sizeof(ibdev), f)) ibdev[0] = '\0';
    fclose(f);
    ibdev[strcspn(ibdev, "\n")] = '\0';
    if (strcmp(ibdev, name) != 0) continue;
    char node[PATH_MAX + 300];
    struct stat st;
    snprintf(node, sizeof(node), "%s/infiniband/%s", dev_root(), e->d_name);
    usable = stat(node, &st) == 0;
  }
  closedir(d);
  return usable;
}

static int cmp_rdma(const void *a, const void *b) {
  const trun_rdma *x = a, *y = b;
  unsigned xd = 0, xb = 0, xs = 0, xf = 0, yd = 0, yb = 0, ys = 0, yf = 0;
  int xo = trun_pci_parse(x->pci_bus_id, &xd, &xb, &xs, &xf) == 0;
  int yo = trun_pci_parse(y->pci_bus_id, &yd, &yb, &ys, &yf) == 0;
  if (xo != yo) return yo - xo; /* devices without a PCI address last */
  unsigned long long kx = (unsigned long long)xd << 16 | xb << 8 | xs << 3 | xf;
  unsigned long long ky = (unsigned long long)yd << 16 | yb << 8 | ys << 3 | yf;
  if (xo && kx != ky) return kx < ky ? -1 : 1;
  return strcmp(x->name, y->name);
}

int trun_discover_rdma(trun_node *node) {
  node->nrdma = 0;
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/class/infiniband", sysfs_root());
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && node->nrdma < TRUN_MAX_RDMA) {
    if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(node->rdma[0].name)) continue;
    trun_rdma *r = &node->rdma[node->nrdma];
    memset(r, 0, sizeof(*r));
    copy_str(r->name, sizeof(r->name), e->d_name);
    r->numa_node = -1;
    r->nearest_gpu = -1;
    char path[PATH_MAX];
    if (trun_rdma_sysfs_path(r->name, path, sizeof(path)) == 0) {
      const char *base = strrchr(path, '/');
      copy_str(r->pci_bus_id, sizeof(r->pci_bus_id), base ? base + 1 : path);
      r->numa_node = pci_numa(path);
      char link[PATH_MAX + 16], target[PATH_MAX];
      snprintf(link, sizeof(link), "%s/driver", path);
      ssize_t n = readlink(link, target, sizeof(target) - 1);
      if (n > 0) {
        target[n] = '\0';
        const char *drv = strrchr(target, '/');
        copy_str(r->driver, sizeof(r->driver), drv ? drv + 1 : target);
      }
      unsigned vendor = 0, device = 0;
      snprintf(link, sizeof(link), "%s/vendor", path);
      int have_v = read_hex_file(link, &vendor) == 0;
      snprintf(link, sizeof(link), "%s/device", path);
      int have_d = read_hex_file(link, &device) == 0;
      r->is_efa = strcmp(r->driver, "efa") == 0 ||
                  (have_v && have_d && vendor == 0x1d0f && (device & 0xfff0) == 0xefa0);
    }
    r->usable = uverbs_usable(r->name);
    node->nrdma++;
  }
  closedir(d);
  qsort(node->rdma, (size_t)node->nrdma, sizeof(node->rdma[0]), cmp_rdma);

  /* Pair each device with the nearest visible GPU. */
  for (int i = 0; i < node->nrdma; i++) {
    trun_rdma *r = &node->rdma[i];
    char rpath[PATH_MAX];
    int have_r = trun_rdma_sysfs_path(r->name, rpath, sizeof(rpath)) == 0;
    int best = -1, best_c = -1, best_numa = 0;
    for (int g = 0; g < node->ngpu; g++) {
      char gpath[PATH_MAX];
      int c = 0;
      if (have_r && trun_pci_sysfs_path(node->gpus[g].pci_bus_id, gpath, sizeof(gpath)) == 0)
        c = common_components(rpath, gpath);
      int numa = r->numa_node >= 0 && r->numa_node == node->gpus[g].numa_node;
      if (c > best_c || (c == best_c && numa && !best_numa)) {
        best = g;
        best_c = c;
        best_numa = numa;
      }
    }
    r->nearest_gpu = best >= 0 ? node->gpus[best].visible_index : -1;
  }
  return 0;
}
