/* The per-boot GPU cache (agent/discover/discover_internal.h): what NVML said about the node's GPUs that
 * does not change while the machine runs (the devices, UUIDs, names, PCI ids, NUMA nodes, CPU affinity,
 * memory, the NVLink counts and P2P status between them), so that a launch needs no NVML at all: starting
 * NVML and asking it for every GPU's links is most of a launch on a multi-GPU box (137 of 164 ms with
 * 4 x H200). The health facts are never cached.
 *
 * The key, read without NVML: the boot id (/proc/sys/kernel/random/boot_id), the driver's version line and
 * a hash of its parameters (/proc/driver/nvidia/version, params: a reloaded driver with other registry keys
 * is another key), the NVML library asked (TRUN_NVML_LIBRARY), the effective user, and every GPU the
 * driver lists under /proc/driver/nvidia/gpus with its UUID (its "information" file; a container sees the
 * GPUs it was given). A cache is written only when NVML listed exactly those GPUs.
 *
 * The file: $XDG_RUNTIME_DIR/trun/gpus.cache where XDG_RUNTIME_DIR is a directory of this user that no one
 * else may write, else $TMPDIR (or /tmp)/trun-<uid>/gpus.cache; the directory is this user's with mode 0700
 * and the file a regular 0600 file of this user (never followed if a link), or it is not used. One fixed
 * layout: a magic, the format version and size, an FNV-1a hash of the rest, the key, the list. Whatever
 * does not check out (size, hash, key, a string without its end, a link label or P2P word trun never
 * writes, a count out of range, a GPU the key does not name) is a miss with the reason, never an error: the
 * caller discovers through NVML and writes the file again (rename over it, so that readers see a whole
 * file). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "discover_internal.h"

#define CACHE_MAGIC "TRUNGPU"
#define CACHE_VERSION 3u /* 2: trun_gpu.switch_links; 3: trun_gpu.mnnvl */
#define CACHE_NAME "gpus.cache"

typedef struct {
  char magic[8];
  uint32_t version;
  uint32_t size;
  uint64_t sum; /* FNV-1a 64 of everything after it */
  char key[TRUN__GPU_CACHE_KEY];
  trun__gpu_list list;
} cache_file;

static uint64_t fnv1a(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}
#define FNV_START 14695981039346656037ull

static uint64_t file_sum(const cache_file *f) {
  const char *start = (const char *)f + offsetof(cache_file, key);
  return fnv1a(start, sizeof(*f) - offsetof(cache_file, key), FNV_START);
}

static const char *proc_root(void) {
  const char *r = getenv("TRUN_PROC_ROOT");
  return r && *r ? r : "/proc";
}

/* The first line of s (without its newline) in out. */
static void first_line(const char *s, char *out, size_t len) {
  size_t n = strcspn(s, "\n");
  if (n >= len) n = len - 1;
  memcpy(out, s, n);
  out[n] = '\0';
}

/* The value of "GPU UUID:" in a /proc/driver/nvidia/gpus/<bus>/information text, or -1. */
static int info_uuid(const char *info, char *out, size_t len) {
  for (const char *l = info; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, "GPU UUID:", 9) != 0) continue;
    const char *v = l + 9;
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strcspn(v, " \t\r\n");
    if (n == 0 || n >= len || strncmp(v, "GPU-", 4) != 0) return -1;
    memcpy(out, v, n);
    out[n] = '\0';
    return 0;
  }
  return -1;
}

static int is_pci_dir(const struct dirent *d) { return d->d_name[0] != '.'; }

