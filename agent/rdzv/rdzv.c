/* The rendezvous interface (agent/rdzv/rdzv.h): picks the backend and hands every call to it, with what is
 * the same for all of them around the calls (the --store-allow-peers steps of a round); and what the agent,
 * its doctor and its observability read of the rendezvous (the round's info, its exchange keys). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rdzv_int.h"

trun_rdzv *trun_rdzv_new(void) { return calloc(1, sizeof(trun_rdzv)); }

void trun_rdzv_free(trun_rdzv *r) {
  if (r == NULL) return;
  trun_rdzv_close(r);
  free(r);
}

int trun_rdzv_init(trun_rdzv *r, const trun_config *cfg, int nproc, const trun_rdzv_opts *opts, char *err,
                   size_t errlen) {
  const trun_rdzv_ops *be = trun__rdzv_backend_of(cfg);
  if (opts) { /* kept by trun__rdzv_reset */
    r->poll = opts->poll;
    r->poll_arg = opts->poll_arg;
    r->on_wait = opts->on_wait;
    r->on_wait_arg = opts->on_wait_arg;
    r->node = opts->node;
  }
  trun__rdzv_reset(r, cfg, nproc, be);
  int explicit_token = trun_rdzv_token(cfg, r->token, sizeof(r->token), err, errlen);
  if (explicit_token < 0) return -1;
  r->token_explicit = explicit_token;
  if (be->init(r, err, errlen) < 0) return -1;
  trun__rdzv_job_publish(r); /* for --rdzv-status: the job's backend and size (rdzv_job.c) */
  if (trun__rdzv_live_start(r) < 0) {
    snprintf(err, errlen, "out of memory starting the liveness thread");
    trun_rdzv_close(r);
    return -1;
  }
  return 0;
}

