/* The pickle VM / writer and the c10d rendezvous state codec (base/pickle.c, agent/rdzv/c10d_state.c):
 * - every state pickled by real torch 1.13 and 2.6 in tests/fixtures/rdzv (made by
 * tests/helpers/rdzv_pickle.py) decodes to the fields python saw (the .expect files), and re-encodes to the
 * very same bytes (not the -pN files: protocols 2, 3, 5, which the writer does not aim to reproduce);
 * - the spec's 1.13 state and the captured 2.11 state (shared/spec) decode, and re-encode byte for byte;
 * - malformed input fails with offset + opcode (table), every prefix and every one-byte change of a real
 *   pickle fails cleanly or decodes;
 * - states built in C round-trip in every layout. With TRUN_PICKLE_OUT=DIR set, those encodings are also
 *   written there (NAME.b64, NAME.expect, identical.txt) for tests/integration/62-rdzv-pickle.sh to load
 *   with real torch. Fixtures are found under $TRUN_REPO (default: the current directory). */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>

#include "agent/rdzv/c10d_state.h"
#include "base/pickle.h"
#include "unit.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

typedef struct {
  char *p;
  size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    ck_assert_int_ge(k, 0);
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    b->cap = (b->cap + (size_t)k + 1) * 2;
    b->p = realloc(b->p, b->cap);
    ck_assert_ptr_nonnull(b->p);
  }
}

static void fmt_time(sbuf *b, int64_t us) {
  trun_rdzv_tm t;
  trun_rdzv_us_to_tm(us, &t);
  sb_printf(b, "%04d-%02d-%02dT%02d:%02d:%02d.%06d", t.year, t.month, t.day, t.hour, t.minute, t.second,
            t.usec);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void sorted_nodes(sbuf *b, const char *what, const trun_rdzv_node *n, size_t k) {
  char **lines = calloc(k + 1, sizeof(*lines));
  for (size_t i = 0; i < k; i++) {
    sbuf l = {0};
    sb_printf(&l, "%s %s %lld %lld\n", what, n[i].addr, (long long)n[i].pid, (long long)n[i].local_id);
    lines[i] = l.p;
  }
  qsort(lines, k, sizeof(*lines), cmp_str);
  for (size_t i = 0; i < k; i++) {
    sb_printf(b, "%s", lines[i]);
    free(lines[i]);
  }
  free(lines);
}

/* The canonical text of tests/helpers/rdzv_pickle.py. */
static char *canon(const trun_rdzv_state *s, const trun_rdzv_layout *lay, const char *key) {
  sbuf b = {0};
  int any_time = s->has_deadline || s->n_heartbeats;
  sb_printf(&b, "layout key=%s redundancy=%d tz=%s\n", key, lay->redundancy,
            any_time && lay->tz == TRUN_RDZV_TZ_AWARE ? "aware" : "naive");
  sb_printf(&b, "round %lld\ncomplete %d\ndeadline ", (long long)s->round, s->complete);
  if (s->has_deadline)
    fmt_time(&b, s->deadline_us);
  else
    sb_printf(&b, "none");
  sb_printf(&b, "\nclosed %d\n", s->closed);
#define ND(n) (n).addr, (long long)(n).pid, (long long)(n).local_id
  for (size_t i = 0; i < s->n_participants; i++)
    sb_printf(&b, "participant %s %lld %lld %lld\n", ND(s->participants[i].node),
              (long long)s->participants[i].v);
  sorted_nodes(&b, "wait", s->wait_list, s->n_wait); /* sets: python's order is the hash's */
  sorted_nodes(&b, "redundant", s->redundancy_list, s->n_redundancy);
  for (size_t i = 0; i < s->n_heartbeats; i++) {
    sb_printf(&b, "heartbeat %s %lld %lld ", ND(s->heartbeats[i].node));
    fmt_time(&b, s->heartbeats[i].v);
    sb_printf(&b, "\n");
  }
#undef ND
  return b.p;
}

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  sbuf b = {0};
  b.cap = 4096;
  b.p = malloc(b.cap);
  size_t k;
  while ((k = fread(b.p + b.n, 1, b.cap - b.n - 1, f)) > 0) {
    b.n += k;
    if (b.cap - b.n < 2) b.p = realloc(b.p, b.cap *= 2);
  }
  fclose(f);
  b.p[b.n] = '\0';
  *n = b.n;
  return b.p;
}

static const char *fixdir(char *buf, size_t n) {
  const char *r = getenv("TRUN_REPO");
  snprintf(buf, n, "%s/tests/fixtures/rdzv", r ? r : ".");
  return buf;
}

