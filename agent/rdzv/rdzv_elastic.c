/* The c10d backend as torchrun runs it (torchrun-compat.md §3): who serves the rendezvous store (is_host),
 * torchelastic's dynamic rendezvous (rdzv_dyn.c), then torch's agent protocol in the round's key space
 * "torch.rendezvous.<run_id>.<round>/": rank assignment, the workers' store address and the exit barrier.
 * Two protocol generations, told apart by the state's node key: torch 1.13 (`fqdn`) and torch >= 2.5
 * (`addr`), so that trun agents and torchrun agents of either generation share one job. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "agent/discover/discover.h"
#include "rdzv.h"
#include "rdzv_dyn.h"
#include "rdzv_fast.h"
#include "store/store.h"
#include "store_acl.h"

/* ---- --rdzv-conf ---------------------------------------------------------------------------------- */

/* Finds key in "k=v,k=v"; copies its value into out. 1 found, 0 absent. */
static int conf_get(const char *conf, const char *key, char *out, size_t len) {
  size_t klen = strlen(key);
  for (const char *p = conf; p && *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (eq) {
      const char *ke = eq;
      while (ke > p && ke[-1] == ' ') ke--;
      if ((size_t)(ke - p) == klen && strncmp(p, key, klen) == 0) {
        const char *v = eq + 1;
        while (v < end && *v == ' ') v++;
        size_t n = (size_t)(end - v);
        while (n && v[n - 1] == ' ') n--;
        if (n >= len) n = len - 1;
        memcpy(out, v, n);
        out[n] = '\0';
        return 1;
      }
    }
    p = end;
  }
  return 0;
}

double trun_rdzv_conf_seconds(const trun_config *cfg, const char *key, double def) {
  char v[64];
  if (!cfg->rdzv_conf || !conf_get(cfg->rdzv_conf, key, v, sizeof(v))) return def;
  char *end;
  double d = strtod(v, &end);
  return (*v && *end == '\0' && d > 0) ? d : def;
}

/* torch's get_as_bool: 1 true, 0 false, -1 absent, -2 not a boolean. */
static int conf_bool(const char *conf, const char *key) {
  char v[32];
  if (!conf || !conf_get(conf, key, v, sizeof(v))) return -1;
  static const char *const yes[] = {"1", "true", "t", "yes", "y"}, *const no[] = {"0", "false", "f", "no",
                                                                                  "n"};
  for (int i = 0; i < 5; i++) {
    if (strcasecmp(v, yes[i]) == 0) return 1;
    if (strcasecmp(v, no[i]) == 0) return 0;
  }
  return -2;
}

static const char *const int_keys[] = {
    "join_timeout",        "last_call_timeout",      "close_timeout", "heartbeat_timeout",
    "keep_alive_interval", "keep_alive_max_attempt", "read_timeout",  "timeout"};

int trun_rdzv_conf_check(const trun_config *cfg, char *err, size_t errlen) {
  const char *conf = cfg->rdzv_conf;
  if (conf == NULL || *conf == '\0') return 0;
  for (const char *p = conf; *p;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == '\0') break;
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (eq == NULL || eq == p) {
      snprintf(err, errlen, "--rdzv-conf '%s': '%.*s' is not key=value", conf, (int)(end - p), p);
      return -1;
    }
    char k[64], v[128];
    snprintf(k, sizeof(k), "%.*s", (int)(eq - p), p);
    for (size_t n = strlen(k); n && k[n - 1] == ' '; n--) k[n - 1] = '\0';
    conf_get(conf, k, v, sizeof(v));
    int known = 0;
    for (size_t i = 0; i < sizeof(int_keys) / sizeof(int_keys[0]); i++)
      if (strcmp(k, int_keys[i]) == 0) {
        known = 1;
        char *e;
        long x = strtol(v, &e, 10);
        if (*v == '\0' || *e != '\0' || x <= 0) {
          snprintf(err, errlen, "--rdzv-conf %s=%s: must be a positive whole number of %s", k, v,
                   strcmp(k, "keep_alive_max_attempt") == 0 ? "attempts" : "seconds");
          return -1;
        }
      }
    if (strcmp(k, "is_host") == 0) {
      known = 1;
      if (conf_bool(conf, "is_host") == -2) {
        snprintf(err, errlen, "--rdzv-conf is_host=%s: use true or false (1/0, yes/no)", v);
        return -1;
      }
    } else if (strcmp(k, "store_type") == 0) {
      known = 1;
      if (strcasecmp(v, "tcp") != 0) {
        snprintf(err, errlen, "--rdzv-conf store_type=%s: trun supports the tcp store only", v);
        return -1;
      }
    } else if (strcmp(k, "torch_version") == 0) {
      known = 1;
      if (strcmp(v, "1.13") != 0 && strncmp(v, "2.", 2) != 0) {
        snprintf(err, errlen,
                 "--rdzv-conf torch_version=%s: give the torchrun agents' torch version (1.13 or 2.x) "
                 "or leave it out",
                 v);
        return -1;
      }
    }
    if (!known) trun_warn("--rdzv-conf: key '%s' is not used by trun's c10d backend (ignored)", k);
    p = end;
  }
  return 0;
}

