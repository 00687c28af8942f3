"""Which hosts' load indices the leader commits, and when: pure bookkeeping.

Workers send their load with every heartbeat (every few seconds); the log
gets a host's at most every `period_s`, and only when it changed at the
precision kept (controller/fsm/loads.py rounds): at 5,000 hosts and 15 s
that is some 330 small host updates a second, one `host_loads` entry per
round. One entry is in flight at a time; one whose outcome is not known is
tried again at the next round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from controller.fsm import loads
from xce.v1 import log_pb2 as log

MAX_PER_ENTRY = 2048


class LoadCommits:
    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._heard: dict[str, tuple[int, dict[str, float]]] = {}  # host -> (generation, latest values)
        self._committed: dict[str, tuple[int, dict[str, float], float]] = {}  # ... and when
        self._in_flight = False
        self.next_s = 0.0

    def heard(self, host: str, generation: int, values: Mapping[str, float]) -> None:
        if self.period_s > 0:
            self._heard[host] = (generation, loads.clean(values))

    def forget(self, host: str) -> None:
        """The host's session ended: nothing of it to commit (a re-join clears its load)."""
        self._heard.pop(host, None)
        self._committed.pop(host, None)

    def due(self, now: float) -> list[log.HostLoad]:
        """The loads to commit now (marked in flight until `settled`), oldest commit first."""
        if self.period_s <= 0:
            self.next_s = math.inf
            return []
        if now < self.next_s:
            return []
        self.next_s = now + min(1.0, self.period_s / 4)
        if self._in_flight:
            return []
        ready = []
        for host, (generation, values) in self._heard.items():
            last = self._committed.get(host)
            if last is None or ((generation, values) != last[:2] and now - last[2] >= self.period_s):
                ready.append((last[2] if last is not None else -1.0, host, generation, values))
        ready.sort()
        chosen = [log.HostLoad(name=host, generation=generation, values=values)
                  for _, host, generation, values in ready[:MAX_PER_ENTRY]]
        self._in_flight = bool(chosen)
        return chosen

    def settled(self, sent: Sequence[log.HostLoad], codes: Sequence[int | None], now: float) -> None:
        """What became of them: None, not known (tried again at the next round); a code, known
        (a refusal, of a generation that re-joined meanwhile, is not tried again either)."""
        self._in_flight = False
        for load, code in zip(sent, codes, strict=True):
            if code is not None:
                self._committed[load.name] = (load.generation, dict(load.values), now)
