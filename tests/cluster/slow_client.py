"""`python tests/cluster/slow_client.py MODE HOST PORT SOURCE COUNT SECONDS [once]`: an attacker that holds
COUNT connections to HOST:PORT from address SOURCE for SECONDS, never finishing a request: MODE `http`
sends a request line and then a header byte at a time (slowloris), `tls` a TLS record header and never the
rest of its ClientHello (a half-open handshake). A connection the server closes is opened again, at most
COUNT openings a second (bounded); with `once`, never (what the server does with those it holds). Prints
{"opened": N, "closed_by_server": N, "open_at_end": N}."""

from __future__ import annotations

import errno
import json
import socket
import sys
import time

OPENING = {"http": b"GET /xce/v1/status HTTP/1.1\r\nHost: x\r\n", "tls": b"\x16\x03\x01\x02\x00"}
TRICKLE = {"http": b"X", "tls": b""}


def open_one(host: str, port: int, source: str, first: bytes) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.bind((source, 0))
        sock.connect_ex((host, port))
    except OSError:
        sock.close()
        return None
    try:
        sock.send(first)
    except OSError:
        pass  # not connected yet: the trickle sends later
    return sock


def alive(sock: socket.socket, more: bytes) -> bool:
    try:
        if sock.recv(1, socket.MSG_PEEK) == b"":
            return False
    except BlockingIOError:
        pass
    except OSError:
        return False
    if more:
        try:
            sock.send(more)
        except BlockingIOError:
            pass
        except OSError as exc:
            return exc.errno in (errno.EAGAIN, errno.ENOTCONN)
    return True


def main(mode: str, host: str, port: int, source: str, count: int, seconds: float, once: bool) -> int:
    held: list[socket.socket] = []
    opened = closed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        round_start = time.monotonic()
        kept = []
        for sock in held:
            if alive(sock, TRICKLE[mode]):
                kept.append(sock)
            else:
                closed += 1
                sock.close()
        held = kept
        for _ in range(0 if once and opened else count - len(held)):
            sock = open_one(host, port, source, OPENING[mode])
            if sock is not None:
                held.append(sock)
                opened += 1
        time.sleep(max(0.0, 1.0 - (time.monotonic() - round_start)))
    print(json.dumps({"opened": opened, "closed_by_server": closed, "open_at_end": len(held)}))
    return 0


if __name__ == "__main__":
    mode, host, port, source, count, seconds = sys.argv[1:7]
    sys.exit(main(mode, host, int(port), source, int(count), float(seconds), sys.argv[7:8] == ["once"]))
