#!/usr/bin/env python3
"""Hostile clients against a running trun-store (plain sockets, no torch): hostile.py CASE HOST PORT PID.

Cases (each prints '# ...' lines with the figures it measured and exits 0 when the server held, 1 when not):
  multiget   SET a 1 MiB key, then one ~4.8 KB MULTI_GET naming it 400 times from a client that never
             reads (the issue's probe: a 400 MiB reply). The server's RSS must stay under RSS_BOUND_MB more
             than before, and a second client must be answered meanwhile.
  pipeline   400 GETs of the 1 MiB key in one write from a client that does not read: the server holds the
             requests (RSS bounded as above) and runs them as the client reads; all 400 replies arrive.
  trickle N  CHECK of N empty keys sent 16 keys a write, 0.2 ms apart (TCP_NODELAY); prints the server's CPU seconds
             (utime + stime from /proc/PID/stat) the request cost; the answer must be NOT_READY.
  resets     30 clients each ask for 8 MiB of replies and reset the connection mid-reply; the last 20
             SET a key and WAIT on another first. The server must keep answering.
  many       200 clients at once: half never read a 1 MiB GET, half PING; every PING answered.
The V2 wire format: VALIDATE handshake, then one code byte, u64 lengths, little-endian."""
import os
import socket
import struct
import sys
import time

RSS_BOUND_MB = int(os.environ.get("RSS_BOUND_MB", "100"))
SET, GET, CHECK, WAIT, MULTI_GET, PING = 1, 3, 5, 6, 10, 13


def s_str(b):
    return struct.pack("<Q", len(b)) + b


def connect(host, port, rcvbuf=None):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"\x00\xce\xf7\x85\x3c" + bytes([PING]) + struct.pack("<I", 7))
    if recv_exact(s, 4) != struct.pack("<I", 7):
        raise SystemExit("FAIL: handshake answered wrongly")
    return s


def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        k = s.recv(min(n - len(b), 1 << 20))
        if not k:
            raise EOFError("connection closed after %d of %d bytes" % (len(b), n))
        b += k
    return bytes(b)


def ping(s, nonce):
    s.sendall(bytes([PING]) + struct.pack("<I", nonce))
    if recv_exact(s, 4) != struct.pack("<I", nonce):
        raise SystemExit("FAIL: PING answered wrongly")


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid, other):
    """Waits until the server's RSS stopped growing for 20 checks in a row (PINGs on other between), returns
    the peak seen. Polls a condition; no timing is asserted."""
    peak, same = rss_mb(pid), 0
    while same < 20:
        ping(other, 1)
        time.sleep(0.05)
        r = rss_mb(pid)
        same = same + 1 if r <= peak + 0.5 else 0
        peak = max(peak, r)
    return peak


def put_big(host, port, n=1 << 20):
    s = connect(host, port)
    s.sendall(bytes([SET]) + s_str(b"/big") + s_str(b"v" * n))
    ping(s, 2)
    return s


def case_multiget(host, port, pid):
    other = put_big(host, port)
    before = settle(pid, other)
    c = connect(host, port, rcvbuf=4096)
    req = bytes([MULTI_GET]) + struct.pack("<Q", 400) + s_str(b"/big") * 400
    c.sendall(req)
    peak = settle(pid, other)
    print("# multiget: request %d bytes, reply would be %d MiB; server RSS %.1f MB before, %.1f MB peak"
          % (len(req), 400 * ((1 << 20) + 8) >> 20, before, peak))
    c.close()
    ping(other, 3)
    if peak - before > RSS_BOUND_MB:
        print("FAIL: a client that never reads grew the server by %.1f MB (bound %d)" % (peak - before, RSS_BOUND_MB))
        return 1
    return 0


def case_pipeline(host, port, pid):
    other = put_big(host, port)
    before = settle(pid, other)
    c = connect(host, port, rcvbuf=4096)
    c.sendall((bytes([GET]) + s_str(b"/big")) * 400)
    peak = settle(pid, other)
    print("# pipeline: 400 GETs of 1 MiB unread: server RSS %.1f MB before, %.1f MB peak" % (before, peak))
    if peak - before > RSS_BOUND_MB:
        print("FAIL: unread replies grew the server by %.1f MB (bound %d)" % (peak - before, RSS_BOUND_MB))
        return 1
    want = struct.pack("<Q", 1 << 20) + b"v" * (1 << 20)
    for i in range(400):
        if recv_exact(c, len(want)) != want:
            print("FAIL: reply %d differs" % i)
            return 1
    ping(c, 4)
    print("# pipeline: all 400 replies read back in order")
    return 0


def case_trickle(host, port, pid, n):
    c = connect(host, port)
    keys = s_str(b"") * n
    msg = bytes([CHECK]) + struct.pack("<Q", n) + keys
    before = cpu_s(pid)
    c.sendall(msg[:9])
    step = 16 * 8
    for off in range(9, len(msg), step):
        c.sendall(msg[off:off + step])
        time.sleep(0.0002)  # a trickle: the server reads each piece on its own
    r = recv_exact(c, 1)
    used = cpu_s(pid) - before
    print("# trickle: CHECK of %d empty keys, 16 keys a write: server CPU %.2f s" % (n, used))
    if r != b"\x01":
        print("FAIL: CHECK answered %r, want NOT_READY" % r)
        return 1
    return 0


def case_resets(host, port, pid):
    other = put_big(host, port, 1 << 20)
    for i in range(30):
        c = connect(host, port, rcvbuf=4096)
        pre = b""
        if i >= 10:
            pre = bytes([SET]) + s_str(b"/x/alive/%d" % i) + s_str(b"me") + bytes([WAIT]) + struct.pack("<Q", 1) + s_str(b"/never")
        c.sendall(pre + (bytes([GET]) + s_str(b"/big")) * 8)
        c.recv(100)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        ping(other, 10 + i)
    print("# resets: 30 clients reset mid-reply; the server answers")
    return 0


def case_many(host, port, pid):
    other = put_big(host, port)
    before = settle(pid, other)
    conns = []
    for i in range(200):
        c = connect(host, port, rcvbuf=4096)
        if i % 2 == 0:
            c.sendall(bytes([GET]) + s_str(b"/big"))
        conns.append(c)
    for i, c in enumerate(conns):
        if i % 2:
            ping(c, 100 + i)
    peak = settle(pid, other)
    print("# many: 200 clients, 100 never reading a 1 MiB reply: server RSS %.1f MB before, %.1f MB peak" % (before, peak))
    for c in conns:
        c.close()
    ping(other, 5)
    return 0


def main():
    case, host, port, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if case == "trickle":
        return case_trickle(host, port, pid, int(sys.argv[5]))
    return {"multiget": case_multiget, "pipeline": case_pipeline, "resets": case_resets,
            "many": case_many}[case](host, port, pid)


if __name__ == "__main__":
    sys.exit(main())
