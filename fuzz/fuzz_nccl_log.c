/* libFuzzer target for the NCCL INFO log reader (agent/nccl/nccl_log.c), as --nccl-report and trun-topo
 * --nccl-log use it: the input is a log file's bytes (seeds: the captures in tests/fixtures/nccl).
 * Fed twice: line by line (trun_nccl_log_feed_line, the bytes of each line up to a NUL) and as a file
 * (trun_nccl_log_feed_file through a memfd); then trun_nccl_log_json and trun_nccl_log_print.
 * Checks (abort on failure): both feeds give equal JSON; every communicator has an id, counts, a host and at
 * least one verdict; the printed report has its header and end lines and counts as unhealthy exactly the
 * communicators without a "healthy" verdict. ASan/UBSan/LSan find the rest. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "nccl_log.h"

/* Communicators without a verdict that starts with "healthy". */
static int unhealthy(const json_t *j) {
  int bad = 0;
  size_t i, k;
  json_t *c, *v;
  json_array_foreach(json_object_get(j, "communicators"), i, c) {
    CHECK(json_is_string(json_object_get(c, "id")));
    CHECK(json_is_integer(json_object_get(c, "nranks")) && json_is_integer(json_object_get(c, "ranks_seen")));
    CHECK(json_is_object(json_object_get(c, "transports")));
    CHECK(json_array_size(json_object_get(c, "hosts")) > 0); /* every member came from a host:pid line */
    json_t *vs = json_object_get(c, "verdicts");
    CHECK(json_array_size(vs) > 0);
    int healthy = 0;
    json_array_foreach(vs, k, v) {
      CHECK(json_is_string(v));
      healthy |= strncmp(json_string_value(v), TRUN_NCCL_V_HEALTHY, strlen(TRUN_NCCL_V_HEALTHY)) == 0;
    }
    bad += !healthy;
  }
  return bad;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int efa = (size & 1) ? 4 : 0; /* with and without EFA devices known from discovery */
  trun_nccl_log *a = trun_nccl_log_new(), *b = trun_nccl_log_new();
  CHECK(a != NULL && b != NULL);
  trun_nccl_log_set_efa(a, efa);
  trun_nccl_log_set_efa(b, efa);
  /* Line by line: each line's bytes up to its first NUL (what getline + a C string give). */
  char *line = malloc(size + 1);
  CHECK(line != NULL);
  size_t start = 0;
  while (start < size) {
    const uint8_t *nl = memchr(data + start, '\n', size - start);
    size_t end = nl ? (size_t)(nl - data) + 1 : size;
    memcpy(line, data + start, end - start);
    line[end - start] = '\0';
    trun_nccl_log_feed_line(a, line);
    start = end;
  }
  free(line);
  /* As a file. */
  int fd = memfd_create("fuzz-nccl-log", MFD_CLOEXEC);
  CHECK(fd >= 0);
  for (size_t off = 0; off < size;) {
    ssize_t w = write(fd, data + off, size - off);
    CHECK(w > 0);
    off += (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  CHECK(trun_nccl_log_feed_file(b, path) == 0);
  close(fd);

  json_t *ja = trun_nccl_log_json(a), *jb = trun_nccl_log_json(b);
  CHECK(ja != NULL && jb != NULL);
  CHECK(json_equal(ja, jb));
  int bad = unhealthy(ja);
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  CHECK(m != NULL);
  CHECK(trun_nccl_log_print(a, m) == bad);
  CHECK(fclose(m) == 0);
  static const char head[] = "==== trun: NCCL transport report: ",
                    tail[] = "==== end of NCCL transport report ====\n";
  CHECK(strncmp(text, head, strlen(head)) == 0);
  CHECK(len >= strlen(tail) && strcmp(text + len - strlen(tail), tail) == 0);
  free(text);
  json_decref(ja);
  json_decref(jb);
  trun_nccl_log_free(a);
  trun_nccl_log_free(b);
  return 0;
}
