/* libFuzzer target for torch's file-timer watchdog (agent/observe/ftimer.h): the bytes are written into a
 * real watchdog FIFO, as a worker would, in chunks while the agent's loop reads them; every line goes
 * through the line splitter, trun_ftimer_parse and the timer table (release, replace, the bound, expiry of
 * past deadlines; the expiry callback only counts, it signals nothing). Each line is also parsed alone.
 * Seeds: fuzz/corpus/fuzz_ftimer (torch 1.13 / 2.x request lines). Checks (abort on failure): the table
 * never exceeds TRUN_FTIMER_MAX_TIMERS; a parsed request has a pid > 0 and a scope; the loop closes clean.
 * ASan/UBSan/LSan find the rest. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "ftimer.h"
#include "fuzz_check.h"

static void on_expired(void *arg, pid_t pid, const char *scope, int sig) {
  (void)sig;
  CHECK(pid > 0 && scope != NULL);
  ++*(unsigned long *)arg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* each line alone */
  for (size_t at = 0; at < size;) {
    const uint8_t *nl = memchr(data + at, '\n', size - at);
    size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
    trun_ftimer_req r;
    char err[160];
    if (trun_ftimer_parse((const char *)data + at, len, &r, err, sizeof(err)) == 0) {
      CHECK(r.pid > 0 && r.scope != NULL);
      free(r.scope);
    } else {
      CHECK(err[0] != '\0');
    }
    at += len + 1;
  }
  /* all of it through a FIFO and the loop */
  char path[64];
  snprintf(path, sizeof(path), "/tmp/trun-fuzz-ftimer-%d", (int)getpid());
  uv_loop_t loop;
  CHECK(uv_loop_init(&loop) == 0);
  unsigned long fired = 0;
  char err[256];
  trun_ftimer *t = trun_ftimer_open(&loop, path, on_expired, &fired, err, sizeof(err));
  CHECK(t != NULL);
  int fd = open(path, O_WRONLY | O_NONBLOCK);
  CHECK(fd >= 0);
  for (size_t off = 0; off < size;) {
    ssize_t n = write(fd, data + off, size - off);
    if (n > 0) off += (size_t)n;
    CHECK(n > 0 || errno == EAGAIN);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(trun_ftimer_count(t) <= TRUN_FTIMER_MAX_TIMERS);
  }
  close(fd);
  for (int i = 0; i < 3; i++) uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(trun_ftimer_count(t) <= TRUN_FTIMER_MAX_TIMERS);
  trun_ftimer_close(t);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(access(path, F_OK) != 0);
  CHECK(uv_loop_close(&loop) == 0);
  return 0;
}
