"""Worker for the file-timer watchdog test (tests/integration/44-*): torch's own FileTimerClient, unmodified.

argv: OUT_DIR MODE [wait]
Every attempt writes OUT_DIR/env.<attempt>.<rank>: TORCHELASTIC_TIMER_FILE and whether it is a FIFO.
MODE hang: attempt 0 hangs inside torch.distributed.elastic.timer.expires(after=2, scope="hung_step");
  attempt 1 writes OUT_DIR/restarted.<rank> (its start time.time()), runs a released scope and exits 0;
  with "wait" it first waits for OUT_DIR/go.
MODE garbage: attempt 0 first writes junk into the FIFO (not JSON, a bad pid, a 6000-byte line, an empty
  line), then hangs as in MODE hang.
MODE flood: attempt 0 first writes 10,000 requests for live pids that are not the job's (outside its process
  group): 5,000 already expired (signal 0), 5,000 expiring in an hour (enough to fill the agent's table), then
  hangs as in MODE hang (for 60 s at most: a watchdog crowded out never kills it; it then exits 7).
MODE release: a scope of 1 s released in time, then 3 s of sleep outside any scope: exits 0.
MODE none: TORCHELASTIC_TIMER_FILE is not set (the watchdog is off); exits 0.
"""
import os
import stat
import sys
import time

start = time.time()
out, mode = sys.argv[1], sys.argv[2]
wait = len(sys.argv) > 3 and sys.argv[3] == "wait"
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
path = os.environ.get("TORCHELASTIC_TIMER_FILE")
is_fifo = path is not None and os.path.exists(path) and stat.S_ISFIFO(os.stat(path).st_mode)
with open(os.path.join(out, "env.%d.%d" % (attempt, rank)), "w") as f:
    f.write("%s %s\n" % (path, "fifo" if is_fifo else "not-fifo"))
print("rank %d attempt %d: started at %.3f, timer file %s" % (rank, attempt, start, path), flush=True)

if mode == "none":
    sys.exit(0 if path is None else 5)

import torch
import torch.distributed.elastic.timer as timer

timer.configure(timer.FileTimerClient(path))
if mode == "release":
    with timer.expires(after=1, scope="quick"):
        pass
    time.sleep(3)
    open(os.path.join(out, "ok.%d" % rank), "w").write(torch.__version__)
    sys.exit(0)

if attempt == 0:
    if mode == "garbage":
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"this is not json\n")
        os.write(fd, b'{"version": 1, "pid": -3, "scope_id": "x", "expiration_time": 1, "signal": 9}\n')
        os.write(fd, b"y" * 6000 + b"\n\n")
        os.close(fd)
    if mode == "flood":
        me = os.getpgid(0)
        strays = []
        for e in os.listdir("/proc"):
            try:
                if e.isdigit() and os.getpgid(int(e)) != me:
                    strays.append(int(e))
            except OSError:
                pass
        assert strays, "no process outside the job"
        fd = os.open(path, os.O_WRONLY)  # blocking: the agent reads as we write
        now = time.time()
        for i in range(10000):
            exp = now - 1 if i % 2 else now + 3600
            line = '{"version": 1, "pid": %d, "scope_id": "stray%d", "expiration_time": %f, "signal": 0}\n' % (
                strays[i % min(200, len(strays))], i, exp)
            os.write(fd, line.encode())
        os.close(fd)
        print("rank %d: wrote 10000 requests for %d pids outside the job" % (rank, min(200, len(strays))), flush=True)
    with timer.expires(after=2, scope="hung_step"):
        print("rank %d: hanging inside scope hung_step" % rank, flush=True)
        time.sleep(60 if mode == "flood" else 600)
    sys.exit(7)  # never reached: the watchdog kills this process

with open(os.path.join(out, "restarted.%d" % rank), "w") as f:
    f.write("%.6f %s\n" % (start, torch.__version__))
with timer.expires(after=30, scope="fine_step"):
    time.sleep(0.1)
while wait and not os.path.exists(os.path.join(out, "go")):
    time.sleep(0.1)
print("rank %d attempt %d: done" % (rank, attempt), flush=True)