int trun_rdzv_reach(const trun_config *cfg, int timeout_ms, trun_rdzv **out) {
  *out = NULL;
  trun_rdzv *r = trun_rdzv_new();
  if (r == NULL) return -ENOMEM;
  r->cfg = cfg;
  char terr[200];
  trun_client_opts o;
  trun__rdzv_outside_opts(cfg, timeout_ms, &o);
  /* Without a token (an explicit one that is not valid) the record is refused: said by the caller. */
  if (trun_rdzv_token(cfg, r->token, sizeof(r->token), terr, sizeof(terr)) >= 0) o.agent_token = r->token;
  int rc = trun_client_connect(&o, &r->client);
  if (rc < 0) {
    r->client = NULL;
    trun_rdzv_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

void trun__rdzv_tell_losses(trun_rdzv *r, const char *prev_ks, int prev_world, long long prev_round_id) {
  if (prev_ks[0] == '\0' || prev_world < 2) return;
  trun_rdzv_loss *lost = calloc(TRUN_RDZV_MAX_LOSSES, sizeof(*lost));
  trun_rdzv_end *e = calloc(1, sizeof(*e));
  int n = lost && e ? trun__rdzv_losses(r, prev_ks, prev_world, lost, TRUN_RDZV_MAX_LOSSES) : 0;
  for (int i = 0; i < n; i++) {
    memset(e, 0, sizeof(*e));
    e->kind = TRUN_RDZV_END_NODE_LOST;
    e->node = lost[i].node;
    e->past = 1;
    e->loss = lost[i];
    e->loss.round_id = prev_round_id; /* the round it was lost in (the watcher stamps its own the same way) */
    e->loss_known = 1;
    trun__rdzv_door_post(r, e); /* the round that lost it: the door's round until this one's liveness */
  }
  free(lost);
  free(e);
}

int trun_rdzv_next_round(trun_rdzv *r, int round, char *err, size_t errlen) {
  char prev_ks[sizeof(r->key_space)];
  int prev_world = r->info.group_world_size;
  long long prev_round_id = r->info.round_id;
  snprintf(prev_ks, sizeof(prev_ks), "%s", r->key_space);
  r->store_may_go = 0;
  trun_client_set_quiet(r->client, 0);
  if (r->be->publish_addr && r->be->publish_addr(r, round) < 0)
    trun_debug("could not publish this node's address for --store-allow-peers");
  if (r->be->elastic && trun__rdzv_exclusion_round(r, err, errlen) < 0) return -1;
  if (r->be->elastic) trun__rdzv_attempt_propose(r);
  if (r->be->next_round(r, round, err, errlen) < 0) return -1;
  if (r->be->elastic) trun__rdzv_attempt_settle(r);
  if (r->cfg->store_allow_peers && r->be->admit_round && r->be->admit_round(r, round, err, errlen) < 0)
    return -1;
  trun__rdzv_tell_losses(r, prev_ks, prev_world, prev_round_id);
  trun__rdzv_door_round(r, r->info.round);
  trun__rdzv_live_round(r);
  return 0;
}

void trun_rdzv_failed_here(trun_rdzv *r) {
  int fresh = r->be && r->be->new_nodes_waiting ? r->be->new_nodes_waiting(r) : 0;
  if (fresh <= 0) return;
  trun_rdzv_end *e = calloc(1, sizeof(*e));
  if (e == NULL) return;
  e->kind = TRUN_RDZV_END_MEMBER;
  e->node = -1;
  e->nodes = fresh;
  snprintf(e->cause, sizeof(e->cause), "join");
  trun__rdzv_door_post(r, e);
  free(e);
}

int trun_rdzv_leave_job(trun_rdzv *r, const char *why, int timeout_ms) {
  if (r->live == NULL) return 0;
  int rc = trun_rdzv_leave_now(r, why);
  if (rc < 0) return rc;
  char k[sizeof(r->key_space) + 8];
  snprintf(k, sizeof(k), "%s/end", r->key_space); /* the loss record ends the round (rdzv_live.c) */
  return trun__rdzv_wait_key(r, k, timeout_ms);
}

void trun_rdzv_finish(trun_rdzv *r, int code, int signaled) {
  if (r->be && r->be->finish) r->be->finish(r, code, signaled);
}

void trun_rdzv_close(trun_rdzv *r) {
  trun__rdzv_live_stop(r); /* first: it leaves its round cleanly while the store is still there */
  free(r->excl);
  r->excl = NULL;
  r->n_excl = 0;
  if (r->be && r->be->close)
    r->be->close(r);
  else
    trun__rdzv_close_stores(r);
}

/* ---- what the agent and its modules read ---- */

const trun_rdzv_round *trun_rdzv_info(const trun_rdzv *r) { return &r->info; }

void trun_rdzv_set_attempt(trun_rdzv *r, int attempt) { r->info.attempt = attempt; }

int trun_rdzv_connected(const trun_rdzv *r) { return r->client != NULL; }

const char *trun_rdzv_host_addr(const trun_rdzv *r) { return r->host_addr; }

const char *trun_rdzv_store_addr(const trun_rdzv *r, int *port) {
  *port = r->store_port;
  return r->store_addr;
}

int trun_rdzv_foreign_peers(const trun_rdzv *r) { return r->foreign_peers; }

void trun_rdzv_store_stats(const trun_rdzv *r, trun_server_stats *sum) {
  memset(sum, 0, sizeof(*sum));
  const trun_store_host *hosts[2] = {r ? r->host : NULL, r ? r->worker_host : NULL};
  for (int i = 0; i < 2; i++) {
    if (hosts[i] == NULL) continue;
    trun_server_stats st;
    trun_server_get_stats(trun_store_host_server((trun_store_host *)hosts[i]), &st);
    sum->connections += st.connections, sum->ops += st.ops, sum->accepted += st.accepted;
    sum->refused += st.refused;
  }
}

int trun_rdzv_exclusion_list(const trun_rdzv *r, const trun_rdzv_exclusion **out) {
  *out = r->excl;
  return r->n_excl;
}

int trun_rdzv_excluded(const trun_rdzv *r) { return r->excluded; }

const char *trun_rdzv_wait_kind(const trun_rdzv *r) { return r->wait.kind; }

void trun_rdzv_store_may_go(trun_rdzv *r) {
  r->store_may_go = 1;
  trun_client_set_quiet(r->client, 1);
}

void trun_rdzv_hang_up(trun_rdzv *r) {
  if (r->client) shutdown(trun_client_fd(r->client), SHUT_RDWR);
}

/* ---- the round's exchange ---- */

void trun_rdzv_exchange_key(const trun_rdzv *r, const char *name, char *out, size_t len) {
  snprintf(out, len, "%s/%s", r->key_space, name);
}

int trun_rdzv_exchange_set(trun_rdzv *r, const char *name, const char *value) {
  if (r->client == NULL) return -ENOTCONN;
  char k[sizeof(r->key_space) + 128];
  trun_rdzv_exchange_key(r, name, k, sizeof(k));
  return trun_client_set(r->client, trun_str(k), trun_str(value));
}

int trun_rdzv_exchange_get(trun_rdzv *r, const char *name, trun_buf *out, int timeout_ms) {
  if (r->client == NULL) return -ENOTCONN;
  char k[sizeof(r->key_space) + 128];
  trun_rdzv_exchange_key(r, name, k, sizeof(k));
  return trun_client_get(r->client, trun_str(k), out, timeout_ms);
}

int trun_rdzv_exchange_collect(trun_rdzv *r, const char *const *names, int n, int wait_ms, trun_buf *vals) {
  if (r->client == NULL) return -ENOTCONN;
  char **full = calloc((size_t)n, sizeof(char *));
  trun_slice *keys = calloc((size_t)n, sizeof(trun_slice));
  trun_slice *have = calloc((size_t)n, sizeof(trun_slice));
  int *at = calloc((size_t)n, sizeof(int));
  trun_buf *got = calloc((size_t)n, sizeof(trun_buf));
  int rc = -ENOMEM, present = 0;
  if (!full || !keys || !have || !at || !got) goto out;
  for (int i = 0; i < n; i++) {
    if (asprintf(&full[i], "%s/%s", r->key_space, names[i]) < 0) {
      full[i] = NULL;
      goto out;
    }
    keys[i] = trun_str(full[i]);
  }
  /* Usually every name is there by now: one WAIT; on its time-out find out which ones are. */
  rc = trun_client_wait(r->client, (size_t)n, keys, wait_ms);
  if (rc == 0) {
    for (int i = 0; i < n; i++) have[i] = keys[i], at[i] = i;
    present = n;
  } else if (rc == -ETIMEDOUT) {
    for (int i = 0; i < n; i++)
      if (trun_client_check(r->client, 1, &keys[i]) == 1) have[present] = keys[i], at[present++] = i;
  } else {
    goto out;
  }
  rc = 0;
  if (present > 0 && trun_client_multi_get(r->client, (size_t)present, have, got, 5000) == 0)
    for (int i = 0; i < present; i++) {
      vals[at[i]] = got[i];
      got[i] = (trun_buf){0};
    }
  rc = present;
out:
  for (int i = 0; full && i < n; i++) {
    free(full[i]);
    if (got) trun_buf_free(&got[i]);
  }
  free(full);
  free(keys);
  free(have);
  free(at);
  free(got);
  return rc;
}
