/* torchelastic's c10d rendezvous state (`_RendezvousState`, docs/dev/torchrun-internals.md "The state") as a
 * C struct, read from and written to the store's base64 pickle: a key's value format, below the c10d backend
 * (c10d/) and --rdzv-status (rdzv_status.c), which both read it, like the end key's (rdzv_end_key.c). Every
 * layout torch has used: node key `fqdn` (1.13) or `addr` (2.0+), with or without `redundancy_list` (2.3+),
 * naive (<= 2.5) or timezone-aware UTC (2.6+) datetimes. The decoder reports the layout it saw; the encoder
 * writes the layout it is given, byte-identical to pickle.dumps (protocol 4) of the same state as a torch
 * agent holds it: one _NodeDesc object per node (shared by every list it is in), a separate addr string per
 * node, a separate datetime per field, the timezone.utc singleton shared. */
#ifndef TRUN_AGENT_RDZV_STATE_H
#define TRUN_AGENT_RDZV_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef enum { TRUN_RDZV_KEY_UNKNOWN = 0, TRUN_RDZV_KEY_ADDR, TRUN_RDZV_KEY_FQDN } trun_rdzv_key;
typedef enum { TRUN_RDZV_TZ_UNKNOWN = 0, TRUN_RDZV_TZ_NAIVE, TRUN_RDZV_TZ_AWARE } trun_rdzv_tz;

/* What a state looks like on the wire. The decoder sets key / tz to UNKNOWN when the state has no node /
 * no datetime to tell; the encoder treats UNKNOWN as ADDR / AWARE. proto: 4 or 5 (2.x agents on Python
 * <= 3.13 write 4); the decoder reports the PROTO it saw. */
typedef struct trun_rdzv_layout {
  trun_rdzv_key key;
  bool redundancy; /* redundancy_list present */
  trun_rdzv_tz tz;
  int proto;
} trun_rdzv_layout;

typedef struct trun_rdzv_node {
  char *addr; /* NUL-terminated, owned by the state */
  int64_t pid;
  int64_t local_id;
} trun_rdzv_node;

/* participants: v = rank; last_heartbeats: v = microseconds since 1970-01-01 UTC. */
typedef struct trun_rdzv_entry {
  trun_rdzv_node node;
  int64_t v;
} trun_rdzv_entry;

typedef struct trun_rdzv_state {
  int64_t round;
  bool complete;
  bool closed;
  bool has_deadline;
  int64_t deadline_us; /* microseconds since 1970-01-01 UTC */
  trun_rdzv_entry *participants;
  size_t n_participants;
  trun_rdzv_node *wait_list;
  size_t n_wait;
  trun_rdzv_node *redundancy_list;
  size_t n_redundancy;
  trun_rdzv_entry *heartbeats;
  size_t n_heartbeats;
} trun_rdzv_state;

/* Decodes the base64 store value (or the raw pickle). On success *st owns its memory (free with
 * trun_rdzv_state_free) and *lay (may be NULL) says the layout. Returns 0, -EINVAL (malformed: err->msg
 * names the byte offset and opcode), -E2BIG, -ENOMEM. err may be NULL. Entries keep the pickle's order. */
int trun_rdzv_state_decode(const char *b64, size_t n, trun_rdzv_state *st, trun_rdzv_layout *lay,
                           trun_pickle_err *err);
int trun_rdzv_state_decode_pickle(const uint8_t *p, size_t n, trun_rdzv_state *st, trun_rdzv_layout *lay,
                                  trun_pickle_err *err);

/* Encodes st in layout lay (NULL: addr, redundancy_list, aware, protocol 4). *out: NUL-terminated base64
 * (or the raw pickle), free(). Returns 0, -EINVAL (a value torch could not hold: addr with a NUL or of
 * 64 KiB or more, a time outside years 1..9999, redundancy_list entries with lay->redundancy false),
 * -ENOMEM. */
int trun_rdzv_state_encode(const trun_rdzv_state *st, const trun_rdzv_layout *lay, char **out, size_t *n);
int trun_rdzv_state_encode_pickle(const trun_rdzv_state *st, const trun_rdzv_layout *lay, uint8_t **out,
                                  size_t *n);

void trun_rdzv_state_free(trun_rdzv_state *st);

/* Microseconds since the epoch <-> civil UTC time (proleptic Gregorian, years 1..9999). */
typedef struct trun_rdzv_tm {
  int year, month, day, hour, minute, second, usec;
} trun_rdzv_tm;
int64_t trun_rdzv_tm_to_us(const trun_rdzv_tm *t);
void trun_rdzv_us_to_tm(int64_t us, trun_rdzv_tm *t);

#endif
