/* Finding a job's NCCL RAS address on this host (hang.h): the NCCL_RAS_ADDR values in the environments of the
 * processes this user may read (/proc/<pid>/environ: its own processes, or every one for root). trun gives
 * every job's workers (and its warm pool's processes) a RAS port of the job's own, so a tool run by hand on
 * the node finds the job there without being told the port. Each environment is read in bounded chunks and
 * scanned entry by entry; nothing of it is kept but the two values looked for, and only loopback addresses
 * are taken. */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hang.h"

#define FIND_CHUNK 4096 /* one read; an entry longer than this is not one we look for */

/* A value fit to show and to connect to: 1..63 printable bytes. */
static int usable(const char *v, size_t n) {
  if (n == 0 || n > 63) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isprint((unsigned char)v[i])) return 0;
  return 1;
}

/* Whether addr ("host:port") is on this host's loopback: 127.0.0.0/8, ::1 (bracketed) or localhost. The
 * addresses of processes are what their environments say, and another user's process may say anything: the
 * tool connects only where no traffic leaves the host. */
static int loopback(const char *addr) {
  char host[64], port[8];
  if (trun_ras_split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0) return 0;
  if (strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0) return 1;
  struct in_addr a4;
  return inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* The entry e (n bytes, no NUL) if it is NAME=value: value into out (64 bytes). */
static int take(const char *e, size_t n, const char *name, char *out) {
  size_t k = strlen(name);
  if (n <= k || memcmp(e, name, k) != 0 || e[k] != '=' || !usable(e + k + 1, n - k - 1)) return 0;
  memcpy(out, e + k + 1, n - k - 1);
  out[n - k - 1] = '\0';
  return 1;
}

/* NCCL_RAS_ADDR and TORCHELASTIC_RUN_ID from one environ file (either "" when absent). */
static void scan_environ(int fd, char *addr, char *run_id) {
  char buf[FIND_CHUNK];
  size_t have = 0, total = 0;
  int skipping = 0; /* inside an entry longer than the buffer */
  addr[0] = run_id[0] = '\0';
  while (total < TRUN_RAS_FIND_MAX_ENVIRON) {
    ssize_t k = read(fd, buf + have, sizeof(buf) - have);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    total += (size_t)k;
    have += (size_t)k;
    size_t start = 0;
    for (;;) {
      char *nul = memchr(buf + start, '\0', have - start);
      if (nul == NULL) break;
      size_t len = (size_t)(nul - (buf + start));
      if (!skipping && !(addr[0] == '\0' && take(buf + start, len, "NCCL_RAS_ADDR", addr)) &&
          run_id[0] == '\0')
        take(buf + start, len, "TORCHELASTIC_RUN_ID", run_id);
      skipping = 0;
      start += len + 1;
    }
    if (start == 0 && have == sizeof(buf)) { /* one entry fills the buffer: not ours, skip to its end */
      skipping = 1;
      have = 0;
    } else {
      memmove(buf, buf + start, have - start);
      have -= start;
    }
    if (addr[0] && run_id[0]) break;
  }
}

long trun_ras_find(const char *proc, long skip, trun_ras_found *out, size_t n, int *more) {
  *more = 0;
  DIR *d = opendir(proc);
  if (d == NULL) return -errno;
  size_t got = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    errno = 0;
    long pid = strtol(e->d_name, &end, 10);
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || *end || errno || pid <= 0 || pid == skip) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/%s/environ", proc, e->d_name) >= (int)sizeof(path)) continue;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue; /* another user's, or gone */
    char addr[64], run_id[64];
    scan_environ(fd, addr, run_id);
    close(fd);
    if (addr[0] == '\0' || !loopback(addr)) continue;
    size_t i = 0;
    while (i < got && strcmp(out[i].addr, addr) != 0) i++;
    if (i == got) {
      if (got == n) { /* full: keep the addresses of the lowest pids (the jobs that started first) */
        *more = 1;
        size_t j = 0;
        for (size_t k = 1; k < got; k++)
          if (out[k].pid > out[j].pid) j = k;
        if (got == 0 || pid > out[j].pid) continue;
        i = j;
      } else {
        got++;
      }
      out[i] = (trun_ras_found){.pid = pid};
      snprintf(out[i].addr, sizeof(out[i].addr), "%s", addr);
    }
    out[i].nprocs++;
    if (pid < out[i].pid) out[i].pid = pid;
    if (out[i].run_id[0] == '\0') snprintf(out[i].run_id, sizeof(out[i].run_id), "%s", run_id);
  }
  closedir(d);
  /* in the order of their lowest pids (the job that started first first) */
  for (size_t i = 1; i < got; i++)
    for (size_t j = i; j > 0 && out[j].pid < out[j - 1].pid; j--) {
      trun_ras_found t = out[j];
      out[j] = out[j - 1];
      out[j - 1] = t;
    }
  return (long)got;
}
