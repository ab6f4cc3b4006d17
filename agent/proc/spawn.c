/* trun_spawn (spawn.h): fork + exec of one worker (or pool process, preflight, --hostfile rsh) without a
 * shell. */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent/discover/discover.h"
#include "base/base.h"

/* Child side failure: send the step and errno to the parent, then exit 127 (the shell's convention). */
static void child_fail(int fd, uint8_t step, int err) {
  unsigned char msg[5] = {step, (unsigned char)err, (unsigned char)(err >> 8), (unsigned char)(err >> 16),
                          (unsigned char)(err >> 24)};
  ssize_t rc = write(fd, msg, sizeof(msg));
  (void)rc;
  _exit(127);
}

enum {
  STEP_SETSID = 1,
  STEP_PDEATHSIG,
  STEP_STDIN,
  STEP_STDOUT,
  STEP_STDERR,
  STEP_SIGNALS,
  STEP_AFFINITY,
  STEP_RLIMIT,
  STEP_INHERIT,
  STEP_EXEC
};

static const char *step_name(int step) {
  switch (step) {
    case STEP_SETSID: return "setsid";
    case STEP_PDEATHSIG: return "prctl(PR_SET_PDEATHSIG)";
    case STEP_STDIN: return "open /dev/null as stdin";
    case STEP_STDOUT: return "dup2 stdout";
    case STEP_STDERR: return "dup2 stderr";
    case STEP_SIGNALS: return "reset signals";
    case STEP_AFFINITY: return "sched_setaffinity (--numa-binding)";
    case STEP_RLIMIT: return "setrlimit(RLIMIT_NOFILE) back to the limit trun was started with";
    case STEP_INHERIT: return "fcntl(F_SETFD) on the fd the child keeps";
    case STEP_EXEC: return "exec";
    default: return "?";
  }
}

/* PATH search in the parent (after fork only async-signal-safe calls are allowed), over the child's PATH
 * like Python's subprocess. Returns 0 with path filled, or -ENOENT / -EACCES. */
static int resolve(const char *file, char *const *envp, char *path, size_t len) {
  if (strchr(file, '/')) {
    if (strlen(file) >= len) return -ENAMETOOLONG;
    strcpy(path, file);
    return 0;
  }
  const char *dirs = NULL;
  for (char *const *e = envp; e && *e; e++)
    if (strncmp(*e, "PATH=", 5) == 0) dirs = *e + 5;
  if (dirs == NULL) dirs = "/usr/local/bin:/usr/bin:/bin";
  int err = -ENOENT;
  while (*dirs) {
    const char *end = strchr(dirs, ':');
    size_t n = end ? (size_t)(end - dirs) : strlen(dirs);
    if (n + 1 + strlen(file) + 1 <= len) {
      if (n)
        memcpy(path, dirs, n);
      else
        path[n++] = '.';
      path[n] = '/';
      strcpy(path + n + 1, file);
      if (access(path, X_OK) == 0) return 0;
      if (errno == EACCES) err = -EACCES;
    }
    dirs = end ? end + 1 : dirs + strlen(dirs);
  }
  return err;
}

static void child_run(const trun_spawn_req *req, const char *path, pid_t agent, int errfd,
                      const unsigned long *cpus) {
  if (setsid() < 0) child_fail(errfd, STEP_SETSID, errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) child_fail(errfd, STEP_PDEATHSIG, errno);
  if (getppid() != agent) _exit(1); /* the agent died before the request took effect */
  int in = req->stdin_fd > 0 ? req->stdin_fd : open("/dev/null", O_RDONLY);
  if (in < 0) child_fail(errfd, STEP_STDIN, errno);
  if (in != 0) {
    if (dup2(in, 0) < 0) child_fail(errfd, STEP_STDIN, errno);
    if (in > 2) close(in);
  }
  if (req->stdout_fd >= 0 && dup2(req->stdout_fd, 1) < 0) child_fail(errfd, STEP_STDOUT, errno);
  if (req->stderr_fd >= 0 && dup2(req->stderr_fd, 2) < 0) child_fail(errfd, STEP_STDERR, errno);
  for (size_t i = 0; i < req->nclose_fds; i++)
    if (req->close_fds[i] > 2) close(req->close_fds[i]);
  if (req->stdout_fd > 2) close(req->stdout_fd);
  if (req->stderr_fd > 2 && req->stderr_fd != req->stdout_fd) close(req->stderr_fd);
  /* Nothing else the agent holds or inherited reaches the child (torchrun's Popen closes them too): only
   * 0-2, req->inherit_fd, and the error pipe (close-on-exec) until the exec. */
  int lo = errfd, hi = req->inherit_fd > 2 && req->inherit_fd != errfd ? req->inherit_fd : errfd;
  if (lo > hi) lo = hi, hi = errfd;
  trun_close_range(3, lo - 1);
  trun_close_range(lo + 1, hi - 1);
  trun_closefrom(hi + 1);
  /* The agent handles signals through libuv; workers start with the defaults and nothing blocked. */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) child_fail(errfd, STEP_SIGNALS, errno);
  if (cpus &&
      sched_setaffinity(0, TRUN_CPU_LONGS * sizeof(unsigned long), (const cpu_set_t *)(const void *)cpus) < 0)
    child_fail(errfd, STEP_AFFINITY, errno);
  if (req->inherit_fd > 2 && fcntl(req->inherit_fd, F_SETFD, 0) < 0) child_fail(errfd, STEP_INHERIT, errno);
  if (req->nofile && setrlimit(RLIMIT_NOFILE, req->nofile) < 0) child_fail(errfd, STEP_RLIMIT, errno);
  execve(path, req->argv, req->envp);
  child_fail(errfd, STEP_EXEC, errno);
}

int trun_spawn(const trun_spawn_req *req, pid_t *pid, const char **what) {
  char path[4096];
  int rc = resolve(req->argv[0], req->envp, path, sizeof(path));
  if (rc < 0) {
    *what = "find the program in PATH";
    return rc;
  }
  unsigned long mask[TRUN_CPU_LONGS];
  if (req->cpus && (trun_cpulist_to_mask(req->cpus, mask, TRUN_CPU_LONGS) < 0 ||
                    trun_mask_count(mask, TRUN_CPU_LONGS) == 0)) {
    *what = "parse the CPU list for --numa-binding";
    return -EINVAL;
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) {
    *what = "pipe2";
    return -errno;
  }
  pid_t agent = getpid();
  pid_t child = fork();
  if (child < 0) {
    int e = errno;
    close(p[0]);
    close(p[1]);
    *what = "fork";
    return -e;
  }
  if (child == 0) {
    close(p[0]);
    child_run(req, path, agent, p[1], req->cpus ? mask : NULL);
  }
  close(p[1]);
  unsigned char msg[5];
  ssize_t n;
  do n = read(p[0], msg, sizeof(msg));
  while (n < 0 && errno == EINTR);
  close(p[0]);
  if (n == (ssize_t)sizeof(msg)) {
    int err = msg[1] | msg[2] << 8 | msg[3] << 16 | msg[4] << 24;
    *what = step_name(msg[0]);
    /* The child has exited 127; the caller's reaper collects it. */
    *pid = child;
    return -err;
  }
  *pid = child;
  return 0;
}
