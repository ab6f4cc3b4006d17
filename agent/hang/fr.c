/* torch's flight-recorder dump reader (see hang.h). A rank's dump (TORCH_FR_DUMP_TEMP_FILE /
 * TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank, written when the watchdog fires or on the store's dump signal) is a
 * pickle (torch's own pickler: protocol 2, no classes) of a dict, format "2.x":
 *   {"version": "2.10", "comm_lib_version": "2.28.9", "pg_config": {...},
 *    "pg_status": {"0": {"last_enqueued_collective": 51, "last_started_collective": -1,
 *                        "last_completed_collective": 50}},
 *    "entries": [{"record_id", "collective_seq_id", "p2p_seq_id", "op_id", "is_p2p", "profiling_name",
 *                 "process_group": (name, desc), "state": "scheduled" | "started" | "completed",
 *                 "frames": [{"name", "filename", "line"}], "time_created_ns", ...}, ...]}
 * (torch/csrc/distributed/c10d/FlightRecorder*). base's pickle VM builds the value tree with every size
 * bounded; this file walks a fixed shape of it (never recursing, so a value that contains itself is harmless)
 * and copies out what the agent reports, printable (a worker wrote the file). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "hang.h"

#define MAX_TEXT 1024 /* bytes kept of one name or file name */

static int bad(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int bad(char *err, size_t errlen, int rc, const char *fmt, ...) {
  if (err && errlen) {
    int k = snprintf(err, errlen, "flight-recorder dump: ");
    if (k > 0 && (size_t)k < errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
      va_end(ap);
    }
  }
  return rc;
}

static const trun_pk_val *get(const trun_pk_val *d, const char *key) {
  if (!d || d->type != TRUN_PK_DICT) return NULL;
  const trun_pk_val *found = NULL;
  for (size_t i = 0; i < d->len; i++) {
    const trun_pk_val *k = d->items[2 * i];
    if (k->type == TRUN_PK_STR && strcmp(k->s, key) == 0) found = d->items[2 * i + 1]; /* the last one wins */
  }
  return found;
}

/* A printable copy of a str value (control bytes as '?', at most MAX_TEXT bytes); "" for anything else. */
static char *text(const trun_pk_val *v) {
  size_t n = v && v->type == TRUN_PK_STR ? v->n : 0;
  if (n > MAX_TEXT) n = MAX_TEXT;
  char *s = malloc(n + 1);
  if (!s) return NULL;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)v->s[i];
    s[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
  }
  s[n] = '\0';
  return s;
}

static int64_t ival(const trun_pk_val *v, int64_t dflt) {
  return v && (v->type == TRUN_PK_INT || v->type == TRUN_PK_BOOL) ? v->i : dflt;
}

static void op_free(trun_fr_op *o) {
  free(o->name);
  free(o->pg);
  memset(o, 0, sizeof(*o));
}

static int op_set(trun_fr_op *o, const trun_pk_val *e) {
  op_free(o);
  o->present = true;
  o->p2p = ival(get(e, "is_p2p"), 0) != 0;
  o->seq = ival(get(e, o->p2p ? "p2p_seq_id" : "collective_seq_id"), -1);
  const trun_pk_val *pg = get(e, "process_group");
  o->name = text(get(e, "profiling_name"));
  o->pg =
      text(pg && (pg->type == TRUN_PK_TUPLE || pg->type == TRUN_PK_LIST) && pg->len ? pg->items[0] : NULL);
  return o->name && o->pg ? 0 : -ENOMEM;
}

void trun_fr_free(trun_fr_dump *d) {
  if (!d) return;
  op_free(&d->completed);
  op_free(&d->started);
  op_free(&d->scheduled);
  op_free(&d->last);
  free(d->last_state);
  free(d->last_sizes);
  for (size_t i = 0; i < d->nframes; i++) {
    free(d->frames[i].file);
    free(d->frames[i].name);
  }
  free(d->frames);
  free(d);
}

/* The last entry's input_sizes ([[1048576], [4, 8]]) as text, at most MAX_SIZES bytes ("..." after); "" when
 * absent or not a list of lists of ints. */
