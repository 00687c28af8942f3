"""bsub -I, -Ip, -Is: an interactive job, its stdin and output at the submitting terminal.

Theory of operation (LSF's way: the job connects back to its submitter).
bsub listens on the address the cluster sees it from, and submits the job
with that address and a one-time key in its environment (XCE_INTERACTIVE,
XCE_INTERACTIVE_KEY: hidden from other users as every environment value is);
the job's shim connects as the job's owner and sends the key first
(worker/shim.py), and bsub takes that one connection. With -I the
connection is the command's stdin, stdout and stderr; Ctrl-C kills the job.
With -Is (and -Ip) the shim gives the command a terminal of its own and
relays: bsub puts this terminal in raw mode, so every key (Ctrl-C, Ctrl-Z)
reaches the job's terminal as typed, and window sizes follow in frames of
their own (`D`/`W` + length + payload). Nothing of the session passes
through the controllers: a leader's failover does not touch it; bsub asks
the cluster only when the job started and how it ended, and exits with its
exit code. A job that ends without connecting (it could not start, or was
killed while pending) says why.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterator

from cli.lsf import formats
from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

ENDED = (api.DONE, api.EXIT)
HELLO = b"XCE-INTERACTIVE "


def local_address(client: Client) -> str:
    """This host's address as the cluster reaches it: the one a route to the leader leaves from."""
    host, _, port = client.target.rpartition(":")
    probe = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((host.strip("[]"), int(port)))
        return str(probe.getsockname()[0])
    finally:
        probe.close()


def run(client: Client, spec: api.JobSpec, terminal: bool) -> int:
    address = local_address(client)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((address, 0))
        listener.listen(4)
        key = secrets.token_hex(16)
        port = listener.getsockname()[1]
        shown_address = f"[{address}]" if family == socket.AF_INET6 else address
        spec.env["XCE_INTERACTIVE"] = f"{shown_address}:{port}"
        spec.env["XCE_INTERACTIVE_KEY"] = key
        if terminal:
            spec.env["XCE_INTERACTIVE_PTY"] = "1"
        job = client.submit([spec]).jobs[0]
        default = "default " if not spec.queue else ""
        print(f"Job <{job.id}> is submitted to {default}queue <{job.spec.queue}>.", flush=True)
        print("<<Waiting for dispatch ...>>", file=sys.stderr, flush=True)
        try:
            conn = _accept(client, listener, key, job.id)
        except KeyboardInterrupt:  # as LSF's: Ctrl-C while it waits ends the job
            print("\n<<Terminating job ...>>", file=sys.stderr, flush=True)
            with contextlib.suppress(XceError):
                client.control(job.id, api.KILL)
            return 130
    if conn is None:
        return _ended(client, job.id, connected=False)
    started = client.get_job(job.id)
    print(f"<<Starting on {shown(started.host or 'its host')}>>", file=sys.stderr, flush=True)
    with conn:
        if terminal:
            _terminal_session(conn)
        else:
            _plain_session(client, conn, job.id)
    return _ended(client, job.id, connected=True)


def _accept(client: Client, listener: socket.socket, key: str, job_id: int) -> socket.socket | None:
    """The job's connection (its key checked), or None once the job ended without one."""
    while True:
        readable, _, _ = select.select([listener], [], [], 1.0)
        if not readable:
            if client.get_job(job_id).state in ENDED:
                return None
            continue
        conn, _ = listener.accept()
        conn.settimeout(10)
        try:
            hello = _line(conn)
        except OSError:
            conn.close()
            continue
        if hmac.compare_digest(hello, HELLO + key.encode()):
            conn.settimeout(None)
            return conn
        conn.close()  # not the job's: keep waiting for it


def _line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data.rstrip(b"\n")


def _plain_session(client: Client, conn: socket.socket, job_id: int) -> None:
    """-I: this stdin to the job (its end: the job's stdin ends), its output here; Ctrl-C kills it."""
    sources = [conn.fileno(), sys.stdin.fileno()]
    while True:
        try:
            readable, _, _ = select.select(sources, [], [])
            if conn.fileno() in readable:
                data = conn.recv(65536)
                if not data:
                    return
                _write_all(sys.stdout.fileno(), data)
            if sys.stdin.fileno() in readable:
                data = os.read(sys.stdin.fileno(), 65536)
                if data:
                    conn.sendall(data)
                else:
                    conn.shutdown(socket.SHUT_WR)
                    sources.remove(sys.stdin.fileno())
        except KeyboardInterrupt:
            print("\n<<Terminating job ...>>", file=sys.stderr, flush=True)
            with contextlib.suppress(XceError):
                client.control(job_id, api.KILL)


def _terminal_session(conn: socket.socket) -> None:
    """-Is: this terminal raw, every key to the job's terminal, window sizes as they change (a
    SIGWINCH wakes the loop, which sends the new size between two frames, never inside one)."""
    stdin = sys.stdin.fileno()
    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    with _raw(stdin) as is_tty:
        previous_fd = signal.set_wakeup_fd(wake_w)
        previous = signal.signal(signal.SIGWINCH, lambda *_: None)
        try:
            if is_tty:
                _send_size(conn, stdin)
            sources = [conn.fileno(), stdin, wake_r]
            while True:
                readable, _, _ = select.select(sources, [], [])
                if wake_r in readable and signal.SIGWINCH in os.read(wake_r, 64) and is_tty:
                    _send_size(conn, stdin)
                if conn.fileno() in readable:
                    data = conn.recv(65536)
                    if not data:
                        return
                    _write_all(sys.stdout.fileno(), data)
                if stdin in readable:
                    data = os.read(stdin, 65536)
                    if not data:
                        sources.remove(stdin)  # no more keys: the job goes on until it ends
                        continue
                    conn.sendall(b"D" + len(data).to_bytes(4, "big") + data)
        finally:
            signal.signal(signal.SIGWINCH, previous)
            signal.set_wakeup_fd(previous_fd)
            os.close(wake_r)
            os.close(wake_w)


def _send_size(conn: socket.socket, fd: int) -> None:
    rows, cols = _size(fd)
    conn.sendall(b"W" + (4).to_bytes(4, "big") + struct.pack("!HH", rows, cols))


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[bool]:
    if not os.isatty(fd):
        yield False
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _size(fd: int) -> tuple[int, int]:
    import fcntl
    import termios

    rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    return rows, cols


def _ended(client: Client, job_id: int, connected: bool) -> int:
    """Wait for the job's end (the cluster's word, through any failover); its exit code."""
    delay = 0.05
    while (job := client.get_job(job_id)).state not in ENDED:
        time.sleep(delay)
        delay = min(1.0, delay * 1.5)
    if not connected:
        why = job.start_error or job.exit_reason or "it ended before it started"
        print(f"<<Job {job_id} ended without its terminal: {shown(why)}>>", file=sys.stderr)
    else:
        print("<<Job is finished>>", file=sys.stderr, flush=True)
    return formats.exit_status(job)
