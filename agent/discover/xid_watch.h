/* The Xid watcher: during the job a short-lived NVML child (nvml_child.h; the agent never maps NVML) waits
 * for critical Xid events (nvmlEventTypeXidCriticalError) of the GPUs it is given and reports each on a pipe
 * the agent's loop polls. trun_xid_meaning says what an Xid means (NVIDIA's Xid catalog, in our words) and
 * whether it is the hardware's: the node should then leave the job. */
#ifndef TRUN_XID_WATCH_H
#define TRUN_XID_WATCH_H

#include <stddef.h>

typedef struct trun_xid_watch trun_xid_watch;

typedef struct {
  int gpu;                /* index into the uuids the watcher was given; -1: NVML could not say which */
  unsigned long long xid; /* 999: NVML's "unknown Xid" */
  double time;            /* unix seconds when the agent read it */
} trun_xid_event;

/* Starts the watcher for the GPUs uuids[0..n) (n <= 64). NULL when n is 0 or no process can be made. */
trun_xid_watch *trun_xid_watch_start(const char (*uuids)[96], int n);
/* The descriptor that becomes readable when the watcher wrote something (for the agent's loop). */
int trun_xid_watch_fd(const trun_xid_watch *w);
/* What the watcher wrote since the last call: up to max events into ev and their number; *ready is set to 1
 * once it listens (at least one GPU registered). -1 once it ended: err says why (no NVML, no GPU reports Xid
 * events). Never blocks. */
int trun_xid_watch_read(trun_xid_watch *w, trun_xid_event *ev, int max, int *ready, char *err, size_t errlen);
/* Ends the watcher and frees w (NULL: nothing). */
void trun_xid_watch_stop(trun_xid_watch *w);

/* What Xid xid means, in a few words ("GPU has fallen off the bus"); *hardware = 1 when it means the GPU,
 * its memory, its NVLinks or its bus failed (48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154), 0 for
 * an application or driver error that the job's own failure handling covers (13, 31, 43, ...) and for an
 * Xid trun does not know. */
const char *trun_xid_meaning(unsigned long long xid, int *hardware);

#endif