static const char *ends(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0 ? s + a - b : NULL;
}

/* ---- real torch pickles ----------------------------------------------------------------------- */

START_TEST(fixtures_decode_and_reencode) {
  char dir[4096];
  DIR *d = opendir(fixdir(dir, sizeof(dir)));
  ck_assert_msg(d != NULL, "no %s (run from the repository root or set TRUN_REPO)", dir);
  struct dirent *de;
  int n = 0, identical = 0;
  while ((de = readdir(d))) {
    const char *dot = ends(de->d_name, ".b64");
    if (!dot) continue;
    char path[8192], name[1024];
    snprintf(name, sizeof(name), "%.*s", (int)(dot - de->d_name), de->d_name);
    size_t bn, en;
    snprintf(path, sizeof(path), "%s/%s.b64", dir, name);
    char *b64 = read_file(path, &bn);
    snprintf(path, sizeof(path), "%s/%s.expect", dir, name);
    char *expect = read_file(path, &en);
    ck_assert_ptr_nonnull(b64);
    ck_assert_ptr_nonnull(expect);
    trun_rdzv_state st;
    trun_rdzv_layout lay;
    trun_pickle_err err;
    int rc = trun_rdzv_state_decode(b64, bn, &st, &lay, &err);
    ck_assert_msg(rc == 0, "%s: %d %s", name, rc, err.msg);
    int is113 = strncmp(name, "t1.13-", 6) == 0;
    const char *key = is113 ? "fqdn" : "addr";
    if (lay.key != TRUN_RDZV_KEY_UNKNOWN)
      ck_assert_int_eq(lay.key, is113 ? TRUN_RDZV_KEY_FQDN : TRUN_RDZV_KEY_ADDR);
    char *got = canon(&st, &lay, key);
    ck_assert_msg(strcmp(got, expect) == 0, "%s: decoded\n%s\nwant\n%s", name, got, expect);
    ck_assert_int_eq(lay.redundancy, !is113 && !strstr(name, "noredundancy"));
    const char *p = strstr(name, "-p");
    int proto = p && p[2] >= '2' && p[2] <= '5' && !p[3] ? p[2] - '0' : 4;
    ck_assert_int_eq(lay.proto, proto);
    if (proto == 4) { /* torch's own bytes: ours must be the same */
      char *enc;
      size_t encn;
      ck_assert_int_eq(trun_rdzv_state_encode(&st, &lay, &enc, &encn), 0);
      ck_assert_msg(encn == bn && memcmp(enc, b64, bn) == 0, "%s: re-encoding differs from torch's bytes",
                    name);
      free(enc);
      identical++;
    }
    free(got);
    free(b64);
    free(expect);
    trun_rdzv_state_free(&st);
    n++;
  }
  closedir(d);
  ck_assert_int_ge(n, 33);
  ck_assert_int_ge(identical, 21);
}
END_TEST

/* docs/dev/torchrun-internals.md "The state": a 1.13 state read from a real store. */
static const char spec113[] =
    "gASVYQEAAAAAAACMN3RvcmNoLmRpc3RyaWJ1dGVkLmVsYXN0aWMucmVuZGV6dm91cy5keW5hbWljX3JlbmRlenZvdXOUjBBfUmVuZGV6"
    "dm91c1"
    "N0YXRllJOUKYGUfZQojAVyb3VuZJRLAIwIY29tcGxldGWUiIwIZGVhZGxpbmWUTowGY2xvc2VklImMDHBhcnRpY2lwYW50c5R9lChoAI"
    "wJX05v"
    "ZGVEZXNjlJOUKYGUfZQojARmcWRulIwJbG9jYWxob3N0lIwDcGlklE2TJYwIbG9jYWxfaWSUSwB1YksAaAwpgZR9lChoD4wJbG9jYWxo"
    "b3N0lG"
    "gRTZclaBJLAHViSwF1jAl3YWl0X2xpc3SUj5SMD2xhc3RfaGVhcnRiZWF0c5R9lChoDYwIZGF0ZXRpbWWUjAhkYXRldGltZZSTlEMKB+"
    "oLFgM3"
    "KAvAhJSFlFKUaBNoHEMKB+oLFgM3KArjcJSFlFKUdXViLg==";

