/* Spares and the job's attempt (agent/rdzv/rdzv_attempt.c, issue 30) against an in-process store: the nodes
 * of a round get one attempt, the highest count among them, whoever joined when (a spare at 0, survivors
 * at 1); the round's value stays once set; a membership round keeps the attempt; a key holding something
 * else than a count is named, not trusted.
 */
#include "client.h"
#include "rdzv_int.h"
#include "unit.h"

static trun_client *connect_raw(int port) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = 10000;
  trun_client *c = NULL;
  ck_assert_int_eq(trun_client_connect(&o, &c), 0);
  return c;
}

/* One node: its own connection, the job's run id, the round's key space. */
static void node_init(trun_rdzv *r, trun_config *cfg, int port, int count) {
  memset(r, 0, sizeof(*r));
  r->cfg = cfg;
  r->client = connect_raw(port);
  r->attempt = count;
}

static void in_round(trun_rdzv *r, int round) {
  snprintf(r->key_space, sizeof(r->key_space), "/trun/%s/r%d", r->cfg->run_id, round);
}

START_TEST(test_attempt_spare_takes_survivors) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  snprintf(cfg.run_id, sizeof(cfg.run_id), "job");
  trun_rdzv n[4];
  /* round 1: nodes 0-2 at attempt 0, all get 0; the spare (3) proposes 0 too and waits */
  for (int i = 0; i < 4; i++) node_init(&n[i], &cfg, us.port, 0);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(trun__rdzv_attempt_propose(&n[i]), 0);
  for (int i = 0; i < 3; i++) {
    in_round(&n[i], 1);
    ck_assert_int_eq(trun__rdzv_attempt_settle(&n[i]), 0);
    ck_assert_int_eq(n[i].attempt, 0);
  }
  /* node 2 is lost: the survivors count a restart (1) and join round 2 with the spare, which still counts 0;
   * the spare settles first */
  n[0].attempt = n[1].attempt = 1;
  ck_assert_int_eq(trun__rdzv_attempt_propose(&n[0]), 0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&n[1]), 0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&n[3]), 0);
  int order[] = {3, 0, 1};
  for (int i = 0; i < 3; i++) {
    in_round(&n[order[i]], 2);
    ck_assert_int_eq(trun__rdzv_attempt_settle(&n[order[i]]), 0);
    ck_assert_int_eq(n[order[i]].attempt, 1);
  }
  /* a membership round (a node joins, no restart used): the attempt stays 1, also for the newcomer at 0 */
  trun_rdzv late;
  node_init(&late, &cfg, us.port, 0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&late), 0);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(trun__rdzv_attempt_propose(&n[i]), 0);
  in_round(&late, 3);
  ck_assert_int_eq(trun__rdzv_attempt_settle(&late), 0);
  ck_assert_int_eq(late.attempt, 1);
  /* the round's value, once set, is what every node of it takes, even after the job's attempt moved on */
  n[0].attempt = 5;
  ck_assert_int_eq(trun__rdzv_attempt_propose(&n[0]), 0);
  in_round(&n[1], 3);
  ck_assert_int_eq(trun__rdzv_attempt_settle(&n[1]), 0);
  ck_assert_int_eq(n[1].attempt, 1);
  /* a lower proposal never lowers the job's attempt */
  trun_buf b = {0};
  ck_assert_int_eq(trun_client_get(n[3].client, trun_str("/trun/job/attempt"), &b, 1000), 0);
  ck_assert_int_eq((int)b.len, 1);
  ck_assert_int_eq(b.data[0], '5');
  trun_buf_free(&b);
  for (int i = 0; i < 4; i++) trun_client_close(n[i].client);
  trun_client_close(late.client);
  unit_server_stop(&us);
}
END_TEST

/* a key that holds something else than a count: -EPROTO, the node keeps its own count */
START_TEST(test_attempt_garbage) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  snprintf(cfg.run_id, sizeof(cfg.run_id), "bad");
  trun_rdzv r;
  node_init(&r, &cfg, us.port, 2);
  ck_assert_int_eq(trun_client_set(r.client, trun_str("/trun/bad/attempt"), trun_str("x\xff")), 0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&r), -EPROTO);
  in_round(&r, 1);
  ck_assert_int_eq(trun__rdzv_attempt_settle(&r), -EPROTO);
  ck_assert_int_eq(r.attempt, 2);
  ck_assert_int_eq(trun_client_set(r.client, trun_str("/trun/bad/attempt"), trun_str("99999999999999999999")),
                   0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&r), -EPROTO);
  ck_assert_int_eq(r.attempt, 2);
  trun_client_close(r.client);
  unit_server_stop(&us);
}
END_TEST

static Suite *spare_suite(void) {
  Suite *s = suite_create("rdzv_spare");
  TCase *tc = tcase_create("attempt");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_attempt_spare_takes_survivors);
  tcase_add_test(tc, test_attempt_garbage);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(spare_suite()); }
