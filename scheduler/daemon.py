"""`xce scheduler`: follow the state, hold the lease, decide, send batches.

Theory of operation. A Follower keeps the view in step with committed state
(follower.py). A thread of its own takes the lease and renews it every third
of its duration, one log entry each time, so no pass can delay a renewal;
the daemon stops deciding once its lease would have run out by its own
clock, and the controller rejects any batch of an older epoch anyway
(fencing). A pass runs when the view changed (and at least once a second),
no sooner than `min_interval_s` after the last, and only once the view holds
the previous batch's outcome (the reply's revision): the pure core computes
decisions, they go to the leader as one DecisionBatch, and their outcome is
learned from the view, not from the reply. Decisions sent but not yet
visible in the view are not sent again.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence

from scheduler import picker as picker_module
from scheduler.core import CoreConfig, Dispatch, Pend, schedule
from scheduler.follower import Follower
from scheduler.picker import Picker
from scheduler.view import View
from xce.client import Client, XceError
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.scheduler")

REFUSED = "dispatch to "  # the prefix of the reason a worker's refusal leaves (fsm._apply_report)
REFUSAL_COOLDOWN_S = 2.0
AWAIT_VIEW_S = 2.0


class Scheduler:
    def __init__(self, addresses: Sequence[str], scheduler_id: str | None = None, lease_s: float = 10.0,
                 min_interval_s: float = 0.05, picker: str = "fcfs") -> None:
        self.id = scheduler_id or f"scheduler-{uuid.uuid4().hex[:8]}"
        self.lease_s = lease_s
        self.min_interval_s = min_interval_s
        self.default_picker = picker
        self._pickers: dict[str, Picker] = {}
        self.config = CoreConfig(picker=self._picker(picker))
        self._changed = threading.Event()
        self.follower = Follower(addresses, View(), on_change=lambda _: self._changed.set())
        # Short calls: a batch sent to a leader that was just cut off must not
        # hold up the passes for long (its outcome is learned from the view anyway).
        self._client = Client(addresses, deadline_s=5.0, call_timeout_s=1.5)
        # The lease has its own thread and client: a slow pass or batch must
        # never delay a renewal past the lease (a holder that loses its lease
        # under load stalls every decision until it takes it again).
        self._lease_client = Client(addresses, deadline_s=lease_s / 3, call_timeout_s=max(0.2, lease_s / 6))
        self._stop = threading.Event()
        self._renew_now = threading.Event()
        self.epoch = 0
        self._lease_until = 0.0  # local monotonic time until which we may decide
        self._renew_at = 0.0
        self._await_revision = 0  # the last batch's revision: the next pass waits for the view to reach it
        self._await_until = 0.0
        self._sent: dict[int, tuple[int, float]] = {}  # job -> (attempt, when), dispatched not yet seen
        self._cooldown: dict[str, float] = {}  # host -> until when it gets no dispatch (it refused one)
        self._refusals_seen: set[tuple[int, int]] = set()
        self.batches = 0

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        self._renew_now.set()

    def run(self) -> None:
        self.follower.start()
        leasing = threading.Thread(target=self._lease_loop, name="lease", daemon=True)
        leasing.start()
        try:
            while not self._stop.is_set():
                self._changed.wait(1.0)
                self._changed.clear()
                if self._stop.is_set():
                    break
                if self.holds_lease() and self._view_caught_up():
                    self._pass()
                self._stop.wait(self.min_interval_s)
        finally:
            self._stop.set()
            self._renew_now.set()
            leasing.join(timeout=self.lease_s)
            self.follower.stop()
            self._client.close()
            self._lease_client.close()

    def holds_lease(self) -> bool:
        return time.monotonic() < self._lease_until

    def _view_caught_up(self) -> bool:
        """The last batch's outcome is in the view (or it is overdue): a pass on
        an older view would hand out the slots that batch took, to be rejected."""
        return self.follower.view.revision >= self._await_revision or time.monotonic() > self._await_until

    def _lease_loop(self) -> None:
        while not self._stop.is_set():
            self._renew_now.clear()  # before the call: an ask that comes during it is not lost
            self._lease()
            self._renew_now.wait(max(0.0, self._renew_at - time.monotonic()))

    def _lease(self) -> None:
        now = time.monotonic()
        try:
            lease = self._lease_client.call("SchedulerService", "AcquireLease",
                                      api.LeaseRequest(scheduler_id=self.id, duration_s=self.lease_s),
                                      api.LeaseResponse)
        except XceError as exc:
            log.info("scheduler %s: lease request failed: %s", self.id, exc)
            self._renew_at = now + min(1.0, self.lease_s / 3)
            return
        if lease.granted:
            if lease.epoch != self.epoch:
                log.info("scheduler %s holds the lease, epoch %d", self.id, lease.epoch)
            self.epoch = lease.epoch
            self._lease_until = now + self.lease_s * 0.8  # stop early: our clock is not the leader's
            self._renew_at = now + self.lease_s / 3
        else:
            self._lease_until = 0.0
            self._renew_at = now + min(1.0, self.lease_s / 3)

    def _pass(self) -> None:
        with self.follower.lock:
            view = self.follower.view
            jobs, queues, hosts, revision = view.jobs(), view.queues(), view.hosts(), view.revision
        now = time.monotonic()
        self._sent = {j: (a, t) for j, (a, t) in self._sent.items() if now - t < 5.0}
        self._note_refusals(jobs, now)
        usable = [h for h in hosts if self._cooldown.get(h.spec.name, 0.0) <= now]
        pending = [j for j in jobs if not (j.id in self._sent and self._sent[j.id][0] == j.attempt)]
        self.config.queue_pickers = {q.name: self._picker(q.job_pick_plugin) for q in queues
                                     if q.job_pick_plugin}
        decisions = schedule(pending, queues, usable, int(time.time() * 1000), self.config)
        refused = {j.id for j in pending if j.pending_code == api.PEND_DISPATCH_REFUSED}
        # A worker's refusal says more than what a pass without that host would say.
        decisions = [d for d in decisions if not (isinstance(d, Pend) and d.job_id in refused)]
        if not decisions:
            return
        batch = api.DecisionBatch(lease_epoch=self.epoch, base_revision=revision, scheduler_id=self.id)
        for decision in decisions:
            if isinstance(decision, Dispatch):
                batch.decisions.add(dispatch=api.DispatchDecision(
                    job_id=decision.job_id, attempt=decision.attempt, host=decision.host))
                self._sent[decision.job_id] = (decision.attempt, now)
            elif isinstance(decision, Pend):
                batch.decisions.add(pend=api.PendDecision(job_id=decision.job_id, reason=decision.reason,
                                                          code=decision.code))
        try:
            reply = self._client.call("SchedulerService", "SubmitDecisions", batch, api.DecisionBatchResponse)
        except XceError as exc:
            log.info("scheduler %s: batch not sent: %s", self.id, exc)
            self._renew_now.set()  # maybe a new leader: confirm the lease
            return
        self.batches += 1
        self._await_revision, self._await_until = reply.revision, time.monotonic() + AWAIT_VIEW_S
        for sent, why in zip(batch.decisions, reply.rejections, strict=False):
            if why and sent.HasField("dispatch"):
                self._sent.pop(sent.dispatch.job_id, None)  # free to try again next pass
        rejected = [r for r in reply.rejections if r]
        if rejected:
            log.info("scheduler %s: %d of %d decisions rejected (%s)", self.id, len(rejected),
                     len(reply.rejections), rejected[0])
            if any(r.startswith("stale lease") for r in rejected):
                self._lease_until = 0.0
                self._renew_now.set()


    def _picker(self, name: str) -> Picker:
        """A loaded picker; an unknown name falls back to the default (and says so once)."""
        if name not in self._pickers:
            try:
                self._pickers[name] = picker_module.load(name)
            except picker_module.PickerError as exc:
                log.error("scheduler %s: %s; using %s", self.id, exc, self.default_picker)
                self._pickers[name] = self._pickers.get(self.default_picker) or picker_module.Fcfs()
        return self._pickers[name]

    def _note_refusals(self, jobs: Sequence[api.Job], now: float) -> None:
        """A worker that refused a dispatch (not ready, draining) gets none for a while (M1),
        instead of one refusal, and one more attempt, every pass."""
        pending = {(j.id, j.attempt) for j in jobs if j.state == api.PEND}
        self._refusals_seen &= pending
        for job in jobs:
            if job.state != api.PEND or job.pending_code != api.PEND_DISPATCH_REFUSED \
                    or not job.pending_reason.startswith(REFUSED):
                continue
            if (job.id, job.attempt) in self._refusals_seen:
                continue
            self._refusals_seen.add((job.id, job.attempt))
            host = job.pending_reason[len(REFUSED):].split(" failed", 1)[0]
            self._cooldown[host] = now + REFUSAL_COOLDOWN_S
            log.info("scheduler %s: %s refused job %d; no dispatch there for %.0f s", self.id, host,
                     job.id, REFUSAL_COOLDOWN_S)


def run(addresses: Sequence[str], scheduler_id: str | None, lease_s: float, picker: str = "fcfs") -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    try:
        picker_module.load(picker)
    except picker_module.PickerError as exc:
        print(f"xce scheduler: {exc}", file=sys.stderr)
        return 2
    scheduler = Scheduler(addresses, scheduler_id, lease_s, picker=picker)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: scheduler.stop())
    log.info("scheduler %s: controllers %s", scheduler.id, ",".join(addresses))
    scheduler.run()
    return 0
