/* `trun-store bench`: closed-loop load generator for any TCPStore server (ours or torch's). N connections in
 * one libuv loop, one request in flight on each; per-request latency with uv_hrtime; one JSON line on stdout.
 * Connections are opened (and, for v2, validated) by the blocking client before timing starts.
 * Exit codes: 0 ok, 1 connection failure or request errors, 2 bad command line. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "base/base.h"
#include "store/store.h"
#include "store_tool.h"

typedef enum { B_SET, B_GET, B_ADD, B_CHECK, B_WAIT, B_NUM_KEYS, B_PING, B__N } bench_op;

static const char *const bench_op_names[B__N] = {"set", "get", "add", "check", "wait", "num_keys", "ping"};

#define BENCH_KEY_FMT "/trun-bench/k%u"
#define BENCH_COUNTER_FMT "/trun-bench/c%u"

typedef struct bench bench;

typedef struct {
  uv_tcp_t tcp;
  bench *b;
  uint64_t rng;
  bench_op op;   /* of the request in flight */
  size_t expect; /* reply bytes needed so far (GET: 8, then 8 + length) */
  uint64_t t0;   /* uv_hrtime when the request was handed to the kernel */
  int in_flight; /* awaiting the reply */
  int writing;   /* a uv_write of out is pending */
  int closed;    /* uv_close called */
  trun_buf in;   /* reply bytes received */
  trun_buf out;  /* the request (alive while a uv_write is pending) */
  uv_write_t wr;
} bench_conn;

struct bench {
  /* configuration */
  const char *target;
  char host[256];
  int port;
  trun_gen gen;
  int clients;
  uint64_t requests; /* 0: until the duration ends */
  double duration_s; /* 0: until requests are done */
  unsigned weights[B__N];
  unsigned weight_sum;
  char mix[256];
  size_t value_bytes;
  unsigned keys;
  int timeout_ms;
  int threads; /* event loops, each on its own thread with its share of the clients */
  /* run state */
  uv_loop_t *loop;
  uv_timer_t timer;
  bench_conn *conns;
  uint8_t *value;
  uint64_t issued, done, errors;
  uint64_t *lat; /* ns per completed request */
  size_t nlat, caplat;
  int active; /* connections with a request in flight */
  int stopping, finished;
  uint64_t t_start, t_end;
  char first_err[256];
};

static void bench_usage(FILE *f) {
  fprintf(
      f,
      "usage: trun-store bench --target HOST:PORT [--clients N] [--requests M] [--duration-s S]\n"
      "                        [--mix set=40,get=40,add=20] [--gen v2|1.13|2.1] [--value-bytes B]\n"
      "                        [--keys K] [--timeout-ms T] [--threads N]\n"
      "  --target HOST:PORT  the TCPStore server ([ADDR]:PORT for IPv6)\n"
      "  --clients N         connections, each with one request in flight (default 16)\n"
      "  --requests M        total requests over all connections (default 100000; with --duration-s only:\n"
      "                      no limit)\n"
      "  --duration-s S      stop issuing after S seconds\n"
      "  --mix OP=W,...      weights of set get add check wait num_keys ping (default set=40,get=40,add=20)\n"
      "  --gen G             wire generation: v2 (torch >= 2.2, default), 1.13 (also 2.0), 2.1\n"
      "  --value-bytes B     size of SET values (default 32)\n"
      "  --keys K            key set size, all SET before timing so GET never misses (default 1000)\n"
      "  --timeout-ms T      connect timeout and longest wait for one reply (default 30000)\n"
      "  --threads N         event loops on N threads sharing the clients (default 1), so that the load\n"
      "                      generator is not what limits a server on a machine with cores to spare\n"
      "set is followed by a CHECK of zero keys in the same write, so its latency covers the server's work;\n"
      "add uses counter keys of its own. Prints one JSON line: target, gen, clients, requests, seconds,\n"
      "ops_per_sec, mean_us, p50_us, p90_us, p99_us, p999_us, max_us, errors, ...\n");
}

/* ---- command line ----------------------------------------------------------------------------- */

