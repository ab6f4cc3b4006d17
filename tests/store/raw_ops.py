#!/usr/bin/env python3
"""Raw-socket checks of the places where trun-store intentionally differs from torch's classic server and
which torch's Python client cannot reach (it always sends WAIT before GET / MULTI_GET).

Usage: raw_ops.py HOST PORT v2|legacy trun|classic
  v2      = torch >= 2.2 numbering with the VALIDATE handshake, legacy = torch 1.13 numbering
  trun    = expect trun-store's rules (torch libuv server's): a GET / MULTI_GET of a missing key replies an
            empty value and the connection stays open; COMPARE_SET that creates a key wakes its waiters
  classic = expect torch's classic server (what the spec says; run against torch's own server): the
            connection is closed
Exit: 0 all checks as expected, 1 otherwise. No torch needed.
"""
import sys

from rawclient import LEGACY, V2, connect, is_closed, recv_bytes, recv_exact, recv_u64, req, wait_req

SAFETY = 60.0


def read_to_eof(sock, timeout):
    """Reads until EOF/reset; returns (bytes read, True) or (bytes read, False) after timeout."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        return data, True
    except OSError:
        return data, False


def main(argv):
    host, port, gen, expect = argv[1], int(argv[2]), argv[3], argv[4]
    v2 = gen == "v2"
    codes = V2 if v2 else LEGACY
    fails = 0

    def check(cond, msg):
        nonlocal fails
        print(("ok   " if cond else "FAIL ") + msg, flush=True)
        fails += 0 if cond else 1

    ns = "/raw.%s.%s/" % (gen, expect)
    a = connect(host, port, v2, SAFETY)
    a.sendall(req(codes, "SET", ns + "present", b"pv"))
    a.sendall(req(codes, "GET", ns + "present"))
    check(recv_bytes(a) == b"pv", "GET of a present key")
    a.sendall(req(codes, "GET", ns + "missing"))
    if expect == "trun":
        check(recv_bytes(a) == b"", "GET of a missing key replies an empty value (libuv rule)")
        a.sendall(req(codes, "ADD", ns + "cnt", ("i64", 2)))
        check(recv_u64(a) == 2, "connection still usable after GET of a missing key")
    else:
        check(is_closed(a, SAFETY), "classic server closes the connection on GET of a missing key")
    if v2:
        b = connect(host, port, v2, SAFETY)
        b.sendall(req(codes, "MULTI_GET", ("u64", 2), ns + "present", ns + "missing"))
        if expect == "trun":
            got = [recv_bytes(b), recv_bytes(b)]
            check(got == [b"pv", b""], "MULTI_GET [present, missing] -> %r" % got)
            b.sendall(req(codes, "GETNUMKEYS"))
            recv_u64(b)
            check(True, "connection still usable after MULTI_GET of a missing key")
        else:
            # Observed on torch 2.6: the classic server first streams the values of the keys before the
            # missing one (here b"pv"), then closes.
            got, closed = read_to_eof(b, SAFETY)
            check(closed, "classic server closes the connection on MULTI_GET of a missing key "
                  "(bytes sent before closing: %s)" % got.hex())
    if expect == "trun":
        # COMPARE_SET creating a key wakes its waiters (torch's libuv server does; the classic one never does).
        w = connect(host, port, v2, SAFETY)
        w.sendall(wait_req(codes, [ns + "cas"]))
        c = connect(host, port, v2, SAFETY)
        c.sendall(req(codes, "GETNUMKEYS"))  # a round trip on c; w's WAIT was sent before, on its own socket
        recv_u64(c)
        c.sendall(req(codes, "COMPARE_SET", ns + "cas", b"", b"made"))
        check(recv_bytes(c) == b"made", "COMPARE_SET on a missing key with expected '' creates it")
        w.settimeout(SAFETY)
        check(recv_exact(w, 1) == b"\x00", "the waiter on that key gets STOP_WAITING")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
