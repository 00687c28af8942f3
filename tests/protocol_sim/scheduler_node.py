"""A scheduler in the simulation: the real View and the real Decider.

Theory of operation. The view is the real `scheduler.view.View`, fed the
messages a simulated Sync stream delivers, resumed with its own
`sync_request` and started over with `compacted` after OUT_OF_RANGE, as
scheduler/follower.py does. Every decision is the real
`scheduler.decider.Decider`'s (the lease, the planner with its in-flight
dedupe, refusal cool-down and await rule, the pickers): the simulation only
carries its requests and batches over the simulated network and hands back
the answers, with the simulated clock.

A crash loses all of it (the view too); the restarted scheduler has a new id,
so it takes the lease only once the old one expired, with a new epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler import picker
from scheduler.decider import Decider
from scheduler.lease import Lease
from scheduler.planner import PlannerConfig, pass_view
from scheduler.view import View
from xce.clock import Clock
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

from .network import Stream

LEASE_S = 3.0


@dataclass
class SchedulerNode:
    name: str
    clock: Clock
    view_factory: Callable[[], View] = View
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    incarnation: int = 0
    id: str = ""
    view: View = field(default_factory=View)
    stream: Stream | None = None
    decider: Decider | None = None
    lease_call_out: bool = False
    frozen_until_ms: int = 0  # a stalled process (GC pause, stopped VM) does nothing until then

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.incarnation += 1
        self.id = f"{self.name}-{self.incarnation}"
        self.view = self.view_factory()
        if self.stream is not None:
            self.stream.close()
        self.stream = None
        self.decider = Decider(Lease(self.id, LEASE_S), picker.load, "fcfs", config=self.planner)
        self.lease_call_out = False

    @property
    def core(self) -> Decider:
        assert self.decider is not None
        return self.decider

    def holds_lease(self) -> bool:
        return self.core.holds_lease(self.clock.monotonic_s())

    # -------------------------------------------------------------- lease

    def lease_request(self) -> api.LeaseRequest | None:
        request = self.core.lease_request(self.clock.monotonic_s())
        if request is not None:
            self.lease_call_out = True
        return request

    def on_lease_reply(self, reply: api.LeaseResponse | None, sent_at_s: float) -> None:
        self.lease_call_out = False
        self.core.lease_answered(reply, sent_at_s, self.clock.monotonic_s())

    # -------------------------------------------------------------- a pass

    def decide(self) -> api.DecisionBatch | None:
        return self.core.decide(pass_view(self.view), self.clock.monotonic_s(), self.clock.now_ms())

    def on_batch_reply(self, batch: api.DecisionBatch, reply: api.DecisionBatchResponse | None) -> None:
        if batch.scheduler_id == self.id:
            self.core.batch_answered(batch, reply, self.clock.monotonic_s())

    # -------------------------------------------------------------- the Sync stream

    def sync_request(self) -> log.SyncRequest:
        return self.view.sync_request()

    def stream_ended(self) -> None:
        if self.stream is not None and self.stream.status == "OUT_OF_RANGE":
            self.view.compacted()
        self.stream = None
