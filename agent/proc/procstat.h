/* One line of /proc/PID/stat, read for the guard (watchdog.c: a worker's session and start time) and for the
 * look for the workers' strays (strays.c: its state, parent and session). Part of proc (proc.h). */
#ifndef TRUN_PROCSTAT_H
#define TRUN_PROCSTAT_H

#include <sys/types.h>

typedef struct trun__proc_stat {
  char state;               /* R, S, D, Z, ... */
  pid_t ppid, pgrp, sid;    /* parent, process group, session */
  unsigned long long start; /* start time, in clock ticks since boot */
} trun__proc_stat;

/* Reads root/pid/stat (root: "/proc", or a test's copy). 0, or -1 when the process is gone or the line is
 * not understood. */
int trun__proc_stat_read(const char *root, const char *pid, trun__proc_stat *out);

#endif