/* shared/spec/captures/torchrun-2.11-c10d-state.txt */
static const char cap211[] =
    "gASVaAEAAAAAAACMN3RvcmNoLmRpc3RyaWJ1dGVkLmVsYXN0aWMucmVuZGV6dm91cy5keW5hbWljX3JlbmRlenZvdXOUjBBfUmVuZGV6"
    "dm91c1"
    "N0YXRllJOUKYGUfZQojAVyb3VuZJRLAIwIY29tcGxldGWUiIwIZGVhZGxpbmWUTowGY2xvc2VklImMDHBhcnRpY2lwYW50c5R9lGgAjA"
    "lfTm9k"
    "ZURlc2OUk5QpgZR9lCiMBGFkZHKUjAlsb2NhbGhvc3SUjANwaWSUTW8DjAhsb2NhbF9pZJRLAHViSwBzjAl3YWl0X2xpc3SUj5SMD3Jl"
    "ZHVuZG"
    "FuY3lfbGlzdJSPlIwPbGFzdF9oZWFydGJlYXRzlH2UaA2MCGRhdGV0aW1llIwIZGF0ZXRpbWWUk5RDCgfqCxYDNTsAKLOUaBmMCHRpbW"
    "V6b25l"
    "lJOUaBmMCXRpbWVkZWx0YZSTlEsASwBLAIeUUpSFlFKUhpRSlHN1Yi4=";

/* The spec's newest-layout example (hex): both heartbeats are one datetime object there. */
static const char spec_newest[] =
    "800495af010000000000008c37746f7263682e64697374726962757465642e656c61737469632e72656e64657a766f75"
    "732e64796e616d69635f72656e64657a766f7573948c105f52656e64657a766f757353746174659493942981947d9428"
    "8c05726f756e64944b018c08636f6d706c65746594898c08646561646c696e65948c086461746574696d65948c086461"
    "746574696d65949394430a07e901020304230a5bf59468088c0874696d657a6f6e6594939468088c0974696d6564656c"
    "74619493944b004b004b008794529485945294869452948c06636c6f73656494898c0c7061727469636970616e747394"
    "7d942868008c095f4e6f6465446573639493942981947d94288c0461646472948c0d6e6f6465302e6578616d706c6594"
    "8c03706964944d92108c086c6f63616c5f6964944b0075624b00681a2981947d9428681d8c0d6e6f6465312e6578616d"
    "706c6594681f4a7011010068204b0075624b00758c09776169745f6c697374948f948c0f726564756e64616e63795f6c"
    "697374948f948c0f6c6173745f68656172746265617473947d9428681b680a430a07e901020304050a5bf59468138694"
    "52946821682c7575622e";

static void check_reencode(const char *b64, const trun_rdzv_state *st, const trun_rdzv_layout *lay) {
  char *enc;
  size_t n;
  ck_assert_int_eq(trun_rdzv_state_encode(st, lay, &enc, &n), 0);
  ck_assert_str_eq(enc, b64);
  free(enc);
}

START_TEST(spec_113_state) {
  trun_rdzv_state st;
  trun_rdzv_layout lay;
  trun_pickle_err err;
  ck_assert_int_eq(trun_rdzv_state_decode(spec113, strlen(spec113), &st, &lay, &err), 0);
  ck_assert_int_eq(lay.key, TRUN_RDZV_KEY_FQDN);
  ck_assert_int_eq(lay.tz, TRUN_RDZV_TZ_NAIVE);
  ck_assert(!lay.redundancy);
  ck_assert_int_eq(lay.proto, 4);
  ck_assert_int_eq(st.round, 0);
  ck_assert(st.complete && !st.closed && !st.has_deadline);
  ck_assert_uint_eq(st.n_participants, 2);
  ck_assert_str_eq(st.participants[0].node.addr, "localhost");
  ck_assert_int_eq(st.participants[0].node.pid, 9619);
  ck_assert_int_eq(st.participants[1].node.pid, 9623);
  ck_assert_int_eq(st.participants[1].v, 1);
  ck_assert_uint_eq(st.n_wait, 0);
  ck_assert_uint_eq(st.n_heartbeats, 2);
  char *c = canon(&st, &lay, "fqdn");
  ck_assert_msg(strstr(c, "heartbeat localhost 9619 0 2026-11-22T03:55:40.770180\n") != NULL, "%s", c);
  free(c);
  check_reencode(spec113, &st, &lay);
  trun_rdzv_state_free(&st);
}
END_TEST

