"""Live counts and the last hour's series (`GET /xce/v1/stats`, the dashboard's overview). Pure:
records in, numbers out.

Theory of operation. The gateway's event hub follows the Sync stream (a snapshot, then every event);
gateway/live_jobs.py folds each job and host record into a `JobView` or a `HostView` and keeps a
`Tally`: jobs per (queue, user, state) and pending jobs per (queue, user, reason), changed by each
record's old and new contribution, so that no answer walks every job. Once a minute it takes a
`Sample` of the tally (pending and running per queue and user, slots used and up) into a ring of
SERIES_STEPS. A caller's answer is computed from these for what its key may read (`Viewer`): only its
own jobs with private_jobs, no jobs without jobs.read, hosts and slots only with cluster.read.

Counting follows ListJobs and the controllers' pending counts: an array's record counts its elements
(ArrayState.counts, jobs and positions together) and an element that became a job is not counted
again; pending reasons are each job's own, and an array's positions not yet jobs wait as
ARRAY_WINDOW (or PEND_JOB_HELD, when held).

At start there is no sample. `reconstruct` estimates the hour before from the snapshot: a job
pending from its submit to its start, running from its start to its end. It cannot see jobs already
cleaned from the live tables, requeues or arrays' past, so the answer says until when points are
estimates (`estimated_until_ms`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xce.v1 import api_pb2 as api

PENDING = frozenset({api.PEND, api.PSUSP})
STARTED = frozenset({api.RUN, api.USUSP, api.SSUSP})
STEP_MS = 60_000          # one sample a minute
SERIES_STEPS = 60         # the last hour
MAX_PAIRS = 4096          # (queue, user) pairs a sample keeps; the rest are folded per queue
OTHERS = "\0others"       # the user of a folded pair: seen only by callers who see every job
ARRAY_WINDOW = "ARRAY_WINDOW"
STATE_NAMES = tuple(api.JobState.Name(n) for n in range(max(api.JobState.values()) + 1))


@dataclass(frozen=True, slots=True)
class JobView:
    """What the counts need of a job record."""

    id: int
    user: str
    queue: str
    state: int
    reason: str               # its pending code's name, while pending
    slots: int
    submit_ms: int
    start_ms: int
    end_ms: int
    element: bool             # an array's element: counted by its array's record
    counts: tuple[int, ...] = ()                  # an array's record: its elements per state
    waiting: tuple[tuple[int, int], ...] = ()     # an array's record: (state, n) of positions not yet jobs


@dataclass(frozen=True, slots=True)
class HostView:
    name: str
    status: str               # HOST_OK, HOST_UNAVAIL
    closed: bool
    slots: int
    used: int
    load: float               # its 1-minute load average (r1m), -1 when it has not said


@dataclass(frozen=True)
class Viewer:
    """A caller, as the controllers answered WhoAmI for its key."""

    name: str
    jobs: bool                # jobs.read
    every_job: bool           # every user's jobs, or only its own (private_jobs)
    cluster: bool             # cluster.read: hosts and slots

    def sees(self, user: str) -> bool:
        return self.jobs and (self.every_job or user == self.name)


@dataclass(frozen=True)
class Sample:
    time_ms: int
    jobs: Mapping[tuple[str, str], tuple[int, int]]   # (queue, user) -> (pending, running)
    slots_used: int
    slots_total: int


def job_view(job: api.Job) -> JobView:
    array = job.spec.HasField("array")
    waiting: Counter[int] = Counter()
    if array:
        for run in job.array.runs:
            waiting[run.state] += run.last - run.first + 1
    return JobView(job.id, job.spec.user, job.spec.queue, job.state,
                   api.PendingReason.Name(job.pending_code) if job.state in PENDING else "",
                   job.spec.slots or 1, job.submit_time_ms, job.start_time_ms, job.end_time_ms,
                   bool(job.array_id), tuple(job.array.counts) if array else (),
                   tuple(sorted(waiting.items())))


def host_view(host: api.Host) -> HostView:
    return HostView(host.spec.name, api.HostStatus.Name(host.status), host.closed, host.spec.slots,
                    host.slots_used, float(host.load.get("r1m", -1.0)))


def is_array(view: JobView) -> bool:
    return bool(view.counts) or bool(view.waiting)


def contributions(view: JobView) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(its (state, n) counts, its (pending reason, n) counts)."""
    states: list[tuple[str, int]] = []
    reasons: list[tuple[str, int]] = []
    if is_array(view):
        states = [(STATE_NAMES[s], n) for s, n in enumerate(view.counts) if n and s < len(STATE_NAMES)]
        reasons = [("PEND_JOB_HELD" if s == api.PSUSP else ARRAY_WINDOW, n) for s, n in view.waiting
                   if s in PENDING and n]
        return states, reasons
    if not view.element:
        states.append((STATE_NAMES[view.state], 1))
    if view.state in PENDING:
        reasons.append((view.reason, 1))
    return states, reasons


