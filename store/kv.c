#include "kv.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

typedef struct qitem {
  struct qitem *next;
  size_t n;
  uint8_t data[];
} qitem;

typedef struct slot slot;

struct trun_wait_reg {
  trun_waiter *w;
  slot *s;
  size_t cost; /* TRUN_KV_REG_COST + the key's length: counted in w->bytes and kv->reg_bytes */
  trun_wait_reg *s_prev, *s_next; /* in the slot's list */
  trun_wait_reg *w_prev, *w_next; /* in the waiter's list */
};

struct slot {
  slot *chain;
  uint64_t hash;
  uint8_t *key;
  size_t klen;
  int has_value;
  uint8_t *val;
  size_t vlen, vcap;
  qitem *qhead, *qtail;
  int64_t qlen;
  trun_wait_reg *waiters;
  trun_wait_reg *watchers;
};

struct trun_kv {
  slot **buckets;
  size_t nbuckets; /* power of two */
  size_t nslots;
  uint64_t nkeys;
  size_t bytes;
  size_t reg_bytes; /* every registration's cost (waits and watches) */
  uint64_t nregs;
  uint64_t seed[2]; /* the hash's key */
};

/* SipHash-1-3 keyed with a random 128-bit key per key space: a client that picks keys cannot predict
 * their buckets (unkeyed FNV-1a let one build keys that all chain in one bucket: hash flooding). */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                            \
  do {                                                                                      \
    v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32), v2 += v3, v3 = ROTL(v3, 16);  \
    v3 ^= v2, v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0, v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2; \
    v2 = ROTL(v2, 32);                                                                      \
  } while (0)

static uint64_t hash_bytes(const trun_kv *kv, const uint8_t *p, size_t n) {
  uint64_t v0 = kv->seed[0] ^ 0x736f6d6570736575ull, v1 = kv->seed[1] ^ 0x646f72616e646f6dull;
  uint64_t v2 = kv->seed[0] ^ 0x6c7967656e657261ull, v3 = kv->seed[1] ^ 0x7465646279746573ull;
  uint64_t b = (uint64_t)n << 56, m;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    m = 0;
    for (int k = 7; k >= 0; k--) m = m << 8 | p[i + (size_t)k];
    v3 ^= m;
    SIPROUND;
    v0 ^= m;
  }
  for (int k = 0; i + (size_t)k < n; k++) b |= (uint64_t)p[i + (size_t)k] << (8 * k);
  v3 ^= b;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t trun_kv_hash(const trun_kv *kv, const void *p, size_t n) { return hash_bytes(kv, p, n); }

/* The key of the hash: getrandom, else (no entropy yet at early boot) the clock, the pid and an address. */
static void seed_hash(trun_kv *kv) {
  if (getrandom(kv->seed, sizeof(kv->seed), GRND_NONBLOCK) == (ssize_t)sizeof(kv->seed)) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 48 ^ (uintptr_t)kv;
  kv->seed[0] = trun_rng_next(&x) | 1;
  kv->seed[1] = trun_rng_next(&x);
}

trun_kv *trun_kv_new(void) {
  trun_kv *kv = calloc(1, sizeof(*kv));
  if (kv == NULL) return NULL;
  seed_hash(kv);
  kv->nbuckets = 64;
  kv->buckets = calloc(kv->nbuckets, sizeof(slot *));
  if (kv->buckets == NULL) {
    free(kv);
    return NULL;
  }
  return kv;
}

static void reg_unlink(trun_wait_reg *r, trun_wait_reg **slot_head, trun_wait_reg **w_head) {
  if (r->s_prev)
    r->s_prev->s_next = r->s_next;
  else
    *slot_head = r->s_next;
  if (r->s_next) r->s_next->s_prev = r->s_prev;
  if (r->w_prev)
    r->w_prev->w_next = r->w_next;
  else
    *w_head = r->w_next;
  if (r->w_next) r->w_next->w_prev = r->w_prev;
}

/* Unlinks r from its slot's list (watch: the watchers) and its waiter's, gives back its cost, frees it. */
static void reg_drop(trun_kv *kv, trun_wait_reg *r, int watch) {
  trun_waiter *w = r->w;
  slot *s = r->s;
  reg_unlink(r, watch ? &s->watchers : &s->waiters, watch ? &w->watches : &w->regs);
  w->bytes -= r->cost;
  kv->reg_bytes -= r->cost;
  kv->nregs--;
  free(r);
}

