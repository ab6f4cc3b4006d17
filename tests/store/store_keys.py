#!/usr/bin/env python3
"""Prints every key of a TCPStore server with LIST (v2 code 17; trun-store and torch >= 2.10 libuv/classic
servers), sorted, one per line: <key as repr> <value length> <value repr, first 40 bytes>.
Usage: store_keys.py HOST PORT. No torch needed."""
import sys

from rawclient import V2, connect, recv_bytes, recv_u64, req

LIST = 17


def main(argv):
    host, port = argv[1], int(argv[2])
    s = connect(host, port, True)
    s.sendall(bytes([LIST]))
    n = recv_u64(s)
    keys = sorted(recv_bytes(s) for _ in range(n))
    for k in keys:
        s.sendall(req(V2, "GET", k))
        v = recv_bytes(s)
        print("%r %d %r" % (k, len(v), v[:40]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
