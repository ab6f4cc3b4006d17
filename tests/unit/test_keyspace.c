/* The agents' key space (store/server.h: trun_server_agent_token, trun_server_protect, owned keys) and the
 * job's agent token (agent/rdzv/rdzv.h: trun_rdzv_token), over loopback with the store's own client: a
 * stranger's write to the key space closes its connection and changes nothing, reads stay open, torch's
 * own keys keep torch's semantics, an agent with the token writes, a wrong token is refused at connect, and
 * only an agent's SET of "<root>[/<seg>]/alive/<n>" makes it an owner. */
#include <errno.h>
#include <stdlib.h>

#include "rdzv.h"
#include "rdzv_int.h"
#include "unit.h"

#define TOKEN "0123456789abcdef-unit"

static unit_server us;
static int port;
static int gone_calls;

static void on_gone(void *arg, trun_server *s, trun_slice key, trun_slice value, const char *peer) {
  (void)s;
  (void)key;
  (void)value;
  (void)peer;
  __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static void guard(trun_server *s, void *arg) {
  (void)arg;
  ck_assert_int_eq(trun_server_agent_token(s, TOKEN), 0);
  ck_assert_int_eq(trun_server_protect(s, "/trun/job", NULL), 0);
  ck_assert_int_eq(trun_server_protect(s, "/torch.rendezvous.job.", "/trun"), 0);
  ck_assert_int_eq(trun_server_own_keys(s, "/alive/", on_gone, &gone_calls), 0);
}

static void start(int guarded) {
  gone_calls = 0;
  port = unit_server_start(&us, NULL);
  ck_assert_int_gt(port, 0);
  if (guarded) unit_server_call(&us, guard, NULL);
}

static trun_client *client(const char *token) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = 10000;
  o.quiet_errors = 1;
  o.agent_token = token;
  trun_client *c = NULL;
  int rc = trun_client_connect(&o, &c);
  ck_assert_msg(rc == 0, "connect: %s", strerror(-rc));
  return c;
}

static trun_server_stats stats(void) {
  trun_server_stats st;
  unit_server_stats(&us, &st);
  return st;
}

/* Whether key exists, asked on a fresh stranger's connection. */
static int exists(const char *key) {
  trun_client *c = client(NULL);
  trun_slice k = trun_str(key);
  int rc = trun_client_check(c, 1, &k);
  trun_client_close(c);
  ck_assert_int_ge(rc, 0);
  return rc;
}

/* A stranger SETs key: 1 when its connection survived (a PING after it is answered), 0 when it was closed. */
static int stranger_set(const char *key) {
  trun_client *c = client(NULL);
  int rc = trun_client_set(c, trun_str(key), trun_str("gone:1"));
  if (rc == 0) rc = trun_client_ping(c);
  trun_client_close(c);
  return rc == 0;
}

static const char *const agents_keys[] = {"/trun/job/r0/end", "/trun/job/r3/alive/0", "/trun/job/health/n",
                                          "/torch.rendezvous.job.7/trun/end",
                                          "/torch.rendezvous.job.12/trun/alive/1"};
static const char *const others_keys[] = {"/x/alive/0",
                                          "/trun/jobx/r0/end",
                                          "/trun/job",
                                          "/torch.rendezvous.job",
                                          "/torch.rendezvous.job.7/rank_0",
                                          "/torch.rendezvous.job.7/trunk",
                                          "/torch.rendezvous.job.x/trun/end",
                                          "/trun/other/r0/end",
                                          "end"};

