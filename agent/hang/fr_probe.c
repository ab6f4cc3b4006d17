/* Asking a job's ranks for their flight-recorder dumps (see hang.h). torch's heartbeat monitor (the default
 * process group's, torch 2.2 and later) makes a FIFO <TORCH_NCCL_DEBUG_INFO_PIPE_FILE><global rank>.pipe,
 * holds it open for reading (non-blocking) and, when a byte has come, dumps its flight recorder to
 * <TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE><global rank> and goes on running (it looks
 * once a second with TORCH_NCCL_DUMP_ON_TIMEOUT=1, else once per TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC). It writes
 * the file in place (truncate, write), so a reader may see a part of it: a dump is taken once it reads whole.
 * The files and FIFOs are the workers': untrusted (links not followed, sizes bounded by the reader). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "hang.h"

#define POLL_MS 100

typedef struct {
  int exists;
  struct stat st;
} file_state;

static void look(const char *path, file_state *f) { f->exists = lstat(path, &f->st) == 0; }

static int changed(const file_state *a, const file_state *b) {
  if (a->exists != b->exists) return 1;
  if (!a->exists) return 0;
  return a->st.st_ino != b->st.st_ino || a->st.st_size != b->st.st_size ||
         a->st.st_mtim.tv_sec != b->st.st_mtim.tv_sec || a->st.st_mtim.tv_nsec != b->st.st_mtim.tv_nsec;
}

/* One byte into rank's dump pipe. 0, or -errno with why filled. */
static int poke(const char *path, char *why, size_t len) {
  int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    if (e == ENXIO)
      snprintf(why, len, "nothing reads its dump pipe: no NCCL process group with a flight recorder");
    else if (e == ENOENT)
      snprintf(why, len, "no dump pipe (no NCCL process group yet, or a torch before 2.2)");
    else
      snprintf(why, len, "its dump pipe: %s", strerror(e));
    return -e;
  }
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode)) {
    snprintf(why, len, "its dump pipe is not a FIFO: not written");
    rc = -EINVAL;
  } else if (write(fd, "1", 1) != 1) {
    rc = -errno;
    snprintf(why, len, "its dump pipe: write: %s", strerror(errno));
  }
  close(fd);
  return rc;
}

void trun_fr_ranks_clear(trun_fr_rank *r, size_t n) {
  for (size_t i = 0; r && i < n; i++) {
    trun_fr_free(r[i].dump);
    r[i].dump = NULL;
    r[i].why[0] = '\0';
  }
}

size_t trun_fr_probe(const char *dump_prefix, const char *pipe_prefix, trun_fr_rank *out, size_t n,
                     int timeout_ms) {
  if (n > TRUN_FR_MAX_RANKS) n = TRUN_FR_MAX_RANKS;
  if (timeout_ms < 100) timeout_ms = 100;
  if (timeout_ms > 600000) timeout_ms = 600000;
  char(*path)[4096] = calloc(n ? n : 1, sizeof(*path));
  file_state *before = calloc(n ? n : 1, sizeof(*before));
  int *waiting = calloc(n ? n : 1, sizeof(*waiting));
  size_t got = 0, left = 0;
  if (!path || !before || !waiting) {
    for (size_t i = 0; i < n; i++) snprintf(out[i].why, sizeof(out[i].why), "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    trun_fr_free(out[i].dump);
    out[i].dump = NULL;
    out[i].why[0] = '\0';
    if (snprintf(path[i], sizeof(path[i]), "%s%d", dump_prefix, out[i].rank) >= (int)sizeof(path[i])) {
      snprintf(out[i].why, sizeof(out[i].why), "its dump file's name is too long");
      continue;
    }
    look(path[i], &before[i]);
    if (pipe_prefix) {
      char pipe[4096];
      if (snprintf(pipe, sizeof(pipe), "%s%d.pipe", pipe_prefix, out[i].rank) >= (int)sizeof(pipe)) {
        snprintf(out[i].why, sizeof(out[i].why), "its dump pipe's name is too long");
        continue;
      }
      if (poke(pipe, out[i].why, sizeof(out[i].why)) < 0) continue;
    }
    waiting[i] = 1;
    left++;
  }
  double deadline = trun_mono_ms() + timeout_ms;
  char err[512] = "";
  while (left > 0) {
    for (size_t i = 0; i < n; i++) {
      if (!waiting[i]) continue;
      file_state now;
      look(path[i], &now);
      if (!now.exists || (pipe_prefix && !changed(&before[i], &now))) continue;
      int rc = trun_fr_load_file(path[i], &out[i].dump, err, sizeof(err));
      if (rc == 0) {
        waiting[i] = 0, left--, got++;
        continue;
      }
      snprintf(out[i].why, sizeof(out[i].why), "%.*s", (int)sizeof(out[i].why) - 1,
               err); /* half written, or not a dump: kept if final */
      if (rc == -ELOOP || rc == -E2BIG || (rc == -EINVAL && strstr(err, "not a regular file")))
        waiting[i] = 0, left--;
    }
    if (left == 0 || trun_mono_ms() >= deadline) break;
    struct timespec ts = {0, POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  for (size_t i = 0; i < n; i++)
    if (waiting[i] && out[i].why[0] == '\0')
      snprintf(out[i].why, sizeof(out[i].why), "no dump within %.1f s", timeout_ms / 1000.0);
out:
  free(path);
  free(before);
  free(waiting);
  return got;
}
