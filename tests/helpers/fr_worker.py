"""A worker for test 95-hang-fr (Python stdlib only, no torch): plays what torch's NCCL heartbeat monitor does
with the flight-recorder variables trun gives, as read in torch's sources (ProcessGroupNCCL's DumpPipe and
DebugInfoWriter), since that machinery runs only with GPUs: when TORCH_NCCL_DEBUG_INFO_PIPE_FILE is set it makes
the FIFO <that><RANK>.pipe (unlink, mkfifo 0666), holds it open for reading (non-blocking) and looks at it every
0.1 s; on a byte it writes a dump to <TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE><RANK> in place
(truncate, then the bytes in two writes) and goes on. The dump is a real capture: FR_FIXTURES="f0,f1,..." names
rank r's file under tests/fixtures/hang/flight-recorder/. Besides: writes its environment to <dir>/env.<rank>
(NAME=VALUE lines), its pid to <dir>/pid.<rank> (replaced, never half-written: the RAS stand-in serves it),
<dir>/attempt.<restart count>.<rank>, and <dir>/dumped.<rank>.<n> after its n-th dump; then sleeps until
SIGTERM (a rank the stand-in shows behind). FR_EXIT=1: exits 0 after writing its files.
Usage: fr_worker.py DIR"""
import os
import sys
import time

out = sys.argv[1]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
fix = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "hang", "flight-recorder")


def put(name, text):
    tmp = os.path.join(out, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(out, name))


put("env.%d" % rank, "".join("%s=%s\n" % kv for kv in sorted(os.environ.items())))
stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
dump_to = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
fd = -1
if stem and int(os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) > 0:
    pipe = "%s%d.pipe" % (stem, rank)
    try:
        os.unlink(pipe)
    except FileNotFoundError:
        pass
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
put("pid.%d" % rank, "%d\n" % os.getpid())
put("attempt.%d.%d" % (attempt, rank), "")
print("rank %d attempt %d: pid %d, dump pipe %s" % (rank, attempt, os.getpid(), "on" if fd >= 0 else "off"),
      flush=True)
if os.environ.get("FR_EXIT") == "1":
    sys.exit(0)
dumps = 0
while True:
    time.sleep(0.1)
    if fd < 0:
        continue
    try:
        got = os.read(fd, 64)
    except BlockingIOError:
        got = b""
    if not got:
        continue
    with open(os.path.join(fix, os.environ["FR_FIXTURES"].split(",")[rank]), "rb") as f:
        data = f.read()
    with open("%s%d" % (dump_to, rank), "wb") as f:  # in place, as torch's DebugInfoWriter
        f.write(data[:64])
        f.flush()
        time.sleep(0.2)
        f.write(data[64:])
    dumps += 1
    put("dumped.%d.%d" % (rank, dumps), "")
