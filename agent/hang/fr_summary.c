/* What a set of ranks' flight-recorder dumps say together, in one line (see hang.h): the ranks grouped by
 * their newest entry (collective, sequence number, state, input sizes, the script's line that called it), the
 * largest group taken as what the job does, and each other group marked "behind" (its newest collective is
 * older) or "mismatched" (the same sequence number, another collective or other sizes). Pure: no I/O. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hang.h"

/* The innermost frame outside torch's own files ("hang_worker.py:15"), or "" (base name only). */
static void where(const trun_fr_dump *d, char *out, size_t len) {
  out[0] = '\0';
  for (size_t i = 0; i < d->nframes; i++) {
    const char *f = d->frames[i].file;
    if (strstr(f, "/torch/") || strstr(f, "/site-packages/") || f[0] == '<') continue;
    const char *b = strrchr(f, '/');
    snprintf(out, len, "%s:%ld", b ? b + 1 : f, d->frames[i].line);
    return;
  }
}

static int same(const trun_fr_dump *a, const trun_fr_dump *b) {
  if (!a || !b) return a == b;
  if (a->last.present != b->last.present) return 0;
  if (!a->last.present) return 1;
  char wa[160], wb[160];
  where(a, wa, sizeof(wa));
  where(b, wb, sizeof(wb));
  return a->last.seq == b->last.seq && strcmp(a->last.name, b->last.name) == 0 &&
         strcmp(a->last_state, b->last_state) == 0 && strcmp(a->last_sizes, b->last_sizes) == 0 &&
         strcmp(wa, wb) == 0;
}

/* Appends with snprintf's rules, never past len. */
static void add(char *out, size_t len, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add(char *out, size_t len, size_t *o, const char *fmt, ...) {
  if (*o + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(out + *o, len - *o, fmt, ap);
  va_end(ap);
  if (k > 0) *o += (size_t)k < len - *o ? (size_t)k : len - *o - 1;
}

/* "rank 3", "ranks 0-2", "ranks 0, 2, 5-7" of the members of group g. */
static void rank_list(const trun_fr_rank *r, size_t n, const int *grp, int g, char *out, size_t len,
                      size_t *o) {
  int count = 0;
  for (size_t i = 0; i < n; i++) count += grp[i] == g;
  add(out, len, o, "%s ", count > 1 ? "ranks" : "rank");
  int first = 1;
  for (size_t i = 0; i < n; i++) {
    if (grp[i] != g) continue;
    size_t j = i;
    while (j + 1 < n && grp[j + 1] == g && r[j + 1].rank == r[j].rank + 1) j++;
    if (j > i)
      add(out, len, o, "%s%d-%d", first ? "" : ", ", r[i].rank, r[j].rank);
    else
      add(out, len, o, "%s%d", first ? "" : ", ", r[i].rank);
    first = 0;
    i = j;
  }
}

size_t trun_fr_summarize(const trun_fr_rank *r, size_t n, char *out, size_t len) {
  if (len == 0) return 0;
  out[0] = '\0';
  if (n == 0) return 0;
  if (n > TRUN_FR_MAX_RANKS) n = TRUN_FR_MAX_RANKS;
  int grp[TRUN_FR_MAX_RANKS], ngrp = 0, size[TRUN_FR_MAX_RANKS] = {0};
  size_t rep[TRUN_FR_MAX_RANKS];
  for (size_t i = 0; i < n; i++) {
    grp[i] = -1;
    for (int g = 0; g < ngrp && grp[i] < 0; g++)
      if (same(r[rep[g]].dump, r[i].dump)) grp[i] = g;
    if (grp[i] < 0) rep[ngrp] = i, grp[i] = ngrp++;
    size[grp[i]]++;
  }
  int ref = -1; /* the largest group with a dump that has entries: what the job does */
  for (int g = 0; g < ngrp; g++) {
    const trun_fr_dump *d = r[rep[g]].dump;
    if (d && d->last.present && (ref < 0 || size[g] > size[ref])) ref = g;
  }
  size_t o = 0;
  for (int g = 0; g < ngrp; g++) {
    const trun_fr_dump *d = r[rep[g]].dump;
    add(out, len, &o, "%s", g ? "; " : "");
    rank_list(r, n, grp, g, out, len, &o);
    if (!d) {
      add(out, len, &o, ": no dump (%s)", r[rep[g]].why[0] ? r[rep[g]].why : "none written");
      continue;
    }
    if (!d->last.present) {
      add(out, len, &o, ": no collective recorded");
      continue;
    }
    char w[160];
    where(d, w, sizeof(w));
    add(out, len, &o, ": %s #%lld %s", d->last.name, (long long)d->last.seq, d->last_state);
    if (d->last_sizes[0]) add(out, len, &o, " %s", d->last_sizes);
    if (w[0]) add(out, len, &o, " (%s)", w);
    if (ref < 0 || g == ref) continue;
    const trun_fr_dump *e = r[rep[ref]].dump;
    if (d->last.seq < e->last.seq && d->last.p2p == e->last.p2p)
      add(out, len, &o, ": behind");
    else if (d->last.seq == e->last.seq &&
             (strcmp(d->last.name, e->last.name) != 0 || strcmp(d->last_sizes, e->last_sizes) != 0))
      add(out, len, &o, ": mismatched");
  }
  for (size_t i = 0; i < o; i++) /* ASCII only: the names came from a worker's file */
    if ((unsigned char)out[i] >= 0x80) out[i] = '?';
  return o;
}
