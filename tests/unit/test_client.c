/* Blocking client against the real trun_server (in-process, 127.0.0.1, port 0) and against small scripted
 * fake servers for what a real server cannot be made to do on demand (a STOP_WAITING racing CANCEL_WAIT, a
 * wrong PING echo). No assertion depends on how long anything took. */
#include <errno.h>
#include <time.h>

#include "client.h"
#include "unit.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static trun_client *connect_gen(int port, trun_gen gen, const char *prefix) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = port;
  o.gen = gen;
  o.timeout_ms = 20000;
  o.connect_timeout_ms = 10000;
  o.backoff_initial_ms = 20;
  o.backoff_max_ms = 200;
  if (prefix) o.key_prefix = prefix;
  trun_client *c = NULL;
  int rc = trun_client_connect(&o, &c);
  ck_assert_msg(rc == 0, "connect to 127.0.0.1:%d (%s): %s", port, trun_proto_gen_name(gen), strerror(-rc));
  return c;
}

static trun_client *connect_v2(int port) { return connect_gen(port, TRUN_GEN_V2, NULL); }

static void start_server(unit_server *us, trun_gen legacy) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.legacy = legacy;
  int port = unit_server_start(us, &o);
  ck_assert_msg(port > 0, "server start: %s", port < 0 ? uv_strerror(port) : "no port");
}

/* Asserts that get(key) returns want. */
static void assert_get(trun_client *c, const char *key, const char *want) {
  trun_buf out = {0};
  int rc = trun_client_get(c, trun_str(key), &out, -1);
  ck_assert_msg(rc == 0, "get %s: %s", key, strerror(-rc));
  ck_assert_uint_eq(out.len, strlen(want));
  ck_assert(out.len == 0 || memcmp(out.data, want, out.len) == 0);
  trun_buf_free(&out);
}

static void assert_buf(const trun_buf *b, const char *want) {
  ck_assert_msg(b->len == strlen(want) && (b->len == 0 || memcmp(b->data, want, b->len) == 0),
                "got '%.*s', want '%s'", (int)b->len, (const char *)b->data, want);
}

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

/* Polls the server until n connections have a WAIT pending (the test's own timeout bounds it). */
static void await_waiting(unit_server *us, uint64_t n) {
  for (;;) {
    trun_server_stats st;
    unit_server_stats(us, &st);
    if (st.waiting >= n) return;
    sleep_ms(5);
  }
}

/* A port nothing listens on: bound, read and closed again. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

typedef struct {
  char **keys;
  size_t n;
} key_set;

static void collect(void *arg, trun_slice key) {
  key_set *ks = arg;
  ks->keys = realloc(ks->keys, (ks->n + 1) * sizeof(char *));
  ck_assert_ptr_nonnull(ks->keys);
  ks->keys[ks->n] = strndup((const char *)key.p, key.n);
  ks->n++;
}

static int has_key(const key_set *ks, const char *k) {
  for (size_t i = 0; i < ks->n; i++)
    if (strcmp(ks->keys[i], k) == 0) return 1;
  return 0;
}

static void key_set_free(key_set *ks) {
  for (size_t i = 0; i < ks->n; i++) free(ks->keys[i]);
  free(ks->keys);
}

/* ---- every operation, v2 ---------------------------------------------------------------------- */

