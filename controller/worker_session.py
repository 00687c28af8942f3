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
the session starts, every `full_look_s` (RESEND_S), and when the leader
cannot tell what an entry changed. Otherwise the leader routes each applied entry's changed jobs
(`route`) to the session of the host they are on, and the jobs that may have
left a host (no host any more, attempt > 0) to the sessions whose host record
changed in that entry (a release always writes it); the session looks at
just those, as they are committed when it looks (not the routed copies).
What a session remembers of an instance is dropped once its end
is committed, so a long-lived connection does not grow.

Reports from the worker (started, finished, dispatch failed) are relayed by
the leader core (leader.py) with this connection's generation through its
report group commit (many workers' reports in one entry), in the order they
arrived; once applied (accepted, or recognised as stale) `relayed` acks them
and the worker may forget them. A start the worker says again (`again`, after
a re-join) that committed state already holds as said is acked at once, with
no entry (`restated`).

Pure: no I/O, no clock (the time is passed in), no asyncio; what to send is
queued in `outbox` and taken by the leader core.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from controller import fsm
from controller.tables import Tables
from xce import host_timing
from xce.start_held import holds_start
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

RESEND_S = host_timing.HostTiming.resend_s  # [hosts] resend_s

Key = tuple[int, int]  # (job id, attempt)


class StateReader(Protocol):
    """Committed state, read in one transaction (StateStore.read)."""

    def read(self) -> AbstractContextManager[Tables]: ...


@dataclass
class Routed:
    """What one applied entry changed, for the worker sessions."""

    jobs: dict[str, list[log.JobHosts]] = field(default_factory=dict)  # by the host each is on, or just left
    hosts: set[str] = field(default_factory=set)  # host records written (join, status, slots)


def route(event: log.Event) -> Routed:
    routed = Routed()
    left: dict[bytes, list[str]] = {}  # job key -> the hosts it left (its host_jobs rows were deleted)
    for change in event.changes:
        if change.table == "hosts":
            routed.hosts.add(change.key.decode())
        elif change.table == "host_jobs" and change.deleted:
            host, _, job_key = change.key.partition(b"\x00")  # host names hold no NUL
            left.setdefault(job_key, []).append(host.decode())
    for change in event.changes:
        if change.table == "jobs" and not change.deleted:  # a deleted job (cleaned) had finished
            job = log.JobHosts.FromString(change.value)  # its hosts only: a session reads the job itself
            for host in dict.fromkeys([*hosts_of(job), *left.get(change.key, ())]):
                routed.jobs.setdefault(host, []).append(job)
    return routed


def hosts_of(job: api.Job | log.JobHosts) -> list[str]:
    """The hosts of the job's allocation, its first host (which runs the command) first: those of
    feasibility.allocation_of, without making its parts (every changed job of every entry is routed)."""
    if job.allocation:
        return [part.host for part in job.allocation]
    return [job.host] if job.host else []


class SessionOver(Exception):
    """This stream should end; the worker re-joins and everything is resent."""


@dataclass
class WorkerSession:
    state: StateReader
    name: str
    generation: int
    full_look_s: float = RESEND_S
    credential: Callable[[api.Job], str] = lambda job: ""  # the allocation's (job_credential.py)
    parts: bool = True  # the worker keeps parts of jobs whose first host is another (its join says so)
    outbox: list[api.ControllerMessage] = field(default_factory=list)
    run_sent: set[Key] = field(default_factory=set)
    live: set[Key] = field(default_factory=set)  # instances the worker runs, as far as we know
    stopped: dict[Key, bool | None] = field(default_factory=dict)
    kill_sent: set[Key] = field(default_factory=set)
    checkpointed: dict[Key, int] = field(default_factory=dict)  # the checkpoint count last sent
    inbox: list[tuple[int, int]] = field(default_factory=list)  # (revision, id of a job it changed)
    recheck: bool = False  # the host record changed: is this connection still current?
    full: bool = True  # derive everything from the state next time
    derived_at: int = 0  # the revision the last full derivation read: older changes say nothing new
    last_full_s: float = float("-inf")

    def changed(self, revision: int, jobs: list[log.JobHosts], host_record: bool) -> None:
        self.inbox += [(revision, job.id) for job in jobs]
        self.recheck = self.recheck or host_record

    def changed_unknown(self) -> None:
        self.full = True

    def due(self, now_s: float) -> bool:
        return self.full or bool(self.inbox) or self.recheck or now_s - self.last_full_s >= self.full_look_s

    def take(self) -> list[api.ControllerMessage]:
        out, self.outbox = self.outbox, []
        return out

    def step(self, now_s: float) -> None:
        """One look: at everything (at first, and every full_look_s in any case, a
        safety net that a busy host's changes must not put off), else at the
        changes routed since the last look. Raises SessionOver."""
        if self.full or now_s - self.last_full_s >= self.full_look_s:
            self.full, self.inbox, self.recheck = False, [], False
            self._derive(now_s)
            return
        items, self.inbox = self.inbox, []
        # The jobs that changed since the derivation (which saw the older changes), each
        # as committed now: a routed record may be older than what happened since (an
        # instance's end relayed meanwhile), and a RunJob from it would restate an attempt
        # that ended or was requeued.
        fresh = list(dict.fromkeys(job_id for revision, job_id in items if revision > self.derived_at))
        if not (self.recheck or fresh):
            return
        with self.state.read() as tables:
            if self.recheck:
                self.recheck = False
                self._check_host(fsm.read_host(tables, self.name))
            jobs = [fsm.read_job(tables, job_id) for job_id in fresh]
        for job in jobs:
            if job is not None:  # None: cleaned out of the live table since (it had finished)
                self._consider(job)

    def restated(self, reports: list[api.JobReport]) -> list[bool]:
        """Which of these reports only restate what committed state holds: a start the worker
        says again (`again`: after a re-join, or answering a repeated RunJob) of an instance the
        state has running on this host, with the same pid and start time, on this connection's
        generation. Its entry would change nothing: the leader acknowledges it at once
        (`relayed` with OK). A failover re-joins every worker, and each restates every instance
        it runs twice (its re-join, the new leader's RunJob): for 500 hosts of 40 jobs, 40,000
        reports that every replica applied as no-ops while the scheduler's first batch waited.
        A worker that says `again` of anything else is relayed as before."""
        said_again = [_said_again(report) for report in reports]
        if not any(said_again):
            return said_again
        with self.state.read() as tables:
            host = fsm.read_host(tables, self.name)
            if host is None or host.generation != self.generation or host.status != api.HOST_OK:
                return [False] * len(reports)
            jobs = {report.job_id: fsm.read_job(tables, report.job_id)
                    for report, again in zip(reports, said_again, strict=True) if again}
        return [again and _holds(jobs.get(report.job_id), self.name, report)
                for report, again in zip(reports, said_again, strict=True)]

    def relayed(self, reports: list[api.JobReport], results: list[log.Result | None]) -> bool:
        """The outcome of this connection's reports; False: end the stream (outcome unknown:
        the worker re-joins and sends every unacknowledged report again)."""
        for report, result in zip(reports, results, strict=True):
            if result is None:
                return False
            key, kind = (report.job_id, report.attempt), report.WhichOneof("body") or ""
            if kind == "started":
                self.live.add(key)
                if result.code != log.OK:  # an instance committed state does not want
                    self._kill(key)
            elif kind not in ("usage_now", "suspended"):  # these say nothing of the instance's end
                self._forget(key)
            self.outbox.append(api.ControllerMessage(ack=api.ReportAck(
                job_id=report.job_id, attempt=report.attempt, kind=kind)))
        return True

    def _derive(self, now_s: float) -> None:
        with self.state.read() as tables:
            self.derived_at = fsm.read_meta(tables).applied_index
            host = fsm.read_host(tables, self.name)
            jobs = [fsm.read_job(tables, job_id) for job_id in fsm.host_job_ids(tables, self.name)]
        self.last_full_s = now_s
        self._check_host(host)
        wanted = {(j.id, j.attempt): j for j in jobs
                  if j is not None and self._here(j) and j.state in fsm.RUNNING}
        for job in wanted.values():
            self._want(job)
        for key in sorted(self.live - wanted.keys()):
            self._kill(key)

    def _check_host(self, host: api.Host | None) -> None:
        if host is None or host.generation != self.generation or host.status != api.HOST_OK:
            # Marked UNAVAIL (or superseded) while this stream lives: end it so
            # the worker re-joins, which sets the host OK and re-reports its jobs.
            raise SessionOver(f"host {self.name} generation {self.generation} is no longer current")

    def _consider(self, job: api.Job) -> None:
        """One changed job: run it, signal it, or kill an instance no longer wanted. On a host of a
        parallel job's allocation that is not its first, the instance is the job's part there (its
        tasks): it is killed once the job is over, and forgotten when its end is reported."""
        first = job.host == self.name
        here = self._here(job)
        wanted = (job.id, job.attempt) if here and job.state in fsm.RUNNING else None
        if wanted is not None:
            self._want(job)
        # Instances of this job, oldest attempt first; whichever is cheaper to look through.
        keys = [(job.id, a) for a in range(job.attempt + 1)] if job.attempt < len(self.live) \
            else sorted(k for k in self.live if k[0] == job.id)
        for key in keys:
            if key not in self.live or key == wanted:
                continue
            if first and key == (job.id, job.attempt) and job.state in fsm.FINISHED:
                self._forget(key)  # it ended here: its finished report made it so
            else:
                self._kill(key)

    def _here(self, job: api.Job) -> bool:
        """Whether this host runs the job's command or, if its worker keeps parts, a part of it (an
        older worker given a part's RunJob would run the whole command)."""
        return job.host == self.name or (self.parts and self.name in hosts_of(job))

    def _forget(self, key: Key) -> None:
        """The instance ended and committed state knows it: nothing more to send about it."""
        self.live.discard(key)
        self.run_sent.discard(key)
        self.stopped.pop(key, None)
        self.kill_sent.discard(key)
        self.checkpointed.pop(key, None)

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
            run = api.RunJob(job=job, credential=self.credential(job))
            self.outbox.append(api.ControllerMessage(run=run))
        if want_stopped != self.stopped.get(key):
            self.stopped[key] = want_stopped
            self._signal(key, api.SIGNAL_STOP if want_stopped else api.SIGNAL_CONT, state == api.SSUSP)
        if job.kill_requested:
            self._kill(key)
        elif job.checkpoints and job.spec.checkpoint_signal and \
                self.checkpointed.get(key, 0) < job.checkpoints:
            # Sent again on a new connection or leader: the worker signals each checkpoint number once.
            self.checkpointed[key] = job.checkpoints
            self.outbox.append(api.ControllerMessage(signal=api.SignalJob(
                job_id=key[0], attempt=key[1], kind=api.SIGNAL_CHECKPOINT, signal=job.spec.checkpoint_signal,
                checkpoint=job.checkpoints)))

    def _kill(self, key: Key) -> None:
        if key not in self.kill_sent:
            self.kill_sent.add(key)
            self._signal(key, api.SIGNAL_KILL)

    def _signal(self, key: Key, kind: api.SignalKind, preempted: bool = False) -> None:
        self.outbox.append(api.ControllerMessage(signal=api.SignalJob(job_id=key[0], attempt=key[1],
                                                                      kind=kind, preempted=preempted)))


def _said_again(report: api.JobReport) -> bool:
    return report.WhichOneof("body") == "started" and report.started.again and not report.started.part


def _holds(job: api.Job | None, host: str, report: api.JobReport) -> bool:
    """The committed record already says what this start of this host's instance says."""
    return job is not None and job.host == host and job.attempt == report.attempt \
        and holds_start(job, report.started)
