/* The store's key space: KV values, FIFO queues (a separate namespace with the same names), wait
 * registrations and 1.13 key watchers. Pure data structure: no I/O; waiters are woken by callback. */
#ifndef TRUN_STORE_KV_H
#define TRUN_STORE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"

typedef struct trun_kv trun_kv;
typedef struct trun_wait_reg trun_wait_reg;
typedef struct trun_waiter trun_waiter;

/* One connection's wait state. The owner embeds it, sets the callbacks and calls trun_kv_cancel before
 * freeing it. */
struct trun_waiter {
  uint64_t pending;       /* registered keys not yet written */
  size_t bytes;           /* what its registrations (waits and watches) cost, see TRUN_KV_REG_COST */
  trun_wait_reg *regs;    /* this waiter's registrations */
  trun_wait_reg *watches; /* WATCH_KEY registrations (persist until cancel_watches) */
  void (*wake)(trun_waiter *w);
  void (*notify)(trun_waiter *w, uint8_t type, trun_slice key, trun_slice old, trun_slice new_);
};

trun_kv *trun_kv_new(void);
void trun_kv_free(trun_kv *kv);

/* 1 and *out = the value when key exists, else 0. *out is valid until the next change of that key. */
int trun_kv_get(trun_kv *kv, trun_slice key, trun_slice *out);
int trun_kv_set(trun_kv *kv, trun_slice key, trun_slice val);
int trun_kv_append(trun_kv *kv, trun_slice key, trun_slice val);
/* torch's semantics; *reply is what the server sends back (valid until the next change). */
int trun_kv_compare_set(trun_kv *kv, trun_slice key, trun_slice expected, trun_slice desired,
                        trun_slice *reply);
/* Adds delta to the decimal value (stoll rules). -EINVAL for a non-number, -ERANGE on overflow. */
int trun_kv_add(trun_kv *kv, trun_slice key, int64_t delta, int64_t *result);
/* 1 when removed, 0 when absent. */
int trun_kv_delete(trun_kv *kv, trun_slice key);
uint64_t trun_kv_num_keys(const trun_kv *kv);
/* The key space's own keyed hash (SipHash-1-3 with its random key) of n bytes, for a table of the caller's
 * beside it whose keys a peer may choose. */
uint64_t trun_kv_hash(const trun_kv *kv, const void *p, size_t n);
/* Calls fn for every KV key (unordered); stops early when fn returns non-zero and returns that. */
int trun_kv_foreach(trun_kv *kv, int (*fn)(void *arg, trun_slice key), void *arg);
/* Total bytes held in keys and values. */
size_t trun_kv_bytes(const trun_kv *kv);

/* What one wait or watch registration is counted as against a waiter budget: a fixed part (the
 * registration, about 64 bytes, and the key's slot, about 160, when the registration creates it) plus
 * the key's length. */
#define TRUN_KV_REG_COST 256
/* Budgets of a registering call, in the bytes TRUN_KV_REG_COST counts; 0: no limit. */
typedef struct {
  size_t per_waiter; /* one waiter's registrations (waits and watches together) */
  size_t total;      /* every waiter's registrations in the key space together */
} trun_kv_budget;

/* 1 when every key of the list exists (libuv rule: a non-empty queue of the name counts). */
int trun_kv_check(trun_kv *kv, uint64_t count, const uint8_t *items);
/* Registers w on every missing key of the list; returns 1 when nothing is missing (no registration),
 * 0 when registered (w->wake comes later), negative errno. Replaces w's earlier registrations. With a
 * budget b (NULL: none), a list whose registrations would take w over b->per_waiter fails with -EDQUOT and
 * one that would take the key space over b->total with -ENOSPC; either leaves w with no wait registration
 * and costs at most the registrations the budget holds. */
int trun_kv_wait(trun_kv *kv, trun_waiter *w, uint64_t count, const uint8_t *items, const trun_kv_budget *b);
/* BARRIER: count = value + 1 stored as decimal; 1 when count >= world (waiters of the key are woken),
 * 0 when w was registered, negative errno (-EDQUOT / -ENOSPC as for trun_kv_wait, checked first: the count
 * is then not raised). */
int trun_kv_barrier(trun_kv *kv, trun_waiter *w, trun_slice key, int64_t world, const trun_kv_budget *b);
/* Drops w's wait registrations; returns how many there were. */
uint64_t trun_kv_cancel(trun_kv *kv, trun_waiter *w);
/* 1.13's WATCH_KEY: 0, -ENOMEM, or -EDQUOT / -ENOSPC over the budget b (NULL: none). */
int trun_kv_watch(trun_kv *kv, trun_waiter *w, trun_slice key, const trun_kv_budget *b);
/* What every waiter's registrations cost together (TRUN_KV_REG_COST), and how many there are. */
size_t trun_kv_reg_bytes(const trun_kv *kv);
uint64_t trun_kv_num_regs(const trun_kv *kv);
void trun_kv_cancel_watches(trun_kv *kv, trun_waiter *w);

int trun_kv_queue_push(trun_kv *kv, trun_slice key, trun_slice val);
/* Length before the pop; when > 0, *out holds the popped element (caller frees out->p). */
int64_t trun_kv_queue_pop(trun_kv *kv, trun_slice key, trun_slice *out);
int64_t trun_kv_queue_len(trun_kv *kv, trun_slice key);

#endif
