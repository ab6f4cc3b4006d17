#include "warm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "portheld.h"
#include "round_vars.h"
#include "spawn.h"
#include "strv.h"

/* Replacements of a slot's pool process in a row (killed from outside) before the slot gives up. */
#define MAX_REPLACED 3

typedef struct {
  pid_t pid;      /* the pool process, 0 none */
  int fd;         /* the agent's end of its control socket, -1 none */
  int ready;      /* it said "ready" */
  int disabled;   /* its workers start cold: why says why */
  int replaced;   /* replacements since the last handover */
  char *python;   /* the interpreter it runs */
  char *cpus;     /* its CPU pinning, NULL none */
  char **tail;    /* the worker's argv after "<python> -u": its sys.argv and sys.path[0] for the imports */
  char **env;     /* the environment it was started with */
  char cuda[320]; /* the bootstrap's CUDA argument: "-" none, or "<ordinal>,<driver library>" */
  /* --warm-start-nccl: NCCL is set up in the pool process too, its RAS serving on one of two loopback ports
   * held for the slot (portheld.h): the pool process takes the one its slot's live worker does not use. */
  int nccl;
  int ras_fd[2];        /* the held sockets, -1 not yet */
  unsigned ras_port[2]; /* their ports */
  int ras_spawned;      /* the one the pool process was given */
  int ras_live;         /* the one the slot's current worker serves on, -1 none */
  int ras_listens;      /* the pool process said its RAS listens on the port it was given */
  char why[256];        /* why the slot is disabled */
} slot_t;

struct trun_warm {
  int n;
  slot_t *s;
  char *modules;
  const struct rlimit *nofile;
  trun_watchdog *guard;
};

trun_warm *trun_warm_new(int nslots, const char *modules, const struct rlimit *nofile, trun_watchdog *guard) {
  trun_warm *p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  p->s = calloc((size_t)(nslots > 0 ? nslots : 1), sizeof(slot_t));
  p->modules = strdup(modules ? modules : "");
  if (p->s == NULL || p->modules == NULL) {
    free(p->s);
    free(p->modules);
    free(p);
    return NULL;
  }
  p->n = nslots;
  p->nofile = nofile;
  p->guard = guard;
  for (int i = 0; i < nslots; i++) {
    p->s[i].fd = p->s[i].ras_fd[0] = p->s[i].ras_fd[1] = p->s[i].ras_live = -1;
    snprintf(p->s[i].cuda, sizeof(p->s[i].cuda), "-");
  }
  return p;
}

static void slot_drop(slot_t *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  s->pid = 0;
  s->ready = 0;
  s->ras_listens = 0;
}

void trun_warm_free(trun_warm *p) {
  if (p == NULL) return;
  for (int i = 0; i < p->n; i++) {
    slot_t *s = &p->s[i];
    if (s->pid > 0) {
      if (kill(-s->pid, SIGKILL) < 0) kill(s->pid, SIGKILL);
      while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
      }
    }
    slot_drop(s);
    for (int k = 0; k < 2; k++)
      if (s->ras_fd[k] >= 0) close(s->ras_fd[k]);
    free(s->python);
    trun_strv_free(s->tail);
    free(s->cpus);
    trun_strv_free(s->env);
  }
  free(p->s);
  free(p->modules);
  free(p);
}

static void disable(slot_t *s, int slot, const char *fmt, const char *detail) {
  s->disabled = 1;
  snprintf(s->why, sizeof(s->why), fmt, detail);
  trun_warn("--warm-start: local rank %d: %s; its workers start cold", slot, s->why);
}

/* The bootstrap's CUDA argument for slot's next pool process: s->cuda, with --warm-start-nccl
 * "<ordinal>+nccl=<port>,<driver library>", the port one of the slot's two held ones that its live worker
 * does not serve on. Without a held port (no loopback) NCCL is not set up there (said at debug level). */
static void cuda_arg(slot_t *s, int slot, char *out, size_t len) {
  size_t head = strcspn(s->cuda, ",");
  snprintf(out, len, "%s", s->cuda);
  if (!s->nccl || s->cuda[head] != ',') return;
  int k = s->ras_live == 0 ? 1 : 0;
  if (s->ras_fd[k] < 0) {
    const char *step = "";
    int fd = trun_port_hold(&s->ras_port[k], &step);
    if (fd < 0) {
      trun_debug(
          "--warm-start-nccl: local rank %d: no loopback port for its NCCL RAS (%s: %s); NCCL is not "
          "set up in its pool process",
          slot, step, strerror(-fd));
      return;
    }
    s->ras_fd[k] = fd;
  }
  s->ras_spawned = k;
  snprintf(out, len, "%.*s+nccl=%u%s", (int)head, s->cuda, s->ras_port[k], s->cuda + head);
}

