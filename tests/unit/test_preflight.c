/* agent/nccl/preflight.c: the expected-bandwidth table, nccl-tests' busbw formula and the pass / warn / fail
 * verdict with its named causes, on our measured H200 numbers (327.5 GB/s in one pod, 2.9 GB/s as two pods)
 * and the spec's EFA references (§8). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preflight.h"

static trun_pf_layout layout(int world, int nodes, int local, int nvlink, int efa, const char *type) {
  trun_pf_layout l;
  memset(&l, 0, sizeof(l));
  l.world = world, l.nodes = nodes, l.local = local, l.nvlink = nvlink, l.efa = efa;
  snprintf(l.instance_type, sizeof(l.instance_type), "%s", type);
  return l;
}

START_TEST(busbw_formula) {
  /* nccl-tests: algbw = S/t, busbw = algbw * 2(n-1)/n. Our capture: 1 GiB in 3278.4 us on 2 ranks. */
  ck_assert(fabs(trun_pf_busbw(1073741824.0, 3278.4e-6, 2) - 327.5) < 0.05);
  ck_assert(fabs(trun_pf_busbw(1073741824.0, 372838.2e-6, 2) - 2.88) < 0.01);
  ck_assert(fabs(trun_pf_busbw(1e9, 1.0, 8) - 1.75) < 1e-9);
  ck_assert(trun_pf_busbw(1e9, 1.0, 1) == 0.0);
  ck_assert(trun_pf_busbw(1e9, 0.0, 2) == 0.0);
}
END_TEST

START_TEST(table) {
  trun_pf_expect e;
  trun_pf_layout l = layout(2, 1, 2, 1, 0, "");
  trun_pf_expect_for(&l, &e);
  ck_assert_str_eq(e.fabric, "nvlink");
  ck_assert(e.pass_gbps == 100.0 && e.warn_gbps == 40.0);
  l = layout(4, 1, 4, 0, 0, "g5.12xlarge");
  trun_pf_expect_for(&l, &e);
  ck_assert_str_eq(e.fabric, "pcie");
  ck_assert(e.pass_gbps == 8.0 && e.warn_gbps == 3.0);
  /* p4d: 400 Gbit/s = 50 GB/s; pass at 60 %, warn at 25 %. */
  l = layout(16, 2, 8, 1, 4, "p4d.24xlarge");
  trun_pf_expect_for(&l, &e);
  ck_assert_str_eq(e.fabric, "efa");
  ck_assert(fabs(e.pass_gbps - 30.0) < 1e-9 && fabs(e.warn_gbps - 12.5) < 1e-9);
  /* p5: 3200 Gbit/s = 400 GB/s; the spec's 2 x p5 measure ~440. */
  l = layout(16, 2, 8, 1, 32, "p5.48xlarge");
  trun_pf_expect_for(&l, &e);
  ck_assert(fabs(e.pass_gbps - 240.0) < 1e-9 && fabs(e.warn_gbps - 100.0) < 1e-9);
  /* Unknown type: 100 Gbit/s per EFA device. */
  l = layout(4, 2, 2, 0, 2, "x9.metal");
  trun_pf_expect_for(&l, &e);
  ck_assert(fabs(e.pass_gbps - 15.0) < 1e-9);
  ck_assert_ptr_nonnull(strstr(e.why, "assumed"));
  l = layout(2, 2, 1, 0, 0, "");
  trun_pf_expect_for(&l, &e);
  ck_assert_str_eq(e.fabric, "socket");
  ck_assert(e.pass_gbps == 1.0 && e.warn_gbps == 0.25);
  l = layout(1, 1, 1, 0, 0, "");
  trun_pf_expect_for(&l, &e);
  ck_assert_str_eq(e.fabric, "none");
}
END_TEST

static trun_pf_verdict judge1(const trun_pf_layout *l, double peak, char *msg, size_t len) {
  trun_pf_expect e;
  trun_pf_expect_for(l, &e);
  double bytes[3] = {1048576, 67108864, 1073741824}, bus[3] = {peak / 10, peak * 0.9, peak};
  return trun_pf_judge(&e, l, bytes, bus, 3, msg, len);
}

START_TEST(verdicts_on_h200_numbers) {
  char msg[1024];
  trun_pf_layout one_pod = layout(2, 1, 2, 1, 0, ""), two_pods = layout(2, 2, 1, 0, 0, "");
  ck_assert_int_eq(judge1(&one_pod, 327.5, msg, sizeof(msg)), TRUN_PF_PASS);
  ck_assert_msg(strstr(msg, "peak busbw 327.5 GB/s at 1073741824 B") != NULL, "%s", msg);
  ck_assert_int_eq(judge1(&one_pod, 2.9, msg, sizeof(msg)), TRUN_PF_FAIL);
  ck_assert_msg(strstr(msg, "likely cause: P2P off") != NULL, "%s", msg);
  ck_assert_int_eq(judge1(&one_pod, 60, msg, sizeof(msg)), TRUN_PF_WARN);
  /* Two pods on sockets: 2.9 GB/s is what sockets give; the doctor, not the preflight, flags the split. */
  ck_assert_int_eq(judge1(&two_pods, 2.9, msg, sizeof(msg)), TRUN_PF_PASS);
  ck_assert_int_eq(judge1(&two_pods, 0.1, msg, sizeof(msg)), TRUN_PF_FAIL);
}
END_TEST

