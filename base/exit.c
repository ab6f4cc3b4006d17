/* The exit code table (exit.h): its entries and the order in which --hostfile picks a job's code. */
#include "exit.h"

#include <stddef.h>

static const trun_exit_info table[] = {
    {TRUN_EXIT_OK, "every worker succeeded", "the job is done"},
    {TRUN_EXIT_FAILED, "the job failed",
     "a worker failed after the restarts, a signal stopped the agent, or the rendezvous failed"},
    {TRUN_EXIT_USAGE, "bad input", "a bad command line, config file or environment value; one line names it"},
    {TRUN_EXIT_UNHEALTHY, "this node is unhealthy: drain or replace it",
     "a failed health check with --health-check fail, a hardware Xid, a failed local preflight, or a worker "
     "that SIGKILL cannot end: a driver or file system hang"},
    {TRUN_EXIT_CUT_OFF, "this node was cut off from the job: requeue, do not drain",
     "no answer from the rendezvous store while its workers ran, or refused while excluded as cut off"},
    {TRUN_EXIT_NO_PROGRESS, "restarts make no progress: do not requeue",
     "a crash loop, or the job's restarts spent after requeues"},
    {TRUN_EXIT_EXCLUDED, "this node is excluded by the job, not for its hardware: do not drain",
     "its workers failed first round after round, --rdzv-conf trun_exclude_failures"},
};

const trun_exit_info *trun_exit_table(int *n) {
  *n = (int)(sizeof(table) / sizeof(table[0]));
  return table;
}

const trun_exit_info *trun_exit_info_of(int code) {
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (table[i].code == code) return &table[i];
  return NULL;
}

/* Higher: the job's code. */
static int rank(int code) {
  switch (code) {
    case TRUN_EXIT_OK: return 0;
    case TRUN_EXIT_CUT_OFF: return 2;
    case TRUN_EXIT_EXCLUDED: return 3;
    case TRUN_EXIT_UNHEALTHY: return 4;
    case TRUN_EXIT_NO_PROGRESS: return 5;
    case TRUN_EXIT_USAGE: return 6;
    default: return 1; /* 1, and anything else (ssh's 255, a signal) as 1 */
  }
}

int trun_exit_worst(int a, int b) {
  int ra = rank(a), rb = rank(b);
  int w = ra >= rb ? a : b;
  return rank(w) == 1 ? TRUN_EXIT_FAILED : w;
}
