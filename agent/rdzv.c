#include "rdzv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "log.h"
#include "store_acl.h"

/* Seconds from --rdzv-conf key=value,... (0 when absent or not a positive integer). */
static int conf_seconds(const char *conf, const char *key) {
  size_t klen = strlen(key);
  const char *p = conf;
  while (p && *p) {
    while (*p == ' ' || *p == ',') p++;
    if (strncmp(p, key, klen) == 0) {
      const char *q = p + klen;
      while (*q == ' ') q++;
      if (*q == '=') {
        int v = atoi(q + 1);
        return v > 0 ? v : 0;
      }
    }
    p = strchr(p, ',');
  }
  return 0;
}

static int join_timeout_ms(const trun_config *cfg) {
  int s = conf_seconds(cfg->rdzv_conf, "join_timeout");
  if (s == 0) s = conf_seconds(cfg->rdzv_conf, "timeout");
  if (s == 0) s = 900;
  return s * 1000;
}

void trun_fqdn(char *out, size_t len) {
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = '\0';
  snprintf(out, len, "%s", host);
  /* Python's socket.getfqdn(): reverse-resolve the host name's address, then take the first of the
   * reverse name and its aliases that holds a dot, else the reverse name. */
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL) return;
  struct hostent *he = NULL;
  if (res->ai_family == AF_INET)
    he = gethostbyaddr(&((struct sockaddr_in *)res->ai_addr)->sin_addr, sizeof(struct in_addr), AF_INET);
  else if (res->ai_family == AF_INET6)
    he = gethostbyaddr(&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr, sizeof(struct in6_addr), AF_INET6);
  freeaddrinfo(res);
  if (he == NULL || he->h_name == NULL) return;
  const char *pick = he->h_name;
  if (!strchr(pick, '.'))
    for (char **al = he->h_aliases; al && *al; al++)
      if (strchr(*al, '.')) {
        pick = *al;
        break;
      }
  snprintf(out, len, "%s", pick);
}

static void key(const trun_rdzv *r, int round, const char *what, char *out, size_t len) {
  snprintf(out, len, "/trun/%s/r%d/%s", r->cfg->run_id, round, what);
}

#define SLICE_MS 1000

int trun_rdzv_wait_key(trun_rdzv *r, const char *k, int timeout_ms) {
  trun_slice ks = trun_str(k);
  for (int waited = 0;; waited += SLICE_MS) {
    int slice = timeout_ms - waited < SLICE_MS ? timeout_ms - waited : SLICE_MS;
    if (slice <= 0) return -ETIMEDOUT;
    int rc = trun_client_wait(r->client, 1, &ks, slice);
    if (rc != -ETIMEDOUT) return rc;
    if (r->poll && r->poll(r->poll_arg)) return -EINTR;
  }
}

/* trun_client_connect in slices, so that r->poll can interrupt a long wait for node rank 0. */
int trun_rdzv_connect_polling(trun_rdzv *r, trun_client_opts *o, int timeout_ms) {
  for (int waited = 0;; waited += SLICE_MS) {
    o->connect_timeout_ms = timeout_ms - waited < SLICE_MS ? timeout_ms - waited : SLICE_MS;
    if (o->connect_timeout_ms <= 0) return -ETIMEDOUT;
    int rc = trun_client_connect(o, &r->client);
    if (rc != -ETIMEDOUT && rc != -ECONNREFUSED) return rc;
    if (r->poll && r->poll(r->poll_arg)) return -EINTR;
  }
}

