/* `trun-topo hang`: the hang detector of agent/hang/ by hand, on a node where an NCCL job runs. It asks the
 * job's NCCL RAS (--ras-addr; NCCL_RAS_ADDR; else the one address this host's processes were given, see
 * trun_ras_find; else localhost:28028) for its communicators and their collective counts:
 * once (--once: print them), or every --interval seconds until a communicator's counts stand still while
 * its ranks disagree for --window seconds (a hang: the culprit ranks and what the others wait in, exit 3)
 * or --for seconds pass (exit 0). --fr FILE... reads torch flight-recorder dumps instead. Exit: 0 no hang
 * (or printed), 1 RAS gave no usable answer (--once), 3 a hang, 2 bad usage or a dump that cannot be read. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/hang/hang.h"
#include "base/base.h"

extern char **environ;

int trun_topo_hang(int argc, char **argv);

static const char *usage =
    "usage: trun-topo hang [--ras-addr HOST:PORT] [--once [--json]] [--window S] [--interval S] [--for S]\n"
    "       trun-topo hang --fr FILE...\n"
    "  Asks NCCL's RAS (served by every process of an NCCL 2.24+ job; JSON answers need 2.28.7+) for the\n"
    "  job's communicators and each rank's collective counts, and watches them: counts that stand still\n"
    "  while the ranks disagree (some behind, some missing) for the window are a hang, and the ranks behind\n"
    "  are named with their pid, host and GPU. Equal frozen counts are not a hang (an idle job looks so).\n"
    "  --ras-addr A  where RAS listens (default: $NCCL_RAS_ADDR; else the one the processes of this host "
    "were\n"
    "                given, as trun gives each job's workers a port of their own; else localhost:28028)\n"
    "  --once        one answer: every communicator, its ranks and their counts; --json: the answer as JSON\n"
    "  --window S    seconds of frozen, disagreeing counts that make a hang (default 15)\n"
    "  --interval S  seconds between questions (default 5)\n"
    "  --for S       stop watching after S seconds (default: until a hang)\n"
    "  --fr FILE...  read torch flight-recorder dumps: each rank's last completed / started / scheduled\n"
    "                collective and the Python frames of its last entry\n"
    "  Exit: 0 no hang (or printed), 1 no usable RAS answer (--once), 3 a hang, 2 bad usage or dump.\n";

static int bad_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "trun-topo hang: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "; see trun-topo hang --help\n");
  return 2;
}

static int seconds(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static void print_snapshot(const trun_ras_snapshot *s) {
  printf("NCCL %s: %zu communicator(s)%s\n", s->nccl_version[0] ? s->nccl_version : "(version unknown)",
         s->ncomms, s->timeouts ? " (RAS timed out reaching some processes)" : "");
  for (size_t i = 0; i < s->ncomms; i++) {
    const trun_ras_comm *c = &s->comms[i];
    printf("communicator %s: %d ranks, %zu answered, %zu missing\n", c->hash, c->size, c->npresent,
           c->nranks - c->npresent);
    for (size_t k = 0; k < c->nranks; k++) {
      const trun_ras_rank *r = &c->ranks[k];
      printf("  rank %d pid %ld on %s GPU %d:", r->rank, r->pid, r->host, r->cuda_dev);
      if (r->missing)
        printf(" missing%s%s", r->unresponsive ? ", unresponsive" : "", r->dead ? ", dead" : "");
      for (size_t j = 0; j < r->nkinds; j++)
        if (r->counts[j].n) printf(" %s %llu", r->counts[j].name, (unsigned long long)r->counts[j].n);
      if (r->async_error) printf(" (async error %d)", r->async_error);
      printf("\n");
    }
  }
}

static int read_dumps(int n, char **files) {
  int rc = 0;
  for (int i = 0; i < n; i++) {
    trun_fr_dump *d;
    char err[512];
    if (trun_fr_load_file(files[i], &d, err, sizeof(err))) {
      fprintf(stderr, "trun-topo hang: %s\n", err);
      rc = 2;
      continue;
    }
    printf("%s: format %s, NCCL %s, %zu entries\n", files[i], d->version,
           d->comm_lib_version[0] ? d->comm_lib_version : "?", d->nentries);
    const trun_fr_op *ops[3] = {&d->completed, &d->started, &d->scheduled};
    const char *names[3] = {"completed", "started", "scheduled"};
    for (int k = 0; k < 3; k++) {
      if (ops[k]->present)
        printf("  last %-9s %s %lld (%s, group %s)\n", names[k], ops[k]->p2p ? "p2p" : "collective",
               (long long)ops[k]->seq, ops[k]->name, ops[k]->pg);
      else
        printf("  last %-9s none\n", names[k]);
    }
    if (d->last.present)
      printf("  last entry: %s %s %lld\n", d->last_state, d->last.name, (long long)d->last.seq);
    for (size_t k = 0; k < d->nframes; k++)
      printf("    #%zu %s at %s:%ld\n", k, d->frames[k].name, d->frames[k].file, d->frames[k].line);
    trun_fr_free(d);
  }
  return rc;
}

/* No --ras-addr and no NCCL_RAS_ADDR here: the job's address from the processes of this host that were given
 * one (trun gives every job's workers a port of the job's own). One such address: asked, and said on stderr;
 * none: NCCL's default; several: listed, and the caller exits 2 (the user picks one). */