START_TEST(capture_211_state) {
  trun_rdzv_state st;
  trun_rdzv_layout lay;
  trun_pickle_err err;
  ck_assert_int_eq(trun_rdzv_state_decode(cap211, strlen(cap211), &st, &lay, &err), 0);
  ck_assert_int_eq(lay.key, TRUN_RDZV_KEY_ADDR);
  ck_assert_int_eq(lay.tz, TRUN_RDZV_TZ_AWARE);
  ck_assert(lay.redundancy);
  ck_assert_uint_eq(st.n_participants, 1);
  ck_assert_int_eq(st.participants[0].node.pid, 879);
  ck_assert_uint_eq(st.n_heartbeats, 1);
  check_reencode(cap211, &st, &lay);
  trun_rdzv_state_free(&st);
}
END_TEST

START_TEST(spec_newest_example) {
  uint8_t raw[1024];
  long n = unit_unhex(spec_newest, raw, sizeof(raw));
  ck_assert_int_eq(n, 442);
  trun_rdzv_state st;
  trun_rdzv_layout lay;
  trun_pickle_err err;
  ck_assert_int_eq(trun_rdzv_state_decode_pickle(raw, (size_t)n, &st, &lay, &err), 0);
  ck_assert_int_eq(st.round, 1);
  ck_assert(!st.complete && st.has_deadline);
  ck_assert_uint_eq(st.n_participants, 2);
  ck_assert_str_eq(st.participants[1].node.addr, "node1.example");
  ck_assert_int_eq(st.participants[1].node.pid, 70000);
  ck_assert_int_eq(st.deadline_us - st.heartbeats[0].v, 30000000);
  ck_assert_int_eq(st.heartbeats[0].v, st.heartbeats[1].v);
  trun_rdzv_tm t;
  trun_rdzv_us_to_tm(st.heartbeats[1].v, &t);
  ck_assert_int_eq(t.year, 2025);
  ck_assert_int_eq(t.usec, 678901);
  /* Not byte-identical by design: there both heartbeats are the same datetime object (a BINGET); a torch
   * agent's heartbeats are separate objects, and so are ours. Re-decoding ours gives the same fields. */
  uint8_t *enc;
  size_t en;
  ck_assert_int_eq(trun_rdzv_state_encode_pickle(&st, &lay, &enc, &en), 0);
  trun_rdzv_state st2;
  ck_assert_int_eq(trun_rdzv_state_decode_pickle(enc, en, &st2, NULL, &err), 0);
  char *a = canon(&st, &lay, "addr"), *b = canon(&st2, &lay, "addr");
  ck_assert_str_eq(a, b);
  free(a);
  free(b);
  free(enc);
  trun_rdzv_state_free(&st2);
  trun_rdzv_state_free(&st);
}
END_TEST

/* ---- malformed input -------------------------------------------------------------------------- */

typedef struct {
  const char *hex;
  int rc;
  const char *msg;
} bad_case;

static const bad_case bad_cases[] = {
    {"", -EINVAL, "pickle: offset 0: truncated: no STOP opcode"},
    {"8004ff", -EINVAL, "pickle: offset 2: opcode 0xff UNKNOWN: unknown opcode"},
    {"8004463132330a2e", -EINVAL, "opcode 0x46 FLOAT: opcode not supported"},
    {"800193", -EINVAL, "pickle: offset 0: opcode 0x80 PROTO: unsupported protocol 1"},
    {"80048c016193", -EINVAL, "pickle: offset 5: opcode 0x93 STACK_GLOBAL: stack underflow"},
    {"80048c05616263", -EINVAL,
     "pickle: offset 2: opcode 0x8c SHORT_BINUNICODE: truncated: the data needs 5 bytes"},
    {"800458ffffffff", -E2BIG, "pickle: offset 2: opcode 0x58 BINUNICODE: length 4294967295 over the limit"},
    {"80048dffffffffffffff7f", -E2BIG, "opcode 0x8d BINUNICODE8: length"},
    {"80044e6a00ff0000", -EINVAL, "pickle: offset 3: opcode 0x6a LONG_BINGET: memo index 65280 not set"},
    {"80044e6805", -EINVAL, "pickle: offset 3: opcode 0x68 BINGET: memo index 5 not set"},
    {"80044e72ffffffff", -E2BIG, "opcode 0x72 LONG_BINPUT: memo index 4294967295 out of range"},
    {"80044e4e2e", -EINVAL, "pickle: offset 4: opcode 0x2e STOP: 2 values left on the stack, want 1"},
    {"80044e2e00", -EINVAL, "pickle: offset 3: opcode 0x2e STOP: 1 bytes after STOP"},
    {"80044e61", -EINVAL, "pickle: offset 3: opcode 0x61 APPEND: stack underflow"},
    {"80044e4e61", -EINVAL, "pickle: offset 4: opcode 0x61 APPEND: target is a None, want a list"},
    {"80047d4e73", -EINVAL, "opcode 0x73 SETITEM: stack underflow"},
    {"80047d284e75", -EINVAL, "opcode 0x75 SETITEMS: odd number of items"},
    {"80044e75", -EINVAL, "opcode 0x75 SETITEMS: no MARK on the stack"},
    {"80044e29812e", -EINVAL, "opcode 0x81 NEWOBJ: callable is a None, want a global"},
    {"80044e4e62", -EINVAL, "opcode 0x62 BUILD: target is a None, want an object"},
    {"80048a09000000000000000000", -EINVAL, "opcode 0x8a LONG1: integer of 9 bytes does not fit in 64 bits"},
    {"8004950a000000000000004e2e", -EINVAL, "opcode 0x95 FRAME: truncated: frame of 10 bytes, 2 left"},
    {"80048c02c3284e", -EINVAL, "opcode 0x8c SHORT_BINUNICODE: string is not valid UTF-8"},
    {"8004635f636f646563730a656e636f64650a8c01618c036162638652", -EINVAL, "encode: want (str, 'latin1')"},
    {"80048c0161949494", -EINVAL, "pickle: offset 8: truncated: no STOP opcode"},
};

