"""`xce scheduler`: follow the state, hold the lease, send what the decider decides.

Theory of operation. The decisions are the Decider's (decider.py: the lease,
the planner and the pickers, without I/O); this module only does the I/O
around it. A Follower keeps the view in step with committed state
(follower.py). A thread of its own asks for the lease whenever the decider
says a renewal is due (every third of its duration), so no pass can delay a
renewal; the controller rejects any batch of an older epoch anyway
(fencing). The pass loop runs when the view changed (and at least once a
second), no sooner than `min_interval_s` after the last, except that an
event which frees slots (a report: a job ended; a join) starts the next
pass at once: a short job's slot is not
left idle for the interval (turnover). Each pass hands the
decider a snapshot of the view and the time, sends the batch it returns as
one DecisionBatch, and hands back the answer. The outcome is learned from
the view, not from the reply.
"""

from __future__ import annotations

import collections
import logging
import random
import signal
import sys
import threading
from collections.abc import Sequence

from prometheus_client import Counter, Gauge, Histogram

from client.channel import Client, XceError
from client.credentials import Credentials
from scheduler import picker as picker_module
from scheduler.decider import Decider
from scheduler.follower import Follower
from scheduler.lease import Lease
from scheduler.picker import Picker
from scheduler.planner import pass_view
from scheduler.view import View
from xce import daemon_logging, pki, sd_notify
from xce.clock import REAL_CLOCK, Clock
from xce.clock_jumps import ClockJumps
from xce.metrics import BUCKETS, daemon_registry
from xce.metrics import serve as serve_metrics
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.scheduler")


# Entry kinds whose event starts a pass at once: slots freed (a job's end is a report) or hosts
# joined. A submit waits for the interval: under a stream of submits the passes would never rest.
URGENT_KINDS = frozenset({"report", "reports", "join_host", "joins"})


