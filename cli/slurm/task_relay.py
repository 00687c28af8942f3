"""srun's tasks' output, sent back to srun, as Slurm's srun gets its tasks' output wherever they run.

Theory of operation. srun inside an allocation (cli/slurm/srun.py) listens
on a TCP port of its host and starts each task as `python -I -S
task_relay.py -- command...` through `xce launch`, with XCE_SRUN_RELAY
(host:port) and XCE_SRUN_KEY (a one-time key) in the task's environment,
never on its command line. The task connects, sends the key and its rank,
runs the command with its stdout and stderr as pipes, and sends what they
give as frames (one byte: 1 stdout, 2 stderr; four bytes: the length; the
bytes), then closes; it exits with the command's status (128+N for signal
N). srun writes each frame to its own stdout or stderr (`-l`: each line
with its task's rank, as `0: `). So a task's output reaches srun's
terminal or pipe under salloc and `srun --pty`, and the job's output file
in a batch job, as Slurm's does. A task that cannot connect runs with the
job's output, as before.

This file runs as a file with the standard library alone (`-I -S`, like
worker/shim.py): the side of srun that reads is `Relay`, imported by srun.
"""

from __future__ import annotations

import os
import secrets
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import BinaryIO

FRAME = struct.Struct("!BI")
CHUNK = 65536
ACCEPT_WAIT_S = 30.0  # a task that connected not by then never will (srun's own wait for its end rules)
DRAIN_WAIT_S = 10.0  # after its tasks ended, the longest srun waits for their last bytes
ACCEPT_POLL_S = 0.05  # how soon the acceptor sees that srun closes
MAX_READERS = 1024  # connections read at once (every task's, of the largest srun, and then some)


class Relay:
    """srun's side: a listener on this host, each task's connection read into stdout and stderr."""

    def __init__(self, label: bool, out: BinaryIO, err: BinaryIO) -> None:
        self.key = secrets.token_hex(16)
        self.label = label
        self.streams = {1: out, 2: err}
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("", 0))
        self.listener.listen(64)
        self.readers: list[threading.Thread] = []
        self.closing = False
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def env(self) -> dict[str, str]:
        """What a task needs to connect: this host's name (resolved where the task runs) and the key."""
        port = self.listener.getsockname()[1]
        return {"XCE_SRUN_RELAY": f"{socket.gethostname()}:{port}", "XCE_SRUN_KEY": self.key}

    def _accept(self) -> None:
        self.listener.settimeout(ACCEPT_POLL_S)
        drained_by: float | None = None
        while True:
            # A task that ended has connected: its connection waits in the listener's backlog even if
            # not accepted yet. Once srun closes (every task ended), the backlog is emptied, then no more
            # (within DRAIN_WAIT_S: strangers connecting without end must not keep srun from exiting).
            closing = self.closing
            if closing and drained_by is None:
                drained_by = time.monotonic() + DRAIN_WAIT_S
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                if closing:
                    return
                continue
            except OSError:
                return
            if drained_by is not None and time.monotonic() > drained_by:
                conn.close()
                return
            # Anyone on the network may connect before the key is checked: a flood of connections
            # holds at most MAX_READERS threads (a task's own connection waits at most ACCEPT_WAIT_S).
            self.readers = [r for r in self.readers if r.is_alive()]
            if len(self.readers) >= MAX_READERS:
                conn.close()
                continue
            reader = threading.Thread(target=self._read, args=(conn,), daemon=True)
            self.readers.append(reader)
            reader.start()

    def _read(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(ACCEPT_WAIT_S)
            hello = _line(conn)
            if hello is None or not secrets.compare_digest(hello.partition(b" ")[0], self.key.encode()):
                return
            rank = hello.partition(b" ")[2].decode(errors="replace")
            conn.settimeout(None)
            pending = {1: b"", 2: b""}
            while (frame := _frame(conn)) is not None:
                stream, data = frame
                if self.label:
                    pending[stream] += data
                    *whole, pending[stream] = pending[stream].split(b"\n")
                    data = b"".join(f"{rank}: ".encode() + line + b"\n" for line in whole)
                self._write(stream, data)
            for stream, rest in pending.items():
                if rest:
                    self._write(stream, f"{rank}: ".encode() + rest)

    def _write(self, stream: int, data: bytes) -> None:
        if not data:
            return
        with self.lock:
            self.streams[stream].write(data)
            self.streams[stream].flush()

    def close(self) -> None:
        """After the tasks ended: every connection they made accepted (none is left in the backlog), their
        last bytes read (for DRAIN_WAIT_S at most), the listener shut."""
        self.closing = True
        self.acceptor.join(DRAIN_WAIT_S + 1)
        self.listener.close()
        for reader in self.readers:
            reader.join(DRAIN_WAIT_S)


def _line(conn: socket.socket) -> bytes | None:
    data = b""
    while b"\n" not in data:
        try:
            chunk = conn.recv(1)
        except OSError:
            return None
        if not chunk or len(data) > 256:
            return None
        data += chunk
    return data.strip()


def _exactly(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _frame(conn: socket.socket) -> tuple[int, bytes] | None:
    try:
        head = _exactly(conn, FRAME.size)
        if head is None:
            return None
        stream, size = FRAME.unpack(head)
        data = _exactly(conn, size)
    except OSError:
        return None
    return None if data is None or stream not in (1, 2) else (stream, data)


def _connect(address: str, key: str, rank: str) -> socket.socket | None:
    host, _, port = address.rpartition(":")
    try:
        conn = socket.create_connection((host, int(port)), timeout=ACCEPT_WAIT_S)
        conn.settimeout(None)
        conn.sendall(f"{key} {rank}\n".encode())
        return conn
    except (OSError, ValueError):
        return None


def _relay(conn: socket.socket, command: list[str]) -> int:
    """Run `command`, its output sent over `conn`; its status."""
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        words = f"srun: error: execve(): {command[0]}: {exc.strerror}\n".encode()
        conn.sendall(FRAME.pack(2, len(words)) + words)
        conn.close()
        return 2
    assert process.stdout is not None and process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, 1)
    selector.register(process.stderr, selectors.EVENT_READ, 2)
    connected = True
    while selector.get_map():
        for key, _ in selector.select():
            data = os.read(key.fd, CHUNK)
            if not data:
                selector.unregister(key.fileobj)
                continue
            if connected:
                try:
                    conn.sendall(FRAME.pack(key.data, len(data)) + data)
                    continue
                except OSError:  # srun went away: the output goes where the task's own goes
                    connected = False
            os.write(key.data, data)
    conn.close()
    status = process.wait()
    return 128 - status if status < 0 else status


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    address = os.environ.pop("XCE_SRUN_RELAY", "")
    key = os.environ.pop("XCE_SRUN_KEY", "")
    conn = _connect(address, key, os.environ.get("SLURM_PROCID", "0")) if address and key else None
    if conn is None:
        os.execvp(command[0], command)
    return _relay(conn, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
