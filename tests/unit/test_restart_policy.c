/* agent/restart_policy.c and its settings in config/config.c: --restart-backoff, --crash-loop,
 * --restart-offset (and $SLURM_RESTART_COUNT, PET_* variables), bad values refused with the option named;
 * the remaining restarts, the back-off sequence, the crash-loop verdict and the exit codes. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "config_parse.h"
#include "restart_policy.h"

/* The policy of a command line and an environment (NULL-terminated lists). */
static trun_restart_policy policy(const char *const *args, char **envp) {
  trun_config c;
  char err[512] = "";
  ck_assert_msg(parse(&c, err, args, envp) == 0, "parse failed: %s", err);
  trun_restart_policy p;
  trun_restart_policy_init(&p, &c, envp);
  return p;
}

START_TEST(defaults) {
  static const char *const args[] = {"--max-restarts", "5", "train.py", NULL};
  static char *env[] = {NULL};
  trun_restart_policy p = policy(args, env);
  ck_assert_int_eq(p.max_restarts, 5);
  ck_assert_int_eq(p.offset, 0);
  ck_assert_str_eq(p.offset_from, "");
  ck_assert(p.backoff == 1.0);
  ck_assert_int_eq(p.loop_rounds, 3);
  ck_assert(p.loop_window == 60.0);
  ck_assert_int_eq(trun_restart_policy_remaining(&p), 5);
  ck_assert_int_eq(trun_restart_policy_exhausted_code(&p), 1);
  /* first fast failure: at once; second: 1 s; the third is the crash loop */
  ck_assert(trun_restart_policy_delay(&p) == 0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 2.0), 0);
  ck_assert(trun_restart_policy_delay(&p) == 0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 59.9), 0);
  ck_assert(trun_restart_policy_delay(&p) == 1.0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 0.1), 1);
  ck_assert_int_eq(TRUN_EXIT_NO_PROGRESS, 5);
}
END_TEST

START_TEST(slow_failures_and_resets) {
  static const char *const args[] = {"--max-restarts", "9", "train.py", NULL};
  static char *env[] = {NULL};
  trun_restart_policy p = policy(args, env);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 0);
  /* a round that ran past the window: progress, no wait, the streak starts again */
  ck_assert_int_eq(trun_restart_policy_failed(&p, 60), 0);
  ck_assert(trun_restart_policy_delay(&p) == 0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 0);
  trun_restart_policy_reset(&p); /* a membership change or a node lost */
  ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 1);
}
END_TEST

START_TEST(options_and_cap) {
  static const char *const args[] = {"--restart-backoff", "7.5", "--crash-loop", "4:10", "train.py", NULL};
  static char *env[] = {NULL};
  trun_restart_policy p = policy(args, env);
  ck_assert(p.backoff == 7.5);
  ck_assert_int_eq(p.loop_rounds, 4);
  ck_assert(p.loop_window == 10.0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 11), 0); /* not fast with a 10 s window */
  for (int i = 0; i < 3; i++) ck_assert_int_eq(trun_restart_policy_failed(&p, 9), 0);
  ck_assert(trun_restart_policy_delay(&p) == 15.0); /* 7.5 x 2 at the third in a row */
  ck_assert_int_eq(trun_restart_policy_failed(&p, 9), 1);
  ck_assert(trun_restart_policy_delay(&p) == 30.0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 9), 1);
  ck_assert(trun_restart_policy_delay(&p) == 60.0);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 9), 1);
  ck_assert(trun_restart_policy_delay(&p) == 60.0); /* 7.5 x 16, at most 60 */
  /* crash loop off: no verdict, the back-off still grows up to its cap */
  static const char *const off[] = {"--crash-loop", "0", "--restart-backoff", "100", "train.py", NULL};
  p = policy(off, env);
  for (int i = 0; i < 50; i++) ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 0);
  ck_assert(trun_restart_policy_delay(&p) == 100.0); /* a back-off beyond 60 s is its own cap */
  /* back-off 0: torchrun's immediate restarts */
  static const char *const zero[] = {"--restart-backoff", "0", "train.py", NULL};
  p = policy(zero, env);
  ck_assert_int_eq(trun_restart_policy_failed(&p, 1), 0);
  ck_assert(trun_restart_policy_delay(&p) == 0);
}
END_TEST