class Scheduler:
    def __init__(self, addresses: Sequence[str], credentials: Credentials, scheduler_id: str | None = None,
                 lease_s: float = 10.0,
                 min_interval_s: float = 0.05, picker: str = "fcfs", clock: Clock = REAL_CLOCK,
                 rng: random.Random | None = None, metrics: str = "") -> None:
        """`metrics`: the address its metrics are served on (`run` serves them), said to the leader."""
        self.id = scheduler_id or f"scheduler-{(rng or random.Random()).getrandbits(32):08x}"
        self.lease_s = lease_s
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._clock_jumps = ClockJumps()  # said in the log: the times this scheduler compares moved
        self._pickers: dict[str, Picker] = {}
        self.default_picker = picker
        self.decider = Decider(Lease(self.id, lease_s), self._picker, picker)
        self._lock = threading.Lock()  # the lease is shared by the pass loop and the lease thread
        self._changed = threading.Event()
        self._urgent = threading.Event()  # a change that should not wait for min_interval_s
        self.follower = Follower(addresses, credentials, View(), on_change=self._view_changed, clock=clock,
                                 metrics_address=metrics)
        # Short calls: a batch sent to a leader that was just cut off must not
        # hold up the passes for long (its outcome is learned from the view anyway).
        self._client = Client(addresses, credentials, deadline_s=5.0, call_timeout_s=1.5)
        # The lease has its own thread and client: a slow pass or batch must
        # never delay a renewal past the lease (a holder that loses its lease
        # under load stalls every decision until it takes it again).
        self._lease_client = Client(addresses, credentials, deadline_s=lease_s / 3,
                                    call_timeout_s=max(0.2, lease_s / 6))
        self._stop = threading.Event()
        self._renew_now = threading.Event()
        # Prometheus metrics (served only with --metrics): passes, decisions, the lease.
        self.registry = daemon_registry("scheduler")
        self._pass_s = Histogram("xce_scheduler_pass_seconds", "One pass of the decider (a batch or none)",
                                 buckets=BUCKETS, registry=self.registry)
        self._decisions = Counter("xce_scheduler_decisions_total", "Decisions sent, by kind and outcome",
                                  ["kind", "outcome"], registry=self.registry)
        lease = Gauge("xce_scheduler_lease_held", "1 while this scheduler holds the lease",
                      registry=self.registry)
        lease.set_function(lambda: float(self.holds_lease()))

    @property
    def epoch(self) -> int:
        return self.decider.lease.epoch

    @property
    def batches(self) -> int:
        return self.decider.batches

    def stop(self) -> None:
        self._stop.set()
        self._urgent.set()
        self._changed.set()
        self._renew_now.set()

    def run(self) -> None:
        self.follower.start()
        sd_notify.notify("READY=1", f"STATUS=scheduler {self.id}")
        leasing = threading.Thread(target=self._lease_loop, name="lease", daemon=True)
        leasing.start()
        try:
            while not self._stop.is_set():
                self._changed.wait(1.0)
                self._changed.clear()
                if self._stop.is_set():
                    break
                self._urgent.clear()
                self._clock_jumps.log_if_moved(log, f"scheduler {self.id}", self.clock.now_ms() / 1000,
                                               self.clock.monotonic_s())
                self._pass()
                self._urgent.wait(self.min_interval_s)
        finally:
            self._stop.set()
            self._renew_now.set()
            leasing.join(timeout=self.lease_s)
            self.follower.stop()
            self._client.close()
            self._lease_client.close()

    def _view_changed(self, view: View) -> None:
        if view.last_kind in URGENT_KINDS:
            self._urgent.set()
        self._changed.set()

    def holds_lease(self) -> bool:
        with self._lock:
            return self.decider.holds_lease(self.clock.monotonic_s())

    def _lease_loop(self) -> None:
        while not self._stop.is_set():
            self._renew_now.clear()  # before the call: an ask that comes during it is not lost
            with self._lock:
                request = self.decider.lease_request(self.clock.monotonic_s())
            if request is not None:
                self._lease(request)
            with self._lock:
                wait_s = self.decider.lease.renew_at_s - self.clock.monotonic_s()
            self._renew_now.wait(max(0.0, min(wait_s, self.lease_s)))

    def _lease(self, request: api.LeaseRequest) -> None:
        sent_at = self.clock.monotonic_s()
        self._to_leader(self._lease_client)
        try:
            reply: api.LeaseResponse | None = self._lease_client.call(
                "SchedulerService", "AcquireLease", request, api.LeaseResponse)
        except XceError as exc:
            log.info("scheduler %s: lease request failed: %s", self.id, exc)
            reply = None
        with self._lock:
            self.decider.lease_answered(reply, sent_at, self.clock.monotonic_s())

    def _pass(self) -> None:
        with self.follower.lock:
            snapshot = pass_view(self.follower.view)
        # Not under the lock: a pass may take a while, and the lease thread must never
        # wait for one (decide reads the lease once, at its start).
        began = self.clock.monotonic_s()
        batch = self.decider.decide(snapshot, began, self.clock.now_ms())
        self._pass_s.observe(self.clock.monotonic_s() - began)
        if batch is None:
            return
        self._to_leader(self._client)
        try:
            reply: api.DecisionBatchResponse | None = self._client.call(
                "SchedulerService", "SubmitDecisions", batch, api.DecisionBatchResponse)
        except XceError as exc:
            log.info("scheduler %s: batch not sent: %s", self.id, exc)
            reply = None
        self._count(batch, reply)
        with self._lock:
            self.decider.batch_answered(batch, reply, self.clock.monotonic_s())
            renew = self.decider.lease.due(self.clock.monotonic_s())
        if renew:
            self._renew_now.set()  # maybe a new leader, or a stale lease: confirm it now

    def _count(self, batch: api.DecisionBatch, reply: api.DecisionBatchResponse | None) -> None:
        # Counted here, then added once per kind and outcome (a labelled counter's increment per decision
        # was a seventh of the scheduler's CPU at 4,000 decisions a batch).
        counted: collections.Counter[tuple[str, str]] = collections.Counter()
        rejections = list(reply.rejections) if reply is not None else []
        for i, decision in enumerate(batch.decisions):
            outcome = "unknown" if reply is None else \
                "rejected" if i < len(rejections) and rejections[i] else "accepted"
            counted[(decision.WhichOneof("body") or "empty", outcome)] += 1
        for (kind, outcome), count in counted.items():
            self._decisions.labels(kind, outcome).inc(count)

    def _to_leader(self, client: Client) -> None:
        """Calls go where the Sync stream is served, which only the leader does: after a
        partition the client's last replica may be the cut-off one, where a call would
        wait for its whole timeout."""
        serving = self.follower.serving
        if serving is not None:
            client.prefer(serving)

    def _picker(self, name: str) -> Picker:
        """A loaded picker; an unknown name falls back to the default (and says so once)."""
        if name not in self._pickers:
            try:
                self._pickers[name] = picker_module.load(name)
            except picker_module.PickerError as exc:
                log.error("scheduler %s: %s; using %s", self.id, exc, self.default_picker)
                self._pickers[name] = self._pickers.get(self.default_picker) or picker_module.Fcfs()
        return self._pickers[name]


def run(addresses: Sequence[str], credentials: Credentials, scheduler_id: str | None, lease_s: float,
        picker: str = "fcfs", metrics: str = "") -> int:
    try:
        picker_module.load(picker)
    except picker_module.PickerError as exc:
        print(f"xce scheduler: {exc}", file=sys.stderr)
        return 2
    if scheduler_id is None and credentials.cert is not None:
        scheduler_id = pki.identity(credentials.cert).name  # the lease is bound to the certificate's name
    scheduler = Scheduler(addresses, credentials, scheduler_id, lease_s, picker=picker, metrics=metrics)
    daemon_logging.setup(f"scheduler-{scheduler.id}")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: scheduler.stop())
    log.info("scheduler %s: controllers %s", scheduler.id, ",".join(addresses))
    if metrics:
        serve_metrics(metrics, scheduler.registry)
        log.info("scheduler %s: metrics on http://%s/metrics", scheduler.id, metrics)
    scheduler.run()
    return 0
