/* Pickle VM (reader), opcode writer and base64: see pickle.h. */
#include "pickle.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FRAME_TARGET 65536u
#define FRAME_HEADER 9u
#define BATCH 1000

/* ---- opcode names ----------------------------------------------------------------------------- */

typedef struct {
  uint8_t op;
  const char *name;
} opname;

static const opname opnames[] = {
    {'(', "MARK"},
    {'.', "STOP"},
    {'0', "POP"},
    {'1', "POP_MARK"},
    {'2', "DUP"},
    {'F', "FLOAT"},
    {'I', "INT"},
    {'J', "BININT"},
    {'K', "BININT1"},
    {'L', "LONG"},
    {'M', "BININT2"},
    {'N', "NONE"},
    {'P', "PERSID"},
    {'Q', "BINPERSID"},
    {'R', "REDUCE"},
    {'S', "STRING"},
    {'T', "BINSTRING"},
    {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"},
    {'X', "BINUNICODE"},
    {'a', "APPEND"},
    {'b', "BUILD"},
    {'c', "GLOBAL"},
    {'d', "DICT"},
    {'}', "EMPTY_DICT"},
    {'e', "APPENDS"},
    {'g', "GET"},
    {'h', "BINGET"},
    {'i', "INST"},
    {'j', "LONG_BINGET"},
    {'l', "LIST"},
    {']', "EMPTY_LIST"},
    {'o', "OBJ"},
    {'p', "PUT"},
    {'q', "BINPUT"},
    {'r', "LONG_BINPUT"},
    {'s', "SETITEM"},
    {'t', "TUPLE"},
    {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"},
    {'G', "BINFLOAT"},
    {0x80, "PROTO"},
    {0x81, "NEWOBJ"},
    {0x82, "EXT1"},
    {0x83, "EXT2"},
    {0x84, "EXT4"},
    {0x85, "TUPLE1"},
    {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"},
    {0x8a, "LONG1"},
    {0x8b, "LONG4"},
    {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"},
    {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},
    {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"},
    {0x94, "MEMOIZE"},
    {0x95, "FRAME"},
    {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
};

const char *trun_pickle_opname(int op) {
  for (size_t i = 0; i < sizeof(opnames) / sizeof(opnames[0]); i++)
    if (opnames[i].op == op) return opnames[i].name;
  return "UNKNOWN";
}

static void verr(trun_pickle_err *err, size_t offset, int op, const char *fmt, va_list ap) {
  if (!err) return;
  err->offset = offset;
  err->opcode = op;
  int k;
  if (op < 0)
    k = snprintf(err->msg, sizeof(err->msg), "pickle: offset %zu: ", offset);
  else
    k = snprintf(err->msg, sizeof(err->msg), "pickle: offset %zu: opcode 0x%02x %s: ", offset, op,
                 trun_pickle_opname(op));
  if (k < 0) k = 0;
  if ((size_t)k < sizeof(err->msg)) vsnprintf(err->msg + k, sizeof(err->msg) - (size_t)k, fmt, ap);
}

static void seterr(trun_pickle_err *err, size_t offset, int op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void seterr(trun_pickle_err *err, size_t offset, int op, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verr(err, offset, op, fmt, ap);
  va_end(ap);
}

void trun_pickle_val_error(trun_pickle_err *err, const trun_pk_val *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verr(err, v ? v->offset : 0, v ? v->op : -1, fmt, ap);
  va_end(ap);
}

void trun_pickle_limits_default(trun_pickle_limits *lim) {
  lim->max_input = 64u << 20;
  lim->max_str = 1u << 20;
  lim->max_stack = 1u << 20;
  lim->max_marks = 64;
  lim->max_memo = 4u << 20;
  lim->max_values = 4u << 20;
}

/* ---- reader ----------------------------------------------------------------------------------- */

typedef struct vm {
  const uint8_t *p;
  size_t n, pos; /* pos: the next byte to read */
  size_t at;     /* offset of the current opcode */
  int op;        /* the current opcode */
  size_t frame_end;
  trun_pickle_limits lim;
  trun_pickle_doc *doc;
  trun_pk_val **stack;
  size_t sp, scap;
  size_t *marks;
  size_t nmarks;
  trun_pk_val **memo;
  size_t memo_cap; /* slots allocated */
  size_t memo_len; /* slots filled (CPython's memo_len, the index MEMOIZE uses) */
  trun_pickle_err *err;
} vm;

#define FAIL(code, ...)                        \
  do {                                         \
    seterr(m->err, m->at, m->op, __VA_ARGS__); \
    return (code);                             \
  } while (0)

static int need(vm *m, size_t k, const char *what) {
  if (m->n - m->pos < k) FAIL(-EINVAL, "truncated: %s needs %zu bytes, %zu left", what, k, m->n - m->pos);
  return 0;
}

static uint64_t rd_le(const uint8_t *b, int k) {
  uint64_t v = 0;
  for (int i = k - 1; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static int new_val(vm *m, trun_pk_type t, trun_pk_val **out) {
  trun_pickle_doc *d = m->doc;
  if (d->nall >= m->lim.max_values) FAIL(-E2BIG, "more than %zu values", m->lim.max_values);
  if (d->nall == d->capall) {
    size_t nc = d->capall ? d->capall * 2 : 64;
    trun_pk_val **a = realloc(d->all, nc * sizeof(*a));
    if (!a) FAIL(-ENOMEM, "out of memory");
    d->all = a;
    d->capall = nc;
  }
  trun_pk_val *v = calloc(1, sizeof(*v));
  if (!v) FAIL(-ENOMEM, "out of memory");
  v->type = t;
  v->op = (uint8_t)m->op;
  v->offset = m->at;
  d->all[d->nall++] = v;
  *out = v;
  return 0;
}

static int push(vm *m, trun_pk_val *v) {
  if (m->sp >= m->lim.max_stack) FAIL(-E2BIG, "stack deeper than %zu", m->lim.max_stack);
  if (m->sp == m->scap) {
    size_t nc = m->scap ? m->scap * 2 : 64;
    trun_pk_val **a = realloc(m->stack, nc * sizeof(*a));
    if (!a) FAIL(-ENOMEM, "out of memory");
    m->stack = a;
    m->scap = nc;
  }
  m->stack[m->sp++] = v;
  return 0;
}

/* The lowest stack index usable now (above the innermost mark). */
static size_t floor_(const vm *m) { return m->nmarks ? m->marks[m->nmarks - 1] : 0; }

static int pop(vm *m, trun_pk_val **out) {
  if (m->sp <= floor_(m)) FAIL(-EINVAL, "stack underflow");
  *out = m->stack[--m->sp];
  return 0;
}

static int top(vm *m, trun_pk_val **out) {
  if (m->sp <= floor_(m)) FAIL(-EINVAL, "stack underflow");
  *out = m->stack[m->sp - 1];
  return 0;
}

/* Pops the innermost mark: the items above it are stack[*from .. sp). */
static int pop_mark(vm *m, size_t *from) {
  if (m->nmarks == 0) FAIL(-EINVAL, "no MARK on the stack");
  *from = m->marks[--m->nmarks];
  return 0;
}

static int add_items(vm *m, trun_pk_val *c, trun_pk_val *const *items, size_t k) {
  size_t used = c->type == TRUN_PK_DICT ? 2 * c->len : c->len; /* a dict's len counts pairs */
  if (k > SIZE_MAX / 16 - used) FAIL(-E2BIG, "container too large");
  size_t want = used + k;
  if (want > c->cap) {
    size_t nc = c->cap ? c->cap : 4;
    while (nc < want) nc *= 2;
    trun_pk_val **a = realloc(c->items, nc * sizeof(*a));
    if (!a) FAIL(-ENOMEM, "out of memory");
    c->items = a;
    c->cap = nc;
  }
  if (k) memcpy(c->items + used, items, k * sizeof(*items));
  c->len += c->type == TRUN_PK_DICT ? k / 2 : k;
  return 0;
}

static const char *type_name(trun_pk_type t) {
  static const char *const names[] = {"None", "bool", "int", "str",    "bytes",  "tuple",
                                      "list", "dict", "set", "global", "object", "float"};
  return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

/* 1 when s[0..n) is well-formed UTF-8 (surrogates allowed, as CPython's 'surrogatepass'). */
static int utf8_ok(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t k;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      k = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      k = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      k = 3;
      cp = c & 0x07;
    } else {
      return 0;
    }
    if (n - i <= k) return 0;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + j] & 0x3f);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)))
      return 0;
    i += k + 1;
  }
  return 1;
}

static int copy_bytes(vm *m, size_t k, char **out) {
  char *s = malloc(k + 1);
  if (!s) FAIL(-ENOMEM, "out of memory");
  memcpy(s, m->p + m->pos, k);
  s[k] = '\0';
  m->pos += k;
  *out = s;
  return 0;
}

/* A str or bytes whose length is in the next lenbytes bytes. */
static int op_string(vm *m, int lenbytes, trun_pk_type t) {
  int rc;
  if ((rc = need(m, (size_t)lenbytes, "the length"))) return rc;
  uint64_t k = rd_le(m->p + m->pos, lenbytes);
  m->pos += (size_t)lenbytes;
  if (k > m->lim.max_str)
    FAIL(-E2BIG, "length %llu over the limit %zu", (unsigned long long)k, m->lim.max_str);
  if ((rc = need(m, (size_t)k, "the data"))) return rc;
  if (t == TRUN_PK_STR && !utf8_ok(m->p + m->pos, (size_t)k)) FAIL(-EINVAL, "string is not valid UTF-8");
  trun_pk_val *v;
  if ((rc = new_val(m, t, &v))) return rc;
  v->n = (size_t)k;
  if ((rc = copy_bytes(m, (size_t)k, &v->s))) return rc;
  return push(m, v);
}

static int op_int(vm *m, int k, int sign) {
  int rc;
  if ((rc = need(m, (size_t)k, "the integer"))) return rc;
  uint64_t u = rd_le(m->p + m->pos, k);
  m->pos += (size_t)k;
  int64_t x = (int64_t)u;
  if (sign && k < 8 && (u >> (8 * k - 1)) & 1) x = (int64_t)(u | ~((UINT64_C(1) << (8 * k)) - 1));
  trun_pk_val *v;
  if ((rc = new_val(m, TRUN_PK_INT, &v))) return rc;
  v->i = x;
  return push(m, v);
}

/* BINFLOAT: 8 bytes, a big-endian IEEE 754 double (any bit pattern is a double: NaN and inf pass). */
static int op_float(vm *m) {
  int rc;
  if ((rc = need(m, 8, "the float"))) return rc;
  uint64_t u = 0;
  for (int i = 0; i < 8; i++) u = (u << 8) | m->p[m->pos + (size_t)i];
  m->pos += 8;
  trun_pk_val *v;
  if ((rc = new_val(m, TRUN_PK_FLOAT, &v))) return rc;
  memcpy(&v->f, &u, sizeof(v->f));
  return push(m, v);
}

static int op_long(vm *m, int lenbytes) {
  int rc;
  if ((rc = need(m, (size_t)lenbytes, "the length"))) return rc;
  uint64_t k = rd_le(m->p + m->pos, lenbytes);
  m->pos += (size_t)lenbytes;
  if (lenbytes == 4 && (k & 0x80000000u)) FAIL(-EINVAL, "negative length");
  if (k > 8) FAIL(-EINVAL, "integer of %llu bytes does not fit in 64 bits", (unsigned long long)k);
  if (k == 0) {
    trun_pk_val *v;
    if ((rc = new_val(m, TRUN_PK_INT, &v))) return rc;
    return push(m, v);
  }
  return op_int(m, (int)k, 1);
}

static int memo_put(vm *m, uint64_t idx, trun_pk_val *v) {
  size_t max = m->lim.max_memo;
  if (max > m->n + 16) max = m->n + 16;
  if (idx >= max) FAIL(-E2BIG, "memo index %llu out of range (limit %zu)", (unsigned long long)idx, max);
  if (idx >= m->memo_cap) {
    size_t nc = m->memo_cap ? m->memo_cap : 64;
    while (nc <= idx) nc *= 2;
    trun_pk_val **a = realloc(m->memo, nc * sizeof(*a));
    if (!a) FAIL(-ENOMEM, "out of memory");
    memset(a + m->memo_cap, 0, (nc - m->memo_cap) * sizeof(*a));
    m->memo = a;
    m->memo_cap = nc;
  }
  if (!m->memo[idx]) m->memo_len++;
  m->memo[idx] = v;
  return 0;
}

static int op_put(vm *m, int k) {
  int rc;
  if ((rc = need(m, (size_t)k, "the memo index"))) return rc;
  uint64_t idx = rd_le(m->p + m->pos, k);
  m->pos += (size_t)k;
  trun_pk_val *v;
  if ((rc = top(m, &v))) return rc;
  return memo_put(m, idx, v);
}

static int op_get(vm *m, int k) {
  int rc;
  if ((rc = need(m, (size_t)k, "the memo index"))) return rc;
  uint64_t idx = rd_le(m->p + m->pos, k);
  m->pos += (size_t)k;
  if (idx >= m->memo_cap || !m->memo[idx]) FAIL(-EINVAL, "memo index %llu not set", (unsigned long long)idx);
  return push(m, m->memo[idx]);
}

/* One line of a GLOBAL opcode, without its newline. */
static int read_line(vm *m, char **out, size_t *outn) {
  size_t left = m->n - m->pos;
  size_t cap = left < m->lim.max_str ? left : m->lim.max_str;
  const uint8_t *nl = memchr(m->p + m->pos, '\n', cap);
  if (!nl) {
    if (cap < left) FAIL(-E2BIG, "name longer than %zu bytes", m->lim.max_str);
    FAIL(-EINVAL, "truncated: no newline after the name");
  }
  size_t k = (size_t)(nl - (m->p + m->pos));
  if (!utf8_ok(m->p + m->pos, k)) FAIL(-EINVAL, "name is not valid UTF-8");
  int rc = copy_bytes(m, k, out);
  if (rc) return rc;
  m->pos++;
  *outn = k;
  return 0;
}

static int is_global(const trun_pk_val *v, const char *mod, const char *name) {
  return v->type == TRUN_PK_GLOBAL && strcmp(v->s, mod) == 0 && strcmp(v->s2, name) == 0 &&
         strlen(mod) == v->n && strlen(name) == v->n2;
}

/* REDUCE of _codecs.encode(str, 'latin1') -> bytes. */
static int reduce_codecs(vm *m, trun_pk_val *args, trun_pk_val *v) {
  if (args->len != 2 || args->items[0]->type != TRUN_PK_STR || args->items[1]->type != TRUN_PK_STR ||
      (strcmp(args->items[1]->s, "latin1") != 0 && strcmp(args->items[1]->s, "latin-1") != 0))
    FAIL(-EINVAL, "_codecs.encode: want (str, 'latin1')");
  const uint8_t *s = (const uint8_t *)args->items[0]->s;
  size_t n = args->items[0]->n, k = 0;
  char *b = malloc(n + 1);
  if (!b) FAIL(-ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    if (s[i] < 0x80) {
      b[k++] = (char)s[i];
    } else if ((s[i] & 0xe0) == 0xc0 && i + 1 < n && s[i] <= 0xc3) {
      b[k++] = (char)(((s[i] & 0x1f) << 6) | (s[i + 1] & 0x3f));
      i++;
    } else {
      free(b);
      FAIL(-EINVAL, "_codecs.encode: character not in latin1");
    }
  }
  b[k] = '\0';
  v->type = TRUN_PK_BYTES;
  v->s = b;
  v->n = k;
  return 0;
}

static int op_reduce_or_newobj(vm *m, int reduce) {
  int rc;
  trun_pk_val *args, *cls, *v;
  if ((rc = pop(m, &args)) || (rc = pop(m, &cls))) return rc;
  if (args->type != TRUN_PK_TUPLE) FAIL(-EINVAL, "arguments are a %s, want a tuple", type_name(args->type));
  if (cls->type != TRUN_PK_GLOBAL) FAIL(-EINVAL, "callable is a %s, want a global", type_name(cls->type));
  if ((rc = new_val(m, TRUN_PK_OBJ, &v))) return rc;
  if (reduce && is_global(cls, "_codecs", "encode")) {
    if ((rc = reduce_codecs(m, args, v))) return rc;
  } else if (reduce && (is_global(cls, "builtins", "set") || is_global(cls, "__builtin__", "set"))) {
    v->type = TRUN_PK_SET;
    if (args->len > 1 || (args->len == 1 && args->items[0]->type != TRUN_PK_LIST))
      FAIL(-EINVAL, "set: want () or ([items],)");
    if (args->len == 1 && (rc = add_items(m, v, args->items[0]->items, args->items[0]->len))) return rc;
  } else {
    v->cls = cls;
    v->args = args;
    v->reduced = reduce;
  }
  return push(m, v);
}

static int op_tuple(vm *m, size_t k, int to_mark) {
  int rc;
  size_t from;
  if (to_mark) {
    if ((rc = pop_mark(m, &from))) return rc;
  } else {
    if (m->sp - floor_(m) < k) FAIL(-EINVAL, "stack underflow");
    from = m->sp - k;
  }
  trun_pk_val *v;
  if ((rc = new_val(m, TRUN_PK_TUPLE, &v))) return rc;
  if ((rc = add_items(m, v, m->sp > from ? m->stack + from : NULL, m->sp - from))) return rc;
  m->sp = from;
  return push(m, v);
}

/* APPENDS / SETITEMS / ADDITEMS: items above the mark into the container just below it. */
static int op_fill(vm *m, trun_pk_type want, int to_mark) {
  int rc;
  size_t from;
  if (to_mark) {
    if ((rc = pop_mark(m, &from))) return rc;
  } else {
    size_t k = want == TRUN_PK_DICT ? 2 : 1;
    if (m->sp - floor_(m) < k) FAIL(-EINVAL, "stack underflow");
    from = m->sp - k;
  }
  if (from <= floor_(m)) FAIL(-EINVAL, "stack underflow");
  trun_pk_val *c = m->stack[from - 1];
  if (c->type != want) FAIL(-EINVAL, "target is a %s, want a %s", type_name(c->type), type_name(want));
  size_t k = m->sp - from;
  if (want == TRUN_PK_DICT && k % 2) FAIL(-EINVAL, "odd number of items");
  if ((rc = add_items(m, c, k ? m->stack + from : NULL, k))) return rc;
  m->sp = from;
  return 0;
}

static char *dup_mem(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

static int step(vm *m, int *stop) {
  int rc;
  trun_pk_val *v, *w;
  m->at = m->pos;
  m->op = -1;
  if (m->pos >= m->n) FAIL(-EINVAL, "truncated: no STOP opcode");
  m->op = m->p[m->pos++];
  switch (m->op) {
    case 0x80: /* PROTO */
      if ((rc = need(m, 1, "the version"))) return rc;
      if (m->p[m->pos] < 2 || m->p[m->pos] > 5) FAIL(-EINVAL, "unsupported protocol %d", m->p[m->pos]);
      m->doc->proto = m->p[m->pos++];
      return 0;
    case 0x95: { /* FRAME */
      if ((rc = need(m, 8, "the frame length"))) return rc;
      uint64_t k = rd_le(m->p + m->pos, 8);
      m->pos += 8;
      if (m->at < m->frame_end) FAIL(-EINVAL, "new frame before the end of the current one");
      if (k > m->n - m->pos)
        FAIL(-EINVAL, "truncated: frame of %llu bytes, %zu left", (unsigned long long)k, m->n - m->pos);
      m->frame_end = m->pos + (size_t)k;
      m->doc->frames++;
      return 0;
    }
    case '.': /* STOP */
      if (m->nmarks) FAIL(-EINVAL, "MARK left open");
      if (m->sp == 0) FAIL(-EINVAL, "stack underflow");
      if (m->sp != 1) FAIL(-EINVAL, "%zu values left on the stack, want 1", m->sp);
      if (m->pos != m->n) FAIL(-EINVAL, "%zu bytes after STOP", m->n - m->pos);
      m->doc->root = m->stack[0];
      *stop = 1;
      return 0;
    case '(': /* MARK */
      if (m->nmarks >= m->lim.max_marks) FAIL(-E2BIG, "MARKs nested deeper than %zu", m->lim.max_marks);
      m->marks[m->nmarks++] = m->sp;
      return 0;
    case '0': return pop(m, &v); /* POP */
    case '1': {                  /* POP_MARK */
      size_t from;
      if ((rc = pop_mark(m, &from))) return rc;
      m->sp = from;
      return 0;
    }
    case '2': /* DUP */
      if ((rc = top(m, &v))) return rc;
      return push(m, v);
    case 'c': { /* GLOBAL */
      if ((rc = new_val(m, TRUN_PK_GLOBAL, &v))) return rc;
      if ((rc = read_line(m, &v->s, &v->n)) || (rc = read_line(m, &v->s2, &v->n2))) return rc;
      return push(m, v);
    }
    case 0x93: /* STACK_GLOBAL */
      if ((rc = pop(m, &w)) || (rc = pop(m, &v))) return rc;
      if (v->type != TRUN_PK_STR || w->type != TRUN_PK_STR) FAIL(-EINVAL, "module and name must be str");
      {
        trun_pk_val *g;
        if ((rc = new_val(m, TRUN_PK_GLOBAL, &g))) return rc;
        if (!(g->s = dup_mem(v->s, v->n)) || !(g->s2 = dup_mem(w->s, w->n))) FAIL(-ENOMEM, "out of memory");
        g->n = v->n;
        g->n2 = w->n;
        return push(m, g);
      }
    case 0x8c: return op_string(m, 1, TRUN_PK_STR);   /* SHORT_BINUNICODE */
    case 'X': return op_string(m, 4, TRUN_PK_STR);    /* BINUNICODE */
    case 0x8d: return op_string(m, 8, TRUN_PK_STR);   /* BINUNICODE8 */
    case 'C': return op_string(m, 1, TRUN_PK_BYTES);  /* SHORT_BINBYTES */
    case 'B': return op_string(m, 4, TRUN_PK_BYTES);  /* BINBYTES */
    case 0x8e: return op_string(m, 8, TRUN_PK_BYTES); /* BINBYTES8 */
    case 0x94:                                        /* MEMOIZE */
      if ((rc = top(m, &v))) return rc;
      return memo_put(m, m->memo_len, v);
    case 'q': return op_put(m, 1); /* BINPUT */
    case 'r': return op_put(m, 4); /* LONG_BINPUT */
    case 'h': return op_get(m, 1); /* BINGET */
    case 'j': return op_get(m, 4); /* LONG_BINGET */
    case ')': return op_tuple(m, 0, 0);
    case 't': return op_tuple(m, 0, 1);
    case 0x85: return op_tuple(m, 1, 0);
    case 0x86: return op_tuple(m, 2, 0);
    case 0x87: return op_tuple(m, 3, 0);
    case ']':
      if ((rc = new_val(m, TRUN_PK_LIST, &v))) return rc;
      return push(m, v);
    case 'a': return op_fill(m, TRUN_PK_LIST, 0);
    case 'e': return op_fill(m, TRUN_PK_LIST, 1);
    case '}':
      if ((rc = new_val(m, TRUN_PK_DICT, &v))) return rc;
      return push(m, v);
    case 's': return op_fill(m, TRUN_PK_DICT, 0);
    case 'u': return op_fill(m, TRUN_PK_DICT, 1);
    case 0x8f:
      if ((rc = new_val(m, TRUN_PK_SET, &v))) return rc;
      return push(m, v);
    case 0x90: return op_fill(m, TRUN_PK_SET, 1);
    case 0x81: return op_reduce_or_newobj(m, 0); /* NEWOBJ */
    case 'R': return op_reduce_or_newobj(m, 1);  /* REDUCE */
    case 'b':                                    /* BUILD */
      if ((rc = pop(m, &w)) || (rc = top(m, &v))) return rc;
      if (v->type != TRUN_PK_OBJ) FAIL(-EINVAL, "target is a %s, want an object", type_name(v->type));
      v->state = w;
      return 0;
    case 'N':
    case 0x88:
    case 0x89:
      if ((rc = new_val(m, m->op == 'N' ? TRUN_PK_NONE : TRUN_PK_BOOL, &v))) return rc;
      v->i = m->op == 0x88;
      return push(m, v);
    case 'K': return op_int(m, 1, 0);
    case 'M': return op_int(m, 2, 0);
    case 'J': return op_int(m, 4, 1);
    case 0x8a: return op_long(m, 1);
    case 0x8b: return op_long(m, 4);
    case 'G': return op_float(m); /* BINFLOAT */
    default:
      if (strcmp(trun_pickle_opname(m->op), "UNKNOWN") == 0) FAIL(-EINVAL, "unknown opcode");
      FAIL(-EINVAL, "opcode not supported");
  }
}

int trun_pickle_load(const uint8_t *p, size_t n, const trun_pickle_limits *lim, trun_pickle_doc **out,
                     trun_pickle_err *err) {
  vm m = {.p = p, .n = n, .err = err};
  if (lim)
    m.lim = *lim;
  else
    trun_pickle_limits_default(&m.lim);
  *out = NULL;
  if (err) {
    err->offset = 0;
    err->opcode = -1;
    err->msg[0] = '\0';
  }
  if (n > m.lim.max_input) {
    seterr(err, 0, -1, "%zu bytes over the limit %zu", n, m.lim.max_input);
    return -E2BIG;
  }
  m.doc = calloc(1, sizeof(*m.doc));
  m.marks = calloc(m.lim.max_marks + 1, sizeof(*m.marks));
  int rc = 0;
  if (!m.doc || !m.marks) {
    seterr(err, 0, -1, "out of memory");
    rc = -ENOMEM;
  }
  int stop = 0;
  while (!rc && !stop) rc = step(&m, &stop);
  free(m.stack);
  free(m.marks);
  free(m.memo);
  if (rc) {
    trun_pickle_free(m.doc);
    return rc;
  }
  *out = m.doc;
  return 0;
}

void trun_pickle_free(trun_pickle_doc *doc) {
  if (!doc) return;
  for (size_t i = 0; i < doc->nall; i++) {
    free(doc->all[i]->s);
    free(doc->all[i]->s2);
    free(doc->all[i]->items);
    free(doc->all[i]);
  }
  free(doc->all);
  free(doc);
}

/* ---- writer ----------------------------------------------------------------------------------- */

static void w_reserve(trun_pkw *w, size_t k) {
  if (w->err) return;
  if (k > SIZE_MAX / 2 - w->len) {
    w->err = -E2BIG;
    return;
  }
  if (w->len + k <= w->cap) return;
  size_t nc = w->cap ? w->cap : 256;
  while (nc < w->len + k) nc *= 2;
  uint8_t *b = realloc(w->buf, nc);
  if (!b) {
    w->err = -ENOMEM;
    return;
  }
  w->buf = b;
  w->cap = nc;
}

/* Every write opens a frame (a 9-byte placeholder) when framing and none is open, as CPython does. */
static void w_write(trun_pkw *w, const void *p, size_t k) {
  if (w->err) return;
  if (w->framing && w->frame_start == SIZE_MAX) {
    w_reserve(w, FRAME_HEADER);
    if (w->err) return;
    w->frame_start = w->len;
    w->len += FRAME_HEADER;
  }
  w_reserve(w, k);
  if (w->err) return;
  memcpy(w->buf + w->len, p, k);
  w->len += k;
}

static void commit_frame(trun_pkw *w) {
  if (w->err || w->frame_start == SIZE_MAX) return;
  size_t k = w->len - w->frame_start - FRAME_HEADER;
  uint8_t *q = w->buf + w->frame_start;
  if (k >= 4) {
    q[0] = 0x95;
    for (int i = 0; i < 8; i++) q[1 + i] = (uint8_t)((uint64_t)k >> (8 * i));
  } else {
    memmove(q, q + FRAME_HEADER, k);
    w->len -= FRAME_HEADER;
  }
  w->frame_start = SIZE_MAX;
}

void trun_pkw_init(trun_pkw *w, int proto) {
  memset(w, 0, sizeof(*w));
  w->frame_start = SIZE_MAX;
  if (proto < 2 || proto > 5) {
    w->err = -EINVAL;
    return;
  }
  w->proto = proto;
  uint8_t h[2] = {0x80, (uint8_t)proto};
  w_write(w, h, 2);
  w->framing = proto >= 4;
}

void trun_pkw_op(trun_pkw *w, uint8_t op) { w_write(w, &op, 1); }

uint32_t trun_pkw_memoize(trun_pkw *w) {
  uint32_t idx = w->memo++;
  if (w->proto >= 4) {
    trun_pkw_op(w, 0x94);
  } else if (idx < 256) {
    uint8_t b[2] = {'q', (uint8_t)idx};
    w_write(w, b, 2);
  } else {
    uint8_t b[5] = {'r', (uint8_t)idx, (uint8_t)(idx >> 8), (uint8_t)(idx >> 16), (uint8_t)(idx >> 24)};
    w_write(w, b, 5);
  }
  return idx;
}

void trun_pkw_get(trun_pkw *w, uint32_t idx) {
  if (idx < 256) {
    uint8_t b[2] = {'h', (uint8_t)idx};
    w_write(w, b, 2);
  } else {
    uint8_t b[5] = {'j', (uint8_t)idx, (uint8_t)(idx >> 8), (uint8_t)(idx >> 16), (uint8_t)(idx >> 24)};
    w_write(w, b, 5);
  }
}

void trun_pkw_int(trun_pkw *w, int64_t v) {
  uint8_t b[10];
  if (v >= 0 && v <= 0xff) {
    b[0] = 'K';
    b[1] = (uint8_t)v;
    w_write(w, b, 2);
  } else if (v >= 0 && v <= 0xffff) {
    b[0] = 'M';
    b[1] = (uint8_t)v;
    b[2] = (uint8_t)(v >> 8);
    w_write(w, b, 3);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    b[0] = 'J';
    for (int i = 0; i < 4; i++) b[1 + i] = (uint8_t)((uint64_t)v >> (8 * i));
    w_write(w, b, 5);
  } else {
    /* LONG1 with the fewest two's-complement bytes. */
    int k = 5;
    while (k < 8) {
      int64_t lim = INT64_C(1) << (8 * k - 1);
      if (v >= -lim && v < lim) break;
      k++;
    }
    b[0] = 0x8a;
    b[1] = (uint8_t)k;
    for (int i = 0; i < k; i++) b[2 + i] = (uint8_t)((uint64_t)v >> (8 * i));
    w_write(w, b, (size_t)k + 2);
  }
}

static void w_sized(trun_pkw *w, uint8_t op1, uint8_t op4, const void *p, size_t n) {
  uint8_t b[5];
  if (n > UINT32_MAX) {
    if (!w->err) w->err = -E2BIG;
    return;
  }
  if (n < 256 && op1) {
    b[0] = op1;
    b[1] = (uint8_t)n;
    w_write(w, b, 2);
  } else {
    b[0] = op4;
    for (int i = 0; i < 4; i++) b[1 + i] = (uint8_t)(n >> (8 * i));
    w_write(w, b, 5);
  }
  w_write(w, p, n);
}

void trun_pkw_str(trun_pkw *w, const char *s, size_t n) { w_sized(w, w->proto >= 4 ? 0x8c : 0, 'X', s, n); }

void trun_pkw_bytes(trun_pkw *w, const void *p, size_t n) {
  if (w->proto < 3 && !w->err) w->err = -EINVAL; /* protocol 2 bytes need _codecs.encode: not written */
  w_sized(w, 'C', 'B', p, n);
}

void trun_pkw_begin_save(trun_pkw *w) {
  if (w->framing && w->frame_start != SIZE_MAX && w->len - w->frame_start - FRAME_HEADER >= FRAME_TARGET)
    commit_frame(w);
}

int trun_pkw_finish(trun_pkw *w, uint8_t **out, size_t *n) {
  trun_pkw_op(w, '.');
  commit_frame(w);
  if (w->err) {
    int e = w->err;
    trun_pkw_free(w);
    return e;
  }
  *out = w->buf;
  *n = w->len;
  w->buf = NULL;
  w->len = w->cap = 0;
  return 0;
}

void trun_pkw_free(trun_pkw *w) {
  free(w->buf);
  w->buf = NULL;
  w->len = w->cap = 0;
}

/* ---- base64 ----------------------------------------------------------------------------------- */

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int trun_b64_encode(const void *p, size_t n, char **out, size_t *outn) {
  const uint8_t *b = p;
  if (n > (SIZE_MAX - 8) / 4 * 3) return -E2BIG;
  size_t k = (n + 2) / 3 * 4;
  char *s = malloc(k + 1);
  if (!s) return -ENOMEM;
  size_t j = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)b[i] << 16;
    if (i + 1 < n) v |= (uint32_t)b[i + 1] << 8;
    if (i + 2 < n) v |= b[i + 2];
    s[j++] = b64chars[v >> 18 & 63];
    s[j++] = b64chars[v >> 12 & 63];
    s[j++] = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
    s[j++] = i + 2 < n ? b64chars[v & 63] : '=';
  }
  s[j] = '\0';
  *out = s;
  *outn = j;
  return 0;
}

static int b64val(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

int trun_b64_decode(const char *s, size_t n, uint8_t **out, size_t *outn, size_t *bad_at) {
  if (n % 4) {
    if (bad_at) *bad_at = n;
    return -EINVAL;
  }
  uint8_t *b = malloc(n / 4 * 3 + 1);
  if (!b) return -ENOMEM;
  size_t j = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; k++) {
      char c = s[i + (size_t)k];
      if (c == '=' && i + 4 == n && k >= 2 && (k == 3 || s[i + 3] == '=')) {
        v[k] = 0;
        pad++;
        continue;
      }
      v[k] = b64val(c);
      if (v[k] < 0 || pad) {
        free(b);
        if (bad_at) *bad_at = i + (size_t)k;
        return -EINVAL;
      }
    }
    uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    b[j++] = (uint8_t)(x >> 16);
    if (pad < 2) b[j++] = (uint8_t)(x >> 8);
    if (pad < 1) b[j++] = (uint8_t)x;
  }
  *out = b;
  *outn = j;
  return 0;
}
