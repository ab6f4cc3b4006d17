"""Attacks the health-check port (tests/integration/45-*): probe_attack.py HOST PORT.

While holding 200 idle connections, 20 that sent a few garbage bytes, 10 that sent half a request line, and
after 5 oversized heads (want 431), 5 garbage heads (want 400) and 20 clients that reset mid-request, a real
probe (GET /health) must still answer 200 with {"alive": true} within 10 s; HEAD answers 200 without a
body, POST 405. Prints what it saw; exits 0, or 1 with the reason.
"""
import json
import resource
import socket
import struct
import sys
import time

host, port = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))


def bad(msg):
    print("probe_attack: " + msg, flush=True)
    sys.exit(1)


def conn():
    s = socket.create_connection((host, port), timeout=10)
    s.settimeout(10)
    return s


def ask(head):
    s = conn()
    s.sendall(head)
    data = b""
    while True:
        try:
            got = s.recv(65536)
        except ConnectionResetError:
            break
        if not got:
            break
        data += got
    s.close()
    return data


def status(resp):
    line = resp.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1


held = []
for i in range(200):
    held.append(conn())
for i in range(20):
    s = conn()
    s.sendall(bytes([0, 255, 13, 7]) * 4)
    held.append(s)
for i in range(10):
    s = conn()
    s.sendall(b"GET /health HT")
    held.append(s)
for i in range(5):
    r = ask(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n")
    if status(r) not in (431, -1):
        bad("an oversized head got %r" % r[:60])
for i in range(5):
    r = ask(b"\x00\x01garbage\r\n\r\n")
    if status(r) != 400:
        bad("a garbage head got %r, want 400" % r[:60])
for i in range(20):
    s = conn()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()  # RST

t0 = time.time()
r = ask(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
took = time.time() - t0
if status(r) != 200:
    bad("the probe got %r amid %d held connections, want 200" % (r[:80], len(held)))
body = json.loads(r.split(b"\r\n\r\n", 1)[1])
if body.get("alive") is not True or body.get("timeout_s") != 60:
    bad("the probe's body is %r" % body)
if abs(body["last_progress_time"] - time.time()) > 5:
    bad("last_progress_time %r is not now" % body["last_progress_time"])
r = ask(b"HEAD / HTTP/1.0\r\n\r\n")
if status(r) != 200 or not r.endswith(b"\r\n\r\n"):
    bad("HEAD got %r" % r[:120])
r = ask(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
if status(r) != 405:
    bad("POST got %r, want 405" % r[:60])
for s in held:
    s.close()
print("probe_attack: 200 alive in %.2f s amid %d held connections; body %s" % (took, len(held), json.dumps(body)),
      flush=True)
