/* Collective hang detection for the agent (agent/agent_int.h), on by default: a thread asks the node's NCCL
 * RAS (agent/hang/hang.h; NCCL_RAS_ADDR from the workers' environment: the job's own port, agent_rasport.c,
 * unless the user set it) every
 * TRUN__HANG_POLL_MS while the workers run and feeds the detector; a hung communicator comes to the loop
 * (an async handle), which maps its culprits to this node's workers and names them (one console line per
 * communicator and round, the "hang" event, trun_hangs_total) and, --hang-timeout seconds after it was
 * named, tears the round down with the culprit as the root cause (cause kind "hang").
 *
 * RAS answers are untrusted: another local user may bind the port first, and two jobs on one node share it.
 * A culprit is this node's to name and act on only when RAS gives one of this node's addresses as its host
 * AND its pid is a running worker of this round (or of that worker's process group). A culprit on another
 * host, or of another agent of this job on this host, is that agent's to name (every culprit is named once,
 * by the agent that can act on it); one on this host whose pid is no worker of this job gets a warning and
 * nothing else. Nothing is ever signalled but our own
 * workers, through the normal teardown.
 *
 * With --warm-start-nccl a restarted worker's RAS serves on its pool process's own port, not the job's: from
 * the first such round the job's port (where the agent holds it) listens too and relays each client to one
 * of those workers (proc/relay.h: bounded in clients and bytes), so `ncclras` there still reaches the job. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/hang/hang.h"
#include "agent_int.h"
#include "base/base.h"
#include "config/config.h"

#define TRUN__HANG_POLL_MS 2000  /* between the end of one RAS query and the next (at the default window) */
#define TRUN__HANG_QUERY_MS 5000 /* one query at most (RAS gathers the job's answer in it) */
#define TRUN__HANG_MAX_ADDRS 64  /* this node's addresses kept */
#define TRUN__HANG_MAX_SEEN 32   /* communicators named (or warned about) per round */
#define TRUN__HANG_MAX_RAS 8     /* --warm-start-nccl workers' own RAS addresses asked, in turn */
#define TRUN__HANG_RELAY_CLIENTS 16          /* clients of the job's RAS port relayed at once */
#define TRUN__HANG_RELAY_PENDING (256 << 10) /* bytes queued toward one side of a relayed client */
#define TRUN__HANG_STACK_MS                                                      \
  3000 /* a culprit asked for its Python stack has this long to print it and die \
        */

/* What the loop tells the thread about the round (under mu). */
typedef struct {
  int active; /* the workers of round gen run */
  int gen;    /* bumped at each round's start */
  /* The flight recorder (agent_fr.c): where this round's workers dump and take requests. */
  char fr_dump[PATH_MAX], fr_pipe[PATH_MAX];
  int fr_base, fr_n;
  /* --warm-start-nccl: the RAS addresses of this round's workers that serve on a port of their own (their
   * pool process's); asked in turn, instead of the job's (any one worker answers for the whole job). */
  char ras[TRUN__HANG_MAX_RAS][64];
  int nras;
} hang_round;

/* What the thread found, for the loop (under mu); each with the round it belongs to. */
typedef struct {
  trun_hang_verdict v;        /* the latest hung communicators ... */
  int v_gen;                  /* ... of this round */
  char fr_line[1024];         /* what the ranks' dumps said when that hang was first seen ("" nothing) */
  int err_pending;            /* an answer this round that is no usable RAS answer, not yet said ... */
  char err_msg[512];          /* ... in words */
  int err_gen;                /* the round whose first such error was taken */
  trun__fr_spin_verdict spin; /* every rank in NCCL: the latest such verdict ... */
  int spin_pending, spin_gen; /* ... not yet handed to the loop, of this round */
} hang_news;

/* The loop's own, per round (zeroed as a round starts). */
typedef struct {
  char seen[TRUN__HANG_MAX_SEEN][24]; /* communicators named */
  int nseen;
  char warned[TRUN__HANG_MAX_SEEN][24]; /* communicators with foreign culprits warned about */
  int nwarned;
  int acted;  /* the round was torn down for a hang */
  int act_lr; /* the first culprit's local rank */
  int spin_named, spin_acted;
  double spin_named_quiet;
} hang_seen;