START_TEST(malformed_inputs) {
  for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
    const bad_case *c = &bad_cases[i];
    uint8_t raw[256];
    long n = unit_unhex(c->hex, raw, sizeof(raw));
    ck_assert_int_ge(n, 0);
    trun_pickle_doc *doc = (trun_pickle_doc *)1;
    trun_pickle_err err;
    int rc = trun_pickle_load(raw, (size_t)n, NULL, &doc, &err);
    ck_assert_msg(rc == c->rc, "case %zu (%s): rc %d want %d (%s)", i, c->hex, rc, c->rc, err.msg);
    ck_assert_ptr_null(doc);
    ck_assert_msg(strstr(err.msg, c->msg) != NULL, "case %zu: message '%s' lacks '%s'", i, err.msg, c->msg);
  }
  /* MARK nesting over the limit. */
  uint8_t deep[200] = {0x80, 0x04};
  memset(deep + 2, '(', 100);
  trun_pickle_doc *doc;
  trun_pickle_err err;
  ck_assert_int_eq(trun_pickle_load(deep, 102, NULL, &doc, &err), -E2BIG);
  ck_assert_str_eq(err.msg, "pickle: offset 66: opcode 0x28 MARK: MARKs nested deeper than 64");
  ck_assert_uint_eq(err.offset, 66);
  ck_assert_int_eq(err.opcode, 0x28);
  /* A list that contains itself loads (shared pointers), and the state decoder rejects it by shape. */
  uint8_t self[] = {0x80, 0x04, ']', 0x94, 'h', 0, 'a', '.'};
  ck_assert_int_eq(trun_pickle_load(self, sizeof(self), NULL, &doc, &err), 0);
  ck_assert_ptr_eq(doc->root->items[0], doc->root);
  trun_pickle_free(doc);
  trun_rdzv_state st;
  ck_assert_int_eq(trun_rdzv_state_decode_pickle(self, sizeof(self), &st, NULL, &err), -EINVAL);
  ck_assert_str_eq(
      err.msg, "pickle: offset 2: opcode 0x5d EMPTY_LIST: want a _RendezvousState object, got a plain value");
  /* Base64 errors. */
  ck_assert_int_eq(trun_rdzv_state_decode("gASV*AAA", 8, &st, NULL, &err), -EINVAL);
  ck_assert_str_eq(err.msg, "base64: offset 4: invalid character or padding");
  ck_assert_int_eq(trun_rdzv_state_decode("Y2FuaW1hZGFt", 12, &st, NULL, &err), -EINVAL); /* "canimadam" */
  ck_assert_msg(strstr(err.msg, "pickle: offset 0: opcode 0x63 GLOBAL:") != NULL, "%s", err.msg);
}
END_TEST

