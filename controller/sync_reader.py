"""A Sync stream's opening, read in a thread of its own and handed over a message at a time.

Theory of operation. A snapshot is read in one LMDB read transaction (one
revision), and a read transaction belongs to the thread that opened it. So
each stream that needs a snapshot gets a thread that opens the transaction,
walks SyncFeed.opening_messages and puts each serialized message in a queue
of one: it reads the next chunk only once the stream has taken the last.
With gRPC's flow control behind the stream, a watcher that reads slowly
holds at most about two chunks (2 × 900 kB) on the leader, not the whole
snapshot (at 40,000 jobs, about 6 MB per stream; 40 stalled streams took a
leader from 164 to 409 MB). A stream that ends early stops its thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from typing import Any

from controller.sync_stream import SyncFeed

PUT_WAIT_S = 0.5  # how often a blocked reader looks whether its stream ended
_END = object()


async def opening(feed: SyncFeed, read: Callable[[], AbstractContextManager[Any]],
                  waiting: Callable[[], bytes], wait_s: float) -> AsyncIterator[bytes]:
    """The opening's messages, serialized; `waiting()` (a progress mark) whenever the next one takes
    longer than `wait_s` to come (a large read, a slow disk)."""
    handoff: queue.Queue[object] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def reader() -> None:
        try:
            with read() as tables:
                for message in feed.opening_messages(tables):
                    if not _put(handoff, message.SerializeToString(), stop):
                        return
        except BaseException as exc:  # noqa: BLE001 - handed to the stream, which raises it
            _put(handoff, exc, stop)
            return
        _put(handoff, _END, stop)

    thread = threading.Thread(target=reader, name="sync-snapshot", daemon=True)
    thread.start()
    try:
        while True:
            taking = asyncio.ensure_future(asyncio.to_thread(handoff.get))
            while True:
                done, _ = await asyncio.wait([taking], timeout=wait_s)
                if done:
                    break
                yield waiting()
            item = taking.result()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item
    finally:
        stop.set()
        while thread.is_alive() and not handoff.empty():
            try:
                handoff.get_nowait()  # let a reader blocked on put see the stop
            except queue.Empty:
                break


def _put(handoff: queue.Queue[object], item: object, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            handoff.put(item, timeout=PUT_WAIT_S)
            return True
        except queue.Full:
            continue
    return False