static int bench_parse_mix(bench *b, const char *s) {
  char tmp[256];
  if (strlen(s) >= sizeof(tmp)) return -EINVAL;
  snprintf(tmp, sizeof(tmp), "%s", s);
  snprintf(b->mix, sizeof(b->mix), "%s", s);
  memset(b->weights, 0, sizeof(b->weights));
  b->weight_sum = 0;
  char *save = NULL;
  for (char *item = strtok_r(tmp, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    if (eq == NULL) return -EINVAL;
    *eq = '\0';
    int op = -1;
    for (int i = 0; i < B__N; i++)
      if (strcmp(item, bench_op_names[i]) == 0) op = i;
    long long w;
    if (op < 0 || trun_tool_parse_ll(eq + 1, 0, 1000000, &w) < 0) return -EINVAL;
    b->weights[op] = (unsigned)w;
  }
  for (int i = 0; i < B__N; i++) b->weight_sum += b->weights[i];
  return b->weight_sum > 0 ? 0 : -EINVAL;
}

/* 0 ok, 2 usage error (reported), -1 --help printed. */
static int bench_parse_args(bench *b, int argc, char **argv) {
  static const struct option opts[] = {{"target", required_argument, 0, 't'},
                                       {"clients", required_argument, 0, 'c'},
                                       {"requests", required_argument, 0, 'n'},
                                       {"duration-s", required_argument, 0, 'd'},
                                       {"mix", required_argument, 0, 'm'},
                                       {"gen", required_argument, 0, 'g'},
                                       {"value-bytes", required_argument, 0, 'v'},
                                       {"keys", required_argument, 0, 'k'},
                                       {"timeout-ms", required_argument, 0, 'T'},
                                       {"threads", required_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int ch, have_requests = 0;
  long long v;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
      case 't':
        b->target = optarg;
        if (trun_client_parse_target(optarg, b->host, sizeof(b->host), &b->port) < 0)
          return trun_tool_bad_arg("--target (HOST:PORT)", optarg);
        break;
      case 'c':
        if (trun_tool_parse_ll(optarg, 1, 65536, &v) < 0)
          return trun_tool_bad_arg("--clients (1..65536)", optarg);
        b->clients = (int)v;
        break;
      case 'n':
        if (trun_tool_parse_ll(optarg, 1, 1000000000, &v) < 0) return trun_tool_bad_arg("--requests", optarg);
        b->requests = (uint64_t)v;
        have_requests = 1;
        break;
      case 'd':
        if (trun_tool_parse_ll(optarg, 1, 86400, &v) < 0)
          return trun_tool_bad_arg("--duration-s (1..86400)", optarg);
        b->duration_s = (double)v;
        break;
      case 'm':
        if (bench_parse_mix(b, optarg) < 0)
          return trun_tool_bad_arg("--mix (e.g. set=40,get=40,add=20)", optarg);
        break;
      case 'g':
        if (trun_client_parse_gen(optarg, &b->gen) < 0)
          return trun_tool_bad_arg("--gen (v2, 1.13 or 2.1)", optarg);
        break;
      case 'v':
        if (trun_tool_parse_ll(optarg, 0, 64 << 20, &v) < 0)
          return trun_tool_bad_arg("--value-bytes", optarg);
        b->value_bytes = (size_t)v;
        break;
      case 'k':
        if (trun_tool_parse_ll(optarg, 1, 10000000, &v) < 0) return trun_tool_bad_arg("--keys", optarg);
        b->keys = (unsigned)v;
        break;
      case 'T':
        if (trun_tool_parse_ll(optarg, 1, 86400000, &v) < 0) return trun_tool_bad_arg("--timeout-ms", optarg);
        b->timeout_ms = (int)v;
        break;
      case 'j':
        if (trun_tool_parse_ll(optarg, 1, 256, &v) < 0)
          return trun_tool_bad_arg("--threads (1..256)", optarg);
        b->threads = (int)v;
        break;
      case 'h': bench_usage(stdout); return -1;
      default: bench_usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "trun-store bench: unexpected argument '%s'; see trun-store bench --help\n",
            argv[optind]);
    return 2;
  }
  if (b->target == NULL) {
    fprintf(stderr, "trun-store bench: --target HOST:PORT is required; see trun-store bench --help\n");
    return 2;
  }
  if (b->weights[B_PING] > 0 && b->gen != TRUN_GEN_V2) {
    fprintf(stderr, "trun-store bench: ping in --mix needs --gen v2 (torch < 2.2 has no PING)\n");
    return 2;
  }
  if (!have_requests) b->requests = b->duration_s > 0 ? 0 : 100000;
  return 0;
}

/* ---- requests --------------------------------------------------------------------------------- */

static void bench_fail(bench_conn *c, const char *what, const char *detail);
static void bench_maybe_finish(bench *b);
static void bench_issue(bench_conn *c);

static int bench_put_key(trun_buf *out, const char *fmt, unsigned i) {
  char k[64];
  int n = snprintf(k, sizeof(k), fmt, i);
  return trun_buf_append_str(out, k, (size_t)n);
}

static bench_op bench_pick(bench_conn *c) {
  bench *b = c->b;
  unsigned r = (unsigned)(trun_rng_next(&c->rng) % b->weight_sum);
  for (int i = 0; i < B__N; i++) {
    if (r < b->weights[i]) return (bench_op)i;
    r -= b->weights[i];
  }
  return B_GET;
}

/* Encodes the request for c->op into c->out and sets c->expect. */
static int bench_encode(bench_conn *c) {
  bench *b = c->b;
  trun_buf *o = &c->out;
  unsigned key = (unsigned)(trun_rng_next(&c->rng) % b->keys);
  int rc;
  o->len = 0;
  switch (c->op) {
    case B_SET:
      if ((rc = trun_req_begin(o, b->gen, TRUN_OP_SET)) < 0 ||
          (rc = bench_put_key(o, BENCH_KEY_FMT, key)) < 0 ||
          (rc = trun_buf_append_str(o, b->value, b->value_bytes)) < 0 ||
          (rc = trun_req_begin(o, b->gen, TRUN_OP_CHECK)) < 0 || (rc = trun_buf_append_u64(o, 0)) < 0)
        return rc;
      c->expect = 1;
      return 0;
    case B_GET:
      c->expect = 8;
      if ((rc = trun_req_begin(o, b->gen, TRUN_OP_GET)) < 0) return rc;
      return bench_put_key(o, BENCH_KEY_FMT, key);
    case B_ADD:
      c->expect = 8;
      if ((rc = trun_req_begin(o, b->gen, TRUN_OP_ADD)) < 0 ||
          (rc = bench_put_key(o, BENCH_COUNTER_FMT, key)) < 0)
        return rc;
      return trun_buf_append_u64(o, 1);
    case B_CHECK:
    case B_WAIT:
      c->expect = 1;
      if ((rc = trun_req_begin(o, b->gen, c->op == B_CHECK ? TRUN_OP_CHECK : TRUN_OP_WAIT)) < 0 ||
          (rc = trun_buf_append_u64(o, 1)) < 0)
        return rc;
      return bench_put_key(o, BENCH_KEY_FMT, key);
    case B_NUM_KEYS: c->expect = 8; return trun_req_begin(o, b->gen, TRUN_OP_GETNUMKEYS);
    case B_PING:
      c->expect = 4;
      if ((rc = trun_req_begin(o, b->gen, TRUN_OP_PING)) < 0) return rc;
      return trun_buf_append_u32(o, 0x74727572u);
    default: return -EINVAL;
  }
}

static void bench_on_write(uv_write_t *req, int status) {
  bench_conn *c = req->data;
  c->writing = 0;
  if (c->closed) return;
  if (status < 0) {
    bench_fail(c, "writing a request", uv_strerror(status));
    return;
  }
  if (!c->in_flight) bench_issue(c); /* the reply came before the write finished */
}

/* The reply of c's request is complete in c->in. */
static void bench_complete(bench_conn *c) {
  bench *b = c->b;
  uint64_t now = uv_hrtime();
  const uint8_t *p = c->in.data;
  int ok = 1;
  switch (c->op) {
    case B_SET:
    case B_CHECK:
    case B_WAIT:
      ok = p[0] == 0; /* READY / STOP_WAITING */
      break;
    case B_GET: ok = trun_get_u64(p) == b->value_bytes; break;
    case B_PING: ok = trun_get_u32(p) == 0x74727572u; break;
    default: break;
  }
  if (!ok || c->in.len != c->expect) {
    bench_fail(c, "checking a reply", !ok ? "unexpected reply bytes" : "more bytes than one reply");
    return;
  }
  if (b->nlat == b->caplat) {
    size_t cap = b->caplat ? b->caplat * 2 : 65536;
    uint64_t *l = realloc(b->lat, cap * sizeof(*l));
    if (l == NULL) {
      bench_fail(c, "recording a latency", "out of memory");
      return;
    }
    b->lat = l;
    b->caplat = cap;
  }
  b->lat[b->nlat++] = now - c->t0;
  b->done++;
  b->t_end = now;
  c->in_flight = 0;
  c->in.len = 0;
  b->active--;
  if (!c->writing) bench_issue(c);
}

static int bench_may_issue(const bench *b) {
  return !b->stopping && (b->requests == 0 || b->issued < b->requests);
}

static void bench_issue(bench_conn *c) {
  bench *b = c->b;
  if (c->closed || c->in_flight || c->writing) return;
  if (!bench_may_issue(b)) {
    bench_maybe_finish(b);
    return;
  }
  c->op = bench_pick(c);
  if (bench_encode(c) < 0) {
    bench_fail(c, "encoding a request", "out of memory");
    return;
  }
  b->issued++;
  b->active++;
  c->in_flight = 1;
  c->in.len = 0;
  c->t0 = uv_hrtime();
  uv_buf_t buf = uv_buf_init((char *)c->out.data, (unsigned)c->out.len);
  int n = uv_try_write((uv_stream_t *)&c->tcp, &buf, 1);
  if (n == UV_EAGAIN) n = 0;
  if (n < 0) {
    bench_fail(c, "writing a request", uv_strerror(n));
    return;
  }
  if ((size_t)n == c->out.len) return;
  buf = uv_buf_init((char *)c->out.data + n, (unsigned)(c->out.len - (size_t)n));
  c->wr.data = c;
  int rc = uv_write(&c->wr, (uv_stream_t *)&c->tcp, &buf, 1, bench_on_write);
  if (rc < 0) {
    bench_fail(c, "writing a request", uv_strerror(rc));
    return;
  }
  c->writing = 1;
}

/* ---- connection I/O --------------------------------------------------------------------------- */

static void bench_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  bench_conn *c = h->data;
  size_t want = suggested < 4096 ? 4096 : suggested;
  if (c->expect > c->in.len && c->expect - c->in.len > want) want = c->expect - c->in.len;
  if (trun_buf_reserve(&c->in, want) < 0) {
    *buf = uv_buf_init(NULL, 0);
    return;
  }
  *buf = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len));
}

