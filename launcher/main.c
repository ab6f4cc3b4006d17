/* trun: a torchrun peer. `trun [torchrun options] script [script args]`.
 * Exit codes: 0 success, 1 a worker failed / stopped by a signal / rendezvous failed, 2 bad command line. */
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "cli.h"
#include "config.h"
#include "log.h"
#include "nccl_env.h"

#ifndef TRUN_VERSION
#define TRUN_VERSION "0.1.0"
#endif

extern char **environ;

int main(int argc, char **argv) {
  trun_log_set_prog("trun");
  trun_cmdline cl;
  char err[512];
  if (trun_cli_parse(argc, argv, environ, &cl, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  if (cl.help) {
    trun_cli_help(stdout);
    return 0;
  }
  if (cl.version) {
    printf("trun %s (torchrun-compatible command line and worker environment)\n", TRUN_VERSION);
    return 0;
  }
  trun_config cfg;
  if (trun_config_from_cmdline(&cl, environ, &cfg, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  if (cfg.explain) return trun_explain(&cfg, environ, stdout);
  if (cfg.dry_run) return trun_agent_dry_run(&cfg, environ, stdout);
  return trun_agent_run(&cfg, environ);
}
