"""One worker's stream on the leader, after its join is committed.

Theory of operation: commit before send. Everything sent to a worker is
derived from committed state, after every applied entry (and once a second
regardless), so a new leader re-derives it all on the worker's next join:
- RunJob for every job whose current attempt holds slots on this host
  (the `host_jobs` index) and that this connection has not sent yet; the
  worker runs at most one instance per (job, attempt) and answers a repeat
  with its reports again;
- SIGNAL_STOP / SIGNAL_CONT when a running job is stopped or resumed;
- SIGNAL_KILL for a kill request, and for any instance the worker has that
  committed state no longer wants (requeued or killed meanwhile).

A session re-derives when an applied entry touched its host (its record,
or a job placed on it: `hosts_touched`), and every RESEND_S regardless.

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

    def host_changed(self, name: str) -> asyncio.Event:
        """Set after the next applied entry that touches this host."""
        ...


def hosts_touched(event: log.Event) -> set[str]:
    """The hosts whose sessions must re-derive after this event: a host
    record changed (join, status, slots given or taken: every placement and
    release writes it), or a job on the host changed (kill, stop, resume)."""
    hosts: set[str] = set()
    for change in event.changes:
        if change.table == "hosts":
            hosts.add(change.key.decode())
        elif change.table == "jobs":
            job = api.Job.FromString(change.value)
            if job.host:
                hosts.add(job.host)
    return hosts


class SessionOver(Exception):
    """This stream should end; the worker re-joins and everything is resent."""


@dataclass
class WorkerSession:
    replica: Leadership
    relay: Callable[[log.HostReport], Awaitable[log.Result | None]]
    name: str
    generation: int
    liveness: Liveness | None
    outbox: asyncio.Queue[api.ControllerMessage | None] = field(default_factory=asyncio.Queue)
    run_sent: set[Key] = field(default_factory=set)
    live: set[Key] = field(default_factory=set)  # instances the worker runs, as far as we know
    stopped: dict[Key, bool | None] = field(default_factory=dict)
    kill_sent: set[Key] = field(default_factory=set)
    relaying: set[asyncio.Task[None]] = field(default_factory=set)

    async def read(self, requests: AsyncIterator[api.WorkerMessage]) -> None:
        """Heartbeats and reports until the worker hangs up; then end the outbox."""
        try:
            async for message in requests:
                self.replica.still_leading(self.liveness)
                kind = message.WhichOneof("body")
                if kind == "heartbeat" and self.liveness is not None \
                        and message.heartbeat.generation == self.generation:
                    self.liveness.seen(self.name, self.generation, time.monotonic())
                elif kind == "report":
                    # Not awaited here: a worker's many reports share commits.
                    # Tasks start in creation order, so they queue in arrival order.
                    task = asyncio.get_running_loop().create_task(self._relay(message.report))
                    self.relaying.add(task)
                    task.add_done_callback(self.relaying.discard)
        finally:
            self.outbox.put_nowait(None)

    def close(self) -> None:
        for task in list(self.relaying):
            task.cancel()

    async def _relay(self, report: api.JobReport) -> None:
        result = await self.relay(log.HostReport(host=self.name, generation=self.generation, report=report))
        if result is None:
            # Not known to be committed: end the stream; the worker re-joins
            # and sends every unacknowledged report again.
            self.outbox.put_nowait(None)
            return
        key, kind = (report.job_id, report.attempt), report.WhichOneof("body") or ""
        if kind == "started":
            self.live.add(key)
            if result.code != log.OK:  # an instance committed state does not want
                self._kill(key)
        else:
            self.live.discard(key)
        self.outbox.put_nowait(api.ControllerMessage(ack=api.ReportAck(
            job_id=report.job_id, attempt=report.attempt, kind=kind)))

    async def command(self) -> None:
        """Send what committed state asks of this host until the session is over."""
        while True:
            event = self.replica.host_changed(self.name)
            try:
                self._derive()
            except SessionOver:
                self.outbox.put_nowait(None)
                return
            try:
                await asyncio.wait_for(event.wait(), RESEND_S)
            except TimeoutError:
                pass

    def _derive(self) -> None:
        with self.replica.store.read() as tables:
            host = fsm.read_host(tables, self.name)
            jobs = [fsm.read_job(tables, job_id) for job_id in fsm.host_job_ids(tables, self.name)]
        if host is None or host.generation != self.generation or host.status != api.HOST_OK:
            # Marked UNAVAIL (or superseded) while this stream lives: end it so
            # the worker re-joins, which sets the host OK and re-reports its jobs.
            raise SessionOver(f"host {self.name} generation {self.generation} is no longer current")
        wanted = {(j.id, j.attempt): j for j in jobs
                  if j is not None and j.host == self.name and j.state in fsm.RUNNING}
        for key, job in wanted.items():
            if key not in self.run_sent:
                self.run_sent.add(key)
                self.live.add(key)
                self.outbox.put_nowait(api.ControllerMessage(run=api.RunJob(job=job)))
            want_stopped = job.state in (api.USUSP, api.SSUSP)
            if want_stopped != self.stopped.get(key):  # first look on a connection: always say it
                self.stopped[key] = want_stopped
                self._signal(key, api.SIGNAL_STOP if want_stopped else api.SIGNAL_CONT)
            if job.kill_requested:
                self._kill(key)
        for key in self.live - wanted.keys():
            self._kill(key)

    def _kill(self, key: Key) -> None:
        if key not in self.kill_sent:
            self.kill_sent.add(key)
            self._signal(key, api.SIGNAL_KILL)

    def _signal(self, key: Key, kind: api.SignalKind) -> None:
        self.outbox.put_nowait(api.ControllerMessage(signal=api.SignalJob(job_id=key[0], attempt=key[1],
                                                                          kind=kind)))
