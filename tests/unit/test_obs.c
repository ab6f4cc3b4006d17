/* Observability pieces: the event stream's lines (fields, UTC timestamps, fd:N, a reader that does not
 * keep up never blocks the writer, a broken stream reported once), the Prometheus endpoint over real HTTP
 * on a libuv loop (200 / 404 / 405 / 431 / 400), and the stall detector's CPU-time reading of /proc. */
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "events.h"
#include "gpu_util.h"
#include "metrics.h"
#include "obs.h"
#include "stall.h"
#include "unit.h"

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  static char buf[65536];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

START_TEST(test_iso8601) {
  char ts[64];
  trun_iso8601_utc(0.0, ts, sizeof(ts));
  ck_assert_str_eq(ts, "1970-01-01T00:00:00.000000Z");
  trun_iso8601_utc(1795385841.123456, ts, sizeof(ts));
  ck_assert_str_eq(ts, "2026-11-22T22:17:21.123456Z");
  trun_iso8601_utc(1.9999996, ts, sizeof(ts)); /* rounds into the next second */
  ck_assert_str_eq(ts, "1970-01-01T00:00:02.000000Z");
}
END_TEST

START_TEST(test_events_file) {
  char path[] = "/tmp/trun-events-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  trun_events *e = NULL;
  char err[256];
  ck_assert_int_eq(trun_events_open(path, "node-a", &e, err, sizeof(err)), 0);
  trun_events_emit(e, "discovery", json_pack("{s:i,s:i}", "nproc", 4, "gpus", 0));
  trun_events_set_group_rank(e, 3);
  trun_events_emit(e, "worker_exit", json_pack("{s:i,s:s}", "pid", 42, "signal", "SIGKILL"));
  trun_events_emit(e, "job_end", NULL);
  trun_events_close(e);
  char *text = read_all(path);
  unlink(path);
  const char *names[] = {"discovery", "worker_exit", "job_end"};
  char *line = text;
  for (int i = 0; i < 3; i++) {
    char *nl = strchr(line, '\n');
    ck_assert_ptr_nonnull(nl);
    *nl = '\0';
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    ck_assert_msg(o != NULL, "line %d not JSON: %s", i, line);
    ck_assert_str_eq(json_string_value(json_object_get(o, "event")), names[i]);
    ck_assert_str_eq(json_string_value(json_object_get(o, "host")), "node-a");
    const char *ts = json_string_value(json_object_get(o, "ts"));
    ck_assert_ptr_nonnull(ts);
    ck_assert_int_eq(strlen(ts), 27);
    ck_assert_int_eq(ts[10], 'T');
    ck_assert_int_eq(ts[19], '.');
    ck_assert_int_eq(ts[26], 'Z');
    ck_assert_int_eq(json_object_get(o, "group_rank") != NULL, i > 0);
    if (i == 0) ck_assert_int_eq(json_integer_value(json_object_get(o, "nproc")), 4);
    if (i == 1) {
      ck_assert_int_eq(json_integer_value(json_object_get(o, "group_rank")), 3);
      ck_assert_str_eq(json_string_value(json_object_get(o, "signal")), "SIGKILL");
    }
    json_decref(o);
    line = nl + 1;
  }
  ck_assert_str_eq(line, "");
}
END_TEST

START_TEST(test_events_bad_spec) {
  trun_events *e = NULL;
  char err[256];
  ck_assert_int_eq(trun_events_open("/nonexistent-dir/x/events.jsonl", "h", &e, err, sizeof(err)), -1);
  ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir/x/events.jsonl"));
  ck_assert_int_eq(trun_events_open("fd:", "h", &e, err, sizeof(err)), -1);
  ck_assert_int_eq(trun_events_open("fd:1x", "h", &e, err, sizeof(err)), -1);
  ck_assert_int_eq(trun_events_open("fd:987", "h", &e, err, sizeof(err)), -1);
  ck_assert_ptr_nonnull(strstr(err, "not open"));
}
END_TEST

