/* trun_rdzv_preview (agent/rdzv/rdzv_preview.c): what --dry-run shows of the rendezvous for each backend,
 * worked out without a store: the backend's name (it once said c10d for --rdzv-backend trun), who serves
 * the store, the ranks known in advance (static only) and the workers' master. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "agent/rdzv/rdzv.h"
#include "unit.h"

/* A typed configuration as config/ makes it for --rdzv-endpoint host:port and --nnodes min:max. */
static void job(trun_config *cfg, trun_rdzv_backend be, const char *host, int port, int min, int max) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->backend = be;
  snprintf(cfg->endpoint_host, sizeof(cfg->endpoint_host), "%s", host);
  cfg->endpoint_port = port;
  cfg->min_nodes = min;
  cfg->max_nodes = max;
  snprintf(cfg->run_id, sizeof(cfg->run_id), "job");
  cfg->local_addr = "10.9.8.7";
}

START_TEST(test_static_nodes) {
  trun_config cfg;
  trun_rdzv_preview_info p;
  char err[256];
  job(&cfg, TRUN_RDZV_STATIC, "10.0.0.1", 29500, 3, 3);
  cfg.node_rank = 2;
  ck_assert_int_eq(trun_rdzv_preview(&cfg, 4, &p, err, sizeof(err)), 0);
  ck_assert_str_eq(p.backend, "static");
  ck_assert_int_eq(p.elastic, 0);
  ck_assert_int_eq(p.ranks_known, 1);
  ck_assert_int_eq(p.group_rank, 2);
  ck_assert_int_eq(p.group_world_size, 3);
  ck_assert_int_eq(p.base_rank, 8);
  ck_assert_int_eq(p.world_size, 12);
  ck_assert_int_eq(p.hosts_store, 0);
  ck_assert_int_eq(p.master_known, 1);
  ck_assert_str_eq(p.master_addr, "10.0.0.1");
  ck_assert_int_eq(p.master_port, 29500);
  ck_assert_str_eq(p.host_addr, "10.9.8.7");
  cfg.node_rank = 0;
  ck_assert_int_eq(trun_rdzv_preview(&cfg, 4, &p, err, sizeof(err)), 0);
  ck_assert_int_eq(p.hosts_store, 1);
  ck_assert_int_eq(p.base_rank, 0);
}
END_TEST

START_TEST(test_standalone) {
  trun_config cfg;
  trun_rdzv_preview_info p;
  char err[256];
  /* config/ makes --standalone a c10d job on localhost:0; the rendezvous runs it as static. */
  job(&cfg, TRUN_RDZV_C10D, "localhost", 0, 1, 1);
  cfg.standalone = 1;
  cfg.local_addr = "localhost";
  ck_assert_int_eq(trun_rdzv_preview(&cfg, 2, &p, err, sizeof(err)), 0);
  ck_assert_str_eq(p.backend, "static");
  ck_assert_int_eq(p.hosts_store, 1);
  ck_assert_int_eq(p.ranks_known, 1);
  ck_assert_int_eq(p.world_size, 2);
  ck_assert_int_eq(p.master_port, 0); /* a free port */
  ck_assert_str_eq(p.master_addr, "localhost");
}
END_TEST

START_TEST(test_elastic) {
  trun_config cfg;
  trun_rdzv_preview_info p;
  char err[256];
  job(&cfg, TRUN_RDZV_TRUN, "store.invalid", 29400, 1, 4);
  cfg.node_rank = 3;
  ck_assert_int_eq(trun_rdzv_preview(&cfg, 8, &p, err, sizeof(err)), 0);
  ck_assert_str_eq(p.backend, "trun");
  ck_assert_int_eq(p.elastic, 1);
  ck_assert_int_eq(p.ranks_known, 0);
  ck_assert_int_eq(p.group_rank, -1);
  ck_assert_int_eq(p.min_nodes, 1);
  ck_assert_int_eq(p.max_nodes, 4);
  ck_assert_int_eq(p.hosts_store, 0);
  ck_assert_msg(strstr(p.store_how, "store.invalid"), "%s", p.store_how);
  ck_assert_int_eq(p.master_known, 1); /* the workers use the agents' store */
  ck_assert_str_eq(p.master_addr, "store.invalid");
  ck_assert_int_eq(p.master_port, 29400);

  job(&cfg, TRUN_RDZV_C10D, "store.invalid", 29400, 2, 2);
  cfg.rdzv_conf = "is_host=true";
  ck_assert_int_eq(trun_rdzv_preview(&cfg, 8, &p, err, sizeof(err)), 0);
  ck_assert_str_eq(p.backend, "c10d");
  ck_assert_int_eq(p.hosts_store, 1);
  ck_assert_msg(strstr(p.store_how, "is_host=true"), "%s", p.store_how);
  ck_assert_int_eq(p.ranks_known, 0);
  ck_assert_int_eq(p.master_known, 0); /* node rank 0's, at the rendezvous */
  ck_assert_int_eq(p.master_port, -1);

  job(&cfg, TRUN_RDZV_C10D, "127.0.0.1", 29400, 2, 2);
  ck_assert_int_eq(trun_rdzv_preview(&cfg, 1, &p, err, sizeof(err)), 0);
  ck_assert_int_eq(p.hosts_store, 1); /* the endpoint names this host */
}
END_TEST

START_TEST(test_bad_input) {
  trun_config cfg;
  trun_rdzv_preview_info p;
  char err[256] = "";
  job(&cfg, TRUN_RDZV_C10D, "127.0.0.1", 29400, 2, 2);
  cfg.rdzv_conf = "trun_token=tiny"; /* init would refuse it: so does the preview */
  ck_assert_int_eq(trun_rdzv_preview(&cfg, 1, &p, err, sizeof(err)), -1);
  ck_assert_msg(strstr(err, "trun_token"), "%s", err);
}
END_TEST

static Suite *preview_suite(void) {
  Suite *s = suite_create("rdzv_preview");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_static_nodes);
  tcase_add_test(tc, test_standalone);
  tcase_add_test(tc, test_elastic);
  tcase_add_test(tc, test_bad_input);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(preview_suite()); }
