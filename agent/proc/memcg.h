/* Was a worker killed for memory? The kernel log's record of the kill (/dev/kmsg, where readable; only the
 * kernel's own records), and its memory cgroup's OOM-kill counter (cgroup v2 memory.events, v1
 * memory.oom_control; it counts kills of any of the cgroup's processes, whichever limit was hit: a hint,
 * not evidence about one process) read when it starts and after it dies. */
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
/* A kernel record of an OOM kill: when (the kernel log's clock: CLOCK_MONOTONIC microseconds), the pid it
 * names (the initial PID namespace's pid, not the one a process inside a PID namespace sees) and its text. */
typedef struct {
  unsigned long long us;
  pid_t pid;
  char text[512];
} trun_kmsg_oom;
/* The kernel's own OOM-kill records ("Killed process <pid> (<comm>) ...") at or after since_us read from
 * kmsg (a /dev/kmsg path), the latest max of them in out: their count, or -errno when the log cannot be
 * read (EPERM without CAP_SYSLOG). Only records of facility 0 (kern) count: anything a process writes to
 * /dev/kmsg gets facility 1 (user) or higher, whatever it claims. */
int trun_kmsg_oom_kills(const char *kmsg, unsigned long long since_us, trun_kmsg_oom *out, size_t max);
/* The kernel's record of the OOM kill of pid (as the kernel names it) at or after since_us: 1 with the
 * record's text in out[len], 0 when there is none, -errno when the log cannot be read. */
int trun_kmsg_oom_kill(const char *kmsg, pid_t pid, unsigned long long since_us, char *out, size_t len);
/* 1 when root/proc/self/ns/pid is the initial PID namespace (the kernel log's pids are the ones this
 * process sees), 0 inside a PID namespace (every container) or when unknown. */
int trun_pidns_initial(const char *root);

#endif