int trun__gpu_cache_key(char *key, size_t keylen, char *why, size_t whylen) {
  char path[4096], buf[4096], line[512];
  const char *root = proc_root();
  const char *hook = getenv("TRUN_BOOT_ID"); /* the tests' node identity, as the doctor reads it */
  snprintf(path, sizeof(path), "%s/sys/kernel/random/boot_id", root);
  if (hook && *hook)
    snprintf(buf, sizeof(buf), "%s", hook);
  else if (trun_read_small(path, buf, sizeof(buf)) <= 0) {
    trun_errf(why, whylen, "no boot id in %s", path);
    return -1;
  }
  char boot[64];
  first_line(buf, boot, sizeof(boot));
  snprintf(path, sizeof(path), "%s/driver/nvidia/version", root);
  if (trun_read_small(path, buf, sizeof(buf)) <= 0) {
    trun_errf(why, whylen, "no NVIDIA driver version in %s", path);
    return -1;
  }
  first_line(buf, line, sizeof(line));
  snprintf(path, sizeof(path), "%s/driver/nvidia/params", root);
  ssize_t np = trun_read_small(path, buf, sizeof(buf));
  uint64_t params = np > 0 ? fnv1a(buf, (size_t)np, FNV_START) : 0;
  const char *lib = getenv("TRUN_NVML_LIBRARY");
  size_t at = 0;
  int w = snprintf(key, keylen, "boot=%s\ndriver=%s\nparams=%016llx\nnvml=%s\nuid=%u\n", boot, line,
                   (unsigned long long)params, lib && *lib ? lib : "libnvidia-ml.so.1", (unsigned)geteuid());
  if (w < 0 || (size_t)w >= keylen) {
    trun_errf(why, whylen, "the driver's version line is too long");
    return -1;
  }
  at = (size_t)w;
  snprintf(path, sizeof(path), "%s/driver/nvidia/gpus", root);
  struct dirent **ents = NULL;
  int n = scandir(path, &ents, is_pci_dir, alphasort);
  if (n < 0) {
    trun_errf(why, whylen, "cannot list %s: %s", path, strerror(errno));
    return -1;
  }
  int rc = n > 0 && n <= TRUN_MAX_GPUS ? 0 : -1;
  if (rc < 0) trun_errf(why, whylen, "%s lists %d GPU(s)", path, n);
  for (int i = 0; i < n; i++) {
    char uuid[96];
    if (rc == 0) {
      snprintf(path, sizeof(path), "%s/driver/nvidia/gpus/%s/information", root, ents[i]->d_name);
      if (trun_read_small(path, buf, sizeof(buf)) <= 0 || info_uuid(buf, uuid, sizeof(uuid)) < 0) {
        trun_errf(why, whylen, "no GPU UUID in %s", path);
        rc = -1;
      } else {
        w = snprintf(key + at, keylen - at, "gpu=%s %s\n", ents[i]->d_name, uuid);
        if (w < 0 || (size_t)w >= keylen - at) {
          trun_errf(why, whylen, "too many GPUs for the cache key");
          rc = -1;
        } else {
          at += (size_t)w;
        }
      }
    }
    free(ents[i]);
  }
  free(ents);
  return rc;
}

/* A directory of this user that others may not write (0700 for one we made): 0, or -1 with why. */
static int own_dir(const char *dir, int strict, char *why, size_t whylen) {
  struct stat st;
  if (lstat(dir, &st) < 0) {
    trun_errf(why, whylen, "%s: %s", dir, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (strict ? 077 : 022))) {
    trun_errf(why, whylen, "%s is not a directory of this user closed to others", dir);
    return -1;
  }
  return 0;
}

int trun__gpu_cache_path(char *path, size_t len, int create, char *why, size_t whylen) {
  char dir[4096];
  const char *x = getenv("XDG_RUNTIME_DIR");
  char ignore[256];
  if (x && x[0] == '/' && own_dir(x, 0, ignore, sizeof(ignore)) == 0) {
    snprintf(dir, sizeof(dir), "%s/trun", x);
  } else {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/trun-%u", t && t[0] == '/' ? t : "/tmp", (unsigned)geteuid());
  }
  if (create && mkdir(dir, 0700) < 0 && errno != EEXIST) {
    trun_errf(why, whylen, "cannot create %s: %s", dir, strerror(errno));
    return -1;
  }
  if (own_dir(dir, 1, why, whylen) < 0) return -1;
  int w = snprintf(path, len, "%s/%s", dir, CACHE_NAME);
  if (w < 0 || (size_t)w >= len) {
    trun_errf(why, whylen, "the cache's path is too long");
    return -1;
  }
  return 0;
}

static int terminated(const char *s, size_t n) { return memchr(s, '\0', n) != NULL; }

static int link_word(const char *s) {
  static const char *const words[] = {"X", "PIX", "PXB", "PHB", "NODE", "SYS", "N/A"};
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
    if (strcmp(s, words[i]) == 0) return 1;
  if (strncmp(s, "NV", 2) != 0 || s[2] < '1' || s[2] > '9') return 0;
  size_t n = strspn(s + 2, "0123456789");
  return n <= 3 && s[2 + n] == '\0';
}

static int p2p_word(const char *s) {
  static const char *const words[] = {"X", "OK", "CNS", "GNS", "TNS", "DR", "NS", "U", "N/A"};
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
    if (strcmp(s, words[i]) == 0) return 1;
  return 0;
}

/* Whether the list holds only what discovery writes; why says what does not. */
static int list_valid(const trun__gpu_list *l, char *why, size_t whylen) {
  if (l->count < 0 || l->count > TRUN_MAX_GPUS || (l->affinity != 0 && l->affinity != 1) || l->full != 1) {
    trun_errf(why, whylen, "its GPU count or flags are out of range");
    return 0;
  }
  for (int i = 0; i < l->count; i++) {
    const trun_gpu *g = &l->gpus[i];
    if (g->index != i || g->visible_index != -1 || g->numa_node < -1 || g->numa_node > 4095 ||
        g->switch_links < 0 || g->switch_links > 1024 || g->mnnvl < -1 || g->mnnvl > 1 || g->health.probed ||
        !terminated(g->uuid, sizeof(g->uuid)) || !terminated(g->name, sizeof(g->name)) ||
        !terminated(g->pci_bus_id, sizeof(g->pci_bus_id)) ||
        !terminated(g->cpu_affinity, sizeof(g->cpu_affinity))) {
      trun_errf(why, whylen, "GPU %d's entry is malformed", i);
      return 0;
    }
    for (int j = 0; j < l->count; j++)
      if (!terminated(l->links[i][j], sizeof(l->links[i][j])) || !link_word(l->links[i][j]) ||
          !terminated(l->p2p[i][j], sizeof(l->p2p[i][j])) || !p2p_word(l->p2p[i][j]) ||
          (i == j) != (strcmp(l->links[i][j], "X") == 0)) {
        trun_errf(why, whylen, "the link or P2P entry of GPUs %d and %d is malformed", i, j);
        return 0;
      }
  }
  return 1;
}

