/* The job's record (agent/rdzv/rdzv_job.c), over loopback with the store's own client: what an agent
 * publishes reads back the same for a connection without the job's token on a guarded store, the first
 * agent's stands, and every record no trun agent writes (a forged shape, another run id, oversized, words
 * with control bytes) is refused with a reason or read escaped. */
#include <errno.h>
#include <stdlib.h>

#include "rdzv.h"
#include "rdzv_int.h"
#include "unit.h"

#define TOKEN "0123456789abcdef-unit-job"

static unit_server us;
static int port;

static void guard(trun_server *s, void *arg) {
  (void)arg;
  ck_assert_int_eq(trun_server_agent_token(s, TOKEN), 0);
  ck_assert_int_eq(trun_server_protect(s, "/trun/j1", NULL), 0);
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

/* An agent of job j1 as trun_rdzv_init leaves it: cfg, backend, connection, address. */
static void agent(trun_rdzv *r, trun_config *cfg, trun_rdzv_backend be, int min, int max, trun_client *c) {
  memset(r, 0, sizeof(*r));
  memset(cfg, 0, sizeof(*cfg));
  snprintf(cfg->run_id, sizeof(cfg->run_id), "j1");
  snprintf(cfg->endpoint_host, sizeof(cfg->endpoint_host), "127.0.0.1");
  cfg->endpoint_port = port;
  cfg->backend = be;
  cfg->min_nodes = min;
  cfg->max_nodes = max;
  cfg->nproc_spec = "gpu";
  cfg->rdzv_conf = "torch_version=1.13,trun_token=" TOKEN;
  r->cfg = cfg;
  r->be = be == TRUN_RDZV_C10D   ? &trun__rdzv_c10d
          : be == TRUN_RDZV_TRUN ? &trun__rdzv_trun
                                 : &trun__rdzv_static;
  r->client = c;
  snprintf(r->host_addr, sizeof(r->host_addr), "node-a");
}

START_TEST(test_publish_read) {
  port = unit_server_start(&us, NULL);
  ck_assert_int_gt(port, 0);
  unit_server_call(&us, guard, NULL);
  trun_client *a = client(TOKEN), *b = client(TOKEN), *stranger = client(NULL);
  trun__rdzv_job job;
  char why[160];
  ck_assert_int_eq(trun__rdzv_job_read(stranger, "j1", &job, why, sizeof(why)), 0); /* none yet */

  trun_rdzv r;
  trun_config cfg;
  agent(&r, &cfg, TRUN_RDZV_C10D, 2, 4, a);
  trun__rdzv_job_publish(&r);
  /* Read without the token, as --rdzv-status does. */
  ck_assert_int_eq(trun__rdzv_job_read(stranger, "j1", &job, why, sizeof(why)), 1);
  ck_assert_int_eq(job.backend, TRUN_RDZV_C10D);
  ck_assert_int_eq(job.min_nodes, 2);
  ck_assert_int_eq(job.max_nodes, 4);
  ck_assert_str_eq(job.nproc, "gpu");
  ck_assert_str_eq(job.torch_version, "1.13");
  ck_assert_str_eq(job.host, "node-a");
  ck_assert_int_eq(job.pid, getpid());
  /* Nothing else of --rdzv-conf goes into it: not the token. */
  trun_buf v = {0};
  ck_assert_int_eq(trun_client_get(stranger, trun_str("/trun/j1/job"), &v, 5000), 0);
  ck_assert(memmem(v.data, v.len, TOKEN, strlen(TOKEN)) == NULL);
  ck_assert(memmem(v.data, v.len, "trun_token", 10) == NULL);
  trun_buf_free(&v);

  /* A second agent with another size: the first record stands (it only says so on stderr). */
  trun_rdzv r2;
  trun_config cfg2;
  agent(&r2, &cfg2, TRUN_RDZV_C10D, 3, 3, b);
  trun__rdzv_job_publish(&r2);
  ck_assert_int_eq(trun__rdzv_job_read(stranger, "j1", &job, why, sizeof(why)), 1);
  ck_assert_int_eq(job.min_nodes, 2);
  ck_assert_int_eq(job.max_nodes, 4);

  /* A stranger cannot replace it on a guarded store (its connection is closed). */
  int rc = trun_client_set(stranger, trun_str("/trun/j1/job"), trun_str("{}"));
  if (rc == 0) rc = trun_client_ping(stranger); /* SET has no reply: the close shows at the next request */
  ck_assert_int_lt(rc, 0);
  trun_client_close(stranger);
  stranger = client(NULL);
  ck_assert_int_eq(trun__rdzv_job_read(stranger, "j1", &job, why, sizeof(why)), 1);
  ck_assert_int_eq(job.max_nodes, 4);
  trun_client_close(a);
  trun_client_close(b);
  trun_client_close(stranger);
  unit_server_stop(&us);
}
END_TEST

/* Writes value as job j2's record and reads it: read's result, why. */
static int read_forged(trun_client *c, const char *value, trun__rdzv_job *job, char *why, size_t len) {
  ck_assert_int_eq(trun_client_set(c, trun_str("/trun/j2/job"), trun_str(value)), 0);
  why[0] = '\0';
  return trun__rdzv_job_read(c, "j2", job, why, len);
}

START_TEST(test_forged_records) {
  port = unit_server_start(&us, NULL);
  ck_assert_int_gt(port, 0);
  trun_client *c = client(NULL);
  trun__rdzv_job job;
  char why[160];
  static const struct {
    const char *value, *why;
  } bad[] = {
      {"not json", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {"{\"backend\": \"etcd\", \"min_nodes\": 1, \"max_nodes\": 1, \"run_id\": \"j2\"}", "backend"},
      {"{\"backend\": \"static\", \"min_nodes\": 0, \"max_nodes\": 1, \"run_id\": \"j2\"}", "min_nodes"},
      {"{\"backend\": \"static\", \"min_nodes\": 3, \"max_nodes\": 2, \"run_id\": \"j2\"}", "min_nodes"},
      {"{\"backend\": \"c10d\", \"min_nodes\": 1, \"max_nodes\": 1000001, \"run_id\": \"j2\"}", "min_nodes"},
      {"{\"backend\": \"c10d\", \"min_nodes\": \"2\", \"max_nodes\": 2, \"run_id\": \"j2\"}", "min_nodes"},
      {"{\"backend\": \"trun\", \"min_nodes\": 1, \"max_nodes\": 2, \"run_id\": \"other\"}", "run id"},
      {"{\"backend\": \"trun\", \"min_nodes\": 1, \"max_nodes\": 2}", "run id"},
      {"{\"backend\": \"trun\", \"min_nodes\": 1, \"max_nodes\": 2, \"run_id\": \"j2\", \"nproc_per_node\": "
       "\"8 --x\"}",
       "nproc_per_node"},
      {"{\"backend\": \"trun\", \"min_nodes\": 1, \"max_nodes\": 2, \"run_id\": \"j2\", \"torch_version\": "
       "\"1.13\\u001b[31m\"}",
       "torch_version"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ck_assert_int_eq(read_forged(c, bad[i].value, &job, why, sizeof(why)), -EPROTO);
    ck_assert_msg(strstr(why, bad[i].why) != NULL, "%s: why '%s' lacks '%s'", bad[i].value, why, bad[i].why);
  }
  /* Oversized. */
  char *big = malloc(8192);
  ck_assert_ptr_nonnull(big);
  memset(big, ' ', 8191);
  big[8191] = '\0';
  big[0] = '{', big[8190] = '}';
  ck_assert_int_eq(read_forged(c, big, &job, why, sizeof(why)), -EPROTO);
  ck_assert(strstr(why, "bytes") != NULL);
  free(big);
  /* A good shape whose words hold control bytes: read, the words escaped. */
  ck_assert_int_eq(
      read_forged(c,
                  "{\"backend\": \"static\", \"min_nodes\": 2, \"max_nodes\": 2, \"run_id\": \"j2\", "
                  "\"host\": \"n1\\u001b[2J\\n\", \"pid\": 7}",
                  &job, why, sizeof(why)),
      1);
  ck_assert_int_eq(job.backend, TRUN_RDZV_STATIC);
  ck_assert_str_eq(job.host, "n1\\x1b[2J\\n");
  ck_assert_str_eq(job.nproc, "");
  ck_assert_int_eq(job.pid, 7);
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

static Suite *job_suite(void) {
  Suite *s = suite_create("rdzv_job");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_publish_read);
  tcase_add_test(tc, test_forged_records);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(job_suite()); }
