#!/usr/bin/env python3
"""The WAIT flood of issue 41 (finding 1) against a running store: plain sockets, no torch, no token.

    wait_flood.py cpu   HOST PORT PID [--keys N] [--reqs R]
    wait_flood.py rss   HOST PORT PID [--keys N] [--conns C]
    wait_flood.py ping  HOST PORT PID [--keys N] [--conns C] [--seconds S] [--token T]
    wait_flood.py flood HOST PORT     [--keys N] [--conns C] (--seconds S | --until FILE)

Each flooding connection sends WAIT on N fresh keys (131072, the protocol's per-request maximum, by default)
and CANCEL_WAIT, again and again; when the server closes it (a budget), it connects again and goes on, as an
attacker would. Figures are printed as '# ...' lines; nothing is asserted on time (this is a probe and a load
for tests, not a benchmark with a verdict):
  cpu    the server's CPU seconds (utime + stime of PID) per WAIT + CANCEL_WAIT pair, one connection;
  rss    C connections each left waiting on N fresh keys: the server's RSS growth per waiting connection,
         and its RSS once they closed (is the memory given back);
  ping   PING round trips on a connection of its own (p50, max) with no flood, then under C flooding
         connections for S seconds; with --token, that connection first presents the agents' token
         (TRUN_RDZV_TOKEN of a job whose agent hosts the store at HOST:PORT): it is an agent's connection;
  flood  C flooding connections until S seconds passed or FILE exists (the load of integration test 27).
Exit 0, or 1 when the store stopped answering a PING (cpu, rss and ping cases)."""
import argparse
import os
import socket
import struct
import subprocess
import sys
import threading
import time

CHECK, WAIT, CANCEL_WAIT, PING = 5, 6, 12, 13
TOKEN_KEY = b"/trun/.agent-token/"


def s_str(b):
    return struct.pack("<Q", len(b)) + b


def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise EOFError("closed")
        b += k
    return bytes(b)


def connect(host, port):
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"\x00\xce\xf7\x85\x3c" + bytes([PING]) + struct.pack("<I", 7))
    if recv_exact(s, 4) != struct.pack("<I", 7):
        raise SystemExit("FAIL: handshake answered wrongly")
    return s


def ping(s, nonce):
    t0 = time.monotonic()
    s.sendall(bytes([PING]) + struct.pack("<I", nonce))
    if recv_exact(s, 4) != struct.pack("<I", nonce):
        raise SystemExit("FAIL: PING answered wrongly")
    return time.monotonic() - t0


def wait_req(tag, n):
    """WAIT on n keys that nobody sets (the same names again after CANCEL_WAIT are fresh again: the server
    drops a key's slot once its last waiter is gone)."""
    return bytes([WAIT]) + struct.pack("<Q", n) + b"".join(s_str(b"/flood/%s/%d" % (tag, i)) for i in range(n))


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


class Flooder(threading.Thread):
    """WAIT + CANCEL_WAIT in a loop on one connection, reconnecting when the server closes it."""

    def __init__(self, host, port, tag, keys, stop):
        super().__init__(daemon=True)
        self.host, self.port, self.stop = host, port, stop
        self.req = wait_req(tag.encode(), keys) + bytes([CANCEL_WAIT])
        self.pairs = self.closed = 0

    def run(self):
        s = None
        while not self.stop.is_set():
            try:
                if s is None:
                    s = connect(self.host, self.port)
                s.sendall(self.req)
                recv_exact(s, 1)  # CANCELED (or STOP_WAITING, never here: nobody sets the keys)
                self.pairs += 1
            except (OSError, EOFError):
                self.closed += 1
                if s is not None:
                    s.close()
                s = None
        if s is not None:
            s.close()


def start_flood(a, n):
    stop = threading.Event()
    fl = [Flooder(a.host, a.port, "%d.%d" % (os.getpid(), i), a.keys, stop) for i in range(n)]
    for f in fl:
        f.start()
    return stop, fl


def end_flood(stop, fl):
    stop.set()
    for f in fl:
        f.join()
    return sum(f.pairs for f in fl), sum(f.closed for f in fl)