/* State-level type errors name the value's opcode and offset. */
START_TEST(state_type_errors) {
  trun_rdzv_state st;
  trun_pickle_err err;
  uint8_t raw[512];
  /* Patches of the 2.11 capture (offsets from its pickletools listing in shared/spec/captures). */
  uint8_t *dec;
  size_t dn;
  ck_assert_int_eq(trun_b64_decode(cap211, strlen(cap211), &dec, &dn, NULL), 0);
  memcpy(raw, dec, dn);
  free(dec);
  ck_assert_int_eq(raw[129], 'N'); /* deadline None */
  raw[129] = 0x88;                 /* deadline True */
  ck_assert_int_eq(trun_rdzv_state_decode_pickle(raw, dn, &st, NULL, &err), -EINVAL);
  ck_assert_str_eq(err.msg, "pickle: offset 129: opcode 0x88 NEWTRUE: want a datetime.datetime");
  raw[129] = 'N';
  raw[117] = 'N'; /* complete None */
  ck_assert_int_eq(trun_rdzv_state_decode_pickle(raw, dn, &st, NULL, &err), -EINVAL);
  ck_assert_str_eq(err.msg, "pickle: offset 117: opcode 0x4e NONE: complete is not a bool");
  raw[117] = 0x88;
  raw[305 + 4] = 13; /* month 13 in the heartbeat bytes */
  ck_assert_int_eq(trun_rdzv_state_decode_pickle(raw, dn, &st, NULL, &err), -EINVAL);
  ck_assert_str_eq(
      err.msg,
      "pickle: offset 305: opcode 0x43 SHORT_BINBYTES: datetime: invalid date/time bytes (or fold set)");
  raw[305 + 4] = 11;
  raw[352] = 1; /* timedelta(0, 1, 0): not UTC */
  ck_assert_int_eq(trun_rdzv_state_decode_pickle(raw, dn, &st, NULL, &err), -EINVAL);
  ck_assert_msg(strstr(err.msg, "timezone other than UTC") != NULL, "%s", err.msg);
  raw[352] = 0;
  ck_assert_int_eq(trun_rdzv_state_decode_pickle(raw, dn, &st, NULL, &err), 0);
  trun_rdzv_state_free(&st);
}
END_TEST

/* Every prefix and every single-byte change of real pickles: a clean error or a state, never a crash. */
START_TEST(prefixes_and_mutations) {
  const char *srcs[] = {spec113, cap211};
  for (int s = 0; s < 2; s++) {
    uint8_t *raw;
    size_t n;
    ck_assert_int_eq(trun_b64_decode(srcs[s], strlen(srcs[s]), &raw, &n, NULL), 0);
    trun_rdzv_state st;
    trun_pickle_err err;
    for (size_t k = 0; k < n; k++) {
      ck_assert_int_eq(trun_rdzv_state_decode_pickle(raw, k, &st, NULL, &err), -EINVAL);
      ck_assert_msg(strncmp(err.msg, "pickle: offset ", 15) == 0, "%s", err.msg);
    }
    uint8_t *mut = malloc(n);
    const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 'N', '(', 0x94, 'h', 0x93, 'b', '.'};
    for (size_t k = 0; k < n; k++) {
      for (size_t v = 0; v < sizeof(vals); v++) {
        memcpy(mut, raw, n);
        mut[k] = vals[v];
        int rc = trun_rdzv_state_decode_pickle(mut, n, &st, NULL, &err);
        if (rc == 0)
          trun_rdzv_state_free(&st);
        else
          ck_assert_msg(strncmp(err.msg, "pickle: offset ", 15) == 0, "%s", err.msg);
      }
    }
    free(mut);
    free(raw);
  }
}
END_TEST

/* ---- states built in C ------------------------------------------------------------------------ */

typedef struct {
  const char *name;
  trun_rdzv_layout lay;
  int shape;
  int identical; /* python's re-pickle of the loaded object must give our bytes (sets of <= 1 item) */
} c_case;

static const c_case c_cases[] = {
    {"c-fqdn-naive-empty", {TRUN_RDZV_KEY_FQDN, false, TRUN_RDZV_TZ_NAIVE, 4}, 0, 1},
    {"c-fqdn-naive-two", {TRUN_RDZV_KEY_FQDN, false, TRUN_RDZV_TZ_NAIVE, 4}, 1, 1},
    {"c-fqdn-naive-wait", {TRUN_RDZV_KEY_FQDN, false, TRUN_RDZV_TZ_NAIVE, 4}, 2, 1},
    {"c-fqdn-naive-many", {TRUN_RDZV_KEY_FQDN, false, TRUN_RDZV_TZ_NAIVE, 4}, 3, 1},
    {"c-addr-naive-two", {TRUN_RDZV_KEY_ADDR, false, TRUN_RDZV_TZ_NAIVE, 4}, 1, 1},
    {"c-addr-naive-red-wait", {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_NAIVE, 4}, 2, 1},
    {"c-addr-aware-empty", {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4}, 0, 1},
    {"c-addr-aware-two", {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4}, 1, 1},
    {"c-addr-aware-wait", {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4}, 2, 1},
    {"c-addr-aware-many", {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4}, 3, 1},
    {"c-addr-aware-sets", {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4}, 4, 0},
    {"c-addr-aware-p5", {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 5}, 1, 0},
};