/* ---- who serves the store -------------------------------------------------------------------------- */

/* torch's _matches_machine_hostname, plus this host's interface addresses (so that an address given on a
 * secondary NIC or in a network namespace counts too). */
static int is_this_host(const char *host) {
  if (strcmp(host, "localhost") == 0) return 1;
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127) return 1;
  if (inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6)) return 1;
  char name[256], fqdn[256];
  if (gethostname(name, sizeof(name)) == 0 && strcmp(host, name) == 0) return 1;
  trun_fqdn(fqdn, sizeof(fqdn));
  if (strcmp(host, fqdn) == 0) return 1;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) != 0) return 0;
  struct ifaddrs *ifs = NULL;
  int match = 0;
  if (getifaddrs(&ifs) == 0) {
    for (struct addrinfo *ai = res; ai && !match; ai = ai->ai_next)
      for (struct ifaddrs *i = ifs; i && !match; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != ai->ai_family) continue;
        if (ai->ai_family == AF_INET)
          match = memcmp(&((struct sockaddr_in *)ai->ai_addr)->sin_addr,
                         &((struct sockaddr_in *)i->ifa_addr)->sin_addr, sizeof(struct in_addr)) == 0;
        else if (ai->ai_family == AF_INET6)
          match = memcmp(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr,
                         &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, sizeof(struct in6_addr)) == 0;
      }
    freeifaddrs(ifs);
  }
  freeaddrinfo(res);
  return match;
}

static void layout_hint(const trun_config *cfg, trun_rdzv_layout *lay) {
  char v[32] = "";
  lay->key = TRUN_RDZV_KEY_ADDR;
  lay->redundancy = true;
  lay->tz = TRUN_RDZV_TZ_AWARE;
  lay->proto = 4;
  if (!cfg->rdzv_conf || !conf_get(cfg->rdzv_conf, "torch_version", v, sizeof(v))) return;
  int minor = strncmp(v, "2.", 2) == 0 ? atoi(v + 2) : -1;
  if (strcmp(v, "1.13") == 0) {
    lay->key = TRUN_RDZV_KEY_FQDN;
    lay->redundancy = false;
    lay->tz = TRUN_RDZV_TZ_NAIVE;
  } else if (minor >= 0 && minor < 6) {
    lay->redundancy = minor >= 3;
    lay->tz = TRUN_RDZV_TZ_NAIVE;
  }
}

/* Serves the store when this host is the endpoint (is_host, or torch's guess) and connects to it with gen's
 * wire generation. 0 or -1 with a reason. */
