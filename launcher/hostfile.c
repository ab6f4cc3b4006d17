/* `trun --hostfile FILE [--rsh CMD]` (launcher/hostfile.h): the hostfile parser, the per-host command line
 * and the launcher loop (one rsh child per host, line-whole prefixed output, signal forwarding). */
#include "hostfile.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "agent/agent.h"
#include "agent/proc/proc.h"
#include "base/base.h"

#define TRUN_HOSTFILE_MAX_BYTES (1 << 20)
/* Static backend: once a host's agent has failed, the job is over; agents still running this long
 * afterwards (e.g. waiting for a host whose rsh never started an agent) are stopped. */
#define TRUN_HOSTFILE_GRACE_MS 60000
/* The first line each host's agent reads on stdin (--watch-stdin, agent/agent_stdin.c): the launcher is
 * there. */
#define TRUN_HOSTFILE_HELLO "trun-watch-stdin 1\n"
/* ssh's own exit code: it could not reach the host, log in, or lost the connection. */
#define TRUN_RSH_UNREACHABLE 255
/* After every child is reaped: how long output still held open by a leftover process is read. */
#define TRUN_HOSTFILE_DRAIN_MS 2000

/* ---- the hostfile ----------------------------------------------------------------------------------- */

void trun_hostfile_free(trun_hostfile *hf) {
  for (size_t i = 0; i < hf->n; i++) free(hf->h[i].host);
  free(hf->h);
  hf->h = NULL;
  hf->n = 0;
}

/* A host name, user@host, IPv4 or IPv6 literal: letters, digits and . _ - : @ % [ ]; not starting with '-'
 * (ssh would take it for an option). */
static int host_ok(const char *s, size_t n) {
  if (n == 0 || n > 255 || s[0] == '-') return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!isalnum(c) && !strchr("._-:@%[]", c)) return 0;
  }
  return 1;
}

static int parse_slots(const char *s, size_t n, int *slots) {
  if (n == 0 || n > 6) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < 1 || v > TRUN_MAX_LOCAL) return -1;
  *slots = v;
  return 0;
}

/* One line without its comment: "host [slots=N]". Returns 0 (host set, or left NULL for a blank line)
 * or -1 with err set. */
static int parse_line(const char *path, int lineno, const char *s, size_t n, trun_host *h, char *err,
                      size_t errlen) {
  const char *tok[3];
  size_t len[3];
  int nt = 0;
  size_t i = 0;
  while (i < n) {
    while (i < n && isspace((unsigned char)s[i])) i++;
    if (i == n) break;
    size_t start = i;
    while (i < n && !isspace((unsigned char)s[i])) i++;
    if (nt == 2) {
      trun_errf(err, errlen, "%s:%d: unexpected '%.*s': a line is 'host' or 'host slots=N'", path, lineno,
                (int)(i - start), s + start);
      return -1;
    }
    tok[nt] = s + start;
    len[nt++] = i - start;
  }
  h->host = NULL;
  h->slots = 0;
  h->line = lineno;
  if (nt == 0) return 0;
  if (!host_ok(tok[0], len[0])) {
    trun_errf(err, errlen,
              "%s:%d: '%.*s' is not a host name (letters, digits, '.', '-', '_', ':', '@', '[', ']'; at most "
              "255 characters; not starting with '-')",
              path, lineno, (int)(len[0] > 80 ? 80 : len[0]), tok[0]);
    return -1;
  }
  if (nt == 2) {
    if (len[1] < 6 || strncmp(tok[1], "slots=", 6) != 0) {
      trun_errf(err, errlen, "%s:%d: unexpected '%.*s' after the host: a line is 'host' or 'host slots=N'",
                path, lineno, (int)(len[1] > 80 ? 80 : len[1]), tok[1]);
      return -1;
    }
    if (parse_slots(tok[1] + 6, len[1] - 6, &h->slots) < 0) {
      trun_errf(err, errlen, "%s:%d: slots must be an integer from 1 to %d, got '%.*s'", path, lineno,
                TRUN_MAX_LOCAL, (int)(len[1] - 6 > 40 ? 40 : len[1] - 6), tok[1] + 6);
      return -1;
    }
  }
  h->host = strndup(tok[0], len[0]);
  if (!h->host) {
    trun_errf(err, errlen, "%s:%d: out of memory", path, lineno);
    return -1;
  }
  return 0;
}

