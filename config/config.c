#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/base.h"

static int fail(char *err, size_t errlen, const trun_settings *cl, trun_opt_id id, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const trun_opt_desc *d = trun_opt_desc_of(id);
  const trun_opt_val *v = &cl->v[id];
  if (v->src == TRUN_SRC_ENV && d->env)
    snprintf(err, errlen, "%s (from %s=%s)", msg, d->env, v->val);
  else if (v->src == TRUN_SRC_FILE && cl->config_path) /* file:line:column: the key's name, not --name */
    snprintf(err, errlen, "%s:%d:%d: %s", cl->config_path, v->line, v->col,
             msg + 2 * (strncmp(msg, "--", 2) == 0));
  else if (v->src == TRUN_SRC_DETECTED && cl->platform)
    snprintf(err, errlen, "%s (detected from the %s environment; set TRUN_PLATFORM=none to skip detection)",
             msg, cl->platform);
  else
    snprintf(err, errlen, "%s", msg);
  return -1;
}

/* "a.b,c": Python module names (dotted identifiers, ASCII) separated by commas; "" is none. */
static int module_list_ok(const char *s) {
  if (s == NULL) return 1;
  for (int start = 1; *s; s++) {
    int alpha = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_';
    if (*s == ',' || *s == '.') {
      if (start) return 0;
      start = 1;
    } else if (alpha || (!start && *s >= '0' && *s <= '9')) {
      start = 0;
    } else {
      return 0;
    }
    if (s[1] == '\0' && start) return 0;
  }
  return 1;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  while (*end && isspace((unsigned char)*end)) end++;
  if (s[0] == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (s[0] == '\0' || *end != '\0' || errno == ERANGE || v < 0) return -1;
  *out = v;
  return 0;
}

/* --crash-loop: "0" (off) or "K:SECONDS". */
static int parse_crash_loop(const char *s, trun_config *cfg) {
  char k[16];
  const char *colon = strchr(s, ':');
  cfg->crash_loop_rounds = 0;
  cfg->crash_loop_window = 60; /* off: failures within 60 s still count for --restart-backoff */
  if (colon == NULL) return strcmp(s, "0") == 0 ? 0 : -1;
  if ((size_t)(colon - s) >= sizeof(k)) return -1;
  memcpy(k, s, (size_t)(colon - s));
  k[colon - s] = '\0';
  if (parse_int(k, 1, 1000, &cfg->crash_loop_rounds) < 0 ||
      parse_double(colon + 1, &cfg->crash_loop_window) < 0 || !isfinite(cfg->crash_loop_window) ||
      cfg->crash_loop_window <= 0)
    return -1;
  return 0;
}

/* A finite bandwidth >= 0 (parse_double also takes "inf" and "nan"). */
static int parse_gbps(const char *s, double *out) {
  double v;
  if (parse_double(s, &v) < 0 || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* "N" or "MIN:MAX" with 0 < MIN <= MAX. */
static int parse_nnodes(const char *s, int *min, int *max) {
  const char *colon = strchr(s, ':');
  if (colon == NULL) {
    if (parse_int(s, 1, 1000000, min) < 0) return -1;
    *max = *min;
    return 0;
  }
  if (strchr(colon + 1, ':')) return -1;
  char a[32];
  size_t n = (size_t)(colon - s);
  if (n == 0 || n >= sizeof(a)) return -1;
  memcpy(a, s, n);
  a[n] = '\0';
  if (parse_int(a, 1, 1000000, min) < 0 || parse_int(colon + 1, 1, 1000000, max) < 0) return -1;
  return *min <= *max ? 0 : -1;
}

/* host[:port] or [v6]:port; port -1 when absent. */
static int parse_endpoint(const char *s, char *host, size_t hostlen, int *port) {
  *port = -1;
  const char *p = s, *hend;
  if (*p == '[') {
    hend = strchr(p, ']');
    if (hend == NULL) return -1;
    p++;
    if ((size_t)(hend - p) >= hostlen) return -1;
    memcpy(host, p, (size_t)(hend - p));
    host[hend - p] = '\0';
    p = hend + 1;
    if (*p == '\0') return 0;
    if (*p != ':') return -1;
    return parse_int(p + 1, 0, 65535, port);
  }
  const char *colon = strrchr(s, ':');
  if (colon && strchr(s, ':') != colon) colon = NULL; /* bare IPv6 address: no port */
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  if (n >= hostlen) return -1;
  memcpy(host, s, n);
  host[n] = '\0';
  if (colon) return parse_int(colon + 1, 0, 65535, port);
  return 0;
}

/* "0".."3" for all ranks, or "lr:v,lr:v" with one-digit local ranks (torchrun's regex). */
static int parse_std(const char *s, int *all, signed char *per) {
  for (int i = 0; i < 10; i++) per[i] = -1;
  *all = 0;
  if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0') {
    *all = s[0] - '0';
    return 0;
  }
  const char *p = s;
  while (*p) {
    if (!isdigit((unsigned char)p[0]) || p[1] != ':' || p[2] < '0' || p[2] > '3') return -1;
    per[p[0] - '0'] = (signed char)(p[2] - '0');
    p += 3;
    if (*p == ',')
      p++;
    else if (*p)
      return -1;
  }
  return 0;
}

static int parse_ranks_filter(const char *s, trun_config *cfg) {
  cfg->ranks_filter_set = 0;
  if (s == NULL || s[0] == '\0') return 0;
  const char *p = s;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v >= TRUN_MAX_LOCAL) return -1;
    cfg->ranks_filter[v] = 1;
    p = end;
    if (*p == ',')
      p++;
    else if (*p)
      return -1;
  }
  cfg->ranks_filter_set = 1;
  return 0;
}

