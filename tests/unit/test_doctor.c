/* agent/nccl/doctor.c: the split-pod doctor. The analysis over the JSON fixtures in tests/fixtures/doctor/
 * (each: "agents" as agents publish them, "expect": the finding kinds in order, the error count, texts the
 * report must contain); identity JSON round trip; the boot id hooks; the report block; and the exchange
 * through a real store (one agent of two publishes: group rank 0 reports the other as not published, bounded
 * wait;
 * --on-split-pods=fail makes the verdict "fail" for everyone). Paths: TRUN_REPO (default: .). */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "doctor.h"
#include "rdzv_int.h"
#include "unit.h"

static const char *repo(void) {
  const char *r = getenv("TRUN_REPO");
  return r && *r ? r : ".";
}

static int load_agents(json_t *fx, trun_host_id **out) {
  json_t *a = json_object_get(fx, "agents");
  int n = (int)json_array_size(a);
  *out = calloc((size_t)n + 1, sizeof(trun_host_id));
  for (int i = 0; i < n; i++)
    ck_assert_int_eq(trun_doctor_identity_from_json(json_array_get(a, i), &(*out)[i]), 0);
  return n;
}

static void check_fixture(const char *file) {
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/tests/fixtures/doctor/%s", repo(), file);
  json_error_t e;
  json_t *fx = json_load_file(p, 0, &e);
  ck_assert_msg(fx != NULL, "%s: %s", p, e.text);
  trun_host_id *ids;
  int n = load_agents(fx, &ids);
  trun_doctor_findings *f = malloc(sizeof(*f));
  trun_doctor_analyze(ids, n, f);
  json_t *exp = json_object_get(fx, "expect");
  json_t *kinds = json_object_get(exp, "kinds");
  ck_assert_msg((size_t)f->n == json_array_size(kinds), "%s: %d findings, expected %zu (first: %s)", file,
                f->n, json_array_size(kinds), f->n ? f->f[0].text : "-");
  for (int i = 0; i < f->n; i++)
    ck_assert_str_eq(f->f[i].kind, json_string_value(json_array_get(kinds, (size_t)i)));
  ck_assert_int_eq(f->errors, (int)json_integer_value(json_object_get(exp, "errors")));
  size_t k;
  json_t *c;
  json_array_foreach(json_object_get(exp, "contains"), k, c) {
    int found = 0;
    for (int i = 0; i < f->n && !found; i++) found = strstr(f->f[i].text, json_string_value(c)) != NULL;
    ck_assert_msg(found, "%s: no finding contains '%s'", file, json_string_value(c));
  }
  free(f);
  free(ids);
  json_decref(fx);
}

START_TEST(fixtures) {
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/tests/fixtures/doctor", repo());
  DIR *d = opendir(p);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strstr(de->d_name, ".json")) check_fixture(de->d_name), n++;
  closedir(d);
  ck_assert_int_ge(n, 7);
}
END_TEST

START_TEST(split_names_ranks_and_gpus) {
  /* The same as the split-h200x2 fixture, built in code: the finding's text, word for word. */
  trun_host_id ids[2];
  memset(ids, 0, sizeof(ids));
  for (int i = 0; i < 2; i++) {
    ids[i].group_rank = i;
    ids[i].nproc = 1;
    snprintf(ids[i].hostname, sizeof(ids[i].hostname), "pod-%d", i);
    snprintf(ids[i].boot_id, sizeof(ids[i].boot_id), "b00t");
    ids[i].ngpu = 1;
    snprintf(ids[i].gpus[0], sizeof(ids[i].gpus[0]), "GPU-%d", i);
  }
  trun_doctor_findings f;
  trun_doctor_analyze(ids, 2, &f);
  ck_assert_int_eq(f.n, 1);
  ck_assert_int_eq(f.split, 1);
  ck_assert_int_eq(f.max_per_host, 2);
  ck_assert_int_eq(f.gpu_clash + f.efa, 0);
  ck_assert_msg(
      strncmp(f.f[0].text,
              "2 agents run on one physical host (same boot id b00t): group rank 0 (host pod-0, 1 GPU, "
              "1 worker); group rank 1 (host pod-1, 1 GPU, 1 worker).\n    Together they have 2 GPU(s)",
              160) == 0,
      "%s", f.f[0].text);
  /* Another boot id for rank 1: nothing. */
  snprintf(ids[1].boot_id, sizeof(ids[1].boot_id), "other");
  trun_doctor_analyze(ids, 2, &f);
  ck_assert_int_eq(f.n, 0);
  ck_assert_int_eq(f.max_per_host, 1);
  /* Both see GPU-0: one clash, counted. */
  snprintf(ids[1].gpus[0], sizeof(ids[1].gpus[0]), "GPU-0");
  trun_doctor_analyze(ids, 2, &f);
  ck_assert_int_eq(f.n, 1);
  ck_assert_int_eq(f.gpu_clash, 1);
  ck_assert_int_eq(f.errors, 1);
}
END_TEST

