/* torch's file-timer watchdog (agent/observe/ftimer.h): the request lines of torch 1.13 and 2.x clients,
 * bad lines refused; on a real loop and FIFO: an expired scope reaches the callback with its signal, a
 * release removes it, a dead pid's timers go, malformed / huge / flooding writers never crash it and its
 * table stays bounded, closing removes the FIFO. */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "ftimer.h"
#include "unit.h"

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(test_parse) {
  trun_ftimer_req r;
  char err[160];
  /* torch 1.13 and 2.6 both write this (json.dumps of version, pid, scope_id, expiration_time, signal). */
  const char *ok =
      "{\"version\": 1, \"pid\": 4242, \"scope_id\": \"train_step\", \"expiration_time\": "
      "1795627754.921, \"signal\": 9}";
  ck_assert_int_eq(trun_ftimer_parse(ok, strlen(ok), &r, err, sizeof(err)), 0);
  ck_assert_int_eq(r.pid, 4242);
  ck_assert_str_eq(r.scope, "train_step");
  ck_assert(r.expiration_time > 1795627754.9 && r.expiration_time < 1795627755.0);
  ck_assert_int_eq(r.signal, 9);
  free(r.scope);
  const char *rel =
      "{\"version\": 1, \"pid\": 7, \"scope_id\": \"s\", \"expiration_time\": -1, \"signal\": 0}";
  ck_assert_int_eq(trun_ftimer_parse(rel, strlen(rel), &r, err, sizeof(err)), 0);
  ck_assert(r.expiration_time < 0);
  free(r.scope);
  const char *bad[] = {"",
                       "not json",
                       "[1,2]",
                       "{\"pid\": \"7\", \"scope_id\": \"s\", \"expiration_time\": 1}",
                       "{\"pid\": 0, \"scope_id\": \"s\", \"expiration_time\": 1}",
                       "{\"pid\": -5, \"scope_id\": \"s\", \"expiration_time\": 1}",
                       "{\"pid\": 99999999999, \"scope_id\": \"s\", \"expiration_time\": 1}",
                       "{\"pid\": 7, \"scope_id\": 3, \"expiration_time\": 1}",
                       "{\"pid\": 7, \"scope_id\": \"s\"}",
                       "{\"pid\": 7, \"scope_id\": \"s\", \"expiration_time\": \"soon\"}",
                       "{\"pid\": 7, \"scope_id\": \"s\", \"expiration_time\": 1, \"signal\": 1000}",
                       "{\"pid\": 7, \"scope_id\": \"s\", \"expiration_time\": 1, \"signal\": 9.5}",
                       "{\"pid\": 7, \"pid\": 8, \"scope_id\": \"s\", \"expiration_time\": 1}"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    ck_assert_msg(trun_ftimer_parse(bad[i], strlen(bad[i]), &r, err, sizeof(err)) < 0, "accepted: %s",
                  bad[i]);
    ck_assert_msg(err[0] != '\0', "no reason for: %s", bad[i]);
  }
}
END_TEST

typedef struct {
  pid_t pid;
  char scope[64];
  int signal;
  int calls;
} seen;

static void on_expired(void *arg, pid_t pid, const char *scope, int sig) {
  seen *s = arg;
  s->pid = pid;
  snprintf(s->scope, sizeof(s->scope), "%s", scope);
  s->signal = sig;
  s->calls++;
}

static void send_line(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_line(const char *path, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  int fd = open(path, O_WRONLY | O_NONBLOCK); /* as torch's client: fails when nobody reads */
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, line, (size_t)n), n);
  close(fd);
}

/* Runs the loop until cond or 10 s. */
#define RUN_UNTIL(loop, cond)                                     \
  do {                                                            \
    double until_ = wall() + 10;                                  \
    while (!(cond) && wall() < until_) uv_run(loop, UV_RUN_ONCE); \
  } while (0)

static pid_t sleeper(void) {
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) {
    pause();
    _exit(0);
  }
  return p;
}

static void reap(pid_t p) {
  kill(p, SIGKILL);
  waitpid(p, NULL, 0);
}

