/* The end of a round across nodes, shared by the static and trun backends (agent/rdzv/rdzv.h): one key per
 * round ("end") that the first announcement sets (its values: rdzv_end_key.c), success once every node's
 * workers succeeded, the nodes' failure records beside it, "seen_end/<g>" from every node that was alive to
 * see the end (a node without it and without a record was lost), and the exit barrier ("host_left", "left",
 * "all_left") that keeps the store up until every node has read what it needs: each node counts once in
 * "left", by itself as it leaves or by its loss record (who did claims "counted/<g>" first). On c10d, where
 * torchrun's protocol ends rounds, trun agents use only the failure announcement, its record and the round's
 * end as read now, and the store's host waits briefly after a failure until the others have read it. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdzv_int.h"

int trun__rdzv_failure_read(trun_client *c, const char *ks, int g, char *out, size_t len) {
  char k[600];
  out[0] = '\0';
  snprintf(k, sizeof(k), "%s/failure/%d", ks, g);
  trun_slice key = trun_str(k);
  int rc = trun_client_check(c, 1, &key);
  if (rc < 0) return rc;
  if (rc == 0) return -ENOENT;
  trun_buf v = {0};
  rc = trun_client_get(c, key, &v, 5000);
  if (rc == 0 && v.len >= len) rc = -E2BIG;
  if (rc == 0) {
    memcpy(out, v.data, v.len);
    out[v.len] = '\0';
  }
  trun_buf_free(&v);
  return rc;
}

/* The end value v (n bytes) of r's round as out, with the failure record of a failed node. */
static void end_with_record(trun_rdzv *r, int round, const void *v, size_t n, trun_rdzv_end *out) {
  trun__rdzv_end_decode(v, n, r->info.group_world_size, out);
  out->round = round;
  if (out->kind == TRUN_RDZV_END_FAILED)
    (void)trun__rdzv_failure_read(r->client, r->key_space, out->node, out->failure, sizeof(out->failure));
}

int trun_rdzv_announce_failure(trun_rdzv *r, int round, const char *failure_json, trun_rdzv_end *now) {
  char k[sizeof(r->key_space) + 32], v[32];
  trun_rdzv_end e;
  snprintf(k, sizeof(k), "%s/failure/%d", r->key_space, r->info.group_rank);
  int rc = trun_client_set(r->client, trun_str(k), trun_str(failure_json ? failure_json : "{}"));
  snprintf(k, sizeof(k), "%s/end", r->key_space);
  int rc2 = trun__rdzv_end_encode(TRUN_RDZV_END_FAILED, r->info.group_rank, NULL, v, sizeof(v));
  trun_buf out = {0};
  /* First announcement wins: compare_set on an absent key with empty expected creates it; the reply is the
   * value the key holds now (this node's, or the end that came first). */
  if (rc2 == 0) rc2 = trun_client_compare_set(r->client, trun_str(k), trun_str(""), trun_str(v), &out);
  if (rc2 == 0)
    end_with_record(r, round, out.data, out.len, &e);
  else
    trun_rdzv_end_store_lost(&e, round, rc2 < 0 ? -rc2 : EIO);
  trun_buf_free(&out);
  if (now) *now = e;
  return rc < 0 ? rc : rc2;
}

int trun_rdzv_end_now(trun_rdzv *r, int round, trun_rdzv_end *out) {
  char k[sizeof(r->key_space) + 8];
  memset(out, 0, sizeof(*out));
  out->node = -1;
  out->round = round;
  if (r->client == NULL || trun_client_fd(r->client) < 0) {
    trun_rdzv_end_store_lost(out, round, ENOTCONN);
    return -ENOTCONN;
  }
  snprintf(k, sizeof(k), "%s/end", r->key_space);
  trun_slice key = trun_str(k);
  trun_buf v = {0};
  int rc = trun_client_check(r->client, 1, &key);
  if (rc == 1) rc = trun_client_get(r->client, key, &v, 5000);
  if (rc == 0 && v.len > 0) end_with_record(r, round, v.data, v.len, out);
  trun_buf_free(&v);
  if (rc < 0) trun_rdzv_end_store_lost(out, round, -rc);
  return rc < 0 ? rc : 0;
}

/* Polls per peer while the host waits for it to see the round's end. */
#define SAW_END_POLL_MS 50