START_TEST(identity_round_trip_and_boot_id) {
  char dir[] = "/tmp/trun-doctor-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/sys/kernel/random", dir);
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "%s/sys", dir);
  mkdir(cmd, 0755);
  snprintf(cmd, sizeof(cmd), "%s/sys/kernel", dir);
  mkdir(cmd, 0755);
  mkdir(p, 0755);
  snprintf(p, sizeof(p), "%s/sys/kernel/random/boot_id", dir);
  FILE *fp = fopen(p, "w");
  fputs("12345678-aaaa-bbbb-cccc-1234567890ab\n", fp);
  fclose(fp);
  setenv("TRUN_PROC_ROOT", dir, 1);
  unsetenv("TRUN_BOOT_ID");
  trun_node *node = calloc(1, sizeof(*node));
  node->ngpu = 2;
  snprintf(node->gpus[0].uuid, sizeof(node->gpus[0].uuid), "GPU-a");
  snprintf(node->gpus[1].uuid, sizeof(node->gpus[1].uuid), "GPU-b");
  node->nrdma = 2;
  snprintf(node->rdma[0].name, sizeof(node->rdma[0].name), "rdmap16s27");
  node->rdma[0].is_efa = node->rdma[0].usable = 1;
  snprintf(node->rdma[1].name, sizeof(node->rdma[1].name), "rdmap32s27"); /* not in this container */
  node->rdma[1].is_efa = 1;
  snprintf(node->instance.instance_id, sizeof(node->instance.instance_id), "i-0abc");
  snprintf(node->instance.instance_type, sizeof(node->instance.instance_type), "p4d.24xlarge");
  trun_host_id id, back;
  trun_doctor_identity(node, 3, 2, &id);
  ck_assert_str_eq(id.boot_id, "12345678-aaaa-bbbb-cccc-1234567890ab");
  ck_assert_int_eq(id.nefa, 1);
  ck_assert_str_eq(id.efa[0], "rdmap16s27");
  json_t *j = trun_doctor_identity_json(&id);
  ck_assert_int_eq(trun_doctor_identity_from_json(j, &back), 0);
  json_decref(j);
  ck_assert_int_eq(back.group_rank, 3);
  ck_assert_int_eq(back.nproc, 2);
  ck_assert_int_eq(back.ngpu, 2);
  ck_assert_str_eq(back.gpus[1], "GPU-b");
  ck_assert_str_eq(back.instance_id, "i-0abc");
  ck_assert_str_eq(back.instance_type, "p4d.24xlarge");
  ck_assert_str_eq(back.boot_id, id.boot_id);
  setenv("TRUN_BOOT_ID", "fake-boot", 1);
  trun_doctor_identity(node, 0, 1, &id);
  ck_assert_str_eq(id.boot_id, "fake-boot");
  unsetenv("TRUN_BOOT_ID");
  unsetenv("TRUN_PROC_ROOT");
  json_t *bad = json_string("x");
  ck_assert_int_eq(trun_doctor_identity_from_json(bad, &back), -1);
  json_decref(bad);
  remove(p); /* the file, then its directories up to the temporary one: nothing left in /tmp */
  static const char *const subdirs[] = {"/sys/kernel/random", "/sys/kernel", "/sys"};
  for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]); i++) {
    snprintf(p, sizeof(p), "%s%s", dir, subdirs[i]);
    ck_assert_int_eq(rmdir(p), 0);
  }
  ck_assert_int_eq(rmdir(dir), 0);
  free(node);
}
END_TEST

START_TEST(print_block) {
  trun_doctor_findings f;
  memset(&f, 0, sizeof(f));
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  trun_doctor_print(out, &f, 3, 2);
  fclose(out);
  ck_assert_ptr_nonnull(strstr(buf, "==== trun doctor: 3 agent(s) checked ===="));
  ck_assert_ptr_nonnull(strstr(buf, "2 agent(s) did not publish (torchrun agents)"));
  ck_assert_ptr_nonnull(strstr(buf, "==== end of trun doctor ===="));
  free(buf);
}
END_TEST

