/* A worker's memory cgroup and its OOM kills (memcg.h). */
#include "memcg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The mount point of the hierarchy (cgroup v1 with the memory controller, or cgroup2) whose root is a
 * prefix of cgpath, joined with the rest of cgpath into out. 0 or -ENOENT. */
static int mounted_dir(const char *mountinfo, int v2, const char *cgpath, char *out, size_t len) {
  FILE *f = fopen(mountinfo, "re");
  if (f == NULL) return -errno;
  char line[4096];
  int rc = -ENOENT;
  while (rc != 0 && fgets(line, sizeof(line), f)) {
    char *sep = strstr(line, " - ");
    if (sep == NULL) continue;
    char fstype[64], source[256], opts[1024], root[1024], mnt[1024];
    if (sscanf(sep + 3, "%63s %255s %1023s", fstype, source, opts) != 3) continue;
    if (sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2) continue;
    if (v2 ? strcmp(fstype, "cgroup2") != 0 : strcmp(fstype, "cgroup") != 0) continue;
    if (!v2) {
      int has = 0;
      for (char *save = NULL, *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save))
        has |= strcmp(o, "memory") == 0;
      if (!has) continue;
    }
    size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
    if (strncmp(cgpath, root, rl) != 0 || (cgpath[rl] != '/' && cgpath[rl] != '\0')) continue;
    if (snprintf(out, len, "%s%s", strcmp(mnt, "/") == 0 ? "" : mnt, cgpath + rl) < (int)len) rc = 0;
  }
  fclose(f);
  return rc;
}

static int exists(const char *dir, const char *file) {
  char p[PATH_MAX + 64];
  snprintf(p, sizeof(p), "%s/%s", dir, file);
  return access(p, R_OK) == 0;
}

int trun_memcg_of(const char *root, pid_t pid, trun_memcg *m) {
  char path[PATH_MAX], mountinfo[PATH_MAX], who[32], line[4096];
  if (pid > 0)
    snprintf(who, sizeof(who), "%d", (int)pid);
  else
    snprintf(who, sizeof(who), "self");
  snprintf(path, sizeof(path), "%s/proc/%s/cgroup", root, who);
  snprintf(mountinfo, sizeof(mountinfo), "%s/proc/%s/mountinfo", root, who);
  FILE *f = fopen(path, "re");
  if (f == NULL) return -errno;
  char v1path[2048] = "", v2path[2048] = "";
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (c2 == NULL) continue;
    *c1 = *c2 = '\0'; /* "<id>:<controllers>:<path>" */
    if (strcmp(line, "0") == 0 && c1[1] == '\0') {
      snprintf(v2path, sizeof(v2path), "%s", c2 + 1);
      continue;
    }
    for (char *save = NULL, *o = strtok_r(c1 + 1, ",", &save); o; o = strtok_r(NULL, ",", &save))
      if (strcmp(o, "memory") == 0) snprintf(v1path, sizeof(v1path), "%s", c2 + 1);
  }
  fclose(f);
  char dir[PATH_MAX];
  memset(m, 0, sizeof(*m));
  /* cgroup v2 when its memory controller is on for this cgroup (memory.events), else v1's memory. */
  if (v2path[0] && mounted_dir(mountinfo, 1, v2path, dir, sizeof(dir)) == 0) {
    char full[PATH_MAX];
    if (snprintf(full, sizeof(full), "%s%s", root, dir) < (int)sizeof(full) &&
        exists(full, "memory.events")) {
      snprintf(m->dir, sizeof(m->dir), "%s", full);
      m->v2 = 1;
      return 0;
    }
  }
  if (v1path[0] && mounted_dir(mountinfo, 0, v1path, dir, sizeof(dir)) == 0) {
    char full[PATH_MAX];
    if (snprintf(full, sizeof(full), "%s%s", root, dir) < (int)sizeof(full) &&
        exists(full, "memory.oom_control")) {
      snprintf(m->dir, sizeof(m->dir), "%s", full);
      return 0;
    }
  }
  return -ENOENT;
}