int trun_hostfile_parse(const char *path, const char *text, size_t len, trun_hostfile *out, char *err,
                        size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (memchr(text, '\0', len)) {
    trun_errf(err, errlen, "%s: contains a NUL byte: not a hostfile", path);
    return -1;
  }
  size_t cap = 0;
  int lineno = 0;
  for (size_t pos = 0; pos < len;) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t end = nl ? (size_t)(nl - text) : len;
    lineno++;
    const char *hash = memchr(text + pos, '#', end - pos);
    size_t n = (hash ? (size_t)(hash - text) : end) - pos;
    trun_host h;
    if (parse_line(path, lineno, text + pos, n, &h, err, errlen) < 0) goto fail;
    pos = end + 1;
    if (!h.host) continue;
    for (size_t i = 0; i < out->n; i++)
      if (strcmp(out->h[i].host, h.host) == 0) {
        trun_errf(err, errlen,
                  "%s:%d: host '%s' is already on line %d (one line per host; slots=N sets its workers)",
                  path, lineno, h.host, out->h[i].line);
        free(h.host);
        goto fail;
      }
    if (out->n == TRUN_HOSTFILE_MAX_HOSTS) {
      trun_errf(err, errlen, "%s:%d: more than %d hosts", path, lineno, TRUN_HOSTFILE_MAX_HOSTS);
      free(h.host);
      goto fail;
    }
    if (out->n == cap) {
      size_t ncap = cap ? cap * 2 : 16;
      trun_host *nh = realloc(out->h, ncap * sizeof(*nh));
      if (!nh) {
        trun_errf(err, errlen, "%s:%d: out of memory", path, lineno);
        free(h.host);
        goto fail;
      }
      out->h = nh;
      cap = ncap;
    }
    out->h[out->n++] = h;
  }
  if (out->n == 0) {
    trun_errf(err, errlen, "%s: no hosts (one 'host [slots=N]' per line)", path);
    return -1;
  }
  return 0;
fail:
  trun_hostfile_free(out);
  return -1;
}

