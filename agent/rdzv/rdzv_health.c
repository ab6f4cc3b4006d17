/* The job's health records and a node's own exclusion in the rendezvous store (agent/rdzv/rdzv.h): the keys
 * /trun/<run_id>/health/n and /trun/<run_id>/health/<i> (docs/rendezvous.md, "Key space"), written by a node
 * that leaves the job unhealthy or fails its health gate, read by every agent at the start of a round (such a
 * gate failure reaches the store from outside any round: trun_rdzv_reach, rdzv.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_int.h"

static void health_key(const trun_rdzv *r, const char *what, char *out, size_t len) {
  snprintf(out, len, "/trun/%s/health/%s", r->cfg->run_id, what);
}

int trun_rdzv_health_publish(trun_rdzv *r, const char *json) {
  if (r->client == NULL) return -ENOTCONN;
  char k[512], i_s[24];
  int64_t i = 0;
  health_key(r, "n", k, sizeof(k));
  int rc = trun_client_add(r->client, trun_str(k), 1, &i);
  if (rc < 0) return rc;
  snprintf(i_s, sizeof(i_s), "%lld", (long long)i);
  health_key(r, i_s, k, sizeof(k));
  return trun_client_set(r->client, trun_str(k), trun_str(json));
}

int trun_rdzv_health_read(trun_rdzv *r, int from, char ***out, int *n) {
  *out = NULL;
  *n = 0;
  if (r->client == NULL) return -ENOTCONN;
  char k[512], i_s[24];
  int64_t count = 0;
  health_key(r, "n", k, sizeof(k));
  int rc = trun_client_add(r->client, trun_str(k), 0, &count);
  if (rc < 0) return rc;
  if (count <= from) return 0;
  char **v = calloc((size_t)(count - from), sizeof(char *));
  if (v == NULL) return -ENOMEM;
  for (int64_t i = from + 1; i <= count; i++) {
    trun_buf b = {0};
    snprintf(i_s, sizeof(i_s), "%lld", (long long)i);
    health_key(r, i_s, k, sizeof(k));
    if (trun_client_get(r->client, trun_str(k), &b, 2000) < 0) { /* written right after the count */
      trun_buf_free(&b);
      break;
    }
    char *s = malloc(b.len + 1);
    if (s == NULL) {
      trun_buf_free(&b);
      break;
    }
    if (b.len) memcpy(s, b.data, b.len);
    s[b.len] = '\0';
    trun_buf_free(&b);
    v[(*n)++] = s;
  }
  *out = v;
  return 0;
}

int trun_rdzv_exclude_node(trun_rdzv *r, const trun_rdzv_node_id *id, const char *kind, const char *cause) {
  if (r->client == NULL) return -ENOTCONN;
  return trun_rdzv_exclude(r->client, r->cfg, id, kind, cause);
}
