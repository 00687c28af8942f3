"""bsub -I, -Ip, -Is: an interactive job, its stdin and output at the submitting terminal.

Theory of operation (LSF's way: the job connects back to its submitter).
bsub listens on the address the cluster sees it from, and submits the job
with that address and a one-time key in its environment (XCE_INTERACTIVE,
XCE_INTERACTIVE_KEY: its owner's alone, whatever the reader's role); the
job's shim connects as the job's owner, and each side proves it holds the
key without sending it: the job sends a nonce, bsub answers HMAC(key,
"submitter:" + nonce) and a nonce of its own, the job answers HMAC(key, "job:"
+ that nonce) (worker/shim.py). So a listener that is not the submitter (its
port taken once bsub is gone) gets nothing from the job, which ends
(INTERACTIVE_LOST), and a connection that is not the job's gets nothing from
bsub; several may be pending at once, each for HANDSHAKE_S at most. bsub kills
the job if it goes away (a hangup, Ctrl-C, TERM, an error) before the session
ended. With -I the
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
HANDSHAKE_S = 5.0  # a connection that has not proved itself by then is dropped
BACKLOG = 64


class _Gone(Exception):
    """A hangup or TERM: bsub is going away."""


def _gone(signum: int, frame: object) -> None:
    raise _Gone(signal.Signals(signum).name)


def local_address(client: Client) -> str:
    """This host's address as the cluster reaches it: the one a route to the leader leaves from."""
    host, _, port = client.target.rpartition(":")
    probe = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((host.strip("[]"), int(port)))
        return str(probe.getsockname()[0])
    finally:
        probe.close()


def run(client: Client, spec: api.JobSpec, terminal: bool, slurm: bool = False) -> int:
    """The interactive job's session; its exit code. `slurm`: srun's words (nothing on stdout but the
    job's, its news on stderr as `srun: job 17 ...`), else bsub's."""
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
        previous = {sig: signal.signal(sig, _gone) for sig in (signal.SIGHUP, signal.SIGTERM)}
        job: api.Job | None = None
        try:
            job = client.submit([spec]).jobs[0]
            default = "default " if not spec.queue else ""
            if not slurm:
                print(f"Job <{job.id}> is submitted to {default}queue <{job.spec.queue}>.", flush=True)
                print("<<Waiting for dispatch ...>>", file=sys.stderr, flush=True)
            accepted = _accept(client, listener, key.encode(), job.id)
            if accepted is None:
                return _ended(client, job.id, connected=False, slurm=slurm)
            conn, early = accepted
            _write_all(1, early)  # (output that came with the job's proof: never dropped)
            started = client.get_job(job.id)
            if not slurm:
                print(f"<<Starting on {shown(started.host or 'its host')}>>", file=sys.stderr, flush=True)
            with conn:
                if terminal:
                    _terminal_session(conn)
                else:
                    _plain_session(client, conn, job.id)
        except BaseException as exc:  # going away before the session ended: the job goes too
            if job is not None:
                print(f"\n<<Terminating job {job.id} ...>>", file=sys.stderr, flush=True)
                with contextlib.suppress(XceError):
                    client.control(job.id, api.KILL)
            if isinstance(exc, (KeyboardInterrupt, _Gone)):
                return 130
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return _ended(client, job.id, connected=True, slurm=slurm)


class _Pending:
    """A connection in the handshake: its bytes so far, the nonce sent to it, its deadline."""

    def __init__(self, conn: socket.socket, deadline: float) -> None:
        self.conn, self.deadline = conn, deadline
        self.data = b""
        self.nonce = b""

    def line(self) -> bytes | None:
        """Its next line once whole; None until then (ValueError: too long, or closed)."""
        chunk = self.conn.recv(512)
        if not chunk:
            raise ValueError("closed")
        self.data += chunk
        if len(self.data) > 512:
            raise ValueError("too long")
        if b"\n" not in self.data:
            return None
        line, _, self.data = self.data.partition(b"\n")
        return line.strip()


