/* The store server's access rules (store/server.h): the allow-list (addresses and prefixes, IPv4-mapped
 * peers, enforcement turned on while connections are open), the per-peer connection limit and the
 * per-connection memory limit; spoken to with raw bytes over loopback like test_server.c. */
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>

#include "client.h"
#include "rdzv_int.h"
#include "server_int.h"
#include "store_acl.h"
#include "unit.h"

static unit_server us;
static int port;

static void stop(void) { unit_server_stop(&us); }

static int threads = 1; /* event loops of the servers start_opts starts */

static void start_opts(int per_peer, size_t mem) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.threads = threads;
  o.max_conns_per_peer = per_peer;
  o.max_conn_memory = mem;
  port = unit_server_start(&us, &o);
  ck_assert_int_gt(port, 0);
}

/* A connection that starts with VALIDATE (torch >= 2.3's generation); -1 when connect fails. */
static int vconn(void) {
  int fd = unit_connect(port);
  if (fd < 0) return -1;
  static const uint8_t validate[5] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
  unit_send(fd, validate, sizeof(validate)); /* a refused connection may already be gone */
  return fd;
}

/* PING: 0x0d, nonce; the reply is the nonce. 1 when answered, 0 when the connection ended. */
static int ping(int fd, uint32_t nonce) {
  uint8_t req[5] = {0x0d, (uint8_t)nonce, (uint8_t)(nonce >> 8), (uint8_t)(nonce >> 16),
                    (uint8_t)(nonce >> 24)};
  if (unit_send(fd, req, sizeof(req)) < 0) return 0;
  uint8_t got[4];
  if (unit_recv(fd, got, 4) < 0) return 0;
  return memcmp(got, req + 1, 4) == 0;
}

static trun_server_stats stats(void) {
  trun_server_stats st;
  unit_server_stats(&us, &st);
  return st;
}

static void sin4(struct sockaddr_storage *ss, const char *a) {
  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in *s = (struct sockaddr_in *)ss;
  s->sin_family = AF_INET;
  ck_assert_int_eq(inet_pton(AF_INET, a, &s->sin_addr), 1);
}
static void sin6(struct sockaddr_storage *ss, const char *a) {
  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
  s->sin6_family = AF_INET6;
  ck_assert_int_eq(inet_pton(AF_INET6, a, &s->sin6_addr), 1);
}