static int signal_number(const char *name) {
  static const struct {
    const char *name;
    int sig;
  } table[] = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},    {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT},
               {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},  {"SIGABRT", SIGABRT}, {"SIGALRM", SIGALRM},
               {"SIGCONT", SIGCONT}, {"SIGWINCH", SIGWINCH}};
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (strcmp(name, table[i].name) == 0) return table[i].sig;
  return -1;
}

static int parse_signals(const char *s, trun_config *cfg) {
  cfg->nsignals = 0;
  const char *p = s;
  while (*p) {
    while (*p == ' ') p++;
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    while (n > 0 && p[n - 1] == ' ') n--;
    char name[16];
    if (n == 0 || n >= sizeof(name) || cfg->nsignals == TRUN_MAX_SIGNALS) return -1;
    memcpy(name, p, n);
    name[n] = '\0';
    int sig = signal_number(name);
    if (sig < 0) return -1;
    cfg->signals[cfg->nsignals++] = sig;
    p = e ? e + 1 : p + strlen(p);
  }
  return 0;
}

void trun_uuid4(char *out, size_t len) {
  unsigned char b[16];
  if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
    for (size_t i = 0; i < sizeof(b); i++) b[i] = (unsigned char)(rand() ^ (int)i);
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, len, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* A setting's value (the option table's order, config.h). */
#define VAL(id) (v[id].val)

/* How many nodes and workers, the rendezvous backend, its id and settings, --standalone. */
static int conf_job(const trun_settings *cl, trun_config *cfg, char *err, size_t errlen) {
  const trun_opt_val *v = cl->v;
  int tmp;
  if (parse_nnodes(VAL(TRUN_OPT_NNODES), &cfg->min_nodes, &cfg->max_nodes) < 0)
    return fail(err, errlen, cl, TRUN_OPT_NNODES, "--nnodes '%s' is not N or MIN:MAX with 0 < MIN <= MAX",
                VAL(TRUN_OPT_NNODES));
  cfg->nnodes_given = v[TRUN_OPT_NNODES].src != TRUN_SRC_DEFAULT;
  cfg->nproc_spec = VAL(TRUN_OPT_NPROC_PER_NODE);
  const char *np = cfg->nproc_spec;
  if (strcmp(np, "cpu") && strcmp(np, "gpu") && strcmp(np, "auto") &&
      parse_int(np, 1, TRUN_MAX_LOCAL, &tmp) < 0)
    return fail(err, errlen, cl, TRUN_OPT_NPROC_PER_NODE,
                "--nproc-per-node '%s' must be a number from 1 to %d, cpu, gpu or auto", np, TRUN_MAX_LOCAL);

  const char *backend = VAL(TRUN_OPT_RDZV_BACKEND);
  cfg->backend_given = v[TRUN_OPT_RDZV_BACKEND].src != TRUN_SRC_DEFAULT;
  if (strcmp(backend, "static") == 0)
    cfg->backend = TRUN_RDZV_STATIC;
  else if (strcmp(backend, "c10d") == 0)
    cfg->backend = TRUN_RDZV_C10D;
  else if (strcmp(backend, "trun") == 0)
    cfg->backend = TRUN_RDZV_TRUN;
  else
    return fail(err, errlen, cl, TRUN_OPT_RDZV_BACKEND,
                "--rdzv-backend '%s' is not supported by trun; use static, c10d or trun (trun's fast elastic "
                "rendezvous)",
                backend);
  snprintf(cfg->run_id, sizeof(cfg->run_id), "%s", VAL(TRUN_OPT_RDZV_ID));
  cfg->rdzv_conf = VAL(TRUN_OPT_RDZV_CONF);
  /* The reason names --rdzv-conf and the key, as the agent said it when it checked them. */
  if (trun_config_rdzv_conf_check(cfg->rdzv_conf, NULL, NULL, err, errlen) < 0) return -1;
  cfg->standalone = VAL(TRUN_OPT_STANDALONE) != NULL && strcmp(VAL(TRUN_OPT_STANDALONE), "0") != 0;
  return 0;
}

