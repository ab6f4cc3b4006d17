/* The exit code table (base/exit.h): the codes are those documented, --hostfile's choice among the hosts'
 * codes (2 > 5 > 3 > 6 > 4 > 1 > 0, anything else as 1), and the code of each exclusion kind (only the
 * node's hardware makes 3), and trun_close_range (spawn's descriptor sweep). */
#include <check.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "rdzv.h"

START_TEST(table_codes) {
  int n;
  const trun_exit_info *t = trun_exit_table(&n);
  ck_assert_int_eq(n, 7);
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(t[i].code, i);
    ck_assert_ptr_eq(trun_exit_info_of(i), &t[i]);
  }
  ck_assert_ptr_null(trun_exit_info_of(7));
  ck_assert_ptr_null(trun_exit_info_of(255));
  ck_assert_int_eq(TRUN_EXIT_UNHEALTHY, 3);
  ck_assert_int_eq(TRUN_EXIT_CUT_OFF, 4);
  ck_assert_int_eq(TRUN_EXIT_NO_PROGRESS, 5);
  ck_assert_int_eq(TRUN_EXIT_EXCLUDED, 6);
}
END_TEST

START_TEST(worst_order) {
  const int order[] = {2, 5, 3, 6, 4, 1, 0}; /* first wins */
  for (int i = 0; i < 7; i++)
    for (int j = i; j < 7; j++) {
      ck_assert_int_eq(trun_exit_worst(order[i], order[j]), order[i]);
      ck_assert_int_eq(trun_exit_worst(order[j], order[i]), order[i]);
    }
  ck_assert_int_eq(trun_exit_worst(0, 255), 1); /* ssh could not reach the host */
  ck_assert_int_eq(trun_exit_worst(0, 137), 1); /* a signal */
  ck_assert_int_eq(trun_exit_worst(255, 4), 4);
  ck_assert_int_eq(trun_exit_worst(7, 0), 1);
}
END_TEST

START_TEST(exclusion_kinds) {
  ck_assert_int_eq(trun_rdzv_exclusion_code("health"), 3);
  ck_assert_int_eq(trun_rdzv_exclusion_code("xid"), 3);
  ck_assert_int_eq(trun_rdzv_exclusion_code("preflight"), 3);
  ck_assert_int_eq(trun_rdzv_exclusion_code("stuck"), 3);
  ck_assert_int_eq(trun_rdzv_exclusion_code("cut_off"), 4);
  ck_assert_int_eq(trun_rdzv_exclusion_code("failures"), 6);
  ck_assert_int_eq(trun_rdzv_exclusion_code("something-newer"), 6); /* never a drain for what we don't know */
}
END_TEST

START_TEST(close_range_closes_only_the_range) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    for (int fd = 10; fd <= 30; fd++)
      if (dup2(0, fd) < 0) _exit(4);
    trun_close_range(12, 20);
    trun_close_range(25, 24); /* empty */
    for (int fd = 10; fd <= 30; fd++) {
      int open = fcntl(fd, F_GETFD) >= 0;
      if (open != (fd < 12 || fd > 20)) _exit(1);
    }
    _exit(0);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("exit");
  TCase *tc = tcase_create("exit");
  tcase_add_test(tc, table_codes);
  tcase_add_test(tc, worst_order);
  tcase_add_test(tc, exclusion_kinds);
  tcase_add_test(tc, close_range_closes_only_the_range);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