START_TEST(test_parse_cidr) {
  int fam, prefix;
  uint8_t a[16];
  ck_assert_int_eq(trun_server_parse_cidr("10.1.2.3", &fam, a, &prefix), 0);
  ck_assert_int_eq(fam, AF_INET);
  ck_assert_int_eq(prefix, 32);
  ck_assert_int_eq(a[0], 10);
  ck_assert_int_eq(a[3], 3);
  ck_assert_int_eq(trun_server_parse_cidr("10.0.0.0/8", &fam, a, &prefix), 0);
  ck_assert_int_eq(prefix, 8);
  ck_assert_int_eq(trun_server_parse_cidr("[fe80::1]/10", &fam, a, &prefix), 0);
  ck_assert_int_eq(fam, AF_INET6);
  ck_assert_int_eq(prefix, 10);
  /* An IPv4-mapped rule becomes the IPv4 rule. */
  ck_assert_int_eq(trun_server_parse_cidr("::ffff:192.168.1.0/120", &fam, a, &prefix), 0);
  ck_assert_int_eq(fam, AF_INET);
  ck_assert_int_eq(prefix, 24);
  ck_assert_int_eq(a[0], 192);
  static const char *const bad[] = {"",           "/8",           "10.0.0.0/33",  "::1/129", "10.0.0.0/",
                                    "10.0.0.0/x", "host.example", "10.0.0.0/8/8", "1.2.3"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(trun_server_parse_cidr(bad[i], &fam, a, &prefix) == -EINVAL, "'%s' accepted", bad[i]);
}
END_TEST

typedef struct {
  const char *a;
  int v6, ok; /* an IPv6 address; admitted */
} peer_case;

/* Whether each case's address is admitted as it wants. */
static void check_peers(trun_server *s, const peer_case *cases, size_t n) {
  struct sockaddr_storage ss;
  for (size_t i = 0; i < n; i++) {
    if (cases[i].v6)
      sin6(&ss, cases[i].a);
    else
      sin4(&ss, cases[i].a);
    ck_assert_msg(trun_server_peer_allowed(s, (struct sockaddr *)&ss) == cases[i].ok, "%s: want %d",
                  cases[i].a, cases[i].ok);
  }
}

START_TEST(test_rules_match) {
  start_opts(0, 0);
  trun_server *s = us.srv;
  struct sockaddr_storage ss;
  sin4(&ss, "203.0.113.9");
  ck_assert_int_eq(trun_server_peer_allowed(s, (struct sockaddr *)&ss), 1); /* off: everyone */
  trun_server_allow_enforce(s, 1);
  ck_assert_int_eq(trun_server_peer_allowed(s, (struct sockaddr *)&ss), 0); /* on, no rules: nobody */
  ck_assert_int_eq(trun_server_allow(s, "10.250.0.0/24"), 0);
  ck_assert_int_eq(trun_server_allow(s, "192.168.7.5"), 0);
  ck_assert_int_eq(trun_server_allow(s, "2001:db8::/32"), 0);
  ck_assert_int_eq(trun_server_allow(s, "10.250.0.0/24"), 0); /* twice: one rule */
  ck_assert_int_eq(trun_server_allow(s, "not-an-address"), -EINVAL);
  static const peer_case cases[] = {{"10.250.0.1", 0, 1},        {"10.250.0.255", 0, 1},
                                    {"10.250.1.1", 0, 0},        {"192.168.7.5", 0, 1},
                                    {"192.168.7.6", 0, 0},       {"::ffff:10.250.0.7", 1, 1},
                                    {"::ffff:10.251.0.7", 1, 0}, {"2001:db8:1::5", 1, 1},
                                    {"2001:db9::5", 1, 0},       {"::1", 1, 0},
                                    {"127.0.0.1", 0, 0}};
  check_peers(s, cases, sizeof(cases) / sizeof(cases[0]));
  /* A non-byte-aligned prefix. */
  ck_assert_int_eq(trun_server_allow(s, "172.16.0.0/12"), 0);
  sin4(&ss, "172.31.255.1");
  ck_assert_int_eq(trun_server_peer_allowed(s, (struct sockaddr *)&ss), 1);
  sin4(&ss, "172.32.0.1");
  ck_assert_int_eq(trun_server_peer_allowed(s, (struct sockaddr *)&ss), 0);
  stop();
}
END_TEST

/* --store-allow-peers with c10d admits what the participants' names resolve to: an address as it is, a name
 * by its addresses; a name that does not resolve is an error naming it. */
START_TEST(test_allow_names) {
  start_opts(0, 0);
  trun_server *s = us.srv;
  trun_server_allow_enforce(s, 1);
  const char *names[] = {"192.0.2.7", "localhost", "2001:db8::9"};
  char err[512] = "";
  ck_assert_int_eq(trun_store_acl_allow_names(s, names, 3, err, sizeof(err)), 0);
  static const peer_case cases[] = {{"192.0.2.7", 0, 1},   {"192.0.2.8", 0, 0},   {"127.0.0.1", 0, 1},
                                    {"2001:db8::9", 1, 1}, {"2001:db8::a", 1, 0}, {"10.0.0.1", 0, 0}};
  check_peers(s, cases, sizeof(cases) / sizeof(cases[0]));
  const char *bad[] = {"127.0.0.1", "no-such-host.invalid"}; /* RFC 6761: never resolves */
  ck_assert_int_eq(trun_store_acl_allow_names(s, bad, 2, err, sizeof(err)), -1);
  ck_assert_msg(strstr(err, "participant 'no-such-host.invalid' does not resolve here") != NULL, "%s", err);
  stop();
}
END_TEST

/* A name that resolves only to loopback addresses gives the listeners for exactly those (Debian's
 * "127.0.1.1 <hostname>"), deduplicated; any other address, no address, or too many: none. */
START_TEST(test_loopback_addrs) {
  char a[4][INET6_ADDRSTRLEN];
  ck_assert_int_eq(trun_store_loopback_addrs("127.0.1.1", a, 4), 1);
  ck_assert_str_eq(a[0], "127.0.1.1");
  ck_assert_int_eq(trun_store_loopback_addrs("127.0.0.1", a, 4), 1);
  ck_assert_str_eq(a[0], "127.0.0.1");
  ck_assert_int_eq(trun_store_loopback_addrs("::1", a, 4), 1);
  ck_assert_str_eq(a[0], "::1");
  ck_assert_int_eq(trun_store_loopback_addrs("::ffff:127.0.0.2", a, 4), 1);
  ck_assert_int_eq(trun_store_loopback_addrs("10.0.0.1", a, 4), 0);
  ck_assert_int_eq(trun_store_loopback_addrs("::ffff:10.0.0.1", a, 4), 0);
  ck_assert_int_eq(trun_store_loopback_addrs("2001:db8::1", a, 4), 0);
  ck_assert_int_eq(trun_store_loopback_addrs("no-such-host.invalid", a, 4), 0);
  ck_assert_int_eq(trun_store_loopback_addrs(NULL, a, 4), 0);
  int n = trun_store_loopback_addrs("localhost", a, 4); /* 127.0.0.1, and ::1 where /etc/hosts says so */
  ck_assert_int_ge(n, 1);
  for (int i = 0; i < n; i++)
    ck_assert_msg(strcmp(a[i], "127.0.0.1") == 0 || strcmp(a[i], "::1") == 0, "localhost -> %s", a[i]);
  ck_assert_int_eq(trun_store_loopback_addrs("localhost", a, 0), 0);
}
END_TEST

/* The workers' MASTER_ADDR checked before they start (rdzv_addr.c): a name that does not resolve fails with
 * the fix; loopback fails on a node of several where nothing listens on the workers' store port, and passes
 * where something does (the store host itself, or agents sharing a host), with one node, or when torch
 * 1.13's workers serve the store themselves; an address off this host passes. */
START_TEST(test_check_master) {
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  snprintf(cfg.endpoint_host, sizeof(cfg.endpoint_host), "10.0.0.1");
  trun_rdzv r;
  memset(&r, 0, sizeof(r));
  r.cfg = &cfg;
  r.info.group_rank = 1;
  r.info.group_world_size = 2;
  snprintf(r.host_addr, sizeof(r.host_addr), "10.0.0.2");
  char err[1024];
  snprintf(r.info.master_addr, sizeof(r.info.master_addr),
           "no-such-host.invalid"); /* RFC 6761: never resolves */
  r.info.master_port = 29500;
  ck_assert_int_eq(trun_rdzv_check_master(&r, err, sizeof(err)), -1);
  ck_assert_msg(strstr(err,
                       "the workers' MASTER_ADDR 'no-such-host.invalid' does not resolve on this node "
                       "(10.0.0.2, node rank 1: ") != NULL,
                "%s", err);
  ck_assert_msg(strstr(err, "Run every node with --local-addr auto") && strstr(err, "headless Service"), "%s",
                err);
  /* A free port on loopback: bound, then closed. */
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_storage ss;
  sin4(&ss, "127.0.0.1");
  socklen_t n = sizeof(struct sockaddr_in);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&ss, n), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&ss, &n), 0);
  r.info.master_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  snprintf(r.info.master_addr, sizeof(r.info.master_addr), "127.0.0.1");
  ck_assert_int_eq(trun_rdzv_check_master(&r, err, sizeof(err)), -1);
  ck_assert_msg(strstr(err,
                       "resolves to the loopback address 127.0.0.1 on this node (10.0.0.2, node rank 1), "
                       "where nothing serves the workers' store") != NULL,
                "%s", err);
  ck_assert_int_eq(listen(fd, 4), 0); /* now something serves it */
  ck_assert_int_eq(trun_rdzv_check_master(&r, err, sizeof(err)), 0);
  close(fd);
  r.info.workers_host_store = 1; /* torch 1.13's workers serve it: not there yet */
  ck_assert_int_eq(trun_rdzv_check_master(&r, err, sizeof(err)), 0);
  r.info.workers_host_store = 0;
  r.info.group_world_size = 1;
  ck_assert_int_eq(trun_rdzv_check_master(&r, err, sizeof(err)), 0);
  r.info.group_world_size = 2;
  snprintf(r.info.master_addr, sizeof(r.info.master_addr),
           "10.0.0.1"); /* the endpoint's host: the other fix */
  ck_assert_int_eq(trun_rdzv_check_master(&r, err, sizeof(err)), 0);
}
END_TEST

