/* The agent's event stream (--events FILE or fd:N): JSON lines, one object per event, schema in
 * docs/observability.md
 * ("Events"). Writes never block the agent's loop: the descriptor is non-blocking, what the reader has
 * not taken yet waits in memory (bounded; events beyond it are dropped and counted), and a write error is
 * reported once. Every function accepts a NULL stream (events off) and does nothing. */
#ifndef TRUN_EVENTS_H
#define TRUN_EVENTS_H

#include <jansson.h>
#include <stddef.h>

typedef struct trun_events trun_events;

/* spec: a path (appended to, created 0644) or "fd:N" (an open descriptor, not closed at the end).
 * Returns 0, or -1 with a reason in err. */
int trun_events_open(const char *spec, const char *host, trun_events **out, char *err, size_t errlen);
/* The node's group rank once the rendezvous assigned it (-1: unknown, the field is left out). */
void trun_events_set_group_rank(trun_events *e, int group_rank);
/* Writes {"ts", "event", "host", "group_rank"?, ...fields}. Takes the reference to fields (may be NULL). */
void trun_events_emit(trun_events *e, const char *event, json_t *fields);
/* Events dropped because the reader did not keep up (for the final warning and tests). */
size_t trun_events_dropped(const trun_events *e);
/* Flushes what is queued (waiting at most about a second for a slow reader) and frees e. */
void trun_events_close(trun_events *e);
/* UTC ISO-8601 with microseconds, e.g. 2026-11-22T22:17:21.123456Z, for unix seconds t. */
void trun_iso8601_utc(double t, char *out, size_t len);

#endif
