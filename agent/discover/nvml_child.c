/* The short-lived NVML child and its line pipe (agent/discover/nvml_child.h). */
#include "nvml_child.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"

/* The child's start: it dies with the agent, has the default signal dispositions (the agent's handlers,
 * libuv's signal pipe, are not its own), nothing blocked, and no descriptor but the pipe on fd 3. */
static void child_prologue(int out) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) _exit(0);
  static const int sigs[] = {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) signal(sigs[i], SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (dup2(out, 3) < 0) _exit(1);
  trun_closefrom(4);
}

int trun__nvml_child_start(trun__nvml_child *c, void (*body)(void *arg), void *arg) {
  memset(c, 0, sizeof(*c));
  c->fd = -1;
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    child_prologue(p[1]);
    body(arg);
    _exit(0);
  }
  int saved = errno;
  close(p[1]);
  if (pid < 0) {
    close(p[0]);
    errno = saved;
    return -1;
  }
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  c->pid = pid;
  c->fd = p[0];
  return 0;
}

int trun__nvml_child_read(trun__nvml_child *c, const char *what, void (*on_line)(void *arg, char *line),
                          void *arg) {
  while (!c->ended) {
    ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break; /* EAGAIN: nothing more now */
    if (r == 0) {
      snprintf(c->err, sizeof(c->err), "%s (pid %d) exited", what, (int)c->pid);
      c->ended = 1;
      break;
    }
    c->len += (size_t)r;
    c->buf[c->len] = '\0';
    char *start = c->buf, *nl;
    while (!c->ended && (nl = strchr(start, '\n')) != NULL) {
      *nl = '\0';
      if (start[0] == 'E') {
        snprintf(c->err, sizeof(c->err), "%s", start[1] ? start + 2 : what);
        c->ended = 1;
      } else {
        on_line(arg, start);
      }
      start = nl + 1;
    }
    c->len -= (size_t)(start - c->buf);
    memmove(c->buf, start, c->len);
    if (c->len == sizeof(c->buf) - 1) c->len = 0; /* a line that long is not ours: drop it */
  }
  return c->ended ? -1 : 0;
}

void trun__nvml_child_stop(trun__nvml_child *c) {
  if (c->fd < 0) return;
  kill(c->pid, SIGKILL);
  /* The agent's SIGCHLD handler may reap it first: ECHILD is fine. */
  while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  close(c->fd);
  c->fd = -1;
}

void *trun__nvml_child_dlopen(const char **lib) {
  const char *name = getenv("TRUN_NVML_LIBRARY");
  if (!name || !*name) name = "libnvidia-ml.so.1";
  *lib = name;
  void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) dprintf(3, "E cannot load NVML %s: %s\n", name, dlerror());
  return dl;
}
