/* libFuzzer target for the pickle VM and the c10d rendezvous state codec (base/pickle.c,
 * agent/rdzv/c10d_state.c). Input: a pickle (seeds: real torch 1.13 / 2.6 states from tests/fixtures/rdzv).
 * It is run through the VM with default and with small limits, and through the state decoder; a state that
 * decodes is encoded again (in the layout seen, and in the other layouts), and that encoding must decode to
 * the same fields and re-encode to the same bytes. Every failure must carry a "pickle: offset " message.
 * ASan/UBSan/LSan find the rest. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/rdzv/c10d_state.h"
#include "base/pickle.h"
#include "fuzz_check.h"

static int node_eq(const trun_rdzv_node *a, const trun_rdzv_node *b) {
  return strcmp(a->addr, b->addr) == 0 && a->pid == b->pid && a->local_id == b->local_id;
}

static int same(const trun_rdzv_state *a, const trun_rdzv_state *b) {
  if (a->round != b->round || a->complete != b->complete || a->closed != b->closed ||
      a->has_deadline != b->has_deadline || (a->has_deadline && a->deadline_us != b->deadline_us) ||
      a->n_participants != b->n_participants || a->n_wait != b->n_wait || a->n_heartbeats != b->n_heartbeats)
    return 0;
  for (size_t i = 0; i < a->n_participants; i++)
    if (!node_eq(&a->participants[i].node, &b->participants[i].node) ||
        a->participants[i].v != b->participants[i].v)
      return 0;
  for (size_t i = 0; i < a->n_wait; i++)
    if (!node_eq(&a->wait_list[i], &b->wait_list[i])) return 0;
  for (size_t i = 0; i < a->n_heartbeats; i++)
    if (!node_eq(&a->heartbeats[i].node, &b->heartbeats[i].node) || a->heartbeats[i].v != b->heartbeats[i].v)
      return 0;
  return 1;
}

static void roundtrip(const trun_rdzv_state *st, const trun_rdzv_layout *lay) {
  uint8_t *p, *p2;
  size_t n, n2;
  int rc = trun_rdzv_state_encode_pickle(st, lay, &p, &n);
  if (rc != 0) {
    CHECK(rc == -EINVAL); /* an addr over 64 KiB or redundancy entries the layout lacks */
    return;
  }
  trun_rdzv_state st2;
  trun_rdzv_layout lay2;
  trun_pickle_err err;
  CHECK(trun_rdzv_state_decode_pickle(p, n, &st2, &lay2, &err) == 0);
  CHECK(same(st, &st2));
  CHECK(lay2.redundancy == lay->redundancy && lay2.proto == lay->proto);
  CHECK(trun_rdzv_state_encode_pickle(&st2, &lay2, &p2, &n2) == 0);
  CHECK(n2 == n && memcmp(p, p2, n) == 0);
  free(p);
  free(p2);
  trun_rdzv_state_free(&st2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  trun_pickle_doc *doc;
  trun_pickle_err err;
  int rc = trun_pickle_load(data, size, NULL, &doc, &err);
  if (rc == 0)
    trun_pickle_free(doc);
  else
    CHECK(strncmp(err.msg, "pickle: offset ", 15) == 0);
  trun_pickle_limits small = {
      .max_input = 4096, .max_str = 64, .max_stack = 32, .max_marks = 4, .max_memo = 32, .max_values = 256};
  rc = trun_pickle_load(data, size, &small, &doc, &err);
  if (rc == 0) trun_pickle_free(doc);

  trun_rdzv_state st;
  trun_rdzv_layout lay;
  rc = trun_rdzv_state_decode_pickle(data, size, &st, &lay, &err);
  if (rc != 0) {
    CHECK(rc == -EINVAL || rc == -E2BIG);
    CHECK(strncmp(err.msg, "pickle: offset ", 15) == 0);
    return 0;
  }
  trun_rdzv_layout l = lay;
  if (l.proto != 5) l.proto = 4;
  roundtrip(&st, &l);
  l.key = l.key == TRUN_RDZV_KEY_FQDN ? TRUN_RDZV_KEY_ADDR : TRUN_RDZV_KEY_FQDN;
  l.tz = l.tz == TRUN_RDZV_TZ_AWARE ? TRUN_RDZV_TZ_NAIVE : TRUN_RDZV_TZ_AWARE;
  l.redundancy = true;
  l.proto = 9 - l.proto;
  roundtrip(&st, &l);
  trun_rdzv_state_free(&st);
  return 0;
}