struct trun__hang {
  agent *a; /* loop side only */
  char addr[300];
  double window; /* counts frozen this long are a hang (TRUN_HANG_WINDOW; set before the thread starts) */
  int poll_ms;   /* between queries: TRUN__HANG_POLL_MS scaled with the window */
  char local[TRUN__HANG_MAX_ADDRS][64]; /* this node's addresses, numeric (set before the thread starts) */
  int nlocal;
  int port_fd; /* holds the workers' RAS port (agent_rasport.c), -1 */
  /* --warm-start-nccl: while a round's workers serve RAS on ports of their own, port_fd listens and relays
   * each client to one of them, so that a tool asking NCCL_RAS_ADDR still reaches the job (loop side). */
  trun_relay *relay;
  int relay_failed; /* said once */
  struct {
    pthread_mutex_t mu; /* round and news */
    pthread_cond_t cv;
    pthread_t id;
    int on;
    int stop;
  } th;
  hang_round round; /* under th.mu */
  hang_news news;   /* under th.mu */
  struct {
    trun__fr_spin sp;              /* every rank in NCCL: the thread's own state ... */
    trun__fr_spin_verdict verdict; /* ... and verdict */
  } spin;
  uv_async_t async; /* the thread has news */
  int async_on;
  uv_timer_t timer; /* a culprit was asked for its stack: the stop, if its death does not come first */
  int timer_on;
  hang_seen seen; /* loop side */
};

/* ---- the thread -------------------------------------------------------------------------------------- */

/* One RAS answer: from the first of the round's own worker addresses (ras, nras) that has a listener, else
 * (a round without such workers) at the job's address (h->addr). A worker that is gone refuses at once on
 * loopback; when every one of them refuses, the round's workers are going, and the job's address, which
 * then relays to those same ports (relay_round), could only say "closed" instead of "refused". */
static int query(const trun__hang *h, char (*ras)[64], int nras, char **json, size_t *n, char *err,
                 size_t errlen) {
  for (int i = 0; i < nras; i++) {
    int rc = trun_ras_query(ras[i], TRUN__HANG_QUERY_MS, 0, json, n, err, errlen);
    if (rc != -ECONNREFUSED) return rc;
  }
  if (nras > 0) return -ECONNREFUSED;
  return trun_ras_query(h->addr, TRUN__HANG_QUERY_MS, 0, json, n, err, errlen);
}

