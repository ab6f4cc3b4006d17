/* Access rules of the TCPStore server: CIDR allow-list, checked at accept and, after a change, on every
 * open connection (server.h); the open connections per address (the per-peer limit). The bottom of the
 * server's files: calls none of them (layers: server_int.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

/* The address of sa (IPv4-mapped IPv6 as IPv4). 0, or -1 for another family. */
int trun__sockaddr_entry(const struct sockaddr *sa, acl_entry *e) {
  memset(e, 0, sizeof(*e));
  if (sa->sa_family == AF_INET) {
    e->family = AF_INET;
    memcpy(e->a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    return 0;
  }
  if (sa->sa_family == AF_INET6) {
    const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(b, mapped, 12) == 0) {
      e->family = AF_INET;
      memcpy(e->a, b + 12, 4);
    } else {
      e->family = AF_INET6;
      memcpy(e->a, b, 16);
    }
    return 0;
  }
  return -1;
}

static int entry_matches(const acl_entry *rule, const acl_entry *addr) {
  if (rule->family != addr->family) return 0;
  int bits = rule->prefix;
  int bytes = bits / 8;
  if (memcmp(rule->a, addr->a, (size_t)bytes) != 0) return 0;
  if (bits % 8 == 0) return 1;
  uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));
  return (rule->a[bytes] & mask) == (addr->a[bytes] & mask);
}

int trun_server_parse_cidr(const char *text, int *family, uint8_t addr[16], int *prefix) {
  char host[INET6_ADDRSTRLEN + 8];
  const char *slash = strchr(text, '/');
  size_t hl = slash ? (size_t)(slash - text) : strlen(text);
  if (hl == 0 || hl >= sizeof(host)) return -EINVAL;
  memcpy(host, text, hl);
  host[hl] = '\0';
  if (host[0] == '[' && host[hl - 1] == ']') {
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = '\0';
  }
  memset(addr, 0, 16);
  int max;
  if (inet_pton(AF_INET, host, addr) == 1)
    *family = AF_INET, max = 32;
  else if (inet_pton(AF_INET6, host, addr) == 1)
    *family = AF_INET6, max = 128;
  else
    return -EINVAL;
  *prefix = max;
  if (slash) {
    char *end;
    long p = strtol(slash + 1, &end, 10);
    if (slash[1] == '\0' || *end != '\0' || p < 0 || p > max) return -EINVAL;
    *prefix = (int)p;
  }
  if (*family == AF_INET6) {
    /* An IPv4-mapped rule is an IPv4 rule (peers are compared in that form). */
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(addr, mapped, 12) == 0 && *prefix >= 96) {
      memmove(addr, addr + 12, 4);
      memset(addr + 4, 0, 12);
      *family = AF_INET;
      *prefix -= 96;
    }
  }
  return 0;
}

/* Signals every shard to look at the access rules (its async handle: trun__shard_recheck_acl). */
static void poke_shards(trun_server *s) {
  for (int i = 0; i < s->nshards; i++) uv_async_send(&s->shards[i]->async);
}

int trun_server_allow(trun_server *s, const char *cidr) {
  acl_entry e;
  memset(&e, 0, sizeof(e));
  int rc = trun_server_parse_cidr(cidr, &e.family, e.a, &e.prefix);
  if (rc < 0) return rc;
  pthread_mutex_lock(&s->acl_mu);
  for (size_t i = 0; i < s->nacl; i++)
    if (s->acl[i].family == e.family && s->acl[i].prefix == e.prefix && memcmp(s->acl[i].a, e.a, 16) == 0) {
      pthread_mutex_unlock(&s->acl_mu);
      return 0;
    }
  if (s->nacl == s->capacl) {
    size_t cap = s->capacl ? s->capacl * 2 : 16;
    acl_entry *n = realloc(s->acl, cap * sizeof(*n));
    if (n == NULL) {
      pthread_mutex_unlock(&s->acl_mu);
      return -ENOMEM;
    }
    s->acl = n;
    s->capacl = cap;
  }
  s->acl[s->nacl++] = e;
  __atomic_add_fetch(&s->acl_gen, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&s->acl_mu);
  poke_shards(s);
  return 0;
}