START_TEST(verdict_boundaries_and_causes) {
  char msg[1024];
  trun_pf_layout p4d = layout(16, 2, 8, 1, 4, "p4d.24xlarge");
  ck_assert_int_eq(judge1(&p4d, 78, msg, sizeof(msg)), TRUN_PF_PASS); /* spec: 2 x p4de busbw ~78 */
  ck_assert_int_eq(judge1(&p4d, 30.0, msg, sizeof(msg)), TRUN_PF_PASS);
  ck_assert_int_eq(judge1(&p4d, 29.9, msg, sizeof(msg)), TRUN_PF_WARN);
  ck_assert_msg(strstr(msg, "fewer EFA devices in use") != NULL, "%s", msg);
  ck_assert_int_eq(judge1(&p4d, 12.5, msg, sizeof(msg)), TRUN_PF_WARN);
  ck_assert_int_eq(judge1(&p4d, 2.9, msg, sizeof(msg)), TRUN_PF_FAIL);
  ck_assert_msg(strstr(msg, "likely cause: EFA fallback") != NULL, "%s", msg);
  trun_pf_layout pcie = layout(4, 1, 4, 0, 0, "");
  ck_assert_int_eq(judge1(&pcie, 2, msg, sizeof(msg)), TRUN_PF_FAIL);
  ck_assert_msg(strstr(msg, "below what this fabric should reach") != NULL, "%s", msg);
  /* Nothing measured, or one rank: skip. */
  trun_pf_expect e;
  trun_pf_expect_for(&pcie, &e);
  ck_assert_int_eq(trun_pf_judge(&e, &pcie, NULL, NULL, 0, msg, sizeof(msg)), TRUN_PF_SKIP);
  trun_pf_layout single = layout(1, 1, 1, 0, 0, "");
  ck_assert_int_eq(judge1(&single, 100, msg, sizeof(msg)), TRUN_PF_SKIP);
  ck_assert_str_eq(trun_pf_verdict_name(TRUN_PF_WARN), "WARN");
}
END_TEST

/* The result's parts (for the agent's "preflight" event), and its file round trip. */
START_TEST(result_parts_and_file) {
  trun_pf_layout one_pod = layout(2, 1, 2, 1, 0, "");
  trun_pf_expect e;
  trun_pf_expect_for(&one_pod, &e);
  double bytes[2] = {1024, 1048576}, bus[2] = {0.5, 2.9};
  trun_pf_result res;
  char msg[1024];
  ck_assert_int_eq(trun_pf_judge_result(&e, bytes, bus, 2, &res, msg, sizeof(msg)), TRUN_PF_FAIL);
  ck_assert_int_eq(res.verdict, TRUN_PF_FAIL);
  ck_assert(res.peak_gbps == 2.9 && res.at_bytes == 1048576);
  ck_assert_str_eq(res.fabric, "nvlink");
  ck_assert_msg(strncmp(res.cause, "P2P off - busbw is at PCIe", 26) == 0, "%s", res.cause);
  ck_assert_msg(strstr(msg, "warn >= 40; likely cause: P2P off - busbw") != NULL, "%s", msg);
  char path[] = "/tmp/trun-pf-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(trun_pf_result_write(path, &res), 0);
  trun_pf_result back;
  ck_assert_int_eq(trun_pf_result_read(path, &back), 0);
  ck_assert_int_eq(back.verdict, TRUN_PF_FAIL);
  ck_assert(back.peak_gbps == 2.9 && back.at_bytes == 1048576);
  ck_assert_str_eq(back.fabric, "nvlink");
  ck_assert_str_eq(back.cause, res.cause);
  /* A pass has no cause; a malformed file is refused. */
  bus[1] = 327.5;
  ck_assert_int_eq(trun_pf_judge_result(&e, bytes, bus, 2, &res, msg, sizeof(msg)), TRUN_PF_PASS);
  ck_assert_str_eq(res.cause, "");
  FILE *f = fopen(path, "w");
  fputs("{\"verdict\": \"MAYBE\"}", f);
  fclose(f);
  ck_assert_int_eq(trun_pf_result_read(path, &back), -1);
  unlink(path);
  ck_assert_int_eq(trun_pf_result_read(path, &back), -1);
}
END_TEST

/* The local part's start: a trun-preflight that is not there is said (what, where, what to do), no child. */
START_TEST(local_start_without_binary) {
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.preflight_pass = cfg.preflight_warn = -1;
  char *env[] = {"PATH=/usr/bin", NULL}, err[512] = "";
  pid_t pid = 123;
  setenv("TRUN_PREFLIGHT_BIN", "/nonexistent/trun-preflight", 1);
  ck_assert_int_eq(trun_preflight_local_start(env, &cfg, 2, NULL, &pid, err, sizeof(err)), -1);
  unsetenv("TRUN_PREFLIGHT_BIN");
  ck_assert_int_eq(pid, 0);
  ck_assert_msg(strstr(err, "/nonexistent/trun-preflight is not an executable") != NULL, "%s", err);
  ck_assert_msg(strstr(err, "build it with make, or set TRUN_PREFLIGHT_BIN") != NULL, "%s", err);
}
END_TEST

int main(void) {
  Suite *s = suite_create("preflight");
  TCase *tc = tcase_create("all");
  tcase_add_test(tc, busbw_formula);
  tcase_add_test(tc, table);
  tcase_add_test(tc, verdicts_on_h200_numbers);
  tcase_add_test(tc, verdict_boundaries_and_causes);
  tcase_add_test(tc, result_parts_and_file);
  tcase_add_test(tc, local_start_without_binary);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
