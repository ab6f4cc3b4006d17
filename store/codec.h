/* Incremental TCPStore request parser and request encoder.
 * The parser never allocates and never trusts a length: each length is checked against the limits as soon as
 * it is readable, and a request is handed out only once all of its bytes are buffered. */
#ifndef TRUN_STORE_CODEC_H
#define TRUN_STORE_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"
#include "proto.h"

typedef struct {
  const uint8_t *p;
  size_t n;
} trun_slice;

typedef struct {
  uint64_t max_key;   /* bytes in one key */
  uint64_t max_value; /* bytes in one value */
  uint64_t max_keys;  /* keys (or pairs) in one CHECK/WAIT/MULTI_* request */
} trun_limits;

/* Defaults: at least torch's libuv server (8 KiB keys, 8 MiB values, 131072 keys) and as large as what
 * torch's classic server was seen to carry (64 MiB values). */
#define TRUN_DEFAULT_MAX_KEY (64u * 1024u)
#define TRUN_DEFAULT_MAX_VALUE (64u * 1024u * 1024u)
#define TRUN_DEFAULT_MAX_KEYS 131072u

typedef struct {
  trun_op op;
  trun_slice key;       /* SET COMPARE_SET GET ADD DELETE_KEY APPEND QUEUE_* BARRIER WATCH_KEY */
  trun_slice val;       /* SET value, COMPARE_SET expected, APPEND / QUEUE_PUSH bytes */
  trun_slice val2;      /* COMPARE_SET desired */
  int64_t num;          /* ADD delta, BARRIER world size */
  uint32_t u32;         /* PING nonce, VALIDATE magic */
  uint64_t count;       /* CHECK / WAIT / MULTI_GET keys, MULTI_SET pairs */
  const uint8_t *items; /* first list item: u64 length + bytes, repeated; all buffered */
  const char *err;      /* on a parse error: what was wrong */
} trun_req;

void trun_limits_default(trun_limits *lim);

/* Learns a connection's generation from its first bytes. Returns TRUN_GEN_V2 with *consumed = 5 when they
 * are VALIDATE with the magic, `legacy` with *consumed = 0 when they cannot be, and TRUN_GEN_UNKNOWN when
 * more bytes are needed to tell. */
trun_gen trun_gen_detect(const uint8_t *buf, size_t len, trun_gen legacy, size_t *consumed);

/* Where the parse of an unfinished CHECK / WAIT / MULTI_GET / MULTI_SET stopped, so that the next parse of
 * the same request (more bytes appended to the same buffer) goes on from there instead of walking every
 * item again: a list trickled in pieces is parsed once. Zeroed: nothing to go on from. */
typedef struct {
  size_t pos;    /* offset from the request's first byte of the first item not yet whole; 0: none */
  uint64_t done; /* items (keys, or pairs) whole before pos */
} trun_req_state;

/* Parses one request of generation gen from buf[0..len). Returns the bytes it takes (> 0), 0 when more bytes
 * are needed (*need = a lower bound of the request's total size), or a negative errno with req->err set:
 * -EBADMSG for an unknown code or a malformed field, -EMSGSIZE for a field over a limit. */
ssize_t trun_req_parse(trun_gen gen, const uint8_t *buf, size_t len, const trun_limits *lim, trun_req *req,
                       size_t *need);
/* The same, resuming from *st (an earlier call on the same request, fewer bytes) and leaving there where a
 * later call may resume; *st is zeroed once the request is whole or bad. */
ssize_t trun_req_parse_resume(trun_gen gen, const uint8_t *buf, size_t len, const trun_limits *lim,
                              trun_req *req, size_t *need, trun_req_state *st);

/* Returns the list item at *pos and advances *pos past it. Only for items of a parsed request. */
trun_slice trun_req_item(const uint8_t **pos);

/* Appends the code byte of op in gen. -ENOTSUP when that generation lacks op. */
int trun_req_begin(trun_buf *out, trun_gen gen, trun_op op);

#endif