START_TEST(test_stranger_cannot_write) {
  start(1);
  for (size_t i = 0; i < sizeof(agents_keys) / sizeof(agents_keys[0]); i++) {
    uint64_t refused = stats().refused;
    ck_assert_msg(!stranger_set(agents_keys[i]), "a stranger's SET of %s was served", agents_keys[i]);
    ck_assert_msg(!exists(agents_keys[i]), "%s was written by a stranger", agents_keys[i]);
    ck_assert_uint_eq(stats().refused, refused + 1);
  }
  for (size_t i = 0; i < sizeof(others_keys) / sizeof(others_keys[0]); i++) {
    ck_assert_msg(stranger_set(others_keys[i]), "a stranger's SET of %s was refused", others_keys[i]);
    ck_assert(exists(others_keys[i]));
  }
  /* Every other writing request on the key space closes the connection too; reads are served. */
  trun_client *a = client(TOKEN);
  ck_assert_int_eq(trun_client_is_agent(a), 1);
  ck_assert_int_eq(trun_client_set(a, trun_str("/trun/job/r0/end"), trun_str("")), 0);
  for (int op = 0; op < 5; op++) {
    trun_client *c = client(NULL);
    ck_assert_int_eq(trun_client_is_agent(c), 0);
    trun_slice k = trun_str("/trun/job/r0/end");
    trun_buf out = {0};
    int64_t n;
    int rc = op == 0   ? trun_client_add(c, trun_str("/trun/job/r0/n"), 1, &n)
             : op == 1 ? trun_client_compare_set(c, k, trun_str(""), trun_str("gone:0"), &out)
             : op == 2 ? trun_client_delete(c, k)
             : op == 3 ? trun_client_append(c, k, trun_str("x"))
                       : trun_client_multi_set(c, 1, &k, &(trun_slice){(const uint8_t *)"x", 1});
    if (rc >= 0) rc = trun_client_ping(c);
    ck_assert_msg(rc < 0, "writing request %d on the key space was served", op);
    trun_buf_free(&out);
    trun_client_close(c);
  }
  trun_client *r = client(NULL);
  trun_buf v = {0};
  ck_assert_int_eq(trun_client_get(r, trun_str("/trun/job/r0/end"), &v, 5000), 0);
  ck_assert_uint_eq(v.len, 0); /* still the agent's empty value */
  trun_buf_free(&v);
  trun_client_close(r);
  trun_client_close(a);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_agent_writes) {
  start(1);
  trun_client *a = client(TOKEN);
  ck_assert_int_eq(trun_client_is_agent(a), 1);
  for (size_t i = 0; i < sizeof(agents_keys) / sizeof(agents_keys[0]); i++)
    ck_assert_int_eq(trun_client_set(a, trun_str(agents_keys[i]), trun_str("v")), 0);
  int64_t n = 0;
  ck_assert_int_eq(trun_client_add(a, trun_str("/trun/job/r0/left"), 2, &n), 0);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(trun_client_ping(a), 0);
  for (size_t i = 0; i < sizeof(agents_keys) / sizeof(agents_keys[0]); i++) ck_assert(exists(agents_keys[i]));
  trun_client_close(a);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_wrong_token_refused) {
  start(1);
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.port = port;
  o.key_prefix = "";
  o.connect_timeout_ms = 5000;
  o.agent_token = "not-the-token-of-this-job";
  trun_client *c = NULL;
  ck_assert_int_eq(trun_client_connect(&o, &c), -EACCES);
  ck_assert_ptr_null(c);
  ck_assert_uint_eq(stats().refused, 1);
  unit_server_stop(&us);
}
END_TEST

/* A store that guards nothing (trun-store serve, a torch store): the token's CHECK is an ordinary missing
 * key, the client goes on as a stranger and may write anything. */
START_TEST(test_unguarded_store) {
  start(0);
  trun_client *a = client(TOKEN);
  ck_assert_int_eq(trun_client_is_agent(a), 0);
  ck_assert_int_eq(trun_client_set(a, trun_str("/trun/job/r0/end"), trun_str("ok")), 0);
  ck_assert_int_eq(trun_client_ping(a), 0);
  trun_client_close(a);
  ck_assert(stranger_set("/trun/job/r0/end"));
  ck_assert_uint_eq(stats().refused, 0);
  unit_server_stop(&us);
}
END_TEST

