/* A loopback TCP port held for this process's workers: a socket bound to a free port of 127.0.0.1 with
 * SO_REUSEPORT and not listening. While it is open the kernel hands the port to no other ephemeral bind, and
 * every other user's bind is refused, whatever its options (SO_REUSEPORT shares a port between sockets of one
 * user only; the held socket has no SO_REUSEADDR, which would let any user's SO_REUSEADDR socket bind and
 * listen there while nothing listens), as is a plain bind of this user's; a process of this user that binds
 * it with SO_REUSEPORT (NCCL's RAS: with SO_REUSEADDR too) listens on it beside the held socket; connections
 * go to listeners only. The socket is bound by the port's number, so that it keeps the port when it has
 * listened and stops (shutdown(SHUT_RD), as relay.h does). */
#ifndef TRUN_PORTHELD_H
#define TRUN_PORTHELD_H

/* The held socket (close it to free the port) with its port in *port; or -errno with *step naming the call
 * that failed ("socket", "bind(127.0.0.1:0)", ...: no loopback in this network namespace, say). */
int trun_port_hold(unsigned *port, const char **step);

#endif
