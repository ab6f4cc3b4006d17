/* trun --rdzv-status (agent/rdzv/rdzv.h): a job's rendezvous as its store holds it, for the operator whose
 * launch waits: the job's backend and size, the round, its members, the nodes missing, waiting and lost.
 * Reads only; one connection. The backend and size come from the store, not from this command line: the job's
 * record (rdzv_job.c) where a trun agent published one, else the backend whose keys are there and a size
 * said to be unknown (torchrun publishes none) unless this command line gives one. A backend or size on this
 * command line that the record contradicts is named; the store wins.
 * c10d: the pickled state (c10d_state.c); trun: the `trun` backend's keys (trun/fast.h); static: the
 * round keys of static/static.c. Lost nodes: the liveness records of the round (rdzv_live.c); excluded nodes
 * (elastic backends): the job's exclusion list (rdzv_exclude.c); a named hang: /trun/<run_id>/hang. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c10d/dynamic.h"
#include "c10d_state.h"
#include "rdzv_int.h"

#define NAMED 64            /* nodes listed by name; beyond it, counted */
#define LOSS_SCAN_MAX 16384 /* group ranks looked at for loss records */

/* Where the job's size comes from. */
enum { SIZE_UNKNOWN = 0, SIZE_STORE, SIZE_COMMAND_LINE };

typedef struct {
  trun_rdzv r; /* only cfg (the job as the store says it: backend, sizes) and client: what trun__rdzv_losses
                  reads */
  FILE *out;
  double now; /* wall-clock seconds */
  int size;   /* SIZE_*: whether r.cfg's min_nodes / max_nodes are the job's */
} view;

/* How many group ranks to look at for loss records when the round's size is not known. */
static int scan_world(const view *v, long long seen) {
  if (v->size != SIZE_UNKNOWN) return v->r.cfg->max_nodes;
  return seen > NAMED ? (int)seen : NAMED;
}

/* "of MIN..MAX" where the size is known; what is not known said plainly. */
static void print_of(const view *v, int range) {
  const trun_config *cfg = v->r.cfg;
  if (v->size == SIZE_UNKNOWN) {
    fprintf(v->out, " of an unknown number (%s)\n",
            cfg->backend == TRUN_RDZV_C10D
                ? "max nodes: unknown: torchrun does not publish it, and no trun agent of this job did"
                : "no agent of this job published its size");
    return;
  }
  if (range)
    fprintf(v->out, " of %d..%d", cfg->min_nodes, cfg->max_nodes);
  else
    fprintf(v->out, " of %d", cfg->max_nodes);
  fprintf(v->out, "%s\n",
          v->size == SIZE_COMMAND_LINE ? " (the size from this command line: the store does not say)" : "");
}

