/* agent/nccl/nccl_log.c: the NCCL INFO log reader behind `trun --nccl-report` and `trun-topo --nccl-log`.
 * Fixtures (tests/fixtures/nccl/): our two H200 x2 captures (one pod: P2P/CUMEM; two pods: NET/Socket between
 * GPUs of one host) and the seed's p4d log (4 pods x 1 GPU, NET/Libfabric/GDRDMA): the exact JSON of each
 * (*.expected.json) and, independently, the numbers a reader counts by hand. Then single lines: every
 * transport form of the spec (§4), wrapper prefixes, the EFA-unused and GDR-off verdicts, grouping by commId.
 * Paths: TRUN_REPO (default: the current directory). */
#include <check.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_log.h"

static const char *repo(void) {
  const char *r = getenv("TRUN_REPO");
  return r && *r ? r : ".";
}

static json_t *parse_fixture(const char *name, json_t **expected) {
  char p[PATH_MAX];
  trun_nccl_log *l = trun_nccl_log_new();
  ck_assert_ptr_nonnull(l);
  snprintf(p, sizeof(p), "%s/tests/fixtures/nccl/%s.log", repo(), name);
  ck_assert_int_eq(trun_nccl_log_feed_file(l, p), 0);
  json_t *j = trun_nccl_log_json(l);
  trun_nccl_log_free(l);
  snprintf(p, sizeof(p), "%s/tests/fixtures/nccl/%s.expected.json", repo(), name);
  json_error_t e;
  *expected = json_load_file(p, 0, &e);
  ck_assert_msg(*expected != NULL, "%s: %s", p, e.text);
  return j;
}

static json_t *comm(json_t *j, size_t i) { return json_array_get(json_object_get(j, "communicators"), i); }
static long long ival(json_t *c, const char *k) { return json_integer_value(json_object_get(c, k)); }
static long long transport(json_t *c, const char *name) {
  return json_integer_value(json_object_get(json_object_get(c, "transports"), name));
}
static const char *verdict(json_t *c, size_t i) {
  return json_string_value(json_array_get(json_object_get(c, "verdicts"), i));
}

/* pairs[i] of communicator c as "src->dst transport channels". */
static void assert_pair(json_t *c, size_t i, const char *want) {
  json_t *p = json_array_get(json_object_get(c, "pairs"), i);
  ck_assert_msg(p != NULL, "no pair %zu (want %s)", i, want);
  char got[128];
  snprintf(got, sizeof(got), "%lld->%lld %s %lld", ival(p, "src"), ival(p, "dst"),
           json_string_value(json_object_get(p, "transport")), ival(p, "channels"));
  ck_assert_str_eq(got, want);
}
static size_t npairs(json_t *c) { return json_array_size(json_object_get(c, "pairs")); }

START_TEST(one_pod_capture) {
  json_t *exp, *j = parse_fixture("nccl-2.28-h200x2-one-pod", &exp);
  ck_assert_msg(json_equal(j, exp), "one-pod report differs from its expected.json");
  ck_assert_int_eq(json_array_size(json_object_get(j, "communicators")), 1);
  json_t *c = comm(j, 0);
  ck_assert_int_eq(ival(c, "nranks"), 2);
  ck_assert_int_eq(ival(c, "nnodes"), 1);
  ck_assert_int_eq(ival(c, "local_ranks"), 2);
  ck_assert_int_eq(ival(c, "ranks_seen"), 2);
  /* 24 channels, 0->1 and 1->0 on each. */
  ck_assert_int_eq(transport(c, "P2P/CUMEM"), 48);
  ck_assert_int_eq(json_object_size(json_object_get(c, "transports")), 1);
  ck_assert_str_eq(verdict(c, 0), "healthy (P2P/CUMEM)");
  ck_assert_int_eq(npairs(c), 2);
  assert_pair(c, 0, "0->1 P2P/CUMEM 24");
  assert_pair(c, 1, "1->0 P2P/CUMEM 24");
  json_decref(j);
  json_decref(exp);
}
END_TEST

