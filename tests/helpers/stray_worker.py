"""A worker for test 53 that leaves processes outside its session: a child in a session of its own
(start_new_session) and a double-forked daemon (fork, setsid, fork, the middle one exits). Their pids go to
$STRAY_OUT/strays.<attempt>.<local_rank> (one per line). Then, by mode (argv[1]):
  wait     keep running (the test stops or kills the agent)
  restart  attempt 0: exit 1 once every worker's file is written (the agent restarts them); attempt 1: write
           $STRAY_OUT/prev.<local_rank> with each of attempt 0's pids and whether it still runs, exit 0
  fds      write the worker's open descriptors (/proc/self/fd) to $STRAY_OUT/fds.<local_rank>, exit 0
"""
import os
import subprocess
import sys
import time

out = os.environ["STRAY_OUT"]
lr = os.environ["LOCAL_RANK"]
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
mode = sys.argv[1]


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def write(name, text):
    tmp = "%s/.%s" % (out, name)
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, "%s/%s" % (out, name))


if mode == "fds":
    fds = sorted(int(x) for x in os.listdir("/proc/self/fd"))
    write("fds.%s" % lr, " ".join(map(str, fds)) + "\n")
    sys.exit(0)

if mode == "restart" and attempt != "0":
    prev = [int(x) for x in open("%s/strays.0.%s" % (out, lr)).read().split()]
    write("prev.%s" % lr, "".join("%d %s\n" % (p, "alive" if alive(p) else "gone") for p in prev))
    sys.exit(0)

child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
r, w = os.pipe()
mid = os.fork()
if mid == 0:
    os.setsid()
    daemon = os.fork()
    if daemon == 0:
        os.close(r)
        os.write(w, b"%d" % os.getpid())
        os.close(w)
        os.execvp("sleep", ["sleep", "1000"])
    os._exit(0)
os.close(w)
daemon = int(os.read(r, 32))
os.waitpid(mid, 0)  # the middle process is gone: the daemon is an orphan now
write("strays.%s.%s" % (attempt, lr), "%d\n%d\n" % (child.pid, daemon))
if mode == "restart":
    # every worker of attempt 0 has written its file before one fails (the failure stops the others)
    n = int(os.environ["LOCAL_WORLD_SIZE"])
    while not all(os.path.exists("%s/strays.0.%d" % (out, i)) for i in range(n)):
        time.sleep(0.05)
    sys.exit(1)
while True:
    time.sleep(1)