/* shape 0 empty, 1 two nodes done, 2 wait + redundancy (when the layout has it) + deadline + big round,
 * 3 3000 participants (several frames, batches), 4 sets of 3. Strings / times are allocated by the test. */
static void build(trun_rdzv_state *st, int shape, const trun_rdzv_layout *lay) {
  memset(st, 0, sizeof(*st));
  const int64_t t0 = INT64_C(1764000000123456);
  size_t np = shape == 0 ? 0 : shape == 3 ? 3000 : 2;
  size_t nw = shape == 2 ? 1 : shape == 4 ? 3 : 0;
  size_t nr = lay->redundancy ? nw : 0;
  st->round = shape == 2 ? INT64_C(-5000000000) : (int64_t)shape;
  st->complete = shape == 1;
  st->closed = shape == 4;
  st->has_deadline = shape == 2 || shape == 3;
  st->deadline_us = t0 + 30000000;
  st->participants = calloc(np + 1, sizeof(trun_rdzv_entry));
  st->heartbeats = calloc(np + nw + nr + 1, sizeof(trun_rdzv_entry));
  st->wait_list = calloc(nw + 1, sizeof(trun_rdzv_node));
  st->redundancy_list = calloc(nr + 1, sizeof(trun_rdzv_node));
  char buf[128];
  for (size_t i = 0; i < np; i++) {
    snprintf(buf, sizeof(buf), shape == 3 ? "worker-%05zu.example" : "nodé%zu", i);
    trun_rdzv_node n = {strdup(buf), 70000 + (int64_t)i * 3, (int64_t)(i % 2)};
    st->participants[i] = (trun_rdzv_entry){n, shape == 1 ? (int64_t)i : 0};
    st->heartbeats[st->n_heartbeats++] = (trun_rdzv_entry){{strdup(buf), n.pid, n.local_id}, t0 + (int64_t)i};
  }
  st->n_participants = np;
  for (size_t i = 0; i < nw + nr; i++) {
    snprintf(buf, sizeof(buf), "spare%zu", i);
    trun_rdzv_node n = {strdup(buf), 300 + (int64_t)i, 0};
    if (i < nw)
      st->wait_list[st->n_wait++] = n;
    else
      st->redundancy_list[st->n_redundancy++] = n;
    st->heartbeats[st->n_heartbeats++] =
        (trun_rdzv_entry){{strdup(buf), n.pid, 0}, t0 - 1000000 * (int64_t)i};
  }
}

START_TEST(c_states_round_trip) {
  const char *out = getenv("TRUN_PICKLE_OUT");
  FILE *ident = NULL;
  if (out) {
    char p[4096];
    snprintf(p, sizeof(p), "%s/identical.txt", out);
    ident = fopen(p, "w");
    ck_assert_ptr_nonnull(ident);
  }
  for (size_t i = 0; i < sizeof(c_cases) / sizeof(c_cases[0]); i++) {
    const c_case *c = &c_cases[i];
    trun_rdzv_state st, st2;
    trun_rdzv_layout lay2;
    trun_pickle_err err;
    build(&st, c->shape, &c->lay);
    char *b64;
    size_t n;
    ck_assert_int_eq(trun_rdzv_state_encode(&st, &c->lay, &b64, &n), 0);
    ck_assert_uint_eq(n, strlen(b64));
    ck_assert_msg(trun_rdzv_state_decode(b64, n, &st2, &lay2, &err) == 0, "%s: %s", c->name, err.msg);
    const char *key = c->lay.key == TRUN_RDZV_KEY_FQDN ? "fqdn" : "addr";
    char *a = canon(&st, &c->lay, key), *b = canon(&st2, &lay2, key);
    ck_assert_msg(strcmp(a, b) == 0, "%s:\n%s\nvs\n%s", c->name, a, b);
    ck_assert_int_eq(lay2.redundancy, c->lay.redundancy);
    ck_assert_int_eq(lay2.proto, c->lay.proto);
    if (c->shape) ck_assert_int_eq(lay2.key, c->lay.key);
    if (c->shape) ck_assert_int_eq(lay2.tz, c->lay.tz);
    char *b64b;
    size_t nb;
    ck_assert_int_eq(trun_rdzv_state_encode(&st2, &lay2, &b64b, &nb), 0);
    ck_assert_str_eq(b64b, b64);
    if (out) {
      char p[4096];
      snprintf(p, sizeof(p), "%s/%s.b64", out, c->name);
      FILE *f = fopen(p, "w");
      ck_assert_ptr_nonnull(f);
      fwrite(b64, 1, n, f);
      fclose(f);
      snprintf(p, sizeof(p), "%s/%s.expect", out, c->name);
      f = fopen(p, "w");
      ck_assert_ptr_nonnull(f);
      fputs(a, f);
      fclose(f);
      if (c->identical) fprintf(ident, "%s\n", c->name);
    }
    free(a);
    free(b);
    free(b64);
    free(b64b);
    trun_rdzv_state_free(&st);
    trun_rdzv_state_free(&st2);
  }
  if (ident) fclose(ident);
}
END_TEST