/* Exchange through a real store: group rank 0 of 2; rank 1 never publishes (a torchrun agent). */
START_TEST(exchange_missing_agent_and_fail_verdict) {
  unit_server us;
  int port = unit_server_start(&us, NULL);
  ck_assert_int_gt(port, 0);
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = port;
  o.key_prefix = "";
  trun_rdzv r;
  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(trun_client_connect(&o, &r.client), 0);
  r.info.group_rank = 0;
  r.info.group_world_size = 2;
  trun_host_id self;
  memset(&self, 0, sizeof(self));
  snprintf(self.boot_id, sizeof(self.boot_id), "b");
  self.ngpu = 1;
  snprintf(self.gpus[0], sizeof(self.gpus[0]), "GPU-0");
  /* Rank 1's identity: same boot id (a split), published before rank 0 looks, under another key base. */
  trun_doctor_outcome out;
  snprintf(r.key_space, sizeof(r.key_space), "/t/r0");                /* the round's key space */
  ck_assert_int_eq(trun_doctor_exchange(&r, &self, 200, 1, &out), 0); /* rank 1 missing */
  ck_assert_int_eq(out.analyzed, 1);
  ck_assert_int_eq(out.agents, 1);
  ck_assert_int_eq(out.missing, 1);
  ck_assert_int_eq(out.split + out.gpu_clash + out.efa, 0);
  ck_assert_int_eq(out.max_per_host, 1);
  ck_assert_str_eq(out.action, "none");
  trun_buf v = {0};
  ck_assert_int_eq(trun_client_get(r.client, trun_str("/t/r0/doctor/verdict"), &v, 1000), 0);
  ck_assert_int_eq((int)v.len, 2);
  ck_assert_int_eq(memcmp(v.data, "ok", 2), 0);
  trun_host_id other = self;
  other.group_rank = 1;
  snprintf(other.gpus[0], sizeof(other.gpus[0]), "GPU-1");
  json_t *j = trun_doctor_identity_json(&other);
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  ck_assert_int_eq(trun_client_set(r.client, trun_str("/t/r1/doctor/1"), trun_str(s)), 0);
  free(s);
  snprintf(r.key_space, sizeof(r.key_space), "/t/r1");                 /* the round's key space */
  ck_assert_int_eq(trun_doctor_exchange(&r, &self, 5000, 1, &out), 1); /* split + fail: stop */
  ck_assert_int_eq(out.analyzed, 1);
  ck_assert_int_eq(out.agents, 2);
  ck_assert_int_eq(out.missing, 0);
  ck_assert_int_eq(out.split, 1);
  ck_assert_int_eq(out.max_per_host, 2);
  ck_assert_int_eq(out.gpu_clash, 0);
  ck_assert_int_eq(out.fail_on_findings, 1);
  ck_assert_str_eq(out.action, "stop");
  ck_assert_int_eq(trun_client_get(r.client, trun_str("/t/r1/doctor/verdict"), &v, 1000), 0);
  ck_assert_int_eq(memcmp(v.data, "fail", 4), 0);
  /* Rank 1 with fail_on_findings reads that verdict and stops too. */
  r.info.group_rank = 1;
  snprintf(r.key_space, sizeof(r.key_space), "/t/r1"); /* the round's key space */
  ck_assert_int_eq(trun_doctor_exchange(&r, &other, 1000, 1, &out), 1);
  ck_assert_int_eq(out.analyzed, 0);
  ck_assert_str_eq(out.action, "stop");
  /* The same layout with warn: rank 0 goes on. */
  r.info.group_rank = 0;
  snprintf(r.key_space, sizeof(r.key_space), "/t/r1"); /* the round's key space */
  ck_assert_int_eq(trun_doctor_exchange(&r, &self, 5000, 0, &out), 0);
  ck_assert_str_eq(out.action, "continue");
  ck_assert_int_eq(out.split, 1);
  ck_assert_int_eq(out.fail_on_findings, 0);
  trun_buf_free(&v);
  trun_client_close(r.client);
  unit_server_stop(&us);
}
END_TEST

int main(void) {
  Suite *s = suite_create("doctor");
  TCase *tc = tcase_create("all");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, fixtures);
  tcase_add_test(tc, split_names_ranks_and_gpus);
  tcase_add_test(tc, identity_round_trip_and_boot_id);
  tcase_add_test(tc, print_block);
  tcase_add_test(tc, exchange_missing_agent_and_fail_verdict);
  suite_add_tcase(s, tc);
  return unit_run(s);
}
