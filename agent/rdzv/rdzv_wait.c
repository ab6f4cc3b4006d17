/* The rendezvous's own waits (r->wait, agent/rdzv/rdzv_int.h): a generic wait (base/wait.h) between the
 * slices of its store calls, with the agent's hook, and the words of a failed connect to its store
 * (trun_client_connect_cause, store/client.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rdzv_int.h"

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
    trun_client_connect_cause(stage, err, said, r->store_addr, r->wait.cause, sizeof(r->wait.cause));
}
