/* Unit tests for agent/proc/report.c: error files written by real torch (1.13 and 2.6), malformed error
 * files, root-cause selection, the failure banner against real torchrun 1.13 output, the store JSON, signal
 * names and the parent error file. Fixtures: $TRUN_REPO/tests/fixtures/errfiles (TRUN_REPO defaults to ".").
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "report.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static char *fixture(const char *name) {
  const char *repo = getenv("TRUN_REPO");
  char *p = NULL;
  ck_assert_int_ge(asprintf(&p, "%s/tests/fixtures/errfiles/%s", repo && *repo ? repo : ".", name), 0);
  return p;
}

static char *slurp(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  ck_assert_msg(fp != NULL, "cannot open %s (set TRUN_REPO to the repository root)", path);
  char *buf = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&buf, &n);
  ck_assert_ptr_nonnull(m);
  char tmp[4096];
  size_t k;
  while ((k = fread(tmp, 1, sizeof(tmp), fp)) > 0) fwrite(tmp, 1, k, m);
  fclose(fp);
  fclose(m);
  if (len) *len = n;
  return buf;
}

/* A fresh private directory per test (each test runs in its own process under CK_FORK). */
static char *tmpdir(void) {
  const char *t = getenv("TMPDIR");
  char *d = NULL;
  ck_assert_int_ge(asprintf(&d, "%s/test_report.XXXXXX", t && *t ? t : "/tmp"), 0);
  ck_assert_ptr_nonnull(mkdtemp(d));
  return d;
}

static char *write_tmp(const char *dir, const char *name, const void *data, size_t len) {
  char *p = NULL;
  ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
  FILE *fp = fopen(p, "wb");
  ck_assert_ptr_nonnull(fp);
  ck_assert_uint_eq(fwrite(data, 1, len, fp), len);
  fclose(fp);
  return p;
}

static void rm_rf(char *dir) {
  char *cmd = NULL;
  if (asprintf(&cmd, "rm -rf '%s'", dir) >= 0) {
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    free(cmd);
  }
  free(dir);
}

/* Prints the banner into memory. */
static char *banner(const char *script, const trun_failure *fs, size_t n) {
  char *s = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&s, &len);
  ck_assert_ptr_nonnull(m);
  trun_report_print(m, script, fs, n);
  fclose(m);
  return s;
}

/* Local time "YYYY-MM-DD_HH:MM:SS" → unix seconds (the inverse of the banner's time line). */
static double local_ts(const char *when) {
  struct tm tm = {0};
  const char *end = strptime(when, "%Y-%m-%d_%H:%M:%S", &tm);
  ck_assert_msg(end && *end == '\0', "bad time %s", when);
  tm.tm_isdst = -1;
  return (double)mktime(&tm);
}

/* The lines of one "### case: NAME:" of torchrun113-banner.txt after the "ChildFailedError: " line, joined
 * with "\n" and ending in "\n" (the form trun_report_print writes). */
static char *real_banner(const char *name) {
  char *path = fixture("torchrun113-banner.txt");
  char *all = slurp(path, NULL);
  free(path);
  char *hdr = NULL;
  ck_assert_int_ge(asprintf(&hdr, "### case: %s:", name), 0);
  char *p = strstr(all, hdr);
  ck_assert_msg(p != NULL, "no case %s in the banner fixture", name);
  free(hdr);
  p = strstr(p, "ChildFailedError: \n");
  ck_assert_ptr_nonnull(p);
  p += strlen("ChildFailedError: \n");
  char *end = strstr(p, "\n### case:");
  size_t len = end ? (size_t)(end - p) + 1 : strlen(p);
  char *out = strndup(p, len);
  if (out[len - 1] != '\n') { /* last case at EOF without a newline */
    char *o2 = NULL;
    ck_assert_int_ge(asprintf(&o2, "%s\n", out), 0);
    free(out);
    out = o2;
  }
  free(all);
  return out;
}

/* The traceback text shown in a real banner: the "  traceback : " line and its continuation lines up to the
 * closing rule, with torch's two-space indentation removed. */
static char *traceback_of(const char *b) {
  const char *p = strstr(b, "  traceback : ");
  ck_assert_ptr_nonnull(p);
  p += strlen("  traceback : ");
  const char *end = strstr(p, "\n====");
  ck_assert_ptr_nonnull(end);
  char *out = calloc(1, (size_t)(end - p) + 1);
  char *o = out;
  for (const char *q = p; q < end; q++) {
    *o++ = *q;
    if (*q == '\n') {
      ck_assert_msg(q[1] == ' ' && q[2] == ' ', "traceback continuation not indented");
      q += 2;
    }
  }
  return out;
}

/* The line starting with prefix in s (without its newline), or NULL. */
static char *line_with(const char *s, const char *prefix) {
  for (const char *p = s; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (strncmp(p, prefix, strlen(prefix)) == 0) return strndup(p, len);
    p = nl ? nl + 1 : NULL;
  }
  return NULL;
}