def _accept(client: Client, listener: socket.socket, key: bytes,
            job_id: int) -> tuple[socket.socket, bytes] | None:
    """The job's connection, once it proved the key, and what it sent after its proof (the job's first
    output, read with it); None once the job ended without one."""
    pending: dict[int, _Pending] = {}
    next_look = time.monotonic() + 1.0
    try:
        while True:
            now = time.monotonic()
            for fd in [fd for fd, p in pending.items() if p.deadline <= now]:
                pending.pop(fd).conn.close()
            readable, _, _ = select.select([listener.fileno(), *pending], [], [], 0.5)
            if listener.fileno() in readable:
                conn, _ = listener.accept()
                pending[conn.fileno()] = _Pending(conn, time.monotonic() + HANDSHAKE_S)
            for fd in [fd for fd in readable if fd in pending]:
                if _step(pending[fd], key):
                    done = pending.pop(fd)
                    done.conn.setblocking(True)
                    return done.conn, done.data
                if pending[fd].conn.fileno() < 0:
                    pending.pop(fd)
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + 1.0
                if client.get_job(job_id).state in ENDED:
                    return None
    finally:
        for each in pending.values():
            each.conn.close()


def _step(each: _Pending, key: bytes) -> bool:
    """One step of a connection's handshake; True once it proved the key (closed if it failed)."""
    try:
        line = each.line()
        if line is None:
            return False
        if not each.nonce:
            if not line.startswith(HELLO):
                raise ValueError("not a job's hello")
            theirs = line[len(HELLO):]
            each.nonce = secrets.token_hex(16).encode()
            proof = hmac.new(key, b"submitter:" + theirs, "sha256").hexdigest().encode()
            each.conn.sendall(proof + b" " + each.nonce + b"\n")
            return False
        expected = hmac.new(key, b"job:" + each.nonce, "sha256").hexdigest().encode()
        if hmac.compare_digest(line, expected):
            return True
        raise ValueError("a wrong proof")
    except (OSError, ValueError):
        each.conn.close()
        return False


def _plain_session(client: Client, conn: socket.socket, job_id: int) -> None:
    """-I: this stdin to the job (its end, or none: the job's stdin ends), its output here; Ctrl-C kills
    it (and the session goes on until the job's end closes it)."""
    stdin = _fd(sys.stdin)
    sources = [conn.fileno()] + ([stdin] if stdin is not None else [])
    if stdin is None:
        conn.shutdown(socket.SHUT_WR)
    while True:
        try:
            readable, _, _ = select.select(sources, [], [])
            if conn.fileno() in readable:
                data = conn.recv(65536)
                if not data:
                    return
                _write_all(1, data)
            if stdin is not None and stdin in readable:
                data = os.read(stdin, 65536)
                if data:
                    conn.sendall(data)
                else:
                    conn.shutdown(socket.SHUT_WR)
                    sources.remove(stdin)
        except (ConnectionResetError, BrokenPipeError):  # the job ended with input it did not read
            return
        except KeyboardInterrupt:
            print("\n<<Terminating job ...>>", file=sys.stderr, flush=True)
            with contextlib.suppress(XceError):
                client.control(job_id, api.KILL)


def _fd(stream: object) -> int | None:
    """A standard stream's descriptor, None if it is closed (bsub -I 0<&-)."""
    try:
        return int(stream.fileno()) if stream is not None else None  # type: ignore[attr-defined]
    except (OSError, ValueError, AttributeError):
        return None


def _terminal_session(conn: socket.socket) -> None:
    """-Is: this terminal raw, every key to the job's terminal, window sizes as they change (a
    SIGWINCH wakes the loop, which sends the new size between two frames, never inside one)."""
    stdin = _fd(sys.stdin)
    if stdin is None:
        stdin = os.open(os.devnull, os.O_RDONLY)
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
                    _write_all(1, data)
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
    """All of `data` to `fd`; nothing if it is closed (bsub -I 1>&-: the output is dropped)."""
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


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


def _ended(client: Client, job_id: int, connected: bool, slurm: bool = False) -> int:
    """Wait for the job's end (the cluster's word, through any failover); its exit code."""
    delay = 0.05
    while (job := client.get_job(job_id)).state not in ENDED:
        time.sleep(delay)
        delay = min(1.0, delay * 1.5)
    if not connected:
        why = job.start_error or job.exit_reason or "it ended before it started"
        print(f"srun: error: job {job_id} ended before it ran: {shown(why)}" if slurm else
              f"<<Job {job_id} ended without its terminal: {shown(why)}>>", file=sys.stderr)
    elif not slurm:
        print("<<Job is finished>>", file=sys.stderr, flush=True)
    return formats.exit_status(job)
