"""The scheduler's side of the lease: when to ask, and until when it may decide.

Theory of operation. The controller grants the lease by its own clock and
fences every batch of an epoch that is not current; this side only keeps a
scheduler from deciding when it should not. It asks again every third of
the lease's duration, decides only until 80 % of the duration after it
asked (its clock is not the leader's), and stops at once when a batch comes
back rejected for a stale lease. Pure: the caller passes the time and does
the call.
"""

from __future__ import annotations

from dataclasses import dataclass

from xce.v1 import api_pb2 as api

DECIDE_FRACTION = 0.8


@dataclass
class Lease:
    scheduler_id: str
    duration_s: float
    epoch: int = 0
    until_s: float = 0.0  # by the scheduler's monotonic clock
    renew_at_s: float = 0.0

    def holds(self, now_s: float) -> bool:
        return self.epoch > 0 and now_s < self.until_s

    def due(self, now_s: float) -> bool:
        return now_s >= self.renew_at_s

    def request(self) -> api.LeaseRequest:
        return api.LeaseRequest(scheduler_id=self.scheduler_id, duration_s=self.duration_s)

    def answered(self, reply: api.LeaseResponse | None, sent_at_s: float, now_s: float) -> bool:
        """The outcome of a request sent at `sent_at_s` (None: no answer). True if newly held."""
        retry_s = min(1.0, self.duration_s / 3)
        if reply is None:
            self.renew_at_s = now_s + retry_s
            return False
        if not reply.granted:
            self.until_s = 0.0
            self.renew_at_s = now_s + retry_s
            return False
        new = reply.epoch != self.epoch
        self.epoch = reply.epoch
        self.until_s = sent_at_s + self.duration_s * DECIDE_FRACTION
        self.renew_at_s = sent_at_s + self.duration_s / 3
        return new

    def lost(self) -> None:
        """A batch was rejected for a stale lease: stop deciding and ask again now."""
        self.until_s = 0.0
        self.renew_at_s = 0.0