static void *poll_thread(void *arg) {
  trun__hang *h = arg;
  trun_hang_detector *d = trun_hang_new(h->window);
  int gen = -1;
  pthread_mutex_lock(&h->th.mu);
  while (!h->th.stop && d) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += h->poll_ms / 1000;
    ts.tv_nsec += (long)(h->poll_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (!h->th.stop && pthread_cond_timedwait(&h->th.cv, &h->th.mu, &ts) == 0) {
    }
    if (h->th.stop) break;
    if (!h->round.active || h->round.gen != gen) { /* a new round: its communicators are new */
      trun_hang_reset(d);
      trun__agent_fr_spin_free(&h->spin.sp);
      gen = h->round.gen;
      if (!h->round.active) continue;
    }
    char ras[TRUN__HANG_MAX_RAS][64];
    int nras = h->round.nras;
    memcpy(ras, h->round.ras, sizeof(ras));
    pthread_mutex_unlock(&h->th.mu);
    char *json = NULL, err[512] = "";
    size_t n = 0;
    trun_ras_snapshot *s = NULL;
    trun_hang_verdict v = {0};
    int rc = query(h, ras, nras, &json, &n, err, sizeof(err));
    if (rc == 0) rc = trun_ras_parse(json, n, &s, err, sizeof(err));
    free(json);
    int hung = 0;
    if (rc == 0)
      hung = trun_hang_feed(d, s, trun_mono_s(), &v);
    else
      trun_hang_reset(d); /* nothing (usable) answered: no NCCL job, or the job gone */
    trun_ras_snapshot_free(s);
    char fr[sizeof(h->news.fr_line)] = "";
    pthread_mutex_lock(&h->th.mu);
    char dump[PATH_MAX], pipe[PATH_MAX];
    int base = h->round.fr_base, nr = h->round.fr_n;
    snprintf(dump, sizeof(dump), "%s", h->round.fr_dump);
    snprintf(pipe, sizeof(pipe), "%s", h->round.fr_pipe);
    pthread_mutex_unlock(&h->th.mu);
    if (hung > 0 && v.nfresh > 0) /* a new hang: every rank of this node dumps its flight recorder */
      trun__agent_fr_ask(dump, pipe, base, nr, fr, sizeof(fr));
    /* Equal counts that stand still: every rank in NCCL, or an idle job; the flight recorder tells
     * (agent_fr.c). */
    int spun = trun__agent_fr_spin_step(&h->spin.sp, rc == 0 && hung == 0 ? trun_hang_quiet_s(d) : 0,
                                        trun_mono_s(), dump, pipe, base, nr, &h->spin.verdict);
    pthread_mutex_lock(&h->th.mu);
    int news = 0;
    if (h->round.gen == gen && h->round.active) {
      if (rc != 0 && rc != -ECONNREFUSED && h->news.err_gen != gen) { /* said once per round */
        h->news.err_gen = gen;
        h->news.err_pending = 1;
        snprintf(h->news.err_msg, sizeof(h->news.err_msg), "%s", err);
        news = 1;
      }
      if (spun) {
        h->news.spin = h->spin.verdict;
        h->news.spin_pending = 1;
        h->news.spin_gen = gen;
        news = 1;
      }
      if (hung > 0) {
        trun_hang_verdict_clear(&h->news.v);
        h->news.v = v;
        h->news.v_gen = gen;
        v = (trun_hang_verdict){0};
        if (fr[0]) snprintf(h->news.fr_line, sizeof(h->news.fr_line), "%s", fr);
        news = 1;
      }
    }
    trun_hang_verdict_clear(&v);
    if (news) uv_async_send(&h->async);
  }
  pthread_mutex_unlock(&h->th.mu);
  trun_hang_free(d);
  trun__agent_fr_spin_free(&h->spin.sp);
  return NULL;
}

/* ---- the loop ---------------------------------------------------------------------------------------- */

/* This node's addresses (numeric), for "is the culprit's host this node". */
static void read_local_addrs(trun__hang *h) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) < 0) {
    trun_warn("hang detection: getifaddrs: %s; only loopback counts as this node", strerror(errno));
    ifs = NULL;
  }
  for (struct ifaddrs *i = ifs; i && h->nlocal < TRUN__HANG_MAX_ADDRS; i = i->ifa_next) {
    if (i->ifa_addr == NULL) continue;
    const void *p =
        i->ifa_addr->sa_family == AF_INET    ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
        : i->ifa_addr->sa_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr
                                             : NULL;
    if (p && inet_ntop(i->ifa_addr->sa_family, p, h->local[h->nlocal], sizeof(h->local[0]))) h->nlocal++;
  }
  if (ifs) freeifaddrs(ifs);
}

static int is_local_host(const trun__hang *h, const char *host) {
  if (strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0) return 1;
  for (int i = 0; i < h->nlocal; i++)
    if (strcmp(h->local[i], host) == 0) return 1;
  return 0;
}

/* The worker of this round that pid is (or is in the process group of), NULL. A worker that has already
 * exited counts too: RAS lists it as missing when it left while its peers still wait for it in a collective
 * (seen on 2 x H200: a rank whose mismatched broadcast completed on its side finished its script, exit 0, and
 * rank 0 waited in the all-reduce for ever). Naming it and stopping this round touch only our own workers. */