START_TEST(test_serve) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  char dir[] = "/tmp/trun-ftimer-XXXXXX", path[128], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/timer", dir);
  /* an existing file at the path is replaced by the FIFO, as torch does */
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  seen s = {0};
  trun_ftimer *t = trun_ftimer_open(&loop, path, on_expired, &s, err, sizeof(err));
  ck_assert_msg(t != NULL, "%s", err);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert(S_ISFIFO(st.st_mode));
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  pid_t a = sleeper(), b = sleeper();
  /* a: released before it expires; b: expires with SIGTERM (its earliest signalled scope) */
  send_line(
      path,
      "{\"version\": 1, \"pid\": %d, \"scope_id\": \"rel\", \"expiration_time\": %.3f, \"signal\": 9}\n",
      (int)a, wall() + 0.5);
  send_line(
      path,
      "{\"version\": 1, \"pid\": %d, \"scope_id\": \"late\", \"expiration_time\": %.3f, \"signal\": 9}\n"
      "{\"version\": 1, \"pid\": %d, \"scope_id\": \"early\", \"expiration_time\": %.3f, \"signal\": 15}\n",
      (int)b, wall() + 0.6, (int)b, wall() + 0.4);
  RUN_UNTIL(&loop, trun_ftimer_count(t) == 3);
  ck_assert_int_eq(trun_ftimer_count(t), 3);
  send_line(path,
            "{\"version\": 1, \"pid\": %d, \"scope_id\": \"rel\", \"expiration_time\": -1, \"signal\": 0}\n",
            (int)a);
  RUN_UNTIL(&loop, trun_ftimer_count(t) == 2);
  ck_assert_int_eq(trun_ftimer_count(t), 2);
  RUN_UNTIL(&loop, s.calls > 0); /* the expiry */
  /* both of b's scopes expire within the same pass or the earliest alone: the signal is the earliest's */
  ck_assert_int_eq(s.calls, 1);
  ck_assert_int_eq(s.pid, b);
  ck_assert_str_eq(s.scope, "early");
  ck_assert_int_eq(s.signal, 15);
  ck_assert_int_eq(trun_ftimer_count(t), 0); /* every timer of a reaped pid goes */

  /* garbage, a line over the limit, a bad pid: logged and skipped; a good line after them still counts */
  int fd = open(path, O_WRONLY | O_NONBLOCK);
  ck_assert_int_ge(fd, 0);
  char big[TRUN_FTIMER_MAX_LINE + 100];
  memset(big, 'x', sizeof(big));
  ck_assert_int_eq(write(fd, "garbage\n{\"pid\": -1}\n\n", 21), 21);
  ck_assert_int_eq(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
  ck_assert_int_eq(write(fd, "\n", 1), 1);
  close(fd);
  send_line(
      path,
      "{\"version\": 1, \"pid\": %d, \"scope_id\": \"after\", \"expiration_time\": %.3f, \"signal\": 9}\n",
      (int)a, wall() + 600);
  RUN_UNTIL(&loop, trun_ftimer_count(t) == 1);
  ck_assert_int_eq(trun_ftimer_count(t), 1);
  /* a's death drops its timer (within a pass) without any callback */
  reap(a);
  RUN_UNTIL(&loop, trun_ftimer_count(t) == 0);
  ck_assert_int_eq(trun_ftimer_count(t), 0);
  ck_assert_int_eq(s.calls, 1);

  /* a flood of distinct scopes: the table stays bounded */
  fd = open(path, O_WRONLY | O_NONBLOCK);
  ck_assert_int_ge(fd, 0);
  for (int i = 0; i < TRUN_FTIMER_MAX_TIMERS + 200; i++) {
    char line[200];
    int n = snprintf(
        line, sizeof(line),
        "{\"version\": 1, \"pid\": %d, \"scope_id\": \"s%d\", \"expiration_time\": %.3f, \"signal\": 0}\n",
        (int)b, i, wall() + 600);
    while (write(fd, line, (size_t)n) < 0) {
      ck_assert_int_eq(errno, EAGAIN);
      uv_run(&loop, UV_RUN_NOWAIT); /* the pipe is full: let the watchdog read */
    }
  }
  close(fd);
  RUN_UNTIL(&loop, trun_ftimer_count(t) == TRUN_FTIMER_MAX_TIMERS);
  ck_assert_int_eq(trun_ftimer_count(t), TRUN_FTIMER_MAX_TIMERS);
  trun_ftimer_clear(t);
  ck_assert_int_eq(trun_ftimer_count(t), 0);
  ck_assert(trun_ftimer_last_progress(t) > wall() - 5);
  reap(b);
  trun_ftimer_close(t);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_ne(stat(path, &st), 0); /* the FIFO is gone */
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  rmdir(dir);
}
END_TEST

/* A writer that keeps the FIFO full cannot hold the loop: one wake-up reads at most 64 KiB. 3000 requests
 * (~300 KiB, in a FIFO grown to hold them) take several turns of the loop, not one. */
START_TEST(test_reads_bounded_per_wakeup) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  char dir[] = "/tmp/trun-ftimer-XXXXXX", path[128], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/timer", dir);
  seen s = {0};
  trun_ftimer *t = trun_ftimer_open(&loop, path, on_expired, &s, err, sizeof(err));
  ck_assert_msg(t != NULL, "%s", err);
  pid_t a = sleeper();
  int fd = open(path, O_WRONLY | O_NONBLOCK);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_ge(fcntl(fd, F_SETPIPE_SZ, 1 << 20), 1 << 20);
  size_t total = 0;
  for (int i = 0; i < 3000; i++) {
    char line[200];
    int n = snprintf(line, sizeof(line),
                     "{\"version\": 1, \"pid\": %d, \"scope_id\": \"s%d\", \"expiration_time\": %.3f, "
                     "\"signal\": 9}\n",
                     (int)a, i, wall() + 600);
    ck_assert_int_eq(write(fd, line, (size_t)n), n);
    total += (size_t)n;
  }
  ck_assert_uint_gt(total, 4 * 65536);
  uv_run(&loop, UV_RUN_NOWAIT);
  size_t first = trun_ftimer_count(t);
  ck_assert_msg(first > 0 && first < 3000, "one turn of the loop read %zu of 3000 requests", first);
  RUN_UNTIL(&loop, trun_ftimer_count(t) == 3000);
  ck_assert_int_eq(trun_ftimer_count(t), 3000);
  close(fd);
  reap(a);
  trun_ftimer_close(t);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  rmdir(dir);
}
END_TEST

