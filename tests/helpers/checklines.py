"""Checks console output of tests/helpers/chatty.py storm workers (47-agent-logs).
argv: FILE STREAM NPROC N PREFIX_TEMPLATE
STREAM is O or E; PREFIX_TEMPLATE is e.g. "[default{lr}]:" or "" (no prefix). Every line of FILE must be
either one of trun's own known lines or exactly PREFIX + a whole STORM line of that stream; each local rank's
lines must all be there, in order. Exit 1 with the first problems on any cut, merged or missing line."""
import re
import sys

path, stream, nproc, n, tmpl = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
own = re.compile(r"^(\*+|Setting OMP_NUM_THREADS .*|trun: .*)$")
line_re = re.compile(r"^(.*?)STORM ([OE]) (\d+) (\d+) (\d+) ([a-z]*) END$")
nxt = [0] * nproc
bad = []
with open(path, "rb") as f:
    data = f.read()
if data and not data.endswith(b"\n"):
    bad.append("the output does not end with a newline")
for no, raw in enumerate(data.split(b"\n")[:-1], 1):
    line = raw.decode("utf-8", "replace")
    m = line_re.match(line)
    if not m:
        if not own.match(line):
            bad.append("line %d is not a whole STORM line (cut or merged?): %r" % (no, line[:160]))
        continue
    pre, s, lr, i, length, payload = m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6)
    want_pre = tmpl.replace("{lr}", str(lr))
    if s != stream:
        bad.append("line %d: stream %s on the %s console" % (no, s, stream))
    if pre != want_pre:
        bad.append("line %d: prefix %r, want %r" % (no, pre[:80], want_pre))
    if not (0 <= lr < nproc):
        bad.append("line %d: local rank %d" % (no, lr))
        continue
    if len(payload) != length or payload != chr(ord("a") + (i + lr) % 26) * length:
        bad.append("line %d: payload of rank %d line %d is damaged (len %d, want %d)" % (no, lr, i, len(payload), length))
    if i != nxt[lr]:
        bad.append("line %d: rank %d line %d, want line %d (lost or reordered)" % (no, lr, i, nxt[lr]))
    nxt[lr] = i + 1
for lr in range(nproc):
    if nxt[lr] != n:
        bad.append("rank %d: %d of %d lines arrived" % (lr, nxt[lr], n))
for b in bad[:20]:
    print("%s: %s" % (path, b))
if bad:
    print("%s: %d problems" % (path, len(bad)))
    sys.exit(1)
print("%s: %d x %d %s lines, all whole and in order" % (path, nproc, n, stream))