static worker *worker_of(agent *a, long pid) {
  if (pid <= 0) return NULL;
  for (int i = 0; i < a->nproc; i++)
    if (a->w[i].pid > 0 && a->w[i].pid == (pid_t)pid) return &a->w[i];
  pid_t pg = getpgid((pid_t)pid);
  for (int i = 0; pg > 0 && i < a->nproc; i++)
    if (a->w[i].running && a->w[i].pid == pg) return &a->w[i];
  return NULL;
}

/* 1 when process pid is a worker of this job started by another agent on this host (several agents per
 * host, or a loopback test): its environment (readable only for our own user's processes) holds this job's
 * TORCHELASTIC_RUN_ID. A hint that spares a warning only: nothing is done for it either way. */
static int same_job_elsewhere(agent *a, long pid) {
  char path[64], want[160], buf[65536];
  snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
  int n = snprintf(want, sizeof(want), "TORCHELASTIC_RUN_ID=%s", a->cfg->run_id);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return 0; /* gone, or another user's: not ours */
  ssize_t got = read(fd, buf, sizeof(buf) - 1);
  if (close(fd) < 0) trun_debug("hang: close(%s): %s", path, strerror(errno));
  if (got <= 0) return 0;
  buf[got] = '\0';
  for (ssize_t i = 0; i < got; i += (ssize_t)strlen(buf + i) + 1)
    if (strncmp(buf + i, want, (size_t)n) == 0 && buf[i + n] == '\0') return 1;
  return 0;
}

/* 1 when hash is in list[0..*n); else adds it (when room) and returns 0. */
static int seen_before(char (*list)[24], int *n, const char *hash) {
  for (int i = 0; i < *n; i++)
    if (strcmp(list[i], hash) == 0) return 1;
  if (*n < TRUN__HANG_MAX_SEEN) snprintf(list[(*n)++], sizeof(list[0]), "%s", hash);
  return 0;
}

/* The culprit asked for its stack did not end by it: the round stops as for any hang. */
static void on_stack_timer(uv_timer_t *t) {
  trun__hang *h = t->data;
  if (h->a->stop.in_round) trun__round_stop(h->a, OUT_FAILED, h->seen.act_lr, TRUN__CAUSE_HANG);
}

