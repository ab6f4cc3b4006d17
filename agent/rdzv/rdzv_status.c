/* trun --rdzv-status (agent/rdzv/rdzv.h): a job's rendezvous as its store holds it, for the operator whose
 * launch waits: the round, its members, the nodes waiting and the nodes lost. Reads only; one connection.
 * c10d: the pickled state (c10d/state.c); trun: the `trun` backend's keys (trun/fast.h); static: the
 * round keys of static/static.c. Lost nodes: the liveness records of the round (rdzv_live.c); excluded nodes
 * (elastic backends): the job's exclusion list (rdzv_exclude.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c10d/dynamic.h"
#include "c10d/state.h"
#include "rdzv_int.h"

#define NAMED 64 /* nodes listed by name; beyond it, counted */

typedef struct {
  trun_rdzv r; /* only cfg and client: what trun__rdzv_losses reads */
  FILE *out;
  double now; /* wall-clock seconds */
} view;

static void print_losses(view *v, const char *ks, int world, const char *round) {
  trun_rdzv_loss lost[TRUN_RDZV_MAX_LOSSES];
  int n = trun__rdzv_losses(&v->r, ks, world, lost, TRUN_RDZV_MAX_LOSSES);
  for (int i = 0; i < n; i++)
    fprintf(v->out, "  round %s: node %d (%s), %s, seen by %s %.0f s ago\n", round, lost[i].node,
            lost[i].addr, lost[i].cause, lost[i].by, v->now > lost[i].at ? v->now - lost[i].at : 0.0);
  if (n == 0) fprintf(v->out, "  round %s: none\n", round);
}

/* ---- c10d ------------------------------------------------------------------------------------------- */

static void print_nodes(view *v, const char *what, const trun_rdzv_node *l, size_t n) {
  fprintf(v->out, "%s: %zu\n", what, n);
  for (size_t i = 0; i < n && i < NAMED; i++)
    fprintf(v->out, "  %s pid %lld\n", l[i].addr, (long long)l[i].pid);
  if (n > NAMED) fprintf(v->out, "  ... %zu more\n", n - NAMED);
}

/* The last heartbeat of node n in st, in UTC microseconds (0: none). */
static int64_t heartbeat_of(const trun_rdzv_state *st, const trun_rdzv_node *n) {
  for (size_t i = 0; i < st->n_heartbeats; i++) {
    const trun_rdzv_node *h = &st->heartbeats[i].node;
    if (strcmp(h->addr, n->addr) == 0 && h->pid == n->pid && h->local_id == n->local_id)
      return st->heartbeats[i].v;
  }
  return 0;
}