static int connect_to(int family, const char *addr, int p) {
  struct sockaddr_storage ss;
  family == AF_INET ? sin4(&ss, addr) : sin6(&ss, addr);
  ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)p); /* same offset in sockaddr_in6 */
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  int rc = connect(fd, (struct sockaddr *)&ss,
                   family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
  int err = errno;
  close(fd);
  return rc == 0 ? 0 : -err;
}

/* opts.hosts: one listener per address, all on the port the first one got; nothing on other addresses. */
START_TEST(test_listen_hosts) {
  const char *hosts[] = {"127.0.0.3", "127.0.0.1", "::1"};
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.threads = threads;
  o.hosts = hosts;
  o.nhosts = 3;
  port = unit_server_start(&us, &o);
  ck_assert_int_gt(port, 0);
  ck_assert_int_eq(connect_to(AF_INET, "127.0.0.3", port), 0);
  ck_assert_int_eq(connect_to(AF_INET, "127.0.0.1", port), 0);
  int v6 = connect_to(AF_INET6, "::1", port);
  ck_assert_int_eq(v6, 0);
  ck_assert_int_eq(connect_to(AF_INET, "127.0.0.2", port), -ECONNREFUSED);
  int fd = vconn(); /* unit_connect: 127.0.0.1 */
  ck_assert_int_eq(ping(fd, 9), 1);
  close(fd);
  stop();
  o.nhosts = TRUN_SERVER_MAX_LISTENERS + 1;
  uv_loop_t loop;
  trun_server *s = NULL;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  ck_assert_int_eq(trun_server_start(&loop, &o, &s), UV_EINVAL);
  o.nhosts = 2;
  o.hosts = (const char *const[]){"127.0.0.1", "192.0.2.1"}; /* not this host's: the second bind fails */
  ck_assert_int_eq(trun_server_start(&loop, &o, &s), UV_EADDRNOTAVAIL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* Loopback refused while only other addresses are allowed; admitted once 127.0.0.1 is. */
START_TEST(test_refused_at_accept) {
  start_opts(0, 0);
  ck_assert_int_eq(trun_server_allow(us.srv, "10.0.0.0/8"), 0);
  trun_server_allow_enforce(us.srv, 1);
  int fd = vconn();
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ping(fd, 7), 0);
  close(fd);
  while (stats().refused != 1) usleep(1000);
  ck_assert_int_eq(trun_server_allow(us.srv, "127.0.0.1"), 0);
  fd = vconn();
  ck_assert_int_eq(ping(fd, 8), 1);
  close(fd);
  ck_assert_int_eq(stats().refused, 1);
  stop();
}
END_TEST

/* A connection admitted while the rules were off is closed at its next request once they exclude it;
 * one they include keeps working. */
START_TEST(test_enforced_later) {
  start_opts(0, 0);
  int fd = vconn();
  ck_assert_int_eq(ping(fd, 1), 1);
  ck_assert_int_eq(trun_server_allow(us.srv, "192.0.2.0/24"), 0);
  trun_server_allow_enforce(us.srv, 1);
  ck_assert_int_eq(ping(fd, 2), 0);
  close(fd);
  trun_server_allow_enforce(us.srv, 0);
  fd = vconn();
  ck_assert_int_eq(ping(fd, 3), 1);
  ck_assert_int_eq(trun_server_allow(us.srv, "127.0.0.0/8"), 0);
  trun_server_allow_enforce(us.srv, 1);
  ck_assert_int_eq(ping(fd, 4), 1);
  close(fd);
  stop();
}
END_TEST

/* A connection parked in WAIT (it sends nothing more) is closed as soon as the rules exclude it. */
START_TEST(test_enforced_closes_idle) {
  start_opts(0, 0);
  int fd = vconn();
  ck_assert_int_eq(ping(fd, 1), 1);
  /* WAIT (0x06) for one key that never appears: u64 count, then the key. */
  uint8_t wait_req[1 + 8 + 8 + 1] = {0x06, 1};
  wait_req[9] = 1;
  wait_req[17] = 'w';
  ck_assert_int_eq(unit_send(fd, wait_req, sizeof(wait_req)), 0);
  while (stats().waiting != 1) usleep(1000);
  ck_assert_int_eq(trun_server_allow(us.srv, "192.0.2.1"), 0);
  trun_server_allow_enforce(us.srv, 1);
  ck_assert(unit_eof(fd));
  ck_assert_int_eq(stats().refused, 1);
  ck_assert_int_eq(stats().waiting, 0);
  close(fd);
  stop();
}
END_TEST

START_TEST(test_per_peer_limit) {
  start_opts(2, 0);
  int a = vconn(), b = vconn();
  ck_assert_int_eq(ping(a, 1), 1);
  ck_assert_int_eq(ping(b, 2), 1);
  int c = vconn();
  ck_assert_int_eq(ping(c, 3), 0); /* the third from 127.0.0.1 */
  close(c);
  ck_assert_int_eq(ping(a, 4), 1); /* the others are untouched */
  close(b);
  while (stats().connections != 1) usleep(1000);
  c = vconn();
  ck_assert_int_eq(ping(c, 5), 1); /* room again */
  close(a);
  close(c);
  ck_assert_int_eq(stats().refused, 1);
  stop();
}
END_TEST

/* With four loops the connections of one peer land on different threads: still counted together. */
START_TEST(test_per_peer_limit_threads) {
  threads = 4;
  start_opts(3, 0);
  int fd[3];
  for (int i = 0; i < 3; i++) {
    fd[i] = vconn();
    ck_assert_int_eq(ping(fd[i], (uint32_t)i), 1);
  }
  int c = vconn();
  ck_assert_int_eq(ping(c, 9), 0);
  close(c);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(ping(fd[i], (uint32_t)(10 + i)), 1);
  for (int i = 0; i < 3; i++) close(fd[i]);
  ck_assert_int_eq(stats().refused, 1);
  stop();
  threads = 1;
}
END_TEST

#define ACL_TOKEN "unit-acl-agent-token-0123"

static void token_on(trun_server *s, void *arg) {
  (void)arg;
  ck_assert_int_eq(trun_server_agent_token(s, ACL_TOKEN), 0);
}

/* Presents the agent token (CHECK of its key): 1 READY, 0 the connection ended. */
static int present(int fd) {
  const char *k = TRUN_STORE_TOKEN_KEY ACL_TOKEN;
  uint8_t req[128];
  size_t n = strlen(k), off = 0;
  req[off++] = 0x05;
  for (int i = 0; i < 8; i++) req[off++] = (uint8_t)(i == 0 ? 1 : 0);
  for (int i = 0; i < 8; i++) req[off++] = (uint8_t)(n >> (8 * i));
  memcpy(req + off, k, n);
  off += n;
  if (unit_send(fd, req, off) < 0) return 0;
  uint8_t b;
  return unit_recv(fd, &b, 1) == 0 && b == 0x00;
}

/* Issue 41, finding 11: a local process that holds a peer's whole per-peer limit of idle connections does
 * not lock the job's agents out. On a server with an agent token, connections beyond the limit are admitted
 * on probation (PING only until they present the token); TRUN_SERVER_PEER_RESERVE of them at most, one more
 * evicts the oldest that did not present it. The connections within the limit are never evicted; a
 * probationary connection that sends another request is closed. */
START_TEST(test_per_peer_reserve_for_agents) {
  start_opts(2, 0);
  unit_server_call(&us, token_on, NULL);
  int a = vconn(), b = vconn(), p[TRUN_SERVER_PEER_RESERVE];
  ck_assert_int_eq(ping(a, 1), 1);
  ck_assert_int_eq(ping(b, 2), 1);
  for (int i = 0; i < TRUN_SERVER_PEER_RESERVE; i++) {
    p[i] = vconn();
    ck_assert_int_eq(ping(p[i], (uint32_t)(10 + i)), 1); /* on probation: PING is served */
  }
  ck_assert_uint_eq(stats().refused, 0);
  /* The reserve is full of idle strangers: an agent still gets in, evicting the oldest of them. */
  int ag = vconn();
  ck_assert_int_eq(ping(ag, 99), 1);
  ck_assert_int_eq(present(ag), 1);
  ck_assert_int_eq(ping(ag, 100), 1);
  ck_assert_int_eq(ping(p[0], 200), 0);
  ck_assert_int_eq(ping(p[1], 201), 1);
  ck_assert_int_eq(ping(a, 3), 1); /* within the limit: untouched */
  ck_assert_int_eq(ping(b, 4), 1);
  /* A probationary connection's request other than PING and the token closes it. */
  uint8_t numkeys = 0x07; /* GETNUMKEYS */
  ck_assert_int_eq(unit_send(p[1], &numkeys, 1), 0);
  ck_assert(unit_eof(p[1]));
  ck_assert_uint_eq(stats().refused, 2);
  /* The agent is no longer evictable: 17 more strangers evict only strangers. */
  int q[TRUN_SERVER_PEER_RESERVE + 1];
  for (int i = 0; i <= TRUN_SERVER_PEER_RESERVE; i++) {
    q[i] = vconn();
    ck_assert_int_eq(ping(q[i], (uint32_t)(300 + i)), 1);
  }
  ck_assert_int_eq(ping(ag, 101), 1);
  ck_assert_int_eq(ping(q[TRUN_SERVER_PEER_RESERVE], 400), 1);
  close(a);
  close(b);
  close(ag);
  for (int i = 0; i < TRUN_SERVER_PEER_RESERVE; i++) close(p[i]);
  for (int i = 0; i <= TRUN_SERVER_PEER_RESERVE; i++) close(q[i]);
  stop();
}
END_TEST

static void read_walk_max(trun_server *s, void *arg) {
  pthread_mutex_lock(&s->conns_mu);
  *(unsigned *)arg = s->probation_walk_max;
  pthread_mutex_unlock(&s->conns_mu);
}

/* A flood of strangers from one address beyond the per-peer limit: each newcomer evicts the oldest on
 * probation, the newest TRUN_SERVER_PEER_RESERVE stay, the two within the limit are untouched, and no
 * admission looked at more connections than the reserve (its address's bucket), however many came: the
 * work per connection is bounded, not a walk over every connection. */
START_TEST(test_probation_flood_bounded) {
  enum { FLOOD = 400 };
  start_opts(2, 0);
  unit_server_call(&us, token_on, NULL);
  int a = vconn(), b = vconn();
  ck_assert_int_eq(ping(a, 1), 1);
  ck_assert_int_eq(ping(b, 2), 1);
  static int f[FLOOD];
  for (int i = 0; i < FLOOD; i++) {
    f[i] = vconn();
    ck_assert_int_ge(f[i], 0);
    ck_assert_int_eq(ping(f[i], (uint32_t)(1000 + i)), 1);
  }
  for (int i = 0; i < FLOOD - TRUN_SERVER_PEER_RESERVE; i += 37)
    ck_assert_msg(ping(f[i], 7) == 0, "stranger %d was not evicted", i);
  for (int i = FLOOD - TRUN_SERVER_PEER_RESERVE; i < FLOOD; i++)
    ck_assert_msg(ping(f[i], 8) == 1, "stranger %d (one of the newest) was evicted", i);
  ck_assert_int_eq(ping(a, 3), 1);
  ck_assert_int_eq(ping(b, 4), 1);
  unsigned walked = 0;
  unit_server_call(&us, read_walk_max, &walked);
  ck_assert_msg(walked <= TRUN_SERVER_PEER_RESERVE, "one admission looked at %u connections on probation",
                walked);
  ck_assert_uint_ge(walked, TRUN_SERVER_PEER_RESERVE - 1);
  for (int i = 0; i < FLOOD; i++) close(f[i]);
  close(a);
  close(b);
  stop();
}
END_TEST

/* The total connection limit (the agent's open-file budget): the same rule as per peer, all peers counted. */
START_TEST(test_total_limit) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  o.max_conns = 2;
  port = unit_server_start(&us, &o);
  ck_assert_int_gt(port, 0);
  int a = vconn(), b = vconn();
  ck_assert_int_eq(ping(a, 1), 1);
  ck_assert_int_eq(ping(b, 2), 1);
  int c = vconn();
  ck_assert_int_eq(ping(c, 3), 0);
  close(c);
  ck_assert_int_eq(ping(a, 4), 1);
  close(b);
  while (stats().connections != 1) usleep(1000);
  c = vconn();
  ck_assert_int_eq(ping(c, 5), 1);
  close(a);
  close(c);
  ck_assert_int_eq(stats().refused, 1);
  stop();
}
END_TEST

