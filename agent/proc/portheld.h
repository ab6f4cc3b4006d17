/* A loopback TCP port held for this process's workers: a socket bound to 127.0.0.1:0 with SO_REUSEADDR and
 * SO_REUSEPORT and never listened on. While it is open the kernel hands the port to no other ephemeral bind,
 * and a plain bind or another user's (SO_REUSEPORT shares a port between sockets of one user only) is
 * refused, while a process of this user that binds it with the same two options (NCCL's RAS) listens on it
 * beside the held socket; connections go to listeners only. */
#ifndef TRUN_PORTHELD_H
#define TRUN_PORTHELD_H

/* The held socket (close it to free the port) with its port in *port; or -errno with *step naming the call
 * that failed ("socket", "bind(127.0.0.1:0)", ...: no loopback in this network namespace, say). */
int trun_port_hold(unsigned *port, const char **step);

#endif
