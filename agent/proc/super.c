/* The child supervisor's loop side (agent/proc/super.h). */
#include "super.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

struct trun_super {
  trun_super_opts o;
  int sigs[TRUN_SUPER_MAX_SIGNALS];
  uv_signal_t sigchld;
  uv_signal_t caught[TRUN_SUPER_MAX_SIGNALS];
  uv_timer_t grace;
  int chld;    /* sigchld initialised */
  int ncaught; /* caught[] handles initialised */
  int handles; /* handles initialised and not yet closed back */
};

static void on_sigchld(uv_signal_t *h, int signum) {
  (void)signum;
  trun_super *s = h->data;
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
    if (s->o.on_exit) s->o.on_exit(s->o.arg, pid, status);
}

static void on_caught(uv_signal_t *h, int sig) {
  trun_super *s = h->data;
  if (s->o.on_signal) s->o.on_signal(s->o.arg, sig);
}

static void on_grace(uv_timer_t *t) {
  trun_super *s = t->data;
  if (s->o.on_grace) s->o.on_grace(s->o.arg);
}

static void closed(uv_handle_t *h) {
  trun_super *s = h->data;
  if (--s->handles == 0) free(s);
}

int trun_super_start(uv_loop_t *loop, const trun_super_opts *o, trun_super **out) {
  *out = NULL;
  if (o->nsignals < 0 || o->nsignals > TRUN_SUPER_MAX_SIGNALS) return UV_EINVAL;
  trun_super *s = calloc(1, sizeof(*s));
  if (s == NULL) return UV_ENOMEM;
  s->o = *o;
  for (int i = 0; i < o->nsignals; i++) s->sigs[i] = o->signals[i];
  s->o.signals = s->sigs;
  uv_timer_init(loop, &s->grace);
  s->grace.data = s;
  s->handles = 1;
  int rc = uv_signal_init(loop, &s->sigchld);
  if (rc == 0) {
    s->sigchld.data = s;
    s->chld = 1;
    s->handles++;
    rc = uv_signal_start(&s->sigchld, on_sigchld, SIGCHLD);
  }
  for (int i = 0; rc == 0 && o->on_signal && i < o->nsignals; i++) {
    rc = uv_signal_init(loop, &s->caught[i]);
    if (rc < 0) break;
    s->caught[i].data = s;
    s->handles++;
    s->ncaught = i + 1;
    rc = uv_signal_start(&s->caught[i], on_caught, s->sigs[i]);
  }
  if (rc < 0) {
    trun_super_close(s);
    return rc;
  }
  signal(SIGPIPE, SIG_IGN);
  *out = s;
  return 0;
}

void trun_super_grace(trun_super *s, uint64_t ms) { uv_timer_start(&s->grace, on_grace, ms, 0); }

void trun_super_grace_stop(trun_super *s) { uv_timer_stop(&s->grace); }

void trun_super_close(trun_super *s) {
  if (s == NULL) return;
  uv_close((uv_handle_t *)&s->grace, closed);
  if (s->chld) uv_close((uv_handle_t *)&s->sigchld, closed);
  for (int i = 0; i < s->ncaught; i++) uv_close((uv_handle_t *)&s->caught[i], closed);
}
