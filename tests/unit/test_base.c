/* base/'s clock, environment vectors and string builder (base/clock.h, base/env.h, base/str.h): trun_env_get
 * matches whole names only, each clock reads the clock it names, in the unit it names, and trun_errf /
 * trun_catf keep a buffer NUL-terminated, cut at its size, and leave a NULL or empty one alone. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

START_TEST(env_get_whole_names) {
  char *env[] = {"PATHX=no", "PATH=/bin", "EMPTY=", "NOEQUALS", "A=1=2", NULL};
  ck_assert_str_eq(trun_env_get(env, "PATH"), "/bin");
  ck_assert_str_eq(trun_env_get(env, "PATHX"), "no");
  ck_assert_str_eq(trun_env_get(env, "EMPTY"), "");
  ck_assert_str_eq(trun_env_get(env, "A"), "1=2");
  ck_assert_ptr_null(trun_env_get(env, "PAT"));      /* a prefix of a name is not the name */
  ck_assert_ptr_null(trun_env_get(env, "NOEQUALS")); /* an entry without '=' has no value */
  ck_assert_ptr_null(trun_env_get(env, "MISSING"));
  ck_assert_ptr_null(trun_env_get(NULL, "PATH"));
}
END_TEST

START_TEST(env_get_first_wins) {
  char *env[] = {"X=first", "X=second", NULL};
  ck_assert_str_eq(trun_env_get(env, "X"), "first");
}
END_TEST

static double read_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Each reading lies between two readings of the clock it names (taken before and after it). */
START_TEST(clocks_read_their_clock) {
  double lo = read_clock(CLOCK_MONOTONIC);
  double s = trun_mono_s(), ms = trun_mono_ms(), us = (double)trun_mono_us();
  double hi = read_clock(CLOCK_MONOTONIC);
  ck_assert(s >= lo && s <= hi);
  ck_assert(ms >= lo * 1e3 - 1e-3 && ms <= hi * 1e3 + 1e-3);
  ck_assert(us >= lo * 1e6 - 1 && us <= hi * 1e6 + 1);

  lo = read_clock(CLOCK_REALTIME);
  double w = trun_wall_s(), wus = (double)trun_wall_us();
  hi = read_clock(CLOCK_REALTIME);
  ck_assert(w >= lo && w <= hi);
  ck_assert(wus >= lo * 1e6 - 1 && wus <= hi * 1e6 + 1);
  ck_assert(w > 1.6e9); /* after 2020: the epoch's clock, not the boot's */
}
END_TEST

START_TEST(mono_never_goes_back) {
  double prev = trun_mono_s();
  int64_t prev_us = trun_mono_us();
  for (int i = 0; i < 10000; i++) {
    double now = trun_mono_s();
    int64_t now_us = trun_mono_us();
    ck_assert(now >= prev);
    ck_assert(now_us >= prev_us);
    prev = now, prev_us = now_us;
  }
}
END_TEST

START_TEST(errf_sets_and_returns_minus_one) {
  char b[8] = "old";
  ck_assert_int_eq(trun_errf(b, sizeof(b), "%s %d", "new", 42), -1);
  ck_assert_str_eq(b, "new 42");
  ck_assert_int_eq(trun_errf(b, sizeof(b), "%s", "0123456789"), -1);
  ck_assert_str_eq(b, "0123456"); /* cut at the buffer, NUL-terminated */
  ck_assert_int_eq(trun_errf(NULL, 10, "x"), -1);
  ck_assert_int_eq(trun_errf(b, 0, "x"), -1);
  ck_assert_str_eq(b, "0123456");
}
END_TEST

START_TEST(catf_appends_until_full) {
  char b[8] = "";
  trun_catf(b, sizeof(b), "%s", "ab");
  trun_catf(b, sizeof(b), "-%d", 7);
  ck_assert_str_eq(b, "ab-7");
  trun_catf(b, sizeof(b), "%s", "xyzw");
  ck_assert_str_eq(b, "ab-7xyz");
  trun_catf(b, sizeof(b), "%s", "more"); /* full: unchanged */
  ck_assert_str_eq(b, "ab-7xyz");
  trun_catf(NULL, 8, "x");
  char c[4] = "abc";
  trun_catf(c, 0, "x");
  ck_assert_int_eq(memcmp(c, "abc", 4), 0);
}
END_TEST

/* A small file whole, NUL-terminated, cut at len - 1; its length; -errno when it cannot be opened or read. */
START_TEST(read_small_files) {
  char dir[] = "/tmp/trun-base.XXXXXX", path[64], buf[8];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/f", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("abc\n", f);
  fclose(f);
  ck_assert_int_eq(trun_read_small(path, buf, sizeof(buf)), 4);
  ck_assert_str_eq(buf, "abc\n");
  ck_assert_int_eq(trun_read_small(path, buf, 3), 2); /* cut */
  ck_assert_str_eq(buf, "ab");
  ck_assert_int_eq(trun_read_small(path, buf, 1), 0);
  ck_assert_str_eq(buf, "");
  ck_assert_int_eq(trun_read_small(dir, buf, sizeof(buf)), -EISDIR);
  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(trun_read_small(path, buf, sizeof(buf)), -ENOENT);
  ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("base");
  TCase *tc = tcase_create("base");
  tcase_add_test(tc, env_get_whole_names);
  tcase_add_test(tc, env_get_first_wins);
  tcase_add_test(tc, clocks_read_their_clock);
  tcase_add_test(tc, mono_never_goes_back);
  tcase_add_test(tc, errf_sets_and_returns_minus_one);
  tcase_add_test(tc, catf_appends_until_full);
  tcase_add_test(tc, read_small_files);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
