/* Small helpers shared by the trun-store subcommands (store_tool.h). */
#include "store_tool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int trun_tool_parse_ll(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (s[0] == '\0' || *end != '\0') return -EINVAL;
  if (errno == ERANGE || v < lo || v > hi) return -ERANGE;
  *out = v;
  return 0;
}

int trun_tool_bad_arg(const char *opt, const char *val) {
  fprintf(stderr, "trun-store: bad value '%s' for %s; see --help\n", val, opt);
  return 2;
}

int trun_tool_write_file(const char *path, long long n) {
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return -1;
  fprintf(f, "%lld\n", n);
  if (fclose(f) != 0) return -1;
  return rename(tmp, path);
}