/* What each worker runs and where its output goes: restarts, the monitor interval, role, -m / --no-python /
 * --run-path, --log-dir, --redirects, --tee, --local-ranks-filter. */
static int conf_workers(const trun_settings *cl, trun_config *cfg, char *err, size_t errlen) {
  const trun_opt_val *v = cl->v;
  if (parse_int(VAL(TRUN_OPT_MAX_RESTARTS), 0, 1000000, &cfg->max_restarts) < 0)
    return fail(err, errlen, cl, TRUN_OPT_MAX_RESTARTS, "--max-restarts '%s' must be an integer >= 0",
                VAL(TRUN_OPT_MAX_RESTARTS));
  if (parse_double(VAL(TRUN_OPT_MONITOR_INTERVAL), &cfg->monitor_interval) < 0)
    return fail(err, errlen, cl, TRUN_OPT_MONITOR_INTERVAL,
                "--monitor-interval '%s' must be a number of seconds >= 0", VAL(TRUN_OPT_MONITOR_INTERVAL));
  cfg->role = VAL(TRUN_OPT_ROLE);
  cfg->module = VAL(TRUN_OPT_MODULE) && strcmp(VAL(TRUN_OPT_MODULE), "0") != 0;
  cfg->no_python = VAL(TRUN_OPT_NO_PYTHON) && strcmp(VAL(TRUN_OPT_NO_PYTHON), "0") != 0;
  cfg->run_path = VAL(TRUN_OPT_RUN_PATH) && strcmp(VAL(TRUN_OPT_RUN_PATH), "0") != 0;
  if (cfg->module && cfg->no_python && !cfg->run_path)
    return fail(err, errlen, cl, TRUN_OPT_NO_PYTHON,
                "--no-python and -m/--module cannot be used together (a module needs python)");
  cfg->log_dir = VAL(TRUN_OPT_LOG_DIR);
  if (parse_std(VAL(TRUN_OPT_REDIRECTS), &cfg->redirect_all, cfg->redirect_lr) < 0)
    return fail(err, errlen, cl, TRUN_OPT_REDIRECTS,
                "--redirects '%s' must be 0-3 or local_rank:value pairs like 0:3,1:0",
                VAL(TRUN_OPT_REDIRECTS));
  if (parse_std(VAL(TRUN_OPT_TEE), &cfg->tee_all, cfg->tee_lr) < 0)
    return fail(err, errlen, cl, TRUN_OPT_TEE,
                "--tee '%s' must be 0-3 or local_rank:value pairs like 0:3,1:0", VAL(TRUN_OPT_TEE));
  if (parse_ranks_filter(VAL(TRUN_OPT_LOCAL_RANKS_FILTER), cfg) < 0)
    return fail(err, errlen, cl, TRUN_OPT_LOCAL_RANKS_FILTER,
                "--local-ranks-filter '%s' must be a comma list of local ranks",
                VAL(TRUN_OPT_LOCAL_RANKS_FILTER));
  return 0;
}

