/* The hang detector (see hang.h): a pure state machine over RAS snapshots. Per communicator it keeps the
 * canonical form of its last counts and since when those counts have stood still while its ranks disagree
 * (different counts of some collective kind, or ranks RAS could not reach). Once that lasts the window, the
 * communicator is hung, and the culprits are named:
 *  - when some ranks are behind in no kind (they launched everything anyone launched), the ranks behind them
 *    are the culprits and those ahead wait in the collective the culprits never launched (a rank that
 * sleeps);
 *  - when every rank is behind in some kind (a rank launched a different collective: a mismatch), the ranks
 *    that differ from the largest group of identical counts are the culprits; with no single largest group
 *    every rank is named;
 *  - ranks listed as missing (unresponsive, considered dead) are always culprits.
 * Equal frozen counts are no hang here: a job between collectives and a rank stuck in a GPU kernel before its
 * collective (RAS counts launches, not completions) look the same. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "hang.h"

/* Distinct collective kinds of one communicator that are analysed (more: a disagreement, not analysed). */
#define MAX_KINDS 32

typedef struct tracked {
  char hash[24], secondary[48];
  trun_buf sig;  /* canonical counts */
  double since;  /* when the current frozen disagreement began; < 0: counts agree */
  double moved;  /* when its counts last changed (or it first appeared) */
  bool reported; /* already returned as hung in this episode */
  bool seen;     /* present in the current snapshot */
} tracked;

struct trun_hang_detector {
  double window;
  double last_t;
  tracked *c;
  size_t n, cap;
};

trun_hang_detector *trun_hang_new(double window_s) {
  if (window_s == 0) window_s = TRUN_HANG_DEFAULT_WINDOW_S;
  if (!(window_s >= 1 && window_s <= 3600)) return NULL;
  trun_hang_detector *d = calloc(1, sizeof(*d));
  if (!d) return NULL;
  d->window = window_s;
  d->last_t = -1e300;
  return d;
}

void trun_hang_reset(trun_hang_detector *d) {
  for (size_t i = 0; i < d->n; i++) trun_buf_free(&d->c[i].sig);
  d->n = 0;
}

void trun_hang_free(trun_hang_detector *d) {
  if (!d) return;
  trun_hang_reset(d);
  free(d->c);
  free(d);
}

void trun_hang_verdict_clear(trun_hang_verdict *v) {
  free(v->comm);
  memset(v, 0, sizeof(*v));
}