START_TEST(two_pods_capture) {
  json_t *exp, *j = parse_fixture("nccl-2.28-h200x2-two-pods", &exp);
  ck_assert_msg(json_equal(j, exp), "two-pods report differs from its expected.json");
  json_t *c = comm(j, 0);
  ck_assert_int_eq(json_array_size(json_object_get(j, "communicators")), 1);
  ck_assert_int_eq(ival(c, "nranks"), 2);
  ck_assert_int_eq(ival(c, "nnodes"), 2);
  ck_assert_int_eq(ival(c, "local_ranks"), 1);
  /* 2 channels x 2 directions; each logged by both ends ([send] and [receive]) but counted once. */
  ck_assert_int_eq(transport(c, "NET/Socket"), 4);
  ck_assert_int_eq(json_array_size(json_object_get(c, "verdicts")), 1);
  ck_assert_msg(strncmp(verdict(c, 0), "intra-host traffic over NET/Socket: GPUs split across pods", 58) == 0,
                "%s", verdict(c, 0));
  ck_assert_ptr_nonnull(strstr(verdict(c, 0), "host vm"));
  ck_assert_int_eq(npairs(c), 2);
  assert_pair(c, 0, "0->1 NET/Socket 2");
  assert_pair(c, 1, "1->0 NET/Socket 2");
  json_decref(j);
  json_decref(exp);
}
END_TEST

START_TEST(seed_efa_log) {
  json_t *exp, *j = parse_fixture("p4d-4pods-efa", &exp);
  ck_assert_msg(json_equal(j, exp), "p4d seed report differs from its expected.json");
  ck_assert(json_is_true(json_object_get(j, "efa_seen")));
  ck_assert_int_eq(json_array_size(json_object_get(j, "communicators")), 2);
  json_t *c0 = comm(j, 0), *c1 = comm(j, 1);
  ck_assert_str_eq(json_string_value(json_object_get(c0, "id")), "0xb079519ed44b724");
  ck_assert_int_eq(ival(c0, "init_complete"), 1);
  ck_assert_int_eq(ival(c1, "init_complete"), 1);
  ck_assert_int_eq(ival(c0, "nnodes"), 4);
  ck_assert_int_eq(ival(c1, "local_ranks"), 1);
  /* Rank 0's connections to 1, 2, 3 both ways on channels 0 and 1: 12. */
  ck_assert_int_eq(transport(c1, "NET/Libfabric/GDRDMA"), 12);
  ck_assert_ptr_nonnull(strstr(verdict(c1, 0), "every rank is its own NCCL node (nNodes = nRanks = 4"));
  /* Rank 0's log: the pairs with rank 0 at one end, 2 channels each; communicator 1 connected nothing. */
  ck_assert_int_eq(npairs(c0), 0);
  ck_assert_int_eq(npairs(c1), 6);
  assert_pair(c1, 0, "0->1 NET/Libfabric/GDRDMA 2");
  assert_pair(c1, 2, "0->3 NET/Libfabric/GDRDMA 2");
  assert_pair(c1, 5, "3->0 NET/Libfabric/GDRDMA 2");
  json_decref(j);
  json_decref(exp);
}
END_TEST

static json_t *lines(const char *const *ls, int efa) {
  trun_nccl_log *l = trun_nccl_log_new();
  trun_nccl_log_set_efa(l, efa);
  for (; *ls; ls++) trun_nccl_log_feed_line(l, *ls);
  json_t *j = trun_nccl_log_json(l);
  trun_nccl_log_free(l);
  return j;
}

