"""Following the leader's Sync stream: one loop for every follower (the scheduler's view, the gateway's
event hub, `xce record`).

Theory of operation. One stream at a time, to the replica the route believes leads
(client/leader_route.py), asking for what the caller's `request()` says (the scheduler's view its
revision, the gateway and the recorder the event after their last). Its messages are handed on as
they come, except events at or below `taken_through()` when the caller names one (a resumed stream
never repeats an event). When the stream fails, client/sync_policy.py decides: a redirect to the
named leader, a resync (the caller's `on_compacted`, then a new stream at once), the next replica
after the route's jittered, capped pause, or XceError to the caller. A stream that ends, or is
cancelled, is opened again after the same pause. Two optional bounds: `silence_s`, after which a
watchdog thread cancels a stream that has sent nothing (a leader alive on the network but stuck;
progress marks come every second), and `give_up_s`, after which a follower no replica has served
raises UNAVAILABLE. `stop` ends it: the loop returns at its next step, and `cancel()` ends a read
that blocks.

A driver: a transport's streams (client/grpc_transport.py or client/http2.py), a thread's blocking
reads, a watchdog thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, assert_never

from client import sync_policy as policies
from client.channel import Client, XceError, hint
from client.http2 import RpcFailure
from client.leader_route import LeaderRoute
from client.sync_policy import FailurePolicy, Step
from client.transport import StreamCall
from xce.v1 import log_pb2 as log

SYNC = "/xce.v1.SyncService/Sync"
STREAM_S = 24 * 3600.0  # one stream's deadline; it is then opened again
GIVE_UP_S = 60.0  # the gateway's and the recorder's: no replica served for this long
WATCH_EVERY_S = 0.5  # how often the watchdog looks at an open stream


class StreamOpener(Protocol):
    def open_stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
                    timeout_s: float) -> StreamCall: ...


class SyncFollow:
    """One follower's loop: iterate `messages()` in one thread; `cancel()` and `serving` from any."""

    def __init__(self, opener: StreamOpener, route: LeaderRoute,
                 metadata: Callable[[], Sequence[tuple[str, str]]], request: Callable[[], log.SyncRequest],
                 stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic, policy: FailurePolicy = policies.RAISING,
                 on_compacted: Callable[[], None] | None = None,
                 taken_through: Callable[[], int] | None = None,
                 silence_s: float | None = None, give_up_s: float | None = GIVE_UP_S,
                 logger: logging.Logger | None = None) -> None:
        if policy.resync_on_compacted and on_compacted is None:
            raise ValueError("a follower that resyncs when compacted needs on_compacted")
        self._opener = opener
        self.route = route
        self._metadata = metadata
        self._request = request
        self._stop = stop
        self._clock = clock
        self._policy = policy
        self._on_compacted = on_compacted
        self._taken_through = taken_through
        self._silence_s = silence_s
        self._give_up_s = give_up_s
        self._logger = logger
        self._call: StreamCall | None = None
        self._last_heard_s = clock()  # the open stream's last message, or its opening
        self._served_s = clock()  # the last message of any stream
        self.serving: str | None = None  # the replica whose stream is open and has spoken: it leads

    def cancel(self) -> None:
        """End the open stream, if any (from any thread): it is opened again unless stopped."""
        call = self._call
        if call is not None:
            call.cancel()

    def messages(self) -> Iterator[log.SyncMessage]:
        """The stream's messages across reconnects, until `stop` is set (or XceError: the policy's)."""
        done = threading.Event()
        if self._silence_s is not None:
            threading.Thread(target=self._watch, args=(done,), daemon=True, name="sync-watchdog").start()
        try:
            yield from self._follow()
        finally:
            done.set()
            self.cancel()

    def _follow(self) -> Iterator[log.SyncMessage]:
        route = self.route
        self._served_s = self._clock()
        while not self._stop.is_set():
            target = route.target
            try:
                for message in self._stream(target):
                    yield message
                    if self._stop.is_set():
                        return
            except RpcFailure as failure:
                if self._stop.is_set():
                    return
                if not self._after(failure, target):
                    continue  # at once: a redirect, or a resync
            if policies.given_up(self._clock(), self._served_s, self._give_up_s):
                raise XceError("UNAVAILABLE",
                               f"no replica served the Sync stream for {self._give_up_s:.0f} s")
            self._stop.wait(route.pause_s())

    def _stream(self, target: str) -> Iterator[log.SyncMessage]:
        """One stream's messages, the ones already taken left out."""
        request = self._request()
        call = self._opener.open_stream(target, SYNC, request.SerializeToString(), self._metadata(), STREAM_S)
        self._last_heard_s = self._clock()
        self._call = call
        try:
            if self._stop.is_set():
                return
            for raw in call:
                self._last_heard_s = self._served_s = self._clock()
                self.serving = target
                self.route.reset()  # it served: a failure after this one is a first one
                message = log.SyncMessage.FromString(raw)
                if self._taken_through is not None and policies.already_taken(message, self._taken_through()):
                    continue
                yield message
        finally:
            self._call = None
            self.serving = None
            call.cancel()

    def _after(self, failure: RpcFailure, target: str) -> bool:
        """Act on the policy's step; True when the route's pause comes first."""
        leader = hint(failure.trailers)
        step = policies.after_failure(failure.code, leader, self._policy)
        if step is Step.REDIRECT:
            assert leader is not None
            if self.route.redirected(target, leader):
                return False
        elif step is Step.RESYNC:
            assert self._on_compacted is not None
            self._on_compacted()
            return False
        elif step is Step.RETRY:
            self.route.failed(target)
        elif step is Step.RAISE:
            raise XceError(failure.code, failure.details) from None
        else:
            assert_never(step)
        if self._logger is not None:
            self._logger.info("sync: %s from %s: %s", failure.code, target, failure.details)
        return True

    def _watch(self, done: threading.Event) -> None:
        """Cancel a stream silent for longer than silence_s; it is then opened again."""
        every_s = min(WATCH_EVERY_S, (self._silence_s or WATCH_EVERY_S) / 4)
        while not done.wait(every_s) and not self._stop.is_set():
            call = self._call
            now_s = self._clock()
            if call is not None and policies.silent_too_long(now_s, self._last_heard_s, self._silence_s):
                if self._logger is not None:
                    self._logger.info("sync: %s silent for %.0f s; reconnecting", self.route.target,
                                      self._silence_s)
                self._last_heard_s = now_s  # once per silence
                call.cancel()


def sync_messages(client: Client, history: bool, resume_after: Callable[[], int], stop: threading.Event,
                  clock: Callable[[], float] = time.monotonic,
                  give_up_s: float = GIVE_UP_S, metrics_address: str = "") -> Iterator[log.SyncMessage]:
    """The stream's messages, resumed after `resume_after()` (the last event the caller took) when it
    breaks, until `stop` is set. `history`: events only, never a snapshot (a stream resumed after an
    event is always one). Events at or below `resume_after()` are skipped: a resumed stream never
    repeats one. A refusal that is not a retryable one (OUT_OF_RANGE: compacted) raises XceError.
    Which replica, and the pause between tries, are the client's route (client/leader_route.py).
    `metrics_address`: where the caller, a daemon, serves its metrics (the leader shows it in Status)."""

    def request() -> log.SyncRequest:
        after = resume_after()
        return log.SyncRequest(from_revision=after, history=history or after > 0,
                               metrics_address=metrics_address)

    follow = SyncFollow(client.transport, client.route, client.credentials.metadata, request, stop, clock,
                        policies.RAISING, taken_through=resume_after, give_up_s=give_up_s)
    return follow.messages()
