/* `trun-store serve`: a stand-alone TCPStore server.
 * Exit codes: 0 stopped by SIGINT/SIGTERM, 1 could not listen, 2 bad command line. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "base/base.h"
#include "store/store.h"
#include "store_tool.h"

/* Defaults of serve's limits (the agent's stores use the same, agent/rdzv/store_acl.h). */
#define SERVE_FD_RESERVE 64
#define SERVE_MAX_CONNS_PER_PEER 4096
#define SERVE_MAX_CONN_MEMORY ((size_t)80 << 20)

typedef struct {
  trun_server *srv;
  uv_signal_t sigint, sigterm;
} serve_state;

static void on_stopped(void *arg) { (void)arg; }

static void on_signal(uv_signal_t *h, int signum) {
  serve_state *st = h->data;
  trun_info("signal %d: closing the store on port %d", signum, trun_server_port(st->srv));
  trun_server_close(st->srv, on_stopped, NULL);
  uv_close((uv_handle_t *)&st->sigint, NULL);
  uv_close((uv_handle_t *)&st->sigterm, NULL);
}

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: trun-store serve [--host H] [--port P] [--ready-file F] [--legacy 1.13|2.1]\n"
          "                        [--max-key-bytes N] [--max-value-bytes N] [--max-keys N] [--threads N]\n"
          "                        [--max-conns N] [--max-conns-per-peer N] [--max-conn-memory N]\n"
          "                        [--max-input-bytes N] [--max-reply-bytes N] [--max-wait-bytes N]\n"
          "                        [--max-wait-bytes-total N]\n"
          "  --host H          address to listen on (default: :: dual-stack, else 0.0.0.0)\n"
          "  --port P          TCP port; 0 picks a free one (default 29500)\n"
          "  --ready-file F    write the port to F once listening\n"
          "  --legacy G        numbering of clients without the VALIDATE handshake (default 1.13)\n"
          "  --max-key-bytes   longest key (default %u)\n"
          "  --max-value-bytes longest value (default %u)\n"
          "  --max-keys        keys in one CHECK/WAIT/MULTI request (default %u)\n"
          "  --threads N       event loops, one per thread, sharing the connections (1..%d, default 1);\n"
          "                    the key space is shared, WAIT wake-ups cross threads\n"
          "  --max-conns N     connections at once (default: the open-file limit, raised to its hard\n"
          "                    limit, less %d)\n"
          "  --max-conns-per-peer N  connections from one address (default %d; 0: no limit)\n"
          "  --max-conn-memory N     input one connection's request may buffer (default %zu)\n"
          "  --max-input-bytes N     input all connections buffer together (default %zu; 0: no limit)\n"
          "  --max-reply-bytes N     one reply, e.g. a MULTI_GET (default %zu; 0: no limit)\n"
          "  --max-wait-bytes N      one connection's pending WAIT / BARRIER / WATCH_KEY registrations,\n"
          "                          %d bytes and the key each (default %zu; 0: no limit)\n"
          "  --max-wait-bytes-total N  all connections' registrations together (default %zu; 0: no limit)\n"
          "Prints 'trun-store: listening on HOST:PORT' on stdout once ready.\n",
          TRUN_DEFAULT_MAX_KEY, TRUN_DEFAULT_MAX_VALUE, TRUN_DEFAULT_MAX_KEYS, TRUN_SERVER_MAX_THREADS,
          SERVE_FD_RESERVE, SERVE_MAX_CONNS_PER_PEER, SERVE_MAX_CONN_MEMORY, TRUN_SERVER_DEFAULT_MAX_INPUT,
          TRUN_SERVER_DEFAULT_MAX_REPLY, TRUN_SERVER_WAIT_REG_COST, TRUN_SERVER_DEFAULT_MAX_WAIT_CONN,
          TRUN_SERVER_DEFAULT_MAX_WAIT_TOTAL);
}

/* The store's limits for a stand-alone server: the hard open-file limit taken (as the agent does), and
 * connections refused before the last SERVE_FD_RESERVE descriptors are gone (every connection is one). */
static void serve_defaults(trun_server_opts *o) {
  trun_server_opts_default(o);
  o->port = 29500;
  o->max_conns_per_peer = SERVE_MAX_CONNS_PER_PEER;
  o->max_conn_memory = SERVE_MAX_CONN_MEMORY;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 1u << 30)
    o->max_conns = rl.rlim_cur > 2 * SERVE_FD_RESERVE ? (int)rl.rlim_cur - SERVE_FD_RESERVE : 64;
}

/* The numeric options: the name said when a value is refused, and the range. */
static const struct {
  int ch;
  const char *what;
  long long lo, hi;
} serve_nums[] = {{'p', "--port", 0, 65535},
                  {'K', "--max-key-bytes", 1, 1ll << 40},
                  {'V', "--max-value-bytes", 1, 1ll << 40},
                  {'N', "--max-keys", 1, 1ll << 32},
                  {'T', "--threads (1..64)", 1, TRUN_SERVER_MAX_THREADS},
                  {'C', "--max-conns", 1, 1 << 30},
                  {'P', "--max-conns-per-peer", 0, 1 << 30},
                  {'M', "--max-conn-memory (1024 or more)", 1024, 1ll << 40},
                  {'I', "--max-input-bytes", 0, 1ll << 40},
                  {'R', "--max-reply-bytes", 0, 1ll << 40},
                  {'W', "--max-wait-bytes", 0, 1ll << 40},
                  {'w', "--max-wait-bytes-total", 0, 1ll << 40}};

