"""Proposals in flight, and settling what a request's outcome is.

Theory of operation. The leader core proposes an entry under a token and
learns its outcome when the driver reports it (`done`): the results of
applying it, or None when pysyncobj's answer was not success (LEADER_CHANGED,
UNKNOWN_OUTCOME), the proposal was too large, or it did not settle within
`timeout_s` (`expire`), or the leadership ended (`fail_all`). None means
unknown, never "failed": the entry may still commit. So a request's answer
is `settle`d from committed state: the result, or the one the `requests`
table holds under its request id; with neither, the client is told
UNAVAILABLE and retries with the same request id, which apply deduplicates.

Pure: the time comes from the injected clock; callbacks run in the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from controller import fsm
from controller.tables import Tables
from xce.clock import Clock
from xce.errors import from_result, unavailable
from xce.v1 import log_pb2 as log

logger = logging.getLogger(__name__)

TIMEOUT_S = 10.0
SLOW_S = 1.0  # worth a warning in the log

Results = list[log.Result] | None
OnDone = Callable[[Results], None]


@dataclass
class _Pending:
    kind: str
    started_s: float
    on_done: OnDone


class Proposals:
    def __init__(self, clock: Clock, timeout_s: float = TIMEOUT_S, slow_s: float = SLOW_S) -> None:
        self._clock = clock
        self._timeout_s = timeout_s
        self._slow_s = slow_s
        self._pending: dict[int, _Pending] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._pending)

    def new(self, kind: str, on_done: OnDone) -> int:
        self._next += 1
        self._pending[self._next] = _Pending(kind, self._clock.monotonic_s(), on_done)
        return self._next

    def done(self, token: int, results: Results) -> None:
        pending = self._pending.pop(token, None)
        if pending is None:
            return  # expired or failed already: that caller has its answer
        took = self._clock.monotonic_s() - pending.started_s
        if results is not None and took > self._slow_s:
            logger.warning("slow commit: a %s entry took %.1f s to apply", pending.kind, took)
        pending.on_done(results)

    def expire(self) -> None:
        now = self._clock.monotonic_s()
        for token in [t for t, p in self._pending.items() if now - p.started_s >= self._timeout_s]:
            pending = self._pending.pop(token)
            logger.warning("a %s entry was not applied within %.0f s", pending.kind, self._timeout_s)
            pending.on_done(None)

    def fail_all(self) -> None:
        pending, self._pending = self._pending, {}
        for each in pending.values():
            each.on_done(None)

    def next_deadline_s(self) -> float | None:
        if not self._pending:
            return None
        return min(p.started_s for p in self._pending.values()) + self._timeout_s


def settle(tables: Tables, request_id: str, result: log.Result | None) -> log.Result:
    """The request's committed result, or ServiceError (its own code, or UNAVAILABLE: retry)."""
    if result is None and request_id:
        result = fsm.read_result(tables, request_id)
    if result is None:
        raise unavailable("the outcome is not known yet (leader change?); retry with the same request id")
    if result.code != log.OK:
        raise from_result(result)
    return result
