/* torch's file-timer watchdog on the agent's loop (ftimer.h): the FIFO's reader, the request table and its
 * passes. */
#include "ftimer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

/* Malformed lines said on stderr before the rest are only counted. */
#define MAX_SAID 10
/* The watchdog's pass runs at least this often (dead pids, the health probe's progress time). */
#define PASS_MS 1000
/* Reads of the FIFO (8 KiB each) per wake-up of the loop. */
#define READS_PER_WAKEUP 8
/* Refused requests (pids that are not this node's workers) are said one by one up to MAX_SAID, then
 * counted and said in one line at most every REFUSED_EVERY_S seconds. */
#define REFUSED_EVERY_S 10.0

struct trun_ftimer {
  uv_loop_t *loop;
  char path[4096];
  int rfd, wfd; /* the FIFO's read end, and a write end of our own so that it never reads EOF */
  uv_poll_t poll;
  uv_timer_t timer;
  int handles; /* open libuv handles: freed when the last one closes */
  trun_ftimer_cb cb;
  trun_ftimer_accept_cb accept; /* NULL: every pid may hold timers */
  void *arg;
  unsigned long refused, refused_unsaid; /* requests refused at arrival; of them, not said yet */
  double refused_said_at;                /* wall-clock seconds of the last line about them */
  char line[TRUN_FTIMER_MAX_LINE + 1];
  size_t len;
  int skipping; /* the current line is over TRUN_FTIMER_MAX_LINE: dropped up to its newline */
  unsigned long bad;
  trun_ftimer_req *t;
  size_t n;
  double last_progress;
};

int trun_ftimer_parse(const char *line, size_t len, trun_ftimer_req *r, char *err, size_t errlen) {
  json_error_t je;
  json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
  if (o == NULL) {
    snprintf(err, errlen, "not JSON (%s)", je.text);
    return -1;
  }
  json_t *pid = json_object_get(o, "pid"), *scope = json_object_get(o, "scope_id");
  json_t *exp = json_object_get(o, "expiration_time"), *sig = json_object_get(o, "signal");
  const char *why = NULL;
  if (!json_is_object(o))
    why = "not a JSON object";
  else if (!json_is_integer(pid) || json_integer_value(pid) <= 0 || json_integer_value(pid) > INT32_MAX)
    why = "\"pid\" is not a process id";
  else if (!json_is_string(scope))
    why = "\"scope_id\" is not a string";
  else if (!json_is_number(exp) || !isfinite(json_number_value(exp)))
    why = "\"expiration_time\" is not a number";
  else if (sig != NULL &&
           (!json_is_integer(sig) || json_integer_value(sig) >= NSIG || json_integer_value(sig) < -NSIG))
    why = "\"signal\" is not a signal number";
  if (why) {
    snprintf(err, errlen, "%s", why);
    json_decref(o);
    return -1;
  }
  char *s = strdup(json_string_value(scope));
  if (s == NULL) {
    snprintf(err, errlen, "out of memory");
    json_decref(o);
    return -1;
  }
  r->pid = (pid_t)json_integer_value(pid);
  r->scope = s;
  r->expiration_time = json_number_value(exp);
  r->signal = sig ? (int)json_integer_value(sig) : 0;
  json_decref(o);
  return 0;
}

static void drop(trun_ftimer *t, size_t i) {
  free(t->t[i].scope);
  t->t[i] = t->t[--t->n];
}

static void rearm(trun_ftimer *t);
static void say_refused(trun_ftimer *t, int force);

/* torch's _run_watchdog: every pid with an expired timer is reaped with the first expired signal > 0 (in
 * expiration order) and all its timers go; timers of pids that are gone go too. */
static void pass(trun_ftimer *t) {
  double now = trun_wall_s();
  t->last_progress = now;
  for (size_t i = 0; i < t->n;) {
    if (kill(t->t[i].pid, 0) < 0 && errno == ESRCH) { /* gone: nothing to reap (torch skips it too) */
      drop(t, i);
      continue;
    }
    if (t->t[i].expiration_time > now) {
      i++;
      continue;
    }
    pid_t pid = t->t[i].pid;
    const trun_ftimer_req *first = NULL;
    for (size_t j = 0; j < t->n; j++)
      if (t->t[j].pid == pid && t->t[j].expiration_time <= now && t->t[j].signal > 0 &&
          (first == NULL || t->t[j].expiration_time < first->expiration_time))
        first = &t->t[j];
    char *scope = strdup(first ? first->scope : t->t[i].scope);
    int sig = first ? first->signal : 0;
    for (size_t j = t->n; j-- > 0;)
      if (t->t[j].pid == pid) drop(t, j);
    if (scope) t->cb(t->arg, pid, scope, sig);
    free(scope);
    i = 0; /* the table changed under us */
  }
}

