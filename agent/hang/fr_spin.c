/* Every rank in NCCL (see hang.h): RAS counts launches, so a job whose ranks all launched the same collective
 * and wait in it (a GPU kernel that spins before it on one rank's stream, a collective that never completes)
 * shows equal, frozen counts, as an idle job does. Two flight-recorder probes some seconds apart tell them
 * apart: a hang when every rank's newest entry is the same not-completed collective in both; an idle job has
 * completed its newest entry. Pure: no I/O. */
#include <stdio.h>
#include <string.h>

#include "hang.h"

static int same_entry(const trun_fr_dump *x, const trun_fr_dump *y) {
  return x->last.present && y->last.present && x->last.seq == y->last.seq && x->last.p2p == y->last.p2p &&
         strcmp(x->last.name, y->last.name) == 0 && strcmp(x->last.pg, y->last.pg) == 0 &&
         strcmp(x->last_state, y->last_state) == 0;
}

int trun_fr_spin(const trun_fr_rank *a, const trun_fr_rank *b, size_t n, int *culprit, size_t *nculprit,
                 char *line, size_t len) {
  *nculprit = 0;
  if (len) line[0] = '\0';
  if (n == 0 || n > TRUN_FR_MAX_RANKS) return 0;
  size_t started = 0, scheduled = 0;
  for (size_t i = 0; i < n; i++) {
    const trun_fr_dump *x = a[i].dump, *y = b[i].dump;
    if (!x || !y || a[i].rank != b[i].rank) return 0;      /* a rank without a dump: nothing to judge by */
    if (!same_entry(x, y)) return 0;                       /* it moved, or nothing recorded */
    if (strcmp(y->last_state, "completed") == 0) return 0; /* idle: its newest collective is done */
    if (strcmp(y->last_state, "started") == 0)
      started++;
    else if (strcmp(y->last_state, "scheduled") == 0)
      scheduled++;
    else
      return 0;
  }
  const trun_fr_dump *ref = b[0].dump;
  size_t o = 0;
  int k;
  if (started > 0 &&
      scheduled > 0) { /* the GPU ran the others' collective, not theirs: theirs is stuck behind */
    k = snprintf(line, len, "rank%s ", scheduled > 1 ? "s" : "");
    o = k > 0 && (size_t)k < len ? (size_t)k : o;
    for (size_t i = 0; i < n; i++) {
      if (strcmp(b[i].dump->last_state, "scheduled") != 0) continue;
      culprit[(*nculprit)++] = b[i].rank;
      k = snprintf(line + o, len - o, "%s%d", *nculprit > 1 ? ", " : "", b[i].rank);
      o += k > 0 && (size_t)k < len - o ? (size_t)k : 0;
    }
    snprintf(
        line + o, len - o,
        " never started %s #%lld on the GPU while %zu rank(s) started it and wait: something before it on "
        "that GPU does not end (a kernel that spins)",
        ref->last.name, (long long)ref->last.seq, started);
  } else {
    snprintf(
        line, len, "every rank waits in %s #%lld (%s) in both flight-recorder probes: culprit unknown%s",
        ref->last.name, (long long)ref->last.seq, ref->last_state,
        started ? "" : " (TORCH_NCCL_ENABLE_TIMING=1 would tell the rank whose collective never started)");
  }
  for (size_t i = 0; i < (len ? strlen(line) : 0); i++) /* ASCII only: the names came from a worker's file */
    if ((unsigned char)line[i] >= 0x80) line[i] = '?';
  return 1;
}