/* This node's rank, the master's address and port, --local-addr. */
static int conf_master(const trun_settings *cl, trun_config *cfg, char *err, size_t errlen) {
  const trun_opt_val *v = cl->v;
  cfg->node_rank_given = v[TRUN_OPT_NODE_RANK].src != TRUN_SRC_DEFAULT;
  if (parse_int(VAL(TRUN_OPT_NODE_RANK), 0, 1000000, &cfg->node_rank) < 0)
    return fail(err, errlen, cl, TRUN_OPT_NODE_RANK, "--node-rank '%s' must be an integer >= 0",
                VAL(TRUN_OPT_NODE_RANK));
  const char *ma = VAL(TRUN_OPT_MASTER_ADDR);
  if (ma[0] == '[') {
    size_t n = strlen(ma);
    if (n < 3 || ma[n - 1] != ']' || n - 2 >= sizeof(cfg->master_addr))
      return fail(err, errlen, cl, TRUN_OPT_MASTER_ADDR, "--master-addr '%s' is not a host", ma);
    memcpy(cfg->master_addr, ma + 1, n - 2);
    cfg->master_addr[n - 2] = '\0';
  } else if (snprintf(cfg->master_addr, sizeof(cfg->master_addr), "%s", ma) >=
             (int)sizeof(cfg->master_addr)) {
    return fail(err, errlen, cl, TRUN_OPT_MASTER_ADDR, "--master-addr is longer than 255 bytes");
  }
  if (parse_int(VAL(TRUN_OPT_MASTER_PORT), 0, 65535, &cfg->master_port) < 0)
    return fail(err, errlen, cl, TRUN_OPT_MASTER_PORT, "--master-port '%s' must be a port 0-65535",
                VAL(TRUN_OPT_MASTER_PORT));
  cfg->master_port_given = v[TRUN_OPT_MASTER_PORT].src != TRUN_SRC_DEFAULT;
  cfg->local_addr = VAL(TRUN_OPT_LOCAL_ADDR);
  if (cfg->local_addr && (cfg->local_addr[0] == '\0' || strlen(cfg->local_addr) > 255))
    return fail(err, errlen, cl, TRUN_OPT_LOCAL_ADDR,
                "--local-addr '%s' must be an address, a host name (at most 255 bytes) or auto",
                cfg->local_addr);
  cfg->local_addr_auto = cfg->local_addr && strcmp(cfg->local_addr, "auto") == 0;
  if (cfg->local_addr_auto) cfg->local_addr = NULL; /* the FQDN until the rendezvous store is reached */
  return 0;
}

/* The signals passed on, the shutdown and exit-barrier time-outs (torch's environment variables too), the
 * event-log handler and logs specs torchrun knows, the restart policy. */