static int elastic_connect(trun_rdzv *r, const trun_config *cfg, int nproc, trun_gen gen, char *err,
                           size_t errlen) {
  int (*poll)(void *) = r->poll;
  void *poll_arg = r->poll_arg;
  memset(r, 0, sizeof(*r));
  r->poll = poll;
  r->poll_arg = poll_arg;
  r->cfg = cfg;
  r->nproc = nproc;
  if (cfg->local_addr)
    snprintf(r->host_addr, sizeof(r->host_addr), "%s", cfg->local_addr);
  else
    trun_fqdn(r->host_addr, sizeof(r->host_addr));

  int explicit_host = conf_bool(cfg->rdzv_conf, "is_host");
  int is_host = explicit_host >= 0 ? explicit_host : is_this_host(cfg->endpoint_host);
  int port = cfg->endpoint_port;
  const char *connect_host = cfg->endpoint_host;
  if (is_host) {
    int bound = port;
    /* Limits per peer and connection; with one node at most, loopback (or this host) only. */
    int rc = trun_store_acl_start(cfg->max_nodes == 1, cfg->endpoint_host, port, cfg->store_threads, &r->host,
                                  &bound);
    if (rc < 0 && explicit_host == 1) {
      snprintf(err, errlen,
               "is_host=true but the rendezvous store cannot listen on port %d: %s; free the port or pick "
               "another in --rdzv-endpoint",
               port, uv_strerror(rc));
      return -1;
    }
    if (rc < 0) {
      /* torch: a guessed host that cannot bind (another agent on this machine serves) becomes a client. */
      trun_debug("port %d is taken (%s): joining the store there as a client", port, uv_strerror(rc));
    } else {
      connect_host = trun_store_host_addr(r->host);
      trun_debug("serving the rendezvous store on port %d", bound);
    }
  }
  r->master_port = port;
  snprintf(r->master_addr, sizeof(r->master_addr), "%s", cfg->endpoint_host);

  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = connect_host;
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = (int)trun_rdzv_conf_seconds(cfg, "read_timeout", 60) * 1000;
  o.quiet_connect = 1;
  o.gen = gen;
  int rc = trun_rdzv_connect_polling(r, &o, (int)trun_rdzv_conf_seconds(cfg, "join_timeout", 600) * 1000);
  if (rc < 0) {
    snprintf(err, errlen,
             rc == -EINTR ? "interrupted while reaching the rendezvous store at %s:%d"
                          : "cannot reach the rendezvous store at %s:%d (%s); is the agent on that host up "
                            "(--rdzv-endpoint), the port open?",
             connect_host, port, strerror(-rc));
    trun_rdzv_c10d_close(r);
    return -1;
  }
  return 0;
}

int trun_rdzv_c10d_init(trun_rdzv *r, const trun_config *cfg, int nproc, char *err, size_t errlen) {
  /* The store speaks the generation of the torch that serves it: 1.13 / 2.0 and 2.1 had no VALIDATE. */
  trun_gen gen = TRUN_GEN_V2;
  char ver[32];
  if (cfg->rdzv_conf && conf_get(cfg->rdzv_conf, "torch_version", ver, sizeof(ver)) &&
      (strcmp(ver, "1.13") == 0 || strcmp(ver, "2.0") == 0 || strcmp(ver, "2.1") == 0))
    trun_client_parse_gen(ver, &gen);
  if (elastic_connect(r, cfg, nproc, gen, err, errlen) < 0) return -1;
  r->dynamic = 1;
  int read_timeout = (int)trun_rdzv_conf_seconds(cfg, "read_timeout", 60);
  int join_s = (int)trun_rdzv_conf_seconds(cfg, "join_timeout", 600);
  int port = cfg->endpoint_port, rc;
  trun_dyn_settings s = {
      .min_nodes = cfg->min_nodes,
      .max_nodes = cfg->max_nodes,
      .join_timeout_us = (int64_t)(join_s * 1e6),
      .last_call_us = (int64_t)(trun_rdzv_conf_seconds(cfg, "last_call_timeout", 30) * 1e6),
      .close_timeout_us = (int64_t)(trun_rdzv_conf_seconds(cfg, "close_timeout", 30) * 1e6),
      .heartbeat_timeout_us = (int64_t)(trun_rdzv_conf_seconds(cfg, "heartbeat_timeout", 5) * 1e6),
      .keep_alive_us = (int64_t)(trun_rdzv_conf_seconds(cfg, "keep_alive_interval", 5) * 1e6),
      .keep_alive_max_attempt = (int)trun_rdzv_conf_seconds(cfg, "keep_alive_max_attempt", 3),
      .read_timeout_ms = read_timeout * 1000,
  };
  trun_rdzv_layout hint;
  layout_hint(cfg, &hint);
  r->dyn = calloc(1, sizeof(*r->dyn));
  if (r->dyn == NULL) {
    snprintf(err, errlen, "out of memory");
    trun_rdzv_c10d_close(r);
    return -1;
  }
  rc = trun_dyn_init(r->dyn, r->client, cfg->run_id, r->host_addr, getpid(), 0, &s, &hint);
  r->dyn->poll = r->poll;
  r->dyn->poll_arg = r->poll_arg;
  if (rc < 0) {
    snprintf(err, errlen, "c10d rendezvous at %s:%d: %s", cfg->endpoint_host, port, r->dyn->err);
    trun_rdzv_c10d_close(r);
    return -1;
  }
  return 0;
}

