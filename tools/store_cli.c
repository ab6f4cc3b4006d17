/* `trun-store cli`: runs store operations with the C client against any TCPStore server and prints one result
 * line per operation. Exit codes: 0 ok, 1 an operation or the connection failed, 2 bad command line. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/store.h"
#include "store_tool.h"

typedef enum {
  CLI_SET,
  CLI_GET,
  CLI_ADD,
  CLI_CAS,
  CLI_WAIT,
  CLI_CHECK,
  CLI_DELETE,
  CLI_APPEND,
  CLI_MULTI_GET,
  CLI_MULTI_SET,
  CLI_NUM_KEYS,
  CLI_PING,
  CLI_LIST,
  CLI_QUEUE_PUSH,
  CLI_QUEUE_POP,
  CLI_QUEUE_LEN
} cli_kind;

typedef struct {
  const char *name;
  cli_kind kind;
  int min_args, max_args; /* max -1: any number */
  int pairs;              /* arguments come in key/value pairs */
  const char *args;       /* for messages */
} cli_op_def;

static const cli_op_def cli_ops[] = {
    {"set", CLI_SET, 2, 2, 0, "KEY VALUE"},
    {"get", CLI_GET, 1, 1, 0, "KEY"},
    {"add", CLI_ADD, 2, 2, 0, "KEY DELTA"},
    {"cas", CLI_CAS, 3, 3, 0, "KEY EXPECTED DESIRED"},
    {"compare_set", CLI_CAS, 3, 3, 0, "KEY EXPECTED DESIRED"},
    {"wait", CLI_WAIT, 1, -1, 0, "KEY..."},
    {"check", CLI_CHECK, 1, -1, 0, "KEY..."},
    {"delete", CLI_DELETE, 1, 1, 0, "KEY"},
    {"append", CLI_APPEND, 2, 2, 0, "KEY VALUE"},
    {"multi_get", CLI_MULTI_GET, 1, -1, 0, "KEY..."},
    {"multi_set", CLI_MULTI_SET, 2, -1, 1, "KEY VALUE [KEY VALUE]..."},
    {"num_keys", CLI_NUM_KEYS, 0, 0, 0, ""},
    {"ping", CLI_PING, 0, 0, 0, ""},
    {"list", CLI_LIST, 0, 0, 0, ""},
    {"queue_push", CLI_QUEUE_PUSH, 2, 2, 0, "KEY VALUE"},
    {"queue_pop", CLI_QUEUE_POP, 1, 1, 0, "KEY"},
    {"queue_len", CLI_QUEUE_LEN, 1, 1, 0, "KEY"},
};

#define CLI_NOPS (sizeof(cli_ops) / sizeof(cli_ops[0]))

typedef struct {
  const cli_op_def *def;
  char **args;
  int nargs;
  int64_t num; /* add's delta */
} cli_op;

typedef struct {
  trun_client *c;
  const char *target;
  int timeout_ms;
} cli_ctx;

static void cli_usage(FILE *f) {
  fprintf(f,
          "usage: trun-store cli --target HOST:PORT [--gen v2|1.13|2.1] [--timeout-ms T] [--prefix P]\n"
          "                      OP ARGS... [-- OP ARGS...]\n"
          "  --target HOST:PORT  the TCPStore server ([ADDR]:PORT for IPv6)\n"
          "  --gen G             wire generation: v2 (torch >= 2.2, default), 1.13 (also 2.0), 2.1\n"
          "  --timeout-ms T      connect, reply and wait timeout (default 30000)\n"
          "  --prefix P          prepended to every key (default '/', as torch's Python client)\n"
          "Operations and what each prints:\n"
          "  set K V -> ok            get K -> value         add K N -> new value\n"
          "  cas K EXP DES -> reply   wait K... -> ok|timeout check K... -> true|false\n"
          "  delete K -> true|false   append K V -> ok       multi_get K... -> values, space-separated\n"
          "  multi_set K V [K V]... -> ok                    num_keys -> count\n"
          "  ping -> ok               list -> keys, sorted, space-separated\n"
          "  queue_push K V -> ok     queue_pop K -> value   queue_len K -> length\n"
          "get, multi_get and queue_pop wait for their keys like torch; a timeout there is a failure (exit "
          "1).\n");
}

static const cli_op_def *cli_find(const char *name) {
  for (size_t i = 0; i < CLI_NOPS; i++)
    if (strcmp(cli_ops[i].name, name) == 0) return &cli_ops[i];
  return NULL;
}

