#include "store_acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "agent/discover/discover.h"
#include "base/base.h"
#include "rdzv_int.h"
#include "store/store.h"

int trun_store_loopback_addrs(const char *host, char out[][INET6_ADDRSTRLEN], int max) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  if (host == NULL || getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL) return 0;
  int n = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = "";
    if (!trun__rdzv_sa_loopback(ai->ai_addr) || trun__rdzv_sa_text(ai->ai_addr, text, sizeof(text)) < 0) {
      n = 0; /* an address off this host: a loopback listener would not serve every worker */
      break;
    }
    int seen = 0;
    for (int i = 0; i < n; i++) seen |= strcmp(out[i], text) == 0;
    if (seen) continue;
    if (n == max) {
      n = 0;
      break;
    }
    memcpy(out[n++], text, sizeof(text));
  }
  freeaddrinfo(res);
  return n;
}

/* A round's allow-list as it is built: rule texts, replaced on the server at once (a list rebuilt for each
 * round, never grown across rounds). */
typedef struct {
  char **v;
  size_t n, cap;
} rule_list;

static int rules_add(rule_list *l, const char *text) {
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->v[i], text) == 0) return 0;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    char **nv = realloc(l->v, cap * sizeof(*nv));
    if (nv == NULL) return -ENOMEM;
    l->v = nv;
    l->cap = cap;
  }
  if ((l->v[l->n] = strdup(text)) == NULL) return -ENOMEM;
  l->n++;
  return 0;
}