static void slot_free(slot *s) {
  qitem *q = s->qhead;
  while (q) {
    qitem *n = q->next;
    free(q);
    q = n;
  }
  free(s->key);
  free(s->val);
  free(s);
}

void trun_kv_free(trun_kv *kv) {
  if (kv == NULL) return;
  for (size_t i = 0; i < kv->nbuckets; i++) {
    slot *s = kv->buckets[i];
    while (s) {
      slot *n = s->chain;
      /* Registrations belong to live waiters: detach them so that a later cancel is harmless. */
      while (s->waiters) reg_drop(kv, s->waiters, 0);
      while (s->watchers) reg_drop(kv, s->watchers, 1);
      slot_free(s);
      s = n;
    }
  }
  free(kv->buckets);
  free(kv);
}

static slot **find_link(trun_kv *kv, trun_slice key, uint64_t h) {
  slot **link = &kv->buckets[h & (kv->nbuckets - 1)];
  while (*link) {
    slot *s = *link;
    if (s->hash == h && s->klen == key.n && (key.n == 0 || memcmp(s->key, key.p, key.n) == 0)) return link;
    link = &s->chain;
  }
  return link;
}

static slot *find(trun_kv *kv, trun_slice key) { return *find_link(kv, key, hash_bytes(kv, key.p, key.n)); }

static void grow(trun_kv *kv) {
  size_t nb = kv->nbuckets * 2;
  slot **b = calloc(nb, sizeof(slot *));
  if (b == NULL) return; /* keep the longer chains; still correct */
  for (size_t i = 0; i < kv->nbuckets; i++) {
    slot *s = kv->buckets[i];
    while (s) {
      slot *n = s->chain;
      s->chain = b[s->hash & (nb - 1)];
      b[s->hash & (nb - 1)] = s;
      s = n;
    }
  }
  free(kv->buckets);
  kv->buckets = b;
  kv->nbuckets = nb;
}

/* A new empty slot for key (hash h) at link, the end of its bucket's chain (find_link found no slot). */
static slot *slot_add_at(trun_kv *kv, slot **link, trun_slice key, uint64_t h) {
  slot *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->key = malloc(key.n ? key.n : 1);
  if (s->key == NULL) {
    free(s);
    return NULL;
  }
  if (key.n) memcpy(s->key, key.p, key.n);
  s->klen = key.n;
  s->hash = h;
  *link = s;
  kv->nslots++;
  if (kv->nslots > kv->nbuckets) grow(kv);
  return s;
}

static slot *find_or_add(trun_kv *kv, trun_slice key) {
  uint64_t h = hash_bytes(kv, key.p, key.n);
  slot **link = find_link(kv, key, h);
  return *link ? *link : slot_add_at(kv, link, key, h);
}

/* Frees the slot when it holds nothing. */
static void maybe_drop(trun_kv *kv, slot *s) {
  if (s->has_value || s->qlen || s->waiters || s->watchers) return;
  slot **link = find_link(kv, (trun_slice){s->key, s->klen}, s->hash);
  if (*link != s) return;
  *link = s->chain;
  kv->nslots--;
  slot_free(s);
}

/* Wakes waiters of s: all of them, or only the first when one_only. */
static void wake_slot(trun_kv *kv, slot *s, int one_only) {
  while (s->waiters) {
    trun_waiter *w = s->waiters->w;
    reg_drop(kv, s->waiters, 0);
    if (w->pending > 0 && --w->pending == 0 && w->wake) w->wake(w);
    if (one_only) break;
  }
}

static void notify_watchers(slot *s, uint8_t type, trun_slice old, trun_slice new_) {
  for (trun_wait_reg *r = s->watchers; r; r = r->s_next)
    if (r->w->notify) r->w->notify(r->w, type, (trun_slice){s->key, s->klen}, old, new_);
}