/* Sets key on a fresh agent connection and closes it; the number of gone calls after the server saw it. */
static int agent_owns(const char *key) {
  int before = __atomic_load_n(&gone_calls, __ATOMIC_SEQ_CST);
  trun_client *a = client(TOKEN);
  ck_assert_int_eq(trun_client_set(a, trun_str(key), trun_str("10.0.0.1 7 0")), 0);
  ck_assert_int_eq(trun_client_ping(a), 0);
  trun_client_close(a);
  for (int i = 0; i < 200 && stats().connections > 0; i++) usleep(10000);
  ck_assert_uint_eq(stats().connections, 0);
  return __atomic_load_n(&gone_calls, __ATOMIC_SEQ_CST) - before;
}

START_TEST(test_owned_only_exact) {
  start(1);
  /* The probe: a stranger's "x/alive/0" is nobody's liveness. */
  trun_client *c = client(NULL);
  ck_assert_int_eq(trun_client_set(c, trun_str("/x/alive/0"), trun_str("stray 1 0")), 0);
  ck_assert_int_eq(trun_client_ping(c), 0);
  trun_client_close(c);
  for (int i = 0; i < 200 && stats().connections > 0; i++) usleep(10000);
  ck_assert_int_eq(gone_calls, 0);
  ck_assert_int_eq(agent_owns("/trun/job/r0/alive/1"), 1);
  ck_assert_int_eq(agent_owns("/torch.rendezvous.job.4/trun/alive/0"), 1);
  ck_assert_int_eq(agent_owns("/trun/job/alive/3"), 1);
  ck_assert_int_eq(agent_owns("/x/alive/0"), 0);            /* outside the key space */
  ck_assert_int_eq(agent_owns("/trun/job/a/b/alive/1"), 0); /* two segments */
  ck_assert_int_eq(agent_owns("/trun/job/r0/xalive/1"), 0);
  ck_assert_int_eq(agent_owns("/trun/job/r0/alive/1x"), 0);
  ck_assert_int_eq(agent_owns("/trun/job/r0/alive/"), 0);
  ck_assert_int_eq(agent_owns("/trun/job/r0/alive/1/more"), 0);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_token_sources) {
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  snprintf(cfg.run_id, sizeof(cfg.run_id), "job");
  char t1[TRUN_STORE_TOKEN_MAX + 1], t2[TRUN_STORE_TOKEN_MAX + 1], err[300];
  unsetenv(TRUN_RDZV_TOKEN_ENV);
  /* Derived: the same for the same job on every node, another for another run id. */
  ck_assert_int_eq(trun_rdzv_token(&cfg, t1, sizeof(t1), err, sizeof(err)), 0);
  ck_assert_int_eq(trun_rdzv_token(&cfg, t2, sizeof(t2), err, sizeof(err)), 0);
  ck_assert_str_eq(t1, t2);
  ck_assert_int_ge((int)strlen(t1), TRUN_STORE_TOKEN_MIN);
  snprintf(cfg.run_id, sizeof(cfg.run_id), "job2");
  ck_assert_int_eq(trun_rdzv_token(&cfg, t2, sizeof(t2), err, sizeof(err)), 0);
  ck_assert_str_ne(t1, t2);
  /* --rdzv-conf trun_token, then the environment over it. */
  cfg.rdzv_conf = "join_timeout=30,trun_token=conf-secret-0123456789";
  ck_assert_int_eq(trun_rdzv_token(&cfg, t1, sizeof(t1), err, sizeof(err)), 1);
  ck_assert_str_eq(t1, "conf-secret-0123456789");
  setenv(TRUN_RDZV_TOKEN_ENV, "env-secret-0123456789", 1);
  ck_assert_int_eq(trun_rdzv_token(&cfg, t1, sizeof(t1), err, sizeof(err)), 1);
  ck_assert_str_eq(t1, "env-secret-0123456789");
  /* Too short, too long, spaces: a clear error (exit 2 through trun_rdzv_conf_check). */
  setenv(TRUN_RDZV_TOKEN_ENV, "short", 1);
  ck_assert_int_eq(trun_rdzv_token(&cfg, t1, sizeof(t1), err, sizeof(err)), -1);
  ck_assert_msg(strstr(err, TRUN_RDZV_TOKEN_ENV) && strstr(err, "16 to 100"), "%s", err);
  ck_assert_int_eq(trun_rdzv_conf_check(&cfg, err, sizeof(err)), -1);
  char longv[200];
  memset(longv, 'a', sizeof(longv) - 1);
  longv[sizeof(longv) - 1] = '\0';
  setenv(TRUN_RDZV_TOKEN_ENV, longv, 1);
  ck_assert_int_eq(trun_rdzv_token(&cfg, t1, sizeof(t1), err, sizeof(err)), -1);
  setenv(TRUN_RDZV_TOKEN_ENV, "with a space 0123456789", 1);
  ck_assert_int_eq(trun_rdzv_token(&cfg, t1, sizeof(t1), err, sizeof(err)), -1);
  unsetenv(TRUN_RDZV_TOKEN_ENV);
  cfg.rdzv_conf = "trun_token=tiny";
  ck_assert_int_eq(trun_rdzv_token(&cfg, t1, sizeof(t1), err, sizeof(err)), -1);
  ck_assert_msg(strstr(err, "--rdzv-conf trun_token"), "%s", err);
  ck_assert_int_eq(trun_rdzv_conf_check(&cfg, err, sizeof(err)), -1);
}
END_TEST