START_TEST(transport_forms) {
  static const char *const ls[] = {
      "[rank0]:h1:10:10 [0] NCCL INFO comm 0xa rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0\n",
      "h1:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
      "h1:10:10 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
      "h1:10:10 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/indirect/2[2]",
      "h1:10:10 [0] NCCL INFO Channel 03 : 0[0] -> 1[1] via SHM/direct/direct",
      "h1:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/AWS "
      "Libfabric/1(3)/GDRDMA(PCI)/Shared",
      "h1:10:10 [0] NCCL INFO Channel 01/0 : 0[0] -> 2[0] [send] via NET/IB/0",
      "h1:10:10 [0] NCCL INFO Channel 01/0 : 0[0] -> 2[0] [send] via NET/IB/0", /* repeated: counted once */
      "h1:10:10 [0] NCCL INFO Channel 00/24 : 0 1 2 3",                         /* a ring, not a connection */
      NULL};
  json_t *j = lines(ls, 0), *c = comm(j, 0);
  ck_assert_int_eq(transport(c, "P2P/IPC/read"), 1);
  ck_assert_int_eq(transport(c, "P2P/CUMEM/read"), 1);
  ck_assert_int_eq(transport(c, "P2P/indirect"), 1);
  ck_assert_int_eq(transport(c, "SHM/direct/direct"), 1);
  ck_assert_int_eq(transport(c, "NET/AWS Libfabric/GDRDMA"), 1);
  ck_assert_int_eq(transport(c, "NET/IB"), 1);
  ck_assert_int_eq(json_object_size(json_object_get(c, "transports")), 6);
  /* One pair, several transports (one entry each, sorted by name); the repeated line counts once. */
  ck_assert_int_eq(npairs(c), 6);
  assert_pair(c, 0, "0->1 P2P/CUMEM/read 1");
  assert_pair(c, 1, "0->1 P2P/IPC/read 1");
  assert_pair(c, 2, "0->1 P2P/indirect 1");
  assert_pair(c, 3, "0->1 SHM/direct/direct 1");
  assert_pair(c, 4, "0->2 NET/AWS Libfabric/GDRDMA 1");
  assert_pair(c, 5, "0->2 NET/IB 1");
  char *s = json_dumps(json_object_get(c, "verdicts"), 0);
  ck_assert_msg(strstr(s, "inter-node over NET/IB without GDRDMA") != NULL, "%s", s);
  ck_assert_msg(strstr(s, "intra-node over SHM instead of P2P") != NULL, "%s", s);
  free(s);
  json_decref(j);
}
END_TEST

START_TEST(socket_with_efa) {
  static const char *const ls[] = {
      "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
      "b:2:2 [0] NCCL INFO comm 0x9 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
      "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
      "b:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0",
      "b:2:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0",
      NULL};
  json_t *j = lines(ls, 0), *c = comm(j, 0);
  ck_assert_int_eq(json_array_size(json_object_get(j, "communicators")), 1);
  ck_assert_int_eq(transport(c, "NET/Socket"), 2);
  ck_assert_ptr_nonnull(strstr(verdict(c, 0), "inter-node over NET/Socket (TCP"));
  /* 0->1 logged by both ends ([send] and [receive]): one channel. */
  ck_assert_int_eq(npairs(c), 2);
  assert_pair(c, 0, "0->1 NET/Socket 1");
  assert_pair(c, 1, "1->0 NET/Socket 1");
  json_decref(j);
  j = lines(ls, 4), c = comm(j, 0);
  ck_assert_str_eq(verdict(c, 0), TRUN_NCCL_V_EFA_UNUSED);
  json_decref(j);
}
END_TEST

START_TEST(healthy_multinode_and_commid) {
  static const char *const ls[] = {
      "n0:5:5 [0] NCCL INFO ncclCommInitRankConfig comm 0x10 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1 "
      "commId "
      "0xabc - Init START",
      "n0:5:5 [0] NCCL INFO comm 0x10 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0",
      "n1:7:7 [0] NCCL INFO ncclCommInitRankConfig comm 0x77 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1 "
      "commId "
      "0xabc - Init START",
      "n1:7:7 [0] NCCL INFO comm 0x77 rank 2 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0",
      "n0:5:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
      "n0:5:9 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/Libfabric/0/GDRDMA",
      "n1:7:7 [0] NCCL INFO ncclCommInitRankConfig comm 0x77 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1 "
      "commId "
      "0xabc - Init COMPLETE",
      NULL};
  json_t *j = lines(ls, 4), *c = comm(j, 0);
  ck_assert_int_eq(json_array_size(json_object_get(j, "communicators")), 1);
  ck_assert_str_eq(json_string_value(json_object_get(c, "id")), "0xabc");
  ck_assert_int_eq(ival(c, "ranks_seen"), 2);
  ck_assert_int_eq(ival(c, "init_complete"), 1);
  ck_assert_str_eq(verdict(c, 0), "healthy (P2P/CUMEM, NET/Libfabric/GDRDMA)");
  json_decref(j);
}
END_TEST

