/* store: the TCPStore library. A server that speaks both torch wire generations on one port (server.h, on
 * a libuv loop) and a blocking client (client.h), over byte slices and the wire codec (codec.h). The
 * trun-store program (tools/store*.c) is built from it.
 * Its face is the client and the server (with the wire's types they take); the key space (kv.h) and the
 * server's connections (server_int.h) stay inside.
 * May use: base; libc and libuv. Used by the rendezvous (agent/rdzv), observe and the programs. */
#ifndef TRUN_STORE_H
#define TRUN_STORE_H

#include "base/base.h"
#include "client.h"
#include "server.h"

#endif
