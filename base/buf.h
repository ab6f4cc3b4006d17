/* Growable byte buffer. Functions return 0 or a negative errno. */
#ifndef TRUN_BASE_BUF_H
#define TRUN_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint8_t *data;
  size_t len;
  size_t cap;
} trun_buf;

void trun_buf_free(trun_buf *b);
int trun_buf_reserve(trun_buf *b, size_t extra);
/* The capacity trun_buf_reserve(b, extra) would leave (b->cap when it has room); 0 on overflow (or for an
 * empty buffer asked for nothing). */
size_t trun_buf_cap_after(const trun_buf *b, size_t extra);
int trun_buf_append(trun_buf *b, const void *p, size_t n);
int trun_buf_append_u8(trun_buf *b, uint8_t v);
int trun_buf_append_u32(trun_buf *b, uint32_t v);
int trun_buf_append_u64(trun_buf *b, uint64_t v);
/* u64 length + bytes, the protocol's string encoding. */
int trun_buf_append_str(trun_buf *b, const void *p, size_t n);
/* Drops the first n bytes. */
void trun_buf_consume(trun_buf *b, size_t n);

/* Little-endian integers in and out of bytes (the store's wire order). */
static inline void trun_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t trun_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline void trun_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t trun_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* xorshift64*: a caller-owned PRNG state (never 0) for jitter and load mixes; not for secrets. */
static inline uint64_t trun_rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

#endif
