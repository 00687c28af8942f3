"""The gateway's one Sync stream, fanned out to every `/xce/v1/events` client.

Theory of operation. A thread follows the leader's Sync stream with the gateway's own key (role
`gateway`: state.sync): a snapshot first (which seeds the job types, gateway/sse.py), then every
event, resumed after the last one across leader changes (client/sync_follow.py). Each event's messages
go into a bounded buffer, and the asyncio clients waiting on it are woken. A client resuming from a
place the buffer no longer holds (older than this gateway, or a client that fell behind) first
reads the events table from there on a stream of its own (at most CATCH_UPS at once), then joins
the buffer. A gap nothing can fill (events compacted, or the hub's stream broke for longer than the
events table keeps) reaches clients as a `resync` message: list again, then follow.

Each client's task (`follow`) takes what the buffer holds after its place, together with the revision
the hub has taken through (one look, under the lock), so it knows it has passed every message up to
there, sent or filtered; a catch-up hands a `Mark` after each event (and after TICK_S with none) for
the same purpose. A client sent nothing for the hub's `bookmark_s` ($XCE_GATEWAY_BOOKMARK_S, read at
start) is then sent a bookmark at that revision (sse.Cursor), however busy the rest of the cluster.

A driver: a thread, the event loop, gRPC streams. What is sent to whom is sse.py's.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from client.channel import Client, XceError
from client.credentials import Credentials
from client.sync_follow import sync_messages
from gateway import sse
from gateway.backend import Backend
from gateway.live_jobs import LiveJobs
from gateway.problems import Problem
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log_pb

BUFFER = 20_000        # messages kept for clients that reconnect or lag (trimmed in halves)
CATCH_UPS = 2          # catch-up streams at once (the gateway's key may hold max_sync_streams = 4)
RETRY_S = 2.0
END = (1 << 62)        # the index of "after the whole revision", for ordering
TICK_S = 1.0           # a catch-up that hands nothing for this long hands a Mark: bookmarks stay on time
RECHECK_S = 30.0       # the caller's key is asked about again this often: a revoked key's stream ends
logger = logging.getLogger("xce.gateway")


def key(position: sse.Position) -> tuple[int, int]:
    return position.revision, END if position.index < 0 else position.index


@dataclass(frozen=True)
class Gap:
    """A resync: nothing between the client's place and `revision` can be sent."""

    revision: int
    reason: str


@dataclass(frozen=True)
class Mark:
    """A catch-up handed over every message of every event through `revision`."""

    revision: int


