"""Failing worker for 43-agent-restarts. argv: MODE [RANK]; only local rank RANK (default 1) fails, the
others exit 0 at once.
  exit3   sys.exit(3) in attempt 0 (TORCHELASTIC_RESTART_COUNT=0), exit 0 in later attempts
  record  a main() decorated with torch's @record raises ValueError("boom") (the error file gets it)
  segv    kills itself with SIGSEGV
"""
import os
import signal
import sys

from torch.distributed.elastic.multiprocessing.errors import record

mode = sys.argv[1]
who = int(sys.argv[2]) if len(sys.argv) > 2 else 1
rank = int(os.environ["LOCAL_RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])


@record
def main():
    if rank != who:
        return
    if mode == "exit3":
        if attempt == 0:
            sys.exit(3)
    elif mode == "record":
        raise ValueError("boom")
    elif mode == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    else:
        sys.exit("unknown mode %r" % mode)


if __name__ == "__main__":
    main()
