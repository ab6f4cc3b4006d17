/* The guard process (watchdog.h): it outlives the agent, kills what is left of the worker sessions and
 * removes the agent's FIFOs when the agent dies. */
#include "watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "procstat.h"

#define MAX_SESSIONS 65536

/* What the agent tells the guard: a worker session started (its leader's start time, in clock ticks since
 * boot as /proc/PID/stat field 22 says it), or its leader was reaped. */
enum { MSG_ADD = 1, MSG_GONE = 2, MSG_FILE = 3 /* start: the length of a path that follows */ };
#define MAX_FILES 8
typedef struct {
  int32_t sid;
  int32_t kind;
  uint64_t start;
} guard_msg;

/* A registered session: its leader's start time, and when the agent reaped it (0: not yet). */
typedef struct {
  pid_t sid;
  uint64_t start, gone_at;
} session;

/* Process pid's session and start time from /proc/PID/stat: 0, or -1 when there is no such process. */
static int proc_stat(const char *pid, pid_t *sid, uint64_t *start) {
  trun__proc_stat st;
  if (trun__proc_stat_read("/proc", pid, &st) != 0) return -1;
  *sid = st.sid;
  *start = st.start;
  return 0;
}

uint64_t trun_watchdog_start_time(pid_t pid) {
  char text[32];
  pid_t sid;
  uint64_t st = 0;
  snprintf(text, sizeof(text), "%d", (int)pid);
  return proc_stat(text, &sid, &st) == 0 ? st : 0;
}

/* Now, in the clock ticks of /proc/PID/stat's start times: CLOCK_BOOTTIME, which counts a suspend as the
 * kernel's start times do (base/clock.h's monotonic clock does not). */
static uint64_t ticks_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) hz = 100;
  return (uint64_t)ts.tv_sec * (uint64_t)hz + (uint64_t)ts.tv_nsec * (uint64_t)hz / 1000000000ull;
}

static session *find(session *set, size_t n, pid_t sid) {
  for (size_t i = n; i-- > 0;)
    if (set[i].sid == sid) return &set[i];
  return NULL;
}

/* Whether the session registered as s is still the worker's: its leader runs (or is a zombie) with the
 * start time it had, or, once reaped, some process of the session was born before that (the session never
 * emptied, so its id cannot have been reused). A leader the agent never reaped was the worker's until the
 * agent died (agent_died): with the agent gone it dies of PDEATHSIG and init may reap it before the guard
 * looks, so a process of the session born before the agent's death is the worker's too. A pid reused by an
 * unrelated process is never ours. */
