/* agent/agent_round.c: trun__round_decide, the one place a round's result is decided from its fate (the
 * stop request: how the round ended on this node, a hang's tear-down included; the round's end as the
 * rendezvous's one door told it) and what the round saw after its workers (the announcements, the losses,
 * this node's failure told to the rendezvous). */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "agent_int.h"
#include "unit.h"

/* This node is node rank 0 of the round. */
static trun__round_result decide(trun__round_result here, const trun_rdzv_end *job,
                                 const trun__round_seen *s) {
  trun__round_fate f = {.here = here, .job = job, .me = 0};
  return trun__round_decide(&f, s);
}

static trun_rdzv_end end_of(trun_rdzv_end_kind kind, int node) {
  trun_rdzv_end e;
  memset(&e, 0, sizeof(e));
  e.kind = kind;
  e.node = node;
  return e;
}

static const trun__round_result failed = {OUT_FAILED, 1, TRUN__CAUSE_EXIT, -1};
static const trun__round_result hung = {OUT_FAILED, 0, TRUN__CAUSE_HANG, -1};

/* c10d: a worker failed while new nodes wait to join. The rendezvous told it through its door as a MEMBER
 * end once this node's failure was told to it: the membership change, not a restart (torch's agent would
 * count one when its monitor sees the failure first). Before it was told, the failure stands. */
START_TEST(test_failure_with_nodes_waiting) {
  trun_rdzv_end member = end_of(TRUN_RDZV_END_MEMBER, -1);
  member.nodes = 2;
  trun__round_seen s = {.lost_seen = 1};
  trun__round_result r = decide(failed, &member, &s);
  ck_assert_int_eq(r.kind, OUT_FAILED);
  s.failed_told = 1;
  r = decide(failed, &member, &s);
  ck_assert_int_eq(r.kind, OUT_MEMBERSHIP);
  ck_assert_int_eq(r.cause, TRUN__CAUSE_END);
  ck_assert_int_eq(r.culprit, 1);
  /* No answer (nobody waits): the failure stands, a restart. */
  trun_rdzv_end none = end_of(TRUN_RDZV_END_NONE, -1);
  r = decide(failed, &none, &s);
  ck_assert_int_eq(r.kind, OUT_FAILED);
  ck_assert_int_eq(r.cause, TRUN__CAUSE_EXIT);
  /* Workers that succeeded, or a stop signal, are not a membership change. */
  trun__round_result ok = {OUT_SUCCESS, -1, TRUN__CAUSE_EXIT, -1};
  ck_assert_int_eq(decide(ok, &member, &s).kind, OUT_SUCCESS);
  trun__round_result sig = {OUT_SIGNALED, -1, TRUN__CAUSE_SIGNAL, -1};
  ck_assert_int_eq(decide(sig, &member, &s).kind, OUT_SIGNALED);
}
END_TEST

/* The hang watch's tear-down is this node's failure (culprit, cause hang); what the round's end says first
 * decides what it was: this node's own end keeps the hang as the root cause, another node's failure first
 * makes the hung workers its victims, a lost node is the cause. */
START_TEST(test_hang_fate) {
  trun__round_seen s = {.end_read = 1, .lost_seen = 1};
  trun_rdzv_end mine = end_of(TRUN_RDZV_END_FAILED, 0);
  trun__round_result r = decide(hung, &mine, &s);
  ck_assert_int_eq(r.kind, OUT_FAILED);
  ck_assert_int_eq(r.cause, TRUN__CAUSE_HANG);
  ck_assert_int_eq(r.culprit, 0);
  trun_rdzv_end theirs = end_of(TRUN_RDZV_END_FAILED, 3);
  r = decide(hung, &theirs, &s);
  ck_assert_int_eq(r.kind, OUT_REMOTE_FAILED);
  ck_assert_int_eq(r.node, 3);
  ck_assert_int_eq(r.cause, TRUN__CAUSE_END);
  trun_rdzv_end lost = end_of(TRUN_RDZV_END_NODE_LOST, 2);
  r = decide(hung, &lost, &s);
  ck_assert_int_eq(r.kind, OUT_PEER_LOST);
  ck_assert_int_eq(r.node, 2);
}
END_TEST

/* The announcements (static, trun): a stop signal while this node waited for the others; a store lost then;
 * a round whose end is not OK although this node's workers succeeded. */
START_TEST(test_announced_success) {
  trun__round_result ok = {OUT_SUCCESS, -1, TRUN__CAUSE_EXIT, -1};
  trun_rdzv_end end = end_of(TRUN_RDZV_END_OK, -1);
  trun__round_seen s = {.told = 1, .told_rc = -EINTR};
  ck_assert_int_eq(decide(ok, &end, &s).kind, OUT_SIGNALED);
  ck_assert_int_eq(decide(ok, &end, &s).cause, TRUN__CAUSE_SIGNAL);
  s.told_rc = -ECONNRESET;
  ck_assert_int_eq(decide(ok, &end, &s).kind, OUT_REMOTE_FAILED);
  s = (trun__round_seen){.told = 1, .end_read = 1};
  ck_assert_int_eq(decide(ok, &end, &s).kind, OUT_SUCCESS);
  end = end_of(TRUN_RDZV_END_FAILED, 1);
  ck_assert_int_eq(decide(ok, &end, &s).kind, OUT_REMOTE_FAILED);
  ck_assert_int_eq(decide(ok, &end, &s).node, 1);
}
END_TEST

static Suite *round_suite(void) {
  Suite *s = suite_create("round");
  TCase *tc = tcase_create("decide");
  tcase_add_test(tc, test_failure_with_nodes_waiting);
  tcase_add_test(tc, test_hang_fate);
  tcase_add_test(tc, test_announced_success);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(round_suite()); }
