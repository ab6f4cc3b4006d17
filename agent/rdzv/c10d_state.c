/* c10d rendezvous state <-> pickle: see c10d/state.h and docs/dev/torchrun-internals.md "The state". */
#include "c10d_state.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOD "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
#define BATCH 1000
#define MAX_ADDR 65535

/* ---- time ------------------------------------------------------------------------------------- */

static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int64_t trun_rdzv_tm_to_us(const trun_rdzv_tm *t) {
  int64_t days = days_from_civil(t->year, t->month, t->day);
  return ((days * 24 + t->hour) * 60 + t->minute) * INT64_C(60000000) + (int64_t)t->second * 1000000 +
         t->usec;
}

void trun_rdzv_us_to_tm(int64_t us, trun_rdzv_tm *t) {
  int64_t days = us / INT64_C(86400000000), rem = us % INT64_C(86400000000);
  if (rem < 0) {
    rem += INT64_C(86400000000);
    days--;
  }
  days += 719468;
  int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  int64_t doe = days - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  int d = (int)(doy - (153 * mp + 2) / 5 + 1);
  int m = (int)(mp < 10 ? mp + 3 : mp - 9);
  t->year = (int)(yoe + era * 400 + (m <= 2));
  t->month = m;
  t->day = d;
  t->usec = (int)(rem % 1000000);
  rem /= 1000000;
  t->second = (int)(rem % 60);
  t->minute = (int)(rem / 60 % 60);
  t->hour = (int)(rem / 3600);
}

static int days_in_month(int y, int m) {
  static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m == 2 && (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0))) return 29;
  return d[m - 1];
}

/* ---- decoder ---------------------------------------------------------------------------------- */

typedef struct dec {
  trun_pickle_err *err;
  trun_rdzv_layout lay;
} dec;

#define BAD(v, ...)                                  \
  do {                                               \
    trun_pickle_val_error(d->err, (v), __VA_ARGS__); \
    return -EINVAL;                                  \
  } while (0)

static int is_str(const trun_pk_val *v, const char *s) {
  return v->type == TRUN_PK_STR && v->n == strlen(s) && memcmp(v->s, s, v->n) == 0;
}

static int is_cls(const trun_pk_val *v, const char *mod, const char *name) {
  return v && v->type == TRUN_PK_GLOBAL && v->n == strlen(mod) && memcmp(v->s, mod, v->n) == 0 &&
         v->n2 == strlen(name) && memcmp(v->s2, name, v->n2) == 0;
}

/* An object made by NEWOBJ(cls, ()) + BUILD(dict). */
static int check_newobj(dec *d, const trun_pk_val *v, const char *name) {
  if (v->type != TRUN_PK_OBJ || v->reduced || !is_cls(v->cls, MOD, name))
    BAD(v, "want a %s object, got a %s", name, v->type == TRUN_PK_OBJ ? "different object" : "plain value");
  if (v->args->len != 0) BAD(v, "%s: NEWOBJ with arguments", name);
  if (!v->state || v->state->type != TRUN_PK_DICT) BAD(v, "%s: no BUILD with a dict", name);
  return 0;
}