/* Splits argv (OP ARGS [-- OP ARGS]...) into ops; 0 or 2 (usage error, reported). */
static int cli_parse_ops(int argc, char **argv, cli_op *ops, int *nops) {
  int i = 0;
  *nops = 0;
  while (i < argc) {
    const cli_op_def *d = cli_find(argv[i]);
    if (d == NULL) {
      fprintf(stderr, "trun-store cli: unknown operation '%s'; see trun-store cli --help\n", argv[i]);
      return 2;
    }
    int j = i + 1;
    while (j < argc && strcmp(argv[j], "--") != 0) j++;
    cli_op *op = &ops[(*nops)++];
    op->def = d;
    op->args = argv + i + 1;
    op->nargs = j - i - 1;
    if (op->nargs < d->min_args || (d->max_args >= 0 && op->nargs > d->max_args) ||
        (d->pairs && op->nargs % 2 != 0)) {
      fprintf(stderr, "trun-store cli: '%s' takes %s; got %d argument(s)\n", d->name,
              d->args[0] ? d->args : "no arguments", op->nargs);
      return 2;
    }
    long long v = 0;
    if (d->kind == CLI_ADD && trun_tool_parse_ll(op->args[1], INT64_MIN, INT64_MAX, &v) < 0)
      return trun_tool_bad_arg("add's DELTA (a 64-bit integer)", op->args[1]);
    op->num = v;
    i = j + 1; /* past the "--" */
  }
  if (*nops == 0) {
    fprintf(stderr, "trun-store cli: no operation given; see trun-store cli --help\n");
    return 2;
  }
  return 0;
}

static void print_bytes(const uint8_t *p, size_t n) {
  if (n > 0) fwrite(p, 1, n, stdout);
}

static trun_slice *cli_slices(char **args, int n, int step) {
  trun_slice *s = calloc((size_t)(n > 0 ? n : 1), sizeof(*s));
  if (s == NULL) return NULL;
  for (int i = 0; i * step < n; i++) s[i] = trun_str(args[i * step]);
  return s;
}

typedef struct {
  char **keys;
  size_t n, cap;
  int oom;
} key_list;

static void collect_key(void *arg, trun_slice key) {
  key_list *l = arg;
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    char **k = realloc(l->keys, cap * sizeof(*k));
    if (k == NULL) {
      l->oom = 1;
      return;
    }
    l->keys = k;
    l->cap = cap;
  }
  char *s = malloc(key.n + 1);
  if (s == NULL) {
    l->oom = 1;
    return;
  }
  if (key.n > 0) memcpy(s, key.p, key.n);
  s[key.n] = '\0';
  l->keys[l->n++] = s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int cli_list(cli_ctx *x) {
  key_list l = {0};
  int rc = trun_client_list(x->c, collect_key, &l);
  if (rc == 0 && l.oom) rc = -ENOMEM;
  if (rc == 0) {
    qsort(l.keys, l.n, sizeof(*l.keys), cmp_str);
    for (size_t i = 0; i < l.n; i++) printf("%s%s", i ? " " : "", l.keys[i]);
    printf("\n");
  }
  for (size_t i = 0; i < l.n; i++) free(l.keys[i]);
  free(l.keys);
  return rc;
}

static int cli_multi(cli_ctx *x, const cli_op *op) {
  int n = op->nargs;
  int rc = -ENOMEM;
  if (op->def->kind == CLI_MULTI_SET) {
    trun_slice *k = cli_slices(op->args, n, 2), *v = cli_slices(op->args + 1, n - 1, 2);
    if (k && v) rc = trun_client_multi_set(x->c, (size_t)n / 2, k, v);
    if (rc == 0) printf("ok\n");
    free(k);
    free(v);
    return rc;
  }
  trun_slice *k = cli_slices(op->args, n, 1);
  trun_buf *vals = calloc((size_t)n, sizeof(*vals));
  if (k && vals) rc = trun_client_multi_get(x->c, (size_t)n, k, vals, x->timeout_ms);
  for (int i = 0; i < n && rc == 0; i++) {
    if (i) printf(" ");
    print_bytes(vals[i].data, vals[i].len);
  }
  if (rc == 0) printf("\n");
  for (int i = 0; vals && i < n; i++) trun_buf_free(&vals[i]);
  free(vals);
  free(k);
  return rc;
}

