/* A small file read whole into a caller's buffer (file.c): sysfs and /proc entries, a driver's version line,
 * a package's version.py. The one reader of such files (no module keeps its own read_small / read_text). */
#ifndef TRUN_BASE_FILE_H
#define TRUN_BASE_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Reads path into buf, at most len - 1 bytes, NUL-terminated (len > 0). Its length, or -errno when it cannot
 * be opened or read. */
ssize_t trun_read_small(const char *path, char *buf, size_t len);

#endif