int trun_hostfile_load(const char *path, trun_hostfile *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    trun_errf(err, errlen, "--hostfile %s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > TRUN_HOSTFILE_MAX_BYTES) {
    trun_errf(err, errlen, "--hostfile %s: not a regular file of at most %d bytes", path,
              TRUN_HOSTFILE_MAX_BYTES);
    close(fd);
    return -1;
  }
  char *buf = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (buf && got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (!buf) {
    trun_errf(err, errlen, "--hostfile %s: out of memory", path);
    return -1;
  }
  int rc = trun_hostfile_parse(path, buf, got, out, err, errlen);
  free(buf);
  return rc;
}

/* ---- the command of one host ------------------------------------------------------------------------ */

char *trun_shell_quote(const char *s) {
  size_t n = 2;
  for (const char *p = s; *p; p++) n += *p == '\'' ? 4 : 1;
  char *q = malloc(n + 1), *o = q;
  if (!q) return NULL;
  *o++ = '\'';
  for (const char *p = s; *p; p++) {
    if (*p == '\'') {
      memcpy(o, "'\\''", 4);
      o += 4;
    } else {
      *o++ = *p;
    }
  }
  *o++ = '\'';
  *o = '\0';
  return q;
}

void trun_argv_free(char **argv) {
  if (!argv) return;
  for (char **a = argv; *a; a++) free(*a);
  free(argv);
}

typedef struct {
  char **v;
  size_t n, cap;
  int oom;
} argv_b;

static void push_raw(argv_b *b, char *s) {
  if (!s) b->oom = 1;
  if (b->oom) {
    free(s);
    return;
  }
  if (b->n + 2 > b->cap) {
    size_t ncap = b->cap ? b->cap * 2 : 32;
    char **nv = realloc(b->v, ncap * sizeof(*nv));
    if (!nv) {
      free(s);
      b->oom = 1;
      return;
    }
    b->v = nv;
    b->cap = ncap;
  }
  b->v[b->n++] = s;
  b->v[b->n] = NULL;
}

/* Pushes "--name" or "--name=value", quoted for the remote shell. */
static void push_opt(argv_b *b, const char *name, const char *val) {
  size_t n = strlen(name) + (val ? strlen(val) + 1 : 0) + 3;
  char *s = malloc(n);
  if (!s) {
    b->oom = 1;
    return;
  }
  snprintf(s, n, "--%s%s%s", name, val ? "=" : "", val ? val : "");
  push_raw(b, trun_shell_quote(s));
  free(s);
}

/* --master-addr when the user set it (command line, environment, config file), else the first host
 * without its "user@". */
static const char *hf_master(const trun_settings *cl, const trun_hostfile *hf) {
  const trun_opt_val *ma = &cl->v[TRUN_OPT_MASTER_ADDR];
  if (ma->src >= TRUN_SRC_FILE && ma->val) return ma->val;
  const char *at = strrchr(hf->h[0].host, '@');
  return at ? at + 1 : hf->h[0].host;
}

int trun_hostfile_argv(const trun_settings *cl, const trun_config *cfg, const trun_hostfile *hf, size_t i,
                       const char *rsh, const char *trun_path, char ***out, char *err, size_t errlen) {
  argv_b b = {0};
  *out = NULL;
  /* The rsh command: split on blanks, no quoting (it is not given to a shell). */
  for (const char *p = rsh; *p;) {
    while (*p && isspace((unsigned char)*p)) p++;
    if (!*p) break;
    const char *start = p;
    while (*p && !isspace((unsigned char)*p)) p++;
    push_raw(&b, strndup(start, (size_t)(p - start)));
  }
  if (b.n == 0 && !b.oom) {
    trun_errf(err, errlen, "--rsh is empty: give the remote shell command, e.g. --rsh '%s'",
              TRUN_RSH_DEFAULT);
    trun_argv_free(b.v);
    return -1;
  }
  push_raw(&b, strdup(hf->h[i].host));
  push_raw(&b, trun_shell_quote(trun_path));
  /* The agent is tied to this launcher through its stdin (the ssh session): signals as lines, and the
   * end of stdin (launcher or session gone) stops it. */
  push_opt(&b, "watch-stdin", NULL);
  int is_static = cfg->backend == TRUN_RDZV_STATIC;
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    const trun_opt_val *v = &cl->v[id];
    if (v->src != TRUN_SRC_CLI || !v->val) continue;
    if (id == TRUN_OPT_HOSTFILE || id == TRUN_OPT_RSH || id == TRUN_OPT_DRY_RUN || id == TRUN_OPT_WATCH_STDIN)
      continue;
    if (is_static && (id == TRUN_OPT_NNODES || id == TRUN_OPT_NODE_RANK || id == TRUN_OPT_MASTER_ADDR ||
                      id == TRUN_OPT_MASTER_PORT))
      continue;
    const trun_opt_desc *d = trun_opt_desc_of((trun_opt_id)id);
    push_opt(&b, d->name, d->is_flag ? NULL : v->val);
  }
  /* A hostfile named by the config file must not start more agents on the hosts: an empty one wins. */
  if (cl->v[TRUN_OPT_HOSTFILE].src != TRUN_SRC_CLI) push_opt(&b, "hostfile", "");
  char num[32];
  if (hf->h[i].slots > 0 && cl->v[TRUN_OPT_NPROC_PER_NODE].src <= TRUN_SRC_DETECTED) {
    snprintf(num, sizeof(num), "%d", hf->h[i].slots);
    push_opt(&b, "nproc-per-node", num);
  }
  const char *master = hf_master(cl, hf);
  if (is_static) {
    snprintf(num, sizeof(num), "%zu", hf->n);
    push_opt(&b, "nnodes", num);
    snprintf(num, sizeof(num), "%zu", i);
    push_opt(&b, "node-rank", num);
    push_opt(&b, "master-addr", master);
    snprintf(num, sizeof(num), "%d", cfg->master_port);
    push_opt(&b, "master-port", num);
  } else {
    if (cl->v[TRUN_OPT_NNODES].src != TRUN_SRC_CLI) {
      snprintf(num, sizeof(num), "%zu", hf->n);
      push_opt(&b, "nnodes", num);
    }
    const char *ep = cl->v[TRUN_OPT_RDZV_ENDPOINT].val;
    if (!ep || !*ep) {
      char epbuf[300];
      int v6 = strchr(master, ':') && master[0] != '[';
      snprintf(epbuf, sizeof(epbuf), "%s%s%s:%d", v6 ? "[" : "", master, v6 ? "]" : "", cfg->master_port);
      push_opt(&b, "rdzv-endpoint", epbuf);
    }
  }
  if (cl->script && cl->script_src == TRUN_SRC_CLI) {
    if (cl->script[0] == '-') push_raw(&b, trun_shell_quote("--"));
    push_raw(&b, trun_shell_quote(cl->script));
    for (int k = 0; k < cl->nscript_args; k++) push_raw(&b, trun_shell_quote(cl->script_args[k]));
  }
  if (b.oom) {
    trun_errf(err, errlen, "out of memory building the command of host %s", hf->h[i].host);
    trun_argv_free(b.v);
    return -1;
  }
  *out = b.v;
  return 0;
}