/* Replaces the value of s (creating it), notifies watchers, wakes waiters when wake is set. */
static int put_value_w(trun_kv *kv, slot *s, trun_slice val, int wake) {
  uint8_t *nv = NULL;
  if (val.n > s->vcap || s->val == NULL) {
    nv = malloc(val.n ? val.n : 1);
    if (nv == NULL) return -ENOMEM;
  }
  int existed = s->has_value;
  if (s->watchers) {
    trun_slice old = {existed ? s->val : NULL, existed ? s->vlen : 0};
    notify_watchers(s, existed ? TRUN_WATCH_KEY_UPDATED : TRUN_WATCH_KEY_CREATED, old, val);
  }
  if (nv) {
    kv->bytes -= s->vcap;
    free(s->val);
    s->val = nv;
    s->vcap = val.n ? val.n : 1;
    kv->bytes += s->vcap;
  }
  if (val.n) memmove(s->val, val.p, val.n);
  s->vlen = val.n;
  if (!existed) {
    s->has_value = 1;
    kv->nkeys++;
    kv->bytes += s->klen;
  }
  if (wake) wake_slot(kv, s, 0);
  return 0;
}

static int put_value(trun_kv *kv, slot *s, trun_slice val) { return put_value_w(kv, s, val, 1); }

int trun_kv_get(trun_kv *kv, trun_slice key, trun_slice *out) {
  slot *s = find(kv, key);
  if (s == NULL || !s->has_value) return 0;
  out->p = s->val;
  out->n = s->vlen;
  return 1;
}

int trun_kv_set(trun_kv *kv, trun_slice key, trun_slice val) {
  slot *s = find_or_add(kv, key);
  if (s == NULL) return -ENOMEM;
  int rc = put_value(kv, s, val);
  if (rc < 0) maybe_drop(kv, s);
  return rc;
}

int trun_kv_append(trun_kv *kv, trun_slice key, trun_slice val) {
  slot *s = find_or_add(kv, key);
  if (s == NULL) return -ENOMEM;
  if (!s->has_value) {
    int rc = put_value(kv, s, val);
    if (rc < 0) maybe_drop(kv, s);
    return rc;
  }
  if (val.n > SIZE_MAX - s->vlen) return -EOVERFLOW;
  size_t need = s->vlen + val.n;
  if (need > s->vcap) {
    size_t cap = s->vcap * 2 > need ? s->vcap * 2 : need;
    uint8_t *nv = realloc(s->val, cap);
    if (nv == NULL) return -ENOMEM;
    kv->bytes += cap - s->vcap;
    s->val = nv;
    s->vcap = cap;
  }
  if (s->watchers) {
    /* Watchers get the old and the new value; build the new one first. */
    memcpy(s->val + s->vlen, val.p, val.n);
    notify_watchers(s, TRUN_WATCH_KEY_UPDATED, (trun_slice){s->val, s->vlen}, (trun_slice){s->val, need});
  } else if (val.n) {
    memcpy(s->val + s->vlen, val.p, val.n);
  }
  s->vlen = need;
  wake_slot(kv, s, 0);
  return 0;
}

int trun_kv_compare_set(trun_kv *kv, trun_slice key, trun_slice expected, trun_slice desired,
                        trun_slice *reply) {
  slot *s = find(kv, key);
  if (s == NULL || !s->has_value) {
    if (expected.n != 0) {
      *reply = expected; /* torch's documented reply: nothing stored */
      return 0;
    }
    int rc = trun_kv_set(kv, key, desired);
    if (rc < 0) return rc;
    s = find(kv, key);
  } else if (s->vlen == expected.n && memcmp(s->val, expected.p, expected.n) == 0) {
    int rc = put_value(kv, s, desired);
    if (rc < 0) return rc;
  }
  reply->p = s->val;
  reply->n = s->vlen;
  return 0;
}