/* --store-allow-peers admission (agent/rdzv/store_acl.c) against a store an agent hosts: node 0 and node 1 of
 * job "adm", each with its own agent connection. */
typedef struct {
  trun_config cfg;
  trun_rdzv n0, n1;
  int port;
} adm_job;

static trun_client *client_at(int p, const char *token) {
  int saved = port;
  port = p;
  trun_client *c = client(token);
  port = saved;
  return c;
}

static void adm_start(adm_job *j) {
  memset(j, 0, sizeof(*j));
  snprintf(j->cfg.run_id, sizeof(j->cfg.run_id), "adm");
  char err[300];
  trun_rdzv *n[2] = {&j->n0, &j->n1};
  for (int g = 0; g < 2; g++) {
    n[g]->cfg = &j->cfg;
    n[g]->info.group_rank = g;
    n[g]->info.group_world_size = 2;
    ck_assert_int_eq(trun_rdzv_token(&j->cfg, n[g]->token, sizeof(n[g]->token), err, sizeof(err)), 0);
  }
  trun_store_host_opts o = {
      .host = "127.0.0.1", .configure = trun__rdzv_guard_server, .configure_arg = &j->n0};
  ck_assert_int_eq(trun_store_host_start_opts(&o, &j->n0.host, &j->port), 0);
  for (int g = 0; g < 2; g++) {
    n[g]->client = client_at(j->port, n[g]->token);
    ck_assert_int_eq(trun_client_is_agent(n[g]->client), 1);
  }
}

static void adm_stop(adm_job *j) {
  trun_client_close(j->n0.client);
  trun_client_close(j->n1.client);
  trun_store_host_stop(j->n0.host);
}

static int admitted(adm_job *j, const char *addr) {
  struct sockaddr_in sa = {.sin_family = AF_INET};
  ck_assert_int_eq(inet_pton(AF_INET, addr, &sa.sin_addr), 1);
  return trun_server_peer_allowed(trun_store_host_server(j->n0.host), (struct sockaddr *)&sa);
}

/* SETs key = val on a fresh connection (an agent's with token): 1 when the store took it. */
static int try_set(adm_job *j, const char *token, const char *key, const char *val) {
  trun_client *c = client_at(j->port, token);
  int rc = trun_client_set(c, trun_str(key), trun_str(val));
  if (rc == 0) rc = trun_client_ping(c);
  trun_client_close(c);
  return rc == 0;
}

