/* libFuzzer target for the job's record of the rendezvous store (agent/rdzv/rdzv_job.c:
 * trun__rdzv_job_parse), which trun --rdzv-status and every later agent read from /trun/<run_id>/job (anyone
 * with the job's token writes it). Input: the record's bytes (seed: records as the agents write them,
 * fuzz/corpus/fuzz_rdzv_job). Checks (abort on failure): a record that parses has a backend trun knows, 1 <=
 * MIN <= MAX <= 1000000, NUL-terminated words of their bounds with no control byte (the host escaped), and
 * parses the same twice; one that does not says why. ASan/UBSan/LSan find the rest. */
#include <stdint.h>
#include <string.h>

#include "fuzz_check.h"
#include "rdzv_int.h"

static int clean(const char *s, size_t cap) {
  size_t n = strnlen(s, cap);
  if (n == cap) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  trun__rdzv_job a, b;
  char why[160] = "";
  int rc = trun__rdzv_job_parse(data, n, "j1", &a, why, sizeof(why));
  if (rc != 0) {
    CHECK(why[0] != '\0');
    return 0;
  }
  CHECK(a.backend == TRUN_RDZV_STATIC || a.backend == TRUN_RDZV_C10D || a.backend == TRUN_RDZV_TRUN);
  CHECK(a.min_nodes >= 1 && a.min_nodes <= a.max_nodes && a.max_nodes <= 1000000);
  CHECK(clean(a.nproc, sizeof(a.nproc)) && clean(a.torch_version, sizeof(a.torch_version)));
  CHECK(clean(a.host, sizeof(a.host)));
  CHECK(trun__rdzv_job_parse(data, n, "j1", &b, why, sizeof(why)) == 0);
  CHECK(memcmp(&a, &b, sizeof(a)) == 0); /* both zeroed first: padding included */
  return 0;
}