START_TEST(test_kv_ops) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY113);
  trun_client *c = connect_v2(us.port);
  trun_buf out = {0};
  int64_t n = 0;

  ck_assert_int_eq(trun_client_set(c, trun_str("foo"), trun_str("bar")), 0);
  assert_get(c, "foo", "bar");
  ck_assert_int_eq(trun_client_set(c, trun_str("empty"), trun_str("")), 0);
  assert_get(c, "empty", "");
  uint8_t bin[] = {0x00, 0xff, 0x0a, 0x00};
  ck_assert_int_eq(trun_client_set(c, trun_str("bin"), (trun_slice){bin, sizeof(bin)}), 0);
  ck_assert_int_eq(trun_client_get(c, trun_str("bin"), &out, -1), 0);
  ck_assert(out.len == sizeof(bin) && memcmp(out.data, bin, sizeof(bin)) == 0);

  ck_assert_int_eq(trun_client_add(c, trun_str("cnt"), 5, &n), 0);
  ck_assert_int_eq(n, 5);
  ck_assert_int_eq(trun_client_add(c, trun_str("cnt"), -7, &n), 0);
  ck_assert_int_eq(n, -2);
  assert_get(c, "cnt", "-2");

  /* compare_set: the four cases of torch's rules */
  ck_assert_int_eq(trun_client_compare_set(c, trun_str("foo"), trun_str("bar"), trun_str("baz"), &out), 0);
  assert_buf(&out, "baz");
  ck_assert_int_eq(trun_client_compare_set(c, trun_str("foo"), trun_str("nope"), trun_str("x"), &out), 0);
  assert_buf(&out, "baz");
  ck_assert_int_eq(trun_client_compare_set(c, trun_str("missing"), trun_str("x"), trun_str("y"), &out), 0);
  assert_buf(&out, "x");
  ck_assert_int_eq(trun_client_compare_set(c, trun_str("fresh"), trun_str(""), trun_str("new"), &out), 0);
  assert_buf(&out, "new");
  assert_get(c, "fresh", "new");

  trun_slice both[] = {trun_str("foo"), trun_str("cnt")};
  trun_slice some[] = {trun_str("foo"), trun_str("nokey")};
  ck_assert_int_eq(trun_client_check(c, 2, both), 1);
  ck_assert_int_eq(trun_client_check(c, 2, some), 0);
  ck_assert_int_eq(trun_client_check(c, 0, NULL), 1);

  ck_assert_int_eq(trun_client_delete(c, trun_str("cnt")), 1);
  ck_assert_int_eq(trun_client_delete(c, trun_str("cnt")), 0);

  ck_assert_int_eq(trun_client_append(c, trun_str("foo"), trun_str("!!")), 0);
  ck_assert_int_eq(trun_client_append(c, trun_str("newapp"), trun_str("a")), 0);
  assert_get(c, "foo", "baz!!");
  assert_get(c, "newapp", "a");

  trun_slice mk[] = {trun_str("m1"), trun_str("m2"), trun_str("m3")};
  trun_slice mv[] = {trun_str("v1"), trun_str(""), trun_str("v3")};
  ck_assert_int_eq(trun_client_multi_set(c, 3, mk, mv), 0);
  trun_buf vals[3] = {{0}};
  ck_assert_int_eq(trun_client_multi_get(c, 3, mk, vals, -1), 0);
  assert_buf(&vals[0], "v1");
  assert_buf(&vals[1], "");
  assert_buf(&vals[2], "v3");
  for (int i = 0; i < 3; i++) trun_buf_free(&vals[i]);

  /* foo empty bin fresh newapp m1 m2 m3 */
  ck_assert_int_eq(trun_client_num_keys(c, &n), 0);
  ck_assert_int_eq(n, 8);
  ck_assert_int_eq(trun_client_ping(c), 0);

  key_set ks = {0};
  ck_assert_int_eq(trun_client_list(c, collect, &ks), 0);
  ck_assert_uint_eq(ks.n, 8);
  ck_assert(has_key(&ks, "foo") && has_key(&ks, "m3") && has_key(&ks, "empty") && !has_key(&ks, "/foo"));
  key_set_free(&ks);

  trun_buf_free(&out);
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_queue_ops) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY113);
  trun_client *c = connect_v2(us.port);
  trun_buf out = {0};
  int64_t n = -1;
  ck_assert_int_eq(trun_client_queue_len(c, trun_str("q"), &n), 0);
  ck_assert_int_eq(n, 0);
  ck_assert_int_eq(trun_client_queue_push(c, trun_str("q"), trun_str("a")), 0);
  ck_assert_int_eq(trun_client_queue_push(c, trun_str("q"), trun_str("b")), 0);
  ck_assert_int_eq(trun_client_queue_len(c, trun_str("q"), &n), 0);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(trun_client_queue_pop(c, trun_str("q"), &out, -1), 0);
  assert_buf(&out, "a");
  ck_assert_int_eq(trun_client_queue_pop(c, trun_str("q"), &out, -1), 0);
  assert_buf(&out, "b");
  /* empty: times out and the connection stays usable */
  ck_assert_int_eq(trun_client_queue_pop(c, trun_str("q"), &out, 50), -ETIMEDOUT);
  ck_assert_int_eq(trun_client_queue_len(c, trun_str("q"), &n), 0);
  ck_assert_int_eq(n, 0);
  ck_assert_int_eq(trun_client_ping(c), 0);
  trun_buf_free(&out);
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

