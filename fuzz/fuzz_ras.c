/* libFuzzer target for the NCCL RAS JSON reader and the hang detector (agent/hang/ras_json.c, detect.c), as
 * the agent will use them: the input is one RAS answer (seeds: our 4 x H100 captures in tests/fixtures/hang
 * and small hand-made ones in fuzz/corpus/fuzz_ras). A parse either fails with a named error ("NCCL RAS
 * answer: ...") or gives a snapshot whose every field keeps the reader's promises (ranks inside their
 * communicator and unique, counts matching the arrays); that snapshot is then fed to a detector several
 * times over a window, and the input's second half (when it parses too) in between, so that frozen,
 * changing and vanishing communicators all happen; every verdict must name culprits that are ranks of the
 * communicator, with a line. ASan/UBSan/LSan find the rest. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/hang/hang.h"
#include "fuzz_check.h"

static void check_snapshot(const trun_ras_snapshot *s) {
  CHECK(s->ncomms <= TRUN_RAS_MAX_COMMS);
  for (size_t i = 0; i < s->ncomms; i++) {
    const trun_ras_comm *c = &s->comms[i];
    CHECK(c->size >= 1 && c->size <= TRUN_RAS_MAX_SIZE);
    CHECK(c->nranks <= (size_t)c->size && c->npresent <= c->nranks);
    CHECK(memchr(c->hash, '\0', sizeof(c->hash)) != NULL);
    for (size_t k = 0; k < c->nranks; k++) {
      const trun_ras_rank *r = &c->ranks[k];
      CHECK(r->rank >= 0 && r->rank < c->size);
      CHECK(r->missing == (k >= c->npresent));
      CHECK(r->nkinds <= TRUN_RAS_MAX_KINDS);
      CHECK(memchr(r->host, '\0', sizeof(r->host)) != NULL && r->host[0]);
      for (size_t j = 0; j < k; j++) CHECK(c->ranks[j].rank != r->rank);
    }
  }
}

static void check_verdict(const trun_hang_verdict *v, int k, const trun_ras_snapshot *s) {
  CHECK(k >= 0 && (size_t)k == v->ncomms && v->nfresh <= v->ncomms && v->ncomms <= s->ncomms);
  for (size_t i = 0; i < v->ncomms; i++) {
    const trun_hang_comm *h = &v->comm[i];
    CHECK(h->line[0] != '\0' && memchr(h->line, '\0', sizeof(h->line)) != NULL);
    CHECK(h->nculprits > 0 || h->size > 0);
    for (size_t j = 0; j < h->nculprits && j < TRUN_HANG_MAX_CULPRITS; j++)
      CHECK(h->culprit[j].rank >= 0 && h->culprit[j].rank < h->size);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  trun_ras_snapshot *a = NULL, *b = NULL;
  int rc = trun_ras_parse((const char *)data, size, &a, err, sizeof(err));
  if (rc) {
    CHECK(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
    CHECK(a == NULL && strncmp(err, "NCCL RAS answer: ", 17) == 0);
    return 0;
  }
  check_snapshot(a);
  if (trun_ras_parse((const char *)data + size / 2, size - size / 2, &b, err, sizeof(err)) == 0)
    check_snapshot(b);
  trun_hang_detector *d = trun_hang_new(0);
  CHECK(d != NULL);
  trun_hang_verdict v;
  double t = 0;
  for (int i = 0; i < 6; i++, t += 7.5) {
    const trun_ras_snapshot *s = (b && i == 3) ? b : a;
    int k = trun_hang_feed(d, s, t, &v);
    check_verdict(&v, k, s);
    trun_hang_verdict_clear(&v);
  }
  trun_hang_reset(d);
  int k = trun_hang_feed(d, a, t, &v);
  CHECK(k == 0); /* a fresh window */
  trun_hang_verdict_clear(&v);
  trun_hang_free(d);
  trun_ras_snapshot_free(a);
  trun_ras_snapshot_free(b);
  return 0;
}