/* ---- one round ------------------------------------------------------------------------------------- */

static void pkey(const trun_rdzv *r, char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void pkey(const trun_rdzv *r, char *out, size_t len, const char *fmt, ...) {
  char tail[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tail, sizeof(tail), fmt, ap);
  va_end(ap);
  if (snprintf(out, len, "%s%s", r->round_prefix, tail) >= (int)len) out[0] = '\0'; /* names no key */
}

static int get_str(trun_rdzv *r, const char *k, char *out, size_t len, int timeout_ms) {
  int rc = trun_rdzv_wait_key(r, k, timeout_ms);
  if (rc < 0) return rc;
  trun_buf v = {0};
  rc = trun_client_get(r->client, trun_str(k), &v, 10000);
  if (rc == 0) {
    size_t n = v.len < len - 1 ? v.len : len - 1;
    memcpy(out, v.data, n);
    out[n] = '\0';
  }
  trun_buf_free(&v);
  return rc;
}

typedef struct {
  char role[128];
  int rank, lws;
} role_info;

/* {"role": "default", "rank": 0, "local_world_size": 2} as json.dumps writes it. Roles are plain names
 * (trun's --role); a role with characters JSON escapes is written escaped. */
static void role_json(const trun_rdzv *r, char *out, size_t len) {
  char esc[200];
  size_t j = 0;
  for (const char *p = r->cfg->role; *p && j + 7 < sizeof(esc); p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch == '"' || ch == '\\')
      esc[j++] = '\\', esc[j++] = (char)ch;
    else if (ch < 0x20)
      j += (size_t)snprintf(esc + j, sizeof(esc) - j, "\\u%04x", ch);
    else
      esc[j++] = (char)ch;
  }
  esc[j] = '\0';
  snprintf(out, len, "{\"role\": \"%s\", \"rank\": %d, \"local_world_size\": %d}", esc, r->group_rank,
           r->nproc);
}

/* Reads the fields of a role_info JSON object (the ones torch writes). 0 or -EPROTO. */
static int role_parse(const char *s, role_info *ri) {
  const char *p = strstr(s, "\"role\"");
  const char *q = strstr(s, "\"rank\"");
  const char *l = strstr(s, "\"local_world_size\"");
  if (!p || !q || !l) return -EPROTO;
  p = strchr(p + 6, '"');
  if (!p) return -EPROTO;
  size_t n = 0;
  for (p++; *p && *p != '"' && n + 1 < sizeof(ri->role); p++) {
    if (*p == '\\' && p[1]) p++;
    ri->role[n++] = *p;
  }
  ri->role[n] = '\0';
  q = strchr(q + 6, ':');
  l = strchr(l + 18, ':');
  if (!q || !l) return -EPROTO;
  ri->rank = atoi(q + 1);
  ri->lws = atoi(l + 1);
  return 0;
}

/* torch's rank arithmetic: global ranks by group rank, role ranks by group rank within the role. */
static void assign(const role_info *ri, int n, int g, int *base, int *total, int *rbase, int *rtotal) {
  *base = *total = *rbase = *rtotal = 0;
  for (int i = 0; i < n; i++) {
    int same = strcmp(ri[i].role, ri[g].role) == 0;
    if (i < g) *base += ri[i].lws;
    *total += ri[i].lws;
    if (same && i < g) *rbase += ri[i].lws;
    if (same) *rtotal += ri[i].lws;
  }
}

/* torch >= 2.3: rank 0 gathers role_info/<i> (multi_get), writes assigned_ranks/<i> (multi_set); the others
 * read theirs. */
