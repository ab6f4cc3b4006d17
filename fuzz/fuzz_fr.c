/* libFuzzer target for the flight-recorder dump reader (agent/hang/fr.c over base/pickle.c): the input is one
 * rank's dump (seeds: our twelve 4 x H100 dumps in tests/fixtures/hang/flight-recorder). A parse either fails
 * with a named error ("flight-recorder dump: ...") or gives a dump whose strings are printable and bounded
 * and whose frames are at most TRUN_FR_MAX_FRAMES; the summary of it (as two ranks, and beside a rank without
 * a dump) is printable ASCII within its buffer. ASan/UBSan/LSan find the rest. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "agent/hang/hang.h"
#include "fuzz_check.h"

static void printable(const char *s) {
  CHECK(s != NULL);
  size_t n = strlen(s);
  CHECK(n <= 1024);
  for (size_t i = 0; i < n; i++) CHECK((unsigned char)s[i] >= 0x20 && s[i] != 0x7f);
}

static void op(const trun_fr_op *o) {
  if (!o->present) {
    CHECK(o->name == NULL && o->pg == NULL);
    return;
  }
  printable(o->name);
  printable(o->pg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  trun_fr_dump *d = NULL;
  int rc = trun_fr_parse(data, size, &d, err, sizeof(err));
  if (rc) {
    CHECK(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
    CHECK(d == NULL && strncmp(err, "flight-recorder dump: ", 22) == 0);
    return 0;
  }
  CHECK(strncmp(d->version, "2.", 2) == 0);
  op(&d->completed);
  op(&d->started);
  op(&d->scheduled);
  op(&d->last);
  CHECK(d->last.present == (d->last_state != NULL));
  if (d->last_state) printable(d->last_state);
  CHECK(d->nframes <= TRUN_FR_MAX_FRAMES && d->nframes <= d->nentries * TRUN_FR_MAX_FRAMES);
  for (size_t i = 0; i < d->nframes; i++) {
    printable(d->frames[i].file);
    printable(d->frames[i].name);
  }
  CHECK(d->last.present == (d->last_sizes != NULL));
  if (d->last_sizes) {
    printable(d->last_sizes);
    CHECK(strlen(d->last_sizes) <= 99);
  }
  trun_fr_rank r[3] = {
      {.rank = 0, .dump = d}, {.rank = 1, .dump = d}, {.rank = 2, .why = "no dump within 10.0 s"}};
  char line[300];
  size_t n = trun_fr_summarize(r, 3, line, sizeof(line));
  CHECK(n == strlen(line) && n < sizeof(line));
  for (size_t i = 0; i < n; i++) CHECK((unsigned char)line[i] >= 0x20 && (unsigned char)line[i] < 0x7f);
  int cul[2]; /* two probes of two ranks with this dump: a hang only with a newest entry not completed */
  size_t nc = 9;
  int hung = trun_fr_spin(r, r, 2, cul, &nc, line, sizeof(line));
  CHECK(hung == 0 || (d->last.present && strcmp(d->last_state, "completed") != 0));
  CHECK(nc == 0 && strlen(line) < sizeof(line));
  trun_fr_free(d);
  return 0;
}
