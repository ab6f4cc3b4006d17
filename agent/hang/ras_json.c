/* The NCCL RAS JSON reader (see hang.h): `VERBOSE STATUS` in JSON (NCCL 2.28.7+, src/ras/client_support.cc
 * writes it) as typed communicators and ranks. The answer comes from any process that listens on the RAS
 * port, so every field is checked: types, ranges, counts against arrays, ranks unique and inside the
 * communicator; a lie is a named error and memory stays O(input). */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hang.h"

typedef struct {
  char *err;
  size_t errlen;
} ctx;

static int bad(ctx *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(ctx *c, int rc, const char *fmt, ...) {
  if (c->err && c->errlen) {
    int k = snprintf(c->err, c->errlen, "NCCL RAS answer: ");
    if (k > 0 && (size_t)k < c->errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
      va_end(ap);
    }
  }
  return rc;
}

/* A string field into out (printable ASCII only, shorter than outlen); absent is "" when optional. */
static int get_str(ctx *c, json_t *o, const char *key, char *out, size_t outlen, int optional,
                   const char *where) {
  json_t *v = json_object_get(o, key);
  out[0] = '\0';
  if (!v && optional) return 0;
  if (!json_is_string(v))
    return bad(c, -EINVAL, "%s: \"%s\" is %s, want a string", where, key, v ? "not a string" : "missing");
  const char *s = json_string_value(v);
  size_t n = json_string_length(v);
  if (n >= outlen) return bad(c, -EINVAL, "%s: \"%s\" is %zu bytes, over %zu", where, key, n, outlen - 1);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
      return bad(c, -EINVAL, "%s: \"%s\" holds a control or non-ASCII byte", where, key);
  memcpy(out, s, n + 1);
  return 0;
}

/* An integer field in lo..hi; absent gives dflt when optional. */
static int get_int(ctx *c, json_t *o, const char *key, long long lo, long long hi, int optional,
                   long long dflt, long long *out, const char *where) {
  json_t *v = json_object_get(o, key);
  if (!v && optional) {
    *out = dflt;
    return 0;
  }
  if (!json_is_integer(v))
    return bad(c, -EINVAL, "%s: \"%s\" is %s, want an integer", where, key, v ? "not an integer" : "missing");
  long long x = json_integer_value(v);
  if (x < lo || x > hi)
    return bad(c, -EINVAL, "%s: \"%s\" = %lld, outside %lld..%lld", where, key, x, lo, hi);
  *out = x;
  return 0;
}

static int get_bool(ctx *c, json_t *o, const char *key, bool *out, const char *where) {
  json_t *v = json_object_get(o, key);
  *out = false;
  if (!v) return 0;
  if (!json_is_boolean(v)) return bad(c, -EINVAL, "%s: \"%s\" is not true or false", where, key);
  *out = json_is_true(v);
  return 0;
}

/* One record of "ranks" (missing = 0) or "missing_ranks" (missing = 1). */
static int read_rank(ctx *c, json_t *r, int missing, int size, trun_ras_rank *out, const char *comm) {
  char where[96];
  long long x;
  int rc;
  snprintf(where, sizeof(where), "communicator %s: %s record", comm, missing ? "missing_ranks" : "ranks");
  if (!json_is_object(r)) return bad(c, -EINVAL, "%s: not an object", where);
  if ((rc = get_int(c, r, "rank", 0, size - 1, 0, 0, &x, where))) return rc;
  out->rank = (int)x;
  snprintf(where, sizeof(where), "communicator %s: rank %d", comm, out->rank);
  if ((rc = get_str(c, r, "host", out->host, sizeof(out->host), 1, where))) return rc;
  if (!out->host[0]) snprintf(out->host, sizeof(out->host), "unknown");
  if ((rc = get_int(c, r, "pid", -1, 0x7fffffffLL, 1, -1, &x, where))) return rc;
  out->pid = (long)x;
  if ((rc = get_int(c, r, "cuda_dev", -1, 65535, 1, -1, &x, where))) return rc;
  out->cuda_dev = (int)x;
  if ((rc = get_int(c, r, "nvml_dev", -1, 65535, 1, -1, &x, where))) return rc;
  out->nvml_dev = (int)x;
  out->missing = missing;
  json_t *st = json_object_get(r, "status");
  if (st && !json_is_object(st)) return bad(c, -EINVAL, "%s: \"status\" is not an object", where);
  if (st && missing) {
    if ((rc = get_bool(c, st, "unresponsive", &out->unresponsive, where))) return rc;
    if ((rc = get_bool(c, st, "considered_dead", &out->dead, where))) return rc;
  } else if (st) {
    if ((rc = get_int(c, st, "init_state", -1000000, 1000000, 1, 0, &x, where))) return rc;
    out->init_state = (int)x;
    if ((rc = get_int(c, st, "async_error", -1000000, 1000000, 1, 0, &x, where))) return rc;
    out->async_error = (int)x;
    if ((rc = get_bool(c, st, "finalize_called", &out->finalize_called, where))) return rc;
    if ((rc = get_bool(c, st, "destroy_flag", &out->destroy_flag, where))) return rc;
    if ((rc = get_bool(c, st, "abort_flag", &out->abort_flag, where))) return rc;
  }
  if (missing) return 0;
  json_t *cc = json_object_get(r, "collective_counts");
  if (!json_is_object(cc)) return bad(c, -EINVAL, "%s: \"collective_counts\" is not an object", where);
  if (json_object_size(cc) > TRUN_RAS_MAX_KINDS)
    return bad(c, -E2BIG, "%s: %zu collective kinds, over %d", where, json_object_size(cc),
               TRUN_RAS_MAX_KINDS);
  const char *k;
  json_t *v;
  json_object_foreach(cc, k, v) {
    trun_ras_count *e = &out->counts[out->nkinds];
    size_t kl = strlen(k);
    if (kl == 0 || kl >= sizeof(e->name))
      return bad(c, -EINVAL, "%s: a collective kind's name of %zu bytes", where, kl);
    for (size_t i = 0; i < kl; i++)
      if (!((k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') ||
            k[i] == '_'))
        return bad(c, -EINVAL, "%s: a collective kind's name is not a word", where);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      return bad(c, -EINVAL, "%s: count of %s is not a non-negative integer", where, k);
    memcpy(e->name, k, kl + 1);
    e->n = (uint64_t)json_integer_value(v);
    out->nkinds++;
  }
  return 0;
}

static int read_comm(ctx *c, json_t *j, trun_ras_comm *out, size_t *total) {
  char where[64];
  long long size, nr, nm;
  int rc;
  if (!json_is_object(j)) return bad(c, -EINVAL, "a communicator is not an object");
  if ((rc = get_str(c, j, "hash", out->hash, sizeof(out->hash), 0, "communicator"))) return rc;
  snprintf(where, sizeof(where), "communicator %s", out->hash);
  if ((rc = get_str(c, j, "secondary_hash", out->secondary, sizeof(out->secondary), 1, where))) return rc;
  if ((rc = get_int(c, j, "size", 1, TRUN_RAS_MAX_SIZE, 0, 0, &size, where))) return rc;
  out->size = (int)size;
  json_t *ranks = json_object_get(j, "ranks"), *miss = json_object_get(j, "missing_ranks");
  if (!json_is_array(ranks)) return bad(c, -EINVAL, "%s: \"ranks\" is not an array", where);
  if (miss && !json_is_array(miss)) return bad(c, -EINVAL, "%s: \"missing_ranks\" is not an array", where);
  size_t a = json_array_size(ranks), b = json_array_size(miss);
  if ((rc = get_int(c, j, "ranks_count", 0, size, 1, (long long)a, &nr, where))) return rc;
  if ((rc = get_int(c, j, "missing_ranks_count", 0, size, 1, (long long)b, &nm, where))) return rc;
  if ((size_t)nr != a || (size_t)nm != b)
    return bad(c, -EINVAL, "%s: ranks_count %lld and missing_ranks_count %lld, but %zu and %zu records",
               where, nr, nm, a, b);
  if (a + b > (size_t)size) return bad(c, -EINVAL, "%s: %zu records for %lld ranks", where, a + b, size);
  if (*total + a + b > TRUN_RAS_MAX_RANKS) return bad(c, -E2BIG, "over %d rank records", TRUN_RAS_MAX_RANKS);
  *total += a + b;
  if (a + b) {
    out->ranks = calloc(a + b, sizeof(*out->ranks));
    if (!out->ranks) return bad(c, -ENOMEM, "out of memory");
  }
  unsigned char *seen = calloc((size_t)size, 1);
  if (!seen) return bad(c, -ENOMEM, "out of memory");
  for (size_t i = 0; i < a + b && rc == 0; i++) {
    int m = i >= a;
    rc = read_rank(c, json_array_get(m ? miss : ranks, m ? i - a : i), m, out->size, &out->ranks[i],
                   out->hash);
    if (rc == 0 && seen[out->ranks[i].rank]++)
      rc = bad(c, -EINVAL, "%s: rank %d listed twice", where, out->ranks[i].rank);
    if (rc == 0) out->nranks = i + 1;
  }
  free(seen);
  out->npresent = a < out->nranks ? a : out->nranks;
  return rc;
}

/* The last byte of a line that is not white space ('\0' for a blank line). */
static char line_last(const char *p, size_t from, size_t to) {
  while (to > from && (p[to - 1] == ' ' || p[to - 1] == '\t' || p[to - 1] == '\r')) to--;
  return to > from ? p[to - 1] : '\0';
}

/* NCCL 2.28.9 writes a "missing_ranks" record without the comma after "nvml_dev" (seen on 2 x H200 whenever a
 * rank stops answering: the mismatched-collective hang), so the one answer that names the culprit is no JSON.
 * Its JSON is one item a line: where a line ends a value (a number, a string, true / false / null, } or ])
 * and the next non-blank line starts a member or an element (" or {), the comma is put back. Strings cannot
 * span lines, so no byte inside a string is touched; the result is parsed as strictly as any answer. Returns
 * a new buffer (*mn bytes) or NULL when there is nothing to mend (or no memory). */
static char *mend_commas(const char *p, size_t n, size_t *mn) {
  char *m = malloc(2 * n + 1);
  if (!m) return NULL;
  size_t k = 0, added = 0, start = 0;
  char prev = '\0'; /* the last non-blank byte of the previous non-blank line */
  while (start < n) {
    const char *nl = memchr(p + start, '\n', n - start);
    size_t end = nl ? (size_t)(nl - p) + 1 : n, first = start;
    while (first < end && (p[first] == ' ' || p[first] == '\t')) first++;
    char f = first < end ? p[first] : '\0';
    int ends_value = prev == '"' || prev == '}' || prev == ']' || prev == 'e' || prev == 'l' ||
                     (prev >= '0' && prev <= '9');
    if (ends_value && (f == '"' || f == '{') && k > 0) {
      size_t at = k; /* after the previous line's last value: before its new line */
      while (at > 0 && (m[at - 1] == '\n' || m[at - 1] == '\r' || m[at - 1] == ' ' || m[at - 1] == '\t'))
        at--;
      memmove(m + at + 1, m + at, k - at);
      m[at] = ',';
      k++;
      added++;
    }
    memcpy(m + k, p + start, end - start);
    k += end - start;
    char last = line_last(p, start, nl ? end - 1 : end);
    if (last != '\0') prev = last;
    start = end;
  }
  if (added == 0) {
    free(m);
    return NULL;
  }
  *mn = k;
  return m;
}

int trun_ras_parse(const char *p, size_t n, trun_ras_snapshot **out, char *err, size_t errlen) {
  ctx c = {err, errlen};
  *out = NULL;
  if (err && errlen) err[0] = '\0';
  if (n > TRUN_RAS_MAX_ANSWER) return bad(&c, -E2BIG, "%zu bytes, over %u", n, TRUN_RAS_MAX_ANSWER);
  json_error_t je;
  json_t *root = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    size_t mn = 0;
    char *m = mend_commas(p, n, &mn);
    json_error_t je2;
    if (m) root = json_loadb(m, mn, JSON_REJECT_DUPLICATES, &je2);
    free(m);
    if (!root) return bad(&c, -EINVAL, "not JSON: line %d column %d: %s", je.line, je.column, je.text);
  }
  int rc = 0;
  trun_ras_snapshot *s = calloc(1, sizeof(*s));
  if (!s) {
    json_decref(root);
    return bad(&c, -ENOMEM, "out of memory");
  }
  long long x;
  json_t *comms = json_object_get(root, "communicators");
  if (!json_is_object(root))
    rc = bad(&c, -EINVAL, "not a JSON object");
  else if ((rc = get_str(&c, root, "nccl_version", s->nccl_version, sizeof(s->nccl_version), 1, "header")))
    ;
  else if (!json_is_array(comms))
    rc = bad(&c, -EINVAL, "\"communicators\" is not an array");
  else if (json_array_size(comms) > TRUN_RAS_MAX_COMMS)
    rc = bad(&c, -E2BIG, "%zu communicators, over %d", json_array_size(comms), TRUN_RAS_MAX_COMMS);
  else if ((rc = get_int(&c, root, "communicators_count", 0, TRUN_RAS_MAX_COMMS, 1,
                         (long long)json_array_size(comms), &x, "header")))
    ;
  else if ((size_t)x != json_array_size(comms))
    rc = bad(&c, -EINVAL, "communicators_count %lld, but %zu communicators", x, json_array_size(comms));
  json_t *ras = json_object_get(root, "ras");
  if (rc == 0 && ras && json_is_object(ras) &&
      (rc = get_int(&c, ras, "timeouts_count", 0, 0x7fffffff, 1, 0, &x, "ras")) == 0)
    s->timeouts = (int)x;
  size_t nc = rc == 0 ? json_array_size(comms) : 0, total = 0;
  if (nc && !(s->comms = calloc(nc, sizeof(*s->comms)))) rc = bad(&c, -ENOMEM, "out of memory");
  for (size_t i = 0; i < nc && rc == 0; i++) {
    s->ncomms = i + 1;
    rc = read_comm(&c, json_array_get(comms, i), &s->comms[i], &total);
    for (size_t k = 0; k < i && rc == 0; k++)
      if (strcmp(s->comms[k].hash, s->comms[i].hash) == 0 &&
          strcmp(s->comms[k].secondary, s->comms[i].secondary) == 0)
        rc = bad(&c, -EINVAL, "communicator %s listed twice", s->comms[i].hash);
  }
  json_decref(root);
  if (rc) {
    trun_ras_snapshot_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

void trun_ras_snapshot_free(trun_ras_snapshot *s) {
  if (!s) return;
  for (size_t i = 0; i < s->ncomms; i++) free(s->comms[i].ranks);
  free(s->comms);
  free(s);
}
