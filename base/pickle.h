/* A small pickle reader and writer: what torchelastic's c10d rendezvous state needs (see
 * docs/dev/torchrun-internals.md "The state") and what torch's flight-recorder dumps hold (agent/hang/), plus
 * base64.
 *
 * Reader: a pickle VM for protocols 2-5 that builds a value tree (None, bool, int64, str, bytes, tuple, list,
 * dict, set, global, object) instead of Python objects. Supported opcodes: PROTO FRAME STOP MARK POP POP_MARK
 * DUP GLOBAL STACK_GLOBAL (SHORT_)BINUNICODE BINUNICODE8 (SHORT_)BINBYTES BINBYTES8 MEMOIZE (LONG_)BINPUT
 * (LONG_)BINGET EMPTY_TUPLE TUPLE TUPLE1-3 EMPTY_LIST APPEND(S) EMPTY_DICT SETITEM(S) EMPTY_SET ADDITEMS
 * NEWOBJ REDUCE BUILD NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 LONG4 BINFLOAT. NEWOBJ and REDUCE
 * make an object node (class, args); BUILD sets its state. Two REDUCEs are evaluated because protocols 2-3
 * need them:
 * `_codecs.encode(str, 'latin1')` (how protocol 2 pickles bytes) gives bytes, and `builtins.set(list)` (how
 * protocols 2-3 pickle a set) gives a set. Anything else (unknown opcode, truncated data, wrong types, memo
 * index out of range, stack underflow, absurd lengths, nesting over the limit) fails with a message naming
 * the byte offset and the opcode, e.g. "pickle: offset 57: opcode 0x93 STACK_GLOBAL: stack underflow".
 * Every size is checked against the bytes left (and the limits) before anything is allocated, so memory is
 * O(input). Shared references (memo) are shared pointers; a value may even contain itself, so a consumer
 * that walks the tree must bound its depth (agent/rdzv/c10d_state.c walks a fixed shape).
 *
 * Writer: opcode-level helpers that emit what CPython's C pickler (the one pickle.dumps uses) would emit for
 * the same calls, including protocol 4 framing (a frame is committed when a save() starts and the frame holds
 * 64 KiB or more; the caller marks the start of each save with trun_pkw_begin_save). Memo bookkeeping (which
 * object is already memoized, by identity) is the caller's. Strings and bytes of 64 KiB or more are written
 * inside the frame, unlike CPython (never the case for rendezvous states). */
#ifndef TRUN_BASE_PICKLE_H
#define TRUN_BASE_PICKLE_H

#include <stddef.h>
#include <stdint.h>

/* ---- value tree ------------------------------------------------------------------------------- */

typedef enum trun_pk_type {
  TRUN_PK_NONE,
  TRUN_PK_BOOL,
  TRUN_PK_INT,
  TRUN_PK_STR,    /* s/n: UTF-8 (validated), NUL-terminated (may hold NULs) */
  TRUN_PK_BYTES,  /* s/n */
  TRUN_PK_TUPLE,  /* items[len] */
  TRUN_PK_LIST,   /* items[len] */
  TRUN_PK_DICT,   /* items[2*len]: key, value, key, value ... in insertion order (duplicates kept) */
  TRUN_PK_SET,    /* items[len] in pickle order (duplicates kept) */
  TRUN_PK_GLOBAL, /* s/n: module, s2/n2: name */
  TRUN_PK_OBJ,    /* cls(args) by NEWOBJ or REDUCE (reduced=1); state: from BUILD or NULL */
  TRUN_PK_FLOAT,  /* f (BINFLOAT: a big-endian IEEE 754 double) */
} trun_pk_type;

typedef struct trun_pk_val trun_pk_val;
struct trun_pk_val {
  trun_pk_type type;
  uint8_t op;    /* the opcode that made it */
  size_t offset; /* that opcode's byte offset, for messages */
  int64_t i;     /* BOOL, INT */
  double f;      /* FLOAT */
  char *s, *s2;
  size_t n, n2;
  trun_pk_val **items;
  size_t len, cap;
  trun_pk_val *cls, *args, *state;
  int reduced;
};

typedef struct trun_pickle_limits {
  size_t max_input;  /* bytes (default 64 MiB) */
  size_t max_str;    /* one str / bytes / GLOBAL line (default 1 MiB) */
  size_t max_stack;  /* stack entries (default 1 Mi) */
  size_t max_marks;  /* MARK nesting (default 64) */
  size_t max_memo;   /* highest memo index + 1 (default 4 Mi, and never above the input length + 16) */
  size_t max_values; /* values made (default 4 Mi) */
} trun_pickle_limits;

