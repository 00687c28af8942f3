"""Where `xce launch` inside a job asks for a task: a Unix socket in the worker's spool.

Theory of operation. A job gets XCE_LAUNCH_SOCKET (this socket), its
XCE_JOB_ID, XCE_JOB_ATTEMPT and XCE_JOB_CREDENTIAL. `xce launch HOST -- CMD`
connects and sends a LaunchTask; the worker believes it only if the
credential is the one it holds for that (job, attempt) and the peer (from
SO_PEERCRED, which the kernel vouches for) is the job's owner or root, then
passes it to the leader over its stream, which checks it against committed
state and sends it to the target host's worker. What becomes of the task
(started, ended, refused) comes back the same way and is written to the
connection; the connection closes at the end. A refusal marked `retry` (the
target host is not connected, say during a failover) is asked again every
second for up to a minute. A launch still waiting when the worker re-joins
is sent again: the task id makes the target run it at most once.

Frames on the socket: 4 bytes of length (big-endian), then the protobuf.
The socket is the worker's (mode 0666, in the 0711 spool): anyone may
connect; only the credential and the peer's uid let a request through. A
connection holds a thread while its launcher waits: at most MAX_CONNECTIONS
at once, and at most MAX_PER_UID of one uid, so that one user cannot take
them all (a connection past either is closed at once).
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

MAX_FRAME = 1 << 20
RETRY_S = 1.0
RETRY_FOR_S = 60.0
ASK_AGAIN_S = 5.0  # how often a launch still waiting is asked again (a state lost with a stream)
MAX_CONNECTIONS = 512  # at once, any user: each is a thread
MAX_PER_UID = 128  # at once, of one uid (a job on 100 hosts launches on its 99 others at once)
FIRST_FRAME_S = 10.0  # the whole request, from the connection on
SEND_S = 5.0  # to write a state to a launcher
SOCKET_NAME = "launch.sock"

Key = tuple[int, int, str]


def _peer_uid(conn: socket.socket) -> int:
    """The connecting process's uid, as the kernel says (SO_PEERCRED); -1 if it cannot be read."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return -1
    return int(struct.unpack("3i", creds)[1])


def read_frame(conn: socket.socket, deadline: float | None = None) -> bytes | None:
    """One frame; None at the end, for a frame too large, or past `deadline` (monotonic)."""
    head = _read(conn, 4, deadline)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        return None
    return _read(conn, size, deadline)