static int ranks_v2(trun_rdzv *r, int timeout_ms) {
  char k[512], v[400];
  int world = r->group_world_size, rc;
  pkey(r, k, sizeof(k), "torchelastic/role_info/%d", r->group_rank);
  role_json(r, v, sizeof(v));
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(v))) < 0) return rc;
  if (r->group_rank == 0) {
    char **names = calloc((size_t)world, sizeof(char *));
    trun_slice *keys = calloc((size_t)world, sizeof(*keys));
    trun_buf *vals = calloc((size_t)world, sizeof(*vals));
    role_info *ri = calloc((size_t)world, sizeof(*ri));
    char **outv = calloc((size_t)world, sizeof(char *));
    trun_slice *outs = calloc((size_t)world, sizeof(*outs));
    rc = (names && keys && vals && ri && outv && outs) ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < world; i++) {
      pkey(r, k, sizeof(k), "torchelastic/role_info/%d", i);
      if ((names[i] = strdup(k)) == NULL) rc = -ENOMEM;
      if (rc == 0) keys[i] = trun_str(names[i]);
    }
    for (int i = 0; rc == 0 && i < world; i++) rc = trun_rdzv_wait_key(r, names[i], timeout_ms);
    if (rc == 0) rc = trun_client_multi_get(r->client, (size_t)world, keys, vals, timeout_ms);
    for (int i = 0; rc == 0 && i < world; i++) {
      char tmp[512];
      size_t n = vals[i].len < sizeof(tmp) - 1 ? vals[i].len : sizeof(tmp) - 1;
      memcpy(tmp, vals[i].data, n);
      tmp[n] = '\0';
      rc = role_parse(tmp, &ri[i]);
    }
    for (int i = 0; rc == 0 && i < world; i++) {
      int b, t, rb, rt;
      assign(ri, world, i, &b, &t, &rb, &rt);
      free(names[i]);
      pkey(r, k, sizeof(k), "torchelastic/assigned_ranks/%d", i);
      names[i] = strdup(k);
      if (names[i] == NULL || asprintf(&outv[i], "[%d, %d, %d, %d]", b, t, rb, rt) < 0) {
        outv[i] = NULL;
        rc = -ENOMEM;
        break;
      }
      keys[i] = trun_str(names[i]);
      outs[i] = trun_str(outv[i]);
    }
    if (rc == 0) rc = trun_client_multi_set(r->client, (size_t)world, keys, outs);
    for (int i = 0; i < world; i++) {
      if (names) free(names[i]);
      if (vals) trun_buf_free(&vals[i]);
      if (outv) free(outv[i]);
    }
    free(names), free(keys), free(vals), free(ri), free(outv), free(outs);
    if (rc < 0) return rc;
  }
  pkey(r, k, sizeof(k), "torchelastic/assigned_ranks/%d", r->group_rank);
  if ((rc = get_str(r, k, v, sizeof(v), timeout_ms)) < 0) return rc;
  int b, t, rb, rt;
  if (sscanf(v, "[%d, %d, %d, %d]", &b, &t, &rb, &rt) != 4 &&
      sscanf(v, "[%d,%d,%d,%d]", &b, &t, &rb, &rt) != 4)
    return -EPROTO;
  r->base_rank = b, r->world_size = t, r->role_base_rank = rb, r->role_world_size = rt;
  return 0;
}

/* torch 1.13: store_util.synchronize — every agent writes role_info<g>, reads all, writes <g>.FIN; rank 0
 * waits for every FIN. */
static int synchronize_113(trun_rdzv *r, const char *prefix, const char *data, role_info *ri,
                           int timeout_ms) {
  char k[512];
  int world = r->group_world_size, rc;
  pkey(r, k, sizeof(k), "%s%d", prefix, r->group_rank);
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(data))) < 0) return rc;
  for (int i = 0; i < world; i++) {
    char got[512];
    pkey(r, k, sizeof(k), "%s%d", prefix, i);
    if ((rc = get_str(r, k, got, sizeof(got), timeout_ms)) < 0) return rc;
    if (ri && (rc = role_parse(got, &ri[i])) < 0) return rc;
  }
  pkey(r, k, sizeof(k), "%s%d.FIN", prefix, r->group_rank);
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str("FIN"))) < 0) return rc;
  if (r->group_rank == 0)
    for (int i = 0; i < world; i++) {
      pkey(r, k, sizeof(k), "%s%d.FIN", prefix, i);
      if ((rc = trun_rdzv_wait_key(r, k, timeout_ms)) < 0) return rc;
    }
  return 0;
}