/* Keys carry opts.key_prefix on the wire: "/" by default, "" raw, anything else as given. */
START_TEST(test_key_prefix) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY113);
  trun_client *def = connect_v2(us.port);
  trun_client *raw = connect_gen(us.port, TRUN_GEN_V2, "");
  trun_client *pre = connect_gen(us.port, TRUN_GEN_V2, "/job7/");
  ck_assert_int_eq(trun_client_set(def, trun_str("k"), trun_str("v")), 0);
  assert_get(raw, "/k", "v");
  ck_assert_int_eq(trun_client_set(pre, trun_str("x"), trun_str("y")), 0);
  assert_get(raw, "/job7/x", "y");
  assert_get(def, "job7/x", "y");
  key_set ks = {0};
  ck_assert_int_eq(trun_client_list(pre, collect, &ks), 0);
  ck_assert_uint_eq(ks.n, 1); /* "/k" lacks the prefix and is skipped */
  ck_assert_str_eq(ks.keys[0], "x");
  key_set_free(&ks);
  trun_client_close(def);
  trun_client_close(raw);
  trun_client_close(pre);
  unit_server_stop(&us);
}
END_TEST

/* ---- waiting ---------------------------------------------------------------------------------- */

START_TEST(test_wait_timeout_then_usable) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY113);
  trun_client *c = connect_v2(us.port);
  trun_slice keys[] = {trun_str("late1"), trun_str("late2")};
  trun_buf out = {0};
  ck_assert_int_eq(trun_client_wait(c, 2, keys, 50), -ETIMEDOUT);
  ck_assert_int_eq(trun_client_get(c, trun_str("never"), &out, 30), -ETIMEDOUT);
  trun_slice mk[] = {trun_str("late1"), trun_str("never")};
  ck_assert_int_eq(trun_client_multi_get(c, 2, mk, &out, 30), -ETIMEDOUT);
  ck_assert_int_ge(trun_client_fd(c), 0);
  /* Writing the keys now must not put a stray STOP_WAITING on this connection. */
  ck_assert_int_eq(trun_client_set(c, trun_str("late1"), trun_str("1")), 0);
  ck_assert_int_eq(trun_client_set(c, trun_str("late2"), trun_str("2")), 0);
  ck_assert_int_eq(trun_client_ping(c), 0);
  assert_get(c, "late1", "1");
  assert_get(c, "late2", "2");
  ck_assert_int_eq(trun_client_wait(c, 2, keys, 50), 0);
  trun_server_stats st;
  unit_server_stats(&us, &st);
  ck_assert_uint_eq(st.waiting, 0);
  trun_buf_free(&out);
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

typedef struct {
  int port;
  trun_gen gen;
  int rc;
  trun_buf val;
} waiter_arg;

static void *wait_thread(void *p) {
  waiter_arg *a = p;
  trun_client *c = connect_gen(a->port, a->gen, NULL);
  trun_slice keys[] = {trun_str("w1"), trun_str("w2")};
  a->rc = trun_client_wait(c, 2, keys, 20000);
  if (a->rc == 0) a->rc = trun_client_get(c, trun_str("w2"), &a->val, 20000);
  trun_client_close(c);
  return NULL;
}

static void *pop_thread(void *p) {
  waiter_arg *a = p;
  trun_client *c = connect_gen(a->port, a->gen, NULL);
  a->rc = trun_client_queue_pop(c, trun_str("jobs"), &a->val, 20000);
  trun_client_close(c);
  return NULL;
}