/* ---- the launcher ----------------------------------------------------------------------------------- */

typedef struct launcher launcher;

typedef struct {
  launcher *l;
  const trun_host *h;
  size_t rank;
  pid_t pid;
  int running;
  int code;  /* exit code, or 128 + signal */
  int in_fd; /* the write end of its stdin pipe (the agent's --watch-stdin), -1 once closed */
  trun_stream *out, *err;
} hf_node;

struct launcher {
  uv_loop_t loop;
  hf_node *nodes;
  size_t n;
  size_t running;
  int open_streams;
  int code;         /* the job's: the hosts' codes combined by trun_exit_worst, else 0 */
  size_t first_bad; /* node of the first non-zero exit */
  size_t worst;     /* node whose code the job ends with (trun_exit_worst) */
  int is_static;
  int signal_seen;
  const char *rsh0;  /* the --rsh program, for messages */
  trun_super *super; /* reaps the rsh children, catches the stop signals, the static job's grace */
  uv_timer_t drain;
};

static const int hf_signals[4] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void hf_maybe_finish(launcher *l);

static void hf_on_stream_eof(void *arg) {
  launcher *l = arg;
  l->open_streams--;
  hf_maybe_finish(l);
}

static void hf_on_drain(uv_timer_t *t) {
  launcher *l = t->data;
  for (size_t i = 0; i < l->n; i++) {
    hf_node *nd = &l->nodes[i];
    if (nd->out && trun_stream_is_open(nd->out))
      trun_stream_close(nd->out), nd->out = NULL, l->open_streams--;
    if (nd->err && trun_stream_is_open(nd->err))
      trun_stream_close(nd->err), nd->err = NULL, l->open_streams--;
  }
  hf_maybe_finish(l);
}

static void hf_maybe_finish(launcher *l) {
  if (l->running > 0) return;
  if (l->open_streams > 0) {
    if (!uv_is_active((uv_handle_t *)&l->drain))
      uv_timer_start(&l->drain, hf_on_drain, TRUN_HOSTFILE_DRAIN_MS, 0);
    return;
  }
  uv_stop(&l->loop);
}

/* Forwards sig to every running host: as a line on its agent's stdin (the agent acts on it and reports, and
 * ssh stays up to carry the report back), and with to_rsh also to the rsh process itself (for an --rsh
 * that does not pass stdin on, and when the stop must not depend on the remote side). */