class EventHub:
    def __init__(self, backend: Backend, own: Credentials, loop: asyncio.AbstractEventLoop,
                 buffer: int = BUFFER, environ: Mapping[str, str] = os.environ) -> None:
        self.bookmark_s = sse.bookmark_interval(environ)
        self._backend = backend
        self._own = own
        self._loop = loop
        self._cap = buffer
        self._lock = threading.Lock()
        self._items: list[sse.Message | Gap] = []
        self._keys: list[tuple[int, int]] = []
        self.floor: sse.Position | None = None   # the buffer holds everything after it
        self.revision = 0                        # the last event taken
        self.error = ""                          # why there is no stream now, if there is none
        self._changed = asyncio.Event()
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-hub", daemon=True)
        self._catch_ups = asyncio.Semaphore(CATCH_UPS)
        self.live = LiveJobs()  # every live job and host, counted for GET /xce/v1/stats (read-only to others)

    @property
    def usable(self) -> bool:
        return bool(self._own.token or self._own.munge)

    def start(self) -> None:
        if self.usable:
            self._thread.start()
        else:
            self.error = ("this gateway has no key of its own for the event stream: give it one of role "
                          "gateway ($XCE_TOKEN or $XCE_TOKEN_FILE; `xce token create --role gateway`)")

    def close(self) -> None:
        self.stop.set()

    def client(self) -> Client:
        client = Client(self._backend.addresses, self._own, transport=self._backend.transport)
        client.prefer(self._backend.leader)
        return client

    # ------------------------------------------------------------ the hub's stream (its thread)

    def _run(self) -> None:
        client = self.client()
        snapshot = [True]  # the next stream opens with a snapshot (at start, and after a gap)
        classifier = sse.Classifier(complete=True)
        while not self.stop.is_set():
            try:
                for message in sync_messages(client, False, lambda: 0 if snapshot[0] else self.revision,
                                             self.stop, metrics_address=self._backend.metrics_address):
                    self.live.observe(message)  # never raises; also its minute timer (progress marks)
                    body = message.WhichOneof("body")
                    if body == "snapshot_begin":
                        classifier = sse.Classifier(complete=True)
                    elif body == "snapshot_chunk":
                        for record in message.snapshot_chunk.records:
                            if record.table == "jobs":
                                classifier.seed(api.Job.FromString(record.value))
                    elif body == "snapshot_end":
                        self._begin(message.snapshot_end.revision)
                        snapshot[0] = False
                    elif body == "event" and not snapshot[0]:
                        self._publish(message.event, classifier.messages(message.event))
                    self.error = ""
            except XceError as exc:  # compacted while away (OUT_OF_RANGE), or refused: start again
                self.error = f"{exc.code_name}: {exc.message}"
                logger.warning("event stream: %s", self.error)
                snapshot[0] = True
            except Exception as exc:  # noqa: BLE001 - the thread must live: log, and start again
                self.error = f"{type(exc).__name__}: {exc}"
                logger.exception("event stream failed")
                snapshot[0] = True
            self.stop.wait(RETRY_S)

    def _begin(self, revision: int) -> None:
        """A snapshot at `revision`: the buffer starts there (after a gap, clients are told)."""
        with self._lock:
            if self.floor is None:
                self.floor = sse.Position(revision)
            elif revision > self.revision:
                self._append((revision, END), Gap(revision, "the gateway's stream missed events"))
            self.revision = max(self.revision, revision)
        self._wake()

    def _publish(self, event: log_pb.Event, messages: list[sse.Message]) -> None:
        with self._lock:
            if event.revision <= self.revision:  # sent before a snapshot behind what was taken
                return
            for message in messages:
                self._append((message.revision, message.index), message)
            self.revision = event.revision
        if messages:
            self._wake()

    def _append(self, at: tuple[int, int], item: sse.Message | Gap) -> None:
        self._items.append(item)
        self._keys.append(at)
        if len(self._items) > 2 * self._cap:
            drop = len(self._items) - self._cap
            last = self._keys[drop - 1]
            self.floor = sse.Position(last[0], -1 if last[1] == END else last[1])
            del self._items[:drop], self._keys[:drop]

    def _wake(self) -> None:
        def wake() -> None:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()
        self._loop.call_soon_threadsafe(wake)

    # ------------------------------------------------------------ clients (the event loop)

    def after(self, position: sse.Position) -> tuple[list[sse.Message | Gap], int] | None:
        """What the buffer holds after `position`, and the last revision taken (nothing up to it is
        missing from the list); None if the buffer does not reach back that far."""
        with self._lock:
            if self.floor is None or key(position) < key(self.floor):
                return None
            start = bisect.bisect_right(self._keys, key(position))
            return self._items[start:], self.revision

    def head(self) -> sse.Position | None:
        with self._lock:
            if not self._keys:
                return self.floor
            revision, index = self._keys[-1]
            return sse.Position(revision, -1 if index == END else index)

    def waiter(self) -> asyncio.Event:
        """Set at the next change: take it before looking at the buffer, so that none is missed."""
        return self._changed

    async def catch_up(self, position: sse.Position) -> AsyncGenerator[sse.Message | Gap | Mark, None]:
        """The messages after `position` read from the events table on a stream of the gateway's own,
        a Mark after each event (and after TICK_S without one), until the caller closes it. A
        compacted range yields a Gap and ends."""
        async with self._catch_ups:
            reader = _CatchUp(self.client, self._loop, position)
            queue, stop = reader.queue, reader.stop
            thread = threading.Thread(target=reader.read, name="event-catch-up", daemon=True)
            thread.start()
            handed = Mark(reader.start)
            try:
                while True:
                    try:
                        item = await asyncio.wait_for(queue.get(), TICK_S)
                    except TimeoutError:  # a get cancelled by the timeout leaves its item queued
                        item = handed
                    if isinstance(item, BaseException):
                        raise item
                    if isinstance(item, Mark):
                        handed = item
                    yield item
                    if isinstance(item, Gap):
                        return
            finally:
                stop.set()  # the reader ends at its next message (progress marks come every second)