/* A pipe nobody reads: emitting never blocks; past the in-memory bound events are dropped and counted. */
START_TEST(test_events_slow_reader) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  char spec[32];
  snprintf(spec, sizeof(spec), "fd:%d", p[1]);
  trun_events *e = NULL;
  char err[256];
  ck_assert_int_eq(trun_events_open(spec, "h", &e, err, sizeof(err)), 0);
  /* Our own description got O_NONBLOCK; the caller's descriptor is left blocking. */
  ck_assert_int_eq(fcntl(p[1], F_GETFL) & O_NONBLOCK, 0);
  char big[4096];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  for (int i = 0; i < 3000; i++) trun_events_emit(e, "filler", json_pack("{s:s}", "pad", big));
  ck_assert_uint_gt(trun_events_dropped(e), 0);
  /* The reader catches up: what was queued arrives whole, line by line. */
  int fl = fcntl(p[0], F_GETFL);
  fcntl(p[0], F_SETFL, fl | O_NONBLOCK);
  char buf[65536];
  size_t lines = 0;
  for (int round = 0; round < 2000; round++) {
    trun_events_emit(e, "tick", NULL);
    ssize_t n;
    while ((n = read(p[0], buf, sizeof(buf))) > 0)
      for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
  }
  ck_assert_uint_gt(lines, 1000);
  trun_events_close(e);
  close(p[0]);
  close(p[1]);
}
END_TEST

/* The reader went away: one warning, nothing more written, no SIGPIPE death (the agent ignores it). */
START_TEST(test_events_broken) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  char spec[32];
  snprintf(spec, sizeof(spec), "fd:%d", p[1]);
  trun_events *e = NULL;
  char err[256];
  ck_assert_int_eq(trun_events_open(spec, "h", &e, err, sizeof(err)), 0);
  close(p[0]);
  for (int i = 0; i < 10; i++) trun_events_emit(e, "x", NULL);
  trun_events_close(e);
  close(p[1]);
}
END_TEST

/* ---- metrics over HTTP ---- */

typedef struct {
  int port;
  int idle;    /* connections held open (sending nothing) before the request */
  int trickle; /* send the request a byte at a time (TCP_NODELAY, a pause between bytes) */
  char req[16384];
  size_t reqlen;
  char reply[65536];
  uv_async_t *done;
} http_case;