START_TEST(test_conn_budget) {
  ck_assert_int_eq(trun_store_conn_budget(1024), 1024 - TRUN_STORE_FD_RESERVE);
  ck_assert_int_eq(trun_store_conn_budget(1048576), 1048576 - TRUN_STORE_FD_RESERVE);
  ck_assert_int_eq(trun_store_conn_budget(300), 64); /* never below 64 */
  ck_assert_int_eq(trun_store_conn_budget(0), 64);
  ck_assert_int_eq(trun_store_conn_budget((unsigned long long)RLIM_INFINITY), 0); /* no limit */
}
END_TEST

/* SET: 0x01, key (u64 len + bytes), value (u64 len + bytes). */
static int set_value(int fd, size_t vlen) {
  size_t n = 1 + 8 + 1 + 8 + vlen;
  uint8_t *m = calloc(1, n);
  ck_assert_ptr_nonnull(m);
  m[0] = 0x01;
  m[1] = 1;
  m[9] = 'k';
  for (int i = 0; i < 8; i++) m[10 + i] = (uint8_t)(vlen >> (8 * i));
  int rc = unit_send(fd, m, n);
  free(m);
  return rc;
}

START_TEST(test_conn_memory_limit) {
  start_opts(0, 4096);
  int fd = vconn();
  ck_assert_int_eq(set_value(fd, 1000), 0);
  ck_assert_int_eq(ping(fd, 1), 1); /* the small SET was served (SET has no reply) */
  /* The request announces 1 MiB: over the limit as soon as its length is read. */
  set_value(fd, 1 << 20);
  ck_assert(unit_eof(fd));
  close(fd);
  ck_assert_int_eq(stats().rejected, 1);
  fd = vconn();
  ck_assert_int_eq(ping(fd, 2), 1); /* the server itself is fine */
  close(fd);
  stop();
}
END_TEST