int trun_server_allow_replace(trun_server *s, const char *const *rules, size_t n) {
  acl_entry *list = calloc(n ? n : 1, sizeof(*list));
  if (list == NULL) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    int rc = trun_server_parse_cidr(rules[i], &list[i].family, list[i].a, &list[i].prefix);
    if (rc < 0) {
      free(list);
      return rc;
    }
  }
  pthread_mutex_lock(&s->acl_mu);
  free(s->acl);
  s->acl = list;
  s->nacl = n;
  s->capacl = n ? n : 1;
  __atomic_add_fetch(&s->acl_gen, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&s->acl_mu);
  poke_shards(s);
  return 0;
}

void trun_server_allow_enforce(trun_server *s, int on) {
  pthread_mutex_lock(&s->acl_mu);
  s->acl_on = on;
  __atomic_add_fetch(&s->acl_gen, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&s->acl_mu);
  poke_shards(s);
}

int trun__addr_allowed(trun_server *s, const acl_entry *addr) {
  pthread_mutex_lock(&s->acl_mu);
  int ok = !s->acl_on;
  for (size_t i = 0; !ok && i < s->nacl; i++) ok = entry_matches(&s->acl[i], addr);
  pthread_mutex_unlock(&s->acl_mu);
  return ok;
}

int trun_server_peer_allowed(trun_server *s, const struct sockaddr *sa) {
  acl_entry e;
  if (trun__sockaddr_entry(sa, &e) < 0) return 0;
  return trun__addr_allowed(s, &e);
}

/* ---- open connections per address (the per-peer limit), under conns_mu ---------------------- */

/* An address as a key of srv->peers: its family, then its bytes. */
static void peer_key(const acl_entry *addr, uint8_t key[1 + sizeof(addr->a)]) {
  key[0] = addr->family == AF_INET ? 4 : addr->family == AF_INET6 ? 6 : 0;
  memcpy(key + 1, addr->a, sizeof(addr->a));
}

int trun__peer_count(trun_server *s, const acl_entry *addr, int delta, int64_t *now) {
  uint8_t key[1 + sizeof(addr->a)];
  peer_key(addr, key);
  trun_slice k = {key, sizeof(key)};
  int64_t n = 0;
  int rc = trun_kv_add(s->peers, k, delta, &n);
  if (rc < 0) return rc;
  if (n <= 0) trun_kv_delete(s->peers, k); /* a peer with no connection left holds no slot */
  if (now) *now = n;
  return 0;
}

/* ---- the connections on probation, by address, and the shards' eviction queues (under conns_mu) ---- */

unsigned trun__probation_bucket(const trun_server *s, const acl_entry *a) {
  uint8_t key[1 + sizeof(a->a)];
  peer_key(a, key);
  return (unsigned)(trun_kv_hash(s->peers, key, sizeof(key)) % TRUN__PROBATION_BUCKETS);
}

void trun__probation_drop(conn *c) {
  trun_server *s = c->srv;
  if (!c->blisted) return;
  if (c->bprev)
    c->bprev->bnext = c->bnext;
  else
    s->probation[trun__probation_bucket(s, &c->addr)] = c->bnext;
  if (c->bnext) c->bnext->bprev = c->bprev;
  c->bprev = c->bnext = NULL;
  c->blisted = 0;
}

void trun__evict_dequeue(conn *c) {
  if (!c->vqueued) return;
  if (c->vprev)
    c->vprev->vnext = c->vnext;
  else
    c->sh->evictq = c->vnext;
  if (c->vnext) c->vnext->vprev = c->vprev;
  c->vprev = c->vnext = NULL;
  c->vqueued = 0;
}

void trun__probation_add(conn *c) {
  trun_server *s = c->srv;
  unsigned b = trun__probation_bucket(s, &c->addr);
  c->bprev = NULL;
  c->bnext = s->probation[b];
  if (c->bnext) c->bnext->bprev = c;
  s->probation[b] = c;
  c->blisted = 1;
}

void trun__evict_queue(conn *c) {
  shard *sh = c->sh;
  c->vprev = NULL;
  c->vnext = sh->evictq;
  if (sh->evictq) sh->evictq->vprev = c;
  sh->evictq = c;
  c->vqueued = 1;
}

void trun__probation_forget(conn *c) {
  trun__probation_drop(c);
  trun__evict_dequeue(c);
}
