"""The gateway's one Sync stream, fanned out to every `/xce/v1/events` client.

Theory of operation. A thread follows the leader's Sync stream with the gateway's own key (role
`gateway`: state.sync): a snapshot first (which seeds the job types, gateway/sse.py), then every
event, resumed after the last one across leader changes (client/sync_follow.py). Each event's messages
go into a bounded buffer, and the asyncio clients waiting on it are woken. A client resuming from a
place the buffer no longer holds (older than this gateway, or a client that fell behind) first
reads the events table from there on a stream of its own (at most CATCH_UPS at once), then joins
the buffer. A gap nothing can fill (events compacted, or the hub's stream broke for longer than the
events table keeps) reaches clients as a `resync` message: list again, then follow.

A driver: a thread, the event loop, gRPC streams. What is sent to whom is sse.py's.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from client.channel import Client, XceError
from client.credentials import Credentials
from client.sync_follow import sync_messages
from gateway import sse
from gateway.backend import Backend
from gateway.problems import Problem
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log_pb

BUFFER = 20_000        # messages kept for clients that reconnect or lag (trimmed in halves)
CATCH_UPS = 2          # catch-up streams at once (the gateway's key may hold max_sync_streams = 4)
RETRY_S = 2.0
END = (1 << 62)        # the index of "after the whole revision", for ordering
logger = logging.getLogger("xce.gateway")


def key(position: sse.Position) -> tuple[int, int]:
    return position.revision, END if position.index < 0 else position.index


@dataclass(frozen=True)
class Gap:
    """A resync: nothing between the client's place and `revision` can be sent."""

    revision: int
    reason: str


class EventHub:
    def __init__(self, backend: Backend, own: Credentials, loop: asyncio.AbstractEventLoop,
                 buffer: int = BUFFER) -> None:
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
                                             self.stop):
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

    def after(self, position: sse.Position) -> list[sse.Message | Gap] | None:
        """What the buffer holds after `position`; None if it does not reach back that far."""
        with self._lock:
            if self.floor is None or key(position) < key(self.floor):
                return None
            start = bisect.bisect_right(self._keys, key(position))
            return self._items[start:]

    def head(self) -> sse.Position | None:
        with self._lock:
            if not self._keys:
                return self.floor
            revision, index = self._keys[-1]
            return sse.Position(revision, -1 if index == END else index)

    def waiter(self) -> asyncio.Event:
        """Set at the next change: take it before looking at the buffer, so that none is missed."""
        return self._changed

    async def catch_up(self, position: sse.Position, done: Callable[[sse.Position], bool]
                       ) -> AsyncIterator[sse.Message | Gap]:
        """The events after `position` read from the events table on a stream of the gateway's own,
        until `done(place)` (the buffer reaches back to it). A compacted range yields a Gap."""
        async with self._catch_ups:
            reader = _CatchUp(self.client, self._loop, position)
            queue, stop = reader.queue, reader.stop
            thread = threading.Thread(target=reader.read, name="event-catch-up", daemon=True)
            thread.start()
            place = position
            try:
                while True:
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        raise item
                    if item is None:
                        if done(place):
                            return
                        continue
                    yield item
                    if isinstance(item, Gap):
                        return
                    place = sse.Position(item.revision, -1 if item.last else item.index)
            finally:
                stop.set()  # the reader ends at its next message (progress marks come every second)


class _CatchUp:
    """The thread side of one catch-up: reads the events table from `position` on a stream of its
    own and hands each item to the client's task, until that task sets `stop`."""

    def __init__(self, client: Callable[[], Client], loop: asyncio.AbstractEventLoop,
                 position: sse.Position) -> None:
        self.client, self.loop, self.position = client, loop, position
        self.queue: asyncio.Queue[sse.Message | Gap | BaseException | None] = asyncio.Queue(maxsize=1000)
        self.stop = threading.Event()
        self.start = position.revision if position.index < 0 else position.revision - 1

    def put(self, item: sse.Message | Gap | BaseException | None) -> bool:
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
                    if not self.put(None):  # a mark between events: the client may switch here
                        return
        except XceError as exc:
            self.put(Gap(0, exc.message) if exc.code_name == "OUT_OF_RANGE" else exc)
        except BaseException as exc:  # noqa: BLE001 - handed to the client's task
            self.put(exc)


def unavailable(hub: EventHub) -> Problem:
    return Problem(503, f"the event stream is not available: {hub.error or 'starting'}")
