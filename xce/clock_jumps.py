"""Noticing a daemon's wall clock step or drift away from its monotonic clock, to say so in its log.

No lease holder, heartbeat or timeout in XCE decides by the wall clock (docs/faults/clock.md; the
scheduler lease's expiry in the state machine is the leader's stamp, fenced by the lease epoch), so
a jump changes no safety decision; but the records a leader stamps (submit, start and end times),
token and reservation times, and what a user reads all follow the wall clock. An operator
who sees odd times wants to know the clock moved, and when. `ClockJumps.seen(wall_s, mono_s)`,
called from a daemon's periodic loop, returns how far the wall clock moved against the monotonic
one since it last reported (None below the threshold): a step of NTP or an operator at once, a
drift once it adds up. Pure: the caller reads both clocks.
"""

from __future__ import annotations

import logging

THRESHOLD_S = 1.0  # NTP slews by far less; a second is a step (or a drift that adds up to one)


class ClockJumps:
    def __init__(self, threshold_s: float = THRESHOLD_S) -> None:
        self.threshold_s = threshold_s
        self._reference: float | None = None  # wall - monotonic when last reported (or first seen)
        self._first = 0.0  # wall - monotonic at the first reading
        self.total_s = 0.0  # how far it has moved since the first reading

    def seen(self, wall_s: float, mono_s: float) -> float | None:
        offset = wall_s - mono_s
        if self._reference is None:
            self._reference, self._first = offset, offset
            return None
        moved = offset - self._reference
        if abs(moved) < self.threshold_s:
            return None
        self._reference = offset
        self.total_s = offset - self._first
        return moved

    def log_if_moved(self, logger: logging.Logger, who: str, wall_s: float, mono_s: float) -> None:
        moved = self.seen(wall_s, mono_s)
        if moved is not None:
            logger.warning("%s: the wall clock jumped by %+.1f s against the monotonic clock (%+.1f s since "
                           "this daemon started); leases, heartbeats and timeouts do not follow it, but the "
                           "times it stamps do", who, moved, self.total_s)