def case_cpu(a):
    other = connect(a.host, a.port)
    c0 = cpu_s(a.pid)
    stop, fl = start_flood(a, 1)
    f = fl[0]
    while f.pairs + f.closed < a.reqs:
        time.sleep(0.01)
    stop.set()
    f.join()
    used = cpu_s(a.pid) - c0
    ping(other, 1)
    n = f.pairs + f.closed
    print("# cpu: %d WAIT(%d keys) + CANCEL_WAIT pairs (%d answered, %d connections closed by the server): "
          "server CPU %.2f s, %.2f ms per pair" % (n, a.keys, f.pairs, f.closed, used, 1000.0 * used / max(n, 1)))
    return 0


def case_rss(a):
    other = connect(a.host, a.port)
    ping(other, 1)
    before = rss_mb(a.pid)
    conns, req, waiting = [], None, 0
    for i in range(a.conns):
        c = connect(a.host, a.port)
        c.sendall(wait_req(b"rss%d.%d" % (os.getpid(), i), a.keys))
        conns.append(c)
    for c in conns:  # a PING after the WAIT: answered once the WAIT was registered (or the conn closed)
        try:
            ping(c, 2)
            waiting += 1
        except (OSError, EOFError):
            pass
    ping(other, 3)
    peak = rss_mb(a.pid)
    for c in conns:
        c.close()
    time.sleep(0.5)
    ping(other, 4)
    after = rss_mb(a.pid)
    print("# rss: %d connections each WAIT on %d fresh keys (%d still waiting, the others closed by the "
          "server): server RSS %.1f MB before, %.1f MB with them (%.2f MB per connection), %.1f MB after they "
          "closed" % (a.conns, a.keys, waiting, before, peak, (peak - before) / a.conns, after))
    return 0


def pings(s, seconds):
    t, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t.append(ping(s, len(t) & 0xFFFF))
        time.sleep(0.01)
    t.sort()
    return t[len(t) // 2] * 1000.0, t[-1] * 1000.0, len(t)


def case_ping(a):
    other = connect(a.host, a.port)
    if a.token:
        other.sendall(bytes([CHECK]) + struct.pack("<Q", 1) + s_str(TOKEN_KEY + a.token.encode()))
        if recv_exact(other, 1) != b"\x00":
            raise SystemExit("FAIL: the store did not take the token")
    p50, mx, n = pings(other, 2)
    who = "an agent's connection" if a.token else "a connection without the token"
    print("# ping (%s): no flood: p50 %.2f ms, max %.2f ms (%d PINGs)" % (who, p50, mx, n))
    c0 = cpu_s(a.pid)
    # The flood runs in a process of its own: its threads must not hold this one's interpreter lock.
    fl = subprocess.Popen([sys.executable, __file__, "flood", a.host, str(a.port), "--keys", str(a.keys),
                           "--conns", str(a.conns), "--seconds", str(a.seconds + 1)], stdout=subprocess.PIPE,
                          universal_newlines=True)
    time.sleep(1)
    p50, mx, n = pings(other, a.seconds)
    out = fl.communicate()[0].strip()
    print("# ping: %d flooding connections (WAIT %d keys + CANCEL_WAIT): p50 %.2f ms, max %.2f ms (%d PINGs); "
          "server CPU %.1f s\n%s" % (a.conns, a.keys, p50, mx, n, cpu_s(a.pid) - c0, out))
    return 0


def case_flood(a):
    stop, fl = start_flood(a, a.conns)
    end = time.monotonic() + (a.seconds if a.seconds else 1e9)
    while time.monotonic() < end and not (a.until and os.path.exists(a.until)):
        time.sleep(0.1)
    pairs, closed = end_flood(stop, fl)
    print("# flood: %d connections: %d WAIT(%d keys) + CANCEL_WAIT pairs answered, %d connections closed by "
          "the server" % (a.conns, pairs, a.keys, closed))
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["cpu", "rss", "ping", "flood"])
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("pid", type=int, nargs="?", default=0)
    p.add_argument("--keys", type=int, default=131072)
    p.add_argument("--reqs", type=int, default=20)
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--seconds", type=float, default=0)
    p.add_argument("--until", default="")
    p.add_argument("--token", default="")
    a = p.parse_args()
    if a.case == "ping" and not a.seconds:
        a.seconds = 5
    try:
        return {"cpu": case_cpu, "rss": case_rss, "ping": case_ping, "flood": case_flood}[a.case](a)
    except (OSError, EOFError) as e:
        print("FAIL: the store stopped answering: %s" % e)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
