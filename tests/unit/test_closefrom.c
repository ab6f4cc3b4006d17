/* trun_closefrom and its /proc/self/fd fallback: in a forked child (where the agent uses them), every
 * descriptor from lowfd up is closed, those below stay open. */
#include <check.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "closefrom.h"

/* In a child: open descriptors up to at least 40 (dup2 of stdin), call fn(20); the child's exit code says
 * what it found: 0 right, 1 one at or above 20 still open, 2 one below 20 closed, 3 fn failed. */
static int run_child(int (*fn)(int)) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    for (int fd = 10; fd <= 40; fd += 3)
      if (dup2(0, fd) < 0) _exit(4);
    if (dup2(0, 1000) < 0) _exit(4); /* beyond any getdents buffer's first batch of small numbers */
    if (fn(20) != 0) _exit(3);
    for (int fd = 20; fd <= 1000; fd++)
      if (fcntl(fd, F_GETFD) >= 0) _exit(1);
    for (int fd = 10; fd < 20; fd += 3)
      if (fcntl(fd, F_GETFD) < 0) _exit(2);
    _exit(0);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static int closefrom_void(int lowfd) {
  trun_closefrom(lowfd);
  return 0;
}

START_TEST(closefrom_closes_from_lowfd) { ck_assert_int_eq(run_child(closefrom_void), 0); }
END_TEST

START_TEST(scan_fallback_closes_from_lowfd) { ck_assert_int_eq(run_child(trun__closefrom_scan), 0); }
END_TEST

int main(void) {
  Suite *s = suite_create("closefrom");
  TCase *tc = tcase_create("closefrom");
  tcase_add_test(tc, closefrom_closes_from_lowfd);
  tcase_add_test(tc, scan_fallback_closes_from_lowfd);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