int trun__gpu_cache_matches(const char *key, const trun__gpu_list *l) {
  int listed = 0;
  for (const char *p = strstr(key, "\ngpu="); p; p = strstr(p + 1, "\ngpu=")) listed++;
  if (listed != l->count) return 0;
  for (int i = 0; i < l->count; i++) {
    char want[128];
    const char *u = l->gpus[i].uuid;
    if (strncmp(u, "GPU-", 4) != 0) return 0;
    snprintf(want, sizeof(want), " %s\n", u);
    if (strstr(key, want) == NULL) return 0;
  }
  return 1;
}

int trun__gpu_cache_load(const char *key, int need_affinity, trun__gpu_list *l, char *why, size_t whylen) {
  char path[4200];
  if (trun__gpu_cache_path(path, sizeof(path), 0, why, whylen) < 0) return 0;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    trun_errf(why, whylen, "%s: %s", path, errno == ENOENT ? "none yet" : strerror(errno));
    return 0;
  }
  struct stat st;
  cache_file *f = NULL;
  int ok = 0;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
    trun_errf(why, whylen, "%s is not a regular 0600 file of this user; not trusted", path);
  } else if ((size_t)st.st_size != sizeof(*f)) {
    trun_errf(why, whylen, "%s has %lld bytes, not %zu (another trun version?)", path, (long long)st.st_size,
              sizeof(*f));
  } else if ((f = malloc(sizeof(*f))) == NULL) {
    trun_errf(why, whylen, "out of memory");
  } else {
    size_t got = 0;
    while (got < sizeof(*f)) {
      ssize_t r = read(fd, (char *)f + got, sizeof(*f) - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (got != sizeof(*f) || memcmp(f->magic, CACHE_MAGIC, sizeof(CACHE_MAGIC)) != 0 ||
        f->version != CACHE_VERSION || f->size != sizeof(*f))
      trun_errf(why, whylen, "%s is not a GPU cache of this trun version", path);
    else if (f->sum != file_sum(f))
      trun_errf(why, whylen, "%s fails its checksum (damaged or edited)", path);
    else if (!terminated(f->key, sizeof(f->key)) || strcmp(f->key, key) != 0)
      trun_errf(why, whylen, "%s was written for another boot, driver or set of GPUs", path);
    else if (!list_valid(&f->list, why, whylen) || !trun__gpu_cache_matches(key, &f->list))
      trun_catf(why, whylen, " (%s)", path);
    else if (need_affinity && !f->list.affinity)
      trun_errf(why, whylen, "%s lacks the GPUs' CPU affinity (--numa-binding needs it)", path);
    else {
      *l = f->list;
      ok = 1;
    }
  }
  free(f);
  close(fd);
  return ok;
}

int trun__gpu_cache_store(const char *key, const trun__gpu_list *l, char *why, size_t whylen) {
  char path[4200], tmp[4300];
  if (trun__gpu_cache_path(path, sizeof(path), 1, why, whylen) < 0) return -1;
  cache_file *f = calloc(1, sizeof(*f));
  if (f == NULL) {
    trun_errf(why, whylen, "out of memory");
    return -1;
  }
  memcpy(f->magic, CACHE_MAGIC, sizeof(CACHE_MAGIC));
  f->version = CACHE_VERSION;
  f->size = sizeof(*f);
  snprintf(f->key, sizeof(f->key), "%s", key);
  f->list = *l;
  for (int i = 0; i < f->list.count && i < TRUN_MAX_GPUS; i++)
    memset(&f->list.gpus[i].health, 0, sizeof(f->list.gpus[i].health));
  f->sum = file_sum(f);
  snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
  int fd = mkstemp(tmp);
  int rc = -1;
  if (fd < 0) {
    trun_errf(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
  } else {
    size_t put = 0;
    while (put < sizeof(*f)) {
      ssize_t w = write(fd, (const char *)f + put, sizeof(*f) - put);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      put += (size_t)w;
    }
    int e = put != sizeof(*f) ? (errno ? errno : EIO) : fchmod(fd, 0600) < 0 ? errno : 0;
    if (close(fd) < 0 && e == 0) e = errno;
    if (e != 0)
      trun_errf(why, whylen, "cannot write %s: %s", tmp, strerror(e));
    else if (rename(tmp, path) < 0)
      trun_errf(why, whylen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    else
      rc = 0;
    if (rc < 0) unlink(tmp);
  }
  free(f);
  return rc;
}