static void hf_forward(launcher *l, int sig, int to_rsh) {
  char line[40], name[32];
  int n = snprintf(line, sizeof(line), "%s\n", trun_signal_name(sig, name, sizeof(name)));
  for (size_t i = 0; i < l->n; i++) {
    hf_node *nd = &l->nodes[i];
    if (!nd->running) continue;
    if (nd->in_fd >= 0 && write(nd->in_fd, line, (size_t)n) != n)
      trun_debug("host %s: could not write %s to its agent's stdin: %s", nd->h->host, name, strerror(errno));
    if (to_rsh) kill(nd->pid, sig);
  }
}

static void hf_on_grace(void *arg) {
  launcher *l = arg;
  trun_warn(
      "the agent of host %s (node rank %zu) exited %d %d s ago and %zu host(s) still run: sending them "
      "SIGTERM",
      l->nodes[l->first_bad].h->host, l->first_bad, l->nodes[l->first_bad].code,
      TRUN_HOSTFILE_GRACE_MS / 1000, l->running);
  hf_forward(l, SIGTERM, 1);
}

static void hf_node_exited(launcher *l, hf_node *nd, int status) {
  nd->running = 0;
  l->running--;
  if (nd->in_fd >= 0) close(nd->in_fd);
  nd->in_fd = -1;
  nd->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (nd->code != 0) {
    char name[32];
    int unreachable = nd->code == TRUN_RSH_UNREACHABLE;
    if (WIFSIGNALED(status))
      trun_warn("host %s (node rank %zu): the remote command was killed by %s", nd->h->host, nd->rank,
                trun_signal_name(WTERMSIG(status), name, sizeof(name)));
    else if (unreachable)
      trun_warn(
          "host %s (node rank %zu): %s exited 255: it could not reach the host, log in or run trun there, "
          "or lost the connection (its message is above; check the host, its sshd and --rsh)",
          nd->h->host, nd->rank, l->rsh0);
    else
      trun_warn("host %s (node rank %zu): the agent exited %d", nd->h->host, nd->rank, nd->code);
    /* The job's code: the first of the hosts' codes in base/exit.h's order (2 > 5 > 3 > 6 > 4 > 1), an
     * agent's own as it is, so that a scheduler still acts on it; ssh's 255 or a signal counts as 1. */
    int was = l->code;
    l->code = trun_exit_worst(l->code, nd->code);
    if (l->code != was && was != 0) l->worst = (size_t)(nd - l->nodes);
    if (was == 0) {
      l->first_bad = l->worst = (size_t)(nd - l->nodes);
      if (l->is_static && l->running > 0 && !l->signal_seen) {
        if (unreachable) {
          /* A static job cannot go on without that host: the others would wait for it in the rendezvous. */
          trun_warn("the static job cannot start or go on without host %s: stopping the %zu other host(s)",
                    nd->h->host, l->running);
          hf_forward(l, SIGTERM, 0);
        }
        trun_super_grace(l->super, TRUN_HOSTFILE_GRACE_MS);
      }
    }
  }
  hf_maybe_finish(l);
}

static void hf_on_exit(void *arg, pid_t pid, int status) {
  launcher *l = arg;
  for (size_t i = 0; i < l->n; i++)
    if (l->nodes[i].pid == pid && l->nodes[i].running) {
      hf_node_exited(l, &l->nodes[i], status);
      break;
    }
}

static void hf_on_signal(void *arg, int sig) {
  launcher *l = arg;
  char name[32];
  int again = l->signal_seen != 0;
  trun_warn("%s: forwarding it to the %zu running host(s)%s", trun_signal_name(sig, name, sizeof(name)),
            l->running,
            again ? " again, also to their --rsh processes"
                  : " (a line on each agent's stdin; again: also to --rsh)");
  l->signal_seen = sig;
  trun_super_grace_stop(l->super);
  hf_forward(l, sig, again);
}

static void hf_close_cb(uv_handle_t *h) { (void)h; }

