"""One worker's stream on the leader, after its join is committed.

Theory of operation: commit before send. Everything sent to a worker is
derived from committed state, after applied entries, so a new leader
re-derives it all on the worker's next join:
- RunJob for every job whose current attempt holds slots on this host
  (the `host_jobs` index) and that this connection has not sent yet; the
  worker runs at most one instance per (job, attempt) and answers a repeat
  with its reports again;
- SIGNAL_STOP / SIGNAL_CONT when a running job is stopped or resumed;
- SIGNAL_KILL for a kill request, and for any instance the worker has that
  committed state no longer wants (requeued or killed meanwhile).

The whole derivation (every job on the host, read from the state) runs when
the session starts, every RESEND_S, and when the leader cannot tell what an
entry changed. Otherwise the leader routes each applied entry's changed jobs
(`route`) to the session of the host they are on, and the jobs that may have
left a host (no host any more, attempt > 0) to the sessions whose host record
changed in that entry (a release always writes it); the session looks at
just those. What a session remembers of an instance is dropped once its end
is committed, so a long-lived connection does not grow.

Reports from the worker (started, finished, dispatch failed) are relayed
with this connection's generation through the leader's report group commit
(many workers' reports in one entry), in the order they arrived; once
applied (accepted, or recognised as stale) the worker gets an ack and may
forget the report. Heartbeats feed the leader's liveness bookkeeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from controller import fsm
from controller.host_liveness import Liveness
from controller.store import StateStore
from xce import worker_wire
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

RESEND_S = 5.0

Key = tuple[int, int]  # (job id, attempt)


class Leadership(Protocol):
    """What a session needs of its replica."""

    store: StateStore

    def still_leading(self, liveness: Liveness | None) -> None:
        """Raise the replica's ApiError once this leadership is over."""
        ...



@dataclass
class Routed:
    """What one applied entry changed, for the worker sessions."""

    jobs: dict[str, list[api.Job]] = field(default_factory=dict)  # by the host each is on, or just left
    hosts: set[str] = field(default_factory=set)  # host records written (join, status, slots)


def route(event: log.Event) -> Routed:
    routed = Routed()
    left: dict[bytes, str] = {}  # job key -> the host it left (its host_jobs row was deleted)
    for change in event.changes:
        if change.table == "hosts":
            routed.hosts.add(change.key.decode())
        elif change.table == "host_jobs" and change.deleted:
            host, _, job_key = change.key.partition(b"\x00")  # host names hold no NUL
            left[job_key] = host.decode()
    for change in event.changes:
        if change.table == "jobs":
            job = api.Job.FromString(change.value)
            if job.host:
                routed.jobs.setdefault(job.host, []).append(job)
            if (gone := left.get(change.key)) is not None and gone != job.host:
                routed.jobs.setdefault(gone, []).append(job)
    return routed


class SessionOver(Exception):
    """This stream should end; the worker re-joins and everything is resent."""