static void on_timer(uv_timer_t *h) {
  trun_ftimer *t = h->data;
  say_refused(t, 0);
  pass(t);
  rearm(t);
}

static void rearm(trun_ftimer *t) {
  double next = PASS_MS / 1000.0, now = trun_wall_s();
  for (size_t i = 0; i < t->n; i++)
    if (t->t[i].expiration_time - now < next) next = t->t[i].expiration_time - now;
  if (next < 0) next = 0;
  uv_timer_start(&t->timer, on_timer, (uint64_t)ceil(next * 1000), 0);
}

/* The refused requests not said yet, in one line, when REFUSED_EVERY_S passed since the last (force: now). */
static void say_refused(trun_ftimer *t, int force) {
  double now = trun_wall_s();
  if (t->refused_unsaid == 0 || (!force && now - t->refused_said_at < REFUSED_EVERY_S)) return;
  trun_warn(
      "file-timer watchdog %s: refused %lu more request%s for pids that are not this node's workers "
      "(%lu in all)",
      t->path, t->refused_unsaid, t->refused_unsaid == 1 ? "" : "s", t->refused);
  t->refused_unsaid = 0;
  t->refused_said_at = now;
}

/* A request for a pid that is not one of this node's workers (nor a process of their groups): refused
 * when it arrives, so that it never takes a place in the table nor makes a line when it expires. */
static void refuse(trun_ftimer *t, trun_ftimer_req *r) {
  if (++t->refused <= MAX_SAID) {
    trun_warn(
        "file-timer watchdog %s: refusing pid %d's scope '%.80s': pid %d is no process of this node's "
        "workers%s",
        t->path, (int)r->pid, r->scope, (int)r->pid,
        t->refused == MAX_SAID ? " (further refusals are counted and said every 10 s)" : "");
    t->refused_said_at = trun_wall_s();
  } else {
    t->refused_unsaid++;
    say_refused(t, 0);
  }
  free(r->scope);
}

static void request(trun_ftimer *t, trun_ftimer_req *r) {
  size_t i;
  if (t->accept && !t->accept(t->arg, r->pid)) {
    if (r->expiration_time < 0) /* a release: nothing of it is held */
      free(r->scope);
    else
      refuse(t, r);
    return;
  }
  for (i = 0; i < t->n && !(t->t[i].pid == r->pid && strcmp(t->t[i].scope, r->scope) == 0); i++) {
  }
  if (r->expiration_time < 0) { /* release */
    if (i < t->n) drop(t, i);
    free(r->scope);
    return;
  }
  if (i < t->n) {
    free(t->t[i].scope);
    t->t[i] = *r;
    return;
  }
  if (t->n == TRUN_FTIMER_MAX_TIMERS) {
    if (t->bad++ < MAX_SAID)
      trun_warn("file-timer watchdog %s: %d timers are held already; ignoring pid %d's scope '%.80s'",
                t->path, TRUN_FTIMER_MAX_TIMERS, (int)r->pid, r->scope);
    free(r->scope);
    return;
  }
  t->t[t->n++] = *r;
}

static void one_line(trun_ftimer *t, const char *line, size_t len) {
  char err[160];
  trun_ftimer_req r;
  if (len == 0) return;
  if (trun_ftimer_parse(line, len, &r, err, sizeof(err)) < 0) {
    if (t->bad++ < MAX_SAID)
      trun_warn("file-timer watchdog %s: ignoring a request line: %s: '%.80s'%s", t->path, err, line,
                t->bad == MAX_SAID ? " (further bad lines are not said)" : "");
    return;
  }
  request(t, &r);
}