static int dec_node(dec *d, const trun_pk_val *v, trun_rdzv_node *out) {
  int rc = check_newobj(d, v, "_NodeDesc");
  if (rc) return rc;
  const trun_pk_val *st = v->state;
  const trun_pk_val *addr = NULL, *pid = NULL, *lid = NULL;
  trun_rdzv_key key = TRUN_RDZV_KEY_UNKNOWN;
  for (size_t i = 0; i < st->len; i++) {
    const trun_pk_val *k = st->items[2 * i], *x = st->items[2 * i + 1];
    const trun_pk_val **slot;
    if (is_str(k, "addr") || is_str(k, "fqdn")) {
      slot = &addr;
      if (key != TRUN_RDZV_KEY_UNKNOWN) BAD(k, "_NodeDesc: both addr and fqdn");
      key = is_str(k, "addr") ? TRUN_RDZV_KEY_ADDR : TRUN_RDZV_KEY_FQDN;
    } else if (is_str(k, "pid")) {
      slot = &pid;
    } else if (is_str(k, "local_id")) {
      slot = &lid;
    } else {
      BAD(k, "_NodeDesc: unexpected field");
    }
    if (*slot) BAD(k, "_NodeDesc: duplicate field");
    *slot = x;
  }
  if (!addr || !pid || !lid) BAD(st, "_NodeDesc: missing addr/fqdn, pid or local_id");
  if (addr->type != TRUN_PK_STR || strlen(addr->s) != addr->n) BAD(addr, "_NodeDesc: addr is not a str");
  if (pid->type != TRUN_PK_INT) BAD(pid, "_NodeDesc: pid is not an int");
  if (lid->type != TRUN_PK_INT) BAD(lid, "_NodeDesc: local_id is not an int");
  if (d->lay.key == TRUN_RDZV_KEY_UNKNOWN)
    d->lay.key = key;
  else if (d->lay.key != key)
    BAD(st, "_NodeDesc: nodes mix the addr and fqdn layouts");
  if (!(out->addr = strdup(addr->s))) return -ENOMEM;
  out->pid = pid->i;
  out->local_id = lid->i;
  return 0;
}

static int is_int0(const trun_pk_val *v) { return v->type == TRUN_PK_INT && v->i == 0; }

static int dec_time(dec *d, const trun_pk_val *v, int64_t *us) {
  if (v->type != TRUN_PK_OBJ || !v->reduced || !is_cls(v->cls, "datetime", "datetime"))
    BAD(v, "want a datetime.datetime");
  const trun_pk_val *a = v->args;
  if (a->len < 1 || a->len > 2 || a->items[0]->type != TRUN_PK_BYTES || a->items[0]->n != 10)
    BAD(v, "datetime: want (10 bytes[, tz]) arguments");
  const uint8_t *b = (const uint8_t *)a->items[0]->s;
  trun_rdzv_tm t = {.year = b[0] << 8 | b[1],
                    .month = b[2],
                    .day = b[3],
                    .hour = b[4],
                    .minute = b[5],
                    .second = b[6],
                    .usec = b[7] << 16 | b[8] << 8 | b[9]};
  if (t.year < 1 || t.year > 9999 || t.month < 1 || t.month > 12 || t.day < 1 ||
      t.day > days_in_month(t.year, t.month) || t.hour > 23 || t.minute > 59 || t.second > 59 ||
      t.usec > 999999)
    BAD(a->items[0], "datetime: invalid date/time bytes (or fold set)");
  trun_rdzv_tz tz = TRUN_RDZV_TZ_NAIVE;
  if (a->len == 2) {
    const trun_pk_val *z = a->items[1], *td;
    if (z->type != TRUN_PK_OBJ || !z->reduced || !is_cls(z->cls, "datetime", "timezone") || z->args->len != 1)
      BAD(z, "datetime: tzinfo is not a datetime.timezone");
    td = z->args->items[0];
    if (td->type != TRUN_PK_OBJ || !td->reduced || !is_cls(td->cls, "datetime", "timedelta") ||
        td->args->len != 3 || !is_int0(td->args->items[0]) || !is_int0(td->args->items[1]) ||
        !is_int0(td->args->items[2]))
      BAD(z, "datetime: timezone other than UTC");
    tz = TRUN_RDZV_TZ_AWARE;
  }
  if (d->lay.tz == TRUN_RDZV_TZ_UNKNOWN)
    d->lay.tz = tz;
  else if (d->lay.tz != tz)
    BAD(v, "datetime: the state mixes naive and aware datetimes");
  *us = trun_rdzv_tm_to_us(&t);
  return 0;
}

