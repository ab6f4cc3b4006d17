#!/usr/bin/python3
"""A stand-in for NCCL's RAS client port (what every NCCL >= 2.24 process serves on localhost:28028), for tests,
on 127.0.0.1 only. Python stdlib only. It speaks the protocol as NCCL 2.28's src/ras/client_support.cc does:
lines ending in "\\n" (a "\\r" before it is dropped); "CLIENT PROTOCOL n" -> "SERVER PROTOCOL 2", "TIMEOUT s" ->
"OK" (whole seconds only: 2.28.9 answers "ERROR: Invalid timeout value 1.5"), "SET FORMAT json|text" -> "OK" (or "ERROR: Invalid format f"),
"STATUS" / "VERBOSE STATUS" -> the report, then the connection is closed; anything else ->
"ERROR: Unknown command <line>". The reports are our captures (tests/fixtures/hang/, 4 x H100, NCCL 2.28.9).

Usage: ras_server.py --mode MODE --port-file FILE [--addr 127.0.0.1:PORT] [--pid-dir DIR --ranks N [--behind R]
                     [--host H] [--served FILE]]
Listens on an ephemeral loopback port (--addr: on that loopback address, bound with SO_REUSEADDR and
SO_REUSEPORT as NCCL binds NCCL_RAS_ADDR) and writes "PORT\\n" to FILE once it listens. Stops on SIGTERM / SIGINT.
Each connection is served on its own thread; connection N (from 0) of a mode that moves serves step N.

Modes (what VERBOSE STATUS answers):
  mismatch      the mismatch hang, frozen (ras-mismatch-20s.json: rank 3 broadcast, ranks 0-2 all-reduce)
  sleep         the sleep hang, frozen (ras-sleep-20s.json: rank 3 behind on AllReduce)
  spin          equal frozen counts (ras-spin-20s.json: rank 3 spins on its GPU before the all-reduce)
  advancing     a healthy job: every connection, every rank's AllReduce count is 100 + N (rank 3 one behind
                on odd N, as a job between two launches looks)
  unresponsive  rank 3 listed under missing_ranks (unresponsive), ranks 0-2 frozen at AllReduce 51
  malformed     "{ this is not json" after the OK lines
  lying         JSON whose rank 3 is rank 9 of a 4-rank communicator
  slow          the handshake answered, the report never sent (the connection held open)
  trickle       the report one byte every 50 ms
  huge          8 MiB of a JSON array after the OK lines
  old           an NCCL before 2.28.7: SET FORMAT is an unknown command, the report is text
  notras        "HTTP/1.1 400 Bad Request" and close
  wire          replays wire-h200x2-sleep.bin (what real NCCL 2.28.9 sent, handshake included) once the
                VERBOSE STATUS line has come, whatever came before it
The job modes template one N-rank communicator whose rank r has the pid in DIR/pid.<r> (written by a real
job's workers; read at each connection, so a restarted job's new pids are served) on host H (127.0.0.1):
  job-behind    frozen: every rank launched AllReduce 51, rank R (--behind, default 1) only 50
  job-advancing every rank's AllReduce count is 100 + N at connection N (rank R one behind on odd N)
  job-idle      frozen, equal: every rank launched AllReduce 51
  job-gone      rank R listed under missing_ranks (unresponsive: its process is gone), the others frozen at
                AllReduce 51 (what NCCL 2.28.9 said on 2 x H200 when rank 1's mismatched broadcast completed on
                its side, it finished its script and rank 0 waited in the all-reduce)
While a pid file is missing they answer no communicator. --served FILE: after each answer naming every pid,
the count of such answers so far is written to FILE (a test waits for the detector's window to pass without
timing it).
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures", "hang")


def fixture(name):
    with open(os.path.join(FIX, name), "rb") as f:
        return f.read()


def job_report(mode, step, opt):
    pids = []
    for r in range(opt.ranks):
        try:
            with open(os.path.join(opt.pid_dir, "pid.%d" % r)) as f:
                pids.append(int(f.read().strip()))
        except (OSError, ValueError):
            pids = None
            break
    doc = {"nccl_version": "2.28.9", "cuda_runtime_version": 13000, "cuda_driver_version": 13000,
           "timestamp": "2026-11-28 00:00:00", "communicators_count": 0, "communicators": []}
    if pids is None:
        return json.dumps(doc).encode() + b"\n", False
    ranks = []
    for r, pid in enumerate(pids):
        n = 51
        if mode == "job-behind" and r == opt.behind:
            n = 50
        elif mode == "job-advancing":
            n = 100 + step - (1 if r == opt.behind and step % 2 == 1 else 0)
        ranks.append({"rank": r, "host": opt.host, "pid": pid, "cuda_dev": r, "nvml_dev": r,
                      "status": {"init_state": 0, "async_error": 0, "finalize_called": False, "destroy_flag": False,
                                 "abort_flag": False},
                      "collective_counts": {"Broadcast": 0, "Reduce": 0, "AllGather": 0, "ReduceScatter": 0,
                                            "AllReduce": n}})
    missing = []
    if mode == "job-gone":
        gone = ranks.pop(opt.behind)
        missing = [{"rank": gone["rank"], "host": gone["host"], "pid": gone["pid"], "cuda_dev": gone["cuda_dev"],
                    "nvml_dev": gone["nvml_dev"], "status": {"unresponsive": True, "considered_dead": False}}]
    doc["communicators_count"] = 1
    doc["communicators"] = [{"hash": "0x5eed000000000001", "secondary_hash": "0x1:0x2", "size": opt.ranks,
                             "ranks_count": len(ranks), "missing_ranks_count": len(missing), "ranks": ranks,
                             "missing_ranks": missing}]
    return json.dumps(doc, indent=2).encode() + b"\n", True


SERVED = [0]
SERVED_LOCK = threading.Lock()


def report(mode, step, opt=None):
    if mode.startswith("job-"):
        body, full = job_report(mode, step, opt)
        if full and opt.served:
            with SERVED_LOCK:
                SERVED[0] += 1
                with open(opt.served + ".tmp", "w") as f:
                    f.write("%d\n" % SERVED[0])
                os.rename(opt.served + ".tmp", opt.served)
        return body
    if mode in ("mismatch", "sleep", "spin"):
        return fixture("ras-%s-20s.json" % mode)
    if mode == "advancing":
        doc = json.loads(fixture("ras-sleep-12s.json"))
        for r in doc["communicators"][0]["ranks"]:
            n = 100 + step
            if r["rank"] == 3 and step % 2 == 1:
                n -= 1
            r["collective_counts"]["AllReduce"] = n
        return json.dumps(doc, indent=2).encode() + b"\n"
    if mode == "unresponsive":
        doc = json.loads(fixture("ras-sleep-20s.json"))
        comm = doc["communicators"][0]
        r3 = comm["ranks"].pop(3)
        comm["ranks_count"] = 3
        comm["missing_ranks_count"] = 1
        comm["missing_ranks"] = [{"rank": 3, "host": r3["host"], "pid": r3["pid"], "cuda_dev": 3, "nvml_dev": 3,
                                  "status": {"unresponsive": True, "considered_dead": False}}]
        return json.dumps(doc, indent=2).encode() + b"\n"
    if mode == "malformed":
        return b"{ this is not json\n"
    if mode == "lying":
        doc = json.loads(fixture("ras-sleep-20s.json"))
        doc["communicators"][0]["ranks"][3]["rank"] = 9
        return json.dumps(doc).encode()
    if mode == "old":
        return fixture("ras-sleep-20s.txt")
    raise ValueError(mode)


def serve(conn, mode, step, opt):
    conn.settimeout(30)
    buf = b""
    fmt = "text"
    try:
        if mode == "wire":
            while b"verbose status\n" not in buf.lower():
                data = conn.recv(4096)
                if not data:
                    return
                buf += data
            conn.sendall(fixture("wire-h200x2-sleep.bin"))
            return
        if mode == "notras":
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        while True:
            data = conn.recv(4096)
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                cmd = line.rstrip(b"\r").decode("ascii", "replace")
                low = cmd.lower()
                if low.startswith("client protocol "):
                    conn.sendall(b"SERVER PROTOCOL 2\n")
                elif low.startswith("timeout "):
                    ok = cmd[8:].isdigit()
                    conn.sendall(b"OK\n" if ok else b"ERROR: Invalid timeout value %s\n" % cmd[8:].encode())
                elif low.startswith("set format ") and mode != "old":
                    f = low[11:]
                    if f in ("json", "text"):
                        fmt = f
                        conn.sendall(b"OK\n")
                    else:
                        conn.sendall(b"ERROR: Invalid format %s\n" % cmd[11:].encode())
                elif low in ("status", "verbose status"):
                    if mode == "slow":
                        time.sleep(3600)
                        return
                    if mode == "huge":
                        chunk = b"[" + b"1," * 65535 + b"1]\n"
                        for _ in range(64):
                            conn.sendall(chunk)
                        return
                    body = report("sleep" if mode == "trickle" else mode, step, opt)
                    if fmt == "text" and mode != "old":
                        body = b"(text report)\n"
                    if mode == "trickle":
                        for i in range(len(body)):
                            conn.sendall(body[i:i + 1])
                            time.sleep(0.05)
                        return
                    conn.sendall(body)
                    return
                else:
                    conn.sendall(b"ERROR: Unknown command %s\n" % cmd.encode())
    except OSError:
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--pid-dir")
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--behind", type=int, default=1)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--served")
    ap.add_argument("--addr")
    a = ap.parse_args()
    modes = ("mismatch", "sleep", "spin", "advancing", "unresponsive", "malformed", "lying", "slow", "trickle", "huge",
             "old", "notras", "wire", "job-behind", "job-advancing", "job-idle", "job-gone")
    if a.mode.startswith("job-") and (not a.pid_dir or a.ranks < 1):
        print("ras_server.py: mode %s needs --pid-dir DIR and --ranks N" % a.mode, file=sys.stderr)
        sys.exit(2)
    if a.mode not in modes:
        print("ras_server.py: unknown mode %s (one of %s)" % (a.mode, ", ".join(modes)), file=sys.stderr)
        sys.exit(2)
    host, port = "127.0.0.1", 0
    if a.addr:
        host, _, p = a.addr.rpartition(":")
        if not host.startswith("127.") or not p.isdigit():
            print("ras_server.py: --addr %s: want 127.x.y.z:PORT" % a.addr, file=sys.stderr)
            sys.exit(2)
        port = int(p)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.addr:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    s.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % s.getsockname()[1])
    os.rename(tmp, a.port_file)
    step = 0
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn, a.mode, step, a), daemon=True).start()
        step += 1


if __name__ == "__main__":
    main()
