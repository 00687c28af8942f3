"""Connection hygiene for the HTTP servers (the gateway, `xce mcp --http`): uvicorn's h11 protocol with
deadlines and caps.

Theory of operation. uvicorn times a connection out only between two requests (its keep-alive), so a
client that opens connections and sends a request a byte at a time, or nothing at all, holds each
one, and a few processes exhaust the server's descriptors (slowloris). `GuardedProtocol` adds:

- a cap on connections from one peer address (`max_connections_per_peer`) and in all
  (`max_connections`), held in the listening socket's accept (`GuardedSocket`): a connection past
  either is closed there, before asyncio makes a transport of it, so the server's descriptors
  never run out (the total stays below the descriptor limit, which `serve` raises to its hard limit
  first) and one peer cannot crowd out the others. A connection counts from its accept until its
  socket is closed (`CountedSocket.close`, which asyncio calls however the connection ended, a TLS
  handshake that failed included; a finalizer too, should a socket be dropped unclosed). Not until
  it is collected: a socket closed inside a reference cycle may wait minutes for the collector, and
  a client that connects and hangs up in a loop would fill its count, then everyone's;
- a header deadline: a request's line and headers must arrive within `header_timeout_s` of its
  first byte (of the connection, for the first request), or the connection is closed;
- a body deadline: its body within `body_timeout_s` of its headers;
- an idle deadline between requests (uvicorn's keep-alive, `idle_timeout_s`).

A response may take as long as it takes (an event stream lasts hours): the deadlines are on what
the client sends. What is refused is logged through the daemon's RepeatFilter
(xce/daemon_logging.py), so a flood of refusals costs a few lines a period, not a line each.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import weakref
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from gateway.http_limits import HttpLimits
from xce.rlimits import raise_descriptor_limit

log = logging.getLogger("xce.http")


class Guard:
    """The connections one server holds, by peer address."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.by_peer: Counter[str] = Counter()
        self.total = 0
        self.refused = 0  # connections closed at once, past a cap
        self.timed_out = 0  # connections closed at a deadline
        self._lock = threading.Lock()  # a finalizer may run in another thread

    def admit(self, peer: str) -> str:
        """'' if a connection from `peer` may stay (and it is counted), else why not."""
        with self._lock:
            if self.total >= self.limits.max_connections:
                return f"{self.total} connections are open (max_connections {self.limits.max_connections})"
            if self.by_peer[peer] >= self.limits.max_connections_per_peer:
                return f"{peer} holds {self.by_peer[peer]} connections (max_connections_per_peer " \
                       f"{self.limits.max_connections_per_peer})"
            self.by_peer[peer] += 1
            self.total += 1
            return ""

    def release(self, peer: str) -> None:
        with self._lock:
            self.total -= 1
            self.by_peer[peer] -= 1
            if self.by_peer[peer] <= 0:
                del self.by_peer[peer]


class GuardedSocket(socket.socket):
    """A listening socket whose accept closes what is past the guard's caps at once (asyncio's
    accept loop calls `accept` on the socket it serves)."""

    guard: Guard

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            fd, address = self._accept()  # type: ignore[attr-defined]  # BlockingIOError: asyncio's cue
            conn = CountedSocket(self.family, self.type, self.proto, fileno=fd)
            peer = str(address[0]) if isinstance(address, tuple) else ""
            refused = self.guard.admit(peer)
            if not refused:
                place = Place(self.guard, peer)
                conn.place = place
                weakref.finalize(conn, place.release)
                return conn, address
            self.guard.refused += 1
            conn.close()
            log.warning("connection refused: %s", refused)


class Place:
    """One admitted connection's place in the guard's counts, given back once."""

    def __init__(self, guard: Guard, peer: str) -> None:
        self.guard, self.peer = guard, peer
        self._held = True

    def release(self) -> None:
        with self.guard._lock:
            held, self._held = self._held, False
        if held:
            self.guard.release(self.peer)


class CountedSocket(socket.socket):
    """An accepted connection that gives its place back when it is closed."""

    place: Place | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.place is not None:
                self.place.release()


class GuardedProtocol(H11Protocol):
    guard: Guard  # set on the subclass `protocol_for` makes

    _peer = ""
    _deadline: asyncio.TimerHandle | None = None
    _phase = ""  # what the running deadline is for: "header", "body" or ""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._peer = self.client[0] if self.client else ""
        self._arm("header", self.guard.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase == "" and self.conn.their_state is h11.IDLE:  # a new request starts
            self._arm("header", self.guard.limits.header_timeout_s)
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # arms the idle deadline (uvicorn's keep-alive)
        self._follow()

    def _follow(self) -> None:
        """Move the deadline along with what the client has sent of the current request."""
        state = self.conn.their_state
        if state is h11.SEND_BODY and self._phase != "body":
            self._arm("body", self.guard.limits.body_timeout_s)
        elif state is not h11.IDLE and state is not h11.SEND_BODY:
            self._disarm()  # all of it is in: the response takes what it takes

    def _arm(self, phase: str, after_s: float) -> None:
        self._disarm()
        self._phase = phase
        self._deadline = self.loop.call_later(after_s, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._phase = ""

    def _expired(self, phase: str) -> None:
        self._deadline = None
        self._phase = ""
        if self.transport.is_closing():
            return
        self.guard.timed_out += 1
        log.warning("connection from %s closed: its request's %s did not arrive in time", self._peer, phase)
        self.transport.abort()


def protocol_for(guard: Guard) -> type[GuardedProtocol]:
    return type("Guarded", (GuardedProtocol,), {"guard": guard})


def serve(app: Any, host: str, port: int, limits: HttpLimits, **more: Any) -> None:
    """Serve `app` on host:port with the guard until stopped (uvicorn's signals); `max_connections`
    is kept below the descriptor limit (a quarter of it is left for everything else the process
    opens). `more`: uvicorn.Config's other settings."""
    import uvicorn

    limits.check()
    descriptors = raise_descriptor_limit()
    cap = min(limits.max_connections, max(16, descriptors * 3 // 4))
    guard = Guard(HttpLimits(cap, limits.max_connections_per_peer, limits.header_timeout_s,
                             limits.body_timeout_s, limits.idle_timeout_s))
    # asyncio's own loop, whatever is installed: the caps are held in the listening socket's accept,
    # which asyncio calls and uvloop (uvicorn's pick when present) bypasses, accepting in C.
    config = uvicorn.Config(app, host=host, port=port, http=protocol_for(guard), loop="asyncio",
                            timeout_keep_alive=max(1, round(limits.idle_timeout_s)), **more)
    uvicorn.Server(config).run(sockets=[listening_socket(host, port, guard, config.backlog)])


def listening_socket(host: str, port: int, guard: Guard, backlog: int) -> GuardedSocket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    plain = socket.create_server((host, port), family=family, backlog=backlog)
    sock = GuardedSocket(family, socket.SOCK_STREAM, fileno=plain.detach())
    sock.guard = guard
    return sock