#define MAX_SIZES 96
static char *sizes_text(const trun_pk_val *v) {
  char *s = calloc(1, MAX_SIZES + 4);
  if (!s || !v || v->type != TRUN_PK_LIST) return s;
  size_t o = 0;
  s[o++] = '[';
  for (size_t i = 0; i < v->len && o < MAX_SIZES; i++) {
    const trun_pk_val *t = v->items[i];
    if (t->type != TRUN_PK_LIST && t->type != TRUN_PK_TUPLE) return s[0] = '\0', s;
    o += (size_t)snprintf(s + o, MAX_SIZES + 4 - o, "%s[", i ? ", " : "");
    for (size_t j = 0; j < t->len && o < MAX_SIZES; j++) {
      if (t->items[j]->type != TRUN_PK_INT) return s[0] = '\0', s;
      o += (size_t)snprintf(s + o, MAX_SIZES + 4 - o, "%s%lld", j ? ", " : "", (long long)t->items[j]->i);
    }
    if (o < MAX_SIZES) s[o++] = ']';
  }
  if (o >= MAX_SIZES)
    memcpy(s + MAX_SIZES, "...", 4);
  else
    s[o++] = ']', s[o] = '\0';
  return s;
}

static int read_frames(trun_fr_dump *d, const trun_pk_val *e, char *err, size_t errlen) {
  const trun_pk_val *fr = get(e, "frames");
  if (!fr) return 0;
  if (fr->type != TRUN_PK_LIST) return bad(err, errlen, -EINVAL, "the last entry's \"frames\" is not a list");
  size_t n = fr->len < TRUN_FR_MAX_FRAMES ? fr->len : TRUN_FR_MAX_FRAMES;
  if (!n) return 0;
  d->frames = calloc(n, sizeof(*d->frames));
  if (!d->frames) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const trun_pk_val *f = fr->items[i];
    if (f->type != TRUN_PK_DICT)
      return bad(err, errlen, -EINVAL, "frame %zu of the last entry is not a dict", i);
    trun_fr_frame *o = &d->frames[d->nframes++];
    o->file = text(get(f, "filename"));
    o->name = text(get(f, "name"));
    o->line = (long)ival(get(f, "line"), -1);
    if (!o->file || !o->name) return -ENOMEM;
  }
  return 0;
}

static int walk(const trun_pk_val *root, trun_fr_dump *d, char *err, size_t errlen) {
  if (root->type != TRUN_PK_DICT) return bad(err, errlen, -EINVAL, "not a dict at the top");
  const trun_pk_val *ver = get(root, "version");
  if (!ver || ver->type != TRUN_PK_STR) return bad(err, errlen, -EINVAL, "no \"version\" string");
  if (ver->n >= sizeof(d->version) || strncmp(ver->s, "2.", 2) != 0 || strlen(ver->s) != ver->n)
    return bad(err, errlen, -EINVAL, "format %.15s is not one this reader knows (2.x)", ver->s);
  memcpy(d->version, ver->s, ver->n + 1);
  const trun_pk_val *lib = get(root, "comm_lib_version");
  if (lib && lib->type == TRUN_PK_STR && lib->n < sizeof(d->comm_lib_version) && strlen(lib->s) == lib->n)
    memcpy(d->comm_lib_version, lib->s, lib->n + 1);
  d->last_enqueued = d->last_started = d->last_completed = -1;
  const trun_pk_val *pgs = get(root, "pg_status"), *pg = get(pgs, "0");
  if (!pg && pgs && pgs->type == TRUN_PK_DICT && pgs->len) pg = pgs->items[1];
  if (pg && pg->type == TRUN_PK_DICT) {
    d->last_enqueued = ival(get(pg, "last_enqueued_collective"), -1);
    d->last_started = ival(get(pg, "last_started_collective"), -1);
    d->last_completed = ival(get(pg, "last_completed_collective"), -1);
  }
  const trun_pk_val *es = get(root, "entries");
  if (!es) return 0; /* a dump with no collectives recorded */
  if (es->type != TRUN_PK_LIST) return bad(err, errlen, -EINVAL, "\"entries\" is not a list");
  d->nentries = es->len;
  const trun_pk_val *last = NULL;
  int rc = 0;
  for (size_t i = 0; i < es->len && rc == 0; i++) {
    const trun_pk_val *e = es->items[i], *st = get(e, "state");
    if (e->type != TRUN_PK_DICT) return bad(err, errlen, -EINVAL, "entry %zu is not a dict", i);
    if (!st || st->type != TRUN_PK_STR)
      return bad(err, errlen, -EINVAL, "entry %zu has no \"state\" string", i);
    if (strcmp(st->s, "completed") == 0)
      rc = op_set(&d->completed, e);
    else if (strcmp(st->s, "started") == 0)
      rc = op_set(&d->started, e);
    else if (strcmp(st->s, "scheduled") == 0)
      rc = op_set(&d->scheduled, e);
    last = e;
  }
  if (rc || !last) return rc;
  if ((rc = op_set(&d->last, last))) return rc;
  if (!(d->last_state = text(get(last, "state")))) return -ENOMEM;
  if (!(d->last_sizes = sizes_text(get(last, "input_sizes")))) return -ENOMEM;
  return read_frames(d, last, err, errlen);
}