static void rules_free(rule_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

/* Loopback and every address of this host's interfaces. 0 or a negative errno. */
static int rules_local(rule_list *l) {
  int rc = rules_add(l, "127.0.0.0/8");
  if (rc == 0) rc = rules_add(l, "::1");
  struct ifaddrs *ifs = NULL;
  if (rc == 0 && getifaddrs(&ifs) < 0) rc = -errno;
  for (struct ifaddrs *i = ifs; rc == 0 && i; i = i->ifa_next) {
    if (i->ifa_addr == NULL) continue;
    char text[INET6_ADDRSTRLEN];
    if (trun__rdzv_sa_text(i->ifa_addr, text, sizeof(text)) == 0) rc = rules_add(l, text);
  }
  if (ifs) freeifaddrs(ifs);
  return rc;
}

int trun_store_acl_allow_local(trun_server *s) {
  rule_list l = {0};
  int rc = rules_local(&l);
  for (size_t i = 0; rc == 0 && i < l.n; i++) rc = trun_server_allow(s, l.v[i]);
  rules_free(&l);
  return rc;
}

int trun_store_conn_budget(unsigned long long nofile) {
  if (nofile == (unsigned long long)RLIM_INFINITY || nofile > INT_MAX) return 0;
  long long b = (long long)nofile - TRUN_STORE_FD_RESERVE;
  return b < 64 ? 64 : (int)b;
}

int trun_store_threads_auto(int cpus_usable) { return cpus_usable >= 32 ? 4 : cpus_usable >= 8 ? 2 : 1; }

int trun_store_acl_start(int local_job, const char *workers_addr, int port, int threads,
                         trun_store_host_configure_fn configure, void *arg, trun_store_host **out,
                         int *port_out) {
  struct rlimit rl;
  int budget = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? trun_store_conn_budget(rl.rlim_cur) : 0;
  trun_store_host_opts o = {.host = NULL,
                            .port = port,
                            .max_conns_per_peer = TRUN_STORE_MAX_CONNS_PER_PEER,
                            .max_conns = budget,
                            .max_conn_memory = TRUN_STORE_MAX_CONN_MEMORY,
                            .threads = threads > 0 ? threads : trun_store_threads_auto(trun_discover_cpus()),
                            .configure = configure,
                            .configure_arg = arg};
  char addrs[TRUN_SERVER_MAX_LISTENERS][INET6_ADDRSTRLEN];
  const char *hosts[TRUN_SERVER_MAX_LISTENERS];
  int loopback = local_job ? trun_store_loopback_addrs(workers_addr, addrs, TRUN_SERVER_MAX_LISTENERS) : 0;
  for (int i = 0; i < loopback; i++) hosts[i] = addrs[i];
  o.hosts = hosts;
  o.nhosts = loopback;
  int rc = trun_store_host_start_opts(&o, out, port_out);
  if (rc < 0) return rc;
  if (local_job && !loopback) {
    /* The workers reach the store by a name that is not 127.0.0.1: listen everywhere, admit only this host.
     */
    trun_server *s = trun_store_host_server(*out);
    int arc = trun_store_acl_allow_local(s);
    if (arc == 0)
      trun_server_allow_enforce(s, 1);
    else
      trun_warn("cannot list this host's addresses (%s): the single-node store admits every peer",
                strerror(-arc));
  }
  trun_debug("store on port %d listens on %s%s%s", *port_out, loopback ? "" : "every address",
             loopback ? addrs[0] : "", local_job && !loopback ? " and admits only this host" : "");
  return 0;
}

void trun__rdzv_addr_key(const trun_rdzv *r, int round, int g, char *out, size_t len) {
  snprintf(out, len, "/trun/%s/r%d/addr/%d", r->cfg->run_id, round, g);
}

int trun__rdzv_publish_addr(trun_rdzv *r, int round) {
  if (r->client == NULL) return 0;
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  char text[INET6_ADDRSTRLEN] = "";
  if (getsockname(trun_client_fd(r->client), (struct sockaddr *)&ss, &len) < 0) return -errno;
  if (trun__rdzv_sa_text((struct sockaddr *)&ss, text, sizeof(text)) < 0) return -EAFNOSUPPORT;
  char k[512];
  trun__rdzv_addr_key(r, round, r->info.group_rank, k, sizeof(k));
  return trun_client_set(r->client, trun_str(k), trun_str(text));
}

int trun_store_acl_allow_names(trun_server *s, const char *const *names, size_t n, char *err, size_t errlen) {
  rule_list l = {0};
  int lrc = rules_local(&l);
  if (lrc < 0) {
    snprintf(err, errlen, "--store-allow-peers: cannot list this host's addresses: %s", strerror(-lrc));
    rules_free(&l);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(names[i], NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
      snprintf(err, errlen,
               "--store-allow-peers: participant '%s' does not resolve here (%s); give every node an address "
               "the others resolve (--local-addr, or DNS / /etc/hosts)",
               names[i], rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
      if (res) freeaddrinfo(res);
      rules_free(&l);
      return -1;
    }
    for (struct addrinfo *ai = res; ai && rc == 0; ai = ai->ai_next) {
      char text[INET6_ADDRSTRLEN] = "";
      if (trun__rdzv_sa_text(ai->ai_addr, text, sizeof(text)) < 0) continue;
      rc = rules_add(&l, text);
      if (rc == 0) trun_debug("the workers' store admits participant %s at %s", names[i], text);
    }
    freeaddrinfo(res);
    if (rc < 0) {
      snprintf(err, errlen, "--store-allow-peers: cannot admit participant '%s': %s", names[i],
               strerror(-rc));
      rules_free(&l);
      return -1;
    }
  }
  int rc = trun_server_allow_replace(s, (const char *const *)l.v, l.n);
  rules_free(&l);
  if (rc < 0) {
    snprintf(err, errlen, "--store-allow-peers: cannot set the allow-list: %s", strerror(-rc));
    return -1;
  }
  return 0;
}

int trun__rdzv_admit_published(trun_rdzv *r, int round, char *err, size_t errlen) {
  if (r->host == NULL || r->info.group_world_size <= 1) return 0;
  trun_server *s = trun_store_host_server(r->host);
  rule_list l = {0};
  int rc = rules_local(&l);
  if (rc < 0) {
    snprintf(err, errlen, "--store-allow-peers: cannot list this host's addresses: %s", strerror(-rc));
    rules_free(&l);
    return -1;
  }
  for (int g = 0; g < r->info.group_world_size; g++) {
    char k[512];
    trun__rdzv_addr_key(r, round, g, k, sizeof(k));
    trun_buf v = {0};
    rc = trun_client_get(r->client, trun_str(k), &v, 30000);
    if (rc < 0) {
      snprintf(err, errlen,
               "--store-allow-peers: node rank %d did not publish its address for round %d (%s); run every "
               "node with the same trun version",
               g, round, strerror(-rc));
      trun_buf_free(&v);
      rules_free(&l);
      return -1;
    }
    /* The store took the key only from that node's own connection, holding the address it comes from
     * (trun_server_address_keys); a bare address is checked again here: never a prefix. */
    char text[INET6_ADDRSTRLEN + 1];
    size_t n = v.len < sizeof(text) - 1 ? v.len : sizeof(text) - 1;
    memcpy(text, v.data, n);
    text[n] = '\0';
    trun_buf_free(&v);
    int fam, prefix;
    uint8_t a[16];
    if (strchr(text, '/') || trun_server_parse_cidr(text, &fam, a, &prefix) < 0 ||
        (rc = rules_add(&l, text)) < 0) {
      snprintf(err, errlen, "--store-allow-peers: node rank %d published '%s', not a bare address", g, text);
      rules_free(&l);
      return -1;
    }
    trun_debug("store admits node rank %d at %s", g, text);
  }
  rc = trun_server_allow_replace(s, (const char *const *)l.v, l.n);
  rules_free(&l);
  if (rc < 0) {
    snprintf(err, errlen, "--store-allow-peers: cannot set the allow-list: %s", strerror(-rc));
    return -1;
  }
  trun_server_allow_enforce(s, 1);
  return 0;
}