static void bench_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  bench_conn *c = s->data;
  if (c->closed) return;
  if (nread < 0) {
    bench_fail(c, "reading a reply",
               nread == UV_EOF ? "the server closed the connection" : uv_strerror((int)nread));
    return;
  }
  c->in.len += (size_t)nread;
  if (nread == 0) return;
  if (!c->in_flight) {
    bench_fail(c, "reading", "bytes arrived with no request in flight");
    return;
  }
  if (c->op == B_GET && c->expect == 8 && c->in.len >= 8) c->expect = 8 + (size_t)trun_get_u64(c->in.data);
  if (c->in.len >= c->expect) bench_complete(c);
}

static void bench_on_closed(uv_handle_t *h) {
  bench_conn *c = h->data;
  trun_buf_free(&c->in);
  trun_buf_free(&c->out);
}

static void bench_close_conn(bench_conn *c) {
  if (c->closed) return;
  c->closed = 1;
  uv_close((uv_handle_t *)&c->tcp, bench_on_closed);
}

static void bench_fail(bench_conn *c, const char *what, const char *detail) {
  bench *b = c->b;
  b->errors++;
  if (b->first_err[0] == '\0')
    snprintf(b->first_err, sizeof(b->first_err), "connection %d: %s (%s): %s", (int)(c - b->conns), what,
             c->in_flight ? bench_op_names[c->op] : "idle", detail);
  if (c->in_flight) b->active--;
  c->in_flight = 0;
  bench_close_conn(c);
  bench_maybe_finish(b);
}

