/* The job's attempt (agent/rdzv/rdzv_int.h): the TORCHELASTIC_RESTART_COUNT every worker of a round gets,
 * the same on every node whoever joined when (a spare, a late joiner, a node back from a loss). torch's
 * workers on the agents' store key their rendezvous by it (/worker/attempt_<n>): one node with another
 * count keeps the group from forming.
 *
 * Two keys of the rendezvous store: /trun/<run_id>/attempt, the job's highest attempt (each node raises it
 * to its own count before it joins a round, by compare-and-set), and <round key space>/attempt, the round's
 * attempt: the first node of the round to get there copies the job's value into it, and every node takes
 * that. Every node of a round raised the job's value before the round was committed, and none of them can
 * raise it again before it ran that round's workers, which it does only after the round's value is set:
 * the round's value is the highest count of its nodes, for all of them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_int.h"

#define ATTEMPT_TRIES \
  64 /* compare-and-set races lost in a row before giving up (each is another node's raise) */

static int parse_count(const trun_buf *b, int *out) {
  char s[24];
  if (b->len == 0 || b->len >= sizeof(s)) return -1;
  memcpy(s, b->data, b->len);
  s[b->len] = '\0';
  char *end;
  long v = strtol(s, &end, 10);
  if (*end != '\0' || v < 0 || v > 1000000000L) return -1;
  *out = (int)v;
  return 0;
}

/* Raises key to at least own; the key's value after it into *job. 0 or a negative errno (-EPROTO: the key
 * holds something else than a count). */
static int raise_to(trun_client *c, const char *key, int own, int *job) {
  char want[24], seen[24] = "";
  snprintf(want, sizeof(want), "%d", own);
  trun_buf b = {0};
  int rc = -EAGAIN;
  for (int i = 0; i < ATTEMPT_TRIES && rc == -EAGAIN; i++) {
    b.len = 0;
    rc = trun_client_compare_set(c, trun_str(key), trun_str(seen), trun_str(want), &b);
    if (rc < 0) break;
    int now;
    if (parse_count(&b, &now) < 0) {
      rc = -EPROTO;
    } else if (now >= own) {
      *job = now; /* ours, or another node's higher one */
      rc = 0;
    } else {
      snprintf(seen, sizeof(seen), "%d", now); /* lower: try again against what is there */
      rc = -EAGAIN;
    }
  }
  trun_buf_free(&b);
  return rc == -EAGAIN ? -EBUSY : rc;
}

int trun__rdzv_attempt_propose(trun_rdzv *r) {
  char k[320];
  snprintf(k, sizeof(k), "/trun/%s/attempt", r->cfg->run_id);
  int job = 0;
  int rc = raise_to(r->client, k, r->info.attempt, &job);
  if (rc < 0)
    trun_warn(
        "could not raise the job's attempt %s in the rendezvous store to %d: %s; this node's workers may "
        "get another TORCHELASTIC_RESTART_COUNT than the others'",
        k, r->info.attempt, rc == -EPROTO ? "it holds something else than a count" : strerror(-rc));
  return rc;
}

int trun__rdzv_attempt_settle(trun_rdzv *r) {
  char jk[320], rk[sizeof(r->key_space) + 16];
  snprintf(jk, sizeof(jk), "/trun/%s/attempt", r->cfg->run_id);
  snprintf(rk, sizeof(rk), "%s/attempt", r->key_space);
  trun_buf b = {0};
  int job = 0, round = 0, rc = trun_client_get(r->client, trun_str(jk), &b, 10000);
  if (rc == 0 && parse_count(&b, &job) < 0) rc = -EPROTO;
  if (rc == 0) {
    char v[24];
    snprintf(v, sizeof(v), "%d", job);
    b.len = 0;
    rc = trun_client_compare_set(r->client, trun_str(rk), trun_str(""), trun_str(v), &b);
    if (rc == 0 && parse_count(&b, &round) < 0) rc = -EPROTO;
  }
  trun_buf_free(&b);
  if (rc < 0) {
    trun_warn(
        "could not read the round's attempt (%s, %s) from the rendezvous store: %s; this node's workers "
        "get its own count %d, which may differ from the others'",
        jk, rk, rc == -EPROTO ? "it holds something else than a count" : strerror(-rc), r->info.attempt);
    return rc;
  }
  if (round != r->info.attempt)
    trun_info(
        "the job is at attempt %d (this node had counted %d): its workers get TORCHELASTIC_RESTART_COUNT=%d",
        round, r->info.attempt, round);
  r->info.attempt = round;
  return 0;
}