static int status_c10d(view *v) {
  const trun_config *cfg = v->r.cfg;
  char k[320];
  snprintf(k, sizeof(k), "/torch.rendezvous.%s", cfg->run_id);
  trun_slice ks = trun_str(k);
  int rc = trun_client_check(v->r.client, 1, &ks);
  if (rc == 0) {
    fprintf(v->out, "no rendezvous '%s' in this store yet: no node has joined\n", cfg->run_id);
    return 0;
  }
  trun_buf b = {0};
  if (rc == 1) rc = trun_client_get(v->r.client, ks, &b, 5000);
  if (rc < 0) {
    trun_buf_free(&b);
    fprintf(stderr, "trun: error: reading %s from the store: %s\n", k, strerror(-rc));
    return 1;
  }
  if (b.len == strlen(TRUN_DYN_SENTINEL) && memcmp(b.data, TRUN_DYN_SENTINEL, b.len) == 0) {
    trun_buf_free(&b);
    fprintf(v->out, "created, no node has joined yet\n");
    return 0;
  }
  trun_rdzv_state st;
  trun_rdzv_layout lay;
  trun_pickle_err perr = {0};
  rc = trun_rdzv_state_decode((const char *)b.data, b.len, &st, &lay, &perr);
  trun_buf_free(&b);
  if (rc < 0) {
    fprintf(stderr,
            "trun: error: the c10d state under %s does not decode (%s): not a torchelastic rendezvous, or a "
            "torch this trun does not know\n",
            k, perr.msg[0] ? perr.msg : strerror(-rc));
    return 1;
  }
  int64_t now_us = (int64_t)(v->now * 1e6);
  fprintf(v->out, "round: %lld, %s\n", (long long)st.round,
          st.closed     ? "closed (the job ended)"
          : st.complete ? "complete (its workers run; nodes that come now wait for the next round)"
                        : "open (nodes are joining)");
  fprintf(v->out, "attempt: %lld (the store's round counter: one per restart or change of members)\n",
          (long long)st.round);
  fprintf(v->out, "participants: %zu of %d..%d\n", st.n_participants, cfg->min_nodes, cfg->max_nodes);
  for (size_t i = 0; i < st.n_participants && i < NAMED; i++) {
    const trun_rdzv_entry *p = &st.participants[i];
    int64_t hb = heartbeat_of(&st, &p->node);
    fprintf(v->out, "  rank %lld: %s pid %lld", (long long)p->v, p->node.addr, (long long)p->node.pid);
    if (hb) fprintf(v->out, ", last heartbeat %.0f s ago", now_us > hb ? (double)(now_us - hb) / 1e6 : 0.0);
    fputc('\n', v->out);
  }
  if (st.n_participants > NAMED) fprintf(v->out, "  ... %zu more\n", st.n_participants - NAMED);
  if (!st.complete && !st.closed && st.n_participants < (size_t)cfg->min_nodes)
    fprintf(v->out, "missing: %zu more node(s) to reach the minimum of %d\n",
            (size_t)cfg->min_nodes - st.n_participants, cfg->min_nodes);
  if (!st.complete && !st.closed) {
    if (st.has_deadline)
      fprintf(v->out, "last call: ends in %.0f s\n", (double)(st.deadline_us - now_us) / 1e6);
    else
      fprintf(v->out, "last call: not started (fewer than %d nodes)\n", cfg->min_nodes);
  }
  print_nodes(v, "waiting for the next round", st.wait_list, st.n_wait);
  print_nodes(v, "spare (beyond the maximum)", st.redundancy_list, st.n_redundancy);
  /* Losses: the liveness records of this round and the one before. */
  fprintf(v->out, "lost:\n");
  for (int64_t R = st.round; R >= 0 && R >= st.round - 1; R--) {
    char kspace[400], rs[32];
    snprintf(kspace, sizeof(kspace), "/torch.rendezvous.%s.%lld/trun", cfg->run_id, (long long)R);
    snprintf(rs, sizeof(rs), "%lld", (long long)R);
    print_losses(v, kspace, cfg->max_nodes, rs);
  }
  trun_rdzv_state_free(&st);
  return 0;
}

/* ---- trun (trun/fast.h's keys) ---------------------------------------------------------------------- */