void trun__rdzv_wait_saw_end(trun_rdzv *r, int timeout_ms) {
  double deadline = trun_mono_ms() + timeout_ms;
  for (int g = 0; g < r->info.group_world_size; g++) {
    if (g == r->info.group_rank) continue;
    char seen[sizeof(r->key_space) + 32], alive[sizeof(r->key_space) + 32];
    snprintf(seen, sizeof(seen), "%s/seen_end/%d", r->key_space, g);
    snprintf(alive, sizeof(alive), "%s/alive/%d", r->key_space, g);
    trun_slice ks = trun_str(seen), ka = trun_str(alive);
    /* A trun agent's watcher sets seen_end once it has read the end and its record; a node without alive/<g>
     * has left the round (or is a torchrun agent, which reads neither). */
    while (trun_client_check(r->client, 1, &ks) == 0 && trun_client_check(r->client, 1, &ka) == 1) {
      if (trun_mono_ms() >= deadline || trun__rdzv_poll(r)) return;
      struct timespec ts = {0, SAW_END_POLL_MS * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
}

/* What the wait for the round's end or the exit barrier has: how many nodes counted themselves in key. */
static void count_have(trun_rdzv *r, const char *key) {
  char k[512];
  int64_t n = 0;
  trun__rdzv_round_key(r, r->info.round, key, k, sizeof(k));
  if (trun_client_add(r->client, trun_str(k), 0, &n) == 0)
    snprintf(r->wait.have, sizeof(r->wait.have), "%lld of %d nodes %s", (long long)n,
             r->info.group_world_size, key);
}
static void done_have(trun_rdzv *r) { count_have(r, "done"); }
static void left_have(trun_rdzv *r) { count_have(r, "left"); }

int trun_rdzv_announce_success(trun_rdzv *r, int round) {
  char k[512];
  int64_t done;
  trun__rdzv_round_key(r, round, "done", k, sizeof(k));
  int rc = trun_client_add(r->client, trun_str(k), 1, &done);
  if (rc < 0) return rc;
  trun__rdzv_round_key(r, round, "end", k, sizeof(k));
  if (done == r->info.group_world_size) {
    char ok[8];
    trun_buf out = {0};
    trun__rdzv_end_encode(TRUN_RDZV_END_OK, -1, NULL, ok, sizeof(ok));
    rc = trun_client_compare_set(r->client, trun_str(k), trun_str(""), trun_str(ok), &out);
    trun_buf_free(&out);
    if (rc < 0) return rc;
  }
  /* This node is done; the round is done when every node is, or when one failed. */
  int waiting = trun__rdzv_wait_begin(r, "round_end", 0, NULL, done_have,
                                      "the other nodes' workers to finish round %d", round);
  rc = trun__rdzv_wait_key(r, k, 7 * 24 * 3600 * 1000);
  trun__rdzv_wait_end(r, waiting);
  return rc;
}

int trun_rdzv_collect_failures(trun_rdzv *r, int round, int timeout_ms, char ***out, int *n) {
  (void)round; /* the round's key space, as next_round settled it */
  int world = r->info.group_world_size;
  char **res = calloc((size_t)world, sizeof(char *));
  if (res == NULL) return -ENOMEM;
  *n = 0;
  /* One deadline for all: with several nodes lost, each would otherwise cost the whole wait. */
  double deadline = trun_mono_ms() + timeout_ms;
  for (int g = 0; g < world; g++) {
    char k[sizeof(r->key_space) + 32];
    snprintf(k, sizeof(k), "%s/failure/%d", r->key_space, g);
    trun_buf v = {0};
    int left = (int)(deadline - trun_mono_ms());
    int rc = trun_client_get(r->client, trun_str(k), &v,
                             g == r->info.group_rank ? 1000
                             : left > 1              ? left
                                                     : 1);
    if (rc == 0 && trun_buf_append_u8(&v, 0) == 0)
      res[(*n)++] = (char *)v.data;
    else
      trun_buf_free(&v);
    if (rc < 0 && rc != -ETIMEDOUT) break;
  }
  *out = res;
  return 0;
}

/* "/trun/<run_id>/r<round>/<what>/<g>": node g's key of the round. */
static void node_key(const trun_rdzv *r, int round, const char *what, int g, char *out, size_t len) {
  snprintf(out, len, "/trun/%s/r%d/%s/%d", r->cfg->run_id, round, what, g);
}

int trun_rdzv_node_end(trun_rdzv *r, int round, int g, trun_rdzv_node_info *out) {
  char k[512], name[256], addr[64], n[32];
  memset(out, 0, sizeof(*out));
  node_key(r, round, "seen_end", g, k, sizeof(k));
  trun_slice ks = trun_str(k);
  int rc = trun_client_check(r->client, 1, &ks);
  if (rc < 0) return rc;
  out->seen_end = rc;
  node_key(r, round, "host", g, k, sizeof(k));
  if ((rc = trun__rdzv_get_text(r->client, k, name, sizeof(name))) < 0) return rc;
  trun__rdzv_addr_key(r, round, g, k, sizeof(k));
  if ((rc = trun__rdzv_get_text(r->client, k, addr, sizeof(addr))) < 0) return rc;
  /* Its first global rank: the worker counts of the nodes before it ("nproc/<g>"). */
  for (int i = 0; i <= g; i++) {
    node_key(r, round, "nproc", i, k, sizeof(k));
    if ((rc = trun__rdzv_get_text(r->client, k, n, sizeof(n))) < 0) return rc;
    if (i < g) out->base_rank += atoi(n);
  }
  out->nproc = atoi(n);
  const char *a = strncmp(addr, "::ffff:", 7) == 0 && strchr(addr, '.') ? addr + 7 : addr; /* v4-mapped */
  if (name[0] && a[0] && strcmp(name, a) != 0)
    snprintf(out->host, sizeof(out->host), "%s (%s)", name, a);
  else
    snprintf(out->host, sizeof(out->host), "%s", name[0] ? name : a);
  return 0;
}

int trun__rdzv_exit_barrier_ms(const trun_rdzv *r) {
  double ms = r->cfg->exit_barrier_timeout * 1000;
  return ms >= INT_MAX ? INT_MAX : (int)ms;
}

int trun__rdzv_host_wait_ms(int code, int signaled) { return code == 0 || signaled ? 0 : 15000; }

void trun__rdzv_leave(trun_rdzv *r, int round, int timeout_ms, int host_wait_ms) {
  char k[512];
  int64_t left = 0;
  int rc;
  if (r->host) {
    /* The host has printed the job's failure report (if any) by now: the others may go. */
    trun__rdzv_round_key(r, round, "host_left", k, sizeof(k));
    trun_client_set(r->client, trun_str(k), trun_str("1"));
  } else if (host_wait_ms > 0) {
    /* A failed job: stay until the host has printed the job-wide report (before "left", which lets the
     * host close the store). Where the scheduler ends the whole job when one task exits (srun
     * --kill-on-bad-exit), leaving first would kill the report. */
    trun__rdzv_round_key(r, round, "host_left", k, sizeof(k));
    int waiting = trun__rdzv_wait_begin(r, "exit_barrier", host_wait_ms / 1000.0, NULL, NULL,
                                        "node rank 0 to print the job's failure report (exit barrier)");
    rc = trun__rdzv_wait_key(r, k, host_wait_ms);
    trun__rdzv_wait_end(r, waiting);
    if (rc == -ETIMEDOUT)
      trun_debug("node rank 0 did not finish its failure report within %d s; leaving", host_wait_ms / 1000);
  }
  /* Counted once: a node whose loss record was written (it left the job on a signal, or another node
   * found it gone) was counted out with it. */
  char what[32];
  snprintf(what, sizeof(what), "counted/%d", r->info.group_rank);
  trun__rdzv_round_key(r, round, what, k, sizeof(k));
  trun_buf prev = {0};
  rc = trun_client_compare_set(r->client, trun_str(k), trun_str(""), trun_str("left"), &prev);
  int first = rc == 0 && prev.len == 4 && memcmp(prev.data, "left", 4) == 0;
  trun_buf_free(&prev);
  if (rc < 0) return;
  trun__rdzv_round_key(r, round, "left", k, sizeof(k));
  if (trun_client_add(r->client, trun_str(k), first ? 1 : 0, &left) < 0) return;
  if (left == r->info.group_world_size) {
    char all[512];
    trun__rdzv_round_key(r, round, "all_left", all, sizeof(all));
    trun_client_set(r->client, trun_str(all), trun_str("1"));
  }
  if (r->host && r->info.group_world_size > 1) {
    trun__rdzv_round_key(r, round, "all_left", k, sizeof(k));
    int waiting = trun__rdzv_wait_begin(
        r, "exit_barrier", timeout_ms / 1000.0, NULL, left_have,
        "the other nodes to leave round %d before the store closes (exit barrier)", round);
    rc = trun__rdzv_wait_key(r, k, timeout_ms);
    trun__rdzv_wait_end(r, waiting);
    if (rc == -ETIMEDOUT)
      trun_warn("exit barrier: not every node left within %d s; closing the store anyway", timeout_ms / 1000);
  }
}
