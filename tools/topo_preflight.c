/* `trun-topo preflight [trun-preflight options]`: the NCCL preflight for this node alone. A one-line skip
 * when no GPU is visible; otherwise it execs the trun next to this binary as
 *   trun --standalone --nproc-per-node <GPUs> --no-python <dir>/trun-preflight [options]
 * so the ranks, the store for the NCCL id and the process handling are trun's own. Exit: trun's (0 pass or
 * warn, 1 when a rank failed or measured a fail verdict), 0 for the skip, 2 usage. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/discover/discover.h"

extern char **environ;

int trun_topo_preflight(int argc, char **argv);

static int self_dir(char *out, size_t len) {
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  if (n <= 0) return -1;
  out[n] = '\0';
  char *slash = strrchr(out, '/');
  if (slash == NULL) return -1;
  *slash = '\0';
  return 0;
}

int trun_topo_preflight(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf(
          "usage: trun-topo preflight [trun-preflight options]\n"
          "  Runs trun-preflight on every GPU of this node through trun --standalone; see\n"
          "  trun-preflight --help for the options. No GPU: prints one line and exits 0.\n");
      return 0;
    }
  trun_node *n = calloc(1, sizeof(*n));
  char err[512];
  if (n == NULL) return 1;
  if (trun_discover_gpus(n, environ, err, sizeof(err)) < 0) fprintf(stderr, "trun-topo: GPUs: %s\n", err);
  int ngpu = n->ngpu;
  free(n);
  if (ngpu == 0) {
    printf("trun-topo preflight: skipped: no GPU visible on this host\n");
    return 0;
  }
  char dir[PATH_MAX], trun[PATH_MAX + 16], pf[PATH_MAX + 32], np[16];
  if (self_dir(dir, sizeof(dir)) < 0) {
    fprintf(stderr, "trun-topo preflight: cannot find my own directory (/proc/self/exe)\n");
    return 1;
  }
  snprintf(trun, sizeof(trun), "%s/trun", dir);
  snprintf(pf, sizeof(pf), "%s/trun-preflight", dir);
  snprintf(np, sizeof(np), "%d", ngpu);
  char **av = calloc((size_t)argc + 8, sizeof(char *));
  if (av == NULL) return 1;
  int k = 0;
  av[k++] = trun;
  av[k++] = "--standalone";
  av[k++] = "--nproc-per-node";
  av[k++] = np;
  av[k++] = "--no-python";
  av[k++] = pf;
  for (int i = 1; i < argc; i++) av[k++] = argv[i];
  av[k] = NULL;
  execv(trun, av);
  fprintf(stderr, "trun-topo preflight: cannot run %s: %s (build it with make)\n", trun, strerror(errno));
  free(av);
  return 1;
}
