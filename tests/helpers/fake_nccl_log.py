"""A worker for the --nccl-report tests: writes what NCCL would have logged, without NCCL.

  fake_nccl_log.py CAPTURE PID_FOR_RANK0,PID_FOR_RANK1,... OUTDIR [WATCH_FILE TEXT]

Copies the lines of CAPTURE (a saved NCCL INFO log) whose "host:pid:" prefix has the pid given for this
worker's RANK into $NCCL_DEBUG_FILE (%h -> host name, %p -> pid, as NCCL expands them), and records the NCCL_*
variables it got in OUTDIR/env.<RANK>. With WATCH_FILE TEXT it then stays alive until WATCH_FILE (the agent's
captured stderr) contains TEXT (at most 120 s), so that a report made while the workers run can be seen.
"""
import os
import socket
import sys
import time


def main():
    capture, pids, outdir = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    rank = int(os.environ["RANK"])
    with open(os.path.join(outdir, f"env.{rank}"), "w") as f:
        for k in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):
            f.write(f"{k}={os.environ.get(k, '<unset>')}\n")
    path = os.environ.get("NCCL_DEBUG_FILE")
    if not path or os.environ.get("NCCL_DEBUG") != "INFO":
        return
    path = path.replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
    want = pids[rank]
    with open(capture) as src, open(path, "w") as dst:
        for line in src:
            parts = line.split(":", 2)
            if len(parts) == 3 and parts[1] == want:
                dst.write(line)
    if len(sys.argv) > 5:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if sys.argv[5] in open(sys.argv[4]).read():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        sys.exit("fake_nccl_log: '%s' never appeared in %s" % (sys.argv[5], sys.argv[4]))


if __name__ == "__main__":
    main()
