/* Waits that say what they wait for (base/wait.h): the report schedule, the line, the hook. */
#include "wait.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "log.h"

/* Seconds from the start of a wait to its first reports; then one every WAIT_EVERY_S. A wait that ends within
 * the first second says nothing. */
static const double wait_at[] = {1, 5, 15, 45};
#define WAIT_EVERY_S 60

static double next_at(int reports) {
  int n = (int)(sizeof(wait_at) / sizeof(wait_at[0]));
  return reports < n ? wait_at[reports] : wait_at[n - 1] + WAIT_EVERY_S * (reports - n + 1);
}

void trun_wait_begin(trun_wait *w, const char *kind, double timeout_s, const char *timeout_key,
                     trun_wait_hook hook, void *hook_arg, const char *what_fmt, ...) {
  memset(w, 0, sizeof(*w));
  snprintf(w->kind, sizeof(w->kind), "%s", kind);
  snprintf(w->timeout_key, sizeof(w->timeout_key), "%s", timeout_key ? timeout_key : "");
  va_list ap;
  va_start(ap, what_fmt);
  vsnprintf(w->what, sizeof(w->what), what_fmt, ap);
  va_end(ap);
  w->start = trun_mono_s();
  w->deadline = timeout_s > 0 ? w->start + timeout_s : 0;
  w->next = w->start + next_at(0);
  w->hook = hook;
  w->hook_arg = hook_arg;
  w->active = 1;
}

int trun_wait_due(const trun_wait *w) { return w->active && trun_mono_s() >= w->next; }

void trun_wait_line(const trun_wait *w, double now, char *out, size_t len) {
  int n = snprintf(out, len, "waiting %.0f s for %s", now - w->start, w->what);
  if (n >= 0 && (size_t)n < len && w->have[0]) n += snprintf(out + n, len - (size_t)n, "; %s", w->have);
  if (n >= 0 && (size_t)n < len && w->cause[0])
    n += snprintf(out + n, len - (size_t)n, "; last failure: %s", w->cause);
  if (n >= 0 && (size_t)n < len) {
    if (w->deadline > 0) {
      double left = w->deadline - now;
      n += snprintf(out + n, len - (size_t)n, "; time-out in %.0f s", left > 0 ? left : 0);
      if (n >= 0 && (size_t)n < len && w->timeout_key[0])
        snprintf(out + n, len - (size_t)n, " (%s)", w->timeout_key);
    } else {
      snprintf(out + n, len - (size_t)n, "; no time-out");
    }
  }
}

static void tell(trun_wait *w, double now, int done) {
  if (w->hook == NULL) return;
  trun_wait_info i = {.kind = w->kind,
                      .what = w->what,
                      .have = w->have,
                      .cause = w->cause,
                      .waited_s = now - w->start,
                      .left_s = w->deadline > 0 ? (w->deadline > now ? w->deadline - now : 0) : -1,
                      .done = done};
  w->hook(w->hook_arg, &i);
}

void trun_wait_report(trun_wait *w) {
  if (!w->active) return;
  double now = trun_mono_s();
  char line[2048];
  trun_wait_line(w, now, line, sizeof(line));
  trun_info("%s", line);
  tell(w, now, 0);
  w->reports++;
  w->next = w->start + next_at(w->reports);
  if (w->next <= now) w->next = now + 1; /* a report that came late: the next one still a second later */
}

void trun_wait_end(trun_wait *w) {
  if (!w->active) return;
  double now = trun_mono_s();
  if (w->reports) {
    trun_debug("waited %.0f s for %s", now - w->start, w->what);
    tell(w, now, 1);
  }
  w->active = 0;
}