class _CatchUp:
    """The thread side of one catch-up: reads the events table from `position` on a stream of its
    own and hands each item to the client's task, until that task sets `stop`."""

    def __init__(self, client: Callable[[], Client], loop: asyncio.AbstractEventLoop,
                 position: sse.Position) -> None:
        self.client, self.loop, self.position = client, loop, position
        self.queue: asyncio.Queue[sse.Message | Gap | Mark | BaseException] = asyncio.Queue(maxsize=1000)
        self.stop = threading.Event()
        self.start = position.revision if position.index < 0 else position.revision - 1

    def put(self, item: sse.Message | Gap | Mark | BaseException) -> bool:
        """Hand `item` to the client's task; False once the client is gone."""
        handed = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
        while True:
            try:
                handed.result(timeout=0.5)
                return True
            except concurrent.futures.TimeoutError:
                if self.stop.is_set():
                    handed.cancel()
                    return False

    def read(self) -> None:
        last = [self.start]
        classifier = sse.Classifier(complete=self.start == 0)
        try:
            for message in sync_messages(self.client(), True, lambda: last[0], self.stop):
                if message.HasField("event"):
                    last[0] = message.event.revision
                    for item in classifier.messages(message.event):
                        if item.after(self.position) and not self.put(item):
                            return
                    if not self.put(Mark(message.event.revision)):  # the client may switch here
                        return
        except XceError as exc:
            self.put(Gap(0, exc.message) if exc.code_name == "OUT_OF_RANGE" else exc)
        except BaseException as exc:  # noqa: BLE001 - handed to the client's task
            self.put(exc)


def unavailable(hub: EventHub) -> Problem:
    return Problem(503, f"the event stream is not available: {hub.error or 'starting'}")


async def follow(hub: EventHub, audience: sse.Audience, position: sse.Position | None,
                 caller: Client) -> AsyncGenerator[bytes, None]:
    """One client's stream: from the buffer, or from a catch-up first; a bookmark after each
    `hub.bookmark_s` in which it was sent nothing."""
    now = time.monotonic
    yield b"retry: 1000\n\n"
    ahead = position is not None and position.revision > hub.revision
    cursor = sse.Cursor(audience, (None if ahead else position) or hub.head() or sse.Position(hub.revision),
                        hub.bookmark_s, now())
    if ahead:
        yield cursor.resync(f"event id {position} is ahead of this cluster's revision",
                            sse.Position(hub.revision), now())
    recheck = now() + RECHECK_S
    while True:
        if now() > recheck:  # before anything more is sent: a revoked key's stream gets nothing after
            if not await _still_valid(caller):
                return  # the key was revoked or expired: the stream ends
            recheck = now() + RECHECK_S
        waiter = hub.waiter()
        window = hub.after(cursor.place)
        if window is None:
            async with contextlib.aclosing(_caught_up(hub, cursor)) as frames:
                async for caught in frames:
                    yield caught
            continue
        items, taken = window
        for item in items:
            if isinstance(item, Gap):
                yield cursor.resync(item.reason, sse.Position(item.revision), now())
            elif (frame := cursor.give(item, now())) is not None:
                yield frame
        cursor.reached(taken)
        if (frame := cursor.bookmark(now())) is not None:
            yield frame
        if items:
            continue
        with contextlib.suppress(TimeoutError):  # up to the next bookmark, or the key's next check
            await asyncio.wait_for(waiter.wait(), max(0.0, min(cursor.wait_s(now()), recheck - now())))


async def _caught_up(hub: EventHub, cursor: sse.Cursor) -> AsyncGenerator[bytes, None]:
    """A client's frames from a catch-up, until the buffer reaches back to its place."""
    now = time.monotonic
    async with contextlib.aclosing(hub.catch_up(cursor.place)) as caught:
        async for item in caught:
            if isinstance(item, Gap):
                floor = hub.floor or cursor.place
                yield cursor.resync(f"the events after {cursor.place} are no longer kept: {item.reason}",
                                    floor, now())
                return
            if isinstance(item, Mark):
                cursor.reached(item.revision)
                if (frame := cursor.bookmark(now())) is not None:
                    yield frame
                if hub.after(cursor.place) is not None:
                    return
            elif (frame := cursor.give(item, now())) is not None:
                yield frame


async def _still_valid(caller: Client) -> bool:
    try:
        await run_in_threadpool(caller.who_am_i)
    except XceError as exc:
        return exc.code_name not in ("UNAUTHENTICATED", "PERMISSION_DENIED")
    return True