/* A WAIT on two keys is woken only once a second client wrote both; the blocked get returns the value. */
static void waiter_woken(trun_gen legacy, trun_gen gen) {
  unit_server us;
  start_server(&us, legacy);
  waiter_arg a = {.port = us.port, .gen = gen, .rc = 1};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, wait_thread, &a), 0);
  await_waiting(&us, 1);
  trun_client *c = connect_gen(us.port, gen, NULL);
  ck_assert_int_eq(trun_client_set(c, trun_str("w1"), trun_str("one")), 0);
  ck_assert_int_eq(trun_client_set(c, trun_str("w2"), trun_str("two")), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(a.rc, 0);
  assert_buf(&a.val, "two");
  trun_buf_free(&a.val);
  trun_client_close(c);
  unit_server_stop(&us);
}

START_TEST(test_waiter_woken_v2) { waiter_woken(TRUN_GEN_LEGACY113, TRUN_GEN_V2); }
END_TEST

START_TEST(test_waiter_woken_legacy113) { waiter_woken(TRUN_GEN_LEGACY113, TRUN_GEN_LEGACY113); }
END_TEST

START_TEST(test_waiter_woken_legacy21) { waiter_woken(TRUN_GEN_LEGACY21, TRUN_GEN_LEGACY21); }
END_TEST

START_TEST(test_queue_pop_woken) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY113);
  waiter_arg a = {.port = us.port, .gen = TRUN_GEN_V2, .rc = 1};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, pop_thread, &a), 0);
  await_waiting(&us, 1);
  trun_client *c = connect_v2(us.port);
  ck_assert_int_eq(trun_client_queue_push(c, trun_str("jobs"), trun_str("job-1")), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(a.rc, 0);
  assert_buf(&a.val, "job-1");
  trun_buf_free(&a.val);
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

/* ---- legacy generations ----------------------------------------------------------------------- */

static void legacy_common(trun_client *c) {
  trun_buf out = {0};
  int64_t n = 0;
  ck_assert_int_eq(trun_client_set(c, trun_str("a"), trun_str("1")), 0);
  assert_get(c, "a", "1");
  ck_assert_int_eq(trun_client_add(c, trun_str("a"), 41, &n), 0);
  ck_assert_int_eq(n, 42);
  ck_assert_int_eq(trun_client_compare_set(c, trun_str("a"), trun_str("42"), trun_str("x"), &out), 0);
  assert_buf(&out, "x");
  trun_slice k[] = {trun_str("a")};
  ck_assert_int_eq(trun_client_check(c, 1, k), 1);
  ck_assert_int_eq(trun_client_num_keys(c, &n), 0);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(trun_client_delete(c, trun_str("a")), 1);
  ck_assert_int_eq(trun_client_check(c, 1, k), 0);
  /* newer operations are refused before anything is sent */
  ck_assert_int_eq(trun_client_ping(c), -ENOTSUP);
  ck_assert_int_eq(trun_client_queue_push(c, trun_str("q"), trun_str("v")), -ENOTSUP);
  ck_assert_int_eq(trun_client_queue_pop(c, trun_str("q"), &out, 10), -ENOTSUP);
  ck_assert_int_eq(trun_client_list(c, collect, NULL), -ENOTSUP);
  /* a timed-out wait leaves the connection usable, even when the key is written afterwards */
  ck_assert_int_eq(trun_client_wait(c, 1, k, 50), -ETIMEDOUT);
  ck_assert_int_eq(trun_client_set(c, trun_str("a"), trun_str("back")), 0);
  assert_get(c, "a", "back");
  ck_assert_int_eq(trun_client_num_keys(c, &n), 0);
  ck_assert_int_eq(n, 1);
  trun_buf_free(&out);
}

START_TEST(test_legacy113) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY113);
  trun_client *c = connect_gen(us.port, TRUN_GEN_LEGACY113, NULL);
  legacy_common(c);
  trun_slice k[] = {trun_str("a")}, v[] = {trun_str("b")};
  trun_buf out = {0};
  ck_assert_int_eq(trun_client_append(c, trun_str("a"), trun_str("x")), -ENOTSUP);
  ck_assert_int_eq(trun_client_multi_set(c, 1, k, v), -ENOTSUP);
  ck_assert_int_eq(trun_client_multi_get(c, 1, k, &out, 10), -ENOTSUP);
  ck_assert_int_eq(trun_client_ping(c), -ENOTSUP);
  assert_get(c, "a", "back");
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_legacy21) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY21);
  trun_client *c = connect_gen(us.port, TRUN_GEN_LEGACY21, NULL);
  legacy_common(c);
  ck_assert_int_eq(trun_client_append(c, trun_str("a"), trun_str("!")), 0);
  trun_slice k[] = {trun_str("m1"), trun_str("m2")}, v[] = {trun_str("x"), trun_str("y")};
  ck_assert_int_eq(trun_client_multi_set(c, 2, k, v), 0);
  trun_buf vals[2] = {{0}};
  ck_assert_int_eq(trun_client_multi_get(c, 2, k, vals, -1), 0);
  assert_buf(&vals[0], "x");
  assert_buf(&vals[1], "y");
  trun_buf_free(&vals[0]);
  trun_buf_free(&vals[1]);
  assert_get(c, "a", "back!");
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

