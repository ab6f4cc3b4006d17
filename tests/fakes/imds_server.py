#!/usr/bin/python3
"""A fake EC2 instance metadata service (IMDSv2) for tests, on 127.0.0.1 only. Python stdlib only.

Usage: imds_server.py --mode MODE --port-file FILE [--instance-id ID]
Listens on two ephemeral loopback ports and writes "IMDS_PORT CONTROL_PORT\n" to FILE once both listen.
The control port answers GET /count with JSON {"connections": N, "requests": M, "puts": P, "gets": G}:
connections accepted and requests read on the IMDS port (control traffic is never counted).
Stops on SIGTERM / SIGINT.

Modes (what the IMDS port does):
  normal     IMDSv2 required: PUT /latest/api/token needs X-aws-ec2-metadata-token-ttl-seconds in 1..21600
             (else 400) and returns a token; a GET without that token gets 401. Serves instance-type
             p4d.24xlarge, instance-id i-0123456789abcdef0, placement/availability-zone us-east-1a,
             placement/group-name trun-pg (--instance-id ID serves ID instead, e.g. one fake host per
             network namespace); anything else 404.
  nogroup    normal, but placement/group-name is 404 (not in a placement group).
  stall      accepts connections and never answers (what a pod behind PUT hop limit 1 sees for the PUT).
  token401   the token PUT is answered 401, and so is every GET (IMDSv2 required).
  token400   the token PUT is answered 400 (terminal for a client).
  malformed  token flow works, instance-type holds control bytes, instance-id is 1 MiB long.
  badfields  token flow works, instance-type is fine, the other fields are malformed (a 1 MiB id, a zone
             with a NUL byte, a 300-byte group name).
  v1only     an IMDSv1-only service: the PUT is answered 405, tokenless GETs are served as in normal.
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "AQAEAFakeTokenForTrunTests_0123456789abcdefABCDEF=="
DATA = {
    "instance-type": b"p4d.24xlarge",
    "instance-id": b"i-0123456789abcdef0",
    "placement/availability-zone": b"us-east-1a",
    "placement/group-name": b"trun-pg",
}
MODES = ("normal", "nogroup", "stall", "token401", "token400", "malformed", "badfields", "v1only")

lock = threading.Lock()
counts = {"connections": 0, "requests": 0, "puts": 0, "gets": 0}
stop = threading.Event()


def bump(key):
    with lock:
        counts[key] += 1


class Imds(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "EC2ws"
    mode = "normal"

    def log_message(self, fmt, *args):
        sys.stderr.write("imds_server: %s %s\n" % (self.address_string(), fmt % args))

    def handle(self):
        bump("connections")
        if self.mode == "stall":
            stop.wait(120)  # never answer; the client times out and closes
            return
        super().handle()

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        bump("requests")
        bump("puts")
        if self.path != "/latest/api/token":
            return self.reply(404, b"Not Found")
        if self.mode == "token401":
            return self.reply(401, b"Unauthorized")
        if self.mode == "token400":
            return self.reply(400, b"Bad Request")
        if self.mode == "v1only":
            return self.reply(405, b"Method Not Allowed")
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return self.reply(400, b"Bad Request")
        self.reply(200, TOKEN.encode(), [("X-aws-ec2-metadata-token-ttl-seconds", ttl)])

    def do_GET(self):
        bump("requests")
        bump("gets")
        prefix = "/latest/meta-data/"
        if self.mode in ("token401",):
            return self.reply(401, b"Unauthorized")
        if self.mode != "v1only" and self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            return self.reply(401, b"Unauthorized")
        if not self.path.startswith(prefix):
            return self.reply(404, b"Not Found")
        key = self.path[len(prefix):]
        body = DATA.get(key)
        if self.mode == "nogroup" and key == "placement/group-name":
            body = None
        if self.mode == "malformed":
            if key == "instance-type":
                body = b"p4d.24xl\x01\x02\x1b[31m"
            elif key == "instance-id":
                body = b"i-" + b"a" * (1 << 20)
        if self.mode == "badfields":
            if key == "instance-id":
                body = b"i-" + b"0" * (1 << 20)
            elif key == "placement/availability-zone":
                body = b"us-east-1a\x00evil"
            elif key == "placement/group-name":
                body = b"g" * 300
        if body is None:
            return self.reply(404, b"Not Found")
        self.reply(200, body, [("Content-Type", "text/plain")])


class Control(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        if self.path != "/count":
            self.send_error(404)
            return
        with lock:
            body = json.dumps(counts).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    address_family = socket.AF_INET


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=MODES, default="normal")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--instance-id", default=None, help="instance-id to serve (default i-0123456789abcdef0)")
    args = ap.parse_args()
    Imds.mode = args.mode
    if args.instance_id is not None:
        DATA["instance-id"] = args.instance_id.encode()
    imds = Server(("127.0.0.1", 0), Imds)
    ctl = Server(("127.0.0.1", 0), Control)
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
               for s in (imds, ctl)]
    for t in threads:
        t.start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (imds.server_address[1], ctl.server_address[1]))
    os.replace(tmp, args.port_file)

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(0.2):
        pass
    imds.shutdown()
    ctl.shutdown()
    imds.server_close()
    ctl.server_close()


if __name__ == "__main__":
    main()
