"""What a scheduler decides and when: the lease, the planner and the pickers, without I/O.

Theory of operation. The daemon (daemon.py) and the protocol simulation
(tests/protocol_sim) drive the same `Decider`: they hand it the time, the
view and the answers of the controller, and send what it returns.
- `lease_request(now)`: a LeaseRequest when a renewal is due; the answer
  goes to `lease_answered`;
- `decide(view, now_s, now_ms)`: one pass when the lease holds and the view
  holds the previous batch's outcome: a DecisionBatch to send, or None. The
  planner keeps its time on `now_s` (monotonic); `now_ms` (wall) is only
  recorded in the batch;
- `batch_answered(batch, reply, now_s)`: the outcome (None: unknown; the view
  will tell); a stale-lease rejection drops the lease at once.

The lease is the only part two threads touch (the daemon renews it in a
thread of its own): `decide` reads it once, at its start.
Pickers are resolved by name (a queue's `job_pick_plugin`, else the default)
through the function it is given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler import planner
from scheduler.lease import Lease
from scheduler.picker import Picker
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.scheduler")


@dataclass
class Decider:
    lease: Lease
    pickers: Callable[[str], Picker]
    default_picker: str = "fcfs"
    config: planner.PlannerConfig = field(default_factory=planner.PlannerConfig)
    state: planner.PlannerState = field(default_factory=planner.PlannerState)
    batches: int = 0
    deferred: int = 0  # decisions the last pass left for later passes (over a bound of its batch)
    # Jobs of dispatches whose batch's outcome is unknown (no reply): maybe never committed, so such
    # a job may be pending at that attempt again (after a hold and a release); see idle().
    unsettled: set[int] = field(default_factory=set)
    # The last pass's configuration and what it was made of (config, default picker, the queues'
    # pickers): made again only when one of them changed.
    _configured: tuple[object, ...] = field(default=(), repr=False, compare=False)

    @property
    def scheduler_id(self) -> str:
        return self.lease.scheduler_id

    def lease_request(self, now_s: float) -> api.LeaseRequest | None:
        return self.lease.request() if self.lease.due(now_s) else None

    def lease_answered(self, reply: api.LeaseResponse | None, sent_at_s: float, now_s: float) -> None:
        if self.lease.answered(reply, sent_at_s, now_s):
            log.info("scheduler %s holds the lease, epoch %d", self.scheduler_id, self.lease.epoch)

    def holds_lease(self, now_s: float) -> bool:
        return self.lease.holds(now_s)

    def idle(self, waiting: Sequence[api.Job], now_s: float) -> bool:
        """Whether a pass at `now_s`, with these jobs waiting, may be left out (planner.idle): never
        while a dispatch of unknown outcome is in flight (planner.idle holds for accepted ones)."""
        if self.unsettled:
            self.unsettled &= self.state.in_flight.keys()
            if self.unsettled:
                return False
        return planner.idle(waiting, self.state, int(now_s * 1000), self.config)

    def decide(self, view: planner.PassView, now_s: float, now_ms: int) -> api.DecisionBatch | None:
        clock_ms = int(now_s * 1000)
        epoch = self.lease.epoch
        if not self.lease.holds(now_s) or not planner.ready(self.state, view.revision, clock_ms):
            return None
        settings, config = self._pass_config(view.queues)
        started = self.state
        plan = planner.plan(view, started, clock_ms, config, wall_ms=now_ms)
        self.state, self.deferred = plan.state, plan.deferred
        if log.isEnabledFor(logging.DEBUG):
            waiting = {api.PendingReason.Name(code): n for code, n in plan.result.waiting.items()}
            log.debug("scheduler %s: pass at revision %d: %d decisions (%d left for later passes); "
                      "waiting %s; hosts refused %s", self.scheduler_id, view.revision, len(plan.decisions),
                      plan.deferred, waiting, dict(plan.result.refusals))
        for host, job in plan.cooled:
            log.info("scheduler %s: %s refused job %d; no dispatch there for %.0f s", self.scheduler_id, host,
                     job, self.config.refusal_cooldown_ms / 1000)
        if not plan.decisions:
            return None
        self.batches += 1
        return planner.to_batch(plan, started, epoch, self.scheduler_id, view.revision, clock_ms, now_ms,
                                settings)

    def _pass_config(self, queues: Sequence[api.Queue]) -> tuple[api.PlannerSettings, planner.PlannerConfig]:
        plugins = tuple((q.name, q.job_pick_plugin) for q in queues if q.job_pick_plugin)
        made = self._configured
        if not made or made[0] is not self.config or made[1] != self.default_picker or made[2] != plugins:
            settings = self.config.settings(self.default_picker)
            made = self._configured = (self.config, self.default_picker, plugins, settings,
                                       planner.configured(settings, queues, self.pickers))
        return made[3], made[4]  # type: ignore[return-value]

    def batch_answered(self, batch: api.DecisionBatch, reply: api.DecisionBatchResponse | None,
                       now_s: float) -> None:
        if reply is None:  # outcome unknown (maybe a new leader): confirm the lease
            self.lease.renew_at_s = 0.0
            self.unsettled.update(d.dispatch.job_id for d in batch.decisions if d.HasField("dispatch"))
            return
        self.state, stale = planner.after_reply(self.state, batch, reply, int(now_s * 1000), self.config)
        rejected = [o for o in reply.outcomes[:len(batch.decisions)] if o.code != api.DECISION_ACCEPTED]
        if rejected:
            log.info("scheduler %s: %d of %d decisions rejected (%s: %s)", self.scheduler_id, len(rejected),
                     len(batch.decisions), api.DecisionRejection.Name(rejected[0].code), rejected[0].message)
        if stale:
            self.lease.lost()