START_TEST(requeues) {
  static const char *const args[] = {"--max-restarts", "3", "train.py", NULL};
  static char *slurm[] = {"SLURM_RESTART_COUNT=2", NULL};
  trun_restart_policy p = policy(args, slurm);
  ck_assert_int_eq(p.offset, 2);
  ck_assert_str_eq(p.offset_from, "SLURM_RESTART_COUNT");
  ck_assert_int_eq(trun_restart_policy_remaining(&p), 1);
  ck_assert_int_eq(trun_restart_policy_exhausted_code(&p), TRUN_EXIT_NO_PROGRESS);
  static char *many[] = {"SLURM_RESTART_COUNT=7", NULL};
  p = policy(args, many);
  ck_assert_int_eq(trun_restart_policy_remaining(&p), 0);
  /* the option (e.g. PET_RESTART_OFFSET from JobSet's restart-attempt label) wins over Slurm's */
  static const char *const opt[] = {"--max-restarts", "3", "--restart-offset", "1", "train.py", NULL};
  p = policy(opt, many);
  ck_assert_int_eq(p.offset, 1);
  ck_assert_str_eq(p.offset_from, "--restart-offset");
  ck_assert_int_eq(trun_restart_policy_remaining(&p), 2);
  static char *pet[] = {"PET_RESTART_OFFSET=3", "SLURM_RESTART_COUNT=1", NULL};
  p = policy(args, pet);
  ck_assert_int_eq(p.offset, 3);
  ck_assert_int_eq(trun_restart_policy_remaining(&p), 0);
  /* an empty value (the downward API's for an annotation the pod lacks) is unset: Slurm's count applies */
  static char *empty[] = {"PET_RESTART_OFFSET=", "SLURM_RESTART_COUNT=1", NULL};
  p = policy(args, empty);
  ck_assert_int_eq(p.offset, 1);
  ck_assert_str_eq(p.offset_from, "SLURM_RESTART_COUNT");
  static char *zero[] = {"SLURM_RESTART_COUNT=0", NULL};
  p = policy(args, zero);
  ck_assert_int_eq(trun_restart_policy_exhausted_code(&p), 1);
  /* a malformed Slurm value: warned, taken as 0 */
  static char *bad[] = {"SLURM_RESTART_COUNT=two", NULL};
  p = policy(args, bad);
  ck_assert_int_eq(p.offset, 0);
  ck_assert_int_eq(trun_restart_policy_remaining(&p), 3);
}
END_TEST

static void bad(const char *opt, const char *val, const char *want) {
  const char *args[] = {opt, val, "train.py", NULL};
  trun_config c;
  char err[512] = "";
  ck_assert_int_eq(parse(&c, err, args, NULL), -1);
  ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
}

/* What follows a round: restarts left at the job's attempt, the crash loop first, a lost node resets the
 * streak. */
START_TEST(next_after_a_round) {
  static const char *const args[] = {"--max-restarts", "3", "--restart-offset", "1", "train.py", NULL};
  static char *env[] = {NULL};
  trun_restart_policy p = policy(args, env);
  ck_assert_int_eq(trun_restart_policy_left(&p, 0), 2);
  ck_assert_int_eq(trun_restart_policy_left(&p, 1), 1);
  ck_assert_int_eq(trun_restart_policy_left(&p, 5), 0); /* a spare that joins late: none, never negative */
  ck_assert_int_eq(trun_restart_policy_next(&p, 1, 100.0, 0), TRUN_RESTART_GO);
  ck_assert_int_eq(trun_restart_policy_next(&p, 1, 100.0, 2), TRUN_RESTART_SPENT);
  /* two fast failures, a lost node in between: the streak starts again, no crash loop */
  ck_assert_int_eq(trun_restart_policy_next(&p, 1, 1.0, 0), TRUN_RESTART_GO);
  ck_assert_int_eq(trun_restart_policy_next(&p, 1, 1.0, 0), TRUN_RESTART_GO);
  ck_assert_int_eq(trun_restart_policy_next(&p, 0, 1.0, 0), TRUN_RESTART_GO);
  ck_assert_int_eq(p.fast_streak, 0);
  ck_assert_int_eq(trun_restart_policy_next(&p, 1, 1.0, 0), TRUN_RESTART_GO);
  ck_assert_int_eq(trun_restart_policy_next(&p, 1, 1.0, 0), TRUN_RESTART_GO);
  /* the third fast failure in a row is a crash loop, even with restarts spent */
  ck_assert_int_eq(trun_restart_policy_next(&p, 1, 1.0, 2), TRUN_RESTART_CRASH_LOOP);
}
END_TEST

START_TEST(bad_values) {
  bad("--restart-backoff", "-1", "--restart-backoff '-1' must be 0-3600 seconds");
  bad("--restart-backoff", "nan", "--restart-backoff");
  bad("--restart-backoff", "inf", "--restart-backoff");
  bad("--restart-backoff", "3601", "--restart-backoff");
  bad("--restart-backoff", "", "--restart-backoff");
  bad("--crash-loop", "3", "--crash-loop '3' must be K:SECONDS");
  bad("--crash-loop", "0:60", "--crash-loop");
  bad("--crash-loop", "3:0", "--crash-loop");
  bad("--crash-loop", "3:-1", "--crash-loop");
  bad("--crash-loop", "3:nan", "--crash-loop");
  bad("--crash-loop", ":60", "--crash-loop");
  bad("--crash-loop", "x:60", "--crash-loop");
  bad("--crash-loop", "99999999999999999:60", "--crash-loop");
  bad("--crash-loop", "3:60:1", "--crash-loop");
  bad("--restart-offset", "-1", "--restart-offset '-1' must be an integer");
  bad("--restart-offset", "1e3", "--restart-offset");
}
END_TEST

static Suite *policy_suite(void) {
  Suite *s = suite_create("restart_policy");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, defaults);
  tcase_add_test(tc, slow_failures_and_resets);
  tcase_add_test(tc, options_and_cap);
  tcase_add_test(tc, requeues);
  tcase_add_test(tc, next_after_a_round);
  tcase_add_test(tc, bad_values);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(policy_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
