/* Who gets into the TCPStore server: a new connection's peer, the access rules (at accept and after they
 * change), the connection limits, probation beyond the per-peer limit and the eviction it may cause.
 * Calls server_io.c, server_conn.c and server_acl.c only (layers: server_int.h). */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "server_int.h"

static void peer_name(conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  snprintf(c->peer, sizeof(c->peer), "?");
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0) return;
  trun__sockaddr_entry((struct sockaddr *)&ss, &c->addr);
  char host[48] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    uv_ip4_name(a, host, sizeof(host));
    port = ntohs(a->sin_port);
    snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
  } else if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    port = ntohs(a->sin6_port);
    if (c->addr.family == AF_INET) { /* an IPv4 peer of the dual-stack listener: shown as IPv4 */
      inet_ntop(AF_INET, c->addr.a, host, sizeof(host));
      snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
      return;
    }
    uv_ip6_name(a, host, sizeof(host));
    snprintf(c->peer, sizeof(c->peer), "[%s]:%d", host, port);
  }
}

void trun__shard_recheck_acl(shard *sh) {
  trun_server *s = sh->srv;
  unsigned gen = __atomic_load_n(&s->acl_gen, __ATOMIC_ACQUIRE);
  if (gen == sh->acl_seen) return;
  sh->acl_seen = gen;
  for (conn *c = sh->conns, *next; c; c = next) {
    next = c->next;
    if (c->closing || c->doomed || c->acl_gen == gen) continue;
    c->acl_gen = gen;
    if (!trun__addr_allowed(s, &c->addr))
      trun__conn_refuse(c, "not an allowed peer (admitted before the job's hosts were known)");
  }
}

static int same_addr(const conn *a, const conn *b) {
  return a->addr.family == b->addr.family && memcmp(a->addr.a, b->addr.a, 16) == 0;
}

/* c came beyond the per-peer limit of a server that knows an agent token: it is admitted on probation
 * (no request but PING before it presents the token), within opts.peer_reserve such connections of its
 * address; beyond them the oldest that has not presented the token yet is evicted. Strangers' idle
 * connections thus never lock an agent out of its store, and connections admitted within the limit (the
 * workers') are never evicted. The choice looks only at the connections on probation in c's address's
 * bucket (at most peer_reserve of each address there), never at every connection. */
static void admit_on_probation(trun_server *s, conn *c) {
  conn *oldest = NULL;
  int n = 0;
  unsigned walked = 0;
  __atomic_store_n(&c->probation, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&s->conns_mu);
  for (conn *o = s->probation[trun__probation_bucket(s, &c->addr)], *next; o; o = next) {
    next = o->bnext;
    walked++;
    if (!__atomic_load_n(&o->probation, __ATOMIC_RELAXED)) { /* presented the token since: not evictable */
      trun__probation_drop(o);
      continue;
    }
    if (!same_addr(o, c)) continue;
    n++;
    if (oldest == NULL || o->seq < oldest->seq) oldest = o;
  }
  if (walked > s->probation_walk_max) s->probation_walk_max = walked;
  shard *victim_sh = NULL;
  if (n >= (s->opts.peer_reserve > 0 ? s->opts.peer_reserve : 1) && oldest) {
    oldest->evict = 1;
    trun__probation_drop(oldest);
    trun__evict_queue(oldest);
    victim_sh = oldest->sh;
    if (victim_sh != c->sh) __atomic_store_n(&victim_sh->evict, 1, __ATOMIC_RELEASE);
  }
  trun__probation_add(c);
  pthread_mutex_unlock(&s->conns_mu);
  if (victim_sh == c->sh)
    trun__shard_evict(c->sh);
  else if (victim_sh)
    uv_async_send(&victim_sh->async);
}

void trun__shard_evict(shard *sh) {
  trun_server *s = sh->srv;
  for (;;) { /* one victim a time: closing takes conns_mu itself */
    pthread_mutex_lock(&s->conns_mu);
    conn *victim = sh->evictq;
    if (victim) trun__evict_dequeue(victim);
    pthread_mutex_unlock(&s->conns_mu);
    if (victim == NULL) return;
    if (victim->closing) continue;
    trun__conn_refuse(
        victim,
        "evicted: too many connections from this address, and this one did not present the job's "
        "agent token (one beyond the per-peer limit is admitted only for the job's agents)");
  }
}

/* c's socket is open on its shard's loop: checks the access rules and limits, then starts reading. */
static void conn_admit(conn *c) {
  trun_server *s = c->srv;
  shard *sh = c->sh;
  uv_tcp_nodelay(&c->tcp, 1);
  peer_name(c);
  pthread_mutex_lock(&s->conns_mu);
  c->next = sh->conns;
  if (sh->conns) sh->conns->prev = c;
  sh->conns = c;
  c->listed = 1;
  c->seq = ++s->conn_seq;
  int64_t same = 0; /* connections from c's address, c included */
  int counted = trun__peer_count(s, &c->addr, 1, &same) == 0;
  c->peer_counted = counted;
  pthread_mutex_unlock(&s->conns_mu);
  if (!counted) {
    trun__conn_close(c, "out of memory counting the connections from its address");
    return;
  }
  c->acl_gen = __atomic_load_n(&s->acl_gen, __ATOMIC_ACQUIRE);
  if (!trun__addr_allowed(s, &c->addr)) {
    trun__conn_refuse(c,
                      "not an allowed peer (the store admits only the job's hosts: --store-allow-peers or a "
                      "single-node job)");
    return;
  }
  if (s->opts.max_conns > 0 &&
      __atomic_load_n(&s->stats.connections, __ATOMIC_RELAXED) > (uint64_t)s->opts.max_conns) {
    trun__conn_refuse(
        c,
        "too many connections (the store's connection limit, from the hosting process's open-file "
        "limit: raise `ulimit -n`)");
    return;
  }
  if (s->opts.max_conns_per_peer > 0 && same > s->opts.max_conns_per_peer) {
    if (s->token == NULL) { /* set before connections come: no agent could get in beyond the limit */
      trun__conn_refuse(c, "too many connections from this address (the per-peer connection limit)");
      return;
    }
    admit_on_probation(s, c);
  }
  trun__conn_start(c);
}

void trun__shard_adopt(shard *sh, int fd) {
  conn *c = trun__conn_new(sh);
  if (c == NULL) {
    close(fd);
    return;
  }
  int rc = uv_tcp_open(&c->tcp, fd);
  if (rc < 0) {
    close(fd);
    trun__conn_close(c, uv_strerror(rc));
    return;
  }
  conn_admit(c);
}

void trun__shard_accept(shard *sh, uv_stream_t *listener) {
  conn *c = trun__conn_new(sh);
  if (c == NULL) return;
  int rc = uv_accept(listener, (uv_stream_t *)&c->tcp);
  if (rc < 0) {
    trun__conn_close(c, uv_strerror(rc));
    return;
  }
  conn_admit(c);
}