static int status_trun(view *v) {
  const trun_config *cfg = v->r.cfg;
  char k[400], val[400];
  snprintf(k, sizeof(k), "/trun/%s/round", cfg->run_id);
  int rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val));
  if (rc < 0) goto store;
  if (rc == 0) {
    /* A node's first join goes straight for round 0 without the counter: look there. */
    snprintf(k, sizeof(k), "/trun/%s/r0/seq", cfg->run_id);
    if ((rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val))) < 0) goto store;
    if (rc == 0) {
      fprintf(v->out, "no rendezvous '%s' in this store yet: no node has joined\n", cfg->run_id);
      return 0;
    }
    snprintf(val, sizeof(val), "0");
  }
  if (strcmp(val, "closed") == 0) {
    fprintf(v->out, "round: closed (the job ended)\n");
    return 0;
  }
  long long R = atoll(val), seq = 0, commit = -1, waiting = 0;
  snprintf(k, sizeof(k), "/trun/%s/r%lld/seq", cfg->run_id, R);
  if ((rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val))) < 0) goto store;
  seq = atoll(val);
  snprintf(k, sizeof(k), "/trun/%s/r%lld/commit", cfg->run_id, R);
  if ((rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val))) < 0) goto store;
  if (rc == 1) commit = atoll(val);
  snprintf(k, sizeof(k), "/trun/%s/r%lld/waiting", cfg->run_id, R);
  if ((rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val))) < 0) goto store;
  waiting = atoll(val);
  char end[64];
  snprintf(k, sizeof(k), "/trun/%s/r%lld/end", cfg->run_id, R);
  if ((rc = trun__rdzv_get_text(v->r.client, k, end, sizeof(end))) < 0) goto store;
  fprintf(v->out, "round: %lld, %s", R, commit >= 0 ? "committed" : "open (nodes are joining)");
  if (commit >= 0) fprintf(v->out, " with %lld nodes", commit);
  if (end[0]) fprintf(v->out, ", ended (%s)", end);
  fprintf(v->out, "\nattempt: %lld (the store's round counter: one per restart or change of members)\n", R);
  fprintf(v->out, "joined: %lld of %d..%d\n", seq, cfg->min_nodes, cfg->max_nodes);
  for (long long i = 1; i <= seq && i <= NAMED; i++) {
    int nproc = 0, hint = 0;
    long long pid = 0;
    char addr[300] = "?", assign[64] = "";
    snprintf(k, sizeof(k), "/trun/%s/r%lld/node/%lld", cfg->run_id, R, i);
    if ((rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val))) < 0) goto store;
    if (rc == 1 && sscanf(val, "%d %d %lld %299s", &nproc, &hint, &pid, addr) != 4)
      snprintf(addr, sizeof(addr), "?");
    snprintf(k, sizeof(k), "/trun/%s/r%lld/assign/%lld", cfg->run_id, R, i);
    if ((rc = trun__rdzv_get_text(v->r.client, k, assign, sizeof(assign))) < 0) goto store;
    int g = -1;
    fprintf(v->out, "  node %lld: %s pid %lld, %d workers", i, addr, pid, nproc);
    if (assign[0] && sscanf(assign, "%d", &g) == 1) fprintf(v->out, ", group rank %d", g);
    fputc('\n', v->out);
  }
  if (seq > NAMED) fprintf(v->out, "  ... %lld more\n", seq - NAMED);
  fprintf(v->out, "waiting for the next round: %lld\n", waiting);
  fprintf(v->out, "lost:\n");
  for (long long r = R; r >= 0 && r >= R - 1; r--) {
    char kspace[400], rs[32];
    snprintf(kspace, sizeof(kspace), "/trun/%s/r%lld", cfg->run_id, r);
    snprintf(rs, sizeof(rs), "%lld", r);
    print_losses(v, kspace, cfg->max_nodes, rs);
  }
  return 0;
store:
  fprintf(stderr, "trun: error: reading %s from the store: %s\n", k, strerror(-rc));
  return 1;
}

/* ---- static (static/static.c's keys) ------------------------------------------------------------------ */

static int status_static(view *v) {
  const trun_config *cfg = v->r.cfg;
  char k[400], val[400];
  int rc, R = -1;
  /* The latest round: the agents count rounds from 0, one per restart. */
  for (int r = 0; r < 1000000; r++) {
    snprintf(k, sizeof(k), "/trun/%s/r%d/joined", cfg->run_id, r);
    trun_slice ks = trun_str(k);
    if ((rc = trun_client_check(v->r.client, 1, &ks)) < 0) goto store;
    if (rc == 0) break;
    R = r;
  }
  if (R < 0) {
    fprintf(v->out, "no rendezvous '%s' in this store yet: no node has joined\n", cfg->run_id);
    return 0;
  }
  int world = cfg->max_nodes, joined = 0;
  snprintf(k, sizeof(k), "/trun/%s/r%d/go", cfg->run_id, R);
  if ((rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val))) < 0) goto store;
  fprintf(v->out, "round: %d, %s\n", R, rc == 1 ? "started (every node joined)" : "open (nodes are joining)");
  fprintf(v->out, "attempt: %d (one per restart)\n", R);
  char missing[512] = "";
  size_t ml = 0;
  int nmissing = 0;
  fprintf(v->out, "nodes (static, %d):\n", world);
  for (int g = 0; g < world; g++) {
    snprintf(k, sizeof(k), "/trun/%s/r%d/host/%d", cfg->run_id, R, g);
    if ((rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val))) < 0) goto store;
    if (rc == 0) {
      if (nmissing++ < NAMED && ml < sizeof(missing))
        ml += (size_t)snprintf(missing + ml, sizeof(missing) - ml, "%s%d", ml ? ", " : "", g);
      continue;
    }
    joined++;
    if (joined > NAMED) continue;
    char at[64];
    snprintf(k, sizeof(k), "/trun/%s/r%d/joined_at/%d", cfg->run_id, R, g);
    if ((rc = trun__rdzv_get_text(v->r.client, k, at, sizeof(at))) < 0) goto store;
    fprintf(v->out, "  node rank %d: %s", g, val);
    if (at[0]) fprintf(v->out, ", joined %.0f s ago", v->now > atof(at) ? v->now - atof(at) : 0.0);
    fputc('\n', v->out);
  }
  if (joined > NAMED) fprintf(v->out, "  ... %d more\n", joined - NAMED);
  fprintf(v->out, "joined: %d of %d\n", joined, world);
  fprintf(v->out, "missing node ranks: %s%s\n", nmissing ? missing : "none", nmissing > NAMED ? ", ..." : "");
  fprintf(v->out, "lost:\n");
  char kspace[400], rs[32];
  snprintf(kspace, sizeof(kspace), "/trun/%s/r%d", cfg->run_id, R);
  snprintf(rs, sizeof(rs), "%d", R);
  print_losses(v, kspace, world, rs);
  return 0;
