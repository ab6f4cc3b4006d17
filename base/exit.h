/* The exit codes of trun's programs: one table, kept by every path that ends a job (the agent, the
 * --hostfile launcher, trun-topo health; trun-store and the other tools use 0, 1 and 2 with the same
 * meanings). `trun --help` prints it; README.md, docs/cli.md, docs/man/trun.1 and k8s/README.md carry the
 * same short meanings (test 48 compares them with --help). A scheduler's rules act on it: drain on 3 only,
 * requeue on 1 and 4 (and 6 elsewhere), never on 2 or 5. */
#ifndef TRUN_EXIT_H
#define TRUN_EXIT_H

#define TRUN_EXIT_OK 0        /* every worker succeeded */
#define TRUN_EXIT_FAILED 1    /* the job failed (restarts used up, a stop signal, the rendezvous failed) */
#define TRUN_EXIT_USAGE 2     /* bad input: command line, config file, environment */
#define TRUN_EXIT_UNHEALTHY 3 /* this node's hardware or kernel is bad: drain or replace the node */
#define TRUN_EXIT_CUT_OFF 4   /* this node lost the job's network (rendezvous store): requeue, do not drain */
#define TRUN_EXIT_NO_PROGRESS 5 /* restarts make no progress: do not requeue */
#define TRUN_EXIT_EXCLUDED 6    /* the job excluded this node for what its workers did, not its hardware */

typedef struct {
  int code;
  const char *meaning; /* the short meaning every document repeats verbatim */
  const char *detail;  /* what makes it */
} trun_exit_info;

/* The table, in code order; n gets its length. */
const trun_exit_info *trun_exit_table(int *n);
/* The entry of code, NULL for a code outside the table. */
const trun_exit_info *trun_exit_info_of(int code);
/* Of two nodes' codes, the one the job ends with (trun --hostfile): the code that forbids a retry first,
 * then the one that names a node to act on, then the rest: 2 > 5 > 3 > 6 > 4 > 1 > 0. A code outside the
 * table counts as 1. */
int trun_exit_worst(int a, int b);

#endif
