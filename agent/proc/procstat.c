/* One line of /proc/PID/stat (procstat.h). */
#include "procstat.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int trun__proc_stat_read(const char *root, const char *pid, trun__proc_stat *out) {
  char path[512], buf[1024];
  snprintf(path, sizeof(path), "%s/%s/stat", root, pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t len = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (len <= 0) return -1;
  buf[len] = '\0';
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  int ppid, pgrp, sid;
  /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
   * priority nice num_threads itrealvalue starttime */
  if (p == NULL ||
      sscanf(p + 1, " %c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &out->state, &ppid, &pgrp, &sid, &out->start) != 5)
    return -1;
  out->ppid = ppid;
  out->pgrp = pgrp;
  out->sid = sid;
  return 0;
}
