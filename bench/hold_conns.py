"""Holds N TCPStore connections, each with a pending WAIT, reads the server's RSS, then releases them all.

Usage: hold_conns.py PORT N GEN(v2|1.13) SERVER_PID   -> one JSON line on stdout.
Plain sockets, no torch: the same bytes torch's clients send (see shared/spec/tcpstore-protocol.md).
"""
import json
import resource
import selectors
import socket
import struct
import sys
import time

port, n, gen, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
KEY = b"/release"
if gen == "v2":
    hello = b"\x00" + struct.pack("<I", 0x3C85F7CE)
    wait = b"\x06" + struct.pack("<QQ", 1, len(KEY)) + KEY
    set_ = b"\x01" + struct.pack("<Q", len(KEY)) + KEY + struct.pack("<Q", 1) + b"1"
else:
    hello = b""
    wait = b"\x05" + struct.pack("<QQ", 1, len(KEY)) + KEY
    set_ = b"\x00" + struct.pack("<Q", len(KEY)) + KEY + struct.pack("<Q", 1) + b"1"


def rss_kb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(hello + wait)
    socks.append(s)
time.sleep(1.0)  # let the server take every request in
held = rss_kb()
c = socket.create_connection(("127.0.0.1", port))
c.sendall(hello + set_)
sel = selectors.DefaultSelector()
for s in socks:
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
got, deadline = 0, time.time() + 120
while got < n and time.time() < deadline:
    for key, _ in sel.select(timeout=1):
        data = key.fileobj.recv(16)
        sel.unregister(key.fileobj)
        got += data == b"\x00"
released = rss_kb()
for s in socks:
    s.close()
c.close()
print(json.dumps({"connections": n, "rss_held_kb": held, "rss_after_release_kb": released, "released": got}))
sys.exit(0 if got == n else 1)