/* Starts node i; 0, or -1 after printing why. *bad_input: the failure is the --rsh command's. */
static int hf_start(launcher *l, size_t i, char **argv, char **envp, int *bad_input) {
  hf_node *nd = &l->nodes[i];
  char prefix[300];
  int ofd = -1, efd = -1;
  snprintf(prefix, sizeof(prefix), "[%s] ", nd->h->host);
  /* stdin: a pipe that this launcher holds open for the job's life (--watch-stdin on the host); its
   * first line says so. O_CLOEXEC: no other host's rsh inherits this one's end. */
  int in[2];
  if (pipe2(in, O_CLOEXEC) < 0) {
    trun_error("host %s: cannot make its stdin pipe: %s", nd->h->host, strerror(errno));
    return -1;
  }
  if (write(in[1], TRUN_HOSTFILE_HELLO, strlen(TRUN_HOSTFILE_HELLO)) < 0 ||
      fcntl(in[1], F_SETFL, O_NONBLOCK) < 0) {
    trun_error("host %s: cannot prepare its stdin pipe: %s", nd->h->host, strerror(errno));
    close(in[0]);
    close(in[1]);
    return -1;
  }
  nd->in_fd = in[1];
  int rc = trun_stream_open(&l->loop, 1, -1, prefix, &nd->out, &ofd);
  if (rc == 0) {
    trun_stream_on_eof(nd->out, hf_on_stream_eof, l);
    l->open_streams++;
    rc = trun_stream_open(&l->loop, 2, -1, prefix, &nd->err, &efd);
  }
  if (rc == 0) {
    trun_stream_on_eof(nd->err, hf_on_stream_eof, l);
    l->open_streams++;
  }
  if (rc < 0) {
    if (ofd >= 0) close(ofd);
    close(in[0]);
    trun_error("host %s: cannot open the output pipes: %s", nd->h->host, strerror(-rc));
    return -1;
  }
  trun_spawn_req req = {.argv = argv, .envp = envp, .stdin_fd = in[0], .stdout_fd = ofd, .stderr_fd = efd};
  const char *what = "";
  rc = trun_spawn(&req, &nd->pid, &what);
  close(in[0]);
  close(ofd);
  close(efd);
  if (rc < 0 || nd->pid <= 0) {
    *bad_input = strcmp(what, "find the program in PATH") == 0 || strcmp(what, "exec") == 0;
    trun_error("host %s (node rank %zu): cannot start '%s' (--rsh): %s: %s; check --rsh and PATH",
               nd->h->host, i, argv[0], what, strerror(-rc));
    if (nd->pid > 0) {
      nd->running = 1; /* exited 127: the supervisor reaps it */
      l->running++;
    }
    return -1;
  }
  nd->running = 1;
  l->running++;
  return 0;
}

static void hf_print_cmd(FILE *out, const trun_host *h, size_t i, char **argv) {
  fprintf(out, "node rank %zu (%s, line %d):", i, h->host, h->line);
  for (char **a = argv; *a; a++) fprintf(out, " %s", *a);
  fputc('\n', out);
}

