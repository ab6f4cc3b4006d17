"""Worker for the agent kill / signal tests (tests/integration/53, 54). No torch import (starts fast).

  sig_worker.py MODES     MODES = comma list, one mode per local rank (this worker uses MODES[LOCAL_RANK])

Every mode writes $SIG_OUT/ready.<LOCAL_RANK> (JSON with its pids) once its handlers are installed, and
appends a line to $SIG_OUT/tick.<LOCAL_RANK> every 0.1 s while it runs (so "kept running" and "recorded
nothing after" can be checked). Files written from handlers are named <event>.<LOCAL_RANK>.
  term     SIGTERM/SIGINT/SIGHUP handler writes term.<lr> (the signal number) and exits 0
  ignore   SIGTERM handler writes term.<lr> (appends one line per delivery) and keeps running
  usr1     SIGUSR1 handler appends to usr1.<lr> and keeps running; SIGTERM as in "term"
  tree     like "term", but first starts a child `sleep 1000` and a child python that starts a grandchild
           `sleep 1000` in its own process group (os.setpgid(0, 0)); their pids go into ready.<lr>
  zombie   like "term", but first leaves un-waited children: 5 x `sh -c 'sleep 0.2 &'` (the sh exits at
           once and is never waited for; its sleep is orphaned) and one `true`; after 1 s it exits 0
           without waiting for any of them
  exit0    exits 0 at once
"""
import json
import os
import signal
import subprocess
import sys
import time

lr = int(os.environ["LOCAL_RANK"])
modes = sys.argv[1].split(",")
mode = modes[lr] if lr < len(modes) else modes[-1]
out = os.environ["SIG_OUT"]


def path(name):
    return os.path.join(out, "%s.%d" % (name, lr))


def append(name, text):
    # One os.write per record: safe from a signal handler and against concurrent writers.
    fd = os.open(path(name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, (text + "\n").encode())
    os.close(fd)


def on_term(sig, frame):
    append("term", "%d %.3f" % (sig, time.time()))
    if mode != "ignore":
        os._exit(0)


def on_usr1(sig, frame):
    append("usr1", "%d %.3f" % (sig, time.time()))


if mode == "exit0":
    sys.exit(0)

for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, on_term)
if mode == "usr1":
    signal.signal(signal.SIGUSR1, on_usr1)

info = {"mode": mode, "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0)}
keep = []
if mode == "tree":
    child = subprocess.Popen(["sleep", "1000"])
    r, w = os.pipe()
    mid = subprocess.Popen([sys.executable, "-c", """
import os, subprocess, sys
g = subprocess.Popen(["sleep", "1000"], preexec_fn=lambda: os.setpgid(0, 0))
os.write(int(sys.argv[1]), ("%d %d" % (g.pid, os.getpgid(g.pid))).encode())
os.close(int(sys.argv[1]))
g.wait()
""", str(w)], pass_fds=(w,))
    os.close(w)
    g = os.read(r, 100).decode().split()
    os.close(r)
    info.update(child=child.pid, child_pgid=os.getpgid(child.pid), mid=mid.pid, grandchild=int(g[0]),
                grandchild_pgid=int(g[1]))
    keep += [child, mid]
if mode == "zombie":
    for _ in range(5):
        keep.append(subprocess.Popen(["sh", "-c", "sleep 0.2 &"]))
    keep.append(subprocess.Popen(["true"]))
    info["unwaited"] = [p.pid for p in keep]

with open(path("ready") + ".tmp", "w") as f:
    json.dump(info, f)
os.rename(path("ready") + ".tmp", path("ready"))

t_end = time.time() + 1.0 if mode == "zombie" else None
while t_end is None or time.time() < t_end:
    append("tick", "%.3f" % time.time())
    time.sleep(0.1)
# zombie mode: leave without waiting for any child (os._exit skips every clean-up that could reap them)
os._exit(0)