static int spawn_slot(trun_warm *p, int slot) {
  slot_t *s = &p->s[slot];
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
    disable(s, slot, "socketpair for the pool process failed: %s", strerror(errno));
    return -1;
  }
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0) {
    close(sv[0]);
    close(sv[1]);
    disable(s, slot, "open /dev/null for the pool process failed: %s", strerror(errno));
    return -1;
  }
  char fd_s[16];
  snprintf(fd_s, sizeof(fd_s), "%d", sv[1]);
  size_t ntail = 0;
  while (s->tail[ntail]) ntail++;
  char **argv = calloc(ntail + 9, sizeof(char *));
  if (argv == NULL) {
    close(sv[0]);
    close(sv[1]);
    close(null);
    disable(s, slot, "%s", "out of memory");
    return -1;
  }
  char cuda[sizeof(s->cuda) + 32];
  cuda_arg(s, slot, cuda, sizeof(cuda));
  char *head[] = {s->python, "-u", "-c", (char *)trun__warm_boot, "trun-warm-pool", fd_s, p->modules, cuda};
  memcpy(argv, head, sizeof(head));
  memcpy(argv + 8, s->tail, ntail * sizeof(char *));
  trun_spawn_req req = {.argv = argv,
                        .envp = s->env,
                        .stdout_fd = null,
                        .stderr_fd = null,
                        .inherit_fd = sv[1],
                        .cpus = s->cpus,
                        .nofile = p->nofile};
  const char *what = "";
  pid_t pid = 0;
  int rc = trun_spawn(&req, &pid, &what);
  free(argv);
  close(null);
  close(sv[1]);
  if (rc < 0) {
    close(sv[0]);
    if (pid > 0) /* the exec failed: the child exits 127 at once */
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
      }
    char detail[200];
    snprintf(detail, sizeof(detail), "%s: %s failed: %s", s->python, what, strerror(-rc));
    disable(s, slot, "cannot start the pool process (%s)", detail);
    return -1;
  }
  s->pid = pid;
  s->fd = sv[0];
  s->ready = 0;
  if (p->guard) trun_watchdog_add(p->guard, pid);
  trun_debug("--warm-start: local rank %d: pool process %d importing %s", slot, (int)pid, p->modules);
  return 0;
}

int trun_warm_fill(trun_warm *p, int slot, const char *python, char *const *tail, const char *cpus,
                   char *const *envp) {
  if (p == NULL || slot < 0 || slot >= p->n) return 0;
  slot_t *s = &p->s[slot];
  if (s->disabled || s->pid > 0) return 0;
  char **env = trun_strv_dup(envp);
  char *py = strdup(python);
  char **mn = tail && tail[0] ? trun_strv_dup(tail) : NULL;
  char *c = cpus && cpus[0] ? strdup(cpus) : NULL;
  if (env == NULL || py == NULL || mn == NULL || (cpus && cpus[0] && c == NULL)) {
    trun_strv_free(env);
    free(py);
    trun_strv_free(mn);
    free(c);
    disable(s, slot, "%s", "out of memory");
    return -1;
  }
  trun_strv_free(s->env);
  free(s->python);
  trun_strv_free(s->tail);
  free(s->cpus);
  s->env = env;
  s->python = py;
  s->tail = mn;
  s->cpus = c;
  return spawn_slot(p, slot);
}

void trun_warm_set_cuda(trun_warm *p, int slot, int ordinal, int nccl, const char *lib) {
  if (p == NULL || slot < 0 || slot >= p->n) return;
  p->s[slot].nccl = ordinal >= 0 && nccl;
  if (ordinal < 0)
    snprintf(p->s[slot].cuda, sizeof(p->s[slot].cuda), "-");
  else
    snprintf(p->s[slot].cuda, sizeof(p->s[slot].cuda), "%d,%s", ordinal,
             lib && lib[0] ? lib : "libcuda.so.1");
}

void trun_warm_ras(const trun_warm *p, int slot, char *out, size_t len) {
  const slot_t *s = p && slot >= 0 && slot < p->n ? &p->s[slot] : NULL;
  if (s && s->ras_live >= 0)
    snprintf(out, len, "127.0.0.1:%u", s->ras_port[s->ras_live]);
  else if (len)
    out[0] = '\0';
}