int trun_hostfile_launch(const trun_settings *cl, const trun_config *cfg, char **envp, FILE *out) {
  char err[1024];
  const char *path = cl->v[TRUN_OPT_HOSTFILE].val;
  const char *rsh = cl->v[TRUN_OPT_RSH].val ? cl->v[TRUN_OPT_RSH].val : TRUN_RSH_DEFAULT;
  trun_hostfile hf;
  if (trun_hostfile_load(path, &hf, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s\n", err);
    return 2;
  }
  char self[PATH_MAX];
  ssize_t sn = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (sn <= 0) {
    fprintf(stderr, "trun: error: cannot find trun's own path (/proc/self/exe): %s\n", strerror(errno));
    trun_hostfile_free(&hf);
    return 1;
  }
  self[sn] = '\0';
  char ***argvs = calloc(hf.n, sizeof(*argvs));
  int code = argvs ? 0 : 1;
  for (size_t i = 0; code == 0 && i < hf.n; i++)
    if (trun_hostfile_argv(cl, cfg, &hf, i, rsh, self, &argvs[i], err, sizeof(err)) < 0) {
      fprintf(stderr, "trun: error: %s\n", err);
      code = 2;
    }
  if (code == 0 && cfg->dry_run) {
    fprintf(out, "hostfile %s: %zu host(s), master %s; each started as:\n", path, hf.n, hf_master(cl, &hf));
    for (size_t i = 0; i < hf.n; i++) hf_print_cmd(out, &hf.h[i], i, argvs[i]);
  } else if (code == 0) {
    launcher l;
    memset(&l, 0, sizeof(l));
    l.n = hf.n;
    l.is_static = cfg->backend == TRUN_RDZV_STATIC;
    l.nodes = calloc(hf.n, sizeof(*l.nodes));
    if (!l.nodes || uv_loop_init(&l.loop) < 0) {
      trun_error("out of memory starting %zu hosts", hf.n);
      free(l.nodes);
      code = 1;
    } else {
      for (size_t i = 0; i < hf.n; i++)
        l.nodes[i] = (hf_node){.l = &l, .h = &hf.h[i], .rank = i, .in_fd = -1};
      l.rsh0 = argvs[0][0];
      uv_timer_init(&l.loop, &l.drain);
      l.drain.data = &l;
      trun_super_opts so = {.on_exit = hf_on_exit,
                            .on_signal = hf_on_signal,
                            .on_grace = hf_on_grace,
                            .arg = &l,
                            .signals = hf_signals,
                            .nsignals = 4};
      int src = trun_super_start(&l.loop, &so, &l.super);
      if (src < 0) trun_error("cannot watch the hosts' processes and signals: %s", uv_strerror(src));
      trun_info("starting %zu agent(s) from %s with '%s' (master %s)", hf.n, path, rsh, hf_master(cl, &hf));
      int start_failed = src < 0, bad_input = 0;
      for (size_t i = 0; i < hf.n && !start_failed; i++)
        if (hf_start(&l, i, argvs[i], envp, &bad_input) < 0) start_failed = 1;
      if (start_failed) hf_forward(&l, SIGTERM, 1);
      hf_maybe_finish(&l);
      if (l.running > 0 || l.open_streams > 0) uv_run(&l.loop, UV_RUN_DEFAULT);
      code = start_failed ? (bad_input ? 2 : 1) : l.code;
      char name[32];
      const hf_node *bad = &l.nodes[l.first_bad];
      const char *why = bad->code == TRUN_RSH_UNREACHABLE ? ": ssh could not reach it or lost it" : "";
      if (!start_failed && code != 0 && l.signal_seen)
        trun_error(
            "the job was stopped by %s (forwarded to every host); the first host to end was %s (node "
            "rank %zu, exit %d%s)",
            trun_signal_name(l.signal_seen, name, sizeof(name)), bad->h->host, l.first_bad, bad->code, why);
      else if (!start_failed && code != 0)
        trun_error("the job failed: the first host to fail was %s (node rank %zu, exit %d%s)", bad->h->host,
                   l.first_bad, bad->code, why);
      const trun_exit_info *x = trun_exit_info_of(code);
      if (!start_failed && code > TRUN_EXIT_FAILED && x)
        trun_error(
            "exit %d, %s: host %s (node rank %zu) exited %d (of the hosts' codes, 2, 5, 3, 6, 4 come first)",
            code, x->meaning, l.nodes[l.worst].h->host, l.worst, code);
      for (size_t i = 0; i < hf.n; i++) {
        if (l.nodes[i].out) trun_stream_close(l.nodes[i].out);
        if (l.nodes[i].err) trun_stream_close(l.nodes[i].err);
        if (l.nodes[i].in_fd >= 0) close(l.nodes[i].in_fd);
      }
      trun_super_close(l.super);
      uv_close((uv_handle_t *)&l.drain, hf_close_cb);
      uv_run(&l.loop, UV_RUN_DEFAULT);
      uv_loop_close(&l.loop);
      free(l.nodes);
    }
  }
  for (size_t i = 0; argvs && i < hf.n; i++) trun_argv_free(argvs[i]);
  free(argvs);
  trun_hostfile_free(&hf);
  return code;
}
