#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

#define MAX_LINE (64 * 1024)

void trun_tail_add(trun_tail *t, const void *p, size_t n) {
  const char *c = p;
  if (n > TRUN_TAIL_MAX) c += n - TRUN_TAIL_MAX, t->total += n - TRUN_TAIL_MAX, n = TRUN_TAIL_MAX;
  for (size_t i = 0; i < n; i++) t->ring[(t->total + i) % TRUN_TAIL_MAX] = c[i];
  t->total += n;
}

void trun_tail_text(const trun_tail *t, char *out, size_t len) {
  if (len == 0) return;
  size_t have = t->total < TRUN_TAIL_MAX ? (size_t)t->total : TRUN_TAIL_MAX;
  size_t take = have < len - 1 ? have : len - 1;
  uint64_t from = t->total - take;
  for (size_t i = 0; i < take; i++) { /* a NUL in the worker's output would end the text early */
    char c = t->ring[(from + i) % TRUN_TAIL_MAX];
    out[i] = c == '\0' ? ' ' : c;
  }
  out[take] = '\0';
  if (take < t->total) { /* cut: start at the first whole line */
    char *nl = memchr(out, '\n', take);
    if (nl && nl[1] != '\0') memmove(out, nl + 1, strlen(nl + 1) + 1); /* else it is the only line */
  }
}

int trun_tail_from_file(trun_tail *t, const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return -errno;
  off_t end = lseek(fd, 0, SEEK_END);
  if (end < 0 || lseek(fd, end > TRUN_TAIL_MAX ? end - TRUN_TAIL_MAX : 0, SEEK_SET) < 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  char buf[TRUN_TAIL_MAX];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = -errno;
      close(fd);
      return e;
    }
    trun_tail_add(t, buf, (size_t)n);
  }
  close(fd);
  return 0;
}

struct trun_stream {
  uv_pipe_t pipe;
  int console_fd;
  int file_fd;
  char *prefix;
  size_t prefix_len;
  trun_buf line;
  int open;
  void (*eof_cb)(void *arg);
  void *eof_arg;
  trun_tail *tail; /* the caller's copy of the last lines, or NULL */
  uint64_t bytes;  /* read from the pipe so far (the stall detector's output activity) */
  char rbuf[16384];
};

static void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return; /* console or disk gone: output is best effort, the worker keeps running */
    }
    c += w;
    n -= (size_t)w;
  }
}

/* Emits one line (with its newline) to the file as is and to the console with the prefix, in one write
 * each so that lines of different workers never interleave. */
static void emit(trun_stream *s, const uint8_t *p, size_t n) {
  if (s->tail) trun_tail_add(s->tail, p, n);
  if (s->file_fd >= 0) write_all(s->file_fd, p, n);
  if (s->console_fd < 0) return;
  if (s->prefix_len == 0) {
    write_all(s->console_fd, p, n);
    return;
  }
  char stackbuf[4096];
  char *b = s->prefix_len + n <= sizeof(stackbuf) ? stackbuf : malloc(s->prefix_len + n);
  if (b == NULL) {
    write_all(s->console_fd, p, n);
    return;
  }
  memcpy(b, s->prefix, s->prefix_len);
  memcpy(b + s->prefix_len, p, n);
  write_all(s->console_fd, b, s->prefix_len + n);
  if (b != stackbuf) free(b);
}

static void flush_partial(trun_stream *s) {
  if (s->line.len == 0) return;
  if (trun_buf_append_u8(&s->line, '\n') == 0) emit(s, s->line.data, s->line.len);
  s->line.len = 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)suggested;
  trun_stream *s = h->data;
  *b = uv_buf_init(s->rbuf, sizeof(s->rbuf));
}

static void on_closed(uv_handle_t *h) {
  trun_stream *s = h->data;
  if (s->file_fd >= 0) close(s->file_fd);
  trun_buf_free(&s->line);
  free(s->prefix);
  free(s);
}

static void finish(trun_stream *s) {
  if (!s->open) return;
  s->open = 0;
  flush_partial(s);
  uv_read_stop((uv_stream_t *)&s->pipe);
  if (s->eof_cb) s->eof_cb(s->eof_arg);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  trun_stream *s = st->data;
  if (n < 0) {
    finish(s);
    return;
  }
  const uint8_t *p = (const uint8_t *)b->base;
  size_t len = (size_t)n;
  s->bytes += len;
  while (len > 0) {
    const uint8_t *nl = memchr(p, '\n', len);
    size_t take = nl ? (size_t)(nl - p) + 1 : len;
    if (s->line.len == 0 && nl) {
      emit(s, p, take); /* a whole line straight from the read buffer */
    } else {
      if (trun_buf_append(&s->line, p, take) < 0) s->line.len = 0;
      if (nl || s->line.len >= MAX_LINE) {
        if (!nl) trun_buf_append_u8(&s->line, '\n'); /* an endless line is cut at MAX_LINE */
        emit(s, s->line.data, s->line.len);
        s->line.len = 0;
      }
    }
    p += take;
    len -= take;
  }
}

int trun_stream_open(uv_loop_t *loop, int console_fd, int file_fd, const char *prefix, trun_stream **out,
                     int *child_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return -errno;
  trun_stream *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    close(fds[0]);
    close(fds[1]);
    return -ENOMEM;
  }
  s->console_fd = console_fd;
  s->file_fd = file_fd >= 0 ? fcntl(file_fd, F_DUPFD_CLOEXEC, 3) : -1;
  s->prefix = strdup(prefix ? prefix : "");
  s->prefix_len = s->prefix ? strlen(s->prefix) : 0;
  int rc = uv_pipe_init(loop, &s->pipe, 0);
  if (rc == 0) rc = uv_pipe_open(&s->pipe, fds[0]);
  if (rc == 0) {
    s->pipe.data = s;
    rc = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
  }
  if (rc < 0) {
    close(fds[1]);
    s->pipe.data = s;
    uv_close((uv_handle_t *)&s->pipe, on_closed);
    return rc;
  }
  s->open = 1;
  *out = s;
  *child_fd = fds[1];
  return 0;
}

void trun_stream_keep_tail(trun_stream *s, trun_tail *t) { s->tail = t; }

void trun_stream_on_eof(trun_stream *s, void (*cb)(void *arg), void *arg) {
  s->eof_cb = cb;
  s->eof_arg = arg;
}

int trun_stream_is_open(const trun_stream *s) { return s->open; }
uint64_t trun_stream_bytes(const trun_stream *s) { return s ? s->bytes : 0; }

void trun_stream_close(trun_stream *s) {
  if (s->open) {
    s->open = 0;
    flush_partial(s);
  }
  uv_close((uv_handle_t *)&s->pipe, on_closed);
}
