/* store: the TCPStore library. A server that speaks both torch wire generations on one port (server.h, on
 * a libuv loop), a blocking client (client.h), and the pieces every module of trun shares: growable buffers
 * and byte slices (buf.h), one-line diagnostics (log.h), and closing a child's inherited descriptors on any
 * glibc (closefrom.h). The trun-store program (main.c, serve.c, bench.c, cli.c, tool.c) is built from it.
 * May use: nothing of trun's (libc, libuv). Every other module may use it. */
#ifndef TRUN_STORE_H
#define TRUN_STORE_H

#include "buf.h"
#include "client.h"
#include "closefrom.h"
#include "log.h"
#include "server.h"

#endif