static void bench_finish(bench *b) {
  if (b->finished) return;
  b->finished = 1;
  if (b->t_end == 0) b->t_end = uv_hrtime();
  uv_close((uv_handle_t *)&b->timer, NULL);
  for (int i = 0; i < b->clients; i++) bench_close_conn(&b->conns[i]);
}

static void bench_maybe_finish(bench *b) {
  if (b->finished || b->active > 0) return;
  for (int i = 0; i < b->clients; i++)
    if (b->conns[i].writing) return;
  int any_open = 0;
  for (int i = 0; i < b->clients; i++) any_open |= !b->conns[i].closed;
  if (!bench_may_issue(b) || !any_open) bench_finish(b);
}

static void bench_on_timer(uv_timer_t *t) {
  bench *b = t->data;
  uint64_t now = uv_hrtime();
  if (b->duration_s > 0 && (double)(now - b->t_start) >= b->duration_s * 1e9) b->stopping = 1;
  for (int i = 0; i < b->clients; i++) {
    bench_conn *c = &b->conns[i];
    if (!c->closed && c->in_flight && now - c->t0 > (uint64_t)b->timeout_ms * 1000000u)
      bench_fail(c, "waiting for a reply", "no reply within --timeout-ms");
  }
  bench_maybe_finish(b);
}