def write_frame(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(struct.pack(">I", len(payload)) + payload)


def _read(conn: socket.socket, size: int, deadline: float | None = None) -> bytes | None:
    chunks, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            conn.settimeout(left)
        chunk = conn.recv(size - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class LaunchServer:
    """`check(request, uid)`: None if this host's record of the job lets the request through, else
    why not; `forward(request)`: pass it to the leader (False: not connected now)."""

    def __init__(self, path: Path, check: Callable[[api.LaunchTask, int], str | None],
                 forward: Callable[[api.LaunchTask], bool]) -> None:
        self.path = path
        self._check, self._forward = check, forward
        self._lock = threading.Lock()
        self._waiting: dict[Key, tuple[socket.socket, api.LaunchTask, float]] = {}
        self._retry: dict[Key, float] = {}  # refused for now: ask again at
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._by_uid: Counter[int] = Counter()  # connections held, by the peer's uid (under _lock)
        self._stop = threading.Event()
        if path.exists() or path.is_symlink():
            path.unlink()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        os.chmod(path, 0o666)
        self._server.listen(64)
        threading.Thread(target=self._accept, daemon=True, name="launch-accept").start()
        threading.Thread(target=self._retry_loop, daemon=True, name="launch-retry").start()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
        for conn, _, _ in waiting:
            conn.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            uid = _peer_uid(conn)
            with self._lock:
                mine = self._by_uid[uid] < MAX_PER_UID
                if mine:
                    self._by_uid[uid] += 1
            if not mine:
                log.warning("launch socket: uid %d holds %d connections already: one more closed", uid,
                            MAX_PER_UID)
                conn.close()
                continue
            if not self._slots.acquire(blocking=False):  # full: no thread for it
                self._release_uid(uid)
                conn.close()
                continue
            try:
                threading.Thread(target=self._serve, args=(conn, uid), daemon=True,
                                 name="launch-conn").start()
            except RuntimeError:  # no thread to be had (the host's limit): this one is refused
                self._slots.release()
                self._release_uid(uid)
                conn.close()

    def _release_uid(self, uid: int) -> None:
        with self._lock:
            self._by_uid[uid] -= 1
            if self._by_uid[uid] <= 0:
                del self._by_uid[uid]

    def _serve(self, conn: socket.socket, uid: int) -> None:
        try:
            self._serve_one(conn, uid)
        finally:
            self._slots.release()
            self._release_uid(uid)

    def _serve_one(self, conn: socket.socket, uid: int) -> None:
        try:
            raw = read_frame(conn, time.monotonic() + FIRST_FRAME_S)
            conn.settimeout(SEND_S)  # a launcher that stops reading does not hold up the others
            request = api.LaunchTask.FromString(raw) if raw is not None else None
        except Exception:  # noqa: BLE001 - a client's garbage ends its connection, nothing else
            conn.close()
            return
        if request is None:
            conn.close()
            return
        why = self._check(request, uid)
        if why is not None:
            self._answer(conn, api.TaskState(job_id=request.job_id, attempt=request.attempt,
                                             task_id=request.task_id, host=request.host,
                                             phase=api.TASK_REFUSED, reason=why), last=True)
            return
        key = (request.job_id, request.attempt, request.task_id)
        with self._lock:
            earlier = self._waiting.pop(key, None)
            self._waiting[key] = (conn, request, time.monotonic() + RETRY_FOR_S)
        if earlier is not None:
            earlier[0].close()  # a repeat of the same task (its launcher reconnected): this one waits
        self._forward(request)
        try:  # the thread (and its slot) lasts as long as the launcher waits; its going away ends it
            while True:
                try:
                    if not conn.recv(1):
                        break
                except TimeoutError:
                    continue
        except OSError:
            pass
        with self._lock:
            if self._waiting.get(key, (None,))[0] is conn:
                del self._waiting[key]
                self._retry.pop(key, None)
        conn.close()

    def deliver(self, state: api.TaskState) -> None:
        """What became of a task this host asked for."""
        key = (state.job_id, state.attempt, state.task_id)
        with self._lock:
            waiting = self._waiting.get(key)
            if waiting is None:
                return
            conn, request, until = waiting
            if state.phase == api.TASK_REFUSED and state.retry and time.monotonic() < until:
                self._retry[key] = time.monotonic() + RETRY_S  # asked again by the retry loop
                return
            last = state.phase in (api.TASK_ENDED, api.TASK_REFUSED)
            if last:
                del self._waiting[key]
                self._retry.pop(key, None)
            self._answer(conn, state, last)

    def pending(self) -> list[api.LaunchTask]:
        """The launches still waiting (sent again after a re-join)."""
        with self._lock:
            return [request for _, request, _ in self._waiting.values()]

    def _retry_loop(self) -> None:
        """Refused for now: ask again after RETRY_S. Every ASK_AGAIN_S, every launch still waiting is
        asked again (its target answers from its journal), so a state lost with a broken stream,
        or a launch lost with one, is told again; one that can no longer be is refused here."""
        asked = time.monotonic()
        while not self._stop.wait(RETRY_S / 4):
            now = time.monotonic()
            with self._lock:
                due = [key for key, at in self._retry.items() if at <= now]
                requests = []
                for key in due:
                    del self._retry[key]
                    if key in self._waiting:
                        requests.append(self._waiting[key][1])
                if now - asked >= ASK_AGAIN_S:
                    asked = now
                    requests = [request for _, request, _ in self._waiting.values()]
            for request in requests:
                why = self._check(request, 0)
                if why is not None:  # the job is over here: nobody will answer
                    self.deliver(api.TaskState(job_id=request.job_id, attempt=request.attempt,
                                               task_id=request.task_id, host=request.host,
                                               phase=api.TASK_REFUSED, reason=why))
                else:
                    self._forward(request)

    @staticmethod
    def _answer(conn: socket.socket, state: api.TaskState, last: bool) -> None:
        try:
            write_frame(conn, state.SerializeToString())
        except OSError:
            last = True
        if last:
            conn.close()
