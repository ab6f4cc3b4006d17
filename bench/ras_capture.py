"""Raw NCCL RAS answers (JSON and text) while a job runs, for the reader's fixtures: queries
RAS_ADDR (default localhost:28028) every RAS_EVERY seconds for RAS_FOR seconds and appends every answer, as sent,
to the file named by the first argument, each after a line '==== <t> s <format>'."""
import os
import socket
import sys
import time


def ask(addr, fmt):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    q = "CLIENT PROTOCOL 2\nTIMEOUT 5\n" + ("SET FORMAT json\n" if fmt == "json" else "") + "VERBOSE STATUS\n"
    s.sendall(q.encode())
    data = b""
    s.settimeout(10)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError as e:
        data += f"\n[read ended: {e}]".encode()
    s.close()
    return data


def main():
    addr = os.environ.get("RAS_ADDR", "localhost:28028")
    every, total = float(os.environ.get("RAS_EVERY", "3")), float(os.environ.get("RAS_FOR", "30"))
    t0 = time.monotonic()
    with open(sys.argv[1], "ab") as out:
        while time.monotonic() - t0 < total:
            for fmt in ("json", "text"):
                try:
                    data = ask(addr, fmt)
                except OSError as e:
                    data = f"[no answer: {e}]".encode()
                out.write(f"==== {time.monotonic() - t0:.1f} s {fmt}\n".encode() + data + b"\n")
                out.flush()
            time.sleep(every)


if __name__ == "__main__":
    main()