/* ---- setup ------------------------------------------------------------------------------------ */

static void bench_raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
    trun_warn("getrlimit(RLIMIT_NOFILE): %s; many --clients may fail", strerror(errno));
    return;
  }
  if (rl.rlim_cur == rl.rlim_max) return;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
    trun_warn("raising the open-file limit to %llu: %s; many --clients may fail",
              (unsigned long long)rl.rlim_max, strerror(errno));
}

static void bench_client_opts(const bench *b, trun_client_opts *o) {
  trun_client_opts_default(o);
  o->host = b->host;
  o->port = b->port;
  o->gen = b->gen;
  o->timeout_ms = b->timeout_ms;
  o->key_prefix = "";
}

/* SETs every key with a blocking client and waits until the server has applied them. */
static int bench_populate(bench *b) {
  trun_client_opts o;
  bench_client_opts(b, &o);
  trun_client *c;
  int rc = trun_client_connect(&o, &c);
  if (rc < 0) return rc;
  trun_slice val = {b->value, b->value_bytes};
  char k[64];
  for (unsigned i = 0; i < b->keys && rc == 0; i++) {
    snprintf(k, sizeof(k), BENCH_KEY_FMT, i);
    rc = trun_client_set(c, trun_str(k), val);
  }
  int64_t n;
  if (rc == 0) rc = trun_client_num_keys(c, &n); /* replies only after every SET before it */
  trun_client_close(c);
  return rc;
}

/* Opens every connection (handshake included) and hands its socket to the loop. */
static int bench_connect_all(bench *b) {
  trun_client_opts o;
  bench_client_opts(b, &o);
  for (int i = 0; i < b->clients; i++) {
    bench_conn *c = &b->conns[i];
    c->b = b;
    c->rng = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull + uv_hrtime();
    if (c->rng == 0) c->rng = 1;
    c->closed = 1; /* until the handle exists */
    trun_client *tc;
    int rc = trun_client_connect(&o, &tc);
    if (rc < 0) return rc;
    int fd = trun_client_release_fd(tc);
    if ((rc = uv_tcp_init(b->loop, &c->tcp)) < 0) {
      close(fd);
      trun_error("uv_tcp_init for connection %d: %s", i, uv_strerror(rc));
      return -ENOMEM;
    }
    c->tcp.data = c;
    c->closed = 0;
    if ((rc = uv_tcp_open(&c->tcp, fd)) < 0) {
      close(fd);
      trun_error("uv_tcp_open for connection %d to %s: %s", i, b->target, uv_strerror(rc));
      return -EIO;
    }
    if ((rc = uv_read_start((uv_stream_t *)&c->tcp, bench_on_alloc, bench_on_read)) < 0) {
      trun_error("uv_read_start for connection %d to %s: %s", i, b->target, uv_strerror(rc));
      return -EIO;
    }
  }
  return 0;
}

