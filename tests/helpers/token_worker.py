"""Worker for the token test (tests/integration/48-*): a hostile worker of the job. argv: MODE OUT_DIR ...

MODE leak SECRET_FILE RUN_ID: reads its agent's /proc/$PPID/environ and cmdline and its own environment,
says whether the job's token (the text of SECRET_FILE, which the agent never sees) is in any of them, and
tries every token it can find there (TRUN_RDZV_TOKEN=..., trun_token=...; none: no token) to forge an
exclusion record of 1e6 s through torch's TCPStore client at MASTER_ADDR:MASTER_PORT: OUT_DIR/leak.<rank>
holds "environ: found|absent|unreadable", "cmdline: ...", "own env: ...", "forge: written|refused ...".
MODE proc: as another user than root, opens /proc/$PPID/environ and mem: OUT_DIR/proc.<rank> says
"environ: readable|refused", "mem: readable|refused".
MODE keys: sets the torch key keys48/w<rank> in the job's store, then waits until OUT_DIR/go exists (and
with OUT_DIR/fail, exits 3 in the job's first attempt).
Every mode above writes OUT_DIR/ok.<rank> when done.
MODE forge HOST PORT TOKEN RUN_ID RECORDS (not a worker: the test as an agent): presents TOKEN ("-": none)
and appends each record of the JSON list RECORDS to the job's exclusion list; prints "written N" (the
list's count after) or "refused (...)" when the store closes the connection. Raw wire (torch 1.13's
numbering, tests/store/rawclient.py): torch's Python client cannot send a CHECK."""
import datetime
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "store"))
mode, out = sys.argv[1], sys.argv[2]
rank = int(os.environ.get("RANK", "0"))
pp = os.getppid()


def store():
    from torch.distributed import TCPStore
    return TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                    timeout=datetime.timedelta(seconds=30))


def forge(host, port, token, run_id, records):
    """Presents token (None: none) and appends records to the exclusion list: "written N" or "refused"."""
    import rawclient as rc
    try:
        sock = rc.connect(host, port, v2=False, timeout=30.0)
        if token is not None:
            sock.sendall(rc.req(rc.LEGACY, "CHECK", ("u64", 1), b"/trun/.agent-token/" + token))
            rc.recv_exact(sock, 1)
        n = 0
        for rec in records:
            sock.sendall(rc.req(rc.LEGACY, "ADD", "/trun/%s/excluded/n" % run_id, ("i64", 1)))
            n = struct.unpack("<q", rc.recv_exact(sock, 8))[0]
            sock.sendall(rc.req(rc.LEGACY, "SET", "/trun/%s/excluded/%d" % (run_id, n), json.dumps(rec)))
        sock.sendall(rc.req(rc.LEGACY, "ADD", "/trun/%s/excluded/n" % run_id, ("i64", 0)))
        n = struct.unpack("<q", rc.recv_exact(sock, 8))[0]  # a closed connection shows here
        sock.close()
        return "written %d" % n
    except (OSError, ConnectionError) as e:
        return "refused (%s)" % e


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


lines = []
if mode == "leak":
    secret = open(sys.argv[3], "rb").read().strip()
    run_id = sys.argv[4]
    env, cmd = read("/proc/%d/environ" % pp), read("/proc/%d/cmdline" % pp)
    own = "\0".join("%s=%s" % kv for kv in os.environ.items()).encode()
    for name, blob in (("environ", env), ("cmdline", cmd), ("own env", own)):
        lines.append("%s: %s" % (name, "unreadable" if blob is None else "found" if secret in blob else "absent"))
    cands = set()
    for blob in (env or b"", cmd or b"", own):
        for item in blob.split(b"\0"):
            if item.startswith(b"TRUN_RDZV_TOKEN="):
                cands.add(item.split(b"=", 1)[1])
            for part in item.split(b","):
                if b"trun_token=" in part:
                    cands.add(part.split(b"trun_token=", 1)[1].strip())
    for cand in sorted(cands) or [None]:
        rec = {"host": "127.0.0.1", "hostname": "forged", "instance": "", "gpus": "", "kind": "health",
               "cause": "forged by a worker", "at": time.time(), "until": time.time() + 1e6}
        verdict = forge(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), cand, run_id, [rec])
        lines.append("forge with %s: %s" % ("no token" if cand is None else "a token of %d bytes" % len(cand),
                                            verdict))
elif mode == "proc":
    for name in ("environ", "mem"):
        try:
            open("/proc/%d/%s" % (pp, name), "rb").close()
            lines.append("%s: readable" % name)
        except OSError as e:
            lines.append("%s: refused (%s)" % (name, e.strerror))
elif mode == "forge":
    tok = None if sys.argv[4] == "-" else sys.argv[4].encode()
    print(forge(sys.argv[2], int(sys.argv[3]), tok, sys.argv[5], json.loads(sys.argv[6])))
    sys.exit(0)
elif mode == "keys":
    s = store()
    s.set("keys48/w%d" % rank, "x")
    with open(os.path.join(out, "ok.%d" % rank), "w") as f:
        f.write("set\n")
    while not os.path.exists(os.path.join(out, "go")):
        time.sleep(0.2)
    if os.path.exists(os.path.join(out, "fail")) and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
        sys.exit(3)  # the first attempt fails: a new round, whose start reads the exclusion list again
    sys.exit(0)
with open(os.path.join(out, "%s.%d" % (mode, rank)), "w") as f:
    f.write("\n".join(lines) + "\n")
print("rank %d: %s" % (rank, "; ".join(lines)), flush=True)
open(os.path.join(out, "ok.%d" % rank), "w").close()