int trun_warm_round_var(const char *name) { return (trun_round_var_flags(name) & TRUN_RV_WARM) != 0; }

/* The value of the variable of entry e ("NAME=value") in v, or NULL. */
static const char *lookup(char *const *v, const char *e) {
  size_t n = strcspn(e, "=");
  for (; v && *v; v++)
    if (strncmp(*v, e, n) == 0 && (*v)[n] == '=') return *v + n + 1;
  return NULL;
}

/* The first variable (outside the round's) that differs between a and b, said in why. */
static int env_differs(char *const *a, char *const *b, const char *b_name, char *why, size_t len) {
  for (char *const *e = a; e && *e; e++) {
    if (trun_warm_round_var(*e) || strchr(*e, '=') == NULL) continue;
    const char *v = lookup(b, *e);
    if (v == NULL || strcmp(v, strchr(*e, '=') + 1) != 0) {
      snprintf(why, len, "%.*s %s", (int)strcspn(*e, "="), *e,
               v == NULL ? b_name : "differs from the pool's environment (read at import time)");
      return 1;
    }
  }
  return 0;
}

int trun_warm_check(const trun_warm *p, int slot, char *const *argv, char *const *envp, char *why,
                    size_t len) {
  if (p == NULL || slot < 0 || slot >= p->n) {
    snprintf(why, len, "no warm pool");
    return 1;
  }
  const slot_t *s = &p->s[slot];
  if (s->disabled) {
    snprintf(why, len, "%s", s->why);
    return 1;
  }
  if (s->python == NULL) {
    snprintf(why, len, "no pool process was started for it");
    return 1;
  }
  size_t argc = 0;
  while (argv[argc]) argc++;
  if (argc < 3 || strcmp(argv[0], s->python) != 0 || strcmp(argv[1], "-u") != 0) {
    snprintf(why, len, "its command is not '%s -u ...' (--no-python, or another interpreter)", s->python);
    return 1;
  }
  if (strcmp(argv[2], "-c") == 0 || strcmp(argv[2], "-m") == 0) {
    if (argc < 4) {
      snprintf(why, len, "'%s' has no argument", argv[2]);
      return 1;
    }
  } else {
    struct stat st;
    size_t n = strlen(argv[2]);
    if (argv[2][0] == '-' || stat(argv[2], &st) < 0 || !S_ISREG(st.st_mode) ||
        (n > 4 && (strcmp(argv[2] + n - 4, ".pyc") == 0 || strcmp(argv[2] + n - 4, ".zip") == 0))) {
      snprintf(why, len, "the script %s is not a Python source file", argv[2]);
      return 1;
    }
  }
  if (strcmp(argv[2], s->tail[0]) != 0) {
    snprintf(why, len, "it runs %s, the pool process was started for %s", argv[2], s->tail[0]);
    return 1;
  }
  size_t k = 0;
  while (argv[2 + k] && s->tail[k] && strcmp(argv[2 + k], s->tail[k]) == 0) k++;
  if (argv[2 + k] || s->tail[k]) {
    snprintf(why, len, "its arguments differ from the pool process's (argument %zu)", k + 2);
    return 1;
  }
  if (env_differs(envp, s->env, "is not in the pool's environment (read at import time)", why, len) ||
      env_differs(s->env, envp, "is unset for the worker but was set for the pool", why, len))
    return 1;
  return 0;
}

/* Reads what the pool process said, without waiting: "ready" sets ready; "error <why>" disables the slot.
 * 1 when its end of the socket is closed (it exited). */
