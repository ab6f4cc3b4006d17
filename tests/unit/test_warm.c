/* agent/proc/warm.c: the --warm-start pool, with a real Python (/usr/bin/python3, no module imported so
 * that it is quick): which variables may differ, when a worker must start cold, the handover (argv, the
 * environment's changes, stdout, exit code), a pool process that dies before use, one that never gets ready,
 * one not ready yet (never handed a worker: the worker starts cold); the loopback ports held for the
 * workers' NCCL RAS (portheld.h).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"

#define PY "/usr/bin/python3"

static char *pass_tail[] = {"-c", "pass", NULL};
static char *pool_env[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=2", "MASTER_PORT=1", "LANG=C.UTF-8", NULL};

/* Waits for pid with a limit (the pool's Python is slow on a busy box); its wait status. */
static int wait_for(pid_t pid) {
  for (int i = 0; i < 3000; i++) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    ck_assert_int_eq(r, 0);
    usleep(10000);
  }
  ck_abort_msg("pid %d did not exit in 30 s", (int)pid);
  return -1;
}

START_TEST(round_vars) {
  ck_assert(trun_warm_round_var("RANK"));
  ck_assert(trun_warm_round_var("RANK=3"));
  ck_assert(trun_warm_round_var("MASTER_ADDR=h"));
  ck_assert(trun_warm_round_var("TORCHELASTIC_ERROR_FILE=/x"));
  ck_assert(trun_warm_round_var("NCCL_DEBUG_FILE=/x"));
  ck_assert(!trun_warm_round_var("RANKS=1"));
  ck_assert(!trun_warm_round_var("OMP_NUM_THREADS=1"));
  ck_assert(!trun_warm_round_var("CUDA_VISIBLE_DEVICES=0"));
  ck_assert(!trun_warm_round_var("PYTHONPATH=/x"));
  ck_assert(!trun_warm_round_var("TORCHELASTIC_"));
}
END_TEST

START_TEST(check_says_why) {
  trun_warm *p = trun_warm_new(1, "", NULL, NULL);
  ck_assert_ptr_nonnull(p);
  char why[512];
  char *argv_c[] = {PY, "-u", "-c", "pass", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_c, pool_env, why, sizeof(why)), 1); /* nothing started */
  ck_assert_int_eq(trun_warm_fill(p, 0, PY, argv_c + 2, NULL, pool_env), 0);
  ck_assert_int_eq(trun_warm_check(p, 0, argv_c, pool_env, why, sizeof(why)), 0);
  /* The round's variables may differ; others may not. */
  char *env_round[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=2", "LANG=C.UTF-8", "RANK=4", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_c, env_round, why, sizeof(why)), 0);
  char *env_omp[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=4", "MASTER_PORT=1", "LANG=C.UTF-8", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_c, env_omp, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "OMP_NUM_THREADS differs") != NULL, "%s", why);
  char *env_more[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=2", "LANG=C.UTF-8", "LD_PRELOAD=/x.so", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_c, env_more, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "LD_PRELOAD is not in the pool") != NULL, "%s", why);
  char *env_less[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=2", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_c, env_less, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "LANG is unset for the worker") != NULL, "%s", why);
  /* Other interpreters, --no-python, no -u, scripts that are not source files. */
  char *argv_other[] = {"/usr/bin/python3.11", "-u", "t.py", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_other, pool_env, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "--no-python") != NULL, "%s", why);
  char *argv_nou[] = {PY, "t.py", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_nou, pool_env, why, sizeof(why)), 1);
  char *argv_missing[] = {PY, "-u", "/nonexistent/t.py", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_missing, pool_env, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "not a Python source file") != NULL, "%s", why);
  char *argv_dir[] = {PY, "-u", "/tmp", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_dir, pool_env, why, sizeof(why)), 1);
  char *argv_m[] = {PY, "-u", "-m", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_m, pool_env, why, sizeof(why)), 1);
  char *argv_mod[] = {PY, "-u", "-m", "mod", NULL}; /* the pool imported with -c's sys.path[0] */
  ck_assert_int_eq(trun_warm_check(p, 0, argv_mod, pool_env, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "started for -c") != NULL, "%s", why);
  char *argv_more[] = {PY, "-u", "-c", "pass", "x", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv_more, pool_env, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "arguments differ") != NULL, "%s", why);
  ck_assert_int_eq(trun_warm_check(p, 1, argv_c, pool_env, why, sizeof(why)), 1); /* no such slot */
  trun_warm_free(p);
}
END_TEST