/* ---- report ----------------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *sorted, size_t n, double q) {
  if (n == 0) return 0;
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return (double)sorted[i] / 1000.0;
}

static int bench_report(bench *b) {
  qsort(b->lat, b->nlat, sizeof(*b->lat), cmp_u64);
  double secs = b->t_end > b->t_start ? (double)(b->t_end - b->t_start) / 1e9 : 0;
  double sum = 0;
  for (size_t i = 0; i < b->nlat; i++) sum += (double)b->lat[i];
  json_t *j =
      json_pack("{s:s, s:s, s:i, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:s, s:I, s:I}", "target",
                b->target, "gen", trun_proto_gen_name(b->gen), "clients", b->clients, "requests",
                (json_int_t)b->done, "seconds", secs, "ops_per_sec", secs > 0 ? (double)b->done / secs : 0.0,
                "mean_us", b->nlat ? sum / (double)b->nlat / 1000.0 : 0.0, "p50_us",
                pct_us(b->lat, b->nlat, 0.50), "p90_us", pct_us(b->lat, b->nlat, 0.90), "p99_us",
                pct_us(b->lat, b->nlat, 0.99), "p999_us", pct_us(b->lat, b->nlat, 0.999), "max_us",
                b->nlat ? (double)b->lat[b->nlat - 1] / 1000.0 : 0.0, "errors", (json_int_t)b->errors, "mix",
                b->mix, "value_bytes", (json_int_t)b->value_bytes, "keys", (json_int_t)b->keys);
  if (j == NULL) {
    fprintf(stderr, "trun-store bench: building the JSON result failed (out of memory)\n");
    return -ENOMEM;
  }
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
  json_decref(j);
  if (s == NULL) {
    fprintf(stderr, "trun-store bench: formatting the JSON result failed (out of memory)\n");
    return -ENOMEM;
  }
  printf("%s\n", s);
  free(s);
  return fflush(stdout) == 0 ? 0 : -EIO;
}

/* ---- main ------------------------------------------------------------------------------------- */

/* One event loop's share: connect its clients, run them, close them. Fills b's counters and latencies;
 * returns 0, or 1 when connecting failed (reported). */
static int bench_run_loop(bench *b) {
  uv_loop_t loop;
  int rc = uv_loop_init(&loop);
  if (rc < 0) {
    trun_error("uv_loop_init: %s", uv_strerror(rc));
    return 1;
  }
  b->loop = &loop;
  int status = 0;
  if ((rc = bench_connect_all(b)) < 0) {
    fprintf(stderr,
            "trun-store bench: opening %d connections to %s (%s) failed: %s; check --target, --gen "
            "and the open-file limit\n",
            b->clients, b->target, trun_proto_gen_name(b->gen), strerror(-rc));
    status = 1;
  } else {
    uv_timer_init(&loop, &b->timer);
    b->timer.data = b;
    uv_timer_start(&b->timer, bench_on_timer, 100, 100);
    b->t_start = uv_hrtime();
    for (int i = 0; i < b->clients; i++) bench_issue(&b->conns[i]);
    bench_maybe_finish(b);
    uv_run(&loop, UV_RUN_DEFAULT);
  }
  for (int i = 0; i < b->clients; i++) bench_close_conn(&b->conns[i]);
  uv_run(&loop, UV_RUN_DEFAULT);
  if ((rc = uv_loop_close(&loop)) < 0) trun_warn("uv_loop_close: %s", uv_strerror(rc));
  b->loop = NULL;
  return status;
}

static void *bench_thread(void *arg) {
  bench *b = arg;
  return (void *)(intptr_t)bench_run_loop(b);
}

/* Splits the clients and requests over b->threads loops, runs them together and merges their results
 * into b (latencies, counters, the earliest start and the latest end). */
