/* A bounded TCP relay on a libuv loop: it listens on a socket the caller bound (a held port, portheld.h) and
 * joins each client it accepts to the first of its targets (numeric IPv4 addresses) that accepts a
 * connection, then copies bytes both ways, in order, half-closes as each side does, and closes the pair when
 * either side resets. The agent uses it on the job's NCCL RAS port when the workers' RAS serves on ports of
 * their own (--warm-start-nccl), so that a tool that asks NCCL_RAS_ADDR still reaches a worker.
 *
 * Clients are untrusted (any local user can connect): at most max_clients at once (one beyond is closed at
 * once), and at most max_pending bytes queued toward either side of a pair before the relay stops reading the
 * other (so a side that does not read holds the other back instead of the relay's memory growing). The
 * relay parses nothing. */
#ifndef TRUN_PROC_RELAY_H
#define TRUN_PROC_RELAY_H

#include <stddef.h>
#include <uv.h>

#define TRUN_RELAY_MAX_TARGETS 8

typedef struct trun_relay trun_relay;

typedef struct {
  int max_clients;    /* connected at once */
  size_t max_pending; /* bytes queued toward one side of a pair before reading the other side stops */
} trun_relay_limits;

typedef struct {
  int clients;               /* pairs open now */
  size_t pending;            /* bytes read and not yet written, all pairs */
  unsigned long accepted;    /* clients joined to a target */
  unsigned long turned_away; /* clients closed at once: max_clients were open */
  unsigned long no_target;   /* clients closed: no target accepted them */
} trun_relay_stats;

/* Listens on a duplicate of fd (a bound TCP socket; the caller keeps and closes its own fd) and relays each
 * client to the targets trun_relay_targets sets (none at first: clients are closed). 0 with *out set, or a
 * negative errno with *step naming the call that failed. */
int trun_relay_open(uv_loop_t *loop, int fd, const trun_relay_limits *lim, trun_relay **out,
                    const char **step);
/* The targets of clients accepted from now on, "a.b.c.d:port" each, tried in this order; pairs already
 * joined keep theirs. Returns how many of addrs were taken (at most TRUN_RELAY_MAX_TARGETS; one that is not
 * a numeric IPv4 address and port is left out). */
int trun_relay_targets(trun_relay *r, const char (*addrs)[64], int n);
void trun_relay_stats_get(const trun_relay *r, trun_relay_stats *st);
/* Stops listening (the caller's fd stays bound: the port is held as before) and closes every pair; r is
 * freed once the loop has run the close callbacks. */
void trun_relay_close(trun_relay *r);

#endif