static int still_ours(const session *s, DIR *proc, uint64_t agent_died) {
  char text[32];
  pid_t sid;
  uint64_t st;
  snprintf(text, sizeof(text), "%d", (int)s->sid);
  if (proc_stat(text, &sid, &st) == 0) return st == s->start && s->start != 0;
  uint64_t until = s->gone_at ? s->gone_at : agent_died;
  rewinddir(proc);
  struct dirent *e;
  while ((e = readdir(proc)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (proc_stat(e->d_name, &sid, &st) == 0 && sid == s->sid && st <= until) return 1;
  }
  return 0;
}

/* SIGKILL to every process whose session is one of ours (field 6 of /proc/PID/stat). */
static void kill_sessions(const session *set, size_t n, uint64_t agent_died) {
  DIR *d = opendir("/proc");
  if (d == NULL) return;
  pid_t *ours = malloc((n ? n : 1) * sizeof(*ours));
  size_t k = 0;
  for (size_t i = 0; ours && i < n; i++)
    if (set[i].sid > 0 && still_ours(&set[i], d, agent_died)) {
      if (set[i].gone_at == 0) kill(-set[i].sid, SIGKILL);
      ours[k++] = set[i].sid;
    }
  rewinddir(d);
  struct dirent *e;
  while (k > 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    pid_t sid;
    uint64_t st;
    int pid = atoi(e->d_name);
    if (pid == getpid() || proc_stat(e->d_name, &sid, &st) < 0) continue;
    for (size_t i = 0; i < k; i++)
      if (ours[i] == sid) {
        kill(pid, SIGKILL);
        break;
      }
  }
  free(ours);
  closedir(d);
}

/* A file the guard removes when the agent is gone: its path, and the device and inode it had when the agent
 * named it (a file made there since by someone else is left alone). */
typedef struct {
  char path[PATH_MAX];
  dev_t dev;
  ino_t ino;
} guarded_file;

/* Reads exactly n bytes: 0, or -1 (EOF or an error). */
static int read_all(int fd, char *p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static void remove_files(const guarded_file *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (lstat(f[i].path, &st) == 0 && st.st_dev == f[i].dev && st.st_ino == f[i].ino) unlink(f[i].path);
  }
}

static void guard(int fd) {
  session *set = malloc(MAX_SESSIONS * sizeof(*set));
  guarded_file files[MAX_FILES];
  size_t n = 0, nfiles = 0;
  guard_msg m;
  ssize_t r;
  while ((r = read(fd, &m, sizeof(m))) != 0) {
    if (r < 0 && errno == EINTR) continue;
    if (r != (ssize_t)sizeof(m)) break;
    if (m.kind == MSG_FILE) {
      char path[PATH_MAX];
      struct stat st;
      if (m.start == 0 || m.start >= sizeof(path) || read_all(fd, path, (size_t)m.start) < 0) break;
      path[m.start] = '\0';
      if (nfiles < MAX_FILES && lstat(path, &st) == 0) {
        snprintf(files[nfiles].path, sizeof(files[nfiles].path), "%s", path);
        files[nfiles].dev = st.st_dev;
        files[nfiles++].ino = st.st_ino;
      }
      continue;
    }
    if (set == NULL) continue;
    session *s = find(set, n, m.sid);
    if (m.kind == MSG_ADD && n < MAX_SESSIONS)
      set[n++] = (session){m.sid, m.start, 0};
    else if (m.kind == MSG_GONE && s)
      s->gone_at = ticks_now();
  }
  if (set) kill_sessions(set, n, ticks_now()); /* the pipe's end: the agent is gone */
  free(set);
  remove_files(files, nfiles);
  _exit(0);
}

int trun_watchdog_start(trun_watchdog *w) {
  int p[2];
  w->pid = 0;
  w->fd = -1;
  if (pipe2(p, O_CLOEXEC) < 0) return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(p[0]);
    close(p[1]);
    return -e;
  }
  if (pid == 0) {
    close(p[1]);
    setsid(); /* out of the terminal's and the agent's process group */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Every inherited descriptor but the pipe, whatever the open-file limit (one close_range call); its
     * stdin, stdout and stderr are /dev/null: the guard says nothing, and a caller that reads trun's output
     * to its end (a pipe, a subprocess capture) sees the end when trun exits, not once the guard is done. */
    if (p[0] != 3 && dup2(p[0], 3) < 0) _exit(1);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; null >= 0 && fd < 3; fd++) dup2(null, fd);
    trun_closefrom(4);
    guard(3);
  }
  close(p[0]);
  w->pid = pid;
  w->fd = p[1];
  return 0;
}

static void send_msg(trun_watchdog *w, pid_t sid, int kind, uint64_t start) {
  if (w->fd < 0) return;
  guard_msg m = {(int32_t)sid, kind, start};
  ssize_t r;
  do r = write(w->fd, &m, sizeof(m));
  while (r < 0 && errno == EINTR);
}

void trun_watchdog_add_at(trun_watchdog *w, pid_t sid, uint64_t start) { send_msg(w, sid, MSG_ADD, start); }

void trun_watchdog_add(trun_watchdog *w, pid_t sid) {
  trun_watchdog_add_at(w, sid, trun_watchdog_start_time(sid));
}

void trun_watchdog_gone(trun_watchdog *w, pid_t sid) { send_msg(w, sid, MSG_GONE, 0); }

void trun_watchdog_remove_on_exit(trun_watchdog *w, const char *path) {
  size_t len = strlen(path);
  if (w->fd < 0 || len == 0 || len >= PATH_MAX) return;
  char buf[sizeof(guard_msg) + PATH_MAX];
  guard_msg m = {0, MSG_FILE, len};
  memcpy(buf, &m, sizeof(m));
  memcpy(buf + sizeof(m), path, len);
  size_t off = 0, total = sizeof(m) + len;
  while (off < total) { /* the agent is the only writer: the message stays whole */
    ssize_t r = write(w->fd, buf + off, total - off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return;
    off += (size_t)r;
  }
}

void trun_watchdog_stop(trun_watchdog *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
}
