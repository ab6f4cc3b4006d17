/* Growable byte buffers (buf.h) in the store's wire encoding (little-endian integers, u64-length strings). */
#include "buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void trun_buf_free(trun_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

size_t trun_buf_cap_after(const trun_buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->len) return 0;
  size_t need = b->len + extra;
  if (need <= b->cap) return b->cap;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  return cap;
}

int trun_buf_reserve(trun_buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->len) return -EOVERFLOW;
  if (b->len + extra <= b->cap) return 0;
  size_t cap = trun_buf_cap_after(b, extra);
  uint8_t *p = realloc(b->data, cap);
  if (p == NULL) return -ENOMEM;
  b->data = p;
  b->cap = cap;
  return 0;
}

int trun_buf_append(trun_buf *b, const void *p, size_t n) {
  int rc = trun_buf_reserve(b, n);
  if (rc < 0) return rc;
  if (n > 0) memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

int trun_buf_append_u8(trun_buf *b, uint8_t v) { return trun_buf_append(b, &v, 1); }

int trun_buf_append_u32(trun_buf *b, uint32_t v) {
  uint8_t t[4];
  trun_put_u32(t, v);
  return trun_buf_append(b, t, 4);
}

int trun_buf_append_u64(trun_buf *b, uint64_t v) {
  uint8_t t[8];
  trun_put_u64(t, v);
  return trun_buf_append(b, t, 8);
}

int trun_buf_append_str(trun_buf *b, const void *p, size_t n) {
  int rc = trun_buf_reserve(b, 8 + n);
  if (rc < 0) return rc;
  trun_buf_append_u64(b, n);
  return trun_buf_append(b, p, n);
}

void trun_buf_consume(trun_buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
}