START_TEST(test_admit_facts) {
  adm_job j;
  adm_start(&j);
  char err[300];
  ck_assert_int_eq(trun__rdzv_publish_addr(&j.n0, 0), 0);
  ck_assert_int_eq(trun__rdzv_publish_addr(&j.n1, 0), 0);
  /* Data that is not a fact: a prefix, another address, a stranger's overwrite. None is taken. */
  ck_assert(!try_set(&j, NULL, "/trun/adm/r0/addr/1", "0.0.0.0/0"));
  ck_assert(!try_set(&j, j.n1.token, "/trun/adm/r0/addr/1", "0.0.0.0/0"));
  ck_assert(!try_set(&j, j.n1.token, "/trun/adm/r0/addr/1", "10.9.9.9"));
  ck_assert(!try_set(&j, j.n1.token, "/trun/adm/r0/addr/1", "127.0.0.1\n"));
  ck_assert(try_set(&j, j.n1.token, "/trun/adm/r0/addr/1", "127.0.0.1")); /* its own address */
  ck_assert_int_eq(trun__rdzv_admit_published(&j.n0, 0, err, sizeof(err)), 0);
  ck_assert(admitted(&j, "127.0.0.1"));
  ck_assert(!admitted(&j, "10.9.9.9"));
  ck_assert(!admitted(&j, "192.0.2.1"));
  /* The next round's list is rebuilt: a rule of an earlier round (10.9.9.9) is gone. */
  ck_assert_int_eq(trun_server_allow(trun_store_host_server(j.n0.host), "10.9.9.9"), 0);
  ck_assert(admitted(&j, "10.9.9.9"));
  ck_assert_int_eq(trun__rdzv_publish_addr(&j.n0, 1), 0);
  ck_assert_int_eq(trun__rdzv_publish_addr(&j.n1, 1), 0);
  ck_assert_int_eq(trun__rdzv_admit_published(&j.n0, 1, err, sizeof(err)), 0);
  ck_assert(!admitted(&j, "10.9.9.9"));
  ck_assert(admitted(&j, "127.0.0.1"));
  adm_stop(&j);
}
END_TEST

/* A list replaced at once; a bad rule leaves it as it was. */
START_TEST(test_allow_replace) {
  adm_job j;
  adm_start(&j);
  trun_server *s = trun_store_host_server(j.n0.host);
  const char *one[] = {"10.1.0.0/16", "127.0.0.1"}, *bad[] = {"10.2.0.1", "not-an-address"};
  ck_assert_int_eq(trun_server_allow_replace(s, one, 2), 0);
  trun_server_allow_enforce(s, 1);
  ck_assert(admitted(&j, "10.1.2.3"));
  ck_assert_int_eq(trun_server_allow_replace(s, bad, 2), -EINVAL);
  ck_assert(admitted(&j, "10.1.2.3"));
  ck_assert(!admitted(&j, "10.2.0.1"));
  const char *two[] = {"10.2.0.1", "127.0.0.1"};
  ck_assert_int_eq(trun_server_allow_replace(s, two, 2), 0);
  ck_assert(!admitted(&j, "10.1.2.3"));
  ck_assert(admitted(&j, "10.2.0.1"));
  adm_stop(&j);
}
END_TEST

static Suite *keyspace_suite(void) {
  Suite *s = suite_create("keyspace");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_stranger_cannot_write);
  tcase_add_test(tc, test_agent_writes);
  tcase_add_test(tc, test_wrong_token_refused);
  tcase_add_test(tc, test_unguarded_store);
  tcase_add_test(tc, test_owned_only_exact);
  tcase_add_test(tc, test_token_sources);
  tcase_add_test(tc, test_admit_facts);
  tcase_add_test(tc, test_allow_replace);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(keyspace_suite()); }
