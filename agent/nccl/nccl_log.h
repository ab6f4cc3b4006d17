/* NCCL INFO log reader: which transport each communicator uses between its ranks, and what that means.
 * Reads the lines NCCL prints with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,NET (facts: shared/spec/
 * gpu-efa-nccl.md §4 "Reading INFO logs"):
 *   "comm 0x.. rank R nRanks N nNodes K localRanks L ..."   (a communicator as one process sees it)
 *   "... comm 0x.. rank R nranks N ... commId 0x.. - Init COMPLETE"
 *   "Channel CC/c : R[d] -> R[d] [send|receive] via P2P/..|SHM/..|NET/<name>/<dev>[/GDRDMA]"
 * Grouping: a process is host:pid from the line prefix; a channel line belongs to the communicator whose
 * "comm 0x" line came from the same thread, else to the process's latest one (NCCL >= 2.27 connects from
 * other threads). Processes' communicators are the same communicator when their commId matches, else when
 * they have the same nRanks and the same creation order among that process's communicators of that size.
 * A connection is (channel, source rank, destination rank); both ends' lines count once. */
#ifndef TRUN_NCCL_LOG_H
#define TRUN_NCCL_LOG_H

#include <jansson.h>
#include <stdio.h>

typedef struct trun_nccl_log trun_nccl_log;

trun_nccl_log *trun_nccl_log_new(void);
void trun_nccl_log_free(trun_nccl_log *l);
/* One log line (without or with its newline), in file order. */
void trun_nccl_log_feed_line(trun_nccl_log *l, const char *line);
/* Every line of path. 0 or a negative errno. */
int trun_nccl_log_feed_file(trun_nccl_log *l, const char *path);
/* EFA devices known to exist where the job ran (the agent's discovery); the log's own "NET/OFI Selected
 * provider is efa" lines count too. */
void trun_nccl_log_set_efa(trun_nccl_log *l, int efa_devices);
/* {"communicators":[{"id","nranks","nnodes","local_ranks","ranks_seen","hosts","init_complete",
 *   "transports":{name:connections},"pairs":[{"src","dst","transport","channels"}],"verdicts":[...]}],
 *  "efa_seen": bool}. pairs: the transport for each peer pair (source -> destination rank) with its number of
 * channels, sorted by source, destination, transport. Caller json_decref's. */
json_t *trun_nccl_log_json(trun_nccl_log *l);
/* The same as a human-readable block ("NCCL transport report"): per communicator its transports, then one
 * line per peer pair ("rank 0 -> rank 1: P2P/CUMEM (24 channels)", at most TRUN_NCCL_PRINT_PAIRS of them)
 * and the verdicts. Returns the number of communicators with a problem verdict (not "healthy"). */
int trun_nccl_log_print(trun_nccl_log *l, FILE *out);

#define TRUN_NCCL_PRINT_PAIRS 64

/* The verdict texts (a verdict string starts with one of these). */
#define TRUN_NCCL_V_SPLIT "intra-host traffic over NET/"
#define TRUN_NCCL_V_EFA_UNUSED \
  "inter-node over NET/Socket while EFA devices exist: the EFA plugin was not used"
#define TRUN_NCCL_V_HEALTHY "healthy"

#endif