static int dec_entries(dec *d, const trun_pk_val *v, const char *what, int times, trun_rdzv_entry **out,
                       size_t *n) {
  if (v->type != TRUN_PK_DICT) BAD(v, "%s: not a dict", what);
  if (v->len && !(*out = calloc(v->len, sizeof(**out)))) return -ENOMEM;
  *n = v->len;
  for (size_t i = 0; i < v->len; i++) {
    int rc = dec_node(d, v->items[2 * i], &(*out)[i].node);
    if (rc) return rc;
    const trun_pk_val *x = v->items[2 * i + 1];
    if (times) {
      if ((rc = dec_time(d, x, &(*out)[i].v))) return rc;
    } else {
      if (x->type != TRUN_PK_INT) BAD(x, "%s: rank is not an int", what);
      (*out)[i].v = x->i;
    }
  }
  return 0;
}

static int dec_nodes(dec *d, const trun_pk_val *v, const char *what, trun_rdzv_node **out, size_t *n) {
  if (v->type != TRUN_PK_SET) BAD(v, "%s: not a set", what);
  if (v->len && !(*out = calloc(v->len, sizeof(**out)))) return -ENOMEM;
  *n = v->len;
  for (size_t i = 0; i < v->len; i++) {
    int rc = dec_node(d, v->items[i], &(*out)[i]);
    if (rc) return rc;
  }
  return 0;
}

enum { F_ROUND, F_COMPLETE, F_DEADLINE, F_CLOSED, F_PARTICIPANTS, F_WAIT, F_REDUNDANCY, F_HEARTBEATS, F_N };
static const char *const field_names[F_N] = {"round",           "complete",       "deadline",
                                             "closed",          "participants",   "wait_list",
                                             "redundancy_list", "last_heartbeats"};

static int dec_root(dec *d, const trun_pk_val *root, trun_rdzv_state *st) {
  int rc = check_newobj(d, root, "_RendezvousState");
  if (rc) return rc;
  const trun_pk_val *f[F_N] = {0};
  const trun_pk_val *sd = root->state;
  for (size_t i = 0; i < sd->len; i++) {
    const trun_pk_val *k = sd->items[2 * i];
    int j = 0;
    while (j < F_N && !is_str(k, field_names[j])) j++;
    if (j == F_N) BAD(k, "_RendezvousState: unexpected field");
    if (f[j]) BAD(k, "_RendezvousState: duplicate field %s", field_names[j]);
    f[j] = sd->items[2 * i + 1];
  }
  for (int j = 0; j < F_N; j++)
    if (!f[j] && j != F_REDUNDANCY) BAD(sd, "_RendezvousState: no field %s", field_names[j]);
  if (f[F_ROUND]->type != TRUN_PK_INT) BAD(f[F_ROUND], "round is not an int");
  if (f[F_COMPLETE]->type != TRUN_PK_BOOL) BAD(f[F_COMPLETE], "complete is not a bool");
  if (f[F_CLOSED]->type != TRUN_PK_BOOL) BAD(f[F_CLOSED], "closed is not a bool");
  st->round = f[F_ROUND]->i;
  st->complete = f[F_COMPLETE]->i;
  st->closed = f[F_CLOSED]->i;
  if (f[F_DEADLINE]->type != TRUN_PK_NONE) {
    st->has_deadline = true;
    if ((rc = dec_time(d, f[F_DEADLINE], &st->deadline_us))) return rc;
  }
  if ((rc = dec_entries(d, f[F_PARTICIPANTS], "participants", 0, &st->participants, &st->n_participants)))
    return rc;
  if ((rc = dec_nodes(d, f[F_WAIT], "wait_list", &st->wait_list, &st->n_wait))) return rc;
  d->lay.redundancy = f[F_REDUNDANCY] != NULL;
  if (f[F_REDUNDANCY] &&
      (rc = dec_nodes(d, f[F_REDUNDANCY], "redundancy_list", &st->redundancy_list, &st->n_redundancy)))
    return rc;
  return dec_entries(d, f[F_HEARTBEATS], "last_heartbeats", 1, &st->heartbeats, &st->n_heartbeats);
}

