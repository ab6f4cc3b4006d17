"""Holds many idle TCP connections to a store (tests/integration/57): idle_conns.py HOST PORT N LOG SRC...

Opens N connections to HOST:PORT, spread evenly over the source addresses SRC... (each bound before it
connects, so that no single address passes the store's per-address limit), sends nothing, and holds them
until SIGTERM, then closes them all and exits 0. Raises its own RLIMIT_NOFILE to N + 64 first. Writes to LOG
"open K" once all connections are up (K = how many the server accepted: a refused or reset connect counts
as not open) and "closed K" on SIGTERM. Exits 1 (with the reason in LOG) if it cannot raise its fd limit.
"""
import resource
import signal
import socket
import sys
import time

host, port, n, log, srcs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]


def note(msg):
    with open(log, "a") as f:
        f.write(msg + "\n")


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = n + 64
try:
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
except (ValueError, OSError) as e:
    note("cannot raise RLIMIT_NOFILE from %d/%d to %d: %s" % (soft, hard, want, e))
    sys.exit(1)

stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
socks = []
failed = 0
for i in range(n):
    if stop:
        break
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.settimeout(10)
    try:
        s.bind((srcs[i % len(srcs)], 0))
        s.connect((host, port))
        socks.append(s)
    except OSError as e:
        failed += 1
        if failed == 1:
            note("connection %d from %s failed: %s" % (i, srcs[i % len(srcs)], e))
        s.close()
# A connection the server closed (limit reached) reads EOF: do not count it.
time.sleep(1)
alive = 0
for s in socks:
    s.setblocking(False)
    try:
        alive += s.recv(1) != b""
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
note("open %d" % alive)
while not stop:
    time.sleep(0.2)
for s in socks:
    s.close()
note("closed %d" % len(socks))