static int read_news(slot_t *s, int slot) {
  char buf[200];
  ssize_t n = recv(s->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
  if (n < 0) return 0;
  if (n == 0) return 1;
  buf[n] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
  if (strncmp(buf, "ready", 5) == 0) {
    s->ready = 1;
    /* with --warm-start-nccl, "ras=127.0.0.1:<port> " first: its NCCL RAS listens on the port it was given
     * (anything else is not taken: the agent connects there) */
    const char *note = buf[5] == ' ' ? buf + 6 : "";
    if (strncmp(note, "ras=", 4) == 0) {
      size_t len = strcspn(note + 4, " ");
      char want[32];
      snprintf(want, sizeof(want), "127.0.0.1:%u", s->ras_port[s->ras_spawned]);
      if (s->nccl && s->ras_fd[s->ras_spawned] >= 0 && len == strlen(want) &&
          strncmp(note + 4, want, len) == 0)
        s->ras_listens = 1;
      note += 4 + len + (note[4 + len] == ' ');
    }
    /* with --warm-start-cuda, what became of the context (made, or why not), and NCCL's set-up */
    trun_debug("--warm-start: local rank %d: pool process %d ready%s%s", slot, (int)s->pid,
               note[0] ? ": " : "", note);
  } else if (strncmp(buf, "error ", 6) == 0 && !s->disabled)
    disable(s, slot, "the pool process could not get ready: %s", buf + 6);
  return 0;
}

/* Sends the worker without waiting on the pool process: the payload - argc\0argv...\0changes... - goes into a
 * memfd, and the socket carries only "<length>\n" with the worker's stdout, stderr and that memfd as
 * SCM_RIGHTS: a few bytes on a socket the agent never wrote to, so the send completes at once however large
 * the argv and environment are (the loop never waits on a pool process). The changes turn the pool's
 * environment (pool_env) into the worker's (envp): "NAME=value" to set, "NAME" to unset; the rest stays as
 * the pool process has it, with whatever an interpreter wrapper in PYTHON_EXEC did to it, as it does to a
 * cold worker's. (No cwd: the pool process started in the agent's, which never changes.) 0, or -errno with
 * what failed in *what; *sent: whether anything reached the pool process. */
static int send_worker(int fd, char *const *argv, char *const *envp, char *const *pool_env, int out_fd,
                       int err_fd, const char **what, int *sent) {
  *sent = 0;
  size_t argc = 0, len = 32;
  for (; argv[argc]; argc++) len += strlen(argv[argc]) + 1;
  for (char *const *e = envp; e && *e; e++) len += strlen(*e) + 1;
  for (char *const *e = pool_env; e && *e; e++) len += strcspn(*e, "=") + 1;
  char *msg = malloc(len);
  *what = "malloc";
  if (msg == NULL) return -ENOMEM;
  size_t o = (size_t)sprintf(msg, "%zu", argc) + 1;
  for (size_t i = 0; i < argc; i++) o += (size_t)sprintf(msg + o, "%s", argv[i]) + 1;
  for (char *const *e = envp; e && *e; e++) {
    const char *was = lookup(pool_env, *e);
    if (strchr(*e, '=') && (was == NULL || strcmp(was, strchr(*e, '=') + 1) != 0))
      o += (size_t)sprintf(msg + o, "%s", *e) + 1;
  }
  for (char *const *e = pool_env; e && *e; e++)
    if (lookup(envp, *e) == NULL) o += (size_t)sprintf(msg + o, "%.*s", (int)strcspn(*e, "="), *e) + 1;
  size_t payload = o - 1; /* fields joined by NUL: no NUL after the last */
  *what = "memfd_create";
  int mfd = memfd_create("trun-warm-handover", MFD_CLOEXEC);
  int rc = mfd < 0 ? -errno : 0;
  for (size_t done = 0; rc == 0 && done < payload;) {
    *what = "write to the handover memfd";
    ssize_t n = write(mfd, msg + done, payload - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      rc = n < 0 ? -errno : -EIO;
    else
      done += (size_t)n;
  }
  free(msg);
  if (rc < 0) {
    if (mfd >= 0) close(mfd);
    return rc;
  }
  char hdr[32];
  int head = snprintf(hdr, sizeof(hdr), "%zu\n", payload);
  int fds[3] = {out_fd >= 0 ? out_fd : 1, err_fd >= 0 ? err_fd : 2, mfd};
  union {
    char buf[CMSG_SPACE(sizeof(fds))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof(u));
  struct iovec iov = {.iov_base = hdr, .iov_len = (size_t)head};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(fds));
  memcpy(CMSG_DATA(c), fds, sizeof(fds));
  *what = "sendmsg";
  ssize_t n;
  do n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  int err = n < 0 ? errno : 0;
  close(mfd);             /* the pool process holds its own copy now */
  if (n < 0) return -err; /* EAGAIN too: never wait on the pool process */
  *sent = 1;
  return n == head ? 0 : -EMSGSIZE; /* part of a few bytes: the process cannot be used */
}

int trun_warm_take(trun_warm *p, int slot, char *const *argv, char *const *envp, int out_fd, int err_fd,
                   pid_t *pid, char *why, size_t len) {
  if (p != NULL && slot >= 0 && slot < p->n) p->s[slot].ras_live = -1; /* the slot's last worker is gone */
  if (trun_warm_check(p, slot, argv, envp, why, len)) return 1;
  slot_t *s = &p->s[slot];
  if (s->pid <= 0) {
    snprintf(why, len, "its pool process is not there (it died and is being replaced)");
    return 1;
  }
  if (read_news(s, slot)) {
    snprintf(why, len, "its pool process %d has exited", (int)s->pid);
    return 1;
  }
  if (s->disabled) {
    snprintf(why, len, "%s", s->why);
    return 1;
  }
  if (!s->ready) { /* only a process that has imported its modules becomes a worker */
    snprintf(why, len, "its pool process %d is still importing %s", (int)s->pid, p->modules);
    return 1;
  }
  const char *what = "";
  int sent = 0;
  int rc = send_worker(s->fd, argv, envp, s->env, out_fd, err_fd, &what, &sent);
  if (rc < 0) {
    snprintf(why, len, "handing the worker to pool process %d failed: %s: %s", (int)s->pid, what,
             strerror(-rc));
    /* Part of the handover may have gone: that process cannot be used; it is reaped and replaced. */
    if (sent && kill(-s->pid, SIGKILL) < 0) kill(s->pid, SIGKILL);
    return 1;
  }
  *pid = s->pid;
  if (s->ras_listens) s->ras_live = s->ras_spawned; /* its NCCL RAS serves there */
  slot_drop(s); /* the process is the worker now: the agent reaps it as one */
  s->replaced = 0;
  return 0;
}

int trun_warm_reaped(trun_warm *p, pid_t pid, int status) {
  if (p == NULL || pid <= 0) return 0;
  for (int i = 0; i < p->n; i++) {
    slot_t *s = &p->s[i];
    if (s->pid != pid) continue;
    read_news(s, i);
    int ready = s->ready;
    slot_drop(s);
    if (s->disabled) return 1;
    char st[64];
    if (WIFSIGNALED(status))
      snprintf(st, sizeof(st), "was killed by signal %d", WTERMSIG(status));
    else
      snprintf(st, sizeof(st), "exited with code %d", WEXITSTATUS(status));
    if (!ready && !WIFSIGNALED(status)) {
      disable(s, i, "its pool process %s before it was ready", st);
      return 1;
    }
    if (++s->replaced > MAX_REPLACED) {
      disable(s, i, "its pool process died too often (last: %s)", st);
      return 1;
    }
    trun_warn("--warm-start: local rank %d: pool process %d %s before use; starting another", i, (int)pid,
              st);
    spawn_slot(p, i);
    return 1;
  }
  return 0;
}

int trun_warm_importing(trun_warm *p) {
  int n = 0;
  for (int i = 0; p && i < p->n; i++) {
    slot_t *s = &p->s[i];
    if (s->pid <= 0 || s->disabled || s->ready) continue;
    if (read_news(s, i) == 0 && !s->ready && !s->disabled) n++;
  }
  return n;
}

int trun_warm_wait_ready(trun_warm *p, int slot, int timeout_ms, char *why, size_t len) {
  if (p == NULL || slot < 0 || slot >= p->n || p->s[slot].pid <= 0) {
    snprintf(why, len, "%s",
             p && slot >= 0 && slot < p->n && p->s[slot].disabled ? p->s[slot].why : "no pool process");
    return -1;
  }
  slot_t *s = &p->s[slot];
  struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
  int rc;
  do rc = poll(&pfd, 1, timeout_ms);
  while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    snprintf(why, len, "poll on the pool process's socket: %s", strerror(errno));
    return -1;
  }
  if (rc == 0) {
    snprintf(why, len, "the pool process was not ready in %d s", timeout_ms / 1000);
    return -1;
  }
  int gone = read_news(s, slot);
  if (s->ready) return 0;
  snprintf(why, len, "%s",
           s->disabled ? s->why
           : gone      ? "the pool process exited"
                       : "the pool process said nothing");
  return -1;
}

long trun_warm_rss_kb(const trun_warm *p, int slot) {
  if (p == NULL || slot < 0 || slot >= p->n || p->s[slot].pid <= 0) return -1;
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)p->s[slot].pid);
  FILE *f = fopen(path, "re");
  if (f == NULL) return -1;
  long kb = -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0) kb = strtol(line + 6, NULL, 10);
  fclose(f);
  return kb;
}

pid_t trun_warm_pid(const trun_warm *p, int slot) {
  return p && slot >= 0 && slot < p->n ? p->s[slot].pid : 0;
}
