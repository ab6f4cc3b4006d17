/* trun: a torchrun peer. `trun [torchrun options] script [script args]`, `trun --config job.yaml [...]`.
 * Settings: command line > environment (PET_*) > config file > detected platform > defaults.
 * Exit codes: 0 success, 1 a worker failed / stopped by a signal / rendezvous failed, 2 bad command line,
 * config file or environment. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/nccl/nccl.h"
#include "agent/rdzv/rdzv.h"
#include "base/base.h"
#include "cli.h"
#include "config/config.h"
#include "hostfile.h"
#include "platform.h"
#include "secret.h"

#ifndef TRUN_VERSION_STRING /* from build/gen/trun_version.h, which the Makefile writes from VERSION */
#define TRUN_VERSION_STRING "unknown"
#endif

extern char **environ;

/* Platform detection, then the config file, then the typed config. Returns 0, or 2 after printing why. */
static int resolve(trun_settings *cl, trun_platform *plat, trun_yaml_doc *doc, trun_config *cfg) {
  char err[1024], host[256] = "";
  if (gethostname(host, sizeof(host)) != 0) host[0] = '\0';
  host[sizeof(host) - 1] = '\0';
  trun_platform_host h = {.hostname = host, .fqdn_fn = trun_fqdn, .mpi_hostfile = "/etc/mpi/hostfile"};
  if (trun_platform_detect(environ, &h, plat, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s\n", err);
    return 2;
  }
  trun_platform_apply(plat, cl);
  const char *path = cl->v[TRUN_OPT_CONFIG].val;
  if (path) {
    if (trun_yaml_load(path, doc, err, sizeof(err)) < 0) {
      fprintf(stderr, "trun: error: %s\n", err);
      return 2;
    }
    trun_yaml_apply(doc, cl);
  }
  if (!cl->script && !cl->v[TRUN_OPT_PRINT_CONFIG].val && !cl->v[TRUN_OPT_EXPLAIN].val &&
      !cl->v[TRUN_OPT_RDZV_STATUS].val && !cl->v[TRUN_OPT_LIST_EXCLUDED].val) {
    fprintf(stderr, "trun: error: no training script: give it on the command line%s%s\n",
            path ? " or as 'script:' in " : "", path ? path : "");
    return 2;
  }
  if (trun_config_from_settings(cl, environ, cfg, err, sizeof(err)) < 0) {
    size_t n = path ? strlen(path) : 0; /* a value from the file: "file:line:column: message" as it is */
    int in_file = path && strncmp(err, path, n) == 0 && err[n] == ':';
    fprintf(stderr, "trun: error: %s%s\n", err, in_file ? "" : " (run 'trun --help' for the options)");
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  trun_log_set_prog("trun");
  /* First: the agent token out of /proc/<pid>/environ and cmdline (secret.h). */
  if ((argv = trun_secret_hide(argc, argv)) == NULL) return 1;
  trun_settings cl;
  char err[1024];
  if (trun_cli_parse(argc, argv, environ, &cl, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s (run 'trun --help' for the options)\n", err);
    return 2;
  }
  if (cl.help) {
    trun_cli_help(stdout);
    return 0;
  }
  if (cl.version) {
    printf("trun %s\n", TRUN_VERSION_STRING);
    return 0;
  }
  trun_platform plat;
  trun_yaml_doc doc;
  trun_config cfg;
  memset(&plat, 0, sizeof(plat));
  memset(&doc, 0, sizeof(doc));
  int code = resolve(&cl, &plat, &doc, &cfg);
  if (code == 0 && cfg.print_config) {
    trun_print_config(stdout, &cl, 0);
  } else if (code == 0 && cfg.rdzv_status) {
    code = trun_rdzv_status(&cfg, stdout);
  } else if (code == 0 && cfg.list_excluded) {
    code = trun_rdzv_excluded_print(&cfg, cfg.list_excluded, stdout);
  } else if (code == 0 && cfg.explain) {
    code = trun_explain(&cfg, environ, stdout);
  } else if (code == 0 && cl.v[TRUN_OPT_HOSTFILE].val && *cl.v[TRUN_OPT_HOSTFILE].val) {
    code = trun_hostfile_launch(&cl, &cfg, environ, stdout);
  } else if (code == 0 && trun_agent_check_script(&cfg, environ, err, sizeof(err)) < 0) {
    fprintf(stderr, "trun: error: %s\n", err);
    code = 2;
  } else if (code == 0 && cfg.dry_run) {
    trun_print_config(stdout, &cl, 1);
    code = trun_agent_dry_run(&cfg, environ, stdout);
  } else if (code == 0) {
    code = trun_agent_run(&cfg, environ);
  }
  trun_yaml_free(&doc);
  trun_platform_free(&plat);
  return code;
}