/* ---- failures --------------------------------------------------------------------------------- */

/* The server closes on ADD of a non-number (as torch's do): the call fails and later calls say ENOTCONN. */
START_TEST(test_server_closes) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY113);
  trun_client *c = connect_v2(us.port);
  int64_t n = 0;
  ck_assert_int_eq(trun_client_set(c, trun_str("text"), trun_str("abc")), 0);
  int rc = trun_client_add(c, trun_str("text"), 1, &n);
  ck_assert_msg(rc == -ECONNRESET || rc == -EPIPE, "add on text: %s", strerror(-rc));
  ck_assert_int_eq(trun_client_fd(c), -1);
  ck_assert_int_eq(trun_client_ping(c), -ENOTCONN);
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_connect_closed_port_times_out) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = free_port();
  o.connect_timeout_ms = 300;
  o.backoff_initial_ms = 20;
  o.backoff_max_ms = 100;
  trun_client *c = NULL;
  ck_assert_int_eq(trun_client_connect(&o, &c), -ETIMEDOUT);
  ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_connect_bad_args) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  trun_client *c = NULL;
  o.port = 0;
  ck_assert_int_eq(trun_client_connect(&o, &c), -EINVAL);
  o.port = 70000;
  ck_assert_int_eq(trun_client_connect(&o, &c), -EINVAL);
  o.port = 1;
  o.host = NULL;
  ck_assert_int_eq(trun_client_connect(&o, &c), -EINVAL);
  o.host = "127.0.0.1";
  o.gen = TRUN_GEN_UNKNOWN;
  ck_assert_int_eq(trun_client_connect(&o, &c), -EINVAL);
  ck_assert_ptr_null(c);
}
END_TEST

/* A server that starts ~300 ms after the client began connecting, on a port picked beforehand. */
typedef struct {
  int port;
  uv_loop_t loop;
  uv_async_t stop;
  trun_server *srv;
  int rc;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started;
} late_server;

static void late_on_stop(uv_async_t *a) {
  late_server *ls = a->data;
  if (ls->srv) trun_server_close(ls->srv, NULL, NULL);
  uv_close((uv_handle_t *)&ls->stop, NULL);
}

static void *late_thread(void *p) {
  late_server *ls = p;
  sleep_ms(300);
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = ls->port;
  ls->rc = trun_server_start(&ls->loop, &o, &ls->srv);
  pthread_mutex_lock(&ls->mu);
  ls->started = 1;
  pthread_cond_broadcast(&ls->cv);
  pthread_mutex_unlock(&ls->mu);
  uv_run(&ls->loop, UV_RUN_DEFAULT);
  return NULL;
}