static int ranks_113(trun_rdzv *r, int timeout_ms) {
  char v[400];
  role_info *ri = calloc((size_t)r->group_world_size, sizeof(*ri));
  if (ri == NULL) return -ENOMEM;
  role_json(r, v, sizeof(v));
  int rc = synchronize_113(r, "torchelastic/role_info", v, ri, timeout_ms);
  if (rc == 0)
    assign(ri, r->group_world_size, r->group_rank, &r->base_rank, &r->world_size, &r->role_base_rank,
           &r->role_world_size);
  free(ri);
  return rc;
}

/* A port nobody listens on now, as torch's _get_socket_with_port (bind localhost:0, close). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof(a);
  int port = -EADDRNOTAVAIL;
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &n) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* Deletes every key in the workers' store this agent serves (the last attempt's), as torch >= 2.6 workers
 * write unprefixed keys. */
static void wipe_worker_store(trun_rdzv *r);

static int publish_master(trun_rdzv *r, const char *addr, int port) {
  char k[512], v[32];
  pkey(r, k, sizeof(k), "MASTER_ADDR");
  int rc = trun_client_set(r->client, trun_str(k), trun_str(addr));
  snprintf(v, sizeof(v), "%d", port);
  pkey(r, k, sizeof(k), "MASTER_PORT");
  if (rc == 0) rc = trun_client_set(r->client, trun_str(k), trun_str(v));
  return rc;
}

static int read_master(trun_rdzv *r, int timeout_ms) {
  char k[512], v[32];
  pkey(r, k, sizeof(k), "MASTER_ADDR");
  int rc = get_str(r, k, r->master_addr, sizeof(r->master_addr), timeout_ms);
  pkey(r, k, sizeof(k), "MASTER_PORT");
  if (rc == 0) rc = get_str(r, k, v, sizeof(v), timeout_ms);
  if (rc == 0) r->master_port = atoi(v);
  return rc;
}

static int master_v2(trun_rdzv *r, int timeout_ms) {
  if (r->group_rank == 0) {
    if (r->worker_host == NULL) {
      int rc = trun_store_acl_start(r->cfg->max_nodes == 1, r->host_addr, 0, r->cfg->store_threads,
                                    &r->worker_host, &r->worker_port);
      if (rc < 0) return rc;
    } else {
      wipe_worker_store(r);
    }
    snprintf(r->master_addr, sizeof(r->master_addr), "%s", r->host_addr);
    r->master_port = r->worker_port;
    /* torch publishes once and caches; trun publishes every round so that nodes joining later find it. */
    int rc = publish_master(r, r->master_addr, r->master_port);
    if (rc == 0) snprintf(r->cached_master, sizeof(r->cached_master), "%s", r->master_addr);
    r->cached_port = r->master_port;
    return rc;
  }
  if (r->cached_port > 0) {
    /* torch agents keep the first round's address; a rank 0 that publishes again wins. */
    char k[512];
    pkey(r, k, sizeof(k), "MASTER_PORT");
    trun_slice ks = trun_str(k);
    if (trun_client_check(r->client, 1, &ks) != 1) {
      snprintf(r->master_addr, sizeof(r->master_addr), "%s", r->cached_master);
      r->master_port = r->cached_port;
      return 0;
    }
  }
  int rc = read_master(r, timeout_ms);
  if (rc == 0) {
    snprintf(r->cached_master, sizeof(r->cached_master), "%s", r->master_addr);
    r->cached_port = r->master_port;
  }
  return rc;
}

static int master_113(trun_rdzv *r, int timeout_ms) {
  if (r->group_rank == 0) {
    int port = free_port();
    if (port < 0) return port;
    int rc = publish_master(r, r->host_addr, port);
    if (rc < 0) return rc;
  }
  return read_master(r, timeout_ms);
}

