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
/* Calls fn for every KV key (unordered); stops early when fn returns non-zero and returns that. */
int trun_kv_foreach(trun_kv *kv, int (*fn)(void *arg, trun_slice key), void *arg);
/* Total bytes held in keys and values. */
size_t trun_kv_bytes(const trun_kv *kv);

/* 1 when every key of the list exists (libuv rule: a non-empty queue of the name counts). */
int trun_kv_check(trun_kv *kv, uint64_t count, const uint8_t *items);
/* Registers w on every missing key of the list; returns 1 when nothing is missing (no registration),
 * 0 when registered (w->wake comes later), negative errno. Replaces w's earlier registrations. */
int trun_kv_wait(trun_kv *kv, trun_waiter *w, uint64_t count, const uint8_t *items);
/* BARRIER: count = value + 1 stored as decimal; 1 when count >= world (waiters of the key are woken),
 * 0 when w was registered, negative errno. */
int trun_kv_barrier(trun_kv *kv, trun_waiter *w, trun_slice key, int64_t world);
/* Drops w's wait registrations; returns how many there were. */
uint64_t trun_kv_cancel(trun_kv *kv, trun_waiter *w);
int trun_kv_watch(trun_kv *kv, trun_waiter *w, trun_slice key);
void trun_kv_cancel_watches(trun_kv *kv, trun_waiter *w);

int trun_kv_queue_push(trun_kv *kv, trun_slice key, trun_slice val);
/* Length before the pop; when > 0, *out holds the popped element (caller frees out->p). */
int64_t trun_kv_queue_pop(trun_kv *kv, trun_slice key, trun_slice *out);
int64_t trun_kv_queue_len(trun_kv *kv, trun_slice key);

#endif
