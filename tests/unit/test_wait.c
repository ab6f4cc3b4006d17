/* Waits that say what they wait for (agent/rdzv/rdzv.h, "waits"): the report schedule (1, 5, 15, 45 s, then
 * every 60 s), the line (what, what it has, the last failure, the time-out left and its key), the hook's
 * reports and its last call, and the cause of a failed connect as the store client reports it
 * (store/client.h on_connect_error) against real sockets: a name that does not resolve, a refused port, a
 * real trun_server whose allow-list refuses loopback, and a listener that closes every connection. */
#include <signal.h>

#include "client.h"
#include "rdzv.h"
#include "unit.h"

typedef struct {
  int calls, done_calls;
  char kind[32], what[256], have[256], cause[512];
  double waited, left;
} hook_seen;

static void hook(void *arg, const trun_wait_info *w) {
  hook_seen *h = arg;
  h->calls++;
  h->done_calls += w->done;
  snprintf(h->kind, sizeof(h->kind), "%s", w->kind);
  snprintf(h->what, sizeof(h->what), "%s", w->what);
  snprintf(h->have, sizeof(h->have), "%s", w->have);
  snprintf(h->cause, sizeof(h->cause), "%s", w->cause);
  h->waited = w->waited_s;
  h->left = w->left_s;
}

/* Moves w's clock back by s seconds, as if it had waited that long. */
static void age(trun_wait *w, double s) {
  w->start -= s;
  w->next -= s;
  if (w->deadline > 0) w->deadline -= s;
}

START_TEST(test_schedule) {
  trun_wait w;
  hook_seen h = {0};
  trun_wait_begin(&w, "round", 600, "join_timeout", hook, &h, "the other nodes of round %d", 3);
  ck_assert_int_eq(trun_wait_due(&w), 0); /* a wait that ends within a second says nothing */
  trun_wait_end(&w);
  ck_assert_int_eq(h.calls, 0);

  trun_wait_begin(&w, "round", 600, "join_timeout", hook, &h, "the other nodes of round %d", 3);
  static const double at[] = {1, 5, 15, 45, 105, 165, 225};
  double aged = 0;
  for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
    ck_assert_double_eq_tol(w.next - w.start, at[i], 1e-6);
    age(&w, at[i] - 0.5 - aged);
    aged = at[i] - 0.5;
    ck_assert_msg(!trun_wait_due(&w), "report %zu is due half a second early", i);
    age(&w, 0.6);
    aged += 0.6;
    ck_assert_msg(trun_wait_due(&w), "report %zu is not due at %.0f s", i, at[i]);
    trun_wait_report(&w);
    ck_assert_int_eq(h.calls, (int)i + 1);
    ck_assert_int_eq(h.done_calls, 0);
  }
  ck_assert_str_eq(h.kind, "round");
  ck_assert_str_eq(h.what, "the other nodes of round 3");
  ck_assert_double_eq_tol(h.waited, 225.1, 0.5);
  ck_assert_double_eq_tol(h.left, 600 - 225.1, 0.5);
  trun_wait_end(&w);
  ck_assert_int_eq(h.done_calls, 1); /* a wait that reported says that it ended */
  ck_assert_int_eq(trun_wait_due(&w), 0);
  trun_wait_end(&w); /* twice: nothing more */
  ck_assert_int_eq(h.calls, 8);
}
END_TEST

/* A report that comes late (the wait's slices took long) does not fire the next one at once. */
START_TEST(test_late_report) {
  trun_wait w;
  trun_wait_begin(&w, "store", 0, NULL, NULL, NULL, "x");
  age(&w, 50); /* past the reports at 1, 5, 15 and 45 s */
  ck_assert(trun_wait_due(&w));
  trun_wait_report(&w);
  ck_assert(!trun_wait_due(&w));
  ck_assert(w.next - w.start >= 50.9);
  trun_wait_end(&w);
}
END_TEST

