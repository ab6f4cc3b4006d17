#!/usr/bin/env python3
"""A connection flood against a store, timed from an established connection (docs/store.md, "A flood of
connections slows strangers, never the job"): conn_flood.py HOST PORT N SRC...

Opens a connection (VALIDATE + PING handshake) that PINGs every 50 ms on a thread of its own; then opens N idle
connections spread over the source addresses SRC... (under the store's per-address limit), holds them 3 s,
closes them all at once and goes on PINGing 3 s. Prints the longest PING while the connections opened and
while they closed. A figure for bench/conn_flood.sh, not a verdict."""
import resource
import socket
import struct
import sys
import threading
import time

PING = 13


def recv_exact(s, k):
    b = b""
    while len(b) < k:
        x = s.recv(k - len(b))
        if not x:
            raise EOFError("the store closed the PING connection")
        b += x
    return b


def main():
    host, port, n, srcs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    want = n + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"\x00\xce\xf7\x85\x3c" + bytes([PING]) + struct.pack("<I", 7))
    recv_exact(s, 4)
    lat, stop = [], []

    def pinger():
        i = 0
        while not stop:
            t0 = time.monotonic()
            i += 1
            s.sendall(bytes([PING]) + struct.pack("<I", i))
            recv_exact(s, 4)
            lat.append((t0, time.monotonic() - t0))
            time.sleep(0.05)

    th = threading.Thread(target=pinger, daemon=True)
    th.start()
    time.sleep(1)
    t0 = time.monotonic()
    socks = []
    for i in range(n):
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        c.bind((srcs[i % len(srcs)], 0))
        c.connect((host, port))
        socks.append(c)
    t1 = time.monotonic()
    time.sleep(3)
    t2 = time.monotonic()
    for c in socks:
        c.close()
    time.sleep(3)
    stop.append(1)
    th.join(30)

    def longest(a, b):
        xs = [l for (t, l) in lat if a <= t <= b]
        return "%.3f s (%d PINGs)" % (max(xs), len(xs)) if xs else "none answered"

    print("connects: %.2f s; longest PING while they opened: %s; while they closed: %s"
          % (t1 - t0, longest(t0, t2), longest(t2, t2 + 3)))


main()