int trun_rdzv_c10d_round(trun_rdzv *r, char *err, size_t errlen) {
  int rank = 0, world = 0;
  int64_t round = 0;
  int rc = trun_dyn_next(r->dyn, &rank, &world, &round);
  if (rc < 0) {
    snprintf(err, errlen, "c10d rendezvous via %s:%d: %s", r->cfg->endpoint_host, r->cfg->endpoint_port,
             rc == -EINTR ? "interrupted by a signal" : r->dyn->err);
    return -1;
  }
  trun_rdzv_layout lay;
  trun_dyn_write_layout(r->dyn, &lay);
  r->gen113 = lay.key == TRUN_RDZV_KEY_FQDN;
  r->workers_host_store = r->gen113;
  r->group_rank = rank;
  r->group_world_size = world;
  r->dyn_round = round;
  snprintf(r->round_prefix, sizeof(r->round_prefix), "/torch.rendezvous.%s.%lld/", r->cfg->run_id,
           (long long)round);
  int timeout = (int)trun_rdzv_conf_seconds(r->cfg, "join_timeout", 600) * 1000;
  /* torch >= 2.5 settles the workers' store inside next_rendezvous, before the ranks; 1.13 after them. */
  const char *what = r->gen113 ? "assigning ranks" : "sharing the workers' store address";
  rc = r->gen113 ? ranks_113(r, timeout) : master_v2(r, timeout);
  if (rc == 0) {
    what = r->gen113 ? "sharing the workers' store address" : "assigning ranks";
    rc = r->gen113 ? master_113(r, timeout) : ranks_v2(r, timeout);
  }
  if (rc < 0) {
    snprintf(err, errlen, "c10d round %lld (node rank %d of %d): %s failed: %s", (long long)round, rank,
             world, what,
             rc == -EINTR    ? "interrupted by a signal"
             : rc == -EPROTO ? "a peer wrote values torch does not"
                             : strerror(-rc));
    return -1;
  }
  trun_debug("c10d round %lld: node rank %d of %d (%s protocol), ranks %d-%d of %d, workers' store %s:%d",
             (long long)round, rank, world, r->gen113 ? "torch 1.13" : "torch 2.x", r->base_rank,
             r->base_rank + r->nproc - 1, r->world_size, r->master_addr, r->master_port);
  return 0;
}

static void collect_all(void *arg, trun_slice k) {
  trun_client *c = arg;
  trun_client_delete(c, k);
}

static void wipe_worker_store(trun_rdzv *r) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = trun_store_host_addr(r->worker_host);
  o.port = r->worker_port;
  o.key_prefix = "";
  o.connect_timeout_ms = 5000;
  trun_client *c = NULL;
  if (trun_client_connect(&o, &c) < 0) return;
  /* LIST then DELETE on a second connection: the callback runs while the LIST reply is read. */
  trun_client *d = NULL;
  if (trun_client_connect(&o, &d) == 0) {
    trun_client_list(c, collect_all, d);
    trun_client_close(d);
  }
  trun_client_close(c);
}

int trun_rdzv_c10d_tick(trun_rdzv *r) {
  int rc = trun_dyn_keep_alive(r->dyn);
  if (rc < 0) {
    trun_warn("c10d heartbeat failed: %s", r->dyn->err);
    return rc;
  }
  return trun_dyn_num_waiting(r->dyn, 0);
}

int trun_rdzv_c10d_new_waiting(trun_rdzv *r, int fresh) { return trun_dyn_num_new_waiting(r->dyn, fresh); }

void trun_rdzv_c10d_exit_barrier(trun_rdzv *r, int timeout_ms) {
  char k[512], last[512];
  int rc;
  if (r->gen113) {
    char v[32];
    snprintf(v, sizeof(v), "%d", r->group_rank);
    rc = synchronize_113(r, "torchelastic/agent/terminal_state", v, NULL, timeout_ms);
  } else {
    int64_t n = 0;
    pkey(r, k, sizeof(k), "torchelastic/agent/terminal_state/num_members");
    pkey(r, last, sizeof(last), "torchelastic/agent/terminal_state/last_member");
    rc = trun_client_add(r->client, trun_str(k), 1, &n);
    if (rc == 0 && n == r->group_world_size)
      rc = trun_client_set(r->client, trun_str(last), trun_str("<val_ignored>"));
    if (rc == 0) rc = trun_rdzv_wait_key(r, last, timeout_ms);
  }
  if (rc < 0)
    trun_warn("exit barrier of c10d round %lld: %s (waited up to %d s for the other agents)", r->dyn_round,
              strerror(-rc), timeout_ms / 1000);
}

