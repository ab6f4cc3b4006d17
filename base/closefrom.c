/* trun_closefrom: closefrom(3) where glibc has it (2.34), the same by other means where it does not. In
 * base/, which every module may use: the agent's guard and its GPU sampler both need it. */
#include "closefrom.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#define TRUN_HAVE_CLOSEFROM 1
#endif

/* struct linux_dirent64 (getdents64(2)); glibc before 2.30 declares no wrapper. */
typedef struct {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
} trun_dirent64;

/* The descriptor number a /proc/self/fd entry names, or -1 ("." and ".."). */
static int fd_of(const char *name) {
  int fd = 0;
  if (*name == '\0') return -1;
  for (; *name; name++) {
    if (*name < '0' || *name > '9' || fd > (INT32_MAX - 9) / 10) return -1;
    fd = fd * 10 + (*name - '0');
  }
  return fd;
}

int trun__closefrom_scan(int lowfd) {
  int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  for (int closed = 1; closed;) {
    closed = 0;
    char buf[4096] __attribute__((aligned(8)));
    long n;
    while ((n = syscall(SYS_getdents64, dfd, buf, sizeof(buf))) > 0) {
      for (long off = 0; off < n;) {
        const trun_dirent64 *d = (const trun_dirent64 *)(buf + off);
        int fd = fd_of(d->name);
        if (fd >= lowfd && fd != dfd) {
          close(fd);
          closed = 1;
        }
        off += d->reclen;
      }
    }
    if (n < 0) {
      close(dfd);
      return -1;
    }
    if (closed && lseek(dfd, 0, SEEK_SET) < 0) break; /* the listing changed under us: read it again */
  }
  close(dfd);
  return 0;
}

void trun_close_range(int lowfd, int highfd) {
  if (lowfd > highfd) return;
#ifdef SYS_close_range
  if (syscall(SYS_close_range, (unsigned)lowfd, (unsigned)highfd, 0) == 0) return;
#endif
  for (int fd = lowfd; fd <= highfd; fd++) close(fd);
}

void trun_closefrom(int lowfd) {
#ifdef TRUN_HAVE_CLOSEFROM
  closefrom(lowfd);
#else
#ifdef SYS_close_range
  if (syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0) == 0) return;
#endif
  if (trun__closefrom_scan(lowfd) == 0) return;
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 65536;
  for (long fd = lowfd; fd < max; fd++) close((int)fd);
#endif
}
