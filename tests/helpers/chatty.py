"""Worker for 47-agent-logs. argv: MODE [N]
  lines  prints "out <lr> line <i>" to stdout and "err <lr> line <i>" to stderr, i < N (default 5), then
         "runid <TORCHELASTIC_RUN_ID>" to stdout
  storm  N (default 400) long lines on stdout and on stderr, each written in 3 pieces with a flush after each
         piece: "STORM <stream> <lr> <i> <len> <payload of len copies of one letter> END"; lengths vary up to
         ~9 KB so lines cross PIPE_BUF and trun's 4 KB stack buffer
The line format is checked by tests/helpers/checklines.py.
"""
import os
import sys
import time

mode = sys.argv[1]
lr = int(os.environ["LOCAL_RANK"])

if mode == "lines":
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    for i in range(n):
        print("out %d line %d" % (lr, i), flush=True)
        print("err %d line %d" % (lr, i), file=sys.stderr, flush=True)
    print("runid %s" % os.environ["TORCHELASTIC_RUN_ID"], flush=True)
elif mode == "storm":
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    for i in range(n):
        for name, f in (("O", sys.stdout), ("E", sys.stderr)):
            length = 50 + (i * 977 + lr * 131) % 9000
            line = "STORM %s %d %d %d %s END\n" % (name, lr, i, length, chr(ord("a") + (i + lr) % 26) * length)
            a, b = len(line) // 3, 2 * len(line) // 3
            for piece in (line[:a], line[a:b], line[b:]):
                f.write(piece)
                f.flush()
        if i % 25 == 0:
            time.sleep(0.001)
else:
    sys.exit("unknown mode %r" % mode)