/* A numeric option's value v (in its range) into o. */
static void serve_set(trun_server_opts *o, int ch, long long v) {
  switch (ch) {
    case 'p': o->port = (int)v; break;
    case 'K': o->limits.max_key = (uint64_t)v; break;
    case 'V': o->limits.max_value = (uint64_t)v; break;
    case 'N': o->limits.max_keys = (uint64_t)v; break;
    case 'T': o->threads = (int)v; break;
    case 'C': o->max_conns = (int)v; break;
    case 'P': o->max_conns_per_peer = (int)v; break;
    case 'M': o->max_conn_memory = (size_t)v; break;
    case 'I': o->max_input_total = (size_t)v; break;
    case 'R': o->max_reply = (size_t)v; break;
    case 'W': o->max_wait_conn = (size_t)v; break;
    case 'w': o->max_wait_total = (size_t)v; break;
    default: break;
  }
}

/* The command line into o and *ready: 0, or the exit code with *done set (0 after --help, 2 bad usage). */
static int serve_parse(int argc, char **argv, trun_server_opts *o, const char **ready, int *done) {
  static const struct option opts[] = {{"host", required_argument, 0, 'h'},
                                       {"port", required_argument, 0, 'p'},
                                       {"ready-file", required_argument, 0, 'r'},
                                       {"legacy", required_argument, 0, 'l'},
                                       {"max-key-bytes", required_argument, 0, 'K'},
                                       {"max-value-bytes", required_argument, 0, 'V'},
                                       {"max-keys", required_argument, 0, 'N'},
                                       {"threads", required_argument, 0, 'T'},
                                       {"max-conns", required_argument, 0, 'C'},
                                       {"max-conns-per-peer", required_argument, 0, 'P'},
                                       {"max-conn-memory", required_argument, 0, 'M'},
                                       {"max-input-bytes", required_argument, 0, 'I'},
                                       {"max-reply-bytes", required_argument, 0, 'R'},
                                       {"max-wait-bytes", required_argument, 0, 'W'},
                                       {"max-wait-bytes-total", required_argument, 0, 'w'},
                                       {"help", no_argument, 0, 'H'},
                                       {0, 0, 0, 0}};
  int ch, mem_set = 0;
  *done = 1;
  *ready = NULL;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    size_t i = 0;
    while (i < sizeof(serve_nums) / sizeof(serve_nums[0]) && serve_nums[i].ch != ch) i++;
    if (i < sizeof(serve_nums) / sizeof(serve_nums[0])) {
      long long v;
      if (trun_tool_parse_ll(optarg, serve_nums[i].lo, serve_nums[i].hi, &v) < 0)
        return trun_tool_bad_arg(serve_nums[i].what, optarg);
      serve_set(o, ch, v);
      mem_set |= ch == 'M';
      continue;
    }
    switch (ch) {
      case 'h': o->host = optarg; break;
      case 'r': *ready = optarg; break;
      case 'l':
        if (strcmp(optarg, "1.13") == 0 || strcmp(optarg, "2.0") == 0)
          o->legacy = TRUN_GEN_LEGACY113;
        else if (strcmp(optarg, "2.1") == 0)
          o->legacy = TRUN_GEN_LEGACY21;
        else
          return trun_tool_bad_arg("--legacy (1.13 or 2.1)", optarg);
        break;
      case 'H': serve_usage(stdout); return 0;
      default: serve_usage(stderr); return 2;
    }
  }
  /* The default input limit of one connection holds the largest request the limits allow. */
  if (!mem_set && o->max_conn_memory < o->limits.max_value + o->limits.max_key + 64)
    o->max_conn_memory = o->limits.max_value + o->limits.max_key + 64;
  if (optind < argc) {
    fprintf(stderr, "trun-store serve: unexpected argument '%s'; see trun-store serve --help\n",
            argv[optind]);
    return 2;
  }
  *done = 0;
  return 0;
}

int trun_store_serve_main(int argc, char **argv) {
  trun_server_opts o;
  serve_defaults(&o);
  const char *ready;
  int done, rc = serve_parse(argc, argv, &o, &ready, &done);
  if (done) return rc;
  uv_loop_t *loop = uv_default_loop();
  serve_state st;
  rc = trun_server_start(loop, &o, &st.srv);
  if (rc < 0) {
    trun_error("cannot listen on %s:%d: %s; pick another --port or free it", o.host ? o.host : "::", o.port,
               uv_strerror(rc));
    uv_run(loop, UV_RUN_DEFAULT);
    return 1;
  }
  int port = trun_server_port(st.srv);
  uv_signal_init(loop, &st.sigint);
  uv_signal_init(loop, &st.sigterm);
  st.sigint.data = st.sigterm.data = &st;
  uv_signal_start(&st.sigint, on_signal, SIGINT);
  uv_signal_start(&st.sigterm, on_signal, SIGTERM);
  printf("trun-store: listening on %s:%d\n", o.host ? o.host : "::", port);
  fflush(stdout);
  if (ready && trun_tool_write_file(ready, port) < 0) {
    trun_error("cannot write --ready-file %s: %s", ready, strerror(errno));
    trun_server_close(st.srv, on_stopped, NULL);
    uv_close((uv_handle_t *)&st.sigint, NULL);
    uv_close((uv_handle_t *)&st.sigterm, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    return 1;
  }
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
  return 0;
}
