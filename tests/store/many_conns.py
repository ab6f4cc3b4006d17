#!/usr/bin/env python3
"""2000 idle waiters on one trun-store (plain sockets, no torch).

Usage: many_conns.py HOST PORT SERVER_PID [N=2000]
 1. RSS of the server with no client (VmRSS of /proc/SERVER_PID/status).
 2. N connections: even ones torch >= 2.2 style (VALIDATE + PING, nonce echoed), odd ones torch 1.13 style
    (no handshake). Each sends WAIT ["/release"] (v2 code 0x06, legacy 0x05; u64 count=1, u64 keylen, key).
 3. Waits until the server has read every request (the receive queue of each of its N sockets in
    /proc/net/tcp is empty), checks that no connection got a reply yet, prints the server's RSS.
 4. One more connection SETs "/release"; every one of the N connections must receive exactly one byte 0x00.
 5. Closes all, waits until the server has dropped them, checks the server still answers on a v2 and a
    legacy connection (GET /release == b"go", GETNUMKEYS == 1) and prints the RSS again.
Exit 0 when all of that holds, 1 otherwise. The time-outs are safety limits only.
"""
import os
import resource
import selectors
import sys
import time

from rawclient import LEGACY, V2, connect, recv_bytes, recv_u64, req, wait_req

SAFETY = 120.0
KEY = "/release"


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def server_sockets(port):
    """(established sockets whose local port is port, how many of them still have unread bytes)."""
    n = busy = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    p = line.split()
                    if p[3] != "01" or int(p[1].rsplit(":", 1)[1], 16) != port:
                        continue
                    n += 1
                    if int(p[4].split(":")[1], 16) != 0:
                        busy += 1
        except FileNotFoundError:
            pass
    return n, busy


def wait_until(pred, what):
    deadline = time.monotonic() + SAFETY
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError("gave up waiting (%ds safety limit): %s" % (SAFETY, what))
        time.sleep(0.05)


def main(argv):
    host, port, pid = argv[1], int(argv[2]), int(argv[3])
    n = int(argv[4]) if len(argv) > 4 else 2000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 200
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            print("RLIMIT_NOFILE hard limit %d < %d" % (hard, want), file=sys.stderr)
            return 77
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    print("RLIMIT_NOFILE soft %d hard %d (needed %d)" % (max(soft, want), hard, want), flush=True)

    fails = 0

    def check(cond, msg):
        nonlocal fails
        print(("ok   " if cond else "FAIL ") + msg, flush=True)
        fails += 0 if cond else 1

    rss0 = rss_kib(pid)
    print("server RSS with 0 connections: %d KiB" % rss0, flush=True)

    conns = []
    for i in range(n):
        v2 = i % 2 == 0
        s = connect(host, port, v2, SAFETY)  # v2: VALIDATE + PING round trip
        s.sendall(wait_req(V2 if v2 else LEGACY, [KEY]))
        conns.append(s)
    print("opened %d connections (%d v2 with handshake, %d legacy 1.13), each sent WAIT [%s]"
          % (n, (n + 1) // 2, n // 2, KEY), flush=True)

    def all_read():
        est, busy = server_sockets(port)
        return est >= n and busy == 0
    wait_until(all_read, "server reads all %d WAIT requests" % n)
    est, _ = server_sockets(port)
    check(est == n, "server holds %d established connections (want %d)" % (est, n))

    sel = selectors.DefaultSelector()
    for i, s in enumerate(conns):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    early = sel.select(timeout=0)
    check(not early, "no connection got a reply before the key exists (%d did)" % len(early))

    rss_n = rss_kib(pid)
    print("server RSS with %d waiting connections: %d KiB (+%d KiB, %.2f KiB per connection)"
          % (n, rss_n, rss_n - rss0, (rss_n - rss0) / n), flush=True)

    rel = connect(host, port, True, SAFETY)
    rel.sendall(req(V2, "SET", KEY, b"go"))
    got = {}
    deadline = time.monotonic() + SAFETY
    while len(got) < n and time.monotonic() < deadline:
        for skey, _ in sel.select(timeout=1.0):
            i = skey.data
            try:
                data = conns[i].recv(16)
            except BlockingIOError:
                continue
            got[i] = got.get(i, b"") + data
            if data == b"" or len(got[i]) >= 1:
                sel.unregister(conns[i])
    good = sum(1 for v in got.values() if v == b"\x00")
    bad = {i: v for i, v in got.items() if v != b"\x00"}
    check(len(got) == n, "%d of %d connections answered after SET %s" % (len(got), n, KEY))
    check(good == n, "%d of %d received exactly the byte 0x00 (wrong: %s)" % (good, n, list(bad.items())[:5]))
    # Nothing more must follow the single STOP_WAITING byte.
    extra = 0
    for s in conns:
        try:
            if s.recv(16):
                extra += 1
        except BlockingIOError:
            pass
    check(extra == 0, "no connection received more than one byte (%d did)" % extra)
    rss_after = rss_kib(pid)
    print("server RSS after the release: %d KiB" % rss_after, flush=True)

    for s in conns:
        s.close()
    sel.close()
    rel.close()
    wait_until(lambda: server_sockets(port)[0] == 0, "server closes its %d sockets" % (n + 1))
    check(os.path.exists("/proc/%d" % pid), "server process %d still alive" % pid)
    a = connect(host, port, True, SAFETY)
    a.sendall(req(V2, "GET", KEY))
    check(recv_bytes(a) == b"go", "v2 client: GET %s == b'go'" % KEY)
    a.sendall(req(V2, "GETNUMKEYS"))
    check(recv_u64(a) == 1, "v2 client: GETNUMKEYS == 1")
    b = connect(host, port, False, SAFETY)
    b.sendall(req(LEGACY, "GET", KEY))
    check(recv_bytes(b) == b"go", "legacy client: GET %s == b'go'" % KEY)
    b.sendall(req(LEGACY, "WAIT", ("u64", 1), KEY))
    check(b.recv(1) == b"\x00", "legacy client: WAIT on the present key answers at once")
    a.close()
    b.close()
    rss_end = rss_kib(pid)
    print("server RSS after closing all: %d KiB" % rss_end, flush=True)
    print("RSS summary: 0 conns %d KiB, %d conns %d KiB, after release %d KiB, after close %d KiB"
          % (rss0, n, rss_n, rss_after, rss_end), flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