/* The value after "key " on a line of dir/file. 0 or -errno (-EBADMSG: no such line). */
static int read_keyed(const char *dir, const char *file, const char *key, long long *v) {
  char p[PATH_MAX + 64], line[256];
  snprintf(p, sizeof(p), "%s/%s", dir, file);
  FILE *f = fopen(p, "re");
  if (f == NULL) return -errno;
  size_t kl = strlen(key);
  int rc = -EBADMSG;
  while (rc != 0 && fgets(line, sizeof(line), f))
    if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
      char *end;
      errno = 0;
      *v = strtoll(line + kl + 1, &end, 10);
      if (errno == 0 && end != line + kl + 1) rc = 0;
    }
  fclose(f);
  return rc;
}

int trun_memcg_oom_kills(const trun_memcg *m, long long *n) {
  return read_keyed(m->dir, m->v2 ? "memory.events" : "memory.oom_control", "oom_kill", n);
}

long long trun_memcg_limit(const trun_memcg *m) {
  char p[PATH_MAX + 64], buf[64];
  snprintf(p, sizeof(p), "%s/%s", m->dir, m->v2 ? "memory.max" : "memory.limit_in_bytes");
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  /* "max" (v2) or v1's "no limit" (the page-rounded LLONG_MAX) */
  if (errno != 0 || end == buf || v >= (long long)1 << 60) return -1;
  return v;
}

/* One /dev/kmsg record "<prio>,<seq>,<usec>,<flags>[,...];<text>\n[ KEY=value\n...]" (rec, NUL-terminated):
 * 1 with its OOM kill in *r when it is the kernel's own (facility 0) "Killed process <pid> (<comm>)" record,
 * else 0. Writes to /dev/kmsg by any process get facility 1 (user) at least: never believed. */
static int oom_record(char *rec, trun_kmsg_oom *r) {
  char *semi = strchr(rec, ';');
  unsigned prio = 0;
  unsigned long long us = 0;
  if (semi == NULL || sscanf(rec, "%u,%*u,%llu", &prio, &us) != 2 || (prio >> 3) != 0) return 0;
  char *text = semi + 1;
  text[strcspn(text, "\n")] = '\0';
  const char *k = strstr(text, "Killed process ");
  int pid = 0;
  if (k == NULL || sscanf(k, "Killed process %d (", &pid) != 1 || pid <= 0) return 0;
  r->us = us;
  r->pid = (pid_t)pid;
  snprintf(r->text, sizeof(r->text), "%s", text);
  return 1;
}

int trun_kmsg_oom_kills(const char *kmsg, unsigned long long since_us, trun_kmsg_oom *out, size_t max) {
  int fd = open(kmsg, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -errno;
  char rec[8192];
  size_t n = 0;
  for (;;) {
    ssize_t got = read(fd, rec, sizeof(rec) - 1);                /* one record per read */
    if (got < 0 && (errno == EINTR || errno == EPIPE)) continue; /* EPIPE: overwritten while we read */
    if (got < 0 && errno == EAGAIN) break;
    if (got < 0) {
      int e = -errno;
      close(fd);
      return n ? (int)n : e;
    }
    if (got == 0) break;
    rec[got] = '\0';
    trun_kmsg_oom r;
    if (max == 0 || !oom_record(rec, &r) || r.us < since_us) continue;
    if (n == max) { /* keep the latest */
      memmove(out, out + 1, (max - 1) * sizeof(*out));
      n--;
    }
    out[n++] = r;
  }
  close(fd);
  return (int)n;
}

int trun_kmsg_oom_kill(const char *kmsg, pid_t pid, unsigned long long since_us, char *out, size_t len) {
  trun_kmsg_oom r[16];
  int n = trun_kmsg_oom_kills(kmsg, since_us, r, sizeof(r) / sizeof(r[0]));
  if (n < 0) return n;
  for (int i = n; i-- > 0;) /* the last one wins (a reused pid) */
    if (r[i].pid == pid) {
      snprintf(out, len, "%s", r[i].text);
      return 1;
    }
  return 0;
}

/* The initial PID namespace's inode number (PROC_PID_INIT_INO, fixed since Linux 3.8). */
#define TRUN_PID_INIT_INO 0xEFFFFFFCu

int trun_pidns_initial(const char *root) {
  char p[PATH_MAX];
  struct stat st;
  snprintf(p, sizeof(p), "%s/proc/self/ns/pid", root);
  if (stat(p, &st) != 0) return 0;
  return st.st_ino == TRUN_PID_INIT_INO;
}