store:
  fprintf(stderr, "trun: error: reading %s from the store: %s\n", k, strerror(-rc));
  return 1;
}

/* ---- the exclusion list (rdzv_exclude.c), every backend ------------------------------------------------ */

/* The exclusions in force: each node with its kind, cause and the time left. 0, or 1 when the store failed.
 */
static int print_excluded(view *v) {
  trun_rdzv_exclusion *e = NULL;
  int n = 0,
      rc = trun_rdzv_excluded_now(v->r.client, v->r.cfg->run_id, trun_rdzv_exclude_seconds(v->r.cfg), &e, &n);
  if (rc < 0) {
    fprintf(stderr, "trun: error: reading job '%s''s exclusion list from the store: %s\n", v->r.cfg->run_id,
            strerror(-rc));
    return 1;
  }
  fprintf(v->out, "excluded: %d\n", n);
  for (int i = 0; i < n && i < NAMED; i++)
    fprintf(v->out, "  %s%s%s%s: %s (%s), %.0f s left\n", e[i].id.host, e[i].id.hostname[0] ? " (" : "",
            e[i].id.hostname, e[i].id.hostname[0] ? ")" : "", e[i].cause, e[i].kind,
            e[i].until > v->now ? e[i].until - v->now : 0.0);
  if (n > NAMED) fprintf(v->out, "  ... %d more\n", n - NAMED);
  free(e);
  return 0;
}

/* ---- the view --------------------------------------------------------------------------------------- */

typedef struct {
  const char *host;
  char cause[400];
} connect_note;

static void note_cause(void *arg, int stage, int err, const char *said) {
  connect_note *n = arg;
  trun_wait_connect_cause(stage, err, said, n->host, n->cause, sizeof(n->cause));
}

int trun_rdzv_status(const trun_config *cfg, FILE *out) {
  if (cfg->standalone || cfg->endpoint_host[0] == '\0' || cfg->endpoint_port <= 0) {
    fprintf(stderr,
            "trun: error: --rdzv-status needs the job's rendezvous store: give --rdzv-endpoint HOST:PORT (or "
            "--master-addr / --master-port for a static job) and --rdzv-id\n");
    return 2;
  }
  view v = {.out = out, .now = trun_wall_s()};
  v.r.cfg = cfg;
  connect_note note = {.host = cfg->endpoint_host};
  trun_client_opts o;
  trun__rdzv_outside_opts(cfg, 10000, &o);
  o.connect_timeout_ms = 5000;
  o.on_connect_error = note_cause;
  o.on_connect_error_arg = &note;
  int rc = trun_client_connect(&o, &v.r.client);
  if (rc < 0) {
    fprintf(stderr,
            "trun: error: cannot reach the rendezvous store at %s:%d: %s; is the job's store up there?\n",
            cfg->endpoint_host, cfg->endpoint_port, note.cause[0] ? note.cause : strerror(-rc));
    return 1;
  }
  fprintf(out, "rendezvous '%s' (%s) at %s:%d\n", cfg->run_id,
          cfg->backend == TRUN_RDZV_C10D   ? "c10d"
          : cfg->backend == TRUN_RDZV_TRUN ? "trun"
                                           : "static",
          cfg->endpoint_host, cfg->endpoint_port);
  int code = cfg->backend == TRUN_RDZV_C10D   ? status_c10d(&v)
             : cfg->backend == TRUN_RDZV_TRUN ? status_trun(&v)
                                              : status_static(&v);
  if (code == 0 && cfg->backend != TRUN_RDZV_STATIC) code = print_excluded(&v); /* elastic jobs keep a list */
  trun_client_close(v.r.client);
  fflush(out);
  return code;
}