int trun_fr_parse(const uint8_t *p, size_t n, trun_fr_dump **out, char *err, size_t errlen) {
  *out = NULL;
  if (err && errlen) err[0] = '\0';
  if (n > TRUN_FR_MAX_FILE) return bad(err, errlen, -E2BIG, "%zu bytes, over %u", n, TRUN_FR_MAX_FILE);
  trun_pickle_limits lim;
  trun_pickle_limits_default(&lim);
  lim.max_input = TRUN_FR_MAX_FILE;
  trun_pickle_doc *doc = NULL;
  trun_pickle_err perr;
  int rc = trun_pickle_load(p, n, &lim, &doc, &perr);
  if (rc) return bad(err, errlen, rc, "%s", perr.msg);
  trun_fr_dump *d = calloc(1, sizeof(*d));
  if (!d) {
    trun_pickle_free(doc);
    return bad(err, errlen, -ENOMEM, "out of memory");
  }
  rc = walk(doc->root, d, err, errlen);
  trun_pickle_free(doc);
  if (rc) {
    if (rc == -ENOMEM) bad(err, errlen, rc, "out of memory");
    trun_fr_free(d);
    return rc;
  }
  *out = d;
  return 0;
}

int trun_fr_load_file(const char *path, trun_fr_dump **out, char *err, size_t errlen) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return bad(err, errlen, -errno, "%s: open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    return bad(err, errlen, -e, "%s: fstat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return bad(err, errlen, -EINVAL, "%s: not a regular file", path);
  }
  if (st.st_size > (off_t)TRUN_FR_MAX_FILE) {
    close(fd);
    return bad(err, errlen, -E2BIG, "%s: %lld bytes, over %u", path, (long long)st.st_size, TRUN_FR_MAX_FILE);
  }
  size_t cap = (size_t)st.st_size + 1, n = 0;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return bad(err, errlen, -ENOMEM, "%s: out of memory", path);
  }
  for (;;) { /* the file may grow while we read: never past cap */
    ssize_t k = read(fd, buf + n, cap - n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      int e = errno;
      free(buf);
      close(fd);
      return bad(err, errlen, -e, "%s: read: %s", path, strerror(e));
    }
    if (k == 0) break;
    n += (size_t)k;
    if (n == cap) {
      free(buf);
      close(fd);
      return bad(err, errlen, -EAGAIN, "%s: still being written (grew while read); read it again later",
                 path);
    }
  }
  if (close(fd) < 0) {
    int e = errno;
    free(buf);
    return bad(err, errlen, -e, "%s: close: %s", path, strerror(e));
  }
  char perr[256];
  int rc = trun_fr_parse(buf, n, out, perr, sizeof(perr));
  free(buf);
  const char *why = strncmp(perr, "flight-recorder dump: ", 22) == 0 ? perr + 22 : perr;
  if (rc) return bad(err, errlen, rc, "%s: %s", path, why);
  return 0;
}
