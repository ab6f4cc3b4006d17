/* Waits that say what they wait for (agent/rdzv/rdzv.h, "waits"): the report schedule, the line, the words
 * for a failed connect, and the rendezvous's own waits (r->wait) between the slices of its store calls. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rdzv_int.h"

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

void trun_wait_connect_cause(int stage, int err, const char *said, const char *host, char *out, size_t len) {
  if (stage == TRUN_CONNECT_RESOLVE) {
    snprintf(
        out, len,
        "the name '%s' does not resolve (%s); in Kubernetes a headless Service publishes a pod's name only "
        "once the pod is ready",
        host, said);
    return;
  }
  if (stage == TRUN_CONNECT_HANDSHAKE && err == ECONNRESET) {
    snprintf(
        out, len,
        "the store closed the connection at once: refused by its allow-list (--store-allow-peers), or it "
        "is not a torch >= 2.2 store (%s)",
        said);
    return;
  }
  if (stage == TRUN_CONNECT_HANDSHAKE && (err == EPROTO || err == ETIMEDOUT)) {
    snprintf(out, len,
             "something answers on that port but it is not a TCPStore (no answer to torch's VALIDATE/PING "
             "handshake): another program holds the port; choose another --master-port or --rdzv-endpoint "
             "port (%s)",
             said);
    return;
  }
  switch (err) {
    case ECONNREFUSED:
      snprintf(out, len, "connection refused: nothing listens on that port yet (%s)", said);
      break;
    case EHOSTUNREACH:
    case ENETUNREACH: snprintf(out, len, "no route to the host (%s)", said); break;
    case ETIMEDOUT: snprintf(out, len, "the connection timed out (%s)", said); break;
    default: snprintf(out, len, "%s", said); break;
  }
}

/* ---- the rendezvous's waits ------------------------------------------------------------------------- */

int trun__rdzv_wait_begin(trun_rdzv *r, const char *kind, double timeout_s, const char *timeout_key,
                          void (*have)(trun_rdzv *r), const char *what_fmt, ...) {
  if (r->wait.active) return 0;
  char what[800];
  va_list ap;
  va_start(ap, what_fmt);
  vsnprintf(what, sizeof(what), what_fmt, ap);
  va_end(ap);
  trun_wait_begin(&r->wait, kind, timeout_s, timeout_key, r->on_wait, r->on_wait_arg, "%s", what);
  r->wait_have = have;
  return 1;
}

void trun__rdzv_wait_end(trun_rdzv *r, int started) {
  if (!started) return;
  trun_wait_end(&r->wait);
  r->wait_have = NULL;
}

int trun__rdzv_poll(void *arg) {
  trun_rdzv *r = arg;
  if (trun_wait_due(&r->wait)) {
    if (r->wait_have) r->wait_have(r);
    trun_wait_report(&r->wait);
  }
  return r->poll && r->poll(r->poll_arg);
}

void trun__rdzv_connect_error(void *arg, int stage, int err, const char *said) {
  trun_rdzv *r = arg;
  if (r->wait.active)
    trun_wait_connect_cause(stage, err, said, r->store_addr, r->wait.cause, sizeof(r->wait.cause));
}
