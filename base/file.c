/* trun_read_small (file.h). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

ssize_t trun_read_small(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t got = 0;
  while (got + 1 < len) {
    ssize_t r = read(fd, buf + got, len - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      buf[got] = '\0';
      return -e;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  return (ssize_t)got;
}