static void *client(void *arg) {
  http_case *c = arg;
  int held[TRUN_METRICS_MAX_CONNS * 2];
  for (int i = 0; i < c->idle; i++) held[i] = unit_connect(c->port);
  if (c->idle) usleep(300000); /* the loop accepts them */
  int fd = unit_connect(c->port);
  size_t got = 0;
  if (fd >= 0) {
    for (size_t i = 0; c->trickle && i < c->reqlen; i++) { /* unit_connect set TCP_NODELAY */
      unit_send(fd, c->req + i, 1);
      usleep(20);
    }
    if (!c->trickle) unit_send(fd, c->req, c->reqlen);
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

static void render(void *arg, trun_buf *out) {
  (void)arg;
  trun_metrics_header(out, "trun_up", "gauge", "Up.");
  trun_metrics_sample(out, "trun_up", NULL, 1);
  trun_metrics_sample(out, "trun_workers", "state=\"running\"", 3);
}

static void on_done(uv_async_t *a) { uv_stop(a->loop); }

/* One request against a fresh endpoint (metrics, or with probe a health probe), after idle held
 * connections; the reply text. With scanned: the request is trickled a byte at a time, and the bytes the
 * reader examined go there. */
static unsigned long long *http_scanned;
static const char *http_on(const char *req, size_t len, trun_metrics_probe probe, void *arg, int idle) {
  static http_case c;
  memset(&c, 0, sizeof(c));
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_async_t done;
  uv_async_init(&loop, &done, on_done);
  trun_metrics *m = NULL;
  if (probe)
    ck_assert_int_eq(trun_metrics_start_probe(&loop, "127.0.0.1", 0, probe, arg, &m, &c.port), 0);
  else
    ck_assert_int_eq(trun_metrics_start(&loop, "127.0.0.1", 0, render, NULL, &m, &c.port), 0);
  ck_assert_int_gt(c.port, 0);
  memcpy(c.req, req, len);
  c.reqlen = len;
  c.idle = idle;
  c.trickle = http_scanned != NULL;
  c.done = &done;
  pthread_t t;
  pthread_create(&t, NULL, client, &c);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  if (http_scanned) *http_scanned = trun_metrics_scanned(m);
  trun_metrics_close(m);
  uv_close((uv_handle_t *)&done, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0); /* every handle released */
  return c.reply;
}
#define HTTP(s) http_on(s, strlen(s), NULL, NULL, 0)
#define http(s, n) http_on(s, n, NULL, NULL, 0)

START_TEST(test_metrics_http) {
  const char *r = HTTP("GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n");
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r);
  ck_assert_ptr_nonnull(strstr(r, "Content-Type: text/plain; version=0.0.4"));
  const char *body = strstr(r, "\r\n\r\n");
  ck_assert_ptr_nonnull(body);
  body += 4;
  ck_assert_str_eq(
      body, "# HELP trun_up Up.\n# TYPE trun_up gauge\ntrun_up 1\ntrun_workers{state=\"running\"} 3\n");
  char cl[64];
  snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", strlen(body));
  ck_assert_ptr_nonnull(strstr(r, cl));
  /* HTTP/1.0 with bare LFs and a query string. */
  r = HTTP("GET /metrics?x=1 HTTP/1.0\n\n");
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK", 15) == 0, "%s", r);
  r = HTTP("GET / HTTP/1.1\r\n\r\n");
  ck_assert_msg(strncmp(r, "HTTP/1.1 404", 12) == 0, "%s", r);
  r = HTTP("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ck_assert_msg(strncmp(r, "HTTP/1.1 405", 12) == 0, "%s", r);
  r = HTTP("hello\r\n\r\n");
  ck_assert_msg(strncmp(r, "HTTP/1.1 400", 12) == 0, "%s", r);
  /* A head that never ends within the limit. */
  static char big[TRUN_METRICS_MAX_REQUEST + 100];
  memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
  memset(big + 26, 'a', sizeof(big) - 26);
  r = http_on(big, sizeof(big), NULL, NULL, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 431", 12) == 0, "%s", r);
}
END_TEST

/* The health probe (TORCHELASTIC_HEALTH_CHECK_PORT): any path answers the probe's JSON, 200 alive / 503 not,
 * HEAD without a body, other methods 405; behind more idle clients than TRUN_METRICS_MAX_CONNS a probe still
 * gets its answer (the oldest unanswered connection makes room). */
static int probe(void *arg, trun_buf *out) {
  int alive = *(int *)arg;
  const char *body = alive ? "{\"alive\": true}\n" : "{\"alive\": false}\n";
  trun_buf_append(out, body, strlen(body));
  return alive;
}
#define PROBE(s, alive, idle) http_on(s, strlen(s), probe, &(int){alive}, idle)

START_TEST(test_probe_http) {
  const char *r = PROBE("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 1, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r);
  ck_assert_ptr_nonnull(strstr(r, "Content-Type: application/json\r\n"));
  ck_assert_ptr_nonnull(strstr(r, "\r\n\r\n{\"alive\": true}\n"));
  r = PROBE("GET / HTTP/1.0\n\n", 0, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0, "%s", r);
  ck_assert_ptr_nonnull(strstr(r, "{\"alive\": false}"));
  r = PROBE("HEAD /x HTTP/1.1\r\n\r\n", 1, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
  ck_assert_ptr_null(strstr(r, "alive"));
  r = PROBE("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 1, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 405", 12) == 0, "%s", r);
  r = PROBE("\x01\x02junk\r\n\r\n", 1, 0);
  ck_assert_msg(strncmp(r, "HTTP/1.1 400", 12) == 0, "%s", r);
  r = PROBE("GET / HTTP/1.1\r\n\r\n", 1, TRUN_METRICS_MAX_CONNS + 20);
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK", 15) == 0, "a probe behind %d idle clients got: '%s'",
                TRUN_METRICS_MAX_CONNS + 20, r);
}
END_TEST

/* Idle connections cannot keep a scraper out: with the table full of clients that never send a request,
 * a new connection is served (the longest idle one makes room), at once rather than after their time-out. */
START_TEST(test_metrics_idle_flood) {
  static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
  const char *r = http_on(req, sizeof(req) - 1, NULL, NULL, TRUN_METRICS_MAX_CONNS + 8);
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "behind %d idle connections: '%s'",
                TRUN_METRICS_MAX_CONNS + 8, r);
}
END_TEST

/* A client that trickles its head a byte at a time is still answered, and the reader's work stays linear
 * in the bytes it got: each read examines only the new bytes (and the 3 an end of head may straddle), not
 * the whole buffer again (that was quadratic: a trickling client held the agent at 45 % CPU). */
START_TEST(test_http_trickle) {
  static char req[8000];
  size_t n = (size_t)snprintf(req, sizeof(req), "GET /metrics HTTP/1.1\r\nX-Pad: ");
  memset(req + n, 'a', sizeof(req) - n - 4);
  memcpy(req + sizeof(req) - 4, "\r\n\r\n", 4);
  unsigned long long scanned = 0;
  http_scanned = &scanned;
  const char *r = http_on(req, sizeof(req), NULL, NULL, 0);
  http_scanned = NULL;
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "a trickled request got: '%.80s'", r);
  ck_assert_msg(scanned <= 4 * sizeof(req), "the reader examined %llu bytes for a %zu-byte request", scanned,
                sizeof(req));
  printf("a %zu-byte request trickled a byte at a time: the reader examined %llu bytes\n", sizeof(req),
         scanned);
  /* the probe too */
  http_scanned = &scanned;
  r = http_on(req, sizeof(req), probe, &(int){1}, 0);
  http_scanned = NULL;
  ck_assert_msg(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "a trickled probe got: '%.80s'", r);
  ck_assert_msg(scanned <= 4 * sizeof(req), "the probe's reader examined %llu bytes for a %zu-byte request",
                scanned, sizeof(req));
}
END_TEST

/* ---- stall: CPU time of a process group from a fake /proc ---- */

static void fake_stat(const char *root, int pid, const char *comm, int pgrp, int ut, int st, int cut,
                      int cst) {
  char dir[512], path[600];
  snprintf(dir, sizeof(dir), "%s/%d", root, pid);
  mkdir(dir, 0755);
  snprintf(path, sizeof(path), "%s/stat", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "%d (%s) S 1 %d %d 0 -1 4194304 100 0 0 0 %d %d %d %d 20 0 1 0 100 1000 10\n", pid, comm, pgrp,
          pgrp, ut, st, cut, cst);
  fclose(f);
}

START_TEST(test_pgrp_cpu) {
  char root[] = "/tmp/trun-proc-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  fake_stat(root, 100, "python3", 100, 5, 2, 0, 0);
  fake_stat(root, 101, "pt_main thread) (x", 100, 10, 1, 3, 4); /* a name with ") (" and spaces */
  fake_stat(root, 200, "other", 200, 1000, 1000, 0, 0);
  char self[600];
  snprintf(self, sizeof(self), "%s/self", root); /* not a pid: skipped */
  mkdir(self, 0755);
  ck_assert_uint_eq(trun_pgrp_cpu_ticks(root, 100), 5 + 2 + 10 + 1 + 3 + 4);
  ck_assert_uint_eq(trun_pgrp_cpu_ticks(root, 200), 2000);
  ck_assert_uint_eq(trun_pgrp_cpu_ticks(root, 300), 0);
  /* The real /proc: this process's group has used some CPU time by now, or at least reads as a number. */
  volatile unsigned long x = 0;
  for (unsigned long i = 0; i < 300000000ul; i++) x += i;
  ck_assert_uint_gt(trun_pgrp_cpu_ticks(NULL, getpgrp()), 0);
  static const char *const dirs[] = {"100", "101", "200", "self"};
  for (size_t i = 0; i < 4; i++) {
    char p[700];
    snprintf(p, sizeof(p), "%s/%s/stat", root, dirs[i]);
    unlink(p);
    snprintf(p, sizeof(p), "%s/%s", root, dirs[i]);
    rmdir(p);
  }
  rmdir(root);
}
END_TEST

/* The event ev of the stream text as compact JSON without its ts (free()), NULL when none. */
static char *event_json(const char *text, const char *ev) {
  char want[64];
  snprintf(want, sizeof(want), "\"event\":\"%s\"", ev);
  const char *p = strstr(text, want);
  if (p == NULL) return NULL;
  while (p > text && p[-1] != '\n') p--;
  const char *nl = strchr(p, '\n');
  json_error_t je;
  json_t *j = json_loadb(p, nl ? (size_t)(nl - p) : strlen(p), 0, &je);
  ck_assert_ptr_nonnull(j);
  json_object_del(j, "ts");
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  return s;
}

/* Runs emit(o) on a trun_obs whose events go to a new file; returns the stream's text (read_all's buffer). */
static char *obs_events(const char *host, void (*emit)(trun_obs *o)) {
  char path[] = "/tmp/trun-events-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.events = path;
  cfg.metrics_port = -1;
  trun_obs *o = NULL;
  char err[256];
  ck_assert_int_eq(trun_obs_open(&cfg, uv_default_loop(), host, &o, err, sizeof(err)), 0);
  emit(o);
  trun_obs_close(o, 0);
  char *text = read_all(path);
  unlink(path);
  return text;
}

static void check_event(const char *text, const char *ev, const char *want) {
  char *s = event_json(text, ev);
  ck_assert_msg(s != NULL, "no %s event in %s", ev, text);
  ck_assert_str_eq(s, want);
  free(s);
}

static void emit_rank0(trun_obs *o) {
  trun_doctor_outcome d = {.analyzed = 1,
                           .agents = 2,
                           .missing = 0,
                           .split = 1,
                           .max_per_host = 2,
                           .gpu_clash = 0,
                           .efa = 1,
                           .fail_on_findings = 1,
                           .action = "stop"};
  trun_obs_doctor(o, 3, &d);
  trun_pf_outcome pf = {.verdict = "fail", .peak_gbps = 2.5, .at_bytes = 1048576, .fabric = "nvlink"};
  snprintf(pf.cause, sizeof(pf.cause), "P2P off");
  trun_obs_preflight(o, 0, &pf);
}

/* The doctor and preflight hooks: their events' fields, exactly (keys and values). */
START_TEST(test_obs_doctor_preflight) {
  char *text = obs_events("node-a", emit_rank0);
  check_event(text, "doctor",
              "{\"event\":\"doctor\",\"host\":\"node-a\",\"round\":3,\"analyzed\":true,\"agents\":2,"
              "\"missing\":0,\"split_pods\":true,\"agents_per_host\":2,\"gpu_clash\":false,"
              "\"efa_warning\":true,\"on_split_pods\":\"fail\",\"action\":\"stop\"}");
  check_event(text, "preflight",
              "{\"event\":\"preflight\",\"host\":\"node-a\",\"round\":0,\"verdict\":\"fail\","
              "\"peak_busbw_gbps\":2.5,\"at_bytes\":1048576,\"fabric\":\"nvlink\",\"cause\":\"P2P off\"}");
}
END_TEST

static void emit_other(trun_obs *o) {
  trun_doctor_outcome d = {.action = "continue"};
  trun_obs_doctor(o, 0, &d);
  trun_pf_outcome pf = {.verdict = "skip", .peak_gbps = -1, .cause = "no GPU visible on this node"};
  trun_obs_preflight(o, 0, &pf);
}

/* A non-zero group rank knows only the action; a skip has no measurement. */
START_TEST(test_obs_doctor_other_rank_and_skip) {
  char *text = obs_events("h", emit_other);
  check_event(text, "doctor",
              "{\"event\":\"doctor\",\"host\":\"h\",\"round\":0,\"analyzed\":false,"
              "\"on_split_pods\":\"warn\",\"action\":\"continue\"}");
  check_event(text, "preflight",
              "{\"event\":\"preflight\",\"host\":\"h\",\"round\":0,\"verdict\":\"skip\","
              "\"cause\":\"no GPU visible on this node\"}");
}
END_TEST

static void health_checks(trun_health *h) {
  memset(h, 0, sizeof(*h));
  h->n = 2;
  h->c[0] = (trun_health_check){.name = "nvml", .source = "NVML", .status = TRUN_HEALTH_PASS};
  snprintf(h->c[0].value, sizeof(h->c[0].value), "1 GPU(s) listed, 1 visible");
  snprintf(h->c[0].threshold, sizeof(h->c[0].threshold), "NVML loads");
  snprintf(h->c[0].reason, sizeof(h->c[0].reason), "NVML works.");
  h->c[1] = (trun_health_check){.name = "ecc", .source = "ECC", .status = TRUN_HEALTH_FAIL};
  snprintf(h->c[1].value, sizeof(h->c[1].value), "GPU 0 GPU-a: 2");
  snprintf(h->c[1].threshold, sizeof(h->c[1].threshold), "0");
  snprintf(h->c[1].reason, sizeof(h->c[1].reason), "failing memory");
}

static void emit_health(trun_obs *o) {
  trun_health h;
  health_checks(&h);
  trun_obs_health(o, &h);
  trun_obs_xid(o, 1, "GPU-b", 79, "GPU has fallen off the bus", 1);
  trun_failure f = {.host = "10.0.0.3", .group_rank = 2, .timestamp = 1.5, .message = "GPU 0 GPU-c Xid 95"};
  trun_obs_node_unhealthy(o, &f);
}

/* The health hooks' events, exactly: one "health" per check, "xid", "node_unhealthy". */
START_TEST(test_obs_health_events) {
  char *text = obs_events("n", emit_health);
  check_event(
      text, "health",
      "{\"event\":\"health\",\"host\":\"n\",\"name\":\"nvml\",\"status\":\"pass\","
      "\"value\":\"1 GPU(s) listed, 1 visible\",\"threshold\":\"NVML loads\",\"reason\":\"NVML works.\","
      "\"source\":\"NVML\"}");
  ck_assert_ptr_nonnull(strstr(text, "\"name\":\"ecc\",\"status\":\"fail\",\"value\":\"GPU 0 GPU-a: 2\""));
  check_event(text, "xid",
              "{\"event\":\"xid\",\"host\":\"n\",\"gpu\":1,\"uuid\":\"GPU-b\",\"xid\":79,"
              "\"meaning\":\"GPU has fallen off the bus\",\"hardware\":true,\"action\":\"leave\"}");
  check_event(text, "node_unhealthy",
              "{\"event\":\"node_unhealthy\",\"host\":\"n\",\"root_host\":\"10.0.0.3\",\"node_rank\":2,"
              "\"time\":1.5,\"message\":\"GPU 0 GPU-c Xid 95\"}");
}
END_TEST

static void emit_failures(trun_obs *o) {
  trun_failure fs[2] = {{.global_rank = 2,
                         .local_rank = 0,
                         .group_rank = 1,
                         .pid = 7,
                         .exit_code = -15,
                         .timestamp = 2.0,
                         .host = "b",
                         .torn_down = 1},
                        {.global_rank = 1,
                         .local_rank = 1,
                         .group_rank = 0,
                         .pid = 9,
                         .exit_code = 3,
                         .timestamp = 1.0,
                         .host = "a",
                         .cause = "exited with code 3",
                         .cause_kind = "exit"}};
  trun_obs_failure(o, fs, 2, 1, 0); /* node 0's rank failed first: this node (1) only says so */
  trun_obs_remote_unknown(o, 0, -1, "the rendezvous store closed");
}

/* One "failure" event per root cause in the job: a node whose workers were another node's victims writes
 * "remote_failure" with the root cause's fields, or known false where it could not learn them. */
START_TEST(test_obs_remote_failure) {
  char *text = obs_events("b", emit_failures);
  ck_assert_ptr_null(strstr(text, "\"event\":\"failure\""));
  check_event(
      text, "remote_failure",
      "{\"event\":\"remote_failure\",\"host\":\"b\",\"final\":true,\"rank\":1,\"local_rank\":1,"
      "\"node_rank\":0,\"pid\":9,\"root_host\":\"a\",\"exit_code\":3,\"cause\":\"exited with code 3\","
      "\"cause_kind\":\"exit\",\"failures\":2,\"known\":true}");
  ck_assert_ptr_nonnull(strstr(text,
                               "\"event\":\"remote_failure\",\"host\":\"b\",\"final\":false,\"known\":false,"
                               "\"node_rank\":-1,\"message\":\"the rendezvous store closed\"}"));
}
END_TEST

/* trun_health_failed{check} on a real endpoint: 1 for the failed check and a hardware Xid, 0 otherwise. */
static http_case metrics_case;
START_TEST(test_obs_health_metric) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  char path[] = "/tmp/trun-events-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  cfg.events = path;
  cfg.metrics_port = 0;
  trun_obs *o = NULL;
  char err[256];
  ck_assert_int_eq(trun_obs_open(&cfg, &loop, "n", &o, err, sizeof(err)), 0);
  trun_health h;
  health_checks(&h);
  trun_obs_health(o, &h);
  trun_obs_xid(o, 0, "GPU-b", 13, "graphics engine exception", 0); /* not the hardware's: no metric */
  char *text = read_all(path);
  const char *port = strstr(text, "\"port\":");
  ck_assert_ptr_nonnull(port);
  http_case *c = &metrics_case;
  memset(c, 0, sizeof(*c));
  c->port = atoi(port + 7);
  snprintf(c->req, sizeof(c->req), "GET /metrics HTTP/1.1\r\n\r\n");
  c->reqlen = strlen(c->req);
  uv_async_t done;
  uv_async_init(&loop, &done, on_done);
  c->done = &done;
  pthread_t t;
  pthread_create(&t, NULL, client, c);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  ck_assert_ptr_nonnull(strstr(c->reply, "# TYPE trun_health_failed gauge\n"));
  ck_assert_ptr_nonnull(strstr(c->reply, "trun_health_failed{check=\"nvml\"} 0\n"));
  ck_assert_ptr_nonnull(strstr(c->reply, "trun_health_failed{check=\"ecc\"} 1\n"));
  ck_assert_ptr_null(strstr(c->reply, "check=\"xid\""));
  trun_obs_xid(o, 0, "GPU-b", 79, "GPU has fallen off the bus", 1);
  memset(c->reply, 0, sizeof(c->reply));
  pthread_create(&t, NULL, client, c);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  ck_assert_ptr_nonnull(strstr(c->reply, "trun_health_failed{check=\"xid\"} 1\n"));
  trun_obs_close(o, 0);
  uv_close((uv_handle_t *)&done, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  unlink(path);
}
END_TEST

/* The fake NVML (build/libnvidia-ml-fake.so) with the h200x2 fixture's GPUs; utilisation from *util_file. */
static void fake_nvml(char uuids[2][96], const char *util_file) {
  const char *r = getenv("TRUN_REPO"), *b = getenv("TRUN_BUILD");
  char p[PATH_MAX], lib[PATH_MAX];
  snprintf(p, sizeof(p), "%s/libnvidia-ml-fake.so", b && *b ? b : "build");
  ck_assert_msg(realpath(p, lib) != NULL, "%s missing: run make", p);
  setenv("TRUN_NVML_LIBRARY", lib, 1);
  snprintf(p, sizeof(p), "%s/tests/fixtures/nodes/h200x2/nvml.json", r && *r ? r : ".");
  setenv("TRUN_FAKE_NVML_TOPO", p, 1);
  setenv("TRUN_FAKE_NVML_UTIL", util_file, 1);
  json_error_t je;
  json_t *j = json_load_file(p, 0, &je);
  ck_assert_ptr_nonnull(j);
  for (int i = 0; i < 2; i++)
    snprintf(
        uuids[i], 96, "%s",
        json_string_value(json_object_get(json_array_get(json_object_get(j, "gpus"), (size_t)i), "uuid")));
  json_decref(j);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* Reads g until a sample equal to want[0..n) arrives (safety limit: 10 s turns a hang into a failure). */
static void wait_sample(trun_gpu_util *g, const int *want, int n) {
  int util[2] = {-2, -2};
  char err[256];
  for (int i = 0; i < 1000; i++) {
    int rc = trun_gpu_util_read(g, util, err, sizeof(err));
    ck_assert_msg(rc >= 0, "sampler ended: %s", err);
    if (rc == 1 && memcmp(util, want, (size_t)n * sizeof(int)) == 0) return;
    usleep(10000);
  }
  ck_abort_msg("no sample {%d, %d}; last {%d, %d}", want[0], want[1], util[0], util[1]);
}

/* The sampler process: utilisation by UUID (given in reverse NVML order), changes picked up, a GPU NVML does
 * not know is -1, no NVML ends it with the reason. */
START_TEST(test_gpu_util_sampler) {
  char util_file[] = "/tmp/trun-gpu-util-XXXXXX";
  int fd = mkstemp(util_file);
  ck_assert_int_ge(fd, 0);
  close(fd);
  char uuids[2][96], rev[2][96];
  fake_nvml(uuids, util_file);
  write_file(util_file, "0 75\n");
  memcpy(rev[0], uuids[1], 96);
  memcpy(rev[1], uuids[0], 96);
  trun_gpu_util *g = trun_gpu_util_start((const char(*)[96])rev, 2, 0.05);
  ck_assert_ptr_nonnull(g);
  wait_sample(g, (const int[]){75, 0}, 2);
  write_file(util_file, "50 20\n");
  wait_sample(g, (const int[]){20, 50}, 2);
  trun_gpu_util_stop(g);
  snprintf(rev[1], 96, "GPU-00000000-0000-0000-0000-000000000000");
  g = trun_gpu_util_start((const char(*)[96])rev, 2, 0.05);
  wait_sample(g, (const int[]){20, -1}, 2);
  trun_gpu_util_stop(g);
  setenv("TRUN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  g = trun_gpu_util_start((const char(*)[96])rev, 2, 0.05);
  int util[2], rc = 0;
  char err[256] = "";
  for (int i = 0; i < 1000 && (rc = trun_gpu_util_read(g, util, err, sizeof(err))) == 0; i++) usleep(10000);
  ck_assert_int_eq(rc, -1);
  static const char want[] = "cannot load NVML /nonexistent/libnvidia-ml.so.1: ";
  ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
  trun_gpu_util_stop(g);
  unlink(util_file);
}
END_TEST

typedef struct {
  int stalled; /* local rank + 1 */
  uv_timer_t limit;
} stall_case;

static void on_stall_found(void *arg, int local_rank, double idle_s, int signal, int stop) {
  stall_case *c = arg;
  (void)idle_s, (void)signal;
  if (stop) c->stalled = local_rank + 1, uv_stop(c->limit.loop);
}

static void on_limit(uv_timer_t *t) { uv_stop(t->loop); }

/* Hang detection with the GPU as the only sign of life: a sleeping worker whose GPU is busy is not stalled
 * within 6 stall timeouts; once its GPU is idle it is. */
START_TEST(test_stall_gpu_busy_is_alive) {
  char util_file[] = "/tmp/trun-gpu-util-XXXXXX";
  int fd = mkstemp(util_file);
  ck_assert_int_ge(fd, 0);
  close(fd);
  char uuids[2][96];
  fake_nvml(uuids, util_file);
  write_file(util_file, "90 0\n");
  unsetenv("TRUN_STALL_GPU_UTIL"); /* the default threshold */
  trun_node *node = calloc(1, sizeof(*node));
  ck_assert_ptr_nonnull(node);
  node->ngpu = 2;
  for (int i = 0; i < 2; i++) snprintf(node->gpus[i].uuid, sizeof(node->gpus[i].uuid), "%s", uuids[i]);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    pause();
    _exit(0);
  }
  setpgid(pid, pid);
  uv_loop_t loop;
  uv_loop_init(&loop);
  stall_case c = {0};
  uv_timer_init(&loop, &c.limit);
  trun_stall *s = trun_stall_new(&loop, 0.5, 0, on_stall_found, &c);
  trun_stall_use_gpus(s, node);
  trun_stall_begin(s, 1);
  trun_stall_watch(s, 0, pid, NULL, NULL, "", "");
  uv_timer_start(&c.limit, on_limit, 3000, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(c.stalled, 0);               /* busy GPU: alive */
  write_file(util_file, "0 90\n");              /* its GPU idle, the other busy */
  uv_timer_start(&c.limit, on_limit, 10000, 0); /* safety limit */
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(c.stalled, 1);
  trun_stall_close(s);
  uv_close((uv_handle_t *)&c.limit, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  free(node);
  unlink(util_file);
}
END_TEST

static Suite *obs_suite(void) {
  Suite *s = suite_create("obs");
  TCase *tc = tcase_create("events");
  tcase_add_test(tc, test_iso8601);
  tcase_add_test(tc, test_events_file);
  tcase_add_test(tc, test_events_bad_spec);
  tcase_add_test(tc, test_events_slow_reader);
  tcase_add_test(tc, test_events_broken);
  tcase_add_test(tc, test_obs_doctor_preflight);
  tcase_add_test(tc, test_obs_doctor_other_rank_and_skip);
  tcase_add_test(tc, test_obs_health_events);
  tcase_add_test(tc, test_obs_health_metric);
  suite_add_tcase(s, tc);
  tc = tcase_create("metrics");
  tcase_add_test(tc, test_metrics_http);
  tcase_add_test(tc, test_probe_http);
  tcase_add_test(tc, test_metrics_idle_flood);
  tcase_add_test(tc, test_http_trickle);
  suite_add_tcase(s, tc);
  tc = tcase_create("stall");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_pgrp_cpu);
  tcase_add_test(tc, test_gpu_util_sampler);
  tcase_add_test(tc, test_stall_gpu_busy_is_alive);
  tcase_add_test(tc, test_obs_remote_failure);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  return unit_run(obs_suite());
}
