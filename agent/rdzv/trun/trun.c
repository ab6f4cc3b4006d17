/* --rdzv-backend trun (agent/rdzv/rdzv_int.h): trun's own elastic rendezvous (trun/fast.c) over the same
 * store host rules as c10d; the workers then use the agents' store, and a round ends for all nodes through
 * the static backend's end key (rdzv_end.c), which the fast protocol itself also sets when a node's
 * heartbeat stops ("member:lost:<g>"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/rdzv/rdzv_int.h"
#include "fast.h"

static trun_fast *fst(const trun_rdzv *r) { return r->state; }

static int wipe_on_commit(void *arg) { return trun__rdzv_wipe_worker_keys(arg); }

static void trun_close(trun_rdzv *r) {
  free(r->state);
  r->state = NULL;
  trun__rdzv_close_stores(r);
}

static int trun_init(trun_rdzv *r, char *err, size_t errlen) {
  const trun_config *cfg = r->cfg;
  if ((r->state = calloc(1, sizeof(trun_fast))) == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (trun__rdzv_elastic_connect(r, TRUN_GEN_V2, err, errlen) < 0) {
    trun_close(r);
    return -1;
  }
  trun_fast_settings s = {
      .min_nodes = cfg->min_nodes,
      .max_nodes = cfg->max_nodes,
      .join_timeout_ms = (int)(trun__rdzv_conf_seconds(cfg, "join_timeout", 600) * 1000),
      .last_call_ms = (int)(trun__rdzv_conf_seconds(cfg, "last_call_timeout", 30) * 1000),
      .keep_alive_ms = (int)(trun__rdzv_conf_seconds(cfg, "keep_alive_interval", 5) * 1000),
      .keep_alive_max_attempt = (int)trun__rdzv_conf_seconds(cfg, "keep_alive_max_attempt", 3),
  };
  /* --node-rank is a hint here (torchrun's c10d ignores it): honoured when given explicitly. */
  int hint = cfg->node_rank_given ? cfg->node_rank : -1;
  trun_fast_init(fst(r), r->client, cfg->run_id, r->host_addr, getpid(), r->nproc, hint, &s);
  fst(r)->poll = trun__rdzv_poll; /* r->poll, and the wait's reports */
  fst(r)->poll_arg = r;
  fst(r)->on_commit = wipe_on_commit;
  fst(r)->on_commit_arg = r;
  return 0;
}

/* What the join's wait has (trun__rdzv_wait_begin): the store's current round, the nodes that joined it by
 * address (node/<i>: "nproc hint pid addr"), whether it is committed. */
static void trun_have(trun_rdzv *r) {
  enum { NAMED = 8 };
  const trun_fast *f = fst(r);
  char k[512], v[400], names[500] = "";
  size_t nl = 0;
  snprintf(k, sizeof(k), "%sround", f->base);
  trun__rdzv_get_text(r->client, k, v, sizeof(v));
  if (strcmp(v, "closed") == 0) return;
  long long R = atoll(v), seq = 0; /* absent: a first join goes straight for round 0 */
  snprintf(k, sizeof(k), "%sr%lld/seq", f->base, R);
  trun__rdzv_get_text(r->client, k, v, sizeof(v));
  seq = atoll(v);
  for (long long i = 1; i <= seq && i <= NAMED && nl < sizeof(names); i++) {
    char addr[300] = "";
    snprintf(k, sizeof(k), "%sr%lld/node/%lld", f->base, R, i);
    trun__rdzv_get_text(r->client, k, v, sizeof(v));
    if (sscanf(v, "%*d %*d %*d %299s", addr) == 1)
      nl += (size_t)snprintf(names + nl, sizeof(names) - nl, "%s%s", nl ? ", " : "", addr);
  }
  snprintf(k, sizeof(k), "%sr%lld/commit", f->base, R);
  trun__rdzv_get_text(r->client, k, v, sizeof(v));
  int last_call = !v[0] && seq >= f->s.min_nodes && f->s.min_nodes < f->s.max_nodes;
  /* A full round that runs: a node beyond it is a spare until the round ends. */
  int spare = v[0] && atoll(v) >= f->s.max_nodes;
  snprintf(r->wait.kind, sizeof(r->wait.kind), "%s", spare ? "spare" : last_call ? "last_call" : "round");
  if (spare) r->wait.deadline = 0; /* a spare waits without a time-out (trun/fast.c, late) */
  char missing[64] = "";
  if (!v[0] && seq < f->s.min_nodes)
    snprintf(missing, sizeof(missing), "; missing: %lld more to reach %d", f->s.min_nodes - seq,
             f->s.min_nodes);
  snprintf(r->wait.have, sizeof(r->wait.have), "round %lld: %lld of %d..%d nodes joined%s%s%s%s%s", R, seq,
           f->s.min_nodes, f->s.max_nodes, nl ? ": " : "", names, seq > NAMED ? ", ..." : "",
           spare       ? "; it runs full: this node is a spare until it ends"
           : v[0]      ? "; committed, this node joins the next round"
           : last_call ? "; the last call runs (last_call_timeout) before the round commits"
                       : "",
           missing);
}