/* Runs one operation and prints its result line; 0 or a negative errno. */
static int cli_run(cli_ctx *x, const cli_op *op) {
  trun_buf out = {0};
  trun_slice k = op->nargs > 0 ? trun_str(op->args[0]) : trun_str("");
  trun_slice v = op->nargs > 1 ? trun_str(op->args[1]) : trun_str("");
  int64_t n = 0;
  int rc = 0;
  switch (op->def->kind) {
    case CLI_SET:
      if ((rc = trun_client_set(x->c, k, v)) == 0) printf("ok\n");
      break;
    case CLI_APPEND:
      if ((rc = trun_client_append(x->c, k, v)) == 0) printf("ok\n");
      break;
    case CLI_QUEUE_PUSH:
      if ((rc = trun_client_queue_push(x->c, k, v)) == 0) printf("ok\n");
      break;
    case CLI_GET:
    case CLI_QUEUE_POP:
      rc = op->def->kind == CLI_GET ? trun_client_get(x->c, k, &out, x->timeout_ms)
                                    : trun_client_queue_pop(x->c, k, &out, x->timeout_ms);
      if (rc == 0) {
        print_bytes(out.data, out.len);
        printf("\n");
      }
      break;
    case CLI_CAS:
      if ((rc = trun_client_compare_set(x->c, k, v, trun_str(op->args[2]), &out)) == 0) {
        print_bytes(out.data, out.len);
        printf("\n");
      }
      break;
    case CLI_ADD:
      if ((rc = trun_client_add(x->c, k, op->num, &n)) == 0) printf("%lld\n", (long long)n);
      break;
    case CLI_DELETE:
      if ((rc = trun_client_delete(x->c, k)) >= 0) printf("%s\n", rc ? "true" : "false");
      break;
    case CLI_NUM_KEYS:
    case CLI_QUEUE_LEN:
      rc =
          op->def->kind == CLI_NUM_KEYS ? trun_client_num_keys(x->c, &n) : trun_client_queue_len(x->c, k, &n);
      if (rc == 0) printf("%lld\n", (long long)n);
      break;
    case CLI_PING:
      if ((rc = trun_client_ping(x->c)) == 0) printf("ok\n");
      break;
    case CLI_LIST: rc = cli_list(x); break;
    case CLI_WAIT:
    case CLI_CHECK: {
      trun_slice *ks = cli_slices(op->args, op->nargs, 1);
      if (ks == NULL) {
        rc = -ENOMEM;
        break;
      }
      if (op->def->kind == CLI_CHECK) {
        if ((rc = trun_client_check(x->c, (size_t)op->nargs, ks)) >= 0) printf("%s\n", rc ? "true" : "false");
      } else {
        rc = trun_client_wait(x->c, (size_t)op->nargs, ks, x->timeout_ms);
        if (rc == 0 || rc == -ETIMEDOUT) printf("%s\n", rc == 0 ? "ok" : "timeout");
        if (rc == -ETIMEDOUT) rc = 0;
      }
      free(ks);
      break;
    }
    case CLI_MULTI_GET:
    case CLI_MULTI_SET: rc = cli_multi(x, op); break;
  }
  trun_buf_free(&out);
  fflush(stdout);
  return rc < 0 ? rc : 0;
}

static void cli_report(const cli_ctx *x, const cli_op *op, int rc, trun_gen gen) {
  const char *hint =
      rc == -ENOTSUP     ? "the chosen --gen lacks this operation; torch >= 2.2 servers need --gen v2"
      : rc == -ETIMEDOUT ? "the key(s) did not appear in time; raise --timeout-ms or write them first"
                         : "see the message above; check that the server is up and --gen matches it";
  fprintf(stderr, "trun-store cli: %s%s%s on %s (%s) failed: %s; %s\n", op->def->name, op->nargs ? " " : "",
          op->nargs ? op->args[0] : "", x->target, trun_proto_gen_name(gen), strerror(-rc), hint);
}

int trun_store_cli_main(int argc, char **argv) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.timeout_ms = 30000;
  const char *target = NULL;
  char host[256];
  static const struct option opts[] = {{"target", required_argument, 0, 't'},
                                       {"gen", required_argument, 0, 'g'},
                                       {"timeout-ms", required_argument, 0, 'T'},
                                       {"prefix", required_argument, 0, 'p'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
    long long v;
    switch (ch) {
      case 't':
        target = optarg;
        if (trun_client_parse_target(optarg, host, sizeof(host), &o.port) < 0)
          return trun_tool_bad_arg("--target (HOST:PORT)", optarg);
        o.host = host;
        break;
      case 'g':
        if (trun_client_parse_gen(optarg, &o.gen) < 0)
          return trun_tool_bad_arg("--gen (v2, 1.13 or 2.1)", optarg);
        break;
      case 'T':
        if (trun_tool_parse_ll(optarg, 0, 86400000, &v) < 0) return trun_tool_bad_arg("--timeout-ms", optarg);
        o.timeout_ms = (int)v;
        break;
      case 'p': o.key_prefix = optarg; break;
      case 'h': cli_usage(stdout); return 0;
      default: cli_usage(stderr); return 2;
    }
  }
  if (target == NULL) {
    fprintf(stderr, "trun-store cli: --target HOST:PORT is required; see trun-store cli --help\n");
    return 2;
  }
  cli_op *ops = calloc((size_t)(argc > 0 ? argc : 1), sizeof(*ops));
  if (ops == NULL) {
    fprintf(stderr, "trun-store cli: out of memory parsing the operations\n");
    return 1;
  }
  int nops;
  int rc = cli_parse_ops(argc - optind, argv + optind, ops, &nops);
  if (rc != 0) {
    free(ops);
    return rc;
  }
  cli_ctx x = {.c = NULL, .target = target, .timeout_ms = o.timeout_ms};
  rc = trun_client_connect(&o, &x.c);
  if (rc < 0) {
    fprintf(stderr, "trun-store cli: cannot connect to %s (%s): %s; check --target and --gen\n", target,
            trun_proto_gen_name(o.gen), strerror(-rc));
    free(ops);
    return 1;
  }
  int status = 0;
  for (int i = 0; i < nops; i++) {
    if ((rc = cli_run(&x, &ops[i])) < 0) {
      cli_report(&x, &ops[i], rc, o.gen);
      status = 1;
      break;
    }
  }
  trun_client_close(x.c);
  free(ops);
  return status;
}
