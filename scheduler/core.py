"""The scheduling core: one pass over a view -> decisions (F3).

Theory of operation. A pass orders the pending jobs with the pickers
(picker.py), then places each on one host, counting what it has already
handed out in this pass (slots and cluster-wide counters), so one pass never
over-commits a host or passes a limit. What "fits" means is
xce/feasibility.py, the same module apply re-checks every DISPATCH with:
the job-level checks (queue active, limits) run first; the host comes from
an index (`FreeSlots`: the available host with most free slots, then name)
and is verified with the host checks; a job no host takes is explained by
running the host checks on every host (per-reason counts, cached per job
size for the pass). Every job the pass does not dispatch gets a pending
reason (G5), and a PEND decision is made only when that reason differs from
the job's committed one, so a busy cluster does not churn the log.

Pure: no I/O, no clock, no threads; the same inputs give the same decisions.
What happens across passes (decisions in flight, hosts cooling down after a
refusal) is the planner's (planner.py).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.picker import Fcfs, Picker, ordered
from xce import feasibility
from xce.invariant import InvariantViolated
from xce.v1 import api_pb2 as api

Reason = tuple[int, str]  # (code: api.PendingReason, words), as `bjobs -p` shows them

REASON_NO_HOSTS: Reason = feasibility.REASON_NO_HOSTS.key()
REASON_HOSTS_UNAVAILABLE: Reason = feasibility.REASON_HOSTS_UNAVAILABLE.key()
REASON_NO_SLOTS: Reason = feasibility.REASON_NO_SLOTS.key()
REASON_TOO_BIG: Reason = feasibility.REASON_TOO_BIG.key()
REASON_QUEUE_INACTIVE: Reason = feasibility.REASON_QUEUE_INACTIVE.key()


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


_UNSEEN = feasibility.Reason(api.PENDING_REASON_UNSPECIFIED, "", "unseen")  # a cache miss


@dataclass
class PassResult:
    decisions: list[Decision]
    waiting: Counter[int] = field(default_factory=Counter)  # jobs not dispatched, per pending reason code
    refusals: Counter[str] = field(default_factory=Counter)  # hosts refused, per check, over explanations


def schedule(jobs: Sequence[api.Job], queues: Sequence[api.Queue], hosts: Sequence[api.Host],
             now_ms: int, config: CoreConfig, counters: Mapping[str, int] | None = None) -> list[Decision]:
    return run_pass(jobs, queues, hosts, config, counters or {}).decisions


def run_pass(jobs: Sequence[api.Job], queues: Sequence[api.Queue], hosts: Sequence[api.Host],
             config: CoreConfig, counters: Mapping[str, int]) -> PassResult:
    queue_map = {q.name: q for q in queues}
    usage = PassUsage(hosts, queue_map, counters)
    free = FreeSlots({h.spec.name: h.spec.slots - h.slots_used for h in hosts if h.status == api.HOST_OK})
    by_queue: dict[str, feasibility.Reason | None] = {}  # the queue checks, once per queue (A4)
    explained: dict[int, feasibility.Explanation] = {}  # by job size: free slots only shrink in a pass
    limited = bool(usage.limits())
    host_refusal, limit_refusal = feasibility.host_refusal, feasibility.limit_refusal
    state = feasibility.HostState
    hosts_now = usage.states  # the pass updates it in place as it places jobs
    result = PassResult([])
    decisions = result.decisions
    dispatched = 0
    # An array's record is never dispatched: its elements are jobs of their own (fsm/arrays.py).
    for job in ordered([j for j in jobs if j.state == api.PEND and not j.spec.HasField("array")], queue_map,
                       config.picker, config.queue_pickers):
        spec = job.spec
        slots = spec.slots
        queue = spec.queue
        reason = by_queue.get(queue, _UNSEEN)
        if reason is _UNSEEN:
            reason = by_queue[queue] = feasibility.queue_refusal(queue, usage)
        bounded = limited or job.array_limit
        if reason is None and bounded:
            reason = limit_refusal(job, usage)
        if reason is None and dispatched < config.max_dispatches:
            host = free.take(slots)
            if host is not None:
                total, available, used = now = hosts_now[host]
                refusal = host_refusal(host, now, slots)
                if refusal is not None:  # the index and the definition disagree: a bug
                    raise InvariantViolated(f"the host index chose {host} for job {job.id}, which does "
                                            f"not fit there: {refusal}")
                hosts_now[host] = state(total, available, used + slots)
                if bounded:
                    usage.hold(job)
                dispatched += 1
                decisions.append(Dispatch(job.id, job.attempt, host))
                continue
            explanation = explained.get(slots)
            if explanation is None:
                explanation = explained[slots] = feasibility.explain(job, usage)
                result.refusals.update(explanation.counts)
            reason = explanation.reason
        if reason is None:
            continue  # past this pass's dispatch limit: the next pass looks again
        result.waiting[reason.code] += 1
        if reason.code != job.pending_code or reason.words != job.pending_reason:
            decisions.append(Pend(job.id, reason.words, reason.code))
    return result


class PassUsage:
    """feasibility.Usage as the view shows it, plus this pass's own placements."""

    def __init__(self, hosts: Sequence[api.Host], queues: Mapping[str, api.Queue],
                 counters: Mapping[str, int]) -> None:
        self.states = {h.spec.name: feasibility.host_state(h) for h in hosts}
        self._queues = queues
        self._counters = dict(counters)
        self._limits = feasibility.limits_of(queues.values())

    def host(self, name: str) -> feasibility.HostState | None:
        return self.states.get(name)

    def hosts(self) -> Iterable[tuple[str, feasibility.HostState]]:
        return sorted(self.states.items())

    def queue(self, name: str) -> api.Queue | None:
        return self._queues.get(name)

    def counter(self, name: str) -> int:
        return self._counters.get(name, 0)

    def limits(self) -> Mapping[str, int]:
        return self._limits

    def hold(self, job: api.Job) -> None:
        """The counters a placed job holds, counted for the rest of the pass (needed only
        where some bound exists)."""
        for name, amount in feasibility.demands(job).items():
            self._counters[name] = self._counters.get(name, 0) + amount


class FreeSlots:
    """The host index for one-host jobs: the available host with the most free
    slots (ties by name), from a heap, so a pass is O(jobs log hosts)."""

    def __init__(self, free: Mapping[str, int]) -> None:
        self._heap = [(-n, name) for name, n in free.items()]
        heapq.heapify(self._heap)

    def take(self, slots: int) -> str | None:
        """The host with the most free slots, its slots now taken; None if no host has
        that many free (the top has the most). The caller verifies the pick."""
        heap = self._heap
        if not heap or -heap[0][0] < slots:
            return None
        negative_free, name = heap[0]
        heapq.heapreplace(heap, (negative_free + slots, name))
        return name
