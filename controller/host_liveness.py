"""Which hosts missed their heartbeats: pure bookkeeping for the leader.

Theory of operation. The leader notes when it last heard from each host
generation (`seen`). Hosts it has not heard from in this leadership count from
the moment it became leader, so a new leader gives every worker one full
timeout to reconnect before it marks anything UNAVAIL. `overdue` returns the
(name, generation) pairs to propose as UNAVAIL; the proposal carries the
generation, so a host that re-joined meanwhile is left alone by apply.
Time is passed in; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from xce.v1 import api_pb2 as api


class Liveness:
    def __init__(self, since_s: float, timeout_s: float) -> None:
        self.since_s = since_s
        self.timeout_s = timeout_s
        self._seen: dict[str, tuple[int, float]] = {}

    def seen(self, name: str, generation: int, now_s: float) -> None:
        self._seen[name] = (generation, now_s)

    def overdue(self, hosts: Iterable[api.Host], now_s: float) -> list[tuple[str, int]]:
        late = []
        for host in hosts:
            if host.status != api.HOST_OK:
                continue
            generation, when = self._seen.get(host.spec.name, (host.generation, self.since_s))
            if generation != host.generation:  # heard only from an older connection
                when = self.since_s
            if now_s - max(when, self.since_s) > self.timeout_s:
                late.append((host.spec.name, host.generation))
        return late