class Tally:
    """Jobs per (queue, user, state) and pending ones per (queue, user, reason), kept as records change."""

    def __init__(self) -> None:
        self.states: Counter[tuple[str, str, str]] = Counter()
        self.reasons: Counter[tuple[str, str, str]] = Counter()

    def change(self, before: JobView | None, after: JobView | None) -> None:
        for view, sign in ((before, -1), (after, 1)):
            if view is None:
                continue
            states, reasons = contributions(view)
            for name, n in states:
                _bump(self.states, (view.queue, view.user, name), sign * n)
            for name, n in reasons:
                _bump(self.reasons, (view.queue, view.user, name), sign * n)

    def sample(self, time_ms: int, hosts: Iterable[HostView]) -> Sample:
        pairs: Counter[tuple[str, str]] = Counter()
        running: Counter[tuple[str, str]] = Counter()
        for (queue, user, state), n in self.states.items():
            if state in PENDING_NAMES:
                pairs[(queue, user)] += n
            elif state in STARTED_NAMES:
                running[(queue, user)] += n
        jobs = {pair: (pairs[pair], running[pair]) for pair in pairs.keys() | running.keys()}
        used, total = slots(hosts)
        return Sample(time_ms, fold(jobs), used, total)


PENDING_NAMES = frozenset(STATE_NAMES[s] for s in PENDING)
STARTED_NAMES = frozenset(STATE_NAMES[s] for s in STARTED)


def _bump(counter: Counter[tuple[str, str, str]], key: tuple[str, str, str], n: int) -> None:
    value = counter[key] + n
    if value:
        counter[key] = value
    else:
        del counter[key]


def fold(jobs: dict[tuple[str, str], tuple[int, int]]) -> dict[tuple[str, str], tuple[int, int]]:
    """At most MAX_PAIRS pairs: the smallest are summed per queue under OTHERS."""
    if len(jobs) <= MAX_PAIRS:
        return jobs
    ranked = sorted(jobs.items(), key=lambda item: -(item[1][0] + item[1][1]))
    kept = dict(ranked[:MAX_PAIRS - 1])
    for (queue, _), (pending, run) in ranked[MAX_PAIRS - 1:]:
        before = kept.get((queue, OTHERS), (0, 0))
        kept[(queue, OTHERS)] = (before[0] + pending, before[1] + run)
    return kept


def slots(hosts: Iterable[HostView]) -> tuple[int, int]:
    """(slots used, slots) of the hosts that are up."""
    up = [h for h in hosts if h.status == "HOST_OK"]
    return sum(h.used for h in up), sum(h.slots for h in up)


def minutes(now_ms: int) -> list[int]:
    """The last SERIES_STEPS minute marks, oldest first, the last at or before `now_ms`."""
    last = now_ms // STEP_MS * STEP_MS
    return [last - (SERIES_STEPS - 1 - k) * STEP_MS for k in range(SERIES_STEPS)]


