"""The simulated network: gRPC streams and unary calls, with faults.

Theory of operation. A `Stream` is one gRPC stream between an endpoint (a
worker or a scheduler) and one replica: two FIFO queues, `up` (to the
replica) and `down` (to the endpoint). Like HTTP/2 over TCP it never
reorders within a direction; it loses messages only by breaking, and then
everything still in flight in both directions is gone and both ends learn
it (`open` is False). Delay is simply time spent in a queue: the simulation
delivers heads of queues in any interleaving, so messages of different
streams overtake each other freely.

A unary call (submit, lease, decision batch) is a `Call` in an unordered
bag: it can be delivered late, in any order, more than once (a client retry
after a lost reply) or never; its reply goes into another bag.

Faults the simulation injects here: `StreamBreak` (drop), `duplicate` (the
head of a queue delivered twice, which the protocol must tolerate wherever
a resend after a reconnect could repeat a message), and dropping or
repeating calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stream:
    sid: int
    kind: str  # "worker" or "sync"
    endpoint: str  # host name or scheduler name
    replica: int
    up: deque[Any] = field(default_factory=deque)
    down: deque[Any] = field(default_factory=deque)
    open: bool = True
    status: str = ""  # why it ended, as the endpoint sees it ("OUT_OF_RANGE", ...)
    on_close: Callable[[Stream], None] | None = None  # the trace recorder's, when it records

    def close(self, status: str = "UNAVAILABLE") -> None:
        if self.open:
            self.open = False
            self.status = status
            self.up.clear()
            self.down.clear()
            if self.on_close is not None:
                self.on_close(self)

    def send_up(self, message: Any) -> None:
        if self.open:
            self.up.append(message)

    def send_down(self, message: Any) -> None:
        if self.open:
            self.down.append(message)


@dataclass
class Call:
    cid: int
    kind: str  # "submit", "lease", "batch"
    caller: str  # client or scheduler name
    replica: int
    request: Any
    context: Any = None  # caller-side bookkeeping carried back with the reply


@dataclass
class Reply:
    call: Call
    response: Any  # None: refused (not the leader, not serving): the caller retries
