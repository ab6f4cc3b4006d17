/* CHECK(cond) for the libFuzzer targets: an invariant that must hold for every input; on failure, one line
 * naming the target file, the condition and the line, then abort() (libFuzzer keeps the input). */
#ifndef TRUN_FUZZ_CHECK_H
#define TRUN_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s: check failed: %s (line %d)\n", __FILE__, #cond, __LINE__); \
      abort();                                                                        \
    }                                                                                 \
  } while (0)

#endif
