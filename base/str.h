/* Text in a caller's fixed buffer, always NUL-terminated and cut at its size: the one string builder (no
 * module keeps its own seterr / errf / appendf / catf). A NULL buffer or a size of 0 is left alone, so an
 * optional error buffer needs no test at the call. */
#ifndef TRUN_BASE_STR_H
#define TRUN_BASE_STR_H

#include <stdarg.h>
#include <stddef.h>

/* Formats into buf (what it held is replaced). Returns -1, for the error convention of
 * docs/architecture.md ("return trun_errf(err, errlen, ...);" in a function that returns 0 or -1). */
int trun_errf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Appends to the string in buf; nothing when it is already full. */
void trun_catf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void trun_vcatf(char *buf, size_t len, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));

#endif