int trun_rdzv_init(trun_rdzv *r, const trun_config *cfg, int nproc, char *err, size_t errlen) {
  if (cfg->backend == TRUN_RDZV_C10D && !cfg->standalone && cfg->endpoint_port != 0)
    return trun_rdzv_c10d_init(r, cfg, nproc, err, errlen);
  if (cfg->backend == TRUN_RDZV_FAST && !cfg->standalone && cfg->endpoint_port != 0)
    return trun_rdzv_fast_init(r, cfg, nproc, err, errlen);
  int (*poll)(void *) = r->poll;
  void *poll_arg = r->poll_arg;
  memset(r, 0, sizeof(*r));
  r->poll = poll;
  r->poll_arg = poll_arg;
  r->cfg = cfg;
  r->nproc = nproc;
  int standalone = cfg->standalone || cfg->endpoint_port == 0;
  r->group_rank = standalone ? 0 : cfg->node_rank;
  r->group_world_size = standalone ? 1 : cfg->max_nodes;
  if (cfg->local_addr)
    snprintf(r->host_addr, sizeof(r->host_addr), "%s", cfg->local_addr);
  else
    trun_fqdn(r->host_addr, sizeof(r->host_addr));

  int port = cfg->endpoint_port;
  const char *connect_host = cfg->endpoint_host;
  if (r->group_rank == 0) {
    int rc = trun_store_acl_start(r->group_world_size == 1, standalone ? r->host_addr : cfg->endpoint_host,
                                  port, cfg->store_threads, &r->host, &port);
    if (rc < 0) {
      snprintf(err, errlen,
               "node rank 0 cannot serve the rendezvous store on port %d: %s; free the port or pick "
               "another with --master-port",
               cfg->endpoint_port, uv_strerror(rc));
      return -1;
    }
    connect_host = "127.0.0.1";
    trun_debug("serving the store on port %d", port);
  }
  if (standalone) {
    /* All workers are local: publish this host's name like torchrun, unless it does not resolve here
     * (containers without an /etc/hosts entry), where torchrun's workers would retry forever. */
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int ok = getaddrinfo(r->host_addr, NULL, &hints, &res) == 0;
    if (res) freeaddrinfo(res);
    snprintf(r->master_addr, sizeof(r->master_addr), "%s", ok ? r->host_addr : "127.0.0.1");
    if (!ok) trun_debug("host name %s does not resolve: workers get MASTER_ADDR=127.0.0.1", r->host_addr);
  } else {
    snprintf(r->master_addr, sizeof(r->master_addr), "%s", cfg->endpoint_host);
  }
  r->master_port = port;

  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = connect_host;
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = join_timeout_ms(cfg);
  o.quiet_connect = 1; /* waiting for node rank 0 is normal; a real time-out is reported below */
  int rc = trun_rdzv_connect_polling(r, &o, o.timeout_ms);
  if (rc == -EINTR) {
    snprintf(err, errlen, "interrupted while reaching the rendezvous store at %s:%d", connect_host, port);
    trun_rdzv_close(r);
    return -1;
  }
  if (rc < 0) {
    snprintf(err, errlen,
             "cannot reach the rendezvous store at %s:%d: %s; is node rank 0 up and the port open?",
             connect_host, port, strerror(-rc));
    trun_rdzv_close(r);
    return -1;
  }
  return 0;
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

int trun_rdzv_wipe_worker_keys(trun_rdzv *r) {
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

int trun_rdzv_round(trun_rdzv *r, int round, char *err, size_t errlen) {
  if (r->dynamic) return trun_rdzv_c10d_round(r, err, errlen);
  if (r->fast) return trun_rdzv_fast_round(r, err, errlen);
  r->round_no = round;
  char k[512], v[32];
  int world = r->group_world_size, rc;
  int timeout = join_timeout_ms(r->cfg);
  snprintf(k, sizeof(k), "/trun/%s/r%d/nproc/%d", r->cfg->run_id, round, r->group_rank);
  snprintf(v, sizeof(v), "%d", r->nproc);
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(v))) < 0) goto store_failed;
  /* Who this node is, for the job's failure report should it be lost (trun_rdzv_node_end). */
  snprintf(k, sizeof(k), "/trun/%s/r%d/host/%d", r->cfg->run_id, round, r->group_rank);
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(r->host_addr))) < 0) goto store_failed;
  int64_t joined;
  key(r, round, "joined", k, sizeof(k));
  if ((rc = trun_client_add(r->client, trun_str(k), 1, &joined)) < 0) goto store_failed;
  if (joined == world) {
    key(r, round, "all_joined", k, sizeof(k));
    if ((rc = trun_client_set(r->client, trun_str(k), trun_str("1"))) < 0) goto store_failed;
  }
  if (r->host) {
    key(r, round, "all_joined", k, sizeof(k));
    rc = trun_rdzv_wait_key(r, k, timeout);
    if (rc == -ETIMEDOUT) {
      snprintf(err, errlen,
               "round %d: only %lld of %d nodes joined within %d s; check the other nodes' "
               "--master-addr/--master-port and that they started",
               round, (long long)joined, world, timeout / 1000);
      return -1;
    }
    if (rc < 0) goto store_failed;
    if ((rc = trun_rdzv_wipe_worker_keys(r)) < 0) goto store_failed;
    key(r, round, "go", k, sizeof(k));
    if ((rc = trun_client_set(r->client, trun_str(k), trun_str("1"))) < 0) goto store_failed;
  }
  key(r, round, "go", k, sizeof(k));
  rc = trun_rdzv_wait_key(r, k, timeout);
  if (rc == -ETIMEDOUT) {
    snprintf(err, errlen, "round %d: the other nodes did not all join within %d s", round, timeout / 1000);
    return -1;
  }
  if (rc < 0) goto store_failed;

  /* Global ranks: group ranks in order, each node's workers in local-rank order. */
  char **names = calloc((size_t)world, sizeof(char *));
  trun_slice *keys = calloc((size_t)world, sizeof(*keys));
  trun_buf *vals = calloc((size_t)world, sizeof(*vals));
  int built = 0;
  while (names && keys && vals && built < world &&
         asprintf(&names[built], "/trun/%s/r%d/nproc/%d", r->cfg->run_id, round, built) >= 0) {
    keys[built] = trun_str(names[built]);
    built++;
  }
  if (built < world) {
    for (int g = 0; names && g < built; g++) free(names[g]);
    free(names), free(keys), free(vals);
    snprintf(err, errlen, "out of memory for %d nodes", world);
    return -1;
  }
  rc = trun_client_multi_get(r->client, (size_t)world, keys, vals, timeout);
  int base = 0, total = 0;
  for (int g = 0; g < world; g++) {
    int n = 0;
    if (rc == 0) {
      char tmp[32];
      size_t len = vals[g].len < sizeof(tmp) - 1 ? vals[g].len : sizeof(tmp) - 1;
      memcpy(tmp, vals[g].data, len);
      tmp[len] = '\0';
      n = atoi(tmp);
    }
    if (g < r->group_rank) base += n;
    total += n;
    trun_buf_free(&vals[g]);
    free(names[g]);
  }
  free(names), free(keys), free(vals);
  if (rc < 0) goto store_failed;
  r->base_rank = r->role_base_rank = base;
  r->world_size = r->role_world_size = total;
  return 0;

