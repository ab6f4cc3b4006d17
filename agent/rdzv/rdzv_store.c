/* The rendezvous backends' shared dealings with the store (agent/rdzv/rdzv_int.h): waits that signals can
 * interrupt, who serves the store, the key clean-up between attempts, and the keys of a round's end. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "agent/discover/discover.h"
#include "rdzv_int.h"

/* A random tag for r->agent_tag (16 hex digits). */
static void make_agent_tag(char *out, size_t len) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
    /* No entropy yet (early boot): the clocks, the pid and where this stack lies (ASLR) tell agents apart. */
    v = (uint64_t)trun_wall_us() ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&v;
    v ^= (uint64_t)(trun_mono_s() * 1e9);
    if (v == 0) v = 1;
    v = trun_rng_next(&v);
  }
  snprintf(out, len, "%016llx", (unsigned long long)v);
}

void trun__rdzv_reset(trun_rdzv *r, const trun_config *cfg, int nproc, const trun_rdzv_ops *be) {
  int (*poll)(void *) = r->poll;
  void *poll_arg = r->poll_arg;
  trun_wait_hook on_wait = r->on_wait;
  void *on_wait_arg = r->on_wait_arg;
  const trun_node *node = r->node;
  char tag[sizeof(r->agent_tag)];
  memcpy(tag, r->agent_tag, sizeof(tag));
  memset(r, 0, sizeof(*r));
  memcpy(r->agent_tag, tag, sizeof(tag));
  if (r->agent_tag[0] == '\0') make_agent_tag(r->agent_tag, sizeof(r->agent_tag));
  r->on_wait = on_wait;
  r->on_wait_arg = on_wait_arg;
  r->node = node;
  r->poll = poll;
  r->poll_arg = poll_arg;
  r->cfg = cfg;
  r->nproc = nproc;
  r->be = be;
  r->store_gen = TRUN_GEN_V2; /* the elastic backends choose theirs in trun__rdzv_elastic_connect */
  if (cfg->local_addr)
    snprintf(r->host_addr, sizeof(r->host_addr), "%s", cfg->local_addr);
  else
    trun_fqdn(r->host_addr, sizeof(r->host_addr));
}

void trun__rdzv_agent_id(const trun_rdzv *r, char *out, size_t len) {
  snprintf(out, len, "%s %d 0%s%s", r->host_addr, (int)getpid(), r->agent_tag[0] ? " " : "", r->agent_tag);
}

int trun__rdzv_get_text(trun_client *c, const char *k, char *out, size_t len) {
  trun_slice ks = trun_str(k);
  out[0] = '\0';
  int rc = trun_client_check(c, 1, &ks);
  if (rc != 1) return rc;
  trun_buf v = {0};
  rc = trun_client_get(c, ks, &v, 5000);
  if (rc == 0) {
    size_t n = v.len < len - 1 ? v.len : len - 1;
    if (n) memcpy(out, v.data, n);
    out[n] = '\0';
  }
  trun_buf_free(&v);
  return rc < 0 ? rc : 1;
}

int trun__rdzv_get_count(trun_client *c, const char *k, int64_t *n) {
  char v[32], *end;
  *n = 0;
  int rc = trun__rdzv_get_text(c, k, v, sizeof(v));
  if (rc <= 0) return rc;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0) return -EPROTO;
  *n = x;
  return 0;
}

void trun__rdzv_round_key(const trun_rdzv *r, int round, const char *what, char *out, size_t len) {
  snprintf(out, len, "/trun/%s/r%d/%s", r->cfg->run_id, round, what);
}

#define SLICE_MS 1000

int trun__rdzv_wait_key(trun_rdzv *r, const char *k, int timeout_ms) {
  trun_slice ks = trun_str(k);
  for (int waited = 0;; waited += SLICE_MS) {
    int slice = timeout_ms - waited < SLICE_MS ? timeout_ms - waited : SLICE_MS;
    if (slice <= 0) return -ETIMEDOUT;
    int rc = trun_client_wait(r->client, 1, &ks, slice);
    if (rc != -ETIMEDOUT) return rc;
    if (trun__rdzv_poll(r)) return -EINTR;
  }
}

/* trun_client_connect in slices, so that r->poll can interrupt a long wait for node rank 0; the wait says
 * what it waits for and why the last attempt failed (rdzv_wait.c). */
int trun__rdzv_connect_polling(trun_rdzv *r, trun_client_opts *o, int timeout_ms) {
  /* The caller may have set r->wait_have for this wait. */
  int started = trun__rdzv_wait_begin(
      r, "store", timeout_ms / 1000.0, "join_timeout", r->wait_have,
      strchr(r->store_addr, ':') ? "the rendezvous store at [%s]:%d" : "the rendezvous store at %s:%d",
      r->store_addr, r->store_port);
  o->on_connect_error = trun__rdzv_connect_error;
  o->on_connect_error_arg = r;
  int rc;
  for (int waited = 0;; waited += SLICE_MS) {
    o->connect_timeout_ms = timeout_ms - waited < SLICE_MS ? timeout_ms - waited : SLICE_MS;
    if (o->connect_timeout_ms <= 0) {
      rc = -ETIMEDOUT;
      break;
    }
    rc = trun_client_connect(o, &r->client);
    if (rc == 0 && r->cfg->local_addr_auto) trun__rdzv_auto_addr(r);
    if (rc != -ETIMEDOUT && rc != -ECONNREFUSED) break;
    if (trun__rdzv_poll(r)) {
      rc = -EINTR;
      break;
    }
  }
  o->on_connect_error = NULL;
  trun__rdzv_wait_end(r, started);
  return rc;
}

