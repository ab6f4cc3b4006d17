# The shape of a worker's start, for tests/integration/38-warm-start.sh (a warm start must equal a cold one).
# Usage: warmdump.py OUT_DIR CASE; CASE: dump (writes OUT_DIR/shape.<LOCAL_RANK>.json), dumplocal (imports
# warmlocal, beside the script, then dumps), raise (an uncaught exception), exit3 (sys.exit(3)), kbint (an
# uncaught KeyboardInterrupt: python dies by SIGINT), record (an exception in a torchelastic @record main: the
# error file).
# The first line on stdout says whether torch was already imported when the script began (a warm start).
import sys

preloaded = "torch" in sys.modules
print("preloaded=%s" % preloaded, flush=True)

import ctypes
import json
import os
import re
import signal

import torch
import torch.distributed


def c_environ():
    libc = ctypes.CDLL(None)
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    out, i = [], 0
    while env[i]:
        out.append(env[i].decode("utf-8", "surrogateescape"))
        i += 1
    return sorted(out)


def shape():
    g = globals()
    return {
        "environ": dict(sorted(os.environ.items())),
        "c_environ": c_environ(),
        "getenv_RANK": (ctypes.CDLL(None).getenv.__call__(b"RANK") is not None),
        "argv": sys.argv,
        "orig_argv": getattr(sys, "orig_argv", None),
        "path": sys.path,
        "name": __name__,
        "file": g.get("__file__"),
        "main_keys": sorted(k for k in g if k.startswith("__")),
        "loader": type(g.get("__loader__")).__name__,
        "spec": re.sub(" at 0x[0-9a-f]+", "", repr(g.get("__spec__"))),
        "cwd": os.getcwd(),
        "stdin": os.readlink("/proc/self/fd/0"),
        "stdout_is_pipe_or_file": os.readlink("/proc/self/fd/1").split(":")[0],
        "signals": {
            s.name: repr(signal.getsignal(s)) for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)
        },
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "session_leader": os.getsid(0) == os.getpid(),
        "group_leader": os.getpgid(0) == os.getpid(),
        "cuda_initialized": torch.cuda.is_initialized(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "flags": str(sys.flags),
        "executable": sys.executable,
        "stdout_line_buffering": sys.stdout.line_buffering,
        "stdout_write_through": getattr(sys.stdout, "write_through", None),
        "encoding": [sys.stdout.encoding, sys.stderr.encoding, sys.stdin.encoding],
        # what was imported, from where: a warm worker imports exactly what a cold one does
        "modules": {k: str(getattr(m, "__file__", None)) for k, m in sorted(sys.modules.items())},
    }


def main(out, case):
    if case == "dumplocal":  # a module beside the script, found there (sys.path[0]) as in a cold start
        import warmlocal

        case = "dump"
    if case == "dump":
        with open(os.path.join(out, "shape.%s.json" % os.environ["LOCAL_RANK"]), "w") as f:
            json.dump(shape(), f, indent=1, sort_keys=True)
    elif case == "raise":
        raise RuntimeError("boom from rank %s" % os.environ["RANK"])
    elif case == "exit3":
        sys.exit(3)
    elif case == "kbint":
        raise KeyboardInterrupt
    elif case == "record":
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def train():
            raise ValueError("recorded failure")

        train()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