START_TEST(handover) {
  trun_warm *p = trun_warm_new(1, "", NULL, NULL);
  char *argv[] = {PY,
                  "-u",
                  "-c",
                  "import os, sys; print(sys.argv, os.environ['RANK'], os.environ.get('MASTER_PORT'), "
                  "os.getpgid(0) == os.getpid()); sys.exit(7)",
                  "a b",
                  NULL};
  ck_assert_int_eq(trun_warm_fill(p, 0, PY, argv + 2, NULL, pool_env), 0);
  pid_t pool = trun_warm_pid(p, 0);
  ck_assert_int_gt(pool, 0);
  int out[2];
  ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
  char *env[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=2", "LANG=C.UTF-8", "RANK=5", NULL};
  char why[512] = "";
  pid_t pid = 0;
  ck_assert_msg(trun_warm_wait_ready(p, 0, 30000, why, sizeof(why)) == 0, "%s", why);
  ck_assert_int_eq(trun_warm_importing(p), 0);
  ck_assert_msg(trun_warm_take(p, 0, argv, env, out[1], -1, &pid, why, sizeof(why)) == 0, "%s", why);
  close(out[1]);
  ck_assert_int_eq(pid, pool); /* the pool process is the worker */
  ck_assert_int_eq(trun_warm_pid(p, 0), 0);
  int st = wait_for(pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 7);
  char buf[256] = "";
  ssize_t n = read(out[0], buf, sizeof(buf) - 1);
  ck_assert_int_gt(n, 0);
  buf[n] = '\0';
  ck_assert_str_eq(buf, "['-c', 'a b'] 5 None True\n");
  close(out[0]);
  /* An empty slot: the worker starts cold, with the reason. */
  ck_assert_int_eq(trun_warm_take(p, 0, argv, env, -1, -1, &pid, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "not there") != NULL, "%s", why);
  trun_warm_free(p);
}
END_TEST

START_TEST(large_handover) {
  /* A 2 MiB environment change (a variable of the round): more than the socket's buffer; it goes in a memfd,
   * so the handover is one short send however large it is. */
  trun_warm *p = trun_warm_new(1, "", NULL, NULL);
  char *argv[] = {PY, "-u", "-c", "import os; print(len(os.environ['MASTER_ADDR']))", NULL};
  ck_assert_int_eq(trun_warm_fill(p, 0, PY, argv + 2, NULL, pool_env), 0);
  size_t big = 2u << 20;
  char *var = malloc(big + 32);
  ck_assert_ptr_nonnull(var);
  strcpy(var, "MASTER_ADDR=");
  memset(var + 12, 'x', big);
  var[12 + big] = '\0';
  char *env[] = {"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=2", "LANG=C.UTF-8", var, NULL};
  int out[2];
  ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
  char why[512] = "";
  pid_t pid = 0;
  ck_assert_msg(trun_warm_wait_ready(p, 0, 30000, why, sizeof(why)) == 0, "%s", why);
  ck_assert_msg(trun_warm_take(p, 0, argv, env, out[1], -1, &pid, why, sizeof(why)) == 0, "%s", why);
  close(out[1]);
  int st = wait_for(pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char buf[64] = "";
  ssize_t n = read(out[0], buf, sizeof(buf) - 1);
  ck_assert_int_gt(n, 0);
  buf[n] = '\0';
  ck_assert_str_eq(buf, "2097152\n");
  close(out[0]);
  free(var);
  trun_warm_free(p);
}
END_TEST

START_TEST(not_ready_yet) {
  /* Handed nothing before it says "ready" (its import could still fail, and the worker with it): the worker
   * starts cold, the process stays for the next start. The take comes right after the start, long before
   * Python is up. */
  trun_warm *p = trun_warm_new(1, "", NULL, NULL);
  char *argv[] = {PY, "-u", "-c", "pass", NULL};
  ck_assert_int_eq(trun_warm_fill(p, 0, PY, argv + 2, NULL, pool_env), 0);
  pid_t pool = trun_warm_pid(p, 0);
  char why[512] = "";
  pid_t pid = 0;
  ck_assert_int_eq(trun_warm_importing(p), 1);
  ck_assert_int_eq(trun_warm_take(p, 0, argv, pool_env, -1, -1, &pid, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "still importing") != NULL, "%s", why);
  ck_assert_int_eq(trun_warm_pid(p, 0), pool);
  ck_assert_msg(trun_warm_wait_ready(p, 0, 30000, why, sizeof(why)) == 0, "%s", why);
  ck_assert_int_eq(trun_warm_importing(p), 0);
  ck_assert_msg(trun_warm_take(p, 0, argv, pool_env, -1, -1, &pid, why, sizeof(why)) == 0, "%s", why);
  ck_assert_int_eq(pid, pool);
  int st = wait_for(pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  trun_warm_free(p);
}
END_TEST

START_TEST(dies_before_use) {
  trun_warm *p = trun_warm_new(1, "", NULL, NULL);
  ck_assert_int_eq(trun_warm_fill(p, 0, PY, pass_tail, NULL, pool_env), 0);
  pid_t first = trun_warm_pid(p, 0);
  ck_assert_int_gt(trun_warm_rss_kb(p, 0), 0);
  ck_assert_int_eq(trun_warm_reaped(p, first + 100000, 0), 0); /* not one of the pool's */
  ck_assert_int_eq(kill(first, SIGKILL), 0);
  int st = wait_for(first);
  ck_assert_int_eq(trun_warm_reaped(p, first, st), 1);
  pid_t second = trun_warm_pid(p, 0);
  ck_assert_int_gt(second, 0);
  ck_assert_int_ne(second, first);
  /* Killed again and again: the slot gives up and its workers start cold. */
  for (int i = 0; i < 3; i++) {
    pid_t cur = trun_warm_pid(p, 0);
    ck_assert_int_gt(cur, 0);
    kill(cur, SIGKILL);
    ck_assert_int_eq(trun_warm_reaped(p, cur, wait_for(cur)), 1);
  }
  ck_assert_int_eq(trun_warm_pid(p, 0), 0);
  char why[512];
  char *argv[] = {PY, "-u", "-c", "pass", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv, pool_env, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "died too often") != NULL, "%s", why);
  trun_warm_free(p);
}
END_TEST

START_TEST(never_ready) {
  /* A module that cannot be imported: the pool process says why and the slot is disabled. */
  trun_warm *p = trun_warm_new(1, "trun_no_such_module", NULL, NULL);
  ck_assert_int_eq(trun_warm_fill(p, 0, PY, pass_tail, NULL, pool_env), 0);
  pid_t pid = trun_warm_pid(p, 0);
  int st = wait_for(pid);
  ck_assert_int_eq(trun_warm_reaped(p, pid, st), 1);
  char why[512];
  char *argv[] = {PY, "-u", "-c", "pass", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv, pool_env, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "trun_no_such_module") != NULL, "%s", why);
  ck_assert_int_eq(trun_warm_fill(p, 0, PY, pass_tail, NULL, pool_env), 0); /* disabled: nothing started */
  ck_assert_int_eq(trun_warm_pid(p, 0), 0);
  trun_warm_free(p);
  /* An interpreter that is not there. */
  p = trun_warm_new(1, "", NULL, NULL);
  ck_assert_int_eq(trun_warm_fill(p, 0, "/nonexistent/python3", pass_tail, NULL, pool_env), -1);
  char *argv2[] = {"/nonexistent/python3", "-u", "-c", "pass", NULL};
  ck_assert_int_eq(trun_warm_check(p, 0, argv2, pool_env, why, sizeof(why)), 1);
  ck_assert_msg(strstr(why, "cannot start the pool process") != NULL, "%s", why);
  trun_warm_free(p);
}
END_TEST

/* A bind of 127.0.0.1:port with SO_REUSEPORT (reuseport) or plainly: 0, or the errno. The socket is
 * returned in *fd (-1 on failure). */
static int bind_port(unsigned port, int reuseport, int *fd) {
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  ck_assert_int_ge(s, 0);
  if (reuseport) {
    ck_assert_int_eq(setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    ck_assert_int_eq(setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
  }
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((unsigned short)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int rc = bind(s, (struct sockaddr *)&sin, sizeof(sin)) == 0 ? 0 : errno;
  if (rc) close(s);
  *fd = rc ? -1 : s;
  return rc;
}

/* Which of another user's binds of 127.0.0.1:port get to listen there, from a child that became user nobody:
 * bit i set for the i-th of no option, SO_REUSEADDR, SO_REUSEPORT, both. */
static int others_listen(unsigned port) {
  ck_assert_msg(geteuid() == 0, "this test runs as root: it becomes another user (nobody) to bind the port");
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    int got = 0, one = 1;
    for (int i = 0; i < 4; i++) {
      int x = socket(AF_INET, SOCK_STREAM, 0);
      if (x < 0) _exit(101);
      if (i & 1) setsockopt(x, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (i & 2) setsockopt(x, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
      struct sockaddr_in sin = {.sin_family = AF_INET,
                                .sin_port = htons((unsigned short)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      if (bind(x, (struct sockaddr *)&sin, sizeof(sin)) == 0 && listen(x, 4) == 0) got |= 1 << i;
      close(x);
    }
    _exit(got);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) < 16, "the child as nobody failed (status %d)", st);
  return WEXITSTATUS(st);
}

/* A held port (portheld.h): a plain bind of it fails while it is held, and so does every bind of another
 * user's (SO_REUSEADDR, SO_REUSEPORT, both); NCCL's way (SO_REUSEADDR + SO_REUSEPORT, this user) binds and
 * listens beside it; the held socket that listened and stopped (the relay's close) still holds the port,
 * which refuses connections and can listen again; once the held socket and NCCL's are closed, the port is
 * free. */
START_TEST(port_hold) {
  unsigned port = 0;
  const char *step = "";
  int held = trun_port_hold(&port, &step);
  ck_assert_msg(held >= 0, "trun_port_hold: %s: %s", step, strerror(-held));
  ck_assert_uint_gt(port, 0);
  int fd;
  ck_assert_int_eq(bind_port(port, 0, &fd), EADDRINUSE);
  ck_assert_msg(others_listen(port) == 0, "another user listens on a held port (options mask %d)",
                others_listen(port));
  int ras;
  ck_assert_int_eq(bind_port(port, 1, &ras), 0);
  ck_assert_int_eq(listen(ras, 4), 0);
  ck_assert_int_eq(bind_port(port, 0, &fd), EADDRINUSE);
  ck_assert_int_eq(others_listen(port), 0);
  close(ras);
  /* listened and stopped: still held, refusing */
  ck_assert_int_eq(listen(held, 4), 0);
  ck_assert_int_eq(shutdown(held, SHUT_RD), 0);
  ck_assert_int_eq(bind_port(port, 0, &fd), EADDRINUSE);
  ck_assert_int_eq(others_listen(port), 0);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((unsigned short)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(c, (struct sockaddr *)&sin, sizeof(sin)), -1);
  ck_assert_int_eq(errno, ECONNREFUSED);
  close(c);
  struct sockaddr_in again;
  socklen_t sl = sizeof(again);
  ck_assert_int_eq(listen(held, 4), 0);
  ck_assert_int_eq(getsockname(held, (struct sockaddr *)&again, &sl), 0);
  ck_assert_uint_eq(ntohs(again.sin_port), port);
  close(held);
  ck_assert_int_eq(bind_port(port, 0, &fd), 0);
  close(fd);
}
END_TEST

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  Suite *s = suite_create("warm");
  TCase *tc = tcase_create("warm");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, round_vars);
  tcase_add_test(tc, check_says_why);
  tcase_add_test(tc, handover);
  tcase_add_test(tc, large_handover);
  tcase_add_test(tc, not_ready_yet);
  tcase_add_test(tc, dies_before_use);
  tcase_add_test(tc, never_ready);
  tcase_add_test(tc, port_hold);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