static size_t count_lines(const char *s) {
  size_t n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* ---- reading error files ---------------------------------------------------------------------- */

static void check_valueerror_fixture(const char *name, double ts) {
  char *path = fixture(name);
  trun_failure f = {.timestamp = 42.0};
  ck_assert_int_eq(trun_errfile_read(path, &f), 0);
  ck_assert_str_eq(f.message, "ValueError: boom");
  ck_assert_ptr_nonnull(f.traceback);
  ck_assert_msg(strncmp(f.traceback, "Traceback (most recent call last):\n", 35) == 0, "%s", f.traceback);
  const char *tail = "    raise ValueError(\"boom\")\nValueError: boom\n";
  ck_assert_str_eq(f.traceback + strlen(f.traceback) - strlen(tail), tail);
  ck_assert_double_eq(f.timestamp, ts);
  ck_assert_str_eq(f.error_file, path);
  trun_failure_free(&f);
  free(path);
}

START_TEST(test_read_torch113) { check_valueerror_fixture("torch113-valueerror.json", 1795326329.0); }
END_TEST

START_TEST(test_read_torch26) { check_valueerror_fixture("torch26-valueerror.json", 1795326334.0); }
END_TEST

START_TEST(test_read_parent_copy) {
  /* torchrun's own copy (errorCode added) reads like the child's file */
  char *path = fixture("torch113-parent-exit1.json");
  trun_failure f = {0};
  ck_assert_int_eq(trun_errfile_read(path, &f), 0);
  ck_assert_str_eq(f.message, "ValueError: boom");
  ck_assert_double_eq(f.timestamp, 1795326329.0);
  trun_failure_free(&f);
  free(path);
}
END_TEST

START_TEST(test_read_string_layout) {
  char *d = tmpdir();
  const char *a = "{\"message\": \"RuntimeError: oops\", \"timestamp\": 1700000123}";
  const char *b = "{\"message\": \"plain\", \"timestamp\": \"1700000456\"}";
  const char *c = "{\"message\": \"no time\"}";
  char *pa = write_tmp(d, "a.json", a, strlen(a)), *pb = write_tmp(d, "b.json", b, strlen(b));
  char *pc = write_tmp(d, "c.json", c, strlen(c));
  trun_failure f = {.timestamp = 7.5, .message = strdup("old"), .error_file = strdup("old")};
  ck_assert_int_eq(trun_errfile_read(pa, &f), 0);
  ck_assert_str_eq(f.message, "RuntimeError: oops");
  ck_assert_ptr_null(f.traceback);
  ck_assert_double_eq(f.timestamp, 1700000123.0);
  ck_assert_str_eq(f.error_file, pa);
  ck_assert_int_eq(trun_errfile_read(pb, &f), 0);
  ck_assert_str_eq(f.message, "plain");
  ck_assert_double_eq(f.timestamp, 1700000456.0);
  f.timestamp = 9.25; /* no timestamp in the file: the detection time stays */
  ck_assert_int_eq(trun_errfile_read(pc, &f), 0);
  ck_assert_str_eq(f.message, "no time");
  ck_assert_double_eq(f.timestamp, 9.25);
  trun_failure_free(&f);
  free(pa), free(pb), free(pc);
  rm_rf(d);
}
END_TEST

START_TEST(test_read_object_without_text) {
  /* a dict message with neither text nor callstack is accepted: the banner falls back to the default */
  char *d = tmpdir();
  const char *j = "{\"message\": {\"extraInfo\": {\"timestamp\": \"12\"}, \"errorCode\": 3}}";
  char *p = write_tmp(d, "e.json", j, strlen(j));
  trun_failure f = {0};
  ck_assert_int_eq(trun_errfile_read(p, &f), 0);
  ck_assert_ptr_null(f.message);
  ck_assert_ptr_null(f.traceback);
  ck_assert_double_eq(f.timestamp, 12.0);
  trun_failure_free(&f);
  free(p);
  rm_rf(d);
}
END_TEST

START_TEST(test_read_missing) {
  char *d = tmpdir();
  char *p = NULL;
  ck_assert_int_ge(asprintf(&p, "%s/nope.json", d), 0);
  trun_failure f = {.timestamp = 5.0};
  ck_assert_int_eq(trun_errfile_read(p, &f), -ENOENT);
  ck_assert_double_eq(f.timestamp, 5.0);
  ck_assert_ptr_null(f.message);
  ck_assert_ptr_null(f.error_file);
  free(p);
  rm_rf(d);
}
END_TEST

static const char *const malformed[] = {
    "",
    "not json",
    "[1, 2, 3]",
    "\"a string\"",
    "null",
    "{}",
    "{\"message\": 5}",
    "{\"message\": null}",
    "{\"message\": [\"x\"]}",
    "{\"message\": {\"message\": 5}}",
    "{\"message\": {\"message\": {\"nested\": 1}}}",
    "{\"message\": {\"message\": \"m\", \"extraInfo\": \"x\"}}",
    "{\"message\": {\"message\": \"m\", \"extraInfo\": {\"py_callstack\": []}}}",
    "{\"message\": {\"message\": \"m\", \"extraInfo\": {\"timestamp\": \"abc\"}}}",
    "{\"message\": {\"message\": \"m\", \"extraInfo\": {\"timestamp\": \"\"}}}",
    "{\"message\": {\"message\": \"m\", \"extraInfo\": {\"timestamp\": \"12x\"}}}",
    "{\"message\": {\"message\": \"m\", \"extraInfo\": {\"timestamp\": {}}}}",
    "{\"message\": {\"message\": \"m\", \"extraInfo\": {\"timestamp\": \"nan\"}}}",
    "{\"message\": {\"message\": \"m\", \"errorCode\": \"1\"}}",
    "{\"message\": \"m\", \"timestamp\": [1]}",
    "{\"message\": \"m\", \"timestamp\": \"inf\"}",
    "{\"message\": {\"message\": \"m\"}",    /* truncated */
    "{\"message\": \"m\"} trailing",         /* garbage after the document */
    "{\"message\": \"\xff\xfe bad utf-8\"}", /* invalid UTF-8 */
    "{\"message\": \"nul \\u0000 inside\"}",
};

START_TEST(test_read_malformed) {
  char *d = tmpdir();
  const char *s = malformed[_i];
  char *p = write_tmp(d, "bad.json", s, strlen(s));
  trun_failure f = {.timestamp = 3.0, .message = strdup("keep")};
  ck_assert_msg(trun_errfile_read(p, &f) == -EBADMSG, "not rejected: %s", s);
  ck_assert_str_eq(f.message, "keep");
  ck_assert_ptr_null(f.traceback);
  ck_assert_ptr_null(f.error_file);
  ck_assert_double_eq(f.timestamp, 3.0);
  trun_failure_free(&f);
  free(p);
  rm_rf(d);
}
END_TEST

START_TEST(test_read_huge_nesting) {
  char *d = tmpdir();
  size_t depth = 200000;
  const char *pre = "{\"message\": ";
  char *s = malloc(strlen(pre) + 2 * depth + 2);
  strcpy(s, pre);
  size_t n = strlen(pre);
  for (size_t i = 0; i < depth; i++) s[n++] = '[';
  for (size_t i = 0; i < depth; i++) s[n++] = ']';
  s[n++] = '}';
  char *p1 = write_tmp(d, "deep1.json", s, n);
  char *p2 = write_tmp(d, "deep2.json", s + strlen(pre), 2 * depth); /* a bare deep array */
  for (size_t i = 0; i < depth; i++) s[strlen(pre) + i] = '{';       /* unterminated deep objects */
  char *p3 = write_tmp(d, "deep3.json", s, strlen(pre) + depth);
  trun_failure f = {0};
  ck_assert_int_eq(trun_errfile_read(p1, &f), -EBADMSG);
  ck_assert_int_eq(trun_errfile_read(p2, &f), -EBADMSG);
  ck_assert_int_eq(trun_errfile_read(p3, &f), -EBADMSG);
  ck_assert_int_eq(trun_failure_from_json(s, n, &f), -EBADMSG);
  free(s), free(p1), free(p2), free(p3);
  rm_rf(d);
}
END_TEST

START_TEST(test_read_oversized_and_special) {
  char *d = tmpdir();
  /* valid JSON, but over the 4 MiB cap */
  size_t big = (size_t)5 << 20;
  char *s = malloc(big);
  memset(s, 'a', big);
  memcpy(s, "{\"message\": \"", 13);
  memcpy(s + big - 2, "\"}", 2);
  char *p = write_tmp(d, "big.json", s, big);
  trun_failure f = {0};
  ck_assert_int_eq(trun_errfile_read(p, &f), -EBADMSG);
  ck_assert_ptr_null(f.message);
  /* a directory and a FIFO are not error files (and reading must not block) */
  ck_assert_int_eq(trun_errfile_read(d, &f), -EBADMSG);
  char *fifo = NULL;
  ck_assert_int_ge(asprintf(&fifo, "%s/fifo", d), 0);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_int_eq(trun_errfile_read(fifo, &f), -EBADMSG);
  /* just under the cap is fine */
  size_t ok = ((size_t)4 << 20) - 16;
  memcpy(s + ok - 2, "\"}", 2);
  char *p2 = write_tmp(d, "ok.json", s, ok);
  ck_assert_int_eq(trun_errfile_read(p2, &f), 0);
  ck_assert_uint_eq(strlen(f.message), ok - 15);
  trun_failure_free(&f);
  free(s), free(p), free(p2), free(fifo);
  rm_rf(d);
}
END_TEST

/* ---- root cause ------------------------------------------------------------------------------- */

START_TEST(test_root) {
  trun_failure fs[4] = {
      {.global_rank = 0, .timestamp = 30.0},
      {.global_rank = 1, .timestamp = 10.0, .torn_down = 1},
      {.global_rank = 2, .timestamp = 20.0},
      {.global_rank = 3, .timestamp = 20.0},
  };
  ck_assert_int_eq(trun_failure_root(fs, 0), -1);
  ck_assert_int_eq(trun_failure_root(NULL, 3), -1);
  ck_assert_int_eq(trun_failure_root(fs, 1), 0);
  ck_assert_int_eq(trun_failure_root(fs, 4), 2); /* torn-down 1 is earlier but not a cause; tie → first */
  fs[1].torn_down = 0;
  ck_assert_int_eq(trun_failure_root(fs, 4), 1);
  for (int i = 0; i < 4; i++) fs[i].torn_down = 1; /* all torn down: smallest overall */
  ck_assert_int_eq(trun_failure_root(fs, 4), 1);
  fs[3].torn_down = 0;
  ck_assert_int_eq(trun_failure_root(fs, 4), 3);
}
END_TEST

/* ---- banner vs real torchrun 1.13 ------------------------------------------------------------- */

START_TEST(test_banner_real_exit) {
  char *want = real_banner("exit");
  trun_failure f = {.global_rank = 0, .local_rank = 0, .pid = 20507, .exit_code = 3, .host = "localhost"};
  f.timestamp = local_ts("2026-11-22_05:46:09") + 0.75; /* fractions are not shown */
  char *got = banner("fail.py", &f, 1);
  ck_assert_str_eq(got, want);
  free(got), free(want);
}
END_TEST

START_TEST(test_banner_real_segv) {
  char *want = real_banner("segv");
  trun_failure f = {.global_rank = 0, .local_rank = 0, .pid = 20606, .exit_code = -11, .host = "localhost"};
  f.timestamp = local_ts("2026-11-22_05:46:15");
  char *got = banner("fail.py", &f, 1);
  ck_assert_str_eq(got, want);
  /* rule width is the longest line (55), not 60 */
  ck_assert_uint_eq(strcspn(got, "\n"), 55);
  free(got), free(want);
}
END_TEST

START_TEST(test_banner_real_exc) {
  char *want = real_banner("exc");
  char *tb = traceback_of(want);
  char *ef = line_with(want, "  error_file: ");
  ck_assert_ptr_nonnull(ef);
  trun_failure f = {.global_rank = 1, .local_rank = 1, .pid = 20440, .exit_code = 1, .host = "localhost"};
  f.timestamp = local_ts("2026-11-22_05:46:02");
  f.error_file = ef + strlen("  error_file: ");
  f.message = "ValueError: boom";
  f.traceback = tb;
  char *got = banner("fail.py", &f, 1);
  ck_assert_str_eq(got, want); /* includes the 60 cap and the "  " line after the trailing newline */
  free(got), free(want), free(tb), free(ef);
}
END_TEST

START_TEST(test_banner_real_both) {
  char *want = real_banner("both");
  double ts = local_ts("2026-11-22_05:46:30");
  trun_failure fs[2] = {
      {.global_rank = 0, .local_rank = 0, .pid = 20764, .exit_code = 3, .host = "localhost", .timestamp = ts},
      {.global_rank = 1, .local_rank = 1, .pid = 20765, .exit_code = 4, .host = "localhost", .timestamp = ts},
  };
  char *got = banner("fail.py", fs, 2);
  ck_assert_str_eq(got, want);
  free(got), free(want);
}
END_TEST

START_TEST(test_banner_trun_extras) {
  /* three failures; the root is in the middle; torn-down and log lines; a short banner's width */
  trun_failure fs[3] = {
      {.global_rank = 4,
       .local_rank = 0,
       .pid = 100,
       .exit_code = -15,
       .host = "h",
       .timestamp = 50,
       .torn_down = 1},
      {.global_rank = 5,
       .local_rank = 1,
       .pid = 101,
       .exit_code = 2,
       .host = "h",
       .timestamp = 40,
       .log_path = "/l/5/stderr.log"},
      {.global_rank = 6,
       .local_rank = 2,
       .pid = 102,
       .exit_code = -9,
       .host = "h",
       .timestamp = 45,
       .torn_down = 1},
  };
  char *got = banner("t.py", fs, 3);
  char when[32];
  time_t t = 40;
  struct tm tm;
  strftime(when, sizeof(when), "%Y-%m-%d_%H:%M:%S", localtime_r(&t, &tm));
  const char *rule = "============================================================\n";
  ck_assert_msg(strncmp(got, rule, strlen(rule)) == 0, "%s", got); /* default message > 60 chars */
  char *root = strstr(got, "Root Cause (first observed failure):\n[1]:\n");
  ck_assert_ptr_nonnull(root);
  char *exp_root = NULL;
  ck_assert_int_ge(
      asprintf(&exp_root,
               "Root Cause (first observed failure):\n"
               "[1]:\n"
               "  time      : %s\n"
               "  host      : h\n"
               "  rank      : 5 (local_rank: 1)\n"
               "  exitcode  : 2 (pid: 101)\n"
               "  error_file: <N/A>\n"
               "  log       : /l/5/stderr.log\n"
               "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
               "%s",
               when, rule),
      0);
  ck_assert_str_eq(root, exp_root);
  char *failures = strstr(got, "Failures:\n[0]:\n");
  ck_assert_ptr_nonnull(failures);
  ck_assert_ptr_nonnull(strstr(failures,
                               "  exitcode  : -15 (pid: 100) (terminated by trun after the first failure)\n"
                               "  error_file: <N/A>\n"
                               "  traceback : Signal 15 (SIGTERM) received by PID 100\n"
                               "[2]:\n"));
  ck_assert_ptr_nonnull(strstr(failures,
                               "  exitcode  : -9 (pid: 102) (terminated by trun after the first failure)\n"
                               "  error_file: <N/A>\n"
                               "  traceback : Signal 9 (SIGKILL) received by PID 102\n"
                               "------------"));
  ck_assert_uint_eq(count_lines(got), 1 + 1 + 1 + 1 + 7 + 7 + 1 + 1 + 8 + 1);
  free(exp_root), free(got);

  /* short lines: the width is the longest line, counted in characters (UTF-8) */
  trun_failure s = {
      .global_rank = 0, .pid = 7, .exit_code = 1, .host = "n", .message = "E: \xc3\xa9t\xc3\xa9"};
  char *g2 = banner("a.py", &s, 1);
  ck_assert_uint_eq(strcspn(g2, "\n"), strlen("  time      : YYYY-MM-DD_HH:MM:SS")); /* the longest: 33 */
  ck_assert_ptr_nonnull(strstr(g2, "  traceback : E: \xc3\xa9t\xc3\xa9\n"));
  ck_assert_ptr_nonnull(strstr(g2, "  error_file: <N/A>\n"));
  ck_assert_ptr_nonnull(strstr(g2, "  <NO_OTHER_FAILURES>\n"));
  free(g2);

  /* a multi-byte traceback line longer than 60 bytes but shorter in characters */
  char tbline[80] = "";
  for (int i = 0; i < 20; i++) strcat(tbline, "\xc3\xa9"); /* 20 chars, 40 bytes */
  s.traceback = tbline;
  s.message = NULL;
  g2 = banner("a.py", &s, 1);
  ck_assert_uint_eq(strcspn(g2, "\n"), strlen("  traceback : ") + 20);
  free(g2);

  /* nothing to print */
  g2 = banner("a.py", fs, 0);
  ck_assert_str_eq(g2, "");
  free(g2);
}
END_TEST

START_TEST(test_banner_from_errfile) {
  /* error file read from the real 1.13 fixture, then printed: the traceback block is indented */
  char *path = fixture("torch113-valueerror.json");
  trun_failure f = {.global_rank = 3, .local_rank = 1, .pid = 99, .exit_code = 1};
  ck_assert_int_eq(trun_errfile_read(path, &f), 0);
  f.host = strdup("node-1.example");
  char *got = banner("train.py", &f, 1);
  ck_assert_ptr_nonnull(strstr(got, "  traceback : Traceback (most recent call last):\n    File \""));
  ck_assert_ptr_nonnull(strstr(got, "\n      raise ValueError(\"boom\")\n  ValueError: boom\n  \n====="));
  char *ef = NULL;
  ck_assert_int_ge(asprintf(&ef, "  error_file: %s\n", path), 0);
  ck_assert_ptr_nonnull(strstr(got, ef));
  free(ef), free(got), free(path);
  trun_failure_free(&f);
}
END_TEST

/* ---- store JSON ------------------------------------------------------------------------------- */

static void assert_str_or_null(const char *a, const char *b) {
  if (!a || !b)
    ck_assert_ptr_eq(a, b);
  else
    ck_assert_str_eq(a, b);
}

static void assert_same(const trun_failure *a, const trun_failure *b) {
  ck_assert_int_eq(a->global_rank, b->global_rank);
  ck_assert_int_eq(a->local_rank, b->local_rank);
  ck_assert_int_eq(a->group_rank, b->group_rank);
  ck_assert_int_eq(a->pid, b->pid);
  ck_assert_int_eq(a->exit_code, b->exit_code);
  ck_assert_msg(a->timestamp == b->timestamp, "%.17g != %.17g", a->timestamp, b->timestamp);
  assert_str_or_null(a->host, b->host);
  assert_str_or_null(a->error_file, b->error_file);
  assert_str_or_null(a->message, b->message);
  assert_str_or_null(a->traceback, b->traceback);
  assert_str_or_null(a->log_path, b->log_path);
  ck_assert_int_eq(a->torn_down, b->torn_down);
}

START_TEST(test_json_round_trip) {
  trun_failure a = {.global_rank = 123456,
                    .local_rank = 7,
                    .group_rank = 15,
                    .pid = 2147483647,
                    .exit_code = -11,
                    .timestamp = 1700000000.123456789,
                    .host = "gpu-node-01.cluster.example",
                    .error_file = "/tmp/torchelastic_x/attempt_0/7/error.json",
                    .message = "ValueError: \"quoted\" \\ back\tslash \xe2\x9c\x93",
                    .traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1\n",
                    .log_path = "/tmp/logs/7/stderr.log",
                    .torn_down = 1};
  char *s = trun_failure_to_json(&a);
  ck_assert_ptr_nonnull(s);
  trun_failure b;
  ck_assert_int_eq(trun_failure_from_json(s, strlen(s), &b), 0);
  assert_same(&a, &b);
  trun_failure_free(&b);
  free(s);

  trun_failure z = {.exit_code = 1, .timestamp = 0.1, .global_rank = -1}; /* every string NULL */
  s = trun_failure_to_json(&z);
  ck_assert_ptr_nonnull(s);
  ck_assert_int_eq(trun_failure_from_json(s, strlen(s), &b), 0);
  assert_same(&z, &b);
  trun_failure_free(&b);
  free(s);

  /* the length is honoured: no NUL terminator needed */
  s = trun_failure_to_json(&a);
  size_t n = strlen(s);
  char *copy = malloc(n);
  memcpy(copy, s, n);
  ck_assert_int_eq(trun_failure_from_json(copy, n, &b), 0);
  assert_same(&a, &b);
  trun_failure_free(&b);
  ck_assert_int_eq(trun_failure_from_json(copy, n - 1, &b), -EBADMSG);
  free(copy), free(s);

  z.timestamp = NAN; /* not representable in JSON: published as 0 */
  s = trun_failure_to_json(&z);
  ck_assert_ptr_nonnull(s);
  ck_assert_int_eq(trun_failure_from_json(s, strlen(s), &b), 0);
  ck_assert_double_eq(b.timestamp, 0.0);
  free(s);
}
END_TEST

static const char *const bad_json[] = {
    "",
    "nope",
    "[]",
    "{}",
    "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":1,\"exit_code\":1}",
    "{\"global_rank\":\"0\",\"local_rank\":0,\"group_rank\":0,\"pid\":1,\"exit_code\":1,\"timestamp\":1}",
    "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":1.5,\"exit_code\":1,\"timestamp\":1}",
    "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":4294967296,\"exit_code\":1,\"timestamp\":"
    "1}",
    "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":1,\"exit_code\":1,\"timestamp\":\"1\"}",
    "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":1,\"exit_code\":1,\"timestamp\":1,\"host\":"
    "5}",
    "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":1,\"exit_code\":1,\"timestamp\":1,\"torn_"
    "down\":\"y\"}",
    "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":1,\"exit_code\":1,\"timestamp\":1,\"log_"
    "path\":[]}",
};

START_TEST(test_json_malformed) {
  trun_failure f;
  memset(&f, 0x5a, sizeof(f)); /* garbage in: from_json must not free it */
  const char *s = bad_json[_i];
  ck_assert_msg(trun_failure_from_json(s, strlen(s), &f) == -EBADMSG, "accepted: %s", s);
  ck_assert_ptr_null(f.host);
  ck_assert_ptr_null(f.message);
  trun_failure_free(&f);
}
END_TEST

START_TEST(test_json_minimal) {
  /* optional strings and torn_down may be absent; unknown keys are ignored; torn_down may be 0/1 */
  const char *s =
      "{\"global_rank\":2,\"local_rank\":1,\"group_rank\":0,\"pid\":9,\"exit_code\":-6,"
      "\"timestamp\":17,\"torn_down\":1,\"future\":{\"x\":1}}";
  trun_failure f;
  ck_assert_int_eq(trun_failure_from_json(s, strlen(s), &f), 0);
  ck_assert_int_eq(f.global_rank, 2);
  ck_assert_int_eq(f.exit_code, -6);
  ck_assert_double_eq(f.timestamp, 17.0);
  ck_assert_int_eq(f.torn_down, 1);
  ck_assert_ptr_null(f.host);
  trun_failure_free(&f);
}
END_TEST

/* ---- signal names ----------------------------------------------------------------------------- */

START_TEST(test_signal_names) {
  char b[32];
  ck_assert_str_eq(trun_signal_name(SIGSEGV, b, sizeof(b)), "SIGSEGV");
  ck_assert_str_eq(trun_signal_name(SIGTERM, b, sizeof(b)), "SIGTERM");
  ck_assert_str_eq(trun_signal_name(SIGKILL, b, sizeof(b)), "SIGKILL");
  ck_assert_str_eq(trun_signal_name(SIGINT, b, sizeof(b)), "SIGINT");
  ck_assert_str_eq(trun_signal_name(SIGHUP, b, sizeof(b)), "SIGHUP");
  ck_assert_str_eq(trun_signal_name(SIGABRT, b, sizeof(b)), "SIGABRT");
  ck_assert_str_eq(trun_signal_name(SIGBUS, b, sizeof(b)), "SIGBUS");
  ck_assert_str_eq(trun_signal_name(SIGCHLD, b, sizeof(b)), "SIGCHLD");
  ck_assert_str_eq(trun_signal_name(SIGIO, b, sizeof(b)), "SIGIO"); /* Python's name, not SIGPOLL */
  ck_assert_str_eq(trun_signal_name(SIGSYS, b, sizeof(b)), "SIGSYS");
  ck_assert_str_eq(trun_signal_name(SIGRTMIN, b, sizeof(b)), "SIGRTMIN");
  ck_assert_str_eq(trun_signal_name(SIGRTMIN + 2, b, sizeof(b)), "SIGRTMIN+2");
  ck_assert_str_eq(trun_signal_name(SIGRTMAX, b, sizeof(b)), "SIGRTMAX");
  ck_assert_str_eq(trun_signal_name(0, b, sizeof(b)), "SIG0");
  ck_assert_str_eq(trun_signal_name(200, b, sizeof(b)), "SIG200");
  ck_assert_str_eq(trun_signal_name(-3, b, sizeof(b)), "SIG-3");
  ck_assert_str_eq(trun_signal_name(SIGSEGV, b, 5), "SIGS"); /* truncated, terminated */
  ck_assert_str_eq(trun_signal_name(SIGSEGV, b, 0), "");
  ck_assert_str_eq(trun_signal_name(SIGSEGV, NULL, 8), "");
}
END_TEST

/* ---- parent error file ------------------------------------------------------------------------ */

START_TEST(test_parent_copy_matches_torch) {
  /* torch 1.13's ErrorHandler.dump_error_file(child, 1) wrote torch113-parent-exit1.json */
  char *d = tmpdir();
  char *child = fixture("torch113-valueerror.json"), *real = fixture("torch113-parent-exit1.json");
  char *out = NULL;
  ck_assert_int_ge(asprintf(&out, "%s/parent.json", d), 0);
  trun_failure root = {.exit_code = 1, .error_file = child, .pid = 5};
  ck_assert_int_eq(trun_errfile_write_parent(out, &root), 0);
  char *got = slurp(out, NULL), *want = slurp(real, NULL);
  ck_assert_str_eq(got, want);
  free(got), free(want);

  /* exit code 0 (never a failure, but torch skips the override then): a verbatim copy */
  root.exit_code = 0;
  ck_assert_int_eq(trun_errfile_write_parent(out, &root), 0);
  got = slurp(out, NULL);
  want = slurp(child, NULL);
  ck_assert_str_eq(got, want);
  free(got), free(want);

  /* a plain-string message is copied without errorCode; non-ASCII is escaped as Python does */
  const char *plain = "{\"message\": \"caf\xc3\xa9\", \"timestamp\": 5}";
  char *pp = write_tmp(d, "plain.json", plain, strlen(plain));
  root.error_file = pp;
  root.exit_code = 2;
  ck_assert_int_eq(trun_errfile_write_parent(out, &root), 0);
  got = slurp(out, NULL);
  ck_assert_str_eq(got, "{\"message\": \"caf\\u00e9\", \"timestamp\": 5}");
  free(got);
  free(pp), free(out), free(child), free(real);
  rm_rf(d);
}
END_TEST

START_TEST(test_parent_copy_unicode_matches_torch) {
  /* escapes as Python writes them: lower-case hex, surrogate pairs, \u007f, a literal "\\u00E9" kept */
  char *d = tmpdir();
  char *child = fixture("torch113-unicode.json"), *real = fixture("torch113-unicode-parent-sigsegv.json");
  char *out = NULL;
  ck_assert_int_ge(asprintf(&out, "%s/parent.json", d), 0);
  trun_failure root = {.exit_code = -11, .error_file = child};
  ck_assert_int_eq(trun_errfile_write_parent(out, &root), 0);
  char *got = slurp(out, NULL), *want = slurp(real, NULL);
  ck_assert_str_eq(got, want);
  trun_failure f = {0};
  ck_assert_int_eq(trun_errfile_read(child, &f), 0);
  ck_assert_str_eq(f.message,
                   "ValueError: caf\xc3\xa9 \xf0\x9f\x98\x80 ctl\x01\x1f del\x7f lit\\u00E9 q\" tab\t/ "
                   "\xe2\x82\xac\xef\xbf\xbf");
  trun_failure_free(&f);
  free(got), free(want), free(out), free(child), free(real);
  rm_rf(d);
}
END_TEST

START_TEST(test_parent_synthesized) {
  char *d = tmpdir();
  char *out = NULL;
  ck_assert_int_ge(asprintf(&out, "%s/parent.json", d), 0);
  /* no error file, killed by a signal */
  trun_failure root = {.exit_code = -11, .pid = 1234, .timestamp = 1700000000.9, .host = "h"};
  ck_assert_int_eq(trun_errfile_write_parent(out, &root), 0);
  char *got = slurp(out, NULL);
  ck_assert_str_eq(got,
                   "{\"message\": {\"message\": \"Signal 11 (SIGSEGV) received by PID 1234\", \"extraInfo\": "
                   "{\"timestamp\": \"1700000000\"}, \"errorCode\": -11}}");
  free(got);
  trun_failure back = {0};
  ck_assert_int_eq(trun_errfile_read(out, &back), 0);
  ck_assert_str_eq(back.message, "Signal 11 (SIGSEGV) received by PID 1234");
  ck_assert_double_eq(back.timestamp, 1700000000.0);
  trun_failure_free(&back);

  /* plain exit without error file */
  root.exit_code = 3;
  ck_assert_int_eq(trun_errfile_write_parent(out, &root), 0);
  got = slurp(out, NULL);
  ck_assert_str_eq(got,
                   "{\"message\": {\"message\": \"To enable traceback see: "
                   "https://pytorch.org/docs/stable/elastic/errors.html\", \"extraInfo\": "
                   "{\"timestamp\": \"1700000000\"}, \"errorCode\": 3}}");
  free(got);

  /* a remote root (its error file is not here) keeps its message and traceback */
  root.error_file = "/nonexistent/trun/error.json";
  root.message = "ValueError: boom";
  root.traceback = "Traceback:\n  x\n";
  root.exit_code = 1;
  ck_assert_int_eq(trun_errfile_write_parent(out, &root), 0);
  got = slurp(out, NULL);
  ck_assert_str_eq(got,
                   "{\"message\": {\"message\": \"ValueError: boom\", \"extraInfo\": {\"py_callstack\": "
                   "\"Traceback:\\n  x\\n\", \"timestamp\": \"1700000000\"}, \"errorCode\": 1}}");
  free(got);

  /* a malformed local error file falls back to the struct too */
  char *bad = write_tmp(d, "bad.json", "{oops", 5);
  root.error_file = bad;
  ck_assert_int_eq(trun_errfile_write_parent(out, &root), 0);
  ck_assert_int_eq(trun_errfile_read(out, &back), 0);
  ck_assert_str_eq(back.message, "ValueError: boom");
  ck_assert_str_eq(back.traceback, "Traceback:\n  x\n");
  trun_failure_free(&back);

  /* errors */
  ck_assert_int_eq(trun_errfile_write_parent("/nonexistent/dir/parent.json", &root), -ENOENT);
  ck_assert_int_eq(trun_errfile_write_parent(NULL, &root), -EINVAL);
  ck_assert_int_eq(trun_errfile_write_parent(out, NULL), -EINVAL);
  free(bad), free(out);
  rm_rf(d);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------------------ */

static Suite *report_suite(void) {
  Suite *s = suite_create("report");
  TCase *tc = tcase_create("errfile");
  tcase_add_test(tc, test_read_torch113);
  tcase_add_test(tc, test_read_torch26);
  tcase_add_test(tc, test_read_parent_copy);
  tcase_add_test(tc, test_read_string_layout);
  tcase_add_test(tc, test_read_object_without_text);
  tcase_add_test(tc, test_read_missing);
  tcase_add_loop_test(tc, test_read_malformed, 0, (int)(sizeof(malformed) / sizeof(malformed[0])));
  tcase_add_test(tc, test_read_huge_nesting);
  tcase_add_test(tc, test_read_oversized_and_special);
  suite_add_tcase(s, tc);

  tc = tcase_create("banner");
  tcase_add_test(tc, test_root);
  tcase_add_test(tc, test_banner_real_exit);
  tcase_add_test(tc, test_banner_real_segv);
  tcase_add_test(tc, test_banner_real_exc);
  tcase_add_test(tc, test_banner_real_both);
  tcase_add_test(tc, test_banner_trun_extras);
  tcase_add_test(tc, test_banner_from_errfile);
  tcase_add_test(tc, test_signal_names);
  suite_add_tcase(s, tc);

  tc = tcase_create("json");
  tcase_add_test(tc, test_json_round_trip);
  tcase_add_loop_test(tc, test_json_malformed, 0, (int)(sizeof(bad_json) / sizeof(bad_json[0])));
  tcase_add_test(tc, test_json_minimal);
  tcase_add_test(tc, test_parent_copy_matches_torch);
  tcase_add_test(tc, test_parent_copy_unicode_matches_torch);
  tcase_add_test(tc, test_parent_synthesized);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(report_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