/* What a found job is, in words: "run id X, N process(es), pid P first" (no run id: without it). */
static void job_words(const trun_ras_found *f, char *out, size_t len) {
  snprintf(out, len, "%s%s%s%d process(es), pid %ld first", f->run_id[0] ? "run id " : "", f->run_id,
           f->run_id[0] ? ", " : "", f->nprocs, f->pid);
}

static const char *find_addr(char *buf, size_t len) {
  trun_ras_found f[16];
  int more = 0;
  char words[160];
  long n = trun_ras_find("/proc", (long)getpid(), f, sizeof(f) / sizeof(f[0]), &more);
  if (n <= 0) {
    fprintf(stderr,
            "trun-topo hang: no process on this host that this user can read was given NCCL_RAS_ADDR; asking "
            "NCCL's default %s (--ras-addr asks another)\n",
            TRUN_RAS_DEFAULT_ADDR);
    return TRUN_RAS_DEFAULT_ADDR;
  }
  if (n == 1) {
    job_words(&f[0], words, sizeof(words));
    fprintf(
        stderr,
        "trun-topo hang: asking the NCCL RAS of the job on this host at %s (%s; --ras-addr asks another)\n",
        f[0].addr, words);
    snprintf(buf, len, "%s", f[0].addr);
    return buf;
  }
  fprintf(stderr,
          "trun-topo hang: %ld%s jobs on this host have an NCCL RAS address of their own; pick one "
          "with --ras-addr:\n",
          n, more ? " or more" : "");
  for (long i = 0; i < n; i++) {
    job_words(&f[i], words, sizeof(words));
    fprintf(stderr, "  %-22s %s\n", f[i].addr, words);
  }
  return NULL;
}

