"""Time, injected: the real clock, and a manual one for simulations and tests.

Theory of operation. Code outside the drivers never reads the wall clock or
sleeps on its own: it is handed a `Clock`. `RealClock` is the only place in
controller/, scheduler/ and worker/ that reads `time` (tests/unit/test_unit_ambient.py
checks it); `ManualClock` moves only when told, so a simulation on it is
reproducible bit for bit. Two readings: `now_ms`, the wall clock (stamps
that go into log entries and reports), and `monotonic_s`, for intervals
(timeouts, heartbeats), which never jumps back.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch."""
        ...

    def monotonic_s(self) -> float:
        """Seconds on a clock that never goes back, for measuring intervals."""
        ...


class RealClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic_s(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when `advance` is called; both readings move together."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._start_ms = start_ms
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_s(self) -> float:
        return (self._now_ms - self._start_ms) / 1000

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a clock does not go back")
        self._now_ms += ms


REAL_CLOCK = RealClock()


def boot_id() -> str:
    """This boot's id (Linux's), which changes when the machine restarts: monotonic readings of
    different processes compare under one, and a page cache lives no longer than one; "" if none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