static int trun_round(trun_rdzv *r, int agent_round, char *err, size_t errlen) {
  (void)agent_round; /* the store decides trun's rounds */
  int waiting = trun__rdzv_wait_begin(r, "round", fst(r)->s.join_timeout_ms / 1000.0, "join_timeout",
                                      trun_have, "the other nodes of the trun rendezvous '%s' at %s:%d",
                                      r->cfg->run_id, r->store_addr, r->store_port);
  int rc = trun_fast_join(fst(r));
  if (rc == -EINTR) trun_have(r);
  trun__rdzv_wait_end(r, waiting);
  if (rc < 0) {
    snprintf(err, errlen, "trun rendezvous via %s:%d: %s", r->cfg->endpoint_host, r->cfg->endpoint_port,
             rc == -EINTR ? "interrupted by a signal" : fst(r)->err);
    if (rc == -EINTR && r->wait.have[0])
      snprintf(err + strlen(err), errlen - strlen(err), " (%s)", r->wait.have);
    return -1;
  }
  r->info.group_rank = fst(r)->group_rank;
  r->info.group_world_size = fst(r)->group_world;
  r->info.base_rank = r->info.role_base_rank = fst(r)->base_rank;
  r->info.world_size = r->info.role_world_size = fst(r)->world_size;
  r->info.round = (int)fst(r)->round;
  r->info.round_id = fst(r)->round;
  snprintf(r->key_space, sizeof(r->key_space), "/trun/%s/r%d", r->cfg->run_id, r->info.round);
  /* The workers use the agents' store (the rendezvous endpoint), like the static backend. */
  snprintf(r->info.master_addr, sizeof(r->info.master_addr), "%s", r->cfg->endpoint_host);
  r->info.master_port = r->cfg->endpoint_port;
  trun_debug("trun round %d: node rank %d of %d, ranks %d-%d of %d", r->info.round, r->info.group_rank,
             r->info.group_world_size, r->info.base_rank, r->info.base_rank + r->nproc - 1,
             r->info.world_size);
  return 0;
}

static int trun_tick_ms(const trun_rdzv *r) {
  return (int)(trun__rdzv_conf_seconds(r->cfg, "keep_alive_interval", 5) * 1000);
}

/* Heartbeat, and watch the node ranked before this one: a lost node ends the round in the store, and the
 * agent's end watcher stops the workers. */
static trun_rdzv_news trun_tick(trun_rdzv *r, trun_client *c, int *nodes) {
  trun_client *own = fst(r)->c;
  *nodes = 0;
  fst(r)->c = c;
  trun_fast_tick(fst(r));
  fst(r)->c = own;
  return TRUN_RDZV_STEADY;
}

static int trun_ends_by_key(const trun_rdzv *r) {
  (void)r;
  return 1;
}

static void trun_finish(trun_rdzv *r, int code, int signaled) {
  if (r->client == NULL) return;
  trun__rdzv_leave(r, r->info.round, code == 0 ? trun__rdzv_exit_barrier_ms(r) : 5000,
                   trun__rdzv_host_wait_ms(code, signaled));
  /* The job is over: later joiners give up. */
  if (code == 0 && trun_fast_close(fst(r)) < 0) trun_warn("could not close the trun rendezvous");
}

const trun_rdzv_ops trun__rdzv_trun = {
    .name = "trun",
    .elastic = 1,
    .init = trun_init,
    .next_round = trun_round,
    .publish_addr = trun__rdzv_publish_addr,
    .admit_round = trun__rdzv_admit_published,
    .tick_ms = trun_tick_ms,
    .tick = trun_tick,
    .ends_by_key = trun_ends_by_key,
    .finish = trun_finish,
    .close = trun_close,
};