static void nap(double s) {
  if (s <= 0) return;
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

/* What the command line asks for. */
typedef struct {
  const char *addr; /* NULL: find it (find_addr) */
  int once, json;
  double window, interval, total;
} hang_opts;

/* Parses argv into o: 0, or the exit code (0 after --help, 2 bad usage) with *done set; --fr is read here. */
static int parse_opts(int argc, char **argv, hang_opts *o, int *done) {
  const char *given = trun_env_get(environ, "NCCL_RAS_ADDR");
  *o = (hang_opts){
      .addr = given && *given ? given : NULL, .window = TRUN_HANG_DEFAULT_WINDOW_S, .interval = 5};
  *done = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage, stdout);
      return 0;
    } else if (strcmp(a, "--fr") == 0) {
      if (i + 1 >= argc) return bad_usage("%s needs at least one dump file", a);
      return read_dumps(argc - i - 1, argv + i + 1);
    } else if (strcmp(a, "--once") == 0) {
      o->once = 1;
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (i + 1 < argc && strcmp(a, "--ras-addr") == 0) {
      o->addr = argv[++i];
    } else if (i + 1 < argc && strcmp(a, "--window") == 0) {
      if (seconds(argv[++i], 1, 3600, &o->window))
        return bad_usage("--window %s: want seconds in 1..3600", argv[i]);
    } else if (i + 1 < argc && strcmp(a, "--interval") == 0) {
      if (seconds(argv[++i], 0.1, 600, &o->interval))
        return bad_usage("--interval %s: want seconds in 0.1..600", argv[i]);
    } else if (i + 1 < argc && strcmp(a, "--for") == 0) {
      if (seconds(argv[++i], 0.1, 1e7, &o->total))
        return bad_usage("--for %s: want seconds above 0", argv[i]);
    } else {
      return bad_usage("unknown or incomplete option %s", a);
    }
  }
  if (o->json && !o->once) return bad_usage("%s goes with --once", "--json");
  *done = 0;
  return 0;
}

/* One answer printed (--once), or answers fed to the detector until a hang (3) or --for runs out (0). */
static int watch(const hang_opts *o, trun_hang_detector *d) {
  double start = trun_mono_s();
  char last_err[256] = "";
  for (;;) {
    double t = trun_mono_s();
    char *text = NULL, err[256];
    size_t n = 0;
    trun_ras_snapshot *s = NULL;
    int q = trun_ras_query(o->addr, 10000, 0, &text, &n, err, sizeof(err));
    if (q == -EINVAL) { /* a bad address: the same next time */
      fprintf(stderr, "trun-topo hang: %s\n", err);
      return 2;
    }
    if (q == 0 && (q = trun_ras_parse(text, n, &s, err, sizeof(err))) != 0)
      q = q == -ENOMEM ? -ENOMEM : -EPROTO;
    if (q) {
      if (o->once || strcmp(err, last_err) != 0) fprintf(stderr, "trun-topo hang: %s\n", err);
      snprintf(last_err, sizeof(last_err), "%s", err);
      trun_hang_reset(d);
      if (o->once) {
        free(text);
        return 1;
      }
    } else if (o->once) {
      if (o->json)
        fwrite(text, 1, n, stdout);
      else
        print_snapshot(s);
      trun_ras_snapshot_free(s);
      free(text);
      return 0;
    } else {
      last_err[0] = '\0';
      trun_hang_verdict v;
      int k = trun_hang_feed(d, s, t, &v);
      trun_ras_snapshot_free(s);
      if (k > 0) {
        for (size_t i = 0; i < v.ncomms; i++) printf("trun-topo hang: HUNG: %s\n", v.comm[i].line);
        trun_hang_verdict_clear(&v);
        free(text);
        return 3;
      }
      if (k < 0) fprintf(stderr, "trun-topo hang: out of memory\n");
    }
    free(text);
    double now = trun_mono_s();
    if (o->total > 0 && now - start >= o->total) {
      printf("trun-topo hang: no hang in %.0f s\n", now - start);
      return 0;
    }
    nap(o->interval - (now - t));
  }
}

int trun_topo_hang(int argc, char **argv) {
  hang_opts o;
  int done, rc = parse_opts(argc, argv, &o, &done);
  if (done) return rc;
  char found[64];
  if (o.addr == NULL && (o.addr = find_addr(found, sizeof(found))) == NULL) return 2;
  trun_hang_detector *d = trun_hang_new(o.window);
  if (!d) {
    fprintf(stderr, "trun-topo hang: out of memory\n");
    return 1;
  }
  rc = watch(&o, d);
  trun_hang_free(d);
  fflush(stdout);
  return rc;
}
