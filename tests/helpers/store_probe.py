"""Probe a TCPStore: connect, VALIDATE (torch >= 2.3's handshake), PING; print "answered" or "refused".

argv: HOST PORT. Exit 0 when answered, 3 when the server closed the connection instead, 2 when it could
not connect at all.
"""
import socket
import struct
import sys

host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port), timeout=10)
except OSError as e:
    print("no connection: %s" % e)
    sys.exit(2)
try:
    s.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE) + b"\x0d" + struct.pack("<I", 0x1234ABCD))
    got = b""
    while len(got) < 4:
        b = s.recv(4 - len(got))
        if not b:
            break
        got += b
except OSError as e:
    got = b""
    print("connection error: %s" % e)
if got == struct.pack("<I", 0x1234ABCD):
    print("answered")
    sys.exit(0)
print("refused")
sys.exit(3)