int trun_rdzv_state_decode_pickle(const uint8_t *p, size_t n, trun_rdzv_state *st, trun_rdzv_layout *lay,
                                  trun_pickle_err *err) {
  trun_pickle_err local;
  if (!err) err = &local;
  memset(st, 0, sizeof(*st));
  trun_pickle_doc *doc;
  int rc = trun_pickle_load(p, n, NULL, &doc, err);
  if (rc) return rc;
  dec d = {.err = err};
  d.lay.proto = doc->proto;
  rc = dec_root(&d, doc->root, st);
  trun_pickle_free(doc);
  if (rc) {
    if (rc == -ENOMEM) snprintf(err->msg, sizeof(err->msg), "rdzv state: out of memory");
    trun_rdzv_state_free(st);
    return rc;
  }
  if (lay) *lay = d.lay;
  return 0;
}

int trun_rdzv_state_decode(const char *b64, size_t n, trun_rdzv_state *st, trun_rdzv_layout *lay,
                           trun_pickle_err *err) {
  uint8_t *raw;
  size_t rn, bad = 0;
  memset(st, 0, sizeof(*st));
  int rc = trun_b64_decode(b64, n, &raw, &rn, &bad);
  if (rc) {
    if (err) {
      err->offset = bad;
      err->opcode = -1;
      if (rc == -ENOMEM)
        snprintf(err->msg, sizeof(err->msg), "base64: out of memory");
      else
        snprintf(err->msg, sizeof(err->msg), "base64: offset %zu: %s", bad,
                 bad >= n ? "length is not a multiple of 4" : "invalid character or padding");
    }
    return rc;
  }
  rc = trun_rdzv_state_decode_pickle(raw, rn, st, lay, err);
  free(raw);
  return rc;
}

void trun_rdzv_state_free(trun_rdzv_state *st) {
  for (size_t i = 0; i < st->n_participants; i++) free(st->participants[i].node.addr);
  for (size_t i = 0; i < st->n_wait; i++) free(st->wait_list[i].addr);
  for (size_t i = 0; i < st->n_redundancy; i++) free(st->redundancy_list[i].addr);
  for (size_t i = 0; i < st->n_heartbeats; i++) free(st->heartbeats[i].node.addr);
  free(st->participants);
  free(st->wait_list);
  free(st->redundancy_list);
  free(st->heartbeats);
  memset(st, 0, sizeof(*st));
}

/* ---- encoder ---------------------------------------------------------------------------------- */

/* Which node already has a memo entry (CPython memoizes by identity; a torch agent holds one _NodeDesc
 * object per node, so equal nodes are the same object). Open addressing on (addr, pid, local_id). */
typedef struct slot {
  const trun_rdzv_node *node;
  uint32_t memo;
} slot;

typedef struct enc {
  trun_pkw w;
  trun_rdzv_layout lay;
  slot *tab;
  size_t mask;
  int64_t m_mod, m_nodecls, m_addr, m_pid, m_lid, m_dtmod, m_dtcls, m_utc;
} enc;