static void on_comm(trun__hang *h, const trun_hang_comm *c, const char *fr) {
  agent *a = h->a;
  const trun_config *cfg = a->cfg;
  int base = trun_rdzv_info(a->rdzv)->base_rank;
  worker *ours[TRUN_HANG_MAX_CULPRITS];
  const trun_hang_culprit *ourc[TRUN_HANG_MAX_CULPRITS];
  int nours = 0;
  char names[512] = "", foreign[512] = "";
  size_t nn = 0, nf = 0;
  size_t shown = c->nculprits < TRUN_HANG_MAX_CULPRITS ? c->nculprits : TRUN_HANG_MAX_CULPRITS;
  for (size_t k = 0; k < shown; k++) {
    const trun_hang_culprit *u = &c->culprit[k];
    worker *w = is_local_host(h, u->host) ? worker_of(a, u->pid) : NULL;
    if (w) {
      ours[nours] = w, ourc[nours++] = u;
      if (nn < sizeof(names))
        nn += (size_t)snprintf(names + nn, sizeof(names) - nn, "%srank %d (local %d, pid %d%s)",
                               nn ? ", " : "", base + w->local_rank, w->local_rank, (int)w->pid,
                               w->running ? "" : ", already exited");
    } else if (is_local_host(h, u->host) && same_job_elsewhere(a, u->pid)) {
      trun_debug("hang: rank %d (pid %ld) is this job's, of another agent on this host: it names it", u->rank,
                 u->pid);
    } else if (is_local_host(h, u->host) && nf < sizeof(foreign)) {
      nf += (size_t)snprintf(foreign + nf, sizeof(foreign) - nf, "%spid %ld", nf ? ", " : "", u->pid);
    }
  }
  if (nf > 0 && !seen_before(h->seen.warned, &h->seen.nwarned, c->hash))
    trun_warn(
        "hang: NCCL RAS at %s shows communicator %s hung with %s of this host behind, but no such pid is a "
        "worker of this job on this node: not acted on (another job shares the RAS port, or the answer is "
        "false)",
        h->addr, c->hash, foreign);
  if (nours == 0) {
    trun_debug("hang: %s (no culprit is a worker of this node: its own node names it)", c->line);
    return;
  }
  if (!seen_before(h->seen.seen, &h->seen.nseen, c->hash)) {
    char act[160];
    if (cfg->hang_timeout > 0)
      snprintf(act, sizeof(act), "restarting the workers in %.0f s unless it moves (--hang-timeout)",
               cfg->hang_timeout);
    else
      snprintf(act, sizeof(act), "not acted on (--hang-timeout 0)");
    trun_error("hang: %s is behind in a hung collective: %s; %s", names, c->line, act);
    if (fr[0]) trun_error("hang: flight recorder of this node's ranks: %s", fr);
    char pub[1024];
    if (snprintf(pub, sizeof(pub), "%s behind on node rank %d (%s): %s", names,
                 trun_rdzv_info(a->rdzv)->group_rank, c->line,
                 act) < 0) /* a line cut to what --rdzv-status shows is fine */
      pub[0] = '\0';
    trun_rdzv_publish_hang(a->rdzv, pub); /* for --rdzv-status */
    for (int i = 0; i < nours; i++)
      trun_obs_hang(a->obs, ours[i]->pid, base + ours[i]->local_rank, ours[i]->local_rank, c->hash,
                    c->wait_kind, (unsigned long long)c->wait_n, c->frozen_s, ourc[i]->why, fr);
  }
  if (cfg->hang_timeout <= 0 || h->seen.acted || a->stop.stopping ||
      c->frozen_s < h->window + cfg->hang_timeout)
    return;
  h->seen.acted = 1;
  trun_error("hang: %s still behind after %.0f s (--hang-timeout): restarting the workers", names,
             cfg->hang_timeout);
  for (int i = 0; i < nours; i++)
    snprintf(ours[i]->hang, sizeof(ours[i]->hang),
             "hang (NCCL RAS): behind in communicator %s, frozen for %.0f s: it %s; %zu rank(s) wait in %s "
             "%llu; stopped by --hang-timeout %.0f%s%s",
             c->hash, c->frozen_s, ourc[i]->why, c->nwaiters, c->wait_kind, (unsigned long long)c->wait_n,
             cfg->hang_timeout, fr[0] ? "; flight recorder: " : "", fr);
  int asked = 0;
  for (int i = 0; i < nours; i++) { /* an Xid on its GPU: the node's trouble (excluded, exit 3) */
    trun__agent_hang_hardware(a, ours[i]->local_rank, ours[i]->hang);
    asked += trun__agent_hang_stack_ask(a, ours[i]); /* it prints its stack and dies of SIGABRT */
  }
  h->seen.act_lr = ours[0]->local_rank;
  if (asked && h->timer_on) /* its death ends the round; else the stop follows TRUN__HANG_STACK_MS later */
    uv_timer_start(&h->timer, on_stack_timer, TRUN__HANG_STACK_MS, 0);
  else
    trun__round_stop(a, OUT_FAILED, h->seen.act_lr, TRUN__CAUSE_HANG);
  for (int i = 0; i < nours; i++) ours[i]->torn_down = 0; /* root causes, not bystanders */
}

