/* Where trun runs: Slurm, Kubeflow PyTorchJob v1, Kubeflow Trainer v2, JobSet / Indexed Job, MPI Operator.
 * Detection turns the scheduler's environment into settings (node count, node rank, master address, ...) that
 * fill what the user did not give: detected < config file < environment (PET_*) < command line. The rules are
 * in config/README.md ("Detected platforms"). TRUN_PLATFORM=none turns detection off; TRUN_PLATFORM=<name>
 * insists on one platform. */
#ifndef TRUN_PLATFORM_H
#define TRUN_PLATFORM_H

#include <stddef.h>

#include "config/config.h"

typedef struct {
  const char *hostname;                   /* this host's name (gethostname) */
  const char *fqdn;                       /* its fully qualified name, or NULL to ask fqdn_fn when needed */
  void (*fqdn_fn)(char *out, size_t len); /* may be NULL */
  const char *mpi_hostfile;               /* the MPI Operator's default hostfile, /etc/mpi/hostfile */
} trun_platform_host;

typedef struct {
  const char *name;                 /* "slurm", "kubeflow-trainer-v2", ...; NULL when none was detected */
  char *val[TRUN_OPT__COUNT];       /* detected value text, NULL when not detected */
  const char *why[TRUN_OPT__COUNT]; /* where it came from, e.g. "SLURM_NNODES" */
  char note[768];                   /* what could not be detected and what to do; "" when nothing */
} trun_platform;

/* Returns 0 (out->name NULL when no platform matched), or -1 with a one-line reason in err when the
 * platform's variables are malformed or TRUN_PLATFORM names an unknown platform (the caller exits 2). */
int trun_platform_detect(char **envp, const trun_platform_host *host, trun_platform *out, char *err,
                         size_t errlen);
/* Gives detected values to the options of cl still at their defaults. cl keeps pointers into p. */
void trun_platform_apply(const trun_platform *p, trun_settings *cl);
void trun_platform_free(trun_platform *p);

/* Slurm hostlist expansion: "node[01-04,07],gpu-a[1-2]-b[1-2],login" -> node01 node02 node03 node04 node07
 * gpu-a1-b1 gpu-a1-b2 gpu-a2-b1 gpu-a2-b2 login. Numbers keep the width of the range's first bound.
 * Returns 0 with a malloc'd array of *n malloc'd names, or -1 with a reason in err. At most 100000 hosts. */
int trun_hostlist_expand(const char *list, char ***hosts, int *n, char *err, size_t errlen);
void trun_hostlist_free(char **hosts, int n);

#endif
