"""The scheduling core: schedule(view, now_ms, config) -> decisions (F3).

Theory of operation. A pass orders the pending jobs with the pickers
(picker.py), then places each on one host with enough free slots, counting
the slots it has already handed out in this pass, so one pass never
over-commits a host. Host choice sits behind `choose_host` (most free slots
first, then name), to be replaced by the allocation language later. Every job
the pass does not dispatch gets a pending reason (G5), and a PEND decision is
made only when that reason differs from the job's committed one, so a busy
cluster does not churn the log. Pure: no I/O, no clock (the time is passed
in), no threads; the same inputs give the same decisions.

Decisions are proposals. The controller checks each against committed state
when it applies the batch (the commit barrier) and rejects what no longer
fits; the scheduler learns the outcome from its view.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.picker import Fcfs, Picker, ordered
from xce.v1 import api_pb2 as api

Reason = tuple["api.PendingReason", str]  # (code, words), as `bjobs -p` shows them

REASON_NO_HOSTS: Reason = (api.PEND_NO_HOSTS, "no hosts have joined")
REASON_HOSTS_UNAVAILABLE: Reason = (api.PEND_HOSTS_UNAVAILABLE, "all hosts are unavailable")
REASON_NO_SLOTS: Reason = (api.PEND_NO_FREE_SLOTS, "no host with enough free slots")
REASON_TOO_BIG: Reason = (api.PEND_NO_HOST_MATCHES, "no host has that many slots")
REASON_QUEUE_INACTIVE: Reason = (api.PEND_QUEUE_INACTIVE, "the queue is inactive")


@dataclass(frozen=True)
class Dispatch:
    job_id: int
    attempt: int
    host: str


@dataclass(frozen=True)
class Pend:
    job_id: int
    reason: str
    code: api.PendingReason = api.PENDING_REASON_UNSPECIFIED


Decision = Dispatch | Pend


@dataclass
class CoreConfig:
    picker: Picker = field(default_factory=Fcfs)
    queue_pickers: Mapping[str, Picker] = field(default_factory=dict)
    max_dispatches: int = 4000  # per pass: one entry of ~100 KB, applied in ~0.05 s


def schedule(jobs: Sequence[api.Job], queues: Sequence[api.Queue], hosts: Sequence[api.Host],
             now_ms: int, config: CoreConfig) -> list[Decision]:
    queue_map = {q.name: q for q in queues}
    free = FreeSlots({h.spec.name: h.spec.slots - h.slots_used for h in hosts if h.status == api.HOST_OK})
    largest = max((h.spec.slots for h in hosts if h.status == api.HOST_OK), default=0)
    pending = [j for j in jobs if j.state == api.PEND]
    decisions: list[Decision] = []
    dispatched = 0
    for job in ordered(pending, queue_map, config.picker, config.queue_pickers):
        reason = _blocker(job, queue_map.get(job.spec.queue), hosts, largest)
        host = None
        if reason is None and dispatched < config.max_dispatches:
            host = free.take(job.spec.slots)
            reason = None if host is not None else REASON_NO_SLOTS
        if host is not None:
            dispatched += 1
            decisions.append(Dispatch(job.id, job.attempt, host))
        elif reason is not None and reason != (job.pending_code, job.pending_reason):
            decisions.append(Pend(job.id, reason[1], reason[0]))
    return decisions


class FreeSlots:
    """Host choice for one-host jobs: the OK host with the most free slots
    (ties by name), taken from a heap, so a pass is O(jobs log hosts)."""

    def __init__(self, free: Mapping[str, int]) -> None:
        self._heap = [(-n, name) for name, n in free.items()]
        heapq.heapify(self._heap)

    def take(self, slots: int) -> str | None:
        """The chosen host, its slots now taken; None if no host has that many free."""
        if not self._heap or -self._heap[0][0] < slots:
            return None  # the top has the most free slots: if it cannot, none can
        negative_free, name = heapq.heappop(self._heap)
        heapq.heappush(self._heap, (negative_free + slots, name))
        return name


def _blocker(job: api.Job, queue: api.Queue | None, hosts: Sequence[api.Host], largest: int) -> Reason | None:
    # A closed queue refuses new jobs but still dispatches its pending ones;
    # an inactive one dispatches nothing (LSF's qclose and qinact).
    if queue is not None and queue.inactive:
        return REASON_QUEUE_INACTIVE
    if not hosts:
        return REASON_NO_HOSTS
    if all(h.status != api.HOST_OK for h in hosts):
        return REASON_HOSTS_UNAVAILABLE
    if job.spec.slots > largest:
        return REASON_TOO_BIG
    return None