void trun_rdzv_c10d_shutdown(trun_rdzv *r) {
  if (r->dyn == NULL || r->client == NULL) return;
  if (trun_dyn_close(r->dyn) < 0) trun_warn("could not close the c10d rendezvous: %s", r->dyn->err);
}

void trun_rdzv_c10d_close(trun_rdzv *r) {
  free(r->fst);
  r->fst = NULL;
  if (r->dyn) {
    trun_dyn_free(r->dyn);
    free(r->dyn);
    r->dyn = NULL;
  }
  if (r->worker_host) trun_store_host_stop(r->worker_host);
  r->worker_host = NULL;
  if (r->client) trun_client_close(r->client);
  r->client = NULL;
  if (r->host) trun_store_host_stop(r->host);
  r->host = NULL;
}

/* ---- --rdzv-backend trun ------------------------------------------------------------------------------ */

static int fast_wipe(void *arg) { return trun_rdzv_wipe_worker_keys(arg); }

int trun_rdzv_fast_init(trun_rdzv *r, const trun_config *cfg, int nproc, char *err, size_t errlen) {
  if (elastic_connect(r, cfg, nproc, TRUN_GEN_V2, err, errlen) < 0) return -1;
  r->fast = 1;
  r->fst = calloc(1, sizeof(*r->fst));
  if (r->fst == NULL) {
    snprintf(err, errlen, "out of memory");
    trun_rdzv_c10d_close(r);
    return -1;
  }
  trun_fast_settings s = {
      .min_nodes = cfg->min_nodes,
      .max_nodes = cfg->max_nodes,
      .join_timeout_ms = (int)(trun_rdzv_conf_seconds(cfg, "join_timeout", 600) * 1000),
      .last_call_ms = (int)(trun_rdzv_conf_seconds(cfg, "last_call_timeout", 30) * 1000),
      .keep_alive_ms = (int)(trun_rdzv_conf_seconds(cfg, "keep_alive_interval", 5) * 1000),
      .keep_alive_max_attempt = (int)trun_rdzv_conf_seconds(cfg, "keep_alive_max_attempt", 3),
  };
  /* --node-rank is a hint here (torchrun's c10d ignores it): honoured when given explicitly. */
  int hint = cfg->node_rank_given ? cfg->node_rank : -1;
  trun_fast_init(r->fst, r->client, cfg->run_id, r->host_addr, getpid(), nproc, hint, &s);
  r->fst->poll = r->poll;
  r->fst->poll_arg = r->poll_arg;
  r->fst->on_commit = fast_wipe;
  r->fst->on_commit_arg = r;
  return 0;
}

int trun_rdzv_fast_round(trun_rdzv *r, char *err, size_t errlen) {
  int rc = trun_fast_join(r->fst);
  if (rc < 0) {
    snprintf(err, errlen, "trun rendezvous via %s:%d: %s", r->cfg->endpoint_host, r->cfg->endpoint_port,
             r->fst->err);
    return -1;
  }
  r->group_rank = r->fst->group_rank;
  r->group_world_size = r->fst->group_world;
  r->base_rank = r->role_base_rank = r->fst->base_rank;
  r->world_size = r->role_world_size = r->fst->world_size;
  r->round_no = (int)r->fst->round;
  /* The workers use the agents' store (the rendezvous endpoint), like the static backend. */
  snprintf(r->master_addr, sizeof(r->master_addr), "%s", r->cfg->endpoint_host);
  r->master_port = r->cfg->endpoint_port;
  trun_debug("trun round %d: node rank %d of %d, ranks %d-%d of %d", r->round_no, r->group_rank,
             r->group_world_size, r->base_rank, r->base_rank + r->nproc - 1, r->world_size);
  return 0;
}

int trun_rdzv_fast_tick(trun_rdzv *r) { return trun_fast_tick(r->fst); }

void trun_rdzv_fast_shutdown(trun_rdzv *r) {
  if (r->fst && r->client && trun_fast_close(r->fst) < 0) trun_warn("could not close the trun rendezvous");
}
