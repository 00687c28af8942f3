"""Group commit: many concurrent requests travel in one log entry.

Used by the leader core (leader.py) for submits (one SubmitBatch entry),
workers' reports (one HostReports entry) and joins (one HostJoins entry).
Theory of operation. Requests queue in arrival order (`add`); `take` hands
out the next batch to propose, whatever is queued up to `max_requests` or
`max_bytes` (a request larger than that goes alone), as long as fewer than
`max_in_flight` proposals are outstanding; `done` says one settled, which
lets the next batch go. Under light load a batch holds one request and goes
out at once (no timer); under load batches grow with the commit latency,
which is what turns one Raft round trip into many jobs.

Pure bookkeeping: the caller proposes and learns the outcomes.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class GroupCommit(Generic[T]):
    def __init__(self, max_requests: int = 512, max_bytes: int = 1 << 20, max_in_flight: int = 1) -> None:
        if max_requests < 1 or max_bytes < 1 or max_in_flight < 1:
            raise ValueError("group commit bounds must be at least 1")
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.max_in_flight = max_in_flight
        self._queue: deque[tuple[T, int]] = deque()
        self.in_flight = 0
        self.batches = 0
        self.requests = 0

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, item: T, size: int) -> None:
        self._queue.append((item, size))

    def take(self) -> list[T] | None:
        """The next batch to propose now, or None (nothing queued, or enough in flight)."""
        if not self._queue or self.in_flight >= self.max_in_flight:
            return None
        first, size = self._queue.popleft()
        batch = [first]
        while self._queue and len(batch) < self.max_requests and size + self._queue[0][1] <= self.max_bytes:
            item, item_size = self._queue.popleft()
            batch.append(item)
            size += item_size
        self.in_flight += 1
        self.batches += 1
        self.requests += len(batch)
        return batch

    def done(self) -> None:
        """A batch taken earlier settled (committed, failed or unknown)."""
        self.in_flight = max(0, self.in_flight - 1)

    def queued(self) -> list[T]:
        """What waits to be proposed, in order (left in place)."""
        return [item for item, _ in self._queue]

    def drain(self) -> list[T]:
        """Everything still queued, in order (when the leadership ends)."""
        items = self.queued()
        self._queue.clear()
        return items