START_TEST(encoder_rejects) {
  trun_rdzv_layout lay = {TRUN_RDZV_KEY_ADDR, false, TRUN_RDZV_TZ_AWARE, 4};
  trun_rdzv_state st;
  build(&st, 2, &(trun_rdzv_layout){TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4});
  char *b64;
  size_t n;
  ck_assert_int_eq(trun_rdzv_state_encode(&st, &lay, &b64, &n), -EINVAL); /* redundancy not in layout */
  lay.redundancy = true;
  lay.proto = 3;
  ck_assert_int_eq(trun_rdzv_state_encode(&st, &lay, &b64, &n), -EINVAL);
  lay.proto = 4;
  st.deadline_us = INT64_MAX / 2;
  ck_assert_int_eq(trun_rdzv_state_encode(&st, &lay, &b64, &n), -EINVAL);
  trun_rdzv_state_free(&st);
}
END_TEST

START_TEST(base64_and_time) {
  const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  const char *want[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (int i = 0; i < 7; i++) {
    char *e;
    size_t n;
    ck_assert_int_eq(trun_b64_encode(plain[i], strlen(plain[i]), &e, &n), 0);
    ck_assert_str_eq(e, want[i]);
    uint8_t *d;
    size_t dn;
    ck_assert_int_eq(trun_b64_decode(e, n, &d, &dn, NULL), 0);
    ck_assert_uint_eq(dn, strlen(plain[i]));
    ck_assert(memcmp(d, plain[i], dn) == 0);
    free(d);
    free(e);
  }
  uint8_t *d;
  size_t dn, bad;
  ck_assert_int_eq(trun_b64_decode("Zg=a", 4, &d, &dn, &bad), -EINVAL);
  ck_assert_int_eq(trun_b64_decode("Z===", 4, &d, &dn, &bad), -EINVAL);
  ck_assert_int_eq(trun_b64_decode("Zg==Zg==", 8, &d, &dn, &bad), -EINVAL);
  ck_assert_uint_eq(bad, 2);
  ck_assert_int_eq(trun_b64_decode("Zm9", 3, &d, &dn, &bad), -EINVAL);
  trun_rdzv_tm t = {1, 1, 1, 0, 0, 0, 0}, u;
  trun_rdzv_us_to_tm(trun_rdzv_tm_to_us(&t), &u);
  ck_assert(memcmp(&t, &u, sizeof(t)) == 0);
  t = (trun_rdzv_tm){2024, 2, 29, 23, 59, 59, 999999};
  trun_rdzv_us_to_tm(trun_rdzv_tm_to_us(&t), &u);
  ck_assert(memcmp(&t, &u, sizeof(t)) == 0);
  t = (trun_rdzv_tm){1970, 1, 1, 0, 0, 1, 5};
  ck_assert_int_eq(trun_rdzv_tm_to_us(&t), 1000005);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pickle");
  TCase *tc = tcase_create("pickle");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, fixtures_decode_and_reencode);
  tcase_add_test(tc, spec_113_state);
  tcase_add_test(tc, capture_211_state);
  tcase_add_test(tc, spec_newest_example);
  tcase_add_test(tc, malformed_inputs);
  tcase_add_test(tc, state_type_errors);
  tcase_add_test(tc, prefixes_and_mutations);
  tcase_add_test(tc, c_states_round_trip);
  tcase_add_test(tc, encoder_rejects);
  tcase_add_test(tc, base64_and_time);
  suite_add_tcase(s, tc);
  return unit_run(s);
}