/* Requests for pids that are not the agent's workers are refused when they arrive: they take no place in
 * the table, never expire into a callback, and 3000 of them make a bounded number of log lines (the first
 * few, then a count at most every 10 s and at close), while a worker's request still counts. */
typedef struct {
  seen s;
  pid_t worker;
} gate;

static void on_expired_gated(void *arg, pid_t pid, const char *scope, int sig) {
  on_expired(&((gate *)arg)->s, pid, scope, sig);
}

static int only_worker(void *arg, pid_t pid) { return pid == ((gate *)arg)->worker; }

START_TEST(test_refused) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  char dir[] = "/tmp/trun-ftimer-XXXXXX", path[128], log[160], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/timer", dir);
  snprintf(log, sizeof(log), "%s/stderr", dir);
  int saved = dup(2), lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_ge(lfd, 0);
  ck_assert_int_eq(dup2(lfd, 2), 2); /* the warnings, to count them */
  close(lfd);
  gate g = {.worker = sleeper()};
  pid_t other = sleeper(); /* a live process that is not a worker */
  trun_ftimer *t = trun_ftimer_open(&loop, path, on_expired_gated, &g, err, sizeof(err));
  ck_assert_msg(t != NULL, "%s", err);
  trun_ftimer_set_accept(t, only_worker);
  int fd = open(path, O_WRONLY | O_NONBLOCK);
  ck_assert_int_ge(fd, 0);
  for (int i = 0; i < 3000; i++) {
    char line[200];
    int n = snprintf(line, sizeof(line),
                     "{\"version\": 1, \"pid\": %d, \"scope_id\": \"s%d\", \"expiration_time\": %.3f, "
                     "\"signal\": 9}\n",
                     (int)(i % 2 ? other : 1), i, i % 3 ? wall() - 1 : wall() + 600);
    while (write(fd, line, (size_t)n) < 0) {
      ck_assert_int_eq(errno, EAGAIN);
      uv_run(&loop, UV_RUN_NOWAIT);
    }
  }
  close(fd);
  send_line(path,
            "{\"version\": 1, \"pid\": %d, \"scope_id\": \"real\", \"expiration_time\": %.3f, "
            "\"signal\": 15}\n",
            (int)g.worker, wall() + 0.3);
  RUN_UNTIL(&loop, g.s.calls > 0);
  ck_assert_int_eq(trun_ftimer_refused(t), 3000);
  ck_assert_int_eq(g.s.calls, 1); /* only the worker's scope */
  ck_assert_int_eq(g.s.pid, g.worker);
  ck_assert_str_eq(g.s.scope, "real");
  ck_assert_int_eq(trun_ftimer_count(t), 0);
  trun_ftimer_close(t);
  uv_run(&loop, UV_RUN_DEFAULT);
  fflush(stderr);
  ck_assert_int_eq(dup2(saved, 2), 2);
  close(saved);
  FILE *f = fopen(log, "r");
  ck_assert_ptr_nonnull(f);
  char line[1024];
  int lines = 0, counted = 0;
  while (fgets(line, sizeof(line), f)) {
    lines++;
    if (strstr(line, "(3000 in all)")) counted = 1;
  }
  fclose(f);
  ck_assert_msg(lines <= 12, "%d log lines for 3000 refused requests", lines);
  ck_assert_msg(counted, "the count of refused requests was not said at close");
  reap(g.worker);
  reap(other);
  unlink(log);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  rmdir(dir);
}
END_TEST

START_TEST(test_open_errors) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  char err[256] = "";
  seen s = {0};
  ck_assert_ptr_null(trun_ftimer_open(&loop, "/nonexistent-dir/timer", on_expired, &s, err, sizeof(err)));
  ck_assert_ptr_nonnull(strstr(err, "mkfifo(/nonexistent-dir/timer)"));
  ck_assert_ptr_null(trun_ftimer_open(&loop, "/tmp", on_expired, &s, err, sizeof(err)));
  ck_assert_ptr_nonnull(strstr(err, "is a directory"));
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *ftimer_suite(void) {
  Suite *s = suite_create("ftimer");
  TCase *tc = tcase_create("ftimer");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_parse);
  tcase_add_test(tc, test_serve);
  tcase_add_test(tc, test_reads_bounded_per_wakeup);
  tcase_add_test(tc, test_refused);
  tcase_add_test(tc, test_open_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  return unit_run(ftimer_suite());
}