typedef struct trun_pickle_doc {
  trun_pk_val *root;
  int proto;         /* from PROTO, 0 when absent */
  int frames;        /* FRAME opcodes seen */
  trun_pk_val **all; /* every value made, to free */
  size_t nall, capall;
} trun_pickle_doc;

/* A failure: where, which opcode (-1: none, e.g. end of data), and the full message. */
typedef struct trun_pickle_err {
  size_t offset;
  int opcode;
  char msg[256];
} trun_pickle_err;

void trun_pickle_limits_default(trun_pickle_limits *lim);

/* Runs the pickle in p[0..n) up to STOP (nothing may follow). lim NULL: defaults. On success *out is a
 * document to free with trun_pickle_free. Returns 0, -EINVAL (malformed: err says why), -E2BIG (a limit),
 * -ENOMEM. err may be NULL. */
int trun_pickle_load(const uint8_t *p, size_t n, const trun_pickle_limits *lim, trun_pickle_doc **out,
                     trun_pickle_err *err);
void trun_pickle_free(trun_pickle_doc *doc);

/* The opcode's name ("STACK_GLOBAL"), or "UNKNOWN". */
const char *trun_pickle_opname(int op);

/* Formats "pickle: offset O: opcode 0xNN NAME: what" for value v into err (for consumers of the tree). */
void trun_pickle_val_error(trun_pickle_err *err, const trun_pk_val *v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- writer ----------------------------------------------------------------------------------- */

typedef struct trun_pkw {
  uint8_t *buf;
  size_t len, cap;
  size_t frame_start; /* SIZE_MAX: no open frame */
  uint32_t memo;      /* entries memoized so far */
  int proto;
  int framing;
  int err; /* first error (negative errno); later calls do nothing */
} trun_pkw;

/* Starts a pickle of protocol proto (2..5): PROTO, then framing from 4 on. */
void trun_pkw_init(trun_pkw *w, int proto);
void trun_pkw_op(trun_pkw *w, uint8_t op);
/* MEMOIZE (protocol >= 4) or BINPUT / LONG_BINPUT; returns the memo index given. */
uint32_t trun_pkw_memoize(trun_pkw *w);
void trun_pkw_get(trun_pkw *w, uint32_t idx);
/* BININT1 / BININT2 / BININT / LONG1 as CPython chooses. */
void trun_pkw_int(trun_pkw *w, int64_t v);
/* SHORT_BINUNICODE (protocol >= 4, < 256 bytes) or BINUNICODE; no memo. */
void trun_pkw_str(trun_pkw *w, const char *s, size_t n);
/* SHORT_BINBYTES or BINBYTES (protocol >= 3); no memo. */
void trun_pkw_bytes(trun_pkw *w, const void *p, size_t n);
/* The start of one save() call: commits the open frame when it holds 64 KiB or more (CPython's
 * _Pickler_OpcodeBoundary at the top of save()). */
void trun_pkw_begin_save(trun_pkw *w);
/* STOP, closes the frame; on success hands over the buffer (*out, free()) and returns 0, else the error. */
int trun_pkw_finish(trun_pkw *w, uint8_t **out, size_t *n);
void trun_pkw_free(trun_pkw *w);

/* Opcodes the writer's callers use. */
enum {
  TRUN_PK_MARK = '(',
  TRUN_PK_STOP = '.',
  TRUN_PK_REDUCE = 'R',
  TRUN_PK_BUILD = 'b',
  TRUN_PK_EMPTY_DICT = '}',
  TRUN_PK_EMPTY_TUPLE = ')',
  TRUN_PK_SETITEM = 's',
  TRUN_PK_SETITEMS = 'u',
  TRUN_PK_NONE_OP = 'N',
  TRUN_PK_NEWOBJ = 0x81,
  TRUN_PK_TUPLE1 = 0x85,
  TRUN_PK_TUPLE2 = 0x86,
  TRUN_PK_TUPLE3 = 0x87,
  TRUN_PK_NEWTRUE = 0x88,
  TRUN_PK_NEWFALSE = 0x89,
  TRUN_PK_EMPTY_SET = 0x8f,
  TRUN_PK_ADDITEMS = 0x90,
  TRUN_PK_STACK_GLOBAL = 0x93,
};

/* ---- base64 (standard alphabet, padded) ------------------------------------------------------- */

/* Encodes n bytes; *out is NUL-terminated (free()), *outn its length. 0 or -ENOMEM / -E2BIG. */
int trun_b64_encode(const void *p, size_t n, char **out, size_t *outn);
/* Decodes strictly (length a multiple of 4, padding only at the end, no other characters); *out free().
 * 0, -EINVAL (with the offending character's offset in *bad_at when not NULL), -ENOMEM. */
int trun_b64_decode(const char *s, size_t n, uint8_t **out, size_t *outn, size_t *bad_at);

#endif