static void on_async(uv_async_t *as) {
  trun__hang *h = as->data;
  agent *a = h->a;
  pthread_mutex_lock(&h->th.mu);
  trun_hang_verdict v = h->news.v;
  int current = h->news.v_gen == h->round.gen && h->round.active;
  h->news.v = (trun_hang_verdict){0};
  int err_new = h->news.err_pending && h->news.err_gen == h->round.gen && h->round.active;
  h->news.err_pending = 0;
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", h->news.err_msg);
  char fr[sizeof(h->news.fr_line)];
  snprintf(fr, sizeof(fr), "%s", current ? h->news.fr_line : "");
  trun__fr_spin_verdict *sv = NULL;
  if (h->news.spin_pending && h->news.spin_gen == h->round.gen && h->round.active &&
      (sv = malloc(sizeof(*sv))) != NULL)
    *sv = h->news.spin;
  h->news.spin_pending = 0;
  pthread_mutex_unlock(&h->th.mu);
  if (sv && a->stop.in_round) {
    if (!h->seen.spin_named) h->seen.spin_named_quiet = sv->quiet;
    sv->named_quiet = h->seen.spin_named_quiet;
    trun__agent_fr_spin_report(a, sv, &h->seen.spin_named, &h->seen.spin_acted);
  }
  free(sv);
  if (err_new) trun_warn("hang detection: %s; it waits for a usable answer", msg);
  if (current && a->stop.in_round)
    for (size_t i = 0; i < v.ncomms; i++) on_comm(h, &v.comm[i], fr);
  trun_hang_verdict_clear(&v);
}

/* The window (TRUN_HANG_WINDOW in the environment, 1..3600 s, else TRUN_HANG_DEFAULT_WINDOW_S) and the poll
 * interval, scaled with it (2 s at 15 s; at least 100 ms) so that a window always spans as many answers. */
static void hang_window_init(trun__hang *h, char *const *env) {
  const char *w = trun_env_get(env, "TRUN_HANG_WINDOW");
  double v = w ? strtod(w, NULL) : 0;
  h->window = v >= 1 && v <= 3600 ? v : TRUN_HANG_DEFAULT_WINDOW_S;
  if (w && h->window != v)
    trun_warn("TRUN_HANG_WINDOW=%s is not 1..3600 seconds: %.0f s is used", w, h->window);
  double ms = h->window / TRUN_HANG_DEFAULT_WINDOW_S * TRUN__HANG_POLL_MS;
  h->poll_ms = ms > TRUN__HANG_POLL_MS ? TRUN__HANG_POLL_MS : ms < 100 ? 100 : (int)ms;
}

static void free_hang(uv_handle_t *as) { free(as->data); }

int trun__agent_hang_open(agent *a) {
  trun__hang *h = calloc(1, sizeof(*h));
  if (h == NULL) return -1;
  h->a = a;
  if (trun__agent_ras_port(a, &h->port_fd) < 0 || trun__agent_hang_stack_env(a) < 0) {
    if (h->port_fd >= 0) close(h->port_fd);
    free(h);
    return -1;
  }
  snprintf(h->addr, sizeof(h->addr), "%s", trun_ras_addr(a->env));
  hang_window_init(h, a->env);
  read_local_addrs(h);
  trun__agent_fr_spin_init(&h->spin.sp, a->env);
  pthread_mutex_init(&h->th.mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&h->th.cv, &ca);
  pthread_condattr_destroy(&ca);
  h->timer_on = uv_timer_init(a->loop, &h->timer) == 0;
  h->timer.data = h;
  int rc = uv_async_init(a->loop, &h->async, on_async);
  h->async.data = h;
  h->async_on = rc == 0;
  if (rc == 0) rc = pthread_create(&h->th.id, NULL, poll_thread, h) == 0 ? 0 : -1;
  h->th.on = rc == 0;
  a->hang = h;
  if (rc != 0) {
    trun_warn("hang detection is off: cannot start its thread");
    return 0;
  }
  trun_debug("hang detection: asking NCCL RAS at %s every %d ms while the workers run (window %.0f s)",
             h->addr, h->poll_ms, h->window);
  return 0;
}

/* At a round's start: the job's RAS port relays to the round's workers that serve on ports of their own, if
 * any (the first such round opens the relay); with none it stops listening, so that workers serving on the
 * job's port itself (set NCCL up cold) get every client. Only where the agent holds the job's port. */