@dataclass
class WorkerSession:
    replica: Leadership
    relay: Callable[[list[log.HostReport]], Awaitable[list[log.Result | None]]]
    name: str
    generation: int
    liveness: Liveness | None
    outbox: asyncio.Queue[api.ControllerMessage | None] = field(default_factory=asyncio.Queue)
    run_sent: set[Key] = field(default_factory=set)
    live: set[Key] = field(default_factory=set)  # instances the worker runs, as far as we know
    stopped: dict[Key, bool | None] = field(default_factory=dict)
    kill_sent: set[Key] = field(default_factory=set)
    relaying: set[asyncio.Task[None]] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    inbox: list[tuple[int, api.Job]] = field(default_factory=list)  # (revision, changed job) to look at
    recheck: bool = False  # the host record changed: is this connection still current?
    full: bool = True  # derive everything from the state next time
    derived_at: int = 0  # the revision the last full derivation read: older changes say nothing new
    last_full: float = 0.0

    def changed(self, revision: int, jobs: list[api.Job], host_record: bool) -> None:
        self.inbox += [(revision, job) for job in jobs]
        self.recheck = self.recheck or host_record
        self.wake.set()

    def changed_unknown(self) -> None:
        self.full = True
        self.wake.set()

    async def read(self, requests: AsyncIterator[api.WorkerMessage]) -> None:
        """Heartbeats and reports until the worker hangs up; then end the outbox."""
        try:
            async for message in requests:
                self.replica.still_leading(self.liveness)
                kind = message.WhichOneof("body")
                if kind == "heartbeat" and self.liveness is not None \
                        and message.heartbeat.generation == self.generation:
                    self.liveness.seen(self.name, self.generation, time.monotonic())
                    # Answered, so a worker cut off from a leader that cannot tell it
                    # so (a partition) notices the silence and looks for the new one.
                    self.outbox.put_nowait(api.ControllerMessage(heartbeat=message.heartbeat))
                if reports := worker_wire.worker_reports(message):
                    # Not awaited here: many workers' reports share commits. The
                    # reports queue synchronously when the relay starts, and tasks
                    # start in creation order: they are committed in arrival order.
                    task = asyncio.get_running_loop().create_task(self._relay(list(reports)))
                    self.relaying.add(task)
                    task.add_done_callback(self.relaying.discard)
        finally:
            self.outbox.put_nowait(None)

    def close(self) -> None:
        for task in list(self.relaying):
            task.cancel()

    async def _relay(self, reports: list[api.JobReport]) -> None:
        results = await self.relay([log.HostReport(host=self.name, generation=self.generation, report=r)
                                    for r in reports])
        for report, result in zip(reports, results, strict=True):
            if result is None or result.code == log.INTERNAL:
                # Not known to be committed (or apply failed: no answer at all): end
                # the stream; the worker re-joins and sends every unacknowledged report again.
                self.outbox.put_nowait(None)
                return
            key, kind = (report.job_id, report.attempt), report.WhichOneof("body") or ""
            if kind == "started":
                self.live.add(key)
                if result.code != log.OK:  # an instance committed state does not want
                    self._kill(key)
            else:
                self._forget(key)
            self.outbox.put_nowait(api.ControllerMessage(ack=api.ReportAck(
                job_id=report.job_id, attempt=report.attempt, kind=kind)))

    async def command(self) -> None:
        """Send what committed state asks of this host until the session is over."""
        while True:
            try:
                self.step()
            except SessionOver:
                self.outbox.put_nowait(None)
                return
            self.wake.clear()  # no await since the inbox was taken: nothing is missed
            try:
                next_full = self.last_full + RESEND_S - time.monotonic()
                await asyncio.wait_for(self.wake.wait(), max(0.0, next_full))
            except TimeoutError:
                pass

    def step(self) -> None:
        """One look: at everything (at first, and every RESEND_S in any case, a
        safety net that a busy host's wakes must not put off), else at the
        changes routed since the last look."""
        if self.full or time.monotonic() - self.last_full >= RESEND_S:
            self.full, self.inbox, self.recheck = False, [], False
            self._derive()
            return
        items, self.inbox = self.inbox, []
        if self.recheck:
            self.recheck = False
            with self.replica.store.read() as tables:
                self._check_host(fsm.read_host(tables, self.name))
        for revision, job in items:
            if revision > self.derived_at:  # else the derivation saw this or newer
                self._consider(job)

    def _derive(self) -> None:
        with self.replica.store.read() as tables:
            self.derived_at = fsm.read_meta(tables).applied_index
            host = fsm.read_host(tables, self.name)
            jobs = [fsm.read_job(tables, job_id) for job_id in fsm.host_job_ids(tables, self.name)]
        self.last_full = time.monotonic()
        self._check_host(host)
        wanted = {(j.id, j.attempt): j for j in jobs
                  if j is not None and j.host == self.name and j.state in fsm.RUNNING}
        for job in wanted.values():
            self._want(job)
        for key in self.live - wanted.keys():
            self._kill(key)

    def _check_host(self, host: api.Host | None) -> None:
        if host is None or host.generation != self.generation or host.status != api.HOST_OK:
            # Marked UNAVAIL (or superseded) while this stream lives: end it so
            # the worker re-joins, which sets the host OK and re-reports its jobs.
            raise SessionOver(f"host {self.name} generation {self.generation} is no longer current")

    def _consider(self, job: api.Job) -> None:
        """One changed job: run it, signal it, or kill an instance no longer wanted."""
        here = job.host == self.name
        wanted = (job.id, job.attempt) if here and job.state in fsm.RUNNING else None
        if wanted is not None:
            self._want(job)
        # Instances of this job, oldest attempt first; whichever is cheaper to look through.
        keys = [(job.id, a) for a in range(job.attempt + 1)] if job.attempt < len(self.live) \
            else sorted(k for k in self.live if k[0] == job.id)
        for key in keys:
            if key not in self.live or key == wanted:
                continue
            if here and key == (job.id, job.attempt) and job.state in fsm.FINISHED:
                self._forget(key)  # it ended here: its finished report made it so
            else:
                self._kill(key)

    def _forget(self, key: Key) -> None:
        """The instance ended and committed state knows it: nothing more to send about it."""
        self.live.discard(key)
        self.run_sent.discard(key)
        self.stopped.pop(key, None)
        self.kill_sent.discard(key)

    def _want(self, job: api.Job) -> None:
        key = (job.id, job.attempt)
        # UNKWN: what it was before its host went away (the worker's RunJob keeps UNKWN,
        # which tells it to report an instance it has, never to start one).
        state = job.state_before_unknown if job.state == api.UNKWN else job.state
        want_stopped = state in (api.USUSP, api.SSUSP)
        if key not in self.run_sent:
            # The worker stops or continues an instance as the RunJob's state says
            # (also one it runs already: a RunJob on a new connection restates it).
            self.run_sent.add(key)
            self.live.add(key)
            self.stopped[key] = want_stopped
            self.outbox.put_nowait(api.ControllerMessage(run=api.RunJob(job=job)))
        if want_stopped != self.stopped.get(key):
            self.stopped[key] = want_stopped
            self._signal(key, api.SIGNAL_STOP if want_stopped else api.SIGNAL_CONT)
        if job.kill_requested:
            self._kill(key)

    def _kill(self, key: Key) -> None:
        if key not in self.kill_sent:
            self.kill_sent.add(key)
            self._signal(key, api.SIGNAL_KILL)

    def _signal(self, key: Key, kind: api.SignalKind) -> None:
        self.outbox.put_nowait(api.ControllerMessage(signal=api.SignalJob(job_id=key[0], attempt=key[1],
                                                                          kind=kind)))
