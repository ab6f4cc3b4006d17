#include "watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"

#define MAX_SESSIONS 65536

static int in_set(const pid_t *set, size_t n, pid_t v) {
  for (size_t i = 0; i < n; i++)
    if (set[i] == v) return 1;
  return 0;
}

/* SIGKILL to every process whose session is in set (field 6 of /proc/PID/stat). */
static void kill_sessions(const pid_t *set, size_t n) {
  DIR *d = opendir("/proc");
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], buf[512];
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    int pid = atoi(e->d_name), ppid, pgrp, session;
    char state;
    if (p && sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) == 4 && in_set(set, n, session) &&
        pid != getpid())
      kill(pid, SIGKILL);
  }
  closedir(d);
}

static void guard(int fd) {
  pid_t *set = malloc(MAX_SESSIONS * sizeof(pid_t));
  size_t n = 0;
  int32_t v;
  ssize_t r;
  while ((r = read(fd, &v, sizeof(v))) != 0) {
    if (r < 0 && errno == EINTR) continue;
    if (r != (ssize_t)sizeof(v)) break;
    if (set && n < MAX_SESSIONS) set[n++] = v;
  }
  if (set) {
    for (size_t i = 0; i < n; i++) kill(-set[i], SIGKILL);
    kill_sessions(set, n);
  }
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
    /* Every inherited descriptor but the pipe, whatever the open-file limit (one close_range call). */
    if (p[0] != 3 && dup2(p[0], 3) < 0) _exit(1);
    trun_closefrom(4);
    guard(3);
  }
  close(p[0]);
  w->pid = pid;
  w->fd = p[1];
  return 0;
}

void trun_watchdog_add(trun_watchdog *w, pid_t sid) {
  if (w->fd < 0) return;
  int32_t v = sid;
  ssize_t r;
  do r = write(w->fd, &v, sizeof(v));
  while (r < 0 && errno == EINTR);
}

void trun_watchdog_stop(trun_watchdog *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
}
