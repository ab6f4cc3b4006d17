/* Worker output: each stream the console shows or a tee copies goes through a pipe that the agent reads
 * on its loop, cut into whole lines (never mid-line, never interleaved), optionally prefixed, and written
 * to the console and / or the stream's log file. */
#ifndef TRUN_OUTPUT_H
#define TRUN_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct trun_stream trun_stream;

/* The last bytes a worker wrote to a stream (its last stderr lines, for the failure's cause: cause.h). */
#define TRUN_TAIL_MAX 4096
typedef struct {
  char ring[TRUN_TAIL_MAX];
  uint64_t total; /* bytes ever added; the ring holds the last min(total, TRUN_TAIL_MAX) */
} trun_tail;

/* Appends n bytes to the tail. */
void trun_tail_add(trun_tail *t, const void *p, size_t n);
/* The tail as a string in out (its last len - 1 bytes at most, starting after a line break when cut). */
void trun_tail_text(const trun_tail *t, char *out, size_t len);
/* Fills t with the last TRUN_TAIL_MAX bytes of the file at path (a --redirects log). 0 or -errno. */
int trun_tail_from_file(trun_tail *t, const char *path);

/* Opens a pipe for one worker stream. The worker gets *child_fd (the write end; the caller closes it in
 * the agent after the spawn). console_fd: 1 or 2, or -1 for none; file_fd: log file or -1 (dup'ed);
 * prefix: text put before every console line (copied; "" for none). Returns 0 or a negative errno. */
int trun_stream_open(uv_loop_t *loop, int console_fd, int file_fd, const char *prefix, trun_stream **out,
                     int *child_fd);
/* Called once the stream reaches EOF and has flushed (all writers, including the worker's children,
 * closed it). */
void trun_stream_on_eof(trun_stream *s, void (*cb)(void *arg), void *arg);
int trun_stream_is_open(const trun_stream *s);
/* Bytes the worker wrote into the stream so far (0 for NULL). */
uint64_t trun_stream_bytes(const trun_stream *s);
/* Every line the stream emits is also added to t (NULL: none); t must outlive the stream. */
void trun_stream_keep_tail(trun_stream *s, trun_tail *t);
/* Closes the pipe (pending partial line flushed) and frees the stream once libuv is done. */
void trun_stream_close(trun_stream *s);

#endif