START_TEST(test_line) {
  trun_wait w;
  char line[1024];
  trun_wait_begin(&w, "store", 900, "join_timeout", NULL, NULL, "the rendezvous store at %s:%d", "h", 29500);
  trun_wait_line(&w, w.start + 12.2, line, sizeof(line));
  ck_assert_str_eq(line,
                   "waiting 12 s for the rendezvous store at h:29500; time-out in 888 s (join_timeout)");
  snprintf(w.have, sizeof(w.have), "1 of 2 nodes joined: node 0 (a); missing node ranks: 1");
  snprintf(w.cause, sizeof(w.cause), "connection refused");
  trun_wait_line(&w, w.start + 5, line, sizeof(line));
  ck_assert_str_eq(
      line,
      "waiting 5 s for the rendezvous store at h:29500; 1 of 2 nodes joined: node 0 (a); missing node "
      "ranks: 1; last failure: connection refused; time-out in 895 s (join_timeout)");
  trun_wait_line(&w, w.start + 1000, line, sizeof(line));
  ck_assert_ptr_nonnull(strstr(line, "time-out in 0 s"));
  trun_wait_begin(&w, "round_end", 0, NULL, NULL, NULL, "the others");
  trun_wait_line(&w, w.start + 1, line, sizeof(line));
  ck_assert_str_eq(line, "waiting 1 s for the others; no time-out");
  /* A line longer than the buffer is cut, never overrun. */
  memset(w.have, 'x', sizeof(w.have) - 1);
  w.have[sizeof(w.have) - 1] = '\0';
  char small[64];
  trun_wait_line(&w, w.start + 1, small, sizeof(small));
  ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

START_TEST(test_connect_cause_words) {
  char out[600];
  trun_client_connect_cause(TRUN_CONNECT_RESOLVE, EHOSTUNREACH,
                            "cannot resolve 'n': Name or service not known", "n", out, sizeof(out));
  ck_assert_ptr_nonnull(strstr(out, "the name 'n' does not resolve"));
  ck_assert_ptr_nonnull(strstr(out, "headless Service publishes a pod's name only once the pod is ready"));
  trun_client_connect_cause(TRUN_CONNECT_TCP, ECONNREFUSED, "connect: Connection refused", "h", out,
                            sizeof(out));
  ck_assert_ptr_nonnull(strstr(out, "connection refused"));
  trun_client_connect_cause(TRUN_CONNECT_TCP, EHOSTUNREACH, "connect: No route to host", "h", out,
                            sizeof(out));
  ck_assert_ptr_nonnull(strstr(out, "no route to the host"));
  trun_client_connect_cause(TRUN_CONNECT_TCP, ENETUNREACH, "connect: Network is unreachable", "h", out,
                            sizeof(out));
  ck_assert_ptr_nonnull(strstr(out, "no route to the host"));
  trun_client_connect_cause(TRUN_CONNECT_TCP, ETIMEDOUT, "connect: Connection timed out", "h", out,
                            sizeof(out));
  ck_assert_ptr_nonnull(strstr(out, "timed out"));
  trun_client_connect_cause(TRUN_CONNECT_HANDSHAKE, ECONNRESET, "VALIDATE/PING handshake failed", "h", out,
                            sizeof(out));
  ck_assert_ptr_nonnull(strstr(out, "allow-list"));
  trun_client_connect_cause(TRUN_CONNECT_TCP, EACCES, "connect: Permission denied", "h", out, sizeof(out));
  ck_assert_str_eq(out, "connect: Permission denied");
}
END_TEST

/* ---- the client's reports against real sockets ------------------------------------------------------ */

typedef struct {
  int calls, stage, err;
  char said[256];
} conn_seen;

static void on_err(void *arg, int stage, int err, const char *said) {
  conn_seen *c = arg;
  c->calls++;
  c->stage = stage;
  c->err = err;
  snprintf(c->said, sizeof(c->said), "%s", said);
}

static int try_connect(const char *host, int port, conn_seen *seen) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = host;
  o.port = port;
  o.connect_timeout_ms = 400;
  o.quiet_connect = 1;
  o.on_connect_error = on_err;
  o.on_connect_error_arg = seen;
  trun_client *c = NULL;
  int rc = trun_client_connect(&o, &c);
  if (c) trun_client_close(c);
  return rc;
}

/* A loopback port that nothing listens on: bound, then closed. */
static int closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

START_TEST(test_client_unresolvable) {
  conn_seen s = {0};
  ck_assert_int_lt(try_connect("nosuchhost.invalid", 29500, &s), 0);
  ck_assert_int_ge(s.calls, 1);
  ck_assert_int_eq(s.stage, TRUN_CONNECT_RESOLVE);
  ck_assert_ptr_nonnull(strstr(s.said, "cannot resolve 'nosuchhost.invalid'"));
}
END_TEST

START_TEST(test_client_refused) {
  conn_seen s = {0};
  ck_assert_int_eq(try_connect("127.0.0.1", closed_port(), &s), -ETIMEDOUT);
  ck_assert_int_ge(s.calls, 2); /* every retry reports */
  ck_assert_int_eq(s.stage, TRUN_CONNECT_TCP);
  ck_assert_int_eq(s.err, ECONNREFUSED);
}
END_TEST

START_TEST(test_client_allow_list) {
  unit_server us;
  int port = unit_server_start(&us, NULL);
  ck_assert_int_gt(port, 0);
  ck_assert_int_eq(trun_server_allow(us.srv, "10.0.0.0/8"), 0);
  trun_server_allow_enforce(us.srv, 1);
  conn_seen s = {0};
  ck_assert_int_lt(try_connect("127.0.0.1", port, &s), 0);
  ck_assert_int_ge(s.calls, 1);
  ck_assert_int_eq(s.stage, TRUN_CONNECT_HANDSHAKE);
  ck_assert_int_eq(s.err, ECONNRESET);
  char words[600];
  trun_client_connect_cause(s.stage, s.err, s.said, "127.0.0.1", words, sizeof(words));
  ck_assert_ptr_nonnull(strstr(words, "allow-list"));
  trun_server_stats st;
  unit_server_stats(&us, &st);
  ck_assert_uint_ge(st.refused, 1);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_client_connects_silently) {
  unit_server us;
  int port = unit_server_start(&us, NULL);
  ck_assert_int_gt(port, 0);
  conn_seen s = {0};
  ck_assert_int_eq(try_connect("127.0.0.1", port, &s), 0);
  ck_assert_int_eq(s.calls, 0); /* no failure, no report */
  unit_server_stop(&us);
}
END_TEST

static Suite *wait_suite(void) {
  Suite *s = suite_create("wait");
  TCase *tc = tcase_create("reports");
  tcase_add_test(tc, test_schedule);
  tcase_add_test(tc, test_late_report);
  tcase_add_test(tc, test_line);
  tcase_add_test(tc, test_connect_cause_words);
  suite_add_tcase(s, tc);
  tc = tcase_create("client");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_client_unresolvable);
  tcase_add_test(tc, test_client_refused);
  tcase_add_test(tc, test_client_allow_list);
  tcase_add_test(tc, test_client_connects_silently);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  return unit_run(wait_suite());
}