static void on_readable(uv_poll_t *h, int status, int events) {
  (void)events;
  trun_ftimer *t = h->data;
  if (status < 0) return;
  char buf[8192];
  /* At most READS_PER_WAKEUP reads, so that a writer that never stops cannot hold the loop: the poll is
   * level-triggered and comes back on the next iteration. */
  for (int reads = 0; reads < READS_PER_WAKEUP; reads++) {
    ssize_t got = read(t->rfd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) {
      reads--;
      continue;
    }
    if (got <= 0) break; /* EAGAIN: drained (our own write end keeps EOF away) */
    for (ssize_t i = 0; i < got; i++) {
      if (buf[i] == '\n') {
        if (t->skipping) {
          if (t->bad++ < MAX_SAID)
            trun_warn("file-timer watchdog %s: ignoring a request line over %d bytes", t->path,
                      TRUN_FTIMER_MAX_LINE);
        } else {
          t->line[t->len] = '\0';
          one_line(t, t->line, t->len);
        }
        t->len = 0;
        t->skipping = 0;
      } else if (!t->skipping) {
        if (t->len == TRUN_FTIMER_MAX_LINE)
          t->skipping = 1;
        else
          t->line[t->len++] = buf[i];
      }
    }
  }
  t->last_progress = trun_wall_s();
  rearm(t);
}

trun_ftimer *trun_ftimer_open(uv_loop_t *loop, const char *path, trun_ftimer_cb cb, void *arg, char *err,
                              size_t errlen) {
  trun_ftimer *t = calloc(1, sizeof(*t));
  if (t == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (snprintf(t->path, sizeof(t->path), "%s", path) >= (int)sizeof(t->path)) {
    snprintf(err, errlen, "the path is too long");
    free(t);
    return NULL;
  }
  t->t = calloc(TRUN_FTIMER_MAX_TIMERS, sizeof(*t->t));
  struct stat st;
  if (t->t == NULL) {
    snprintf(err, errlen, "out of memory");
  } else if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s is a directory", path);
  } else if (unlink(path) < 0 && errno != ENOENT) {
    snprintf(err, errlen, "unlink(%s): %s", path, strerror(errno));
  } else if (mkfifo(path, 0600) < 0) {
    snprintf(err, errlen, "mkfifo(%s): %s", path, strerror(errno));
  } else if ((t->rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
    snprintf(err, errlen, "open(%s) for reading: %s", path, strerror(errno));
    unlink(path);
  } else if ((t->wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
    snprintf(err, errlen, "open(%s) for writing: %s", path, strerror(errno));
    close(t->rfd);
    unlink(path);
  } else {
    int rc = uv_poll_init(loop, &t->poll, t->rfd);
    if (rc < 0) {
      snprintf(err, errlen, "uv_poll_init on %s: %s", path, uv_strerror(rc));
      close(t->rfd);
      close(t->wfd);
      unlink(path);
      free(t->t);
      free(t);
      return NULL;
    }
    uv_timer_init(loop, &t->timer);
    t->poll.data = t->timer.data = t;
    t->handles = 2;
    t->loop = loop;
    t->cb = cb;
    t->arg = arg;
    t->last_progress = trun_wall_s();
    if ((rc = uv_poll_start(&t->poll, UV_READABLE, on_readable)) < 0) {
      snprintf(err, errlen, "uv_poll_start on %s: %s", path, uv_strerror(rc));
      trun_ftimer_close(t);
      return NULL;
    }
    rearm(t);
    return t;
  }
  free(t->t);
  free(t);
  return NULL;
}

void trun_ftimer_set_accept(trun_ftimer *t, trun_ftimer_accept_cb accept) {
  if (t) t->accept = accept;
}

unsigned long trun_ftimer_refused(const trun_ftimer *t) { return t ? t->refused : 0; }

const char *trun_ftimer_path(const trun_ftimer *t) { return t ? t->path : NULL; }

void trun_ftimer_clear(trun_ftimer *t) {
  if (t == NULL) return;
  while (t->n) drop(t, t->n - 1);
}

size_t trun_ftimer_count(const trun_ftimer *t) { return t ? t->n : 0; }

double trun_ftimer_last_progress(const trun_ftimer *t) { return t ? t->last_progress : trun_wall_s(); }

static void on_closed(uv_handle_t *h) {
  trun_ftimer *t = h->data;
  if (--t->handles > 0) return;
  close(t->rfd);
  close(t->wfd);
  free(t->t);
  free(t);
}

void trun_ftimer_close(trun_ftimer *t) {
  if (t == NULL) return;
  say_refused(t, 1);
  trun_ftimer_clear(t);
  if (unlink(t->path) < 0 && errno != ENOENT)
    trun_warn("file-timer watchdog: cannot remove the FIFO %s: %s", t->path, strerror(errno));
  uv_close((uv_handle_t *)&t->poll, on_closed);
  uv_close((uv_handle_t *)&t->timer, on_closed);
}
