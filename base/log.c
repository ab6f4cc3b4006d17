/* One-line diagnostics (log.h): the program's name and the level are set once at start-up. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

/* Process-wide logging settings: set once at start-up, read afterwards. */
static const char *log_prog = "trun";
static int log_level = -1;

void trun_log_set_prog(const char *prog) { log_prog = prog; }
void trun_log_set_level(int level) { log_level = level; }

int trun_log_level(void) {
  if (log_level < 0) {
    const char *e = getenv("TRUN_LOG_LEVEL");
    log_level = TRUN_LOG_INFO;
    if (e && strcmp(e, "error") == 0)
      log_level = TRUN_LOG_ERROR;
    else if (e && strcmp(e, "warn") == 0)
      log_level = TRUN_LOG_WARN;
    else if (e && strcmp(e, "debug") == 0)
      log_level = TRUN_LOG_DEBUG;
  }
  return log_level;
}

void trun_log_at(int level, const char *file, int line, const char *fmt, ...) {
  static const char *const names[] = {"error", "warning", "info", "debug"};
  if (level > trun_log_level()) return;
  const char *base = strrchr(file, '/');
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* One write per line so that concurrent writers never interleave mid-line. */
  char lineb[1200];
  /* Source locations and the wall-clock time (seconds since the epoch, to the microsecond: lines line up with
   * the events and with what workers stamp) are for developers (TRUN_LOG_LEVEL=debug). */
  int n = trun_log_level() >= TRUN_LOG_DEBUG
              ? snprintf(lineb, sizeof(lineb), "%s: %s: %s (%s:%d @%.6f)\n", log_prog, names[level], msg,
                         base ? base + 1 : file, line, trun_wall_s())
              : snprintf(lineb, sizeof(lineb), "%s: %s: %s\n", log_prog, names[level], msg);
  if (n > (int)sizeof(lineb)) n = (int)sizeof(lineb);
  fwrite(lineb, 1, (size_t)n, stderr);
}
