"""A store client that sends one byte per second (tests/integration/57): slow_client.py HOST PORT LOG.

Connects to HOST:PORT (retrying while nobody listens), then sends b"\\x00" once a second, forever. When the
server closes the connection it reconnects. Appends one line per event to LOG ("connected", "closed after N
bytes"), so the test can see that it was connected while the job ran.
"""
import socket
import sys
import time

host, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def note(msg):
    with open(log, "a") as f:
        f.write(msg + "\n")


while True:
    try:
        s = socket.create_connection((host, port), timeout=2)
    except OSError:
        time.sleep(0.2)
        continue
    note("connected")
    sent = 0
    try:
        while True:
            s.send(b"\x00")
            sent += 1
            time.sleep(1)
    except OSError as e:
        note("closed after %d bytes (%s)" % (sent, e))
        s.close()
