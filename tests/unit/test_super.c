/* The child supervisor's loop side (agent/proc/super.h), as the hostfile launcher uses it: every child is
 * reaped and handed over with its exit status (exit codes and signals, several children at once), a caught
 * signal reaches on_signal, the grace timer fires once and can be stopped, and closing frees everything
 * once the loop has run (ASan checks the last). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "super.h"
#include "unit.h"

typedef struct {
  uv_loop_t loop;
  trun_super *s;
  pid_t pid[3];
  int status[3];
  int reaped;
  int sig;
  int graces;
} box;

static void on_exit_cb(void *arg, pid_t pid, int status) {
  box *b = arg;
  for (int i = 0; i < 3; i++)
    if (b->pid[i] == pid) b->status[i] = status;
  if (++b->reaped == 3) uv_stop(&b->loop);
}

static void on_signal_cb(void *arg, int sig) {
  box *b = arg;
  b->sig = sig;
  uv_stop(&b->loop);
}

static void on_grace_cb(void *arg) {
  box *b = arg;
  b->graces++;
  uv_stop(&b->loop);
}

static const int caught[] = {SIGUSR1, SIGUSR2};

static void open_box(box *b) {
  memset(b, 0, sizeof(*b));
  ck_assert_int_eq(uv_loop_init(&b->loop), 0);
  trun_super_opts o = {.on_exit = on_exit_cb,
                       .on_signal = on_signal_cb,
                       .on_grace = on_grace_cb,
                       .arg = b,
                       .signals = caught,
                       .nsignals = 2};
  ck_assert_int_eq(trun_super_start(&b->loop, &o, &b->s), 0);
}

static void close_box(box *b) {
  trun_super_close(b->s);
  uv_run(&b->loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&b->loop), 0);
}

START_TEST(test_reaps_every_child_with_its_status) {
  box b;
  open_box(&b);
  for (int i = 0; i < 3; i++) {
    b.pid[i] = fork();
    ck_assert_int_ge(b.pid[i], 0);
    if (b.pid[i] == 0) {
      if (i == 2) raise(SIGKILL);
      _exit(i == 0 ? 0 : 7);
    }
  }
  uv_run(&b.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(b.reaped, 3);
  ck_assert(WIFEXITED(b.status[0]) && WEXITSTATUS(b.status[0]) == 0);
  ck_assert(WIFEXITED(b.status[1]) && WEXITSTATUS(b.status[1]) == 7);
  ck_assert(WIFSIGNALED(b.status[2]) && WTERMSIG(b.status[2]) == SIGKILL);
  ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* nothing left to reap */
  close_box(&b);
}
END_TEST

START_TEST(test_signal_and_grace) {
  box b;
  open_box(&b);
  raise(SIGUSR2);
  uv_run(&b.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(b.sig, SIGUSR2);
  trun_super_grace(b.s, 1);
  uv_run(&b.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(b.graces, 1);
  /* Stopped before it runs out: never fires (the loop ends with nothing active but the signal handles, so
   * run it once without blocking). */
  trun_super_grace(b.s, 60000);
  trun_super_grace_stop(b.s);
  uv_run(&b.loop, UV_RUN_NOWAIT);
  ck_assert_int_eq(b.graces, 1);
  close_box(&b);
}
END_TEST

START_TEST(test_too_many_signals) {
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  int many[TRUN_SUPER_MAX_SIGNALS + 1] = {0};
  trun_super *s = (trun_super *)&loop;
  trun_super_opts o = {.signals = many, .nsignals = TRUN_SUPER_MAX_SIGNALS + 1};
  ck_assert_int_eq(trun_super_start(&loop, &o, &s), UV_EINVAL);
  ck_assert_ptr_null(s);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *super_suite(void) {
  Suite *s = suite_create("super");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_reaps_every_child_with_its_status);
  tcase_add_test(tc, test_signal_and_grace);
  tcase_add_test(tc, test_too_many_signals);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(super_suite()); }
