"""Process scanner for the agent tests: finds the processes of one test by the marker in their environment.

  mn_procs.py pids MARKER [EXCLUDE_PID...]    live (non-zombie) marked processes, one pid a line
  mn_procs.py show MARKER [EXCLUDE_PID...]    same with state, ppid, pgid, sid and argv, for logs
  mn_procs.py zombies                         zombies visible in this /proc (pid ppid comm), any marker
  mn_procs.py count MARKER WORD [EXCLUDE...]  live marked processes whose argv holds WORD
  mn_procs.py subtree ROOT                    every descendant of ROOT (and ROOT): pid ppid state comm
"""
import os
import sys

ME = {os.getpid(), os.getppid()}


def stat(pid):
    with open("/proc/%s/stat" % pid) as f:
        s = f.read()
    comm = s[s.index("(") + 1:s.rindex(")")]
    rest = s[s.rindex(")") + 2:].split()
    return comm, rest[0], int(rest[1]), int(rest[2]), int(rest[3])  # comm, state, ppid, pgrp, session


def procs():
    for d in os.listdir("/proc"):
        if d.isdigit():
            yield int(d)


def marked(marker, exclude):
    needle = ("TRUN_TEST_MARKER=" + marker).encode()
    for pid in procs():
        if pid in ME or pid in exclude:
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            if needle not in env:
                continue
            comm, state, ppid, pgrp, sid = stat(pid)
            if state == "Z":
                continue
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace").strip().replace("\n", "\\n")
        except (OSError, ValueError):
            continue
        yield pid, state, ppid, pgrp, sid, argv


def main():
    cmd = sys.argv[1]
    if cmd == "zombies":
        for pid in procs():
            try:
                comm, state, ppid, _, _ = stat(pid)
            except (OSError, ValueError):
                continue
            if state == "Z":
                print(pid, ppid, comm)
        return
    if cmd == "subtree":
        root = int(sys.argv[2])
        tab = {}
        for pid in procs():
            try:
                comm, state, ppid, _, _ = stat(pid)
            except (OSError, ValueError):
                continue
            tab[pid] = (ppid, state, comm)
        keep, grew = {root}, True
        while grew:
            grew = False
            for pid, (ppid, _, _) in tab.items():
                if ppid in keep and pid not in keep:
                    keep.add(pid)
                    grew = True
        for pid in sorted(keep):
            if pid in tab:
                print(pid, tab[pid][0], tab[pid][1], tab[pid][2])
        return
    marker = sys.argv[2]
    if cmd == "count":
        word = sys.argv[3]
        ex = {int(x) for x in sys.argv[4:]}
        print(sum(1 for p in marked(marker, ex) if word in p[5]))
        return
    ex = {int(x) for x in sys.argv[3:]}
    for pid, state, ppid, pgrp, sid, argv in marked(marker, ex):
        if cmd == "pids":
            print(pid)
        else:
            print("  pid %d %s ppid %d pgid %d sid %d: %s" % (pid, state, ppid, pgrp, sid, argv))


main()