store_failed:
  if (rc == -EINTR) {
    snprintf(err, errlen, "round %d: interrupted by a signal while waiting for the other nodes", round);
    return -1;
  }
  snprintf(err, errlen, "round %d: rendezvous store at %s:%d failed: %s", round,
           r->host ? "127.0.0.1" : r->cfg->endpoint_host, r->master_port, strerror(-rc));
  return -1;
}

void trun_rdzv_end_key(const trun_rdzv *r, int round, char *k, size_t len) { key(r, round, "end", k, len); }

int trun_rdzv_announce_failure(trun_rdzv *r, int round, const char *failure_json) {
  char k[512], v[32];
  snprintf(k, sizeof(k), "/trun/%s/r%d/failure/%d", r->cfg->run_id, round, r->group_rank);
  int rc = trun_client_set(r->client, trun_str(k), trun_str(failure_json ? failure_json : "{}"));
  key(r, round, "end", k, sizeof(k));
  snprintf(v, sizeof(v), "fail:%d", r->group_rank);
  trun_buf out = {0};
  /* First announcement wins: compare_set on an absent key with empty expected creates it. */
  int rc2 = trun_client_compare_set(r->client, trun_str(k), trun_str(""), trun_str(v), &out);
  trun_buf_free(&out);
  return rc < 0 ? rc : rc2;
}

int trun_rdzv_announce_success(trun_rdzv *r, int round) {
  char k[512];
  int64_t done;
  key(r, round, "done", k, sizeof(k));
  int rc = trun_client_add(r->client, trun_str(k), 1, &done);
  if (rc < 0) return rc;
  if (done == r->group_world_size) {
    trun_buf out = {0};
    key(r, round, "end", k, sizeof(k));
    rc = trun_client_compare_set(r->client, trun_str(k), trun_str(""), trun_str("ok"), &out);
    trun_buf_free(&out);
  }
  return rc;
}

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

int trun_rdzv_collect_failures(trun_rdzv *r, int round, int timeout_ms, char ***out, int *n) {
  int world = r->group_world_size;
  char **res = calloc((size_t)world, sizeof(char *));
  if (res == NULL) return -ENOMEM;
  *n = 0;
  /* One deadline for all: with several nodes lost, each would otherwise cost the whole wait. */
  double deadline = mono_ms() + timeout_ms;
  for (int g = 0; g < world; g++) {
    char k[512];
    snprintf(k, sizeof(k), "/trun/%s/r%d/failure/%d", r->cfg->run_id, round, g);
    trun_buf v = {0};
    int left = (int)(deadline - mono_ms());
    int rc = trun_client_get(r->client, trun_str(k), &v, g == r->group_rank ? 1000 : left > 1 ? left : 1);
    if (rc == 0 && trun_buf_append_u8(&v, 0) == 0)
      res[(*n)++] = (char *)v.data;
    else
      trun_buf_free(&v);
    if (rc < 0 && rc != -ETIMEDOUT) break;
  }
  *out = res;
  return 0;
}