/* std::stoll on the stored bytes: leading white space, sign, digits, trailing bytes ignored. */
static int parse_ll(const uint8_t *p, size_t n, int64_t *out) {
  size_t i = 0;
  while (i < n && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r'))) i++;
  int neg = 0;
  if (i < n && (p[i] == '+' || p[i] == '-')) neg = p[i++] == '-';
  if (i >= n || p[i] < '0' || p[i] > '9') return -EINVAL;
  uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
    unsigned d = (unsigned)(p[i] - '0');
    if (v > (lim - d) / 10) return -ERANGE;
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return 0;
}

static int add_w(trun_kv *kv, trun_slice key, int64_t delta, int64_t *result, int wake) {
  int64_t v = 0;
  slot *s = find(kv, key);
  if (s && s->has_value) {
    int rc = parse_ll(s->val, s->vlen, &v);
    if (rc < 0) return rc;
  }
  if ((delta > 0 && v > INT64_MAX - delta) || (delta < 0 && v < INT64_MIN - delta)) return -ERANGE;
  v += delta;
  char text[24];
  int n = snprintf(text, sizeof(text), "%lld", (long long)v);
  if (s == NULL && (s = find_or_add(kv, key)) == NULL) return -ENOMEM;
  int rc = put_value_w(kv, s, (trun_slice){(const uint8_t *)text, (size_t)n}, wake);
  if (rc < 0) {
    maybe_drop(kv, s);
    return rc;
  }
  *result = v;
  return 0;
}

int trun_kv_add(trun_kv *kv, trun_slice key, int64_t delta, int64_t *result) {
  return add_w(kv, key, delta, result, 1);
}

int trun_kv_delete(trun_kv *kv, trun_slice key) {
  slot *s = find(kv, key);
  if (s == NULL || !s->has_value) return 0;
  if (s->watchers)
    notify_watchers(s, TRUN_WATCH_KEY_DELETED, (trun_slice){s->val, s->vlen}, (trun_slice){NULL, 0});
  kv->bytes -= s->vcap + s->klen;
  free(s->val);
  s->val = NULL;
  s->vlen = s->vcap = 0;
  s->has_value = 0;
  kv->nkeys--;
  maybe_drop(kv, s); /* waiters stay registered: DELETE_KEY wakes nobody */
  return 1;
}

uint64_t trun_kv_num_keys(const trun_kv *kv) { return kv->nkeys; }
size_t trun_kv_bytes(const trun_kv *kv) { return kv->bytes; }

int trun_kv_foreach(trun_kv *kv, int (*fn)(void *arg, trun_slice key), void *arg) {
  for (size_t i = 0; i < kv->nbuckets; i++)
    for (slot *s = kv->buckets[i]; s; s = s->chain)
      if (s->has_value) {
        int rc = fn(arg, (trun_slice){s->key, s->klen});
        if (rc) return rc;
      }
  return 0;
}

static int present(slot *s) { return s && (s->has_value || s->qlen > 0); }

int trun_kv_check(trun_kv *kv, uint64_t count, const uint8_t *items) {
  const uint8_t *pos = items;
  for (uint64_t i = 0; i < count; i++)
    if (!present(find(kv, trun_req_item(&pos)))) return 0;
  return 1;
}

/* Whether one more registration of cost for w stays within the budget b: 0, -EDQUOT or -ENOSPC. */
static int budget_check(const trun_kv *kv, const trun_waiter *w, size_t cost, const trun_kv_budget *b) {
  if (b == NULL) return 0;
  if (b->per_waiter > 0 && (w->bytes > b->per_waiter || cost > b->per_waiter - w->bytes)) return -EDQUOT;
  if (b->total > 0 && (kv->reg_bytes > b->total || cost > b->total - kv->reg_bytes)) return -ENOSPC;
  return 0;
}

static int add_reg(trun_kv *kv, slot *s, trun_waiter *w, int watch) {
  trun_wait_reg *r = calloc(1, sizeof(*r));
  if (r == NULL) return -ENOMEM;
  r->w = w;
  r->s = s;
  r->cost = TRUN_KV_REG_COST + s->klen;
  w->bytes += r->cost;
  kv->reg_bytes += r->cost;
  kv->nregs++;
  trun_wait_reg **sh = watch ? &s->watchers : &s->waiters;
  trun_wait_reg **wh = watch ? &w->watches : &w->regs;
  r->s_next = *sh;
  if (*sh) (*sh)->s_prev = r;
  *sh = r;
  r->w_next = *wh;
  if (*wh) (*wh)->w_prev = r;
  *wh = r;
  return 0;
}

uint64_t trun_kv_cancel(trun_kv *kv, trun_waiter *w) {
  uint64_t n = 0;
  while (w->regs) {
    slot *s = w->regs->s;
    reg_drop(kv, w->regs, 0);
    maybe_drop(kv, s);
    n++;
  }
  w->pending = 0;
  return n;
}

void trun_kv_cancel_watches(trun_kv *kv, trun_waiter *w) {
  while (w->watches) {
    slot *s = w->watches->s;
    reg_drop(kv, w->watches, 1);
    maybe_drop(kv, s);
  }
}

int trun_kv_wait(trun_kv *kv, trun_waiter *w, uint64_t count, const uint8_t *items, const trun_kv_budget *b) {
  trun_kv_cancel(kv, w);
  const uint8_t *pos = items;
  for (uint64_t i = 0; i < count; i++) {
    trun_slice key = trun_req_item(&pos);
    uint64_t h = hash_bytes(kv, key.p, key.n); /* once: the lookup and the insert share it */
    slot **link = find_link(kv, key, h), *s = *link;
    if (present(s)) continue;
    /* Checked before anything is allocated: a list over the budget costs no more than the budget holds. */
    int rc = budget_check(kv, w, TRUN_KV_REG_COST + key.n, b);
    if (rc < 0) {
      trun_kv_cancel(kv, w);
      return rc;
    }
    if (s == NULL && (s = slot_add_at(kv, link, key, h)) == NULL) {
      trun_kv_cancel(kv, w);
      return -ENOMEM;
    }
    if (add_reg(kv, s, w, 0) < 0) {
      maybe_drop(kv, s);
      trun_kv_cancel(kv, w);
      return -ENOMEM;
    }
    w->pending++;
  }
  return w->pending == 0 ? 1 : 0;
}

int trun_kv_barrier(trun_kv *kv, trun_waiter *w, trun_slice key, int64_t world, const trun_kv_budget *b) {
  int64_t count;
  trun_kv_cancel(kv, w); /* like WAIT: replaces w's earlier registrations, also when passing at once */
  int rc = budget_check(kv, w, TRUN_KV_REG_COST + key.n, b);
  if (rc < 0) return rc;
  rc = add_w(kv, key, 1, &count, 0); /* earlier arrivers are woken only at completion */
  if (rc < 0) return rc;
  slot *s = find(kv, key);
  if (count >= world) {
    wake_slot(kv, s, 0);
    return 1;
  }
  trun_kv_cancel(kv, w);
  if (add_reg(kv, s, w, 0) < 0) return -ENOMEM;
  w->pending = 1;
  return 0;
}

int trun_kv_watch(trun_kv *kv, trun_waiter *w, trun_slice key, const trun_kv_budget *b) {
  int rc = budget_check(kv, w, TRUN_KV_REG_COST + key.n, b);
  if (rc < 0) return rc;
  slot *s = find_or_add(kv, key);
  if (s == NULL) return -ENOMEM;
  rc = add_reg(kv, s, w, 1);
  if (rc < 0) maybe_drop(kv, s);
  return rc;
}

size_t trun_kv_reg_bytes(const trun_kv *kv) { return kv->reg_bytes; }
uint64_t trun_kv_num_regs(const trun_kv *kv) { return kv->nregs; }

int trun_kv_queue_push(trun_kv *kv, trun_slice key, trun_slice val) {
  slot *s = find_or_add(kv, key);
  if (s == NULL) return -ENOMEM;
  qitem *q = malloc(sizeof(*q) + val.n);
  if (q == NULL) {
    maybe_drop(kv, s);
    return -ENOMEM;
  }
  q->next = NULL;
  q->n = val.n;
  if (val.n) memcpy(q->data, val.p, val.n);
  if (s->qtail)
    s->qtail->next = q;
  else
    s->qhead = q;
  s->qtail = q;
  s->qlen++;
  kv->bytes += val.n;
  wake_slot(kv, s, 1);
  return 0;
}

int64_t trun_kv_queue_pop(trun_kv *kv, trun_slice key, trun_slice *out) {
  slot *s = find(kv, key);
  if (s == NULL || s->qlen == 0) return 0;
  int64_t len = s->qlen;
  qitem *q = s->qhead;
  s->qhead = q->next;
  if (s->qhead == NULL) s->qtail = NULL;
  s->qlen--;
  kv->bytes -= q->n;
  uint8_t *copy = malloc(q->n ? q->n : 1);
  if (copy == NULL) {
    q->next = s->qhead; /* put it back */
    s->qhead = q;
    if (s->qtail == NULL) s->qtail = q;
    s->qlen++;
    kv->bytes += q->n;
    return -ENOMEM;
  }
  if (q->n) memcpy(copy, q->data, q->n);
  out->p = copy;
  out->n = q->n;
  free(q);
  maybe_drop(kv, s);
  return len;
}

int64_t trun_kv_queue_len(trun_kv *kv, trun_slice key) {
  slot *s = find(kv, key);
  return s ? s->qlen : 0;
}
