/* The values of a round's end key (agent/rdzv/rdzv_int.h: trun__rdzv_end_encode / _decode; rdzv.h:
 * trun_rdzv_end), at the bottom of the rendezvous with the store's keys (rdzv_store.c): the liveness
 * (rdzv_live.c) and the end protocol (rdzv_end.c) write them, the end watcher (rdzv_watch.c) reads them.
 *
 * The key "<key space>/end" is set once per round, by compare-and-set (the first announcement wins):
 *   "ok"              every node's workers succeeded (rdzv_end.c, the last node to succeed);
 *   "fail:<g>"        node g's workers failed first (rdzv_end.c; on every backend: on c10d only trun agents
 *                     write and read it), its record beside it ("failure/<g>"), which the watcher reads too;
 *   "member:<why>"    the membership changes: "member:join" (a late node asks for a new round),
 *                     "member:lost:<g>" (node g's heartbeat stopped) (trun/fast.c);
 *   "gone:<g>"        the liveness found node g gone (rdzv_live.c), on every backend (c10d: only then and by
 *                     a failing trun agent).
 * Anyone with the job's token can write the store, so a value is decoded strictly: anything else, a group
 * rank that is not a small decimal below the round's size included, reads as TRUN_RDZV_END_INVALID. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rdzv_int.h"

/* The longest group rank the key holds: 9 decimal digits always fit an int. */
#define RANK_DIGITS_MAX 9

int trun__rdzv_end_encode(trun_rdzv_end_kind kind, int node, const char *why, char *out, size_t len) {
  int n;
  switch (kind) {
    case TRUN_RDZV_END_OK: n = snprintf(out, len, "ok"); break;
    case TRUN_RDZV_END_FAILED:
    case TRUN_RDZV_END_NODE_LOST:
      if (node < 0) return -EINVAL;
      n = snprintf(out, len, "%s:%d", kind == TRUN_RDZV_END_FAILED ? "fail" : "gone", node);
      break;
    case TRUN_RDZV_END_MEMBER: n = snprintf(out, len, "member:%s", why ? why : ""); break;
    default: /* NONE, STORE_LOST, INVALID: what a node knows, never a value of the key */ return -EINVAL;
  }
  return n < 0 || (size_t)n >= len ? -ENOSPC : 0;
}

/* A group rank as the end key holds it: 1 to RANK_DIGITS_MAX decimal digits, below world (world <= 0: any).
 * The rank, or -1. */
static int parse_rank(const char *p, size_t n, int world) {
  if (n == 0 || n > RANK_DIGITS_MAX) return -1;
  int g = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    g = g * 10 + (p[i] - '0');
  }
  return world > 0 && g >= world ? -1 : g;
}

/* n bytes of p as text for a log line: cut to len - 1, '?' for each byte that is not printable ASCII. */
static void printable(const char *p, size_t n, char *out, size_t len) {
  size_t i = 0;
  for (; i < n && i + 1 < len; i++) out[i] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
  out[i] = '\0';
}

static int has_prefix(const char *v, size_t n, const char *prefix) {
  size_t k = strlen(prefix);
  return n >= k && memcmp(v, prefix, k) == 0;
}

void trun__rdzv_end_decode(const void *value, size_t n, int world, trun_rdzv_end *out) {
  const char *v = value ? value : "";
  if (value == NULL) n = 0;
  memset(out, 0, sizeof(*out));
  out->node = -1;
  int g;
  if (n == 2 && memcmp(v, "ok", 2) == 0) {
    out->kind = TRUN_RDZV_END_OK;
  } else if (has_prefix(v, n, "member:")) {
    out->kind = TRUN_RDZV_END_MEMBER;
    printable(v + 7, n - 7, out->cause, sizeof(out->cause));
  } else if (has_prefix(v, n, "fail:") && (g = parse_rank(v + 5, n - 5, world)) >= 0) {
    out->kind = TRUN_RDZV_END_FAILED;
    out->node = g;
  } else if (has_prefix(v, n, "gone:") && (g = parse_rank(v + 5, n - 5, world)) >= 0) {
    out->kind = TRUN_RDZV_END_NODE_LOST;
    out->node = g;
  } else {
    out->kind = TRUN_RDZV_END_INVALID;
    printable(v, n, out->cause, sizeof(out->cause));
  }
}

void trun_rdzv_end_store_lost(trun_rdzv_end *e, int round, int err) {
  char buf[128];
  memset(e, 0, sizeof(*e));
  e->kind = TRUN_RDZV_END_STORE_LOST;
  e->round = round;
  e->node = -1;
  e->err = err;
  snprintf(e->cause, sizeof(e->cause), "%s", strerror_r(err, buf, sizeof(buf))); /* GNU: the text */
}
