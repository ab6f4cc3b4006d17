/* libFuzzer target for the error-file reader and the failure JSON of agent/proc/report.c: trun_errfile_read
 * (a worker's torchelastic error file), trun_failure_from_json / trun_failure_to_json (failures published
 * through the store), trun_report_print (the banner, with the fuzzed strings) and trun_errfile_write_parent.
 * Input: the file's bytes (seeds: tests/fixtures/errfiles, and failure JSON as the agent writes it).
 * Checks (abort on failure): a failure that decodes encodes to JSON that decodes to the same fields; an error
 * file that reads, written as the parent's error file, reads back with the same message and traceback.
 * ASan/UBSan/LSan find the rest. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "report.h"

static int same_str(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

static int same(const trun_failure *a, const trun_failure *b) {
  return a->global_rank == b->global_rank && a->local_rank == b->local_rank &&
         a->group_rank == b->group_rank && a->pid == b->pid && a->exit_code == b->exit_code &&
         a->timestamp == b->timestamp && a->torn_down == b->torn_down && same_str(a->host, b->host) &&
         same_str(a->error_file, b->error_file) && same_str(a->message, b->message) &&
         same_str(a->traceback, b->traceback) && same_str(a->log_path, b->log_path) &&
         same_str(a->cause, b->cause) && same_str(a->cause_kind, b->cause_kind);
}

static void print_report(const trun_failure *fs, size_t n) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  CHECK(m != NULL);
  trun_report_print(m, "train.py", fs, n);
  CHECK(fclose(m) == 0);
  CHECK(len > 0);
  free(text);
}

/* A memfd holding the bytes; its /proc path in path. */
static int memfile(const uint8_t *data, size_t size, char *path, size_t len) {
  int fd = memfd_create("fuzz-errfile", MFD_CLOEXEC);
  CHECK(fd >= 0);
  size_t off = 0;
  while (off < size) {
    ssize_t w = write(fd, data + off, size - off);
    CHECK(w > 0);
    off += (size_t)w;
  }
  snprintf(path, len, "/proc/self/fd/%d", fd);
  return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The store's failure JSON. */
  trun_failure f, g;
  if (trun_failure_from_json((const char *)data, size, &f) == 0) {
    char *json = trun_failure_to_json(&f);
    CHECK(json != NULL);
    CHECK(trun_failure_from_json(json, strlen(json), &g) == 0);
    CHECK(same(&f, &g) || f.timestamp != f.timestamp); /* NaN cannot come from JSON; still be exact */
    free(json);
    trun_failure fs[2] = {f, g};
    fs[1].torn_down = 1;
    print_report(fs, 2);
    trun_failure_free(&g);
    trun_failure_free(&f);
  } else {
    trun_failure_free(&f);
  }

  /* A worker's error file. */
  char path[64], ppath[64];
  int fd = memfile(data, size, path, sizeof(path));
  memset(&f, 0, sizeof(f));
  f.global_rank = 3;
  f.local_rank = 1;
  f.exit_code = 1;
  f.pid = 4242;
  f.timestamp = 1700000000.0;
  int rc = trun_errfile_read(path, &f);
  CHECK(rc == 0 || rc == -EBADMSG);
  if (rc == 0) {
    CHECK(same_str(f.error_file, path));
    print_report(&f, 1);
    int pfd = memfile(NULL, 0, ppath, sizeof(ppath));
    CHECK(trun_errfile_write_parent(ppath, &f) == 0);
    memset(&g, 0, sizeof(g));
    CHECK(trun_errfile_read(ppath, &g) == 0);
    CHECK(same_str(g.message, f.message) && same_str(g.traceback, f.traceback));
    trun_failure_free(&g);
    close(pfd);
  }
  trun_failure_free(&f);
  close(fd);
  return 0;
}