static void relay_round(trun__hang *h, const char (*ras)[64], int nras) {
  if (h->port_fd < 0) return;
  if (nras == 0) {
    if (h->relay)
      trun_debug("hang detection: %s no longer relays (no worker serves RAS on a port of its own)", h->addr);
    trun_relay_close(h->relay);
    h->relay = NULL;
    return;
  }
  if (h->relay == NULL && !h->relay_failed) {
    trun_relay_limits lim = {.max_clients = TRUN__HANG_RELAY_CLIENTS,
                             .max_pending = TRUN__HANG_RELAY_PENDING};
    const char *step = NULL;
    int rc = trun_relay_open(h->a->loop, h->port_fd, &lim, &h->relay, &step);
    if (rc < 0) {
      h->relay_failed = 1;
      trun_warn(
          "hang detection: cannot relay the job's NCCL RAS address %s to the workers' own ports (%s: %s); a "
          "tool asking %s finds no restarted worker there: ask the port a worker_start event names as "
          "nccl_ras",
          h->addr, step, uv_strerror(rc), h->addr);
      return;
    }
    trun_debug("hang detection: %s relays each client to a worker's own NCCL RAS port (--warm-start-nccl)",
               h->addr);
  }
  if (h->relay) trun_relay_targets(h->relay, ras, nras);
}

void trun__agent_hang_round(agent *a, int active) {
  trun__hang *h = a->hang;
  if (h == NULL) return;
  pthread_mutex_lock(&h->th.mu);
  if (active) h->round.gen++;
  h->round.active = active;
  h->news.fr_line[0] = '\0';
  if (active) { /* where this round's workers dump (agent_fr.c; a user's own TORCH_* values too) */
    const char *dump = trun_env_get(a->env, "TORCH_FR_DUMP_TEMP_FILE"),
               *pipe = trun_env_get(a->env, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE");
    if (dump == NULL) dump = trun_env_get(a->env, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
    snprintf(h->round.fr_dump, sizeof(h->round.fr_dump), "%s", dump ? dump : "");
    snprintf(h->round.fr_pipe, sizeof(h->round.fr_pipe), "%s", pipe ? pipe : "");
    h->round.fr_base = trun_rdzv_info(a->rdzv)->base_rank;
    h->round.fr_n = a->nproc;
    h->round.nras = 0;
    for (int i = 0; i < a->nproc && h->round.nras < TRUN__HANG_MAX_RAS; i++)
      if (a->w[i].ras[0]) snprintf(h->round.ras[h->round.nras++], sizeof(h->round.ras[0]), "%s", a->w[i].ras);
  }
  char ras[TRUN__HANG_MAX_RAS][64];
  int nras = h->round.nras;
  memcpy(ras, h->round.ras, sizeof(ras));
  trun_hang_verdict_clear(&h->news.v);
  pthread_cond_signal(&h->th.cv);
  pthread_mutex_unlock(&h->th.mu);
  if (h->timer_on) uv_timer_stop(&h->timer);
  if (active) {
    relay_round(h, (const char(*)[64])ras, nras);
    memset(&h->seen, 0, sizeof(h->seen));
    memset(a->health.round_xid, 0, sizeof(a->health.round_xid)); /* the Xids a hang of this round consults */
  }
}

void trun__agent_hang_close(agent *a) {
  trun__hang *h = a->hang;
  if (h == NULL) return;
  if (h->th.on) {
    pthread_mutex_lock(&h->th.mu);
    h->th.stop = 1;
    pthread_cond_signal(&h->th.cv);
    pthread_mutex_unlock(&h->th.mu);
    pthread_join(h->th.id, NULL); /* a query in flight ends within TRUN__HANG_QUERY_MS */
  }
  trun_hang_verdict_clear(&h->news.v);
  trun_relay_close(h->relay);
  if (h->port_fd >= 0) close(h->port_fd);
  pthread_mutex_destroy(&h->th.mu);
  pthread_cond_destroy(&h->th.cv);
  a->hang = NULL;
  /* h is freed once the loop has closed its handles (the last one closed frees it). */
  if (h->timer_on) uv_close((uv_handle_t *)&h->timer, h->async_on ? NULL : free_hang);
  if (h->async_on)
    uv_close((uv_handle_t *)&h->async, free_hang);
  else if (!h->timer_on)
    free(h);
}
