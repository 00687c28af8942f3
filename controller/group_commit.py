"""Group commit: many concurrent requests travel in one log entry.

Used for submits (one SubmitBatch entry) and for workers' reports (one
HostReports entry). Theory of operation. Each caller queues its request and
awaits a future. One flusher task takes whatever is queued (up to `max_requests` or
`max_bytes`) and proposes it as one entry, keeping at most `max_in_flight`
proposals outstanding; while they are in flight the next batch fills up.
Under light load a batch holds one request and goes out at once (no timer);
under load batches grow with the commit latency, which is what turns one
Raft round trip into many jobs.

The proposer returns, per request, either its Result or None (outcome
unknown: the caller confirms through committed state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import Message

from xce.v1 import log_pb2 as log

R = TypeVar("R", bound=Message)


@dataclass
class _Pending(Generic[R]):
    request: R
    size: int
    future: asyncio.Future[log.Result | None]


class GroupCommit(Generic[R]):
    def __init__(self, propose: Callable[[list[R]], Awaitable[list[log.Result | None]]],
                 max_requests: int = 512, max_bytes: int = 1 << 20,
                 max_in_flight: int = 1) -> None:
        self._propose = propose
        self._max_requests = max_requests
        self._max_bytes = max_bytes
        self._queue: asyncio.Queue[_Pending[R]] = asyncio.Queue()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._task: asyncio.Task[None] | None = None
        self._flushing: set[asyncio.Task[None]] = set()
        self.batches = 0
        self.requests = 0

    async def submit(self, request: R) -> log.Result | None:
        return (await self.submit_many([request]))[0]

    async def submit_many(self, requests: Sequence[R]) -> list[log.Result | None]:
        """Queue these in order (now, before any await) and wait for all their results."""
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run())
        futures: list[asyncio.Future[log.Result | None]] = []
        for request in requests:
            futures.append(loop.create_future())
            self._queue.put_nowait(_Pending(request, request.ByteSize(), futures[-1]))
        return [await future for future in futures]

    async def close(self) -> None:
        for task in list(self._flushing):
            task.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        while not self._queue.empty():
            pending = self._queue.get_nowait()
            if not pending.future.done():
                pending.future.set_result(None)

    async def _run(self) -> None:
        # The slot is taken before a request leaves the queue, so a cancelled
        # flusher never holds a request that close() cannot see.
        while True:
            await self._slots.acquire()
            try:
                first = await self._queue.get()
            except asyncio.CancelledError:
                self._slots.release()
                raise
            batch, size = [first], first.size
            while (len(batch) < self._max_requests and not self._queue.empty()
                   and size + self._peek_size() <= self._max_bytes):
                item = self._queue.get_nowait()
                batch.append(item)
                size += item.size
            self.batches += 1
            self.requests += len(batch)
            task = asyncio.get_running_loop().create_task(self._flush(batch))
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)

    def _peek_size(self) -> int:
        head: _Pending[R] = self._queue._queue[0]  # type: ignore[attr-defined]
        return head.size

    async def _flush(self, batch: list[_Pending[R]]) -> None:
        results: list[log.Result | None] = []
        try:
            results = list(await self._propose([p.request for p in batch]))
        except Exception:  # noqa: BLE001 - the waiters learn below; outcome unknown
            pass
        finally:  # also when cancelled: every waiter is released
            self._slots.release()
            if len(results) != len(batch):  # outcome unknown: callers confirm through committed state
                results = [None] * len(batch)
            for pending, result in zip(batch, results, strict=True):
                if not pending.future.done():
                    pending.future.set_result(result)