static void four_loops(void) { threads = 4; }
static void one_loop(void) { threads = 1; }

static Suite *acl_suite(void) {
  Suite *s = suite_create("acl");
  TCase *tc = tcase_create("rules");
  tcase_add_test(tc, test_parse_cidr);
  tcase_add_test(tc, test_rules_match);
  tcase_add_test(tc, test_allow_names);
  tcase_add_test(tc, test_loopback_addrs);
  tcase_add_test(tc, test_check_master);
  tcase_add_test(tc, test_listen_hosts);
  tcase_add_test(tc, test_refused_at_accept);
  tcase_add_test(tc, test_enforced_later);
  tcase_add_test(tc, test_enforced_closes_idle);
  tcase_add_test(tc, test_per_peer_limit);
  tcase_add_test(tc, test_per_peer_limit_threads);
  tcase_add_test(tc, test_per_peer_reserve_for_agents);
  tcase_add_test(tc, test_probation_flood_bounded);
  tcase_add_test(tc, test_conn_memory_limit);
  tcase_add_test(tc, test_total_limit);
  tcase_add_test(tc, test_conn_budget);
  suite_add_tcase(s, tc);
  /* The server cases again with four loops: rules changed from another thread reach every loop. */
  tc = tcase_create("threads");
  tcase_add_checked_fixture(tc, four_loops, one_loop);
  tcase_add_test(tc, test_listen_hosts);
  tcase_add_test(tc, test_refused_at_accept);
  tcase_add_test(tc, test_enforced_later);
  tcase_add_test(tc, test_enforced_closes_idle);
  tcase_add_test(tc, test_per_peer_limit);
  tcase_add_test(tc, test_per_peer_reserve_for_agents);
  tcase_add_test(tc, test_probation_flood_bounded);
  tcase_add_test(tc, test_conn_memory_limit);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  return unit_run(acl_suite());
}