START_TEST(test_connect_retry_late_server) {
  late_server ls = {.port = free_port()};
  ck_assert_int_eq(uv_loop_init(&ls.loop), 0);
  ls.stop.data = &ls;
  ck_assert_int_eq(uv_async_init(&ls.loop, &ls.stop, late_on_stop), 0);
  pthread_mutex_init(&ls.mu, NULL);
  pthread_cond_init(&ls.cv, NULL);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, late_thread, &ls), 0);
  trun_client *c = connect_v2(ls.port); /* refused at first, retried with backoff */
  pthread_mutex_lock(&ls.mu);
  while (!ls.started) pthread_cond_wait(&ls.cv, &ls.mu);
  pthread_mutex_unlock(&ls.mu);
  ck_assert_int_eq(ls.rc, 0);
  ck_assert_int_eq(trun_client_set(c, trun_str("k"), trun_str("v")), 0);
  assert_get(c, "k", "v");
  trun_client_close(c);
  uv_async_send(&ls.stop);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(uv_loop_close(&ls.loop), 0);
}
END_TEST

/* "localhost" goes through getaddrinfo: IPv6 (::1, then v4-mapped 127.0.0.1) first, then IPv4. */
START_TEST(test_connect_by_name) {
  unit_server us;
  start_server(&us, TRUN_GEN_LEGACY113);
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = "localhost";
  o.port = us.port;
  o.connect_timeout_ms = 10000;
  trun_client *c = NULL;
  ck_assert_int_eq(trun_client_connect(&o, &c), 0);
  ck_assert_int_eq(trun_client_ping(c), 0);
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

/* ---- scripted fake servers -------------------------------------------------------------------- */

typedef struct {
  int lfd;
  int port;
  int mode; /* FAKE_RACE or FAKE_BAD_NONCE */
  int ok;   /* the script ran to its end */
} fake_server;

enum { FAKE_RACE, FAKE_BAD_NONCE };

static void fake_listen(fake_server *f) {
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(f->lfd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(listen(f->lfd, 16), 0);
  socklen_t len = sizeof(a);
  ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
  f->port = ntohs(a.sin_port);
}

/* RACE: handshake, then a WAIT that is never answered until CANCEL_WAIT arrives; answers that with
 * STOP_WAITING + WAIT_CANCELED (the race torch's client handles), then echoes one PING. */
static void fake_race(fake_server *f, int fd) {
  uint8_t hs[10], req[64];
  if (unit_recv(fd, hs, 10) < 0 || hs[0] != 0x00 || hs[5] != 0x0d || unit_send(fd, hs + 6, 4) < 0) return;
  /* WAIT 1 key "/k": 06 + u64 1 + u64 2 + "/k" */
  if (unit_recv(fd, req, 1 + 8 + 8 + 2) < 0 || req[0] != 0x06) return;
  if (unit_recv(fd, req, 1) < 0 || req[0] != 0x0c) return;
  uint8_t both[2] = {0x00, 0x01};
  if (unit_send(fd, both, 2) < 0) return;
  if (unit_recv(fd, req, 5) < 0 || req[0] != 0x0d || unit_send(fd, req + 1, 4) < 0) return;
  f->ok = 1;
}

static void *fake_thread(void *p) {
  fake_server *f = p;
  for (;;) {
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL; /* the listener was shut down */
    if (f->mode == FAKE_RACE) {
      fake_race(f, fd);
      close(fd);
      return NULL;
    }
    uint8_t hs[10];
    if (unit_recv(fd, hs, 10) == 0) {
      hs[6] ^= 0xff; /* a wrong nonce: the client must drop this connection and retry */
      unit_send(fd, hs + 6, 4);
      f->ok++;
    }
    close(fd);
  }
}

START_TEST(test_cancel_wait_race) {
  fake_server f = {.mode = FAKE_RACE};
  fake_listen(&f);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, fake_thread, &f), 0);
  trun_client *c = connect_v2(f.port);
  trun_slice k[] = {trun_str("k")};
  ck_assert_int_eq(trun_client_wait(c, 1, k, 30), -ETIMEDOUT);
  ck_assert_int_eq(trun_client_ping(c), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(f.ok, 1);
  trun_client_close(c);
  close(f.lfd);
}
END_TEST

START_TEST(test_bad_nonce_retried_until_timeout) {
  fake_server f = {.mode = FAKE_BAD_NONCE};
  fake_listen(&f);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, fake_thread, &f), 0);
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = f.port;
  o.connect_timeout_ms = 300;
  o.backoff_initial_ms = 10;
  o.backoff_max_ms = 50;
  trun_client *c = NULL;
  ck_assert_int_eq(trun_client_connect(&o, &c), -ETIMEDOUT);
  ck_assert_ptr_null(c);
  shutdown(f.lfd, SHUT_RDWR); /* wakes accept() */
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_ge(f.ok, 1);
  close(f.lfd);
}
END_TEST