/* Found by fuzz/fuzz_nccl_log: a host or transport name that is not ASCII (not valid UTF-8 for JSON) used
 * to vanish from the report (no host, the connection not counted). Such bytes now read as '?'. */
START_TEST(non_ascii_bytes) {
  static const char *const ls[] = {
      "h\xff:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0",
      "h\xff:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/\xc3x/direct", NULL};
  json_t *j = lines(ls, 0), *c = comm(j, 0);
  ck_assert_int_eq(json_array_size(json_object_get(c, "hosts")), 1);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c, "hosts"), 0)), "h?");
  ck_assert_int_eq(transport(c, "SHM/?x/direct"), 1);
  json_decref(j);
}
END_TEST

/* More peer pairs than TRUN_NCCL_PRINT_PAIRS: the text stops there and says how many are left; one channel
 * reads "channel". */
START_TEST(print_caps_pairs) {
  trun_nccl_log *l = trun_nccl_log_new();
  trun_nccl_log_feed_line(
      l, "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 100 nNodes 1 localRanks 100 localRank 0");
  char line[128];
  for (int d = 1; d <= TRUN_NCCL_PRINT_PAIRS + 3; d++) {
    snprintf(line, sizeof(line), "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> %d[%x] via P2P/CUMEM", d, d);
    trun_nccl_log_feed_line(l, line);
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  trun_nccl_log_print(l, f);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "    rank 0 -> rank 1: P2P/CUMEM (1 channel)\n"));
  snprintf(line, sizeof(line), "rank 0 -> rank %d: ", TRUN_NCCL_PRINT_PAIRS);
  ck_assert_ptr_nonnull(strstr(buf, line));
  snprintf(line, sizeof(line), "rank 0 -> rank %d: ", TRUN_NCCL_PRINT_PAIRS + 1);
  ck_assert_ptr_null(strstr(buf, line));
  ck_assert_ptr_nonnull(
      strstr(buf, "    ... 3 more peer pair(s): trun-topo --nccl-log FILE... --json lists them all\n"));
  free(buf);
  json_t *j = trun_nccl_log_json(l);
  ck_assert_int_eq(npairs(comm(j, 0)), TRUN_NCCL_PRINT_PAIRS + 3);
  json_decref(j);
  trun_nccl_log_free(l);
}
END_TEST

START_TEST(print_counts_problems) {
  trun_nccl_log *l = trun_nccl_log_new();
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/tests/fixtures/nccl/nccl-2.28-h200x2-two-pods.log", repo());
  ck_assert_int_eq(trun_nccl_log_feed_file(l, p), 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_int_eq(trun_nccl_log_print(l, f), 1);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "NET/Socket"));
  ck_assert_ptr_nonnull(strstr(buf, "verdict: intra-host traffic over NET/Socket"));
  ck_assert_ptr_nonnull(strstr(buf,
                               "    NET/Socket               4 connection(s)\n"
                               "    rank 0 -> rank 1: NET/Socket (2 channels)\n"
                               "    rank 1 -> rank 0: NET/Socket (2 channels)\n"
                               "    verdict: intra-host"));
  free(buf);
  ck_assert_int_eq(trun_nccl_log_feed_file(l, "/nonexistent/nccl.log"), -2);
  trun_nccl_log_free(l);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nccl_log");
  TCase *tc = tcase_create("all");
  tcase_add_test(tc, one_pod_capture);
  tcase_add_test(tc, two_pods_capture);
  tcase_add_test(tc, seed_efa_log);
  tcase_add_test(tc, transport_forms);
  tcase_add_test(tc, socket_with_efa);
  tcase_add_test(tc, healthy_multinode_and_commid);
  tcase_add_test(tc, non_ascii_bytes);
  tcase_add_test(tc, print_counts_problems);
  tcase_add_test(tc, print_caps_pairs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
