"""Minimal raw-socket TCPStore client for tests (no torch). Spec: shared/spec/tcpstore-protocol.md.

All integers little-endian. Two numberings:
  V2      (torch >= 2.2): connection starts with VALIDATE 00 ce f7 85 3c (+ PING 0d <u32> echoed)
  LEGACY  (torch 1.13/2.0): no handshake, SET=0 COMPARE_SET=1 GET=2 ADD=3 CHECK=4 WAIT=5 GETNUMKEYS=6 DELETE_KEY=8
"""
import os
import socket
import struct

V2 = {"SET": 1, "COMPARE_SET": 2, "GET": 3, "ADD": 4, "CHECK": 5, "WAIT": 6, "GETNUMKEYS": 7,
      "DELETE_KEY": 8, "APPEND": 9, "MULTI_GET": 10, "MULTI_SET": 11, "CANCEL_WAIT": 12, "PING": 13}
LEGACY = {"SET": 0, "COMPARE_SET": 1, "GET": 2, "ADD": 3, "CHECK": 4, "WAIT": 5, "GETNUMKEYS": 6,
          "DELETE_KEY": 8}
VALIDATE = b"\x00" + struct.pack("<I", 0x3C85F7CE)


def s_(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def req(codes, op, *fields):
    """Encodes a request: fields are bytes/str (length-prefixed) or ('u64', n) / ('i64', n) / ('u32', n)."""
    out = bytes([codes[op]])
    for f in fields:
        if isinstance(f, tuple):
            kind, n = f
            out += struct.pack({"u64": "<Q", "i64": "<q", "u32": "<I"}[kind], n)
        else:
            out += s_(f)
    return out


def wait_req(codes, keys):
    return req(codes, "WAIT", ("u64", len(keys)), *keys)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("EOF after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def recv_u64(sock):
    return struct.unpack("<Q", recv_exact(sock, 8))[0]


def recv_bytes(sock):
    return recv_exact(sock, recv_u64(sock))


def connect(host, port, v2, timeout=60.0):
    """Connects; for v2 sends VALIDATE+PING and checks the echo. Returns the socket."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if v2:
        nonce = (os.getpid() ^ sock.getsockname()[1]) & 0xFFFFFFFF
        sock.sendall(VALIDATE + req(V2, "PING", ("u32", nonce)))
        echo = recv_exact(sock, 4)
        if struct.unpack("<I", echo)[0] != nonce:
            raise ConnectionError("PING echo %r != nonce %#x" % (echo, nonce))
    return sock


def is_closed(sock, timeout=60.0):
    """True when the peer closed the connection (EOF or reset) within timeout."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
