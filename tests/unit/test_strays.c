/* strays.h against real processes: this test process plays the agent (a child subreaper); its "worker"
 * leads a session and starts a child in a session of its own and a double-forked daemon. One scan finds
 * both sessions (and not the worker's own, nor a helper of the agent in a session of its own); once the
 * worker is gone, trun_strays_kill leaves nothing of them and spares the helper. Every process the test
 * starts waits on a pipe only the test holds open: if an assertion fails, they all end with it. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "strays.h"

/* Running (not a zombie, not gone). */
static int running(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  return p && p[2] != 'Z';
}

/* The read end of a pipe whose write end only the test process holds (-1 until made). */
static int life_fd = -1;

/* Waits until the test process is gone (its end of the pipe closed) or a signal ends this one. */
static void wait_for_test_end(void) {
  char c;
  while (read(life_fd, &c, 1) != 0) {
  }
  _exit(0);
}

/* A process that sleeps in a session of its own: the agent's helper. */
static pid_t helper(int life_w) {
  pid_t pid = fork();
  if (pid == 0) {
    close(life_w);
    setsid();
    wait_for_test_end();
  }
  return pid;
}

/* The worker: writes the setsid child's and the daemon's pids to fd, then sleeps. */
static pid_t worker(int fd, int life_w) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  close(life_w);
  setsid();
  pid_t pids[2];
  if ((pids[0] = fork()) == 0) {
    setsid();
    wait_for_test_end();
  }
  while (getsid(pids[0]) != pids[0]) { /* its own session before the test looks (a loaded box is slow) */
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  int p[2];
  if (pipe(p) < 0) _exit(1);
  pid_t mid = fork();
  if (mid == 0) {
    setsid();
    pid_t d = fork();
    if (d == 0) wait_for_test_end();
    if (write(p[1], &d, sizeof(d)) != sizeof(d)) _exit(1);
    _exit(0);
  }
  if (read(p[0], &pids[1], sizeof(pids[1])) != sizeof(pids[1])) _exit(1);
  waitpid(mid, NULL, 0); /* the daemon is an orphan now: it comes to the subreaper */
  if (write(fd, pids, sizeof(pids)) != sizeof(pids)) _exit(1);
  wait_for_test_end();
  return 0;
}

START_TEST(finds_and_kills_strays) {
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int p[2], life[2];
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(pipe(life), 0);
  life_fd = life[0];
  pid_t h = helper(life[1]);
  pid_t w = worker(p[1], life[1]);
  pid_t strays[2];
  ck_assert_int_eq(read(p[0], strays, sizeof(strays)), (ssize_t)sizeof(strays));
  ck_assert(running(strays[0]) && running(strays[1]));
  trun_strays *s = trun_strays_new("/proc", NULL);
  pid_t keep[1] = {h};
  trun_strays_view v = {.workers = &w, .nworkers = 1, .keep = keep, .nkeep = 1};
  ck_assert_int_eq(trun_strays_scan(s, &v), 2); /* the setsid child's session and the daemon's */
  ck_assert_int_eq(trun_strays_scan(s, &v), 0); /* known now */
  kill(w, SIGKILL);
  ck_assert_int_eq(waitpid(w, NULL, 0), w);
  v.nworkers = 0;
  ck_assert_int_ge(trun_strays_kill(s, &v), 2);
  ck_assert(!running(strays[0]));
  ck_assert(!running(strays[1]));
  ck_assert(running(h)); /* the helper is not the job's */
  ck_assert_int_eq(trun_strays_kill(s, &v), 0);
  kill(h, SIGKILL);
  waitpid(h, NULL, 0);
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  trun_strays_free(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("strays");
  TCase *tc = tcase_create("strays");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, finds_and_kills_strays);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