/* ---- command-line helpers --------------------------------------------------------------------- */

START_TEST(test_parse_target_gen) {
  char host[64];
  int port = 0;
  ck_assert_int_eq(trun_client_parse_target("127.0.0.1:29500", host, sizeof(host), &port), 0);
  ck_assert_str_eq(host, "127.0.0.1");
  ck_assert_int_eq(port, 29500);
  ck_assert_int_eq(trun_client_parse_target("[::1]:7", host, sizeof(host), &port), 0);
  ck_assert_str_eq(host, "::1");
  ck_assert_int_eq(port, 7);
  ck_assert_int_eq(trun_client_parse_target("node-0.svc:1", host, sizeof(host), &port), 0);
  ck_assert_str_eq(host, "node-0.svc");
  ck_assert_int_eq(trun_client_parse_target("::1:7", host, sizeof(host), &port), -EINVAL);
  ck_assert_int_eq(trun_client_parse_target("host", host, sizeof(host), &port), -EINVAL);
  ck_assert_int_eq(trun_client_parse_target("host:0", host, sizeof(host), &port), -EINVAL);
  ck_assert_int_eq(trun_client_parse_target("host:65536", host, sizeof(host), &port), -EINVAL);
  ck_assert_int_eq(trun_client_parse_target(":80", host, sizeof(host), &port), -EINVAL);
  ck_assert_int_eq(trun_client_parse_target("h:8x", host, sizeof(host), &port), -EINVAL);
  ck_assert_int_eq(trun_client_parse_target("abcdefgh:1", host, 4, &port), -EINVAL);
  trun_gen g;
  ck_assert_int_eq(trun_client_parse_gen("v2", &g), 0);
  ck_assert_int_eq(g, TRUN_GEN_V2);
  ck_assert_int_eq(trun_client_parse_gen("1.13", &g), 0);
  ck_assert_int_eq(g, TRUN_GEN_LEGACY113);
  ck_assert_int_eq(trun_client_parse_gen("2.0", &g), 0);
  ck_assert_int_eq(g, TRUN_GEN_LEGACY113);
  ck_assert_int_eq(trun_client_parse_gen("2.1", &g), 0);
  ck_assert_int_eq(g, TRUN_GEN_LEGACY21);
  ck_assert_int_eq(trun_client_parse_gen("3", &g), -EINVAL);
}
END_TEST

static Suite *client_suite(void) {
  Suite *s = suite_create("client");
  TCase *tc = tcase_create("ops");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_kv_ops);
  tcase_add_test(tc, test_queue_ops);
  tcase_add_test(tc, test_key_prefix);
  tcase_add_test(tc, test_legacy113);
  tcase_add_test(tc, test_legacy21);
  suite_add_tcase(s, tc);
  tc = tcase_create("wait");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_wait_timeout_then_usable);
  tcase_add_test(tc, test_waiter_woken_v2);
  tcase_add_test(tc, test_waiter_woken_legacy113);
  tcase_add_test(tc, test_waiter_woken_legacy21);
  tcase_add_test(tc, test_queue_pop_woken);
  tcase_add_test(tc, test_cancel_wait_race);
  suite_add_tcase(s, tc);
  tc = tcase_create("connect");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_server_closes);
  tcase_add_test(tc, test_connect_closed_port_times_out);
  tcase_add_test(tc, test_connect_bad_args);
  tcase_add_test(tc, test_connect_retry_late_server);
  tcase_add_test(tc, test_connect_by_name);
  tcase_add_test(tc, test_bad_nonce_retried_until_timeout);
  tcase_add_test(tc, test_parse_target_gen);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(client_suite()); }
