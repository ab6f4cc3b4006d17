/* Was a worker killed for memory? Its memory cgroup's OOM-kill counter (cgroup v2 memory.events, v1
 * memory.oom_control; the counter counts kills of this cgroup's processes, whichever limit was hit) read
 * when it starts and after it dies, and the kernel log's record of the kill (/dev/kmsg, where readable). */
#ifndef TRUN_MEMCG_H
#define TRUN_MEMCG_H

#include <limits.h>
#include <sys/types.h>

typedef struct {
  char dir[PATH_MAX]; /* the cgroup's directory, e.g. /sys/fs/cgroup/memory/job or /sys/fs/cgroup/job */
  int v2;             /* 1: cgroup v2 (memory.events, memory.max); 0: v1 (memory.oom_control) */
} trun_memcg;

/* The memory cgroup of process pid (0: this process), from root/proc/<pid>/cgroup and
 * root/proc/<pid>/mountinfo (root: "" on a real system, a fixture tree in tests). 0, -ENOENT when the
 * process is in no memory cgroup with an OOM-kill counter, or another -errno. */
int trun_memcg_of(const char *root, pid_t pid, trun_memcg *m);
/* The cgroup's oom_kill counter in *n. 0 or -errno (-EBADMSG: no such line). */
int trun_memcg_oom_kills(const trun_memcg *m, long long *n);
/* The cgroup's memory limit in bytes, -1 when it has none (or it cannot be read). */
long long trun_memcg_limit(const trun_memcg *m);
/* The kernel log's record of the OOM kill of pid at or after since_us (CLOCK_MONOTONIC microseconds, the
 * kernel log's clock) read from kmsg (a /dev/kmsg path): 1 with the record's text in out[len], 0 when there
 * is none, -errno when the log cannot be read (EPERM without CAP_SYSLOG). */
int trun_kmsg_oom_kill(const char *kmsg, pid_t pid, unsigned long long since_us, char *out, size_t len);

#endif