static void print_losses(view *v, const char *ks, int world, const char *round) {
  trun_rdzv_loss lost[TRUN_RDZV_MAX_LOSSES];
  if (world > LOSS_SCAN_MAX) world = LOSS_SCAN_MAX; /* the size comes from the store: bounded requests */
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
  fprintf(v->out, "participants: %zu", st.n_participants);
  print_of(v, 1);
  for (size_t i = 0; i < st.n_participants && i < NAMED; i++) {
    const trun_rdzv_entry *p = &st.participants[i];
    int64_t hb = heartbeat_of(&st, &p->node);
    fprintf(v->out, "  rank %lld: %s pid %lld", (long long)p->v, p->node.addr, (long long)p->node.pid);
    if (hb) fprintf(v->out, ", last heartbeat %.0f s ago", now_us > hb ? (double)(now_us - hb) / 1e6 : 0.0);
    fputc('\n', v->out);
  }
  if (st.n_participants > NAMED) fprintf(v->out, "  ... %zu more\n", st.n_participants - NAMED);
  if (!st.complete && !st.closed && v->size != SIZE_UNKNOWN && st.n_participants < (size_t)cfg->min_nodes)
    fprintf(v->out, "missing: %zu more node(s) to reach the minimum of %d\n",
            (size_t)cfg->min_nodes - st.n_participants, cfg->min_nodes);
  else if (!st.complete && !st.closed && v->size == SIZE_UNKNOWN)
    fprintf(v->out, "missing: unknown (the minimum is not in the store)\n");
  if (!st.complete && !st.closed) {
    if (st.has_deadline)
      fprintf(v->out, "last call: ends in %.0f s\n", (double)(st.deadline_us - now_us) / 1e6);
    else if (v->size != SIZE_UNKNOWN)
      fprintf(v->out, "last call: not started (fewer than %d nodes)\n", cfg->min_nodes);
    else
      fprintf(v->out, "last call: not started (fewer nodes than the minimum)\n");
  }
  print_nodes(v, "waiting for the next round", st.wait_list, st.n_wait);
  print_nodes(v, "spare (beyond the maximum)", st.redundancy_list, st.n_redundancy);
  /* Losses: the liveness records of this round and the one before. */
  fprintf(v->out, "lost:\n");
  for (int64_t R = st.round; R >= 0 && R >= st.round - 1; R--) {
    char kspace[400], rs[32];
    snprintf(kspace, sizeof(kspace), "/torch.rendezvous.%s.%lld/trun", cfg->run_id, (long long)R);
    snprintf(rs, sizeof(rs), "%lld", (long long)R);
    print_losses(v, kspace, scan_world(v, (long long)(st.n_participants + st.n_wait + st.n_redundancy)), rs);
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
  fprintf(v->out, "joined: %lld", seq);
  print_of(v, 1);
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
  if (commit < 0 && v->size != SIZE_UNKNOWN && seq < cfg->min_nodes)
    fprintf(v->out, "missing: %lld more node(s) to reach the minimum of %d\n", cfg->min_nodes - seq,
            cfg->min_nodes);
  fprintf(v->out, "waiting for the next round: %lld\n", waiting);
  fprintf(v->out, "lost:\n");
  for (long long r = R; r >= 0 && r >= R - 1; r--) {
    char kspace[400], rs[32];
    snprintf(kspace, sizeof(kspace), "/trun/%s/r%lld", cfg->run_id, r);
    snprintf(rs, sizeof(rs), "%lld", r);
    print_losses(v, kspace, scan_world(v, seq), rs);
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
  /* The node ranks are 0..world-1; with the size unknown, the first NAMED of them are looked at. */
  int world = v->size != SIZE_UNKNOWN ? cfg->max_nodes : NAMED, joined = 0;
  snprintf(k, sizeof(k), "/trun/%s/r%d/go", cfg->run_id, R);
  if ((rc = trun__rdzv_get_text(v->r.client, k, val, sizeof(val))) < 0) goto store;
  fprintf(v->out, "round: %d, %s\n", R, rc == 1 ? "started (every node joined)" : "open (nodes are joining)");
  fprintf(v->out, "attempt: %d (one per restart)\n", R);
  char missing[512] = "";
  size_t ml = 0;
  int nmissing = 0;
  if (v->size != SIZE_UNKNOWN)
    fprintf(v->out, "nodes (static, %d):\n", world);
  else
    fprintf(v->out, "nodes (static, node ranks 0-%d looked at):\n", world - 1);
  /* The round's join counter ends the look once every node that joined was seen and enough missing ones
   * named: a job of many nodes (or a record that claims many) costs requests for the nodes there, not for
   * every node rank. */
  int64_t njoined = -1;
  snprintf(k, sizeof(k), "/trun/%s/r%d/joined", cfg->run_id, R);
  if (trun__rdzv_get_count(v->r.client, k, &njoined) < 0) njoined = -1;
  for (int g = 0; g < world; g++) {
    if (njoined >= 0 && joined >= njoined && nmissing > NAMED) {
      nmissing += world - g; /* the rest: none of them joined */
      break;
    }
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
    char shown[sizeof(val)];
    trun__rdzv_escape(val, shown, sizeof(shown)); /* any token holder writes it: text, not terminal codes */
    fprintf(v->out, "  node rank %d: %s", g, shown);
    if (at[0]) fprintf(v->out, ", joined %.0f s ago", v->now > atof(at) ? v->now - atof(at) : 0.0);
    fputc('\n', v->out);
  }
  if (joined > NAMED) fprintf(v->out, "  ... %d more\n", joined - NAMED);
  fprintf(v->out, "joined: %d", joined);
  print_of(v, 0);
  if (v->size != SIZE_UNKNOWN)
    fprintf(v->out, "missing node ranks: %s%s\n", nmissing ? missing : "none",
            nmissing > NAMED ? ", ..." : "");
  else
    fprintf(v->out, "missing node ranks: unknown (the job's size is not in the store; give --nnodes)\n");
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
  for (int i = 0; i < n && i < NAMED; i++) {
    char name[sizeof(e[i].id.host) + sizeof(e[i].id.hostname) + 48];
    trun_rdzv_node_name(&e[i].id, name, sizeof(name)); /* a cut-off agent: "HOST (agent pid P)" */
    fprintf(v->out, "  %s: %s (%s), %.0f s left\n", name, e[i].cause, e[i].kind,
            e[i].until > v->now ? e[i].until - v->now : 0.0);
  }
  if (n > NAMED) fprintf(v->out, "  ... %d more\n", n - NAMED);
  free(e);
  return 0;
}

/* ---- which job: the backend and the size ------------------------------------------------------------ */

/* Whether key k exists: 1, 0, or a negative errno. */
static int has_key(view *v, const char *k) {
  trun_slice ks = trun_str(k);
  return trun_client_check(v->r.client, 1, &ks);
}

/* The backend whose keys the store holds for the run id, where no job record says it: c10d's torch state,
 * trun's round counter (or its first round's join counter), static's first round. 1 (*out), 0 none, or a
 * negative errno (k: the key being read). */
static int probe_backend(view *v, trun_rdzv_backend *out, char *k, size_t klen) {
  const char *id = v->r.cfg->run_id;
  struct {
    trun_rdzv_backend b;
    const char *fmt;
  } probes[] = {{TRUN_RDZV_C10D, "/torch.rendezvous.%s"},
                {TRUN_RDZV_TRUN, "/trun/%s/round"},
                {TRUN_RDZV_TRUN, "/trun/%s/r0/seq"},
                {TRUN_RDZV_STATIC, "/trun/%s/r0/joined"}};
  for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
    snprintf(k, klen, probes[i].fmt, id);
    int rc = has_key(v, k);
    if (rc < 0) return rc;
    if (rc == 1) {
      *out = probes[i].b;
      return 1;
    }
  }
  return 0;
}

/* "2" or "1:2", as --nnodes takes it. */
static void nnodes_text(int min, int max, char *out, size_t len) {
  if (min == max)
    snprintf(out, len, "%d", min);
  else
    snprintf(out, len, "%d:%d", min, max);
}

/* Settles v's job (the backend and size in *eff) from the store's record or keys, says where they come from
 * and names what this command line says otherwise. 1 a job to show, 0 none in the store (said), -1 the
 * store failed (said). */
static int settle_job(view *v, const trun_config *cfg, trun_config *eff) {
  trun__rdzv_job job;
  char why[160] = "", k[400], given[32], stored[32];
  int rc = trun__rdzv_job_read(v->r.client, cfg->run_id, &job, why, sizeof(why));
  if (rc < 0 && rc != -EPROTO) {
    trun__rdzv_job_key(cfg->run_id, k, sizeof(k));
    goto store;
  }
  if (rc == 1) {
    eff->backend = job.backend;
    eff->min_nodes = job.min_nodes;
    eff->max_nodes = job.max_nodes;
    v->size = SIZE_STORE;
  } else {
    int found = probe_backend(v, &eff->backend, k, sizeof(k));
    if (found < 0) {
      rc = found;
      goto store;
    }
    if (found == 0) {
      fprintf(v->out, "rendezvous '%s' at %s:%d\n", cfg->run_id, cfg->endpoint_host, cfg->endpoint_port);
      fprintf(v->out,
              "no rendezvous '%s' in this store yet: no node has joined (no static, c10d or trun keys of "
              "that run id; is --rdzv-id the job's?)\n",
              cfg->run_id);
      return 0;
    }
    v->size = cfg->nnodes_given ? SIZE_COMMAND_LINE : SIZE_UNKNOWN;
  }
  fprintf(v->out, "rendezvous '%s' (%s) at %s:%d\n", cfg->run_id, trun__rdzv_backend_text(eff->backend),
          cfg->endpoint_host, cfg->endpoint_port);
  if (rc == 1) {
    nnodes_text(job.min_nodes, job.max_nodes, stored, sizeof(stored));
    fprintf(v->out, "job: --rdzv-backend %s --nnodes %s", trun__rdzv_backend_text(job.backend), stored);
    if (job.nproc[0]) fprintf(v->out, " --nproc-per-node %s", job.nproc);
    if (job.torch_version[0]) fprintf(v->out, " torch_version=%s", job.torch_version);
    fprintf(v->out, " (published by %s pid %lld", job.host[0] ? job.host : "?", job.pid);
    if (job.at > 0) fprintf(v->out, ", %.0f s ago", v->now > job.at ? v->now - job.at : 0.0);
    fprintf(v->out, ")\n");
  } else {
    if (rc == -EPROTO)
      fprintf(v->out, "job: its record in the store is not one trun writes (%s): ignored\n", why);
    fprintf(v->out, "job: --rdzv-backend %s (found by its keys; %s)\n", trun__rdzv_backend_text(eff->backend),
            eff->backend == TRUN_RDZV_C10D
                ? "no trun agent published the job: torchrun's agents, or trun agents older than this one"
                : "no agent published the job: trun agents older than this one");
  }
  if (cfg->backend_given && cfg->backend != eff->backend)
    fprintf(v->out,
            "note: this command line says --rdzv-backend %s, but the store holds a %s rendezvous: "
            "showing that\n",
            trun__rdzv_backend_text(cfg->backend), trun__rdzv_backend_text(eff->backend));
  if (v->size == SIZE_STORE && cfg->nnodes_given &&
      (cfg->min_nodes != eff->min_nodes || cfg->max_nodes != eff->max_nodes)) {
    nnodes_text(cfg->min_nodes, cfg->max_nodes, given, sizeof(given));
    nnodes_text(eff->min_nodes, eff->max_nodes, stored, sizeof(stored));
    fprintf(v->out,
            "note: this command line says --nnodes %s, but the job was started with --nnodes %s: "
            "showing that\n",
            given, stored);
  }
  return 1;
store:
  fprintf(stderr, "trun: error: reading %s from the store: %s\n", k, strerror(-rc));
  return -1;
}

/* ---- a named hang ------------------------------------------------------------------------------------- */

/* /trun/<run_id>/hang: one line for people naming the ranks a hang stopped and what the others wait in,
 * as the agent that named it publishes it (trun_rdzv_publish_hang; the last one named stands). Any token
 * holder may write it: shown escaped and cut. Nothing when absent. 0, or 1 when the store failed. */
#define HANG_MAX_BYTES 1024
static int print_hang(view *v) {
  char k[200], line[HANG_MAX_BYTES], shown[HANG_MAX_BYTES];
  snprintf(k, sizeof(k), "/trun/%s/hang", v->r.cfg->run_id);
  int rc = has_key(v, k);
  if (rc == 1) rc = trun__rdzv_get_text(v->r.client, k, line, sizeof(line));
  if (rc < 0) {
    fprintf(stderr, "trun: error: reading %s from the store: %s\n", k, strerror(-rc));
    return 1;
  }
  if (rc == 1) {
    trun__rdzv_escape(line, shown, sizeof(shown));
    fprintf(v->out, "hang: %s\n", shown);
  }
  return 0;
}

/* ---- the view --------------------------------------------------------------------------------------- */

typedef struct {
  const char *host;
  char cause[400];
  int closed_at_handshake; /* a server that closed V2's VALIDATE: torch < 2.2's, or an allow-list's */
} connect_note;

static void note_cause(void *arg, int stage, int err, const char *said) {
  connect_note *n = arg;
  trun_client_connect_cause(stage, err, said, n->host, n->cause, sizeof(n->cause));
  if (stage == TRUN_CONNECT_HANDSHAKE && err == ECONNRESET) n->closed_at_handshake = 1;
}

/* One connection to the job's store in *c: the wire generation --rdzv-conf torch_version names, else torch
 * >= 2.2's, else, where the server closed that handshake, torch 1.13's (the older wires have no handshake
 * to tell them by; their CHECK and GET, all this view sends, are the same in 1.13, 2.0 and 2.1). 0, or 1
 * with the cause said. */
static int connect_store(const trun_config *cfg, FILE *out, trun_client **c) {
  connect_note note = {.host = cfg->endpoint_host};
  char tv[16] = "";
  int pinned = cfg->rdzv_conf && trun_config_conf_get(cfg->rdzv_conf, "torch_version", tv, sizeof(tv));
  trun_client_opts o;
  trun__rdzv_outside_opts(cfg, 10000, &o);
  o.on_connect_error = note_cause;
  o.on_connect_error_arg = &note;
  o.connect_timeout_ms = pinned ? 5000 : 300; /* a first try: a closed handshake is told at once */
  int rc = trun_client_connect(&o, c);
  if (rc < 0 && !pinned && note.closed_at_handshake) {
    connect_note first = note;
    trun_client_parse_gen("1.13", &o.gen);
    o.connect_timeout_ms = 5000;
    o.on_connect_error_arg = &note;
    trun_slice probe = trun_str("/trun/.rdzv-status");
    if ((rc = trun_client_connect(&o, c)) == 0 && (rc = trun_client_check(*c, 1, &probe)) >= 0) {
      fprintf(out,
              "note: the store closed torch >= 2.2's handshake: read as a torch 1.13 - 2.1 store (give "
              "--rdzv-conf torch_version=... to say which)\n");
      return 0;
    }
    trun_client_close(*c);
    *c = NULL;
    note = first; /* the legacy wire did not answer either: the first cause is the one to tell */
  } else if (rc < 0 && !pinned) {
    o.connect_timeout_ms = 5000;
    rc = trun_client_connect(&o, c);
  }
  if (rc < 0) {
    fprintf(stderr,
            "trun: error: cannot reach the rendezvous store at %s:%d: %s; is the job's store up there?\n",
            cfg->endpoint_host, cfg->endpoint_port, note.cause[0] ? note.cause : strerror(-rc));
    return 1;
  }
  return 0;
}

int trun_rdzv_status(const trun_config *cfg, FILE *out) {
  if (cfg->standalone || cfg->endpoint_host[0] == '\0' || cfg->endpoint_port <= 0) {
    fprintf(stderr,
            "trun: error: --rdzv-status needs the job's rendezvous store: give --rdzv-endpoint HOST:PORT (or "
            "--master-addr / --master-port for a static job) and --rdzv-id\n");
    return 2;
  }
  trun_config eff = *cfg; /* the job as its store says it */
  view v = {.out = out, .now = trun_wall_s()};
  v.r.cfg = &eff;
  if (connect_store(cfg, out, &v.r.client) != 0) return 1;
  int code = 0, job = settle_job(&v, cfg, &eff);
  if (job < 0) code = 1;
  if (job == 1)
    code = eff.backend == TRUN_RDZV_C10D   ? status_c10d(&v)
           : eff.backend == TRUN_RDZV_TRUN ? status_trun(&v)
                                           : status_static(&v);
  if (job == 1 && code == 0 && eff.backend != TRUN_RDZV_STATIC)
    code = print_excluded(&v); /* elastic jobs keep a list */
  if (job == 1 && code == 0) code = print_hang(&v);
  trun_client_close(v.r.client);
  fflush(out);
  return code;
}