static int by_rank(const void *a, const void *b) {
  const trun_ras_rank *x = *(const trun_ras_rank *const *)a, *y = *(const trun_ras_rank *const *)b;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The communicator's counts in one canonical byte string (ranks in rank order). */
static int canonical(const trun_ras_comm *c, trun_buf *b) {
  const trun_ras_rank **r = malloc((c->nranks ? c->nranks : 1) * sizeof(*r));
  if (!r) return -ENOMEM;
  for (size_t i = 0; i < c->nranks; i++) r[i] = &c->ranks[i];
  qsort(r, c->nranks, sizeof(*r), by_rank);
  int rc = trun_buf_append_u32(b, (uint32_t)c->size);
  for (size_t i = 0; i < c->nranks && rc == 0; i++) {
    rc = trun_buf_append_u32(b, (uint32_t)r[i]->rank);
    if (rc == 0)
      rc = trun_buf_append_u8(b, (uint8_t)(r[i]->missing | r[i]->unresponsive << 1 | r[i]->dead << 2));
    if (rc == 0) rc = trun_buf_append_u32(b, (uint32_t)r[i]->nkinds);
    for (size_t k = 0; k < r[i]->nkinds && rc == 0; k++) {
      rc = trun_buf_append_str(b, r[i]->counts[k].name, strlen(r[i]->counts[k].name));
      if (rc == 0) rc = trun_buf_append_u64(b, r[i]->counts[k].n);
    }
  }
  free(r);
  return rc;
}

/* The analysis of one communicator's present ranks: its collective kinds and a table of counts, rank by
 * kind, so that every step below is O(ranks x kinds) or a sort (a hostile answer of 100,000 ranks costs a
 * fraction of a second, not ranks squared). */
typedef struct {
  size_t np, nk;
  char kind[MAX_KINDS][24];
  bool overflow; /* more kinds than MAX_KINDS */
  uint64_t *m;   /* m[i * nk + k]: present rank i's count of kind k (0 when it lists none) */
} table;

static int table_build(const trun_ras_comm *c, table *T) {
  T->np = c->npresent;
  T->nk = 0;
  T->overflow = false;
  T->m = NULL;
  for (size_t i = 0; i < T->np; i++)
    for (size_t k = 0; k < c->ranks[i].nkinds; k++) {
      const char *name = c->ranks[i].counts[k].name;
      size_t j = 0;
      while (j < T->nk && strcmp(T->kind[j], name) != 0) j++;
      if (j < T->nk) continue;
      if (T->nk == MAX_KINDS) {
        T->overflow = true;
        continue;
      }
      snprintf(T->kind[T->nk++], sizeof(T->kind[0]), "%s", name);
    }
  size_t cells = T->np * T->nk; /* at most TRUN_RAS_MAX_SIZE x MAX_KINDS */
  T->m = calloc(cells ? cells : 1, sizeof(uint64_t));
  if (!T->m) return -ENOMEM;
  for (size_t i = 0; i < T->np; i++)
    for (size_t k = 0; k < c->ranks[i].nkinds; k++)
      for (size_t j = 0; j < T->nk; j++)
        if (strcmp(T->kind[j], c->ranks[i].counts[k].name) == 0) {
          T->m[i * T->nk + j] = c->ranks[i].counts[k].n;
          break;
        }
  return 0;
}

static const uint64_t *row(const table *T, size_t i) { return T->m + i * T->nk; }

static bool same_row(const table *T, size_t a, size_t b) {
  return T->nk == 0 || memcmp(row(T, a), row(T, b), T->nk * sizeof(uint64_t)) == 0;
}

/* 1 when the present ranks disagree on some count, or some rank is missing or unaccounted for. */
static bool disagree(const trun_ras_comm *c, const table *T) {
  if (c->npresent < (size_t)c->size || T->overflow) return true;
  for (size_t i = 1; i < T->np; i++)
    if (!same_row(T, 0, i)) return true;
  return false;
}

static int cmp_rows(const void *a, const void *b, void *arg) {
  const table *T = arg;
  const uint64_t *x = row(T, *(const size_t *)a), *y = row(T, *(const size_t *)b);
  for (size_t k = 0; k < T->nk; k++)
    if (x[k] != y[k]) return x[k] < y[k] ? -1 : 1;
  return 0;
}

static void add_culprit(trun_hang_comm *h, const trun_ras_rank *r, const char *why) {
  if (h->nculprits < TRUN_HANG_MAX_CULPRITS) {
    trun_hang_culprit *u = &h->culprit[h->nculprits];
    u->rank = r->rank;
    u->pid = r->pid;
    u->cuda_dev = r->cuda_dev;
    snprintf(u->host, sizeof(u->host), "%s", r->host);
    snprintf(u->why, sizeof(u->why), "%s", why);
  }
  h->nculprits++;
}

/* "launched AllReduce up to 50 (others 51), Broadcast up to 1 (others 0)": rank i's counts against ref. */
static void why_counts(char *out, size_t outlen, const table *T, size_t i, const uint64_t *ref) {
  size_t o = 0;
  out[0] = '\0';
  for (size_t k = 0; k < T->nk; k++) {
    uint64_t n = row(T, i)[k];
    if (n == ref[k]) continue;
    int w = snprintf(out + o, outlen - o, "%s%s up to %llu (others %llu)", o ? ", " : "launched ", T->kind[k],
                     (unsigned long long)n, (unsigned long long)ref[k]);
    if (w < 0 || (size_t)w >= outlen - o) break;
    o += (size_t)w;
  }
}

/* The largest group of present ranks with identical counts: its first rank in *best and its size; *tie when
 * another group is as large. */
static int largest_group(const table *T, size_t *best, size_t *bestn, bool *tie) {
  size_t *idx = malloc((T->np ? T->np : 1) * sizeof(*idx));
  if (!idx) return -ENOMEM;
  for (size_t i = 0; i < T->np; i++) idx[i] = i;
  qsort_r(idx, T->np, sizeof(*idx), cmp_rows, (void *)T);
  *bestn = 0;
  *tie = false;
  for (size_t a = 0; a < T->np;) {
    size_t b = a + 1;
    while (b < T->np && same_row(T, idx[a], idx[b])) b++;
    if (b - a > *bestn)
      *best = idx[a], *bestn = b - a, *tie = false;
    else if (b - a == *bestn)
      *tie = true;
    a = b;
  }
  free(idx);
  return 0;
}

/* Names the culprits and the waiters of a hung communicator into h. */
static void attribute(const trun_ras_comm *c, const table *T, trun_hang_comm *h) {
  size_t np = T->np, nk = T->nk;
  uint64_t ref[MAX_KINDS], max[MAX_KINDS];
  char why[160];
  bool *culprit = calloc(np ? np : 1, sizeof(bool));
  if (!culprit) return; /* the line still says hung; no names */
  for (size_t k = 0; k < nk; k++) {
    max[k] = 0;
    for (size_t i = 0; i < np; i++)
      if (row(T, i)[k] > max[k]) max[k] = row(T, i)[k];
  }
  /* Ranks behind in no kind: they launched everything anyone launched. */
  size_t ahead = 0;
  for (size_t i = 0; i < np; i++) {
    bool behind = false;
    for (size_t k = 0; k < nk && !behind; k++) behind = row(T, i)[k] < max[k];
    culprit[i] = behind;
    ahead += !behind;
  }
  if (nk) memcpy(ref, max, nk * sizeof(ref[0]));
  if (ahead > 0 && ahead < np) {
    h->nwaiters = ahead;
  } else if (ahead == 0 && np > 0) {
    /* A mismatch: the largest group of ranks with identical counts is the reference, when it is the only one
     * of its size. */
    size_t best = 0, bestn = 0;
    bool tie = true;
    if (largest_group(T, &best, &bestn, &tie) == 0 && !tie && bestn > 0) {
      memcpy(ref, row(T, best), nk * sizeof(ref[0]));
      for (size_t i = 0; i < np; i++) culprit[i] = !same_row(T, i, best);
      h->nwaiters = bestn;
    } else {
      for (size_t i = 0; i < np; i++) culprit[i] = true;
      h->nwaiters = 0;
    }
  } else {
    /* Every present rank agrees: only missing ranks are to blame. */
    for (size_t i = 0; i < np; i++) culprit[i] = false;
    h->nwaiters = np;
  }
  /* What the waiters wait in: the kind where the reference is ahead of the most culprits. */
  size_t bestk = SIZE_MAX, bestc = 0;
  for (size_t k = 0; k < nk && h->nwaiters; k++) {
    size_t behind = 0;
    for (size_t i = 0; i < np; i++) behind += culprit[i] && row(T, i)[k] < ref[k];
    if (behind > bestc) bestk = k, bestc = behind;
  }
  if (bestk != SIZE_MAX) {
    snprintf(h->wait_kind, sizeof(h->wait_kind), "%s", T->kind[bestk]);
    h->wait_n = ref[bestk];
  }
  for (size_t i = 0; i < np; i++) {
    if (!culprit[i]) continue;
    if (h->nwaiters == 0)
      snprintf(why, sizeof(why), "ranks disagree on the order of collectives and no group is the largest");
    else
      why_counts(why, sizeof(why), T, i, ref);
    add_culprit(h, &c->ranks[i], why);
  }
  for (size_t i = np; i < c->nranks; i++) {
    const trun_ras_rank *r = &c->ranks[i];
    add_culprit(h, r,
                r->dead           ? "missing from RAS (its process is considered dead)"
                : r->unresponsive ? "missing from RAS (its process does not answer)"
                                  : "missing from RAS");
  }
  free(culprit);
}

/* The one line for people. */
static void make_line(const trun_ras_comm *c, trun_hang_comm *h) {
  size_t o = 0, L = sizeof(h->line);
  int w = snprintf(h->line, L, "communicator %s (%d ranks): counts frozen for %.0f s:", h->hash, h->size,
                   h->frozen_s);
  o = w > 0 && (size_t)w < L ? (size_t)w : L - 1;
  for (size_t i = 0; i < h->nculprits && i < 4 && o < L - 1; i++) {
    const trun_hang_culprit *u = &h->culprit[i];
    w = snprintf(h->line + o, L - o, "%s rank %d (pid %ld on %s, GPU %d) %s", i ? ";" : "", u->rank, u->pid,
                 u->host, u->cuda_dev, u->why);
    o = w > 0 && (size_t)w < L - o ? o + (size_t)w : L - 1;
  }
  if (h->nculprits > 4 && o < L - 1) {
    w = snprintf(h->line + o, L - o, "; and %zu more ranks", h->nculprits - 4);
    o = w > 0 && (size_t)w < L - o ? o + (size_t)w : L - 1;
  }
  size_t unaccounted = (size_t)c->size - c->nranks;
  if (unaccounted && o < L - 1) {
    w = snprintf(h->line + o, L - o, "; %zu ranks not reported by RAS", unaccounted);
    o = w > 0 && (size_t)w < L - o ? o + (size_t)w : L - 1;
  }
  if (h->wait_kind[0] && o < L - 1)
    snprintf(h->line + o, L - o, "; %zu rank%s wait in %s %llu", h->nwaiters, h->nwaiters == 1 ? "" : "s",
             h->wait_kind, (unsigned long long)h->wait_n);
}

static tracked *find(trun_hang_detector *d, const trun_ras_comm *c, size_t hint) {
  if (hint < d->n && strcmp(d->c[hint].hash, c->hash) == 0 && strcmp(d->c[hint].secondary, c->secondary) == 0)
    return &d->c[hint];
  for (size_t i = 0; i < d->n; i++)
    if (strcmp(d->c[i].hash, c->hash) == 0 && strcmp(d->c[i].secondary, c->secondary) == 0) return &d->c[i];
  return NULL;
}

/* The tracked entry of the snapshot's communicator i, added when new (seen at t); NULL when out of memory.
 * Growing the array moves the entries: those of communicators 0..i-1 (tr) are found again. */
static tracked *track(trun_hang_detector *d, const trun_ras_snapshot *s, size_t i, tracked **tr, double t) {
  const trun_ras_comm *c = &s->comms[i];
  tracked *x = find(d, c, i);
  if (x) return x;
  if (d->n == d->cap) {
    size_t nc = d->cap ? d->cap * 2 : 8;
    tracked *g = realloc(d->c, nc * sizeof(*g));
    if (!g) return NULL;
    d->c = g, d->cap = nc;
    for (size_t k = 0; k < s->ncomms; k++) tr[k] = NULL; /* pointers moved: found again below */
    for (size_t k = 0; k < i; k++) tr[k] = find(d, &s->comms[k], k);
  }
  x = &d->c[d->n++];
  memset(x, 0, sizeof(*x));
  snprintf(x->hash, sizeof(x->hash), "%s", c->hash);
  snprintf(x->secondary, sizeof(x->secondary), "%s", c->secondary);
  x->since = -1;
  x->moved = t;
  return x;
}

/* Communicator c's answer at t, its counts' signature in sig (taken over by x): 1 when its ranks have
 * disagreed with the counts frozen for the window, 0 not, or -ENOMEM. */
static int observe(const trun_hang_detector *d, tracked *x, const trun_ras_comm *c, trun_buf *sig, double t) {
  table T;
  int rc = table_build(c, &T);
  if (rc) {
    free(T.m);
    trun_buf_free(sig);
    return rc;
  }
  bool frozen = x->sig.len == sig->len && memcmp(x->sig.data, sig->data, sig->len) == 0;
  bool differ = disagree(c, &T);
  free(T.m);
  if (!frozen) x->moved = t;
  if (!differ) {
    x->since = -1;
    x->reported = false;
  } else if (!frozen || x->since < 0) {
    x->since = t;
    x->reported = false;
  }
  trun_buf_free(&x->sig);
  x->sig = *sig;
  return x->since >= 0 && t - x->since >= d->window;
}

/* v's entries for the nhung hung communicators (hung[i], tracked as tr[i]): those not reported before
 * first (counted in nfresh), then the others; each is marked reported. 0 or -ENOMEM. */
static int fill_verdict(const trun_ras_snapshot *s, const bool *hung, tracked **tr, size_t nhung, double t,
                        trun_hang_verdict *v) {
  if (nhung == 0) return 0;
  v->comm = calloc(nhung, sizeof(*v->comm));
  if (!v->comm) return -ENOMEM;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < s->ncomms; i++) {
      if (!hung[i] || !tr[i] || tr[i]->reported != (pass == 1)) continue;
      const trun_ras_comm *c = &s->comms[i];
      trun_hang_comm *h = &v->comm[v->ncomms++];
      snprintf(h->hash, sizeof(h->hash), "%s", c->hash);
      h->size = c->size;
      h->frozen_s = t - tr[i]->since;
      table T;
      if (table_build(c, &T) == 0) attribute(c, &T, h);
      free(T.m);
      make_line(c, h);
      if (pass == 0) v->nfresh++;
    }
  for (size_t i = 0; i < s->ncomms; i++)
    if (hung[i] && tr[i]) tr[i]->reported = true;
  return 0;
}