static uint64_t node_hash(const trun_rdzv_node *n) {
  uint64_t h = 1469598103934665603u;
  for (const char *p = n->addr; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211u;
  h = (h ^ (uint64_t)n->pid) * 1099511628211u;
  h = (h ^ (uint64_t)n->local_id) * 1099511628211u;
  return h ^ (h >> 29);
}

static int node_eq(const trun_rdzv_node *a, const trun_rdzv_node *b) {
  return a->pid == b->pid && a->local_id == b->local_id && strcmp(a->addr, b->addr) == 0;
}

static slot *lookup(enc *e, const trun_rdzv_node *n) {
  size_t i = (size_t)node_hash(n) & e->mask;
  while (e->tab[i].node && !node_eq(e->tab[i].node, n)) i = (i + 1) & e->mask;
  return &e->tab[i];
}

/* CPython's save() starts by committing the frame when it reached 64 KiB: begin() marks each save(). */
static void begin(enc *e) { trun_pkw_begin_save(&e->w); }

static uint32_t save_str(enc *e, const char *s) {
  begin(e);
  trun_pkw_str(&e->w, s, strlen(s));
  return trun_pkw_memoize(&e->w);
}

/* A str CPython shares (an interned name): memo entry in *m once written. */
static void save_shared_str(enc *e, int64_t *m, const char *s) {
  if (*m >= 0) {
    begin(e);
    trun_pkw_get(&e->w, (uint32_t)*m);
  } else {
    *m = save_str(e, s);
  }
}

static void save_global(enc *e, int64_t *m_cls, int64_t *m_mod, const char *mod, const char *name) {
  begin(e);
  if (*m_cls >= 0) {
    trun_pkw_get(&e->w, (uint32_t)*m_cls);
    return;
  }
  save_shared_str(e, m_mod, mod);
  save_str(e, name);
  trun_pkw_op(&e->w, TRUN_PK_STACK_GLOBAL);
  *m_cls = trun_pkw_memoize(&e->w);
}

static void save_int(enc *e, int64_t v) {
  begin(e);
  trun_pkw_int(&e->w, v);
}

static void save_op(enc *e, uint8_t op) {
  begin(e);
  trun_pkw_op(&e->w, op);
}

static void save_node(enc *e, const trun_rdzv_node *n) {
  begin(e);
  slot *s = lookup(e, n);
  if (s->node) {
    trun_pkw_get(&e->w, s->memo);
    return;
  }
  save_global(e, &e->m_nodecls, &e->m_mod, MOD, "_NodeDesc");
  save_op(e, TRUN_PK_EMPTY_TUPLE);
  trun_pkw_op(&e->w, TRUN_PK_NEWOBJ);
  s->node = n;
  s->memo = trun_pkw_memoize(&e->w);
  save_op(e, TRUN_PK_EMPTY_DICT);
  trun_pkw_memoize(&e->w);
  trun_pkw_op(&e->w, TRUN_PK_MARK);
  save_shared_str(e, &e->m_addr, e->lay.key == TRUN_RDZV_KEY_FQDN ? "fqdn" : "addr");
  save_str(e, n->addr);
  save_shared_str(e, &e->m_pid, "pid");
  save_int(e, n->pid);
  save_shared_str(e, &e->m_lid, "local_id");
  save_int(e, n->local_id);
  trun_pkw_op(&e->w, TRUN_PK_SETITEMS);
  trun_pkw_op(&e->w, TRUN_PK_BUILD);
}

static void save_time(enc *e, int64_t us) {
  trun_rdzv_tm t;
  trun_rdzv_us_to_tm(us, &t);
  uint8_t b[10] = {(uint8_t)(t.year >> 8), (uint8_t)t.year,   (uint8_t)t.month,  (uint8_t)t.day,
                   (uint8_t)t.hour,        (uint8_t)t.minute, (uint8_t)t.second, (uint8_t)(t.usec >> 16),
                   (uint8_t)(t.usec >> 8), (uint8_t)t.usec};
  begin(e);
  save_global(e, &e->m_dtcls, &e->m_dtmod, "datetime", "datetime");
  begin(e); /* the arguments tuple */
  begin(e);
  trun_pkw_bytes(&e->w, b, sizeof(b));
  trun_pkw_memoize(&e->w);
  int aware = e->lay.tz != TRUN_RDZV_TZ_NAIVE;
  if (aware && e->m_utc >= 0) {
    begin(e);
    trun_pkw_get(&e->w, (uint32_t)e->m_utc);
  } else if (aware) { /* timezone.utc = timezone(timedelta(0, 0, 0)) by REDUCE */
    int64_t m_tz = -1, m_td = -1;
    begin(e);
    save_global(e, &m_tz, &e->m_dtmod, "datetime", "timezone");
    begin(e); /* (timedelta,) */
    begin(e); /* timedelta */
    save_global(e, &m_td, &e->m_dtmod, "datetime", "timedelta");
    begin(e); /* (0, 0, 0) */
    for (int i = 0; i < 3; i++) save_int(e, 0);
    trun_pkw_op(&e->w, TRUN_PK_TUPLE3);
    trun_pkw_memoize(&e->w);
    trun_pkw_op(&e->w, TRUN_PK_REDUCE);
    trun_pkw_memoize(&e->w);
    trun_pkw_op(&e->w, TRUN_PK_TUPLE1);
    trun_pkw_memoize(&e->w);
    trun_pkw_op(&e->w, TRUN_PK_REDUCE);
    e->m_utc = trun_pkw_memoize(&e->w);
  }
  trun_pkw_op(&e->w, aware ? TRUN_PK_TUPLE2 : TRUN_PK_TUPLE1);
  trun_pkw_memoize(&e->w);
  trun_pkw_op(&e->w, TRUN_PK_REDUCE);
  trun_pkw_memoize(&e->w);
}

static void save_value(enc *e, int64_t v, int time) {
  if (time)
    save_time(e, v);
  else
    save_int(e, v);
}

/* A dict the way CPython's batch_dict_exact writes it: one item by SETITEM, else MARK..SETITEMS batches
 * of 1000 (a last, empty batch when the size is a multiple of 1000). */
static void save_entries(enc *e, const trun_rdzv_entry *a, size_t n, int times) {
  save_op(e, TRUN_PK_EMPTY_DICT);
  trun_pkw_memoize(&e->w);
  size_t i = 0, k;
  if (n == 1) {
    save_node(e, &a[0].node);
    save_value(e, a[0].v, times);
    trun_pkw_op(&e->w, TRUN_PK_SETITEM);
  } else if (n > 1) {
    do {
      trun_pkw_op(&e->w, TRUN_PK_MARK);
      for (k = 0; i < n && k < BATCH; i++, k++) {
        save_node(e, &a[i].node);
        save_value(e, a[i].v, times);
      }
      trun_pkw_op(&e->w, TRUN_PK_SETITEMS);
    } while (k == BATCH);
  }
}

/* A set the way CPython's save_set writes it: MARK..ADDITEMS batches of 1000. */
static void save_nodes(enc *e, const trun_rdzv_node *a, size_t n) {
  save_op(e, TRUN_PK_EMPTY_SET);
  trun_pkw_memoize(&e->w);
  size_t i = 0, k;
  if (n > 0) {
    do {
      trun_pkw_op(&e->w, TRUN_PK_MARK);
      for (k = 0; i < n && k < BATCH; i++, k++) save_node(e, &a[i]);
      trun_pkw_op(&e->w, TRUN_PK_ADDITEMS);
    } while (k == BATCH);
  }
}

static void save_bool(enc *e, bool b) { save_op(e, b ? TRUN_PK_NEWTRUE : TRUN_PK_NEWFALSE); }

static int check_node(const trun_rdzv_node *n) {
  return n->addr && strlen(n->addr) <= MAX_ADDR ? 0 : -EINVAL;
}

static int check_time(int64_t us) {
  trun_rdzv_tm lo = {1, 1, 1, 0, 0, 0, 0}, hi = {9999, 12, 31, 23, 59, 59, 999999};
  return us >= trun_rdzv_tm_to_us(&lo) && us <= trun_rdzv_tm_to_us(&hi) ? 0 : -EINVAL;
}

static int validate(const trun_rdzv_state *st, const trun_rdzv_layout *lay, size_t *nodes) {
  if (st->n_redundancy && !lay->redundancy) return -EINVAL;
  if (lay->proto != 4 && lay->proto != 5) return -EINVAL;
  if (st->has_deadline && check_time(st->deadline_us)) return -EINVAL;
  for (size_t i = 0; i < st->n_participants; i++)
    if (check_node(&st->participants[i].node)) return -EINVAL;
  for (size_t i = 0; i < st->n_wait; i++)
    if (check_node(&st->wait_list[i])) return -EINVAL;
  for (size_t i = 0; i < st->n_redundancy; i++)
    if (check_node(&st->redundancy_list[i])) return -EINVAL;
  for (size_t i = 0; i < st->n_heartbeats; i++)
    if (check_node(&st->heartbeats[i].node) || check_time(st->heartbeats[i].v)) return -EINVAL;
  *nodes = st->n_participants + st->n_wait + st->n_redundancy + st->n_heartbeats;
  return 0;
}

int trun_rdzv_state_encode_pickle(const trun_rdzv_state *st, const trun_rdzv_layout *lay, uint8_t **out,
                                  size_t *n) {
  trun_rdzv_layout def = {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4};
  enc e = {.lay = lay ? *lay : def,
           .m_mod = -1,
           .m_nodecls = -1,
           .m_addr = -1,
           .m_pid = -1,
           .m_lid = -1,
           .m_dtmod = -1,
           .m_dtcls = -1,
           .m_utc = -1};
  size_t nodes;
  int rc = validate(st, &e.lay, &nodes);
  if (rc) return rc;
  size_t cap = 16;
  while (cap < 2 * nodes + 2) cap *= 2;
  if (!(e.tab = calloc(cap, sizeof(*e.tab)))) return -ENOMEM;
  e.mask = cap - 1;

  int64_t m_statecls = -1;
  trun_pkw_init(&e.w, e.lay.proto);
  begin(&e);
  save_global(&e, &m_statecls, &e.m_mod, MOD, "_RendezvousState");
  save_op(&e, TRUN_PK_EMPTY_TUPLE);
  trun_pkw_op(&e.w, TRUN_PK_NEWOBJ);
  trun_pkw_memoize(&e.w);
  save_op(&e, TRUN_PK_EMPTY_DICT);
  trun_pkw_memoize(&e.w);
  trun_pkw_op(&e.w, TRUN_PK_MARK);
  save_str(&e, "round");
  save_int(&e, st->round);
  save_str(&e, "complete");
  save_bool(&e, st->complete);
  save_str(&e, "deadline");
  if (st->has_deadline)
    save_time(&e, st->deadline_us);
  else
    save_op(&e, TRUN_PK_NONE_OP);
  save_str(&e, "closed");
  save_bool(&e, st->closed);
  save_str(&e, "participants");
  save_entries(&e, st->participants, st->n_participants, 0);
  save_str(&e, "wait_list");
  save_nodes(&e, st->wait_list, st->n_wait);
  if (e.lay.redundancy) {
    save_str(&e, "redundancy_list");
    save_nodes(&e, st->redundancy_list, st->n_redundancy);
  }
  save_str(&e, "last_heartbeats");
  save_entries(&e, st->heartbeats, st->n_heartbeats, 1);
  trun_pkw_op(&e.w, TRUN_PK_SETITEMS);
  trun_pkw_op(&e.w, TRUN_PK_BUILD);
  free(e.tab);
  return trun_pkw_finish(&e.w, out, n);
}

int trun_rdzv_state_encode(const trun_rdzv_state *st, const trun_rdzv_layout *lay, char **out, size_t *n) {
  uint8_t *raw;
  size_t rn;
  int rc = trun_rdzv_state_encode_pickle(st, lay, &raw, &rn);
  if (rc) return rc;
  rc = trun_b64_encode(raw, rn, out, n);
  free(raw);
  return rc;
}