void trun_rdzv_seen_end_key(const trun_rdzv *r, int round, int g, char *k, size_t len) {
  snprintf(k, len, "/trun/%s/r%d/seen_end/%d", r->cfg->run_id, round, g);
}

/* The value of key, cut to len - 1 bytes ("" when absent). 0 or a negative errno. */
static int get_text(trun_rdzv *r, const char *k, char *out, size_t len) {
  trun_slice ks = trun_str(k);
  trun_buf v = {0};
  out[0] = '\0';
  int rc = trun_client_check(r->client, 1, &ks);
  if (rc == 1) rc = trun_client_get(r->client, ks, &v, 1000);
  if (rc < 0) return rc;
  size_t n = v.len < len - 1 ? v.len : len - 1;
  if (n) memcpy(out, v.data, n);
  out[n] = '\0';
  trun_buf_free(&v);
  return 0;
}

int trun_rdzv_node_end(trun_rdzv *r, int round, int g, int *seen_end, int *nproc, char *host,
                       size_t hostlen) {
  char k[512], name[256], addr[64], n[32];
  trun_rdzv_seen_end_key(r, round, g, k, sizeof(k));
  trun_slice ks = trun_str(k);
  int rc = trun_client_check(r->client, 1, &ks);
  if (rc < 0) return rc;
  *seen_end = rc;
  snprintf(k, sizeof(k), "/trun/%s/r%d/host/%d", r->cfg->run_id, round, g);
  if ((rc = get_text(r, k, name, sizeof(name))) < 0) return rc;
  trun_store_acl_addr_key(r, round, g, k, sizeof(k));
  if ((rc = get_text(r, k, addr, sizeof(addr))) < 0) return rc;
  snprintf(k, sizeof(k), "/trun/%s/r%d/nproc/%d", r->cfg->run_id, round, g);
  if ((rc = get_text(r, k, n, sizeof(n))) < 0) return rc;
  *nproc = atoi(n);
  const char *a = strncmp(addr, "::ffff:", 7) == 0 && strchr(addr, '.') ? addr + 7 : addr; /* v4-mapped */
  if (name[0] && a[0] && strcmp(name, a) != 0)
    snprintf(host, hostlen, "%s (%s)", name, a);
  else
    snprintf(host, hostlen, "%s", name[0] ? name : a[0] ? a : "?");
  return 0;
}

void trun_rdzv_leave(trun_rdzv *r, int round, int timeout_ms, int host_wait_ms) {
  char k[512];
  int64_t left = 0;
  if (r->host) {
    /* The host has printed the job's failure report (if any) by now: the others may go. */
    key(r, round, "host_left", k, sizeof(k));
    trun_client_set(r->client, trun_str(k), trun_str("1"));
  } else if (host_wait_ms > 0) {
    /* A failed job: stay until the host has printed the job-wide report (before "left", which lets the
     * host close the store). Where the scheduler ends the whole job when one task exits (srun
     * --kill-on-bad-exit), leaving first would kill the report. */
    key(r, round, "host_left", k, sizeof(k));
    if (trun_rdzv_wait_key(r, k, host_wait_ms) == -ETIMEDOUT)
      trun_debug("node rank 0 did not finish its failure report within %d s; leaving", host_wait_ms / 1000);
  }
  key(r, round, "left", k, sizeof(k));
  if (trun_client_add(r->client, trun_str(k), 1, &left) < 0) return;
  if (left == r->group_world_size) {
    char all[512];
    key(r, round, "all_left", all, sizeof(all));
    trun_client_set(r->client, trun_str(all), trun_str("1"));
  }
  if (r->host && r->group_world_size > 1) {
    key(r, round, "all_left", k, sizeof(k));
    if (trun_rdzv_wait_key(r, k, timeout_ms) == -ETIMEDOUT)
      trun_warn("exit barrier: not every node left within %d s; closing the store anyway", timeout_ms / 1000);
  }
}

void trun_rdzv_close(trun_rdzv *r) {
  if (r->dynamic || r->fast) {
    trun_rdzv_c10d_close(r);
    return;
  }
  if (r->client) trun_client_close(r->client);
  r->client = NULL;
  if (r->host) trun_store_host_stop(r->host);
  r->host = NULL;
}