/* Forgets the communicators the last snapshot did not list. */
static void forget_unseen(trun_hang_detector *d) {
  size_t w = 0;
  for (size_t i = 0; i < d->n; i++) {
    if (d->c[i].seen)
      d->c[w++] = d->c[i];
    else
      trun_buf_free(&d->c[i].sig);
  }
  d->n = w;
}

int trun_hang_feed(trun_hang_detector *d, const trun_ras_snapshot *s, double t, trun_hang_verdict *v) {
  memset(v, 0, sizeof(*v));
  if (t < d->last_t) t = d->last_t;
  d->last_t = t;
  for (size_t i = 0; i < d->n; i++) d->c[i].seen = false;
  size_t nhung = 0;
  bool *hung = calloc(s->ncomms ? s->ncomms : 1, sizeof(bool));
  tracked **tr = calloc(s->ncomms ? s->ncomms : 1, sizeof(*tr));
  if (!hung || !tr) {
    free(hung);
    free(tr);
    return -ENOMEM;
  }
  int rc = 0;
  for (size_t i = 0; i < s->ncomms && rc == 0; i++) {
    trun_buf sig = {0};
    if ((rc = canonical(&s->comms[i], &sig))) break;
    tracked *x = track(d, s, i, tr, t);
    if (!x) {
      trun_buf_free(&sig);
      rc = -ENOMEM;
      break;
    }
    if (x->seen) { /* listed twice (the reader refuses it; a caller's own snapshot may not) */
      trun_buf_free(&sig);
      continue;
    }
    x->seen = true;
    tr[i] = x;
    int h = observe(d, x, &s->comms[i], &sig, t);
    if (h < 0) rc = h;
    if (h > 0) hung[i] = true, nhung++;
  }
  if (rc == 0) rc = fill_verdict(s, hung, tr, nhung, t, v);
  if (rc == 0) forget_unseen(d); /* on an error every communicator is kept */
  free(hung);
  free(tr);
  if (rc) {
    trun_hang_verdict_clear(v);
    return rc;
  }
  return (int)v->ncomms;
}

double trun_hang_quiet_s(const trun_hang_detector *d) {
  double q = 0;
  for (size_t i = 0; i < d->n; i++)
    if (d->c[i].seen && d->c[i].since < 0 && d->last_t - d->c[i].moved > q) q = d->last_t - d->c[i].moved;
  return q;
}
