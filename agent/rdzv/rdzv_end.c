/* The end of a round across nodes, shared by the static and trun backends (agent/rdzv/rdzv.h): one key per
 * round ("end") that the first announcement sets, "ok" once every node's workers succeeded, the nodes'
 * failure records beside it, and the exit barrier ("left", "all_left") that keeps the store up until every
 * node has read what it needs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_int.h"

int trun_rdzv_watch_connect(trun_rdzv *r, int timeout_ms, trun_client **out) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = r->store_addr;
  o.port = r->store_port;
  o.gen = r->store_gen;
  o.key_prefix = "";
  o.connect_timeout_ms = timeout_ms;
  return trun_client_connect(&o, out);
}

void trun_rdzv_end_wait(const trun_rdzv *r, trun_client *c, int round, char *value, size_t len) {
  char k[600];
  (void)round; /* the round's key space says it (static and trun: /trun/<run_id>/r<round>) */
  snprintf(k, sizeof(k), "%s/end", r->key_space);
  trun_buf v = {0};
  int rc;
  while ((rc = trun_client_get(c, trun_str(k), &v, 3600 * 1000)) == -ETIMEDOUT) {
  }
  if (rc == 0) {
    size_t n = v.len < len - 1 ? v.len : len - 1;
    memcpy(value, v.data, n);
    value[n] = '\0';
  } else {
    snprintf(value, len, "lost:%d", -rc);
  }
  trun_buf_free(&v);
}

int trun_rdzv_announce_failure(trun_rdzv *r, int round, const char *failure_json) {
  char k[512], v[32];
  snprintf(k, sizeof(k), "/trun/%s/r%d/failure/%d", r->cfg->run_id, round, r->group_rank);
  int rc = trun_client_set(r->client, trun_str(k), trun_str(failure_json ? failure_json : "{}"));
  trun__rdzv_round_key(r, round, "end", k, sizeof(k));
  snprintf(v, sizeof(v), "fail:%d", r->group_rank);
  trun_buf out = {0};
  /* First announcement wins: compare_set on an absent key with empty expected creates it. */
  int rc2 = trun_client_compare_set(r->client, trun_str(k), trun_str(""), trun_str(v), &out);
  trun_buf_free(&out);
  return rc < 0 ? rc : rc2;
}

int trun_rdzv_announce_success(trun_rdzv *r, int round) {
  char k[512];
  int64_t done;
  trun__rdzv_round_key(r, round, "done", k, sizeof(k));
  int rc = trun_client_add(r->client, trun_str(k), 1, &done);
  if (rc < 0) return rc;
  trun__rdzv_round_key(r, round, "end", k, sizeof(k));
  if (done == r->group_world_size) {
    trun_buf out = {0};
    rc = trun_client_compare_set(r->client, trun_str(k), trun_str(""), trun_str("ok"), &out);
    trun_buf_free(&out);
    if (rc < 0) return rc;
  }
  /* This node is done; the round is done when every node is, or when one failed. */
  return trun__rdzv_wait_key(r, k, 7 * 24 * 3600 * 1000);
}

int trun_rdzv_collect_failures(trun_rdzv *r, int round, int timeout_ms, char ***out, int *n) {
  int world = r->group_world_size;
  char **res = calloc((size_t)world, sizeof(char *));
  if (res == NULL) return -ENOMEM;
  *n = 0;
  for (int g = 0; g < world; g++) {
    char k[512];
    snprintf(k, sizeof(k), "/trun/%s/r%d/failure/%d", r->cfg->run_id, round, g);
    trun_buf v = {0};
    int rc = trun_client_get(r->client, trun_str(k), &v, g == r->group_rank ? 1000 : timeout_ms);
    if (rc == 0 && trun_buf_append_u8(&v, 0) == 0)
      res[(*n)++] = (char *)v.data;
    else
      trun_buf_free(&v);
    if (rc < 0 && rc != -ETIMEDOUT) break;
  }
  *out = res;
  return 0;
}

void trun__rdzv_leave(trun_rdzv *r, int round, int timeout_ms) {
  char k[512];
  int64_t left = 0;
  trun__rdzv_round_key(r, round, "left", k, sizeof(k));
  if (trun_client_add(r->client, trun_str(k), 1, &left) < 0) return;
  if (left == r->group_world_size) {
    char all[512];
    trun__rdzv_round_key(r, round, "all_left", all, sizeof(all));
    trun_client_set(r->client, trun_str(all), trun_str("1"));
  }
  if (r->host && r->group_world_size > 1) {
    trun__rdzv_round_key(r, round, "all_left", k, sizeof(k));
    if (trun__rdzv_wait_key(r, k, timeout_ms) == -ETIMEDOUT)
      trun_warn("exit barrier: not every node left within %d s; closing the store anyway", timeout_ms / 1000);
  }
}
