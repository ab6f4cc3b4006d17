/* The health probe server (agent/observe/metrics.h trun_metrics_start_probe, TORCHELASTIC_HEALTH_CHECK_PORT):
 * any path answers the probe's JSON, 200 alive / 503 not, HEAD without a body, other methods 405; with more
 * idle clients than TRUN_METRICS_MAX_CONNS holding connections, a probe still gets its answer (the oldest
 * unanswered connection makes room); every handle is released on close. */
#include "metrics.h"
#include "unit.h"

typedef struct {
  int port, idle;
  char req[256];
  char reply[4096];
  uv_async_t *done;
} probe_case;

static void *client(void *arg) {
  probe_case *c = arg;
  int held[TRUN_METRICS_MAX_CONNS * 2];
  for (int i = 0; i < c->idle; i++) held[i] = unit_connect(c->port);
  if (c->idle) usleep(300000); /* the loop accepts them */
  size_t got = 0;
  int fd = unit_connect(c->port);
  if (fd >= 0) {
    unit_send(fd, c->req, strlen(c->req));
    ssize_t k;
    while (got < sizeof(c->reply) - 1 && (k = recv(fd, c->reply + got, sizeof(c->reply) - 1 - got, 0)) > 0)
      got += (size_t)k;
    close(fd);
  }
  c->reply[got] = '\0';
  for (int i = 0; i < c->idle; i++)
    if (held[i] >= 0) close(held[i]);
  uv_async_send(c->done);
  return NULL;
}

static int probe(void *arg, trun_buf *out) {
  int alive = *(int *)arg;
  const char *body = alive ? "{\"alive\": true}\n" : "{\"alive\": false}\n";
  trun_buf_append(out, body, strlen(body));
  return alive;
}

static void on_done(uv_async_t *a) { uv_stop(a->loop); }

static const char *ask(const char *req, int alive, int idle) {
  static probe_case c;
  static int flag;
  memset(&c, 0, sizeof(c));
  flag = alive;
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_async_t done;
  uv_async_init(&loop, &done, on_done);
  trun_metrics *m = NULL;
  ck_assert_int_eq(trun_metrics_start_probe(&loop, "127.0.0.1", 0, probe, &flag, &m, &c.port), 0);
  snprintf(c.req, sizeof(c.req), "%s", req);
  c.idle = idle;
  c.done = &done;
  pthread_t t;
  pthread_create(&t, NULL, client, &c);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  trun_metrics_close(m);
  uv_close((uv_handle_t *)&done, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  return c.reply;
}

START_TEST(test_probe_answers) {
  const char *r = ask("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 1, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r);
  ck_assert_ptr_nonnull(strstr(r, "Content-Type: application/json\r\n"));
  ck_assert_ptr_nonnull(strstr(r, "\r\n\r\n{\"alive\": true}\n"));
  r = ask("GET / HTTP/1.0\n\n", 0, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0, "%s", r);
  ck_assert_ptr_nonnull(strstr(r, "{\"alive\": false}"));
  r = ask("HEAD /x HTTP/1.1\r\n\r\n", 1, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
  ck_assert_ptr_null(strstr(r, "alive"));
  r = ask("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 1, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 405", 12) == 0, "%s", r);
  r = ask("\x01\x02junk\r\n\r\n", 1, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 400", 12) == 0, "%s", r);
}
END_TEST

START_TEST(test_probe_through_idle_crowd) {
  const char *r = ask("GET / HTTP/1.1\r\n\r\n", 1, TRUN_METRICS_MAX_CONNS + 20);
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK", 15) == 0, "a probe behind %d idle clients got: '%s'",
                TRUN_METRICS_MAX_CONNS + 20, r);
}
END_TEST

static Suite *probe_suite(void) {
  Suite *s = suite_create("probe");
  TCase *tc = tcase_create("probe");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_probe_answers);
  tcase_add_test(tc, test_probe_through_idle_crowd);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  return unit_run(probe_suite());
}
