/* The exit-time guard (agent/proc/watchdog.h): it kills the sessions of this agent's workers when the agent
 * goes, and nothing else: a pid that an unrelated process took over after a worker ended is spared; the
 * remnants of a reaped worker's session (a grandchild left in it) are still killed, whoever reaped it. */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "unit.h"
#include "watchdog.h"

/* A child that leads its own session and waits to be killed. */
static pid_t session_leader(void) {
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) {
    trun_closefrom(3); /* not the guard's pipe: it must see the agent's end */
    setsid();
    for (;;) pause();
  }
  /* The guard kills sessions: hand the pid over once the child leads its own (the agent's workers do before
   * their exec), or a loaded box lets the guard look for a session that is not there yet. */
  for (int i = 0; i < 3000 && getsid(p) != p; i++) usleep(1000);
  ck_assert_int_eq(getsid(p), p);
  return p;
}

/* Waits (bounded, generous) for pid to be gone: reaped when it is our child, else absent or a zombie. */
static int gone(pid_t pid, int ours) {
  for (int i = 0; i < 3000; i++) {
    if (ours) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) return 1;
    } else {
      char path[64], buf[512] = "";
      snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
      FILE *f = fopen(path, "r");
      if (f == NULL) return 1;
      size_t n = fread(buf, 1, sizeof(buf) - 1, f);
      fclose(f);
      buf[n] = '\0';
      char *p = strrchr(buf, ')');
      if (p && p[1] == ' ' && p[2] == 'Z') return 1;
    }
    usleep(10000);
  }
  return 0;
}

/* Stops the guard and waits until it has done its work and exited. */
static void stop_guard(trun_watchdog *w) {
  trun_watchdog_stop(w);
  int st;
  ck_assert_int_eq(waitpid(w->pid, &st, 0), w->pid);
}

START_TEST(test_kills_live_workers) {
  trun_watchdog w;
  ck_assert_int_eq(trun_watchdog_start(&w), 0);
  pid_t a = session_leader(), b = session_leader();
  trun_watchdog_add(&w, a);
  trun_watchdog_add(&w, b);
  stop_guard(&w);
  ck_assert(gone(a, 1));
  ck_assert(gone(b, 1));
}
END_TEST

/* A worker with pid P ended and was reaped; P now belongs to an unrelated session leader (its start time is
 * not the worker's): the guard leaves it alone, whether the agent said the worker was reaped or not. */
START_TEST(test_spares_reused_pid) {
  trun_watchdog w;
  ck_assert_int_eq(trun_watchdog_start(&w), 0);
  pid_t x = session_leader(), y = session_leader();
  uint64_t sx = trun_watchdog_start_time(x), sy = trun_watchdog_start_time(y);
  ck_assert_uint_gt(sx, 0);
  ck_assert_uint_gt(sx, 5);
  trun_watchdog_add_at(&w, x, sx - 5); /* the earlier worker that had pid x */
  trun_watchdog_gone(&w, x);
  trun_watchdog_add_at(&w, y, sy + 1000); /* never reaped as far as the guard knows */
  stop_guard(&w);
  usleep(100000);
  ck_assert_int_eq(kill(x, 0), 0);
  ck_assert_int_eq(kill(y, 0), 0);
  int st;
  ck_assert_int_eq(waitpid(x, &st, WNOHANG), 0);
  ck_assert_int_eq(waitpid(y, &st, WNOHANG), 0);
  kill(x, SIGKILL);
  kill(y, SIGKILL);
  ck_assert(gone(x, 1));
  ck_assert(gone(y, 1));
}
END_TEST

/* A worker that left a grandchild in its session and exited; the caller reaps it. Returns the worker's pid
 * (registered with the guard while it ran) and the grandchild's in *grandchild. */
static pid_t worker_leaving_grandchild(trun_watchdog *w, pid_t *grandchild) {
  int go[2], back[2];
  ck_assert_int_eq(pipe(go), 0);
  ck_assert_int_eq(pipe(back), 0);
  /* The child keeps go[0] and back[1] as fds 3 and 4 and closes everything else. */
  ck_assert_int_eq(dup2(go[0], 100), 100);
  ck_assert_int_eq(dup2(back[1], 101), 101);
  pid_t c = fork();
  ck_assert_int_ge(c, 0);
  if (c == 0) {
    if (dup2(100, 3) < 0 || dup2(101, 4) < 0) _exit(4);
    trun_closefrom(5); /* nothing of the guard's: it must see the agent's end */
    setsid();
    pid_t g = fork();
    if (g == 0) {
      trun_closefrom(3);
      for (;;) pause();
    }
    char b;
    if (write(4, &g, sizeof(g)) != (ssize_t)sizeof(g) || read(3, &b, 1) != 1) _exit(3);
    _exit(0);
  }
  close(100);
  close(101);
  pid_t g = 0;
  ck_assert_int_eq(read(back[0], &g, sizeof(g)), (ssize_t)sizeof(g));
  trun_watchdog_add(w, c);
  ck_assert_int_eq(write(go[1], "x", 1), 1);
  for (int i = 0; i < 2; i++) {
    close(go[i]);
    close(back[i]);
  }
  *grandchild = g;
  return c;
}

/* A worker leaves a grandchild in its session and exits; the test reaps it and, if told_gone, tells the
 * guard (as the agent does), else not (as when init reaps it first); then the guard stops: the grandchild
 * must be gone (killed, even if the check fails). */
static void guard_kills_remnant(int told_gone) {
  trun_watchdog w;
  ck_assert_int_eq(trun_watchdog_start(&w), 0);
  pid_t g, c = worker_leaving_grandchild(&w, &g);
  int st;
  ck_assert_int_eq(waitpid(c, &st, 0), c);
  if (told_gone) trun_watchdog_gone(&w, c);
  ck_assert_int_eq(kill(g, 0), 0);
  stop_guard(&w);
  int killed = gone(g, 0);
  if (!killed) kill(g, SIGKILL);
  ck_assert_msg(killed, "the worker's grandchild %d outlived the guard", (int)g);
}

/* A worker that left a grandchild in its session and exited (reaped, the agent told the guard): the
 * session never emptied, so the grandchild is the worker's and is killed. */
START_TEST(test_kills_remnants_of_reaped_worker) { guard_kills_remnant(1); }
END_TEST

/* The race check-fresh once lost: the agent died before it reaped its worker, the worker died of PDEATHSIG
 * and init reaped it before the guard looked, so the guard never heard the leader was gone. A process of the
 * session born before the agent died is still the worker's and is killed. Here the test reaps the worker
 * without telling the guard, as init would. */
START_TEST(test_kills_remnants_of_leader_reaped_by_another) { guard_kills_remnant(0); }
END_TEST

static Suite *watchdog_suite(void) {
  Suite *s = suite_create("watchdog");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_kills_live_workers);
  tcase_add_test(tc, test_spares_reused_pid);
  tcase_add_test(tc, test_kills_remnants_of_reaped_worker);
  tcase_add_test(tc, test_kills_remnants_of_leader_reaped_by_another);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(watchdog_suite()); }
