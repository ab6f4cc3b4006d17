/* trun's fast elastic rendezvous: see trun/fast.h. */
#include "fast.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/rdzv/rdzv_int.h" /* the round end's values (trun__rdzv_end_encode) */
#include "base/base.h"
#include "store/store.h"

void trun_fast_init(trun_fast *f, trun_client *c, const char *run_id, const char *addr, int64_t pid,
                    int nproc, int hint, const trun_fast_settings *s) {
  memset(f, 0, sizeof(*f));
  f->c = c;
  f->s = *s;
  snprintf(f->base, sizeof(f->base), "/trun/%s/", run_id);
  snprintf(f->addr, sizeof(f->addr), "%s", addr);
  f->pid = pid;
  f->nproc = nproc;
  f->hint = hint;
  f->round = -1;
}

/* "<base>r<round>/<tail>" (round < 0: "<base><tail>"). */
static void key(const trun_fast *f, char *out, size_t len, int64_t round, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void key(const trun_fast *f, char *out, size_t len, int64_t round, const char *fmt, ...) {
  char tail[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tail, sizeof(tail), fmt, ap);
  va_end(ap);
  int n = round < 0 ? snprintf(out, len, "%s%s", f->base, tail)
                    : snprintf(out, len, "%sr%lld/%s", f->base, (long long)round, tail);
  if (n < 0 || (size_t)n >= len) out[0] = '\0';
}

/* ---- store operations, counted ---------------------------------------------------------------------- */

static int op_add(trun_fast *f, const char *k, int64_t d, int64_t *out) {
  f->ops++;
  f->bytes_out += strlen(k) + 8;
  f->bytes_in += 8;
  return trun_client_add(f->c, trun_str(k), d, out);
}

static int op_set(trun_fast *f, const char *k, const char *v) {
  f->ops++;
  f->bytes_out += strlen(k) + strlen(v);
  return trun_client_set(f->c, trun_str(k), trun_str(v));
}

/* compare_set; the stored value afterwards into out (NUL-terminated). */
static int op_cas(trun_fast *f, const char *k, const char *expect, const char *want, char *out, size_t len) {
  trun_buf b = {0};
  f->ops++;
  f->bytes_out += strlen(k) + strlen(expect) + strlen(want);
  int rc = trun_client_compare_set(f->c, trun_str(k), trun_str(expect), trun_str(want), &b);
  if (rc == 0) {
    f->bytes_in += b.len;
    size_t n = b.len < len - 1 ? b.len : len - 1;
    memcpy(out, b.data, n);
    out[n] = '\0';
  }
  trun_buf_free(&b);
  return rc;
}

static int op_get(trun_fast *f, const char *k, char *out, size_t len) {
  trun_buf b = {0};
  f->ops++;
  f->bytes_out += strlen(k);
  int rc = trun_client_get(f->c, trun_str(k), &b, 30000);
  if (rc == 0) {
    f->bytes_in += b.len;
    size_t n = b.len < len - 1 ? b.len : len - 1;
    memcpy(out, b.data, n);
    out[n] = '\0';
  }
  trun_buf_free(&b);
  return rc;
}

/* Waits until k exists, at most timeout_ms (< 0: forever), in 1 s slices when a poll hook is set. 0,
 * -ETIMEDOUT, -EINTR, or a negative errno. */
static int op_wait(trun_fast *f, const char *k, int timeout_ms) {
  trun_slice s = trun_str(k);
  double end = timeout_ms < 0 ? 1e300 : trun_mono_s() + timeout_ms / 1000.0;
  for (;;) {
    double left = end - trun_mono_s();
    if (left <= 0) return -ETIMEDOUT;
    int slice = (f->poll || left > 3600) ? 1000 : (int)(left * 1000) + 1;
    if (slice > left * 1000 + 1) slice = (int)(left * 1000) + 1;
    f->ops++;
    f->bytes_out += strlen(k);
    int rc = trun_client_wait(f->c, 1, &s, slice);
    if (rc != -ETIMEDOUT) return rc;
    if (f->poll && f->poll(f->poll_arg)) return -EINTR;
  }
}

/* ---- the round ------------------------------------------------------------------------------------ */

typedef struct {
  int index, nproc, hint;
  int64_t pid;
  const char *addr;
  int rank;
} member;

static int cmp_member(const void *pa, const void *pb) {
  const member *a = pa, *b = pb;
  int c = strcmp(a->addr, b->addr);
  if (c) return c;
  if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
  return a->index - b->index;
}

/* Ranks: nodes with a usable, unique --node-rank hint keep it; the rest fill the free ranks in
 * (address, pid) order. */
static void order(member *m, int n) {
  char *taken = calloc((size_t)n, 1);
  member *rest = malloc((size_t)n * sizeof(*rest));
  if (taken == NULL || rest == NULL) {
    free(taken), free(rest);
    for (int i = 0; i < n; i++) m[i].rank = i;
    return;
  }
  int nr = 0;
  for (int i = 0; i < n; i++) {
    m[i].rank = -1;
    if (m[i].hint >= 0 && m[i].hint < n && !taken[m[i].hint]) {
      taken[m[i].hint] = 1;
      m[i].rank = m[i].hint;
    }
  }
  for (int i = 0; i < n; i++)
    if (m[i].rank < 0) rest[nr++] = m[i];
  qsort(rest, (size_t)nr, sizeof(*rest), cmp_member);
  int next = 0;
  for (int j = 0; j < nr; j++) {
    while (taken[next]) next++;
    taken[next] = 1;
    m[rest[j].index - 1].rank = next;
  }
  free(taken), free(rest);
}

/* The coordinator: reads every descriptor (one MULTI_GET), orders the nodes, writes every assignment (one
 * MULTI_SET). */
static int coordinate(trun_fast *f, int64_t R, int n) {
  char **names = calloc((size_t)n, sizeof(char *));
  char **vals_s = calloc((size_t)n, sizeof(char *));
  trun_slice *keys = calloc((size_t)n, sizeof(*keys));
  trun_slice *vals = calloc((size_t)n, sizeof(*vals));
  trun_buf *got = calloc((size_t)n, sizeof(*got));
  member *m = calloc((size_t)n, sizeof(*m));
  int rc = names && vals_s && keys && vals && got && m ? 0 : -ENOMEM;
  char k[320], cur[32];
  /* Round 0's joiners did not read the round counter: it starts here, before any round can end. */
  key(f, k, sizeof(k), -1, "round");
  if (rc == 0 && R == 0) rc = op_cas(f, k, "", "0", cur, sizeof(cur));
  for (int i = 0; rc == 0 && i < n; i++) {
    key(f, k, sizeof(k), R, "node/%d", i + 1);
    if ((names[i] = strdup(k)) == NULL) rc = -ENOMEM;
    if (rc == 0) keys[i] = trun_str(names[i]);
  }
  if (rc == 0) {
    f->ops += 2;
    for (int i = 0; i < n; i++) f->bytes_out += keys[i].n;
    rc = trun_client_multi_get(f->c, (size_t)n, keys, got, f->s.join_timeout_ms);
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    f->bytes_in += got[i].len;
    if (trun_buf_append_u8(&got[i], 0) < 0) {
      rc = -ENOMEM;
      break;
    }
    char *s = (char *)got[i].data;
    int off = 0;
    long long pid;
    m[i].index = i + 1;
    if (sscanf(s, "%d %d %lld %n", &m[i].nproc, &m[i].hint, &pid, &off) != 3 || off == 0 || m[i].nproc < 0) {
      snprintf(f->err, sizeof(f->err), "round %lld: node %d published '%.60s', not a trun descriptor",
               (long long)R, i + 1, s);
      rc = -EPROTO;
      break;
    }
    m[i].pid = pid;
    m[i].addr = s + off;
  }
  if (rc == 0) {
    order(m, n);
    /* base rank = workers of every node ranked before it */
    int *nproc_by_rank = calloc((size_t)n, sizeof(int));
    if (nproc_by_rank == NULL) rc = -ENOMEM;
    int total = 0;
    for (int i = 0; rc == 0 && i < n; i++) nproc_by_rank[m[i].rank] = m[i].nproc, total += m[i].nproc;
    for (int r = 1; rc == 0 && r < n; r++) nproc_by_rank[r] += nproc_by_rank[r - 1];
    for (int i = 0; rc == 0 && i < n; i++) {
      int base = m[i].rank == 0 ? 0 : nproc_by_rank[m[i].rank - 1];
      key(f, k, sizeof(k), R, "assign/%d", i + 1);
      free(names[i]);
      names[i] = strdup(k);
      if (names[i] == NULL || asprintf(&vals_s[i], "%d %d %d %d", m[i].rank, n, base, total) < 0) {
        vals_s[i] = NULL;
        rc = -ENOMEM;
        break;
      }
      keys[i] = trun_str(names[i]);
      vals[i] = trun_str(vals_s[i]);
      f->bytes_out += keys[i].n + vals[i].n;
    }
    free(nproc_by_rank);
  }
  if (rc == 0 && f->on_commit) rc = f->on_commit(f->on_commit_arg);
  if (rc == 0) {
    f->ops++;
    rc = trun_client_multi_set(f->c, (size_t)n, keys, vals);
  }
  for (int i = 0; i < n; i++) {
    if (names) free(names[i]);
    if (vals_s) free(vals_s[i]);
    if (got) trun_buf_free(&got[i]);
  }
  free(names), free(vals_s), free(keys), free(vals), free(got), free(m);
  return rc;
}

/* Commits round R with n participants (the first value written wins) and, when this node wins the
 * coordinator election, assigns the ranks. */
static int commit(trun_fast *f, int64_t R, int n) {
  char k[320], v[32], out[32];
  key(f, k, sizeof(k), R, "commit");
  snprintf(v, sizeof(v), "%d", n);
  int rc = op_cas(f, k, "", v, out, sizeof(out));
  if (rc < 0) return rc;
  int64_t c = 0;
  key(f, k, sizeof(k), R, "coord");
  if ((rc = op_add(f, k, 1, &c)) < 0) return rc;
  if (c != 1) return 0;
  f->coordinator = 1;
  return coordinate(f, R, atoi(out));
}

/* Moves the round counter on from R to R + 1 (the first to ask wins; a counter already beyond R stays).
 * 0 or <0. */
static int next_round(trun_fast *f, int64_t R) {
  char k[320], cur[32], next[32], out[64];
  snprintf(cur, sizeof(cur), "%lld", (long long)R);
  snprintf(next, sizeof(next), "%lld", (long long)R + 1);
  key(f, k, sizeof(k), -1, "round");
  return op_cas(f, k, cur, next, out, sizeof(out));
}

/* How many nodes joined round R so far (its seq counter). 0 or <0. */
static int joined(trun_fast *f, int64_t R, int64_t *n) {
  char k[320];
  key(f, k, sizeof(k), R, "seq");
  *n = 0;
  return op_add(f, k, 0, n);
}

/* f->err for a failed store request; returns rc. */
static int store_failed(trun_fast *f, int rc) {
  snprintf(f->err, sizeof(f->err), "rendezvous store request failed: %s", strerror(-rc));
  return rc;
}

/* f->err for a failed wait or step, unless it says why already; returns rc. */
static int join_failed(trun_fast *f, int rc) {
  if (f->err[0] == '\0' || rc == -EINTR)
    snprintf(f->err, sizeof(f->err), "%s",
             rc == -EINTR       ? "interrupted by a signal"
             : rc == -ETIMEDOUT ? "timed out waiting for the other nodes"
                                : strerror(-rc));
  return rc;
}

/* A node that came after round R was committed (or beyond MAX): asks for a new round unless it is a spare
 * (R is full), then waits for R to end. 0 (join again), -ECANCELED (R ended the job), other negative. */
static int late(trun_fast *f, int64_t R, double deadline) {
  char k[320], v[64];
  int64_t w;
  key(f, k, sizeof(k), R, "waiting");
  int rc = op_add(f, k, 1, &w);
  key(f, k, sizeof(k), R, "commit");
  if (rc == 0) rc = op_wait(f, k, -1);
  if (rc == 0) rc = op_get(f, k, v, sizeof(v));
  if (rc < 0) return rc;
  int spare = atoi(v) >= f->s.max_nodes;
  if (!spare) {
    trun_debug("rendezvous %s round %lld is running with %s node(s): asking for a new round", f->base,
               (long long)R, v);
    key(f, k, sizeof(k), R, "end");
    char join[32];
    trun__rdzv_end_encode(TRUN_RDZV_END_MEMBER, -1, "join", join, sizeof(join));
    if ((rc = op_cas(f, k, "", join, v, sizeof(v))) < 0) return rc;
  }
  key(f, k, sizeof(k), R, "end");
  double left = deadline - trun_mono_s();
  if (!spare && left <= 0) return -ETIMEDOUT;
  if ((rc = op_wait(f, k, spare ? -1 : (int)(left * 1000))) < 0) return rc;
  if ((rc = op_get(f, k, v, sizeof(v))) < 0) return rc;
  if (strcmp(v, "ok") == 0) {
    snprintf(f->err, sizeof(f->err), "the job finished before this node could join (round %lld ended ok)",
             (long long)R);
    return -ECANCELED;
  }
  return next_round(f, R);
}

/* A counter of round R's key space (0 when absent: the check keeps ADD from creating it). 0 or <0. */
static int counter(trun_fast *f, int64_t R, const char *name, int64_t *out) {
  char k[320];
  key(f, k, sizeof(k), R, "%s", name);
  trun_slice s = trun_str(k);
  *out = 0;
  int rc = trun_client_check(f->c, 1, &s);
  if (rc < 0) return rc;
  return rc == 1 ? op_add(f, k, 0, out) : 0;
}

/* Recovery (issues 22 and 39): the round after round prev (prev_world nodes) waits for the nodes of the last
 * round, less those that liveness found lost (lost_n in prev's key space, rdzv_live.c), plus those that came
 * late to prev and wait for the next round (waiting, read once by the caller: new members, spares), at most
 * MAX, and commits without the last call as soon as that many joined. After a worker's failure no node is
 * lost: all of them come back. 0 when there is nothing to expect (the first round, or fewer than MIN would
 * remain). */
static int64_t survivors(trun_fast *f, int64_t prev, int prev_world, int64_t waiting) {
  if (prev < 0 || prev_world < 1) return 0;
  int64_t lost = 0;
  if (counter(f, prev, "lost_n", &lost) < 0) return 0;
  if (lost < 0) lost = 0;
  if (waiting < 0) waiting = 0;
  int64_t e = prev_world - lost + waiting;
  if (e > f->s.max_nodes) e = f->s.max_nodes;
  return e >= f->s.min_nodes && e > 0 ? e : 0;
}

/* Commits round R at once when every survivor of the last round joined it. 1 committed, 0 not yet, <0. */
static int commit_survivors(trun_fast *f, int64_t R, int64_t expect) {
  if (expect <= 0) return 0;
  char k[320];
  int64_t n = 0;
  key(f, k, sizeof(k), R, "seq");
  int rc = op_add(f, k, 0, &n);
  if (rc < 0) return rc;
  if (n < expect) return 0;
  if (n > f->s.max_nodes) n = f->s.max_nodes;
  trun_debug(
      "rendezvous %s round %lld: the %lld node(s) expected from the last round are back: committing "
      "without the last call",
      f->base, (long long)R, (long long)expect);
  rc = commit(f, R, (int)n);
  return rc < 0 ? rc : 1;
}

/* Waits until round R, joined as number i, is committed: at MAX, by the last call (once MIN nodes are in, on
 * every node's own clock), or, after a failure or a loss in round prev (prev_world nodes), as soon as the
 * nodes of the last round are back (survivors). 0 once the commit key exists, <0 with f->err set. */
static int await_commit(trun_fast *f, int64_t R, int64_t i, int64_t prev, int prev_world, double deadline) {
  char k[320];
  int64_t n = 0, waiting = 0;
  double last_call = i >= f->s.min_nodes ? trun_mono_s() : -1;
  /* Late nodes count themselves in prev's "waiting" while prev runs: read once (one that counts itself as
   * prev ends joins as a scale-up). A loss may still be recorded after this join: lost_n is read at every
   * look. */
  if (prev >= 0 && counter(f, prev, "waiting", &waiting) < 0) waiting = 0;
  int rc = commit_survivors(f, R, survivors(f, prev, prev_world, waiting));
  if (rc < 0) return join_failed(f, rc);
  key(f, k, sizeof(k), R, "commit");
  for (;;) {
    double now = trun_mono_s();
    if (now > deadline) {
      joined(f, R, &n);
      snprintf(
          f->err, sizeof(f->err),
          "round %lld: %lld node(s) joined within the join timeout of %d s; --nnodes asks for at least %d",
          (long long)R, (long long)n, f->s.join_timeout_ms / 1000, f->s.min_nodes);
      return -ETIMEDOUT;
    }
    int slice = prev >= 0 ? 200 : 1000; /* a survivor looks again sooner */
    if (last_call >= 0) {
      int lc_left = (int)((last_call + f->s.last_call_ms / 1000.0 - now) * 1000);
      if (lc_left < slice) slice = lc_left > 0 ? lc_left : 0;
    }
    rc = slice > 0 ? op_wait(f, k, slice) : -ETIMEDOUT;
    if (rc != -ETIMEDOUT) return rc == 0 ? 0 : join_failed(f, rc);
    if (prev >= 0) { /* a loss may be recorded after the join: the expectation is read again */
      int c = commit_survivors(f, R, survivors(f, prev, prev_world, waiting));
      if (c != 0) return c < 0 ? join_failed(f, c) : 0; /* committed (ours or the winner's) */
    }
    if (last_call >= 0 && trun_mono_s() >= last_call + f->s.last_call_ms / 1000.0) {
      if ((rc = joined(f, R, &n)) < 0) return store_failed(f, rc);
      rc = commit(f, R, (int)(n > f->s.max_nodes ? f->s.max_nodes : n));
      return rc < 0 ? join_failed(f, rc) : 0; /* committed (ours or the winner's) */
    }
    if (last_call < 0) {
      if ((rc = joined(f, R, &n)) < 0) return store_failed(f, rc);
      if (n >= f->s.min_nodes) last_call = trun_mono_s();
    }
  }
}

/* Waits up to timeout_ms for node number i's assignment in round R, then takes it into f. 0, -ETIMEDOUT
 * (the wait's, f->err untouched), other <0 with f->err set. */
static int take_assignment(trun_fast *f, int64_t R, int64_t i, int timeout_ms) {
  char k[320], v[400];
  key(f, k, sizeof(k), R, "assign/%lld", (long long)i);
  int rc = timeout_ms > 0 ? op_wait(f, k, timeout_ms) : -ETIMEDOUT;
  if (rc == -ETIMEDOUT) return rc;
  if (rc < 0) return join_failed(f, rc);
  if ((rc = op_get(f, k, v, sizeof(v))) < 0) return store_failed(f, rc);
  if (sscanf(v, "%d %d %d %d", &f->group_rank, &f->group_world, &f->base_rank, &f->world_size) != 4) {
    snprintf(f->err, sizeof(f->err), "round %lld: assignment '%.60s' is not trun's", (long long)R, v);
    return -EPROTO;
  }
  f->round = R;
  f->index = (int)i;
  f->succ_seen = -1;
  f->succ_since = trun_mono_s();
  return 0;
}

/* Round R as a member, number i (1..MAX): writes this node's entry, commits at MAX and waits for its
 * assignment. 0 (assigned), 1 (the round was committed without this node: it is late), <0 with f->err. */
static int join_as(trun_fast *f, int64_t R, int64_t i, int64_t prev, int prev_world, double deadline) {
  char k[320], v[400], out[64];
  int64_t n = 0;
  key(f, k, sizeof(k), R, "node/%lld", (long long)i);
  snprintf(v, sizeof(v), "%d %d %lld %s", f->nproc, f->hint, (long long)f->pid, f->addr);
  int rc = op_set(f, k, v);
  if (rc < 0) return store_failed(f, rc);
  if (i == f->s.max_nodes && (rc = commit(f, R, (int)i)) < 0) return join_failed(f, rc);
  if (f->s.min_nodes == f->s.max_nodes) {
    /* A fixed size commits only when the last node joins: wait for the assignment itself. */
    double left = deadline - trun_mono_s();
    rc = take_assignment(f, R, i, left > 0 ? (int)(left * 1000) : 0);
    if (rc == -ETIMEDOUT) {
      joined(f, R, &n);
      snprintf(f->err, sizeof(f->err),
               "round %lld: %lld of %d node(s) joined within the join timeout of %d s", (long long)R,
               (long long)n, f->s.max_nodes, f->s.join_timeout_ms / 1000);
    }
    return rc;
  }
  if ((rc = await_commit(f, R, i, prev, prev_world, deadline)) < 0) return rc;
  key(f, k, sizeof(k), R, "commit");
  if ((rc = op_get(f, k, out, sizeof(out))) < 0) return store_failed(f, rc);
  if (i > atoi(out)) return 1; /* it came after the commit: its number is beyond the committed count */
  rc = take_assignment(f, R, i, f->s.join_timeout_ms);
  return rc == -ETIMEDOUT ? join_failed(f, rc) : rc;
}

int trun_fast_join(trun_fast *f) {
  char k[320], out[64];
  double deadline = trun_mono_s() + f->s.join_timeout_ms / 1000.0;
  int64_t prev = f->round;
  int prev_world = f->group_world;
  int rc;
  f->coordinator = 0;
  /* The last round is over for this node: the round counter moves on. */
  if (f->round >= 0 && (rc = next_round(f, f->round)) < 0) return store_failed(f, rc);
  /* A node's first join goes straight for round 0 (one operation less at job start): a node that comes
   * later finds round 0 committed, takes the late path, and learns the current round (or "closed") there. */
  for (int guess = f->round < 0;; guess = 0) {
    int64_t R = 0, i = 0;
    if (!guess) {
      /* One compare_set creates the round counter or reads it; "closed" ends the rendezvous for good. */
      key(f, k, sizeof(k), -1, "round");
      if ((rc = op_cas(f, k, "", "0", out, sizeof(out))) < 0) return store_failed(f, rc);
      if (strcmp(out, "closed") == 0) {
        snprintf(f->err, sizeof(f->err), "the rendezvous is closed (the job ended); use a new --rdzv-id");
        return -ECANCELED;
      }
      R = atoll(out);
    }
    key(f, k, sizeof(k), R, "seq");
    if ((rc = op_add(f, k, 1, &i)) < 0) return store_failed(f, rc);
    trun_debug("rendezvous %s round %lld: joined as number %lld", f->base, (long long)R, (long long)i);
    if (i <= f->s.max_nodes && (rc = join_as(f, R, i, prev, prev_world, deadline)) <= 0) return rc;
    if ((rc = late(f, R, deadline)) < 0) return join_failed(f, rc);
  }
}

int trun_fast_tick(trun_fast *f) {
  char k[320];
  int64_t v = 0;
  key(f, k, sizeof(k), f->round, "hb/%d", f->group_rank);
  int rc = op_add(f, k, 1, &v);
  if (rc < 0 || f->group_world < 2) return rc;
  int succ = (f->group_rank + 1) % f->group_world;
  key(f, k, sizeof(k), f->round, "hb/%d", succ);
  if ((rc = op_add(f, k, 0, &v)) < 0) return rc;
  double now = trun_mono_s();
  if (v != f->succ_seen) {
    f->succ_seen = v;
    f->succ_since = now;
    return 0;
  }
  if (now - f->succ_since <= f->s.keep_alive_ms / 1000.0 * f->s.keep_alive_max_attempt) return 0;
  char lost[32], why[64];
  snprintf(lost, sizeof(lost), "lost:%d", succ);
  trun__rdzv_end_encode(TRUN_RDZV_END_MEMBER, -1, lost, why, sizeof(why));
  trun_warn(
      "node rank %d sent no heartbeat for %.0f s: ending round %lld so that the others go on without it",
      succ, now - f->succ_since, (long long)f->round);
  rc = trun_fast_end(f, why);
  return rc < 0 ? rc : 1;
}

int trun_fast_end(trun_fast *f, const char *why) {
  char k[320], out[64];
  key(f, k, sizeof(k), f->round, "end");
  return op_cas(f, k, "", why, out, sizeof(out));
}

int trun_fast_close(trun_fast *f) {
  char k[320];
  key(f, k, sizeof(k), -1, "round");
  return op_set(f, k, "closed");
}
