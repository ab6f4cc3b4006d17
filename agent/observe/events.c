#include "events.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

/* What a reader that does not keep up may leave queued before events are dropped. */
#define QUEUE_MAX (4u << 20)

struct trun_events {
  int fd;
  int owned; /* opened from a path: closed at the end */
  char spec[256];
  char *host;
  int group_rank;
  trun_buf queue; /* bytes not yet written */
  size_t dropped;
  int failed; /* a write failed for good: nothing more is written (reported once) */
};

void trun_iso8601_utc(double t, char *out, size_t len) {
  time_t sec = (time_t)t;
  long usec = (long)((t - (double)sec) * 1e6 + 0.5);
  if (usec >= 1000000) sec++, usec -= 1000000;
  if (usec < 0) usec = 0;
  struct tm tm;
  gmtime_r(&sec, &tm);
  char base[32];
  strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, len, "%s.%06ldZ", base, usec);
}

int trun_events_open(const char *spec, const char *host, trun_events **out, char *err, size_t errlen) {
  int fd = -1, owned = 0;
  if (strncmp(spec, "fd:", 3) == 0) {
    char *end;
    errno = 0;
    long n = strtol(spec + 3, &end, 10);
    if (spec[3] == '\0' || *end != '\0' || errno || n < 0 || n > 1 << 20) {
      snprintf(err, errlen, "--events '%s': fd:N needs a descriptor number", spec);
      return -1;
    }
    fd = (int)n;
    if (fcntl(fd, F_GETFL) < 0) {
      snprintf(err, errlen,
               "--events '%s': descriptor %d is not open (%s); open it in the shell, e.g. 3>file", spec, fd,
               strerror(errno));
      return -1;
    }
    /* The workers must not inherit it. */
    fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    /* O_NONBLOCK on a description shared with others (the shell's pipe, the console) would make their
     * writes fail with EAGAIN: reopen a pipe, FIFO or terminal as a description of our own. */
    char self[64];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    int own = open(self, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    if (own >= 0) fd = own, owned = 1;
  } else {
    if (spec[0] == '\0') {
      snprintf(err, errlen, "--events needs a file name or fd:N");
      return -1;
    }
    fd = open(spec, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      snprintf(err, errlen, "--events: cannot open %s: %s; pass a writable path or fd:N", spec,
               strerror(errno));
      return -1;
    }
    owned = 1;
  }
  trun_events *e = calloc(1, sizeof(*e));
  if (e == NULL || (e->host = strdup(host ? host : "")) == NULL) {
    free(e);
    if (owned) close(fd);
    snprintf(err, errlen, "out of memory opening the event stream");
    return -1;
  }
  /* A pipe whose reader is slow must not stall the loop: queue instead of blocking (a regular file ignores
   * O_NONBLOCK). Only on a description of our own. */
  int fl = fcntl(fd, F_GETFL);
  if (owned && fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  e->fd = fd;
  e->owned = owned;
  e->group_rank = -1;
  snprintf(e->spec, sizeof(e->spec), "%s", spec);
  *out = e;
  return 0;
}

void trun_events_set_group_rank(trun_events *e, int group_rank) {
  if (e) e->group_rank = group_rank;
}

size_t trun_events_dropped(const trun_events *e) { return e ? e->dropped : 0; }

/* Writes as much of the queue as the descriptor takes now. */
static void flush(trun_events *e) {
  while (e->queue.len > 0 && !e->failed) {
    ssize_t n = write(e->fd, e->queue.data, e->queue.len);
    if (n > 0) {
      trun_buf_consume(&e->queue, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    e->failed = 1;
    trun_warn("cannot write the event stream %s: %s; no further events are written", e->spec,
              n < 0 ? strerror(errno) : "short write");
    e->queue.len = 0;
  }
}

void trun_events_emit(trun_events *e, const char *event, json_t *fields) {
  if (e == NULL || e->failed) {
    json_decref(fields);
    return;
  }
  char ts[48];
  trun_iso8601_utc(trun_wall_s(), ts, sizeof(ts));
  json_t *o = json_object();
  if (o == NULL) {
    json_decref(fields);
    return;
  }
  json_object_set_new(o, "ts", json_string(ts));
  json_object_set_new(o, "event", json_string(event));
  json_object_set_new(o, "host", json_string(e->host));
  if (e->group_rank >= 0) json_object_set_new(o, "group_rank", json_integer(e->group_rank));
  if (fields) {
    json_object_update(o, fields);
    json_decref(fields);
  }
  char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
  json_decref(o);
  if (line == NULL) return;
  size_t n = strlen(line);
  if (e->queue.len + n + 1 > QUEUE_MAX) {
    if (e->dropped++ == 0)
      trun_warn(
          "the reader of the event stream %s does not keep up: dropping events (job_end "
          "counts them)",
          e->spec);
  } else if (trun_buf_append(&e->queue, line, n) < 0 || trun_buf_append_u8(&e->queue, '\n') < 0) {
    e->dropped++;
  }
  free(line);
  flush(e);
}

void trun_events_close(trun_events *e) {
  if (e == NULL) return;
  /* Give a slow reader about a second to take the rest. */
  for (int i = 0; i < 10 && e->queue.len > 0 && !e->failed; i++) {
    flush(e);
    if (e->queue.len == 0) break;
    struct pollfd p = {.fd = e->fd, .events = POLLOUT};
    poll(&p, 1, 100);
  }
  if (e->queue.len > 0 && !e->failed)
    trun_warn("the event stream %s: %zu bytes not taken by its reader were dropped", e->spec, e->queue.len);
  trun_buf_free(&e->queue);
  if (e->owned) close(e->fd);
  free(e->host);
  free(e);
}
