/* trun-store: the TCPStore server and load generator.
 * Exit codes: 0 ok, 1 runtime failure, 2 bad command line. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "store_tool.h"

#ifndef TRUN_VERSION_STRING /* from build/gen/trun_version.h, which the Makefile writes from VERSION */
#define TRUN_VERSION_STRING "unknown"
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: trun-store <command> [options]\n"
          "  serve   run a TCPStore server (torch 1.13 ... 2.11 clients on one port)\n"
          "  bench   load generator: ops/s and latency of any TCPStore server, one JSON line\n"
          "  cli     run store operations (set, get, add, wait, ...) against any TCPStore server\n"
          "Run 'trun-store <command> --help' for its options; 'trun-store --version' prints the version.\n");
}

int main(int argc, char **argv) {
  trun_log_set_prog("trun-store");
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "serve") == 0) return trun_store_serve_main(argc - 1, argv + 1);
  if (strcmp(argv[1], "bench") == 0) return trun_store_bench_main(argc - 1, argv + 1);
  if (strcmp(argv[1], "cli") == 0) return trun_store_cli_main(argc - 1, argv + 1);
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("trun-store %s\n", TRUN_VERSION_STRING);
    return 0;
  }
  fprintf(stderr, "trun-store: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