typedef struct {
  char **keys;
  size_t n, cap;
} keylist;

static void collect_key(void *arg, trun_slice k) {
  keylist *l = arg;
  if (k.n >= 6 && memcmp(k.p, "/trun/", 6) == 0) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    char **nk = realloc(l->keys, cap * sizeof(char *));
    if (nk == NULL) return;
    l->keys = nk;
    l->cap = cap;
  }
  char *s = malloc(k.n + 1);
  if (s == NULL) return;
  memcpy(s, k.p, k.n);
  s[k.n] = '\0';
  l->keys[l->n++] = s;
}

int trun__rdzv_wipe_worker_keys(trun_rdzv *r) {
  keylist l = {0};
  int rc = trun_client_list(r->client, collect_key, &l);
  for (size_t i = 0; i < l.n; i++) {
    if (rc == 0) {
      int d = trun_client_delete(r->client, (trun_slice){(const uint8_t *)l.keys[i], strlen(l.keys[i])});
      if (d < 0) rc = d;
    }
    free(l.keys[i]);
  }
  free(l.keys);
  if (rc == 0 && l.n) trun_debug("cleared %zu keys of the last attempt's workers", l.n);
  return rc;
}

/* ---- who serves the store -------------------------------------------------------------------------- */

int trun__rdzv_is_this_host(const char *host) {
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

int trun__rdzv_elastic_connect(trun_rdzv *r, trun_gen gen, char *err, size_t errlen) {
  const trun_config *cfg = r->cfg;

  int explicit_host = trun_config_conf_bool(cfg->rdzv_conf, "is_host");
  int is_host = explicit_host >= 0 ? explicit_host : trun__rdzv_is_this_host(cfg->endpoint_host);
  int port = cfg->endpoint_port;
  const char *connect_host = cfg->endpoint_host;
  if (is_host) {
    int bound = port;
    /* Limits per peer and connection; with one node at most, loopback (or this host) only. */
    int rc = trun_store_acl_start(cfg->max_nodes == 1, cfg->endpoint_host, port, cfg->store_threads,
                                  trun__rdzv_guard_server, r, &r->host, &bound);
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
  r->info.master_port = port;
  snprintf(r->info.master_addr, sizeof(r->info.master_addr), "%s", cfg->endpoint_host);

  snprintf(r->store_addr, sizeof(r->store_addr), "%s", connect_host);
  r->store_port = port;
  r->store_gen = gen;
  trun_client_opts o;
  trun__rdzv_agent_opts(r, (int)trun__rdzv_conf_seconds(cfg, "read_timeout", 60) * 1000, &o);
  int rc = trun__rdzv_connect_polling(r, &o, (int)trun__rdzv_conf_seconds(cfg, "join_timeout", 600) * 1000);
  if (rc < 0) {
    snprintf(err, errlen,
             rc == -EINTR ? "interrupted while reaching the rendezvous store at %s:%d%.0s%s%s%s"
                          : "cannot reach the rendezvous store at %s:%d (%s); is the agent on that host up "
                            "(--rdzv-endpoint), the port open?%s%s%s",
             connect_host, port, strerror(-rc), r->wait.cause[0] ? " (last failure: " : "", r->wait.cause,
             r->wait.cause[0] ? ")" : "");
    trun__rdzv_close_stores(r);
    return -1;
  }
  return 0;
}

void trun__rdzv_close_stores(trun_rdzv *r) {
  if (r->worker_host) trun_store_host_stop(r->worker_host);
  r->worker_host = NULL;
  if (r->client) trun_client_close(r->client);
  r->client = NULL;
  if (r->host) trun_store_host_stop(r->host);
  r->host = NULL;
}

void trun__rdzv_agent_opts(const trun_rdzv *r, int timeout_ms, trun_client_opts *o) {
  trun_client_opts_default(o);
  o->host = r->store_addr;
  o->port = r->store_port;
  o->gen = r->store_gen;
  o->key_prefix = "";
  o->agent_token = r->token;
  o->timeout_ms = timeout_ms;
  o->quiet_connect = 1;
}

void trun__rdzv_outside_opts(const trun_config *cfg, int timeout_ms, trun_client_opts *o) {
  trun_client_opts_default(o);
  o->host = cfg->endpoint_host;
  o->port = cfg->endpoint_port;
  o->gen = trun__rdzv_c10d.store_gen(cfg); /* V2 unless torch_version names a c10d store of the older wire */
  o->key_prefix = "";
  o->connect_timeout_ms = timeout_ms;
  o->timeout_ms = timeout_ms;
  o->quiet_connect = 1;
}