static int conf_lifecycle(const trun_settings *cl, char **envp, trun_config *cfg, char *err, size_t errlen) {
  const trun_opt_val *v = cl->v;
  cfg->signals_text = VAL(TRUN_OPT_SIGNALS_TO_HANDLE);
  if (parse_signals(cfg->signals_text, cfg) < 0)
    return fail(err, errlen, cl, TRUN_OPT_SIGNALS_TO_HANDLE,
                "--signals-to-handle '%s' must be a comma list of names like SIGTERM,SIGUSR1",
                cfg->signals_text);
  const char *st = VAL(TRUN_OPT_SHUTDOWN_TIMEOUT);
  if (st == NULL) st = trun_env_get(envp, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  cfg->shutdown_timeout = 30;
  if (st && parse_double(st, &cfg->shutdown_timeout) < 0)
    return fail(err, errlen, cl, TRUN_OPT_SHUTDOWN_TIMEOUT,
                "--shutdown-timeout '%s' must be a number of seconds >= 0", st);
  const char *eb = VAL(TRUN_OPT_EXIT_BARRIER_TIMEOUT);
  if (eb == NULL) eb = trun_env_get(envp, "TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT");
  cfg->exit_barrier_timeout = 300;
  if (eb && (parse_double(eb, &cfg->exit_barrier_timeout) < 0 || isnan(cfg->exit_barrier_timeout)))
    return fail(
        err, errlen, cl, TRUN_OPT_EXIT_BARRIER_TIMEOUT, "%s '%s' must be a number of seconds >= 0",
        VAL(TRUN_OPT_EXIT_BARRIER_TIMEOUT) ? "--exit-barrier-timeout" : "TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT",
        eb);
  /* torchrun refuses names it cannot find (torch.distributed.elastic.events.handlers, the torchrun.logs_specs
   * entry points); trun has torch's built-in ones and loads no Python plugins. */
  const char *elh = VAL(TRUN_OPT_EVENT_LOG_HANDLER);
  if (elh && strcmp(elh, "null") != 0 && strcmp(elh, "console") != 0 &&
      strcmp(elh, "dynamic_rendezvous") != 0)
    return fail(
        err, errlen, cl, TRUN_OPT_EVENT_LOG_HANDLER,
        "--event-log-handler '%s' is not an event log handler: use null, console or dynamic_rendezvous", elh);
  const char *ls = VAL(TRUN_OPT_LOGS_SPECS);
  if (ls && strcmp(ls, "default") != 0)
    return fail(
        err, errlen, cl, TRUN_OPT_LOGS_SPECS,
        "--logs-specs '%s' is not a torchrun.logs_specs entry point trun has: only 'default' (trun loads "
        "no Python plugins; use --log-dir, --redirects and --tee)",
        ls);
  /* The restart policy (agent/restart_policy.h). */
  if (parse_double(VAL(TRUN_OPT_RESTART_BACKOFF), &cfg->restart_backoff) < 0 ||
      !isfinite(cfg->restart_backoff) || cfg->restart_backoff > 3600)
    return fail(err, errlen, cl, TRUN_OPT_RESTART_BACKOFF, "--restart-backoff '%s' must be 0-3600 seconds",
                VAL(TRUN_OPT_RESTART_BACKOFF));
  if (parse_crash_loop(VAL(TRUN_OPT_CRASH_LOOP), cfg) < 0)
    return fail(err, errlen, cl, TRUN_OPT_CRASH_LOOP,
                "--crash-loop '%s' must be K:SECONDS (K 1-1000 failed rounds, SECONDS > 0) or 0 (off)",
                VAL(TRUN_OPT_CRASH_LOOP));
  cfg->restart_offset = -1;
  /* Empty counts as unset: the downward API gives "" for an annotation the pod lacks (a JobSet's
   * restart-attempt outside a JobSet controller, e.g. under podman kube play). */
  if (VAL(TRUN_OPT_RESTART_OFFSET) && VAL(TRUN_OPT_RESTART_OFFSET)[0] &&
      parse_int(VAL(TRUN_OPT_RESTART_OFFSET), 0, 1000000, &cfg->restart_offset) < 0)
    return fail(err, errlen, cl, TRUN_OPT_RESTART_OFFSET,
                "--restart-offset '%s' must be an integer 0-1000000", VAL(TRUN_OPT_RESTART_OFFSET));
  return 0;
}

/* Observability and hardening: --events, --metrics-port, the stall and hang watches, the store's peers and
 * threads, --dry-run / --explain / --list-excluded and the other switches. */
static int conf_observe(const trun_settings *cl, trun_config *cfg, char *err, size_t errlen) {
  const trun_opt_val *v = cl->v;
  /* Observability and hardening (issue 8). */
  cfg->events = VAL(TRUN_OPT_EVENTS);
  if (cfg->events && cfg->events[0] == '\0')
    return fail(err, errlen, cl, TRUN_OPT_EVENTS, "--events needs a file name or fd:N");
  cfg->metrics_port = -1;
  if (VAL(TRUN_OPT_METRICS_PORT) && parse_int(VAL(TRUN_OPT_METRICS_PORT), 0, 65535, &cfg->metrics_port) < 0)
    return fail(err, errlen, cl, TRUN_OPT_METRICS_PORT,
                "--metrics-port '%s' must be a port 0-65535 (0: any free)", VAL(TRUN_OPT_METRICS_PORT));
  if (VAL(TRUN_OPT_STALL_TIMEOUT) && parse_double(VAL(TRUN_OPT_STALL_TIMEOUT), &cfg->stall_timeout) < 0)
    return fail(err, errlen, cl, TRUN_OPT_STALL_TIMEOUT,
                "--stall-timeout '%s' must be a number of seconds >= 0", VAL(TRUN_OPT_STALL_TIMEOUT));
  if (VAL(TRUN_OPT_STALL_SIGNAL) && (cfg->stall_signal = signal_number(VAL(TRUN_OPT_STALL_SIGNAL))) <= 0)
    return fail(err, errlen, cl, TRUN_OPT_STALL_SIGNAL,
                "--stall-signal '%s' must be a signal name like SIGUSR1", VAL(TRUN_OPT_STALL_SIGNAL));
  cfg->hang_timeout = TRUN_HANG_TIMEOUT_DEFAULT_S;
  if (VAL(TRUN_OPT_HANG_TIMEOUT) && (parse_double(VAL(TRUN_OPT_HANG_TIMEOUT), &cfg->hang_timeout) < 0 ||
                                     !isfinite(cfg->hang_timeout) || cfg->hang_timeout > 86400))
    return fail(err, errlen, cl, TRUN_OPT_HANG_TIMEOUT,
                "--hang-timeout '%s' must be a number of seconds 0-86400 (0: name the hang only)",
                VAL(TRUN_OPT_HANG_TIMEOUT));
  cfg->store_allow_peers =
      VAL(TRUN_OPT_STORE_ALLOW_PEERS) && strcmp(VAL(TRUN_OPT_STORE_ALLOW_PEERS), "0") != 0;
  cfg->store_threads = 0;
  const char *stt = VAL(TRUN_OPT_STORE_THREADS);
  if (stt && strcmp(stt, "auto") != 0 && parse_int(stt, 1, 64, &cfg->store_threads) < 0)
    return fail(err, errlen, cl, TRUN_OPT_STORE_THREADS, "--store-threads '%s' must be 1-64 or auto", stt);
  cfg->virtual_local_rank =
      VAL(TRUN_OPT_VIRTUAL_LOCAL_RANK) && strcmp(VAL(TRUN_OPT_VIRTUAL_LOCAL_RANK), "0") != 0;
  cfg->dry_run = VAL(TRUN_OPT_DRY_RUN) && strcmp(VAL(TRUN_OPT_DRY_RUN), "0") != 0;
  cfg->log_line_prefix = VAL(TRUN_OPT_LOG_LINE_PREFIX);
  cfg->explain = VAL(TRUN_OPT_EXPLAIN) && strcmp(VAL(TRUN_OPT_EXPLAIN), "0") != 0;
  cfg->list_excluded = VAL(TRUN_OPT_LIST_EXCLUDED);
  if (cfg->list_excluded && strcmp(cfg->list_excluded, "slurm") != 0 &&
      strcmp(cfg->list_excluded, "json") != 0)
    return fail(err, errlen, cl, TRUN_OPT_LIST_EXCLUDED, "--list-excluded '%s' must be slurm or json",
                cfg->list_excluded);
  cfg->no_imds = VAL(TRUN_OPT_NO_IMDS) && strcmp(VAL(TRUN_OPT_NO_IMDS), "0") != 0;
  cfg->watch_stdin = VAL(TRUN_OPT_WATCH_STDIN) && strcmp(VAL(TRUN_OPT_WATCH_STDIN), "0") != 0;
  return 0;
}

/* The node's side: --warm-start and its pool's options, --on-split-pods, --gpu-cache, the health gate,
 * --nccl-report, --preflight and its thresholds, --numa-binding. */
static int conf_node(const trun_settings *cl, trun_config *cfg, char *err, size_t errlen) {
  const trun_opt_val *v = cl->v;
  cfg->warm_start = VAL(TRUN_OPT_WARM_START) && strcmp(VAL(TRUN_OPT_WARM_START), "0") != 0;
  cfg->warm_modules = VAL(TRUN_OPT_WARM_START_MODULES);
  cfg->warm_cuda = VAL(TRUN_OPT_WARM_START_CUDA) && strcmp(VAL(TRUN_OPT_WARM_START_CUDA), "0") != 0;
  if (cfg->warm_cuda && !cfg->warm_start)
    return fail(err, errlen, cl, TRUN_OPT_WARM_START_CUDA,
                "--warm-start-cuda needs --warm-start (it makes the CUDA contexts in the warm-start pool)");
  cfg->warm_nccl = VAL(TRUN_OPT_WARM_START_NCCL) && strcmp(VAL(TRUN_OPT_WARM_START_NCCL), "0") != 0;
  if (cfg->warm_nccl && !cfg->warm_cuda)
    return fail(err, errlen, cl, TRUN_OPT_WARM_START_NCCL,
                "--warm-start-nccl needs --warm-start --warm-start-cuda (NCCL is set up in the pool's CUDA "
                "contexts)");
  if (!module_list_ok(cfg->warm_modules))
    return fail(err, errlen, cl, TRUN_OPT_WARM_START_MODULES,
                "--warm-start-modules '%s' must be Python module names separated by commas (torch,numpy)",
                cfg->warm_modules);
  cfg->numa_binding = VAL(TRUN_OPT_NUMA_BINDING);
  const char *osp = VAL(TRUN_OPT_ON_SPLIT_PODS);
  if (osp && strcmp(osp, "warn") != 0 && strcmp(osp, "fail") != 0)
    return fail(err, errlen, cl, TRUN_OPT_ON_SPLIT_PODS, "--on-split-pods '%s' must be warn or fail", osp);
  cfg->on_split_pods_fail = osp && strcmp(osp, "fail") == 0;
  const char *gc = VAL(TRUN_OPT_GPU_CACHE);
  if (gc && strcmp(gc, "on") != 0 && strcmp(gc, "off") != 0)
    return fail(err, errlen, cl, TRUN_OPT_GPU_CACHE, "--gpu-cache '%s' must be on or off", gc);
  cfg->gpu_cache = !(gc && strcmp(gc, "off") == 0);
  const char *hc = VAL(TRUN_OPT_HEALTH_CHECK);
  cfg->health_check = TRUN_HEALTH_CHECK_WARN;
  if (hc && strcmp(hc, "off") == 0)
    cfg->health_check = TRUN_HEALTH_CHECK_OFF;
  else if (hc && strcmp(hc, "fail") == 0)
    cfg->health_check = TRUN_HEALTH_CHECK_FAIL;
  else if (hc && strcmp(hc, "warn") != 0)
    return fail(err, errlen, cl, TRUN_OPT_HEALTH_CHECK, "--health-check '%s' must be off, warn or fail", hc);
  cfg->health_checks = VAL(TRUN_OPT_HEALTH_CHECKS) ? VAL(TRUN_OPT_HEALTH_CHECKS) : "all";
  cfg->nccl_report = VAL(TRUN_OPT_NCCL_REPORT) && strcmp(VAL(TRUN_OPT_NCCL_REPORT), "0") != 0;
  cfg->preflight = VAL(TRUN_OPT_PREFLIGHT) && strcmp(VAL(TRUN_OPT_PREFLIGHT), "0") != 0;
  cfg->preflight_pass = cfg->preflight_warn = -1;
  if (VAL(TRUN_OPT_PREFLIGHT_PASS) && parse_gbps(VAL(TRUN_OPT_PREFLIGHT_PASS), &cfg->preflight_pass) < 0)
    return fail(err, errlen, cl, TRUN_OPT_PREFLIGHT_PASS,
                "--preflight-pass '%s' must be a bandwidth in GB/s >= 0", VAL(TRUN_OPT_PREFLIGHT_PASS));
  if (VAL(TRUN_OPT_PREFLIGHT_WARN) && parse_gbps(VAL(TRUN_OPT_PREFLIGHT_WARN), &cfg->preflight_warn) < 0)
    return fail(err, errlen, cl, TRUN_OPT_PREFLIGHT_WARN,
                "--preflight-warn '%s' must be a bandwidth in GB/s >= 0", VAL(TRUN_OPT_PREFLIGHT_WARN));
  if (cfg->preflight_pass >= 0 && cfg->preflight_warn > cfg->preflight_pass)
    return fail(err, errlen, cl, TRUN_OPT_PREFLIGHT_WARN,
                "--preflight-warn %s must not be above --preflight-pass %s (warn <= pass)",
                VAL(TRUN_OPT_PREFLIGHT_WARN), VAL(TRUN_OPT_PREFLIGHT_PASS));
  if (cfg->numa_binding && strcmp(cfg->numa_binding, "node") != 0)
    return fail(err, errlen, cl, TRUN_OPT_NUMA_BINDING,
                "--numa-binding '%s': trun implements only 'node' (each worker on its GPU's NUMA node CPUs)",
                cfg->numa_binding);
  return 0;
}

/* The rendezvous endpoint and the standalone / single-node switches (torchrun's rules). */
static int conf_endpoint(const trun_settings *cl, trun_config *cfg, char *err, size_t errlen) {
  const trun_opt_val *v = cl->v;
  /* Rendezvous endpoint and the standalone / single-node switches (torchrun's rules). */
  const char *ep = VAL(TRUN_OPT_RDZV_ENDPOINT);
  cfg->endpoint_port = -1;
  /* --rdzv-status reads the job's backend and size from its store: a command line that would not start a
   * job of its own (a range, or an endpoint without a port, with the default backend) still names it. */
  int status_only = VAL(TRUN_OPT_RDZV_STATUS) && strcmp(VAL(TRUN_OPT_RDZV_STATUS), "0") != 0;
  if (cfg->standalone) {
    /* torchrun would wait for the other nodes at localhost: never what was meant. A detected node count (a
     * Slurm allocation of several nodes) is not asked for: each node runs its own single-node job. */
    if (cfg->max_nodes != 1 && v[TRUN_OPT_NNODES].src != TRUN_SRC_DETECTED)
      return fail(err, errlen, cl, TRUN_OPT_NNODES,
                  "--standalone runs one node, but --nnodes %s asks for more: drop --standalone and give "
                  "--rdzv-endpoint (or --master-addr) for a job of several nodes, or --nnodes 1",
                  VAL(TRUN_OPT_NNODES));
    cfg->backend = TRUN_RDZV_C10D;
    cfg->min_nodes = cfg->max_nodes = 1;
    snprintf(cfg->endpoint_host, sizeof(cfg->endpoint_host), "localhost");
    cfg->endpoint_port = 0;
    trun_uuid4(cfg->run_id, sizeof(cfg->run_id));
  } else if (ep && ep[0]) {
    if (parse_endpoint(ep, cfg->endpoint_host, sizeof(cfg->endpoint_host), &cfg->endpoint_port) < 0 ||
        cfg->endpoint_host[0] == '\0')
      return fail(err, errlen, cl, TRUN_OPT_RDZV_ENDPOINT,
                  "--rdzv-endpoint '%s' is not host[:port] or [ipv6]:port", ep);
    if ((cfg->backend != TRUN_RDZV_STATIC || (status_only && !cfg->backend_given)) && cfg->endpoint_port < 0)
      cfg->endpoint_port = 29400;
    if (cfg->backend == TRUN_RDZV_STATIC && cfg->endpoint_port < 0)
      return fail(err, errlen, cl, TRUN_OPT_RDZV_ENDPOINT,
                  "--rdzv-endpoint '%s' needs a port with the static backend", ep);
  } else if (cfg->backend == TRUN_RDZV_STATIC) {
    if (cfg->max_nodes == 1 && !cfg->master_port_given) {
      /* One node and no port asked for: a private store on a free port, like torchrun's newest. */
      snprintf(cfg->endpoint_host, sizeof(cfg->endpoint_host), "localhost");
      cfg->endpoint_port = 0;
      if (v[TRUN_OPT_RDZV_ID].src == TRUN_SRC_DEFAULT) trun_uuid4(cfg->run_id, sizeof(cfg->run_id));
    } else {
      snprintf(cfg->endpoint_host, sizeof(cfg->endpoint_host), "%s", cfg->master_addr);
      cfg->endpoint_port = cfg->master_port;
    }
  } else if (v[TRUN_OPT_MASTER_ADDR].src == TRUN_SRC_DETECTED) {
    /* A dynamic backend without an endpoint on a detected platform (Slurm's first host, ...): the nodes
     * meet at the master the platform named, on c10d's default port, instead of each at its own localhost. */
    snprintf(cfg->endpoint_host, sizeof(cfg->endpoint_host), "%s", cfg->master_addr);
    cfg->endpoint_port = 29400;
  } else {
    snprintf(cfg->endpoint_host, sizeof(cfg->endpoint_host), "localhost");
    cfg->endpoint_port = 29400;
  }
  if (cfg->backend == TRUN_RDZV_STATIC && !status_only) {
    if (cfg->min_nodes != cfg->max_nodes)
      return fail(err, errlen, cl, TRUN_OPT_NNODES,
                  "--nnodes %s: a range needs --rdzv-backend c10d (static takes a fixed number)",
                  VAL(TRUN_OPT_NNODES));
    if (cfg->node_rank >= cfg->max_nodes)
      return fail(err, errlen, cl, TRUN_OPT_NODE_RANK, "--node-rank %d must be below --nnodes %d",
                  cfg->node_rank, cfg->max_nodes);
  }
  return 0;
}

int trun_config_from_settings(const trun_settings *cl, char **envp, trun_config *cfg, char *err,
                              size_t errlen) {
  memset(cfg, 0, sizeof(*cfg));
  const trun_opt_val *v = cl->v;
  if (conf_job(cl, cfg, err, errlen) < 0 || conf_workers(cl, cfg, err, errlen) < 0 ||
      conf_master(cl, cfg, err, errlen) < 0 || conf_lifecycle(cl, envp, cfg, err, errlen) < 0 ||
      conf_observe(cl, cfg, err, errlen) < 0 || conf_node(cl, cfg, err, errlen) < 0 ||
      conf_endpoint(cl, cfg, err, errlen) < 0)
    return -1;
  cfg->script = cl->script;
  cfg->script_args = cl->script_args;
  cfg->nscript_args = cl->nscript_args;
  cfg->print_config = VAL(TRUN_OPT_PRINT_CONFIG) != NULL;
  cfg->rdzv_status = VAL(TRUN_OPT_RDZV_STATUS) && strcmp(VAL(TRUN_OPT_RDZV_STATUS), "0") != 0;
  if (cfg->script == NULL && !cfg->explain && !cfg->print_config && !cfg->rdzv_status &&
      !cfg->list_excluded) {
    snprintf(err, errlen, "the following arguments are required: training_script");
    return -1;
  }
  return 0;
}
#undef VAL

int trun_config_redirects(const trun_config *cfg, int local_rank) {
  int r = cfg->redirect_all;
  if (local_rank < 10 && cfg->redirect_lr[local_rank] >= 0) r = cfg->redirect_lr[local_rank];
  return r | trun_config_tee(cfg, local_rank); /* tee implies the file */
}

int trun_config_tee(const trun_config *cfg, int local_rank) {
  int t = cfg->tee_all;
  if (local_rank < 10 && cfg->tee_lr[local_rank] >= 0) t = cfg->tee_lr[local_rank];
  return t;
}

int trun_config_console_shows(const trun_config *cfg, int local_rank) {
  return !cfg->ranks_filter_set || (local_rank < TRUN_MAX_LOCAL && cfg->ranks_filter[local_rank]);
}
