"""A scheduler in the simulation: the real View and core, the daemon's rules.

Theory of operation. The view is the real `scheduler.view.View`, fed the
messages a simulated Sync stream delivers; the decisions come from the real
pure core `scheduler.core.schedule`. What scheduler/daemon.py and
scheduler/follower.py do around them is replicated here in a few lines,
because there it is tied to threads, gRPC and the wall clock:

- the lease (daemon._lease): request, renew every third of its duration,
  decide only until 80 % of it by the scheduler's own clock, drop it when a
  batch is rejected for a stale lease;
- a pass (daemon._pass): none until the view holds the last batch's
  revision (or 2 s passed); dispatches sent but not yet seen in the view are
  not sent again for 5 s; a worker's refusal reason is not overwritten by a
  PEND decision. The 2 s cool-down of a refusing host is left out;
- the follower: resume from the view's revision and cluster id; after
  OUT_OF_RANGE start over from revision 0 (a snapshot).

A crash loses all of it (the view too); the restarted scheduler has a new id,
so it takes the lease only once the old one expired, with a new epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core import CoreConfig, Dispatch, Pend, schedule
from scheduler.view import View
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

from .network import Stream

LEASE_MS = 3_000
SENT_TTL_MS = 5_000
AWAIT_VIEW_MS = 2_000  # daemon.AWAIT_VIEW_S


@dataclass
class SchedulerNode:
    name: str
    incarnation: int = 0
    id: str = ""
    view: View = field(default_factory=View)
    stream: Stream | None = None
    epoch: int = 0
    lease_until_ms: int = 0
    renew_at_ms: int = 0
    lease_call_out: bool = False
    sent: dict[int, tuple[int, int]] = field(default_factory=dict)  # job -> (attempt, when)
    batches: int = 0
    frozen_until_ms: int = 0  # a stalled process (GC pause, stopped VM) does nothing until then
    await_revision: int = 0  # the last batch's revision: the next pass waits for the view to reach it
    await_until_ms: int = 0

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.incarnation += 1
        self.id = f"{self.name}-{self.incarnation}"
        self.view = View()
        if self.stream is not None:
            self.stream.close()
        self.stream = None
        self.epoch, self.lease_until_ms, self.renew_at_ms = 0, 0, 0
        self.lease_call_out = False
        self.sent = {}
        self.await_revision, self.await_until_ms = 0, 0

    # -------------------------------------------------------------- lease

    def lease_request(self) -> api.LeaseRequest:
        self.lease_call_out = True
        return api.LeaseRequest(scheduler_id=self.id, duration_s=LEASE_MS / 1000)

    def on_lease_reply(self, reply: api.LeaseResponse | None, sent_at_ms: int, now_ms: int) -> None:
        self.lease_call_out = False
        if reply is not None and reply.granted:
            self.epoch = reply.epoch
            self.lease_until_ms = sent_at_ms + LEASE_MS * 8 // 10  # stop early: our clock is not the leader's
            self.renew_at_ms = sent_at_ms + LEASE_MS // 3
        else:
            self.lease_until_ms = 0 if reply is not None else self.lease_until_ms
            self.renew_at_ms = now_ms + min(1000, LEASE_MS // 3)

    # -------------------------------------------------------------- a pass

    def decide(self, now_ms: int, paused: bool = False) -> api.DecisionBatch | None:
        """One pass. `paused`: the lease was checked, then the process stalled (a long GC
        pause, a stopped VM) past its end before the batch went out."""
        if (now_ms >= self.lease_until_ms and not paused) or self.epoch == 0:
            return None
        if self.view.revision < self.await_revision and now_ms <= self.await_until_ms:
            return None  # daemon._view_caught_up: the last batch's outcome is not in the view yet
        view = self.view
        jobs, queues, hosts = view.jobs(), view.queues(), view.hosts()
        self.sent = {j: (a, t) for j, (a, t) in self.sent.items() if now_ms - t < SENT_TTL_MS}
        pending = [j for j in jobs if not (j.id in self.sent and self.sent[j.id][0] == j.attempt)]
        decisions = schedule(pending, queues, hosts, now_ms, CoreConfig())
        refused = {j.id for j in pending if _refused(j)}
        decisions = [d for d in decisions if not (isinstance(d, Pend) and d.job_id in refused)]
        if not decisions:
            return None
        batch = api.DecisionBatch(lease_epoch=self.epoch, base_revision=view.revision, scheduler_id=self.id)
        for decision in decisions:
            if isinstance(decision, Dispatch):
                batch.decisions.add(dispatch=api.DispatchDecision(
                    job_id=decision.job_id, attempt=decision.attempt, host=decision.host))
                self.sent[decision.job_id] = (decision.attempt, now_ms)
            else:
                code = {"code": decision.code} if hasattr(decision, "code") else {}
                batch.decisions.add(pend=api.PendDecision(job_id=decision.job_id, reason=decision.reason,
                                                          **code))
        self.batches += 1
        return batch

    def on_batch_reply(self, batch: api.DecisionBatch, reply: api.DecisionBatchResponse | None,
                       now_ms: int) -> None:
        if reply is None:
            self.renew_at_ms = 0  # maybe a new leader: confirm the lease
            return
        if batch.scheduler_id == self.id:
            self.await_revision, self.await_until_ms = reply.revision, now_ms + AWAIT_VIEW_MS
        for sent, why in zip(batch.decisions, reply.rejections, strict=False):
            if why and sent.HasField("dispatch") and batch.scheduler_id == self.id:
                self.sent.pop(sent.dispatch.job_id, None)
        if any(r.startswith("stale lease") for r in reply.rejections) and batch.scheduler_id == self.id:
            self.lease_until_ms = 0
            self.renew_at_ms = 0

    # -------------------------------------------------------------- the Sync stream

    def sync_request(self) -> log.SyncRequest:
        return log.SyncRequest(from_revision=self.view.revision, cluster_id=self.view.cluster_id)

    def stream_ended(self) -> None:
        if self.stream is not None and self.stream.status == "OUT_OF_RANGE":
            self.view.revision = 0  # compacted past us: start over with a snapshot
        self.stream = None


def _refused(job: api.Job) -> bool:
    """daemon._pass: the job's pending reason is a worker's refusal (by code where the
    protocol has one, else by the reason's words)."""
    code = getattr(api, "PEND_DISPATCH_REFUSED", None)
    if code is not None:
        return bool(job.pending_code == code)
    return job.pending_reason.startswith("dispatch to ")