def reconstruct(jobs: Iterable[JobView], hosts: Sequence[HostView], now_ms: int) -> list[Sample]:
    """Estimates for the minute marks before `now_ms`, from each live job's submit, start and end."""
    marks = minutes(now_ms)[:-1]
    if not marks:
        return []
    first, steps = marks[0], len(marks)
    pending: dict[tuple[str, str], list[int]] = {}
    running: dict[tuple[str, str], list[int]] = {}
    used = [0] * (steps + 1)

    def cover(series: list[int], begin_ms: int, end_ms: int, n: int) -> None:
        """Add n at the marks in [begin_ms, end_ms) (a difference array: one add at each end)."""
        low = max(0, -(-(begin_ms - first) // STEP_MS))
        high = min(steps, -(-(end_ms - first) // STEP_MS))
        if low < high:
            series[low] += n
            series[high] -= n

    for job in jobs:
        pair = (job.queue, job.user)
        if is_array(job):
            waiting = sum(n for s, n in job.waiting if s in PENDING)
            cover(pending.setdefault(pair, [0] * (steps + 1)), job.submit_ms, now_ms, waiting)
            continue
        ended = job.end_ms if job.end_ms else now_ms + 1
        if job.state in PENDING or not job.start_ms:
            cover(pending.setdefault(pair, [0] * (steps + 1)), job.submit_ms,
                  ended if job.state not in PENDING else now_ms + 1, 1)
            continue
        cover(pending.setdefault(pair, [0] * (steps + 1)), job.submit_ms, job.start_ms, 1)
        cover(running.setdefault(pair, [0] * (steps + 1)), job.start_ms, ended, 1)
        cover(used, job.start_ms, ended, job.slots)
    _, total = slots(hosts)
    pending_at = {pair: _running_sum(d) for pair, d in pending.items()}
    running_at = {pair: _running_sum(d) for pair, d in running.items()}
    used_at = _running_sum(used)
    samples = []
    for k, mark in enumerate(marks):
        pairs = {pair: (pending_at.get(pair, [0] * steps)[k], running_at.get(pair, [0] * steps)[k])
                 for pair in pending_at.keys() | running_at.keys()}
        pairs = {pair: value for pair, value in pairs.items() if value != (0, 0)}
        samples.append(Sample(mark, fold(pairs), min(used_at[k], total), total))
    return samples


def _running_sum(deltas: list[int]) -> list[int]:
    out, value = [], 0
    for delta in deltas[:-1]:
        value += delta
        out.append(value)
    return out


def answer(viewer: Viewer, tally: Tally, hosts: Sequence[HostView], samples: Sequence[Sample],
           now_ms: int, estimated_until_ms: int) -> dict[str, Any]:
    """The caller's counts, host grid and series (JSON); what its key may not read is left out."""
    by_queue: dict[str, dict[str, int]] = {}
    by_state: Counter[str] = Counter()
    for (queue, user, state), n in tally.states.items():
        if viewer.sees(user):
            row = by_queue.setdefault(queue, {})
            row[state] = row.get(state, 0) + n
            by_state[state] += n
    pending: dict[str, dict[str, int]] = {}
    for (queue, user, reason), n in tally.reasons.items():
        if viewer.sees(user):
            row = pending.setdefault(queue, {})
            row[reason] = row.get(reason, 0) + n
    out: dict[str, Any] = {
        "as_of_ms": str(now_ms),
        "jobs_visible": "none" if not viewer.jobs else "all" if viewer.every_job else "own",
        "jobs": {"total": sum(by_state.values()), "by_state": dict(sorted(by_state.items())),
                 "by_queue": {q: dict(sorted(row.items())) for q, row in sorted(by_queue.items())}},
        "pending": {q: dict(sorted(row.items())) for q, row in sorted(pending.items())},
        "series": series(viewer, samples, now_ms, estimated_until_ms),
    }
    if viewer.cluster:
        used, total = slots(hosts)
        status: Counter[str] = Counter(h.status for h in hosts)
        status["closed"] = sum(1 for h in hosts if h.closed)
        out["slots"] = {"used": used, "total": total}
        out["hosts"] = {"by_status": dict(sorted(status.items())),
                        "grid": [[h.name, h.status, h.closed, h.slots, h.used, h.load]
                                 for h in sorted(hosts, key=lambda h: h.name)]}
    return out


def series(viewer: Viewer, samples: Sequence[Sample], now_ms: int, estimated_until_ms: int) -> dict[str, Any]:
    """Per minute mark of the last hour: pending and running per queue, slot utilization (cluster.read);
    null where no sample was taken (the gateway was not following the stream then)."""
    marks = minutes(now_ms)
    at = {s.time_ms: s for s in samples}
    queues = sorted({queue for s in samples for (queue, user) in s.jobs if viewer.sees(user)})
    pending = {q: [None if m not in at else 0 for m in marks] for q in queues}
    running = {q: [None if m not in at else 0 for m in marks] for q in queues}
    for k, mark in enumerate(marks):
        sample = at.get(mark)
        if sample is None:
            continue
        for (queue, user), (p, r) in sample.jobs.items():
            if viewer.sees(user):  # (OTHERS: only by those who see every job)
                pending[queue][k] = (pending[queue][k] or 0) + p
                running[queue][k] = (running[queue][k] or 0) + r
    out: dict[str, Any] = {"step_s": STEP_MS // 1000, "times_ms": [str(m) for m in marks],
                           "estimated_until_ms": str(estimated_until_ms), "pending": pending,
                           "running": running}
    if viewer.cluster:
        out["slots_used"] = [at[m].slots_used if m in at else None for m in marks]
        out["slots_total"] = [at[m].slots_total if m in at else None for m in marks]
    return out