static int bench_run_threads(bench *b) {
  int t = b->threads > b->clients ? b->clients : b->threads;
  bench *part = calloc((size_t)t, sizeof(bench));
  pthread_t *tid = calloc((size_t)t, sizeof(pthread_t));
  if (part == NULL || tid == NULL) {
    free(part), free(tid);
    fprintf(stderr, "trun-store bench: out of memory for %d threads\n", t);
    return 1;
  }
  int status = 0, started = 0, off = 0;
  for (int i = 0; i < t; i++) {
    part[i] = *b;
    part[i].clients = b->clients / t + (i < b->clients % t);
    part[i].requests =
        b->requests ? b->requests / (uint64_t)t + ((uint64_t)i < b->requests % (uint64_t)t) : 0;
    part[i].conns = b->conns + off;
    part[i].lat = NULL;
    part[i].nlat = part[i].caplat = 0;
    off += part[i].clients;
  }
  for (; started < t; started++)
    if (pthread_create(&tid[started], NULL, bench_thread, &part[started]) != 0) {
      fprintf(stderr, "trun-store bench: cannot start thread %d\n", started);
      status = 1;
      break;
    }
  b->t_start = UINT64_MAX;
  for (int i = 0; i < started; i++) {
    void *ret;
    pthread_join(tid[i], &ret);
    if (ret != NULL) status = 1;
    bench *p = &part[i];
    b->done += p->done;
    b->issued += p->issued;
    b->errors += p->errors;
    if (p->errors && b->first_err[0] == '\0') memcpy(b->first_err, p->first_err, sizeof(b->first_err));
    if (p->t_start && p->t_start < b->t_start) b->t_start = p->t_start;
    if (p->t_end > b->t_end) b->t_end = p->t_end;
    if (p->nlat) {
      uint64_t *nl = realloc(b->lat, (b->nlat + p->nlat) * sizeof(uint64_t));
      if (nl == NULL) {
        status = 1;
      } else {
        memcpy(nl + b->nlat, p->lat, p->nlat * sizeof(uint64_t));
        b->lat = nl;
        b->nlat += p->nlat;
      }
    }
    free(p->lat);
  }
  if (b->t_start == UINT64_MAX) b->t_start = 0;
  free(part);
  free(tid);
  return status;
}

static int bench_run(bench *b) {
  int rc = bench_populate(b);
  if (rc < 0) {
    fprintf(stderr, "trun-store bench: writing the %u keys to %s (%s) failed: %s; check --target and --gen\n",
            b->keys, b->target, trun_proto_gen_name(b->gen), strerror(-rc));
    return 1;
  }
  int status = b->threads > 1 ? bench_run_threads(b) : bench_run_loop(b);
  if (status != 0) return status;
  status = bench_report(b) < 0 || b->errors > 0 || b->done == 0 ? 1 : 0;
  if (b->errors > 0)
    fprintf(stderr, "trun-store bench: %llu request(s) failed against %s; first: %s\n",
            (unsigned long long)b->errors, b->target, b->first_err);
  return status;
}

int trun_store_bench_main(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof(b));
  b.gen = TRUN_GEN_V2;
  b.clients = 16;
  b.value_bytes = 32;
  b.keys = 1000;
  b.timeout_ms = 30000;
  bench_parse_mix(&b, "set=40,get=40,add=20");
  int rc = bench_parse_args(&b, argc, argv);
  if (rc != 0) return rc < 0 ? 0 : rc;
  if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) trun_warn("ignoring SIGPIPE: %s", strerror(errno));
  bench_raise_nofile();
  b.conns = calloc((size_t)b.clients, sizeof(*b.conns));
  b.value = malloc(b.value_bytes ? b.value_bytes : 1);
  if (b.conns == NULL || b.value == NULL) {
    fprintf(stderr, "trun-store bench: out of memory for %d connections\n", b.clients);
    free(b.conns);
    free(b.value);
    return 1;
  }
  for (size_t i = 0; i < b.value_bytes; i++) b.value[i] = (uint8_t)('a' + i % 26);
  for (int i = 0; i < b.clients; i++) b.conns[i].closed = 1;
  int status = bench_run(&b);
  free(b.lat);
  free(b.conns);
  free(b.value);
  return status;
}
