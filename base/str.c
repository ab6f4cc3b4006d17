/* The string builder (base/str.h). */
#include "str.h"

#include <stdio.h>
#include <string.h>

int trun_errf(char *buf, size_t len, const char *fmt, ...) {
  if (buf && len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

void trun_vcatf(char *buf, size_t len, const char *fmt, va_list ap) {
  if (!buf || len == 0) return;
  size_t n = strnlen(buf, len);
  if (n + 1 >= len) return;
  vsnprintf(buf + n, len - n, fmt, ap);
}

void trun_catf(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  trun_vcatf(buf, len, fmt, ap);
  va_end(ap);
}
