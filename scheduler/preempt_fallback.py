"""Preemption as the pass's fallback, and the resumes of the jobs it suspended.

Theory of operation. A job of a preemptive queue that finds no free slots
(and only slots: a license short cluster-wide is not a host's to give) may
take one host from running jobs of preemptable queues: the victims and the
host are scheduler/preemption.py's choice, at most `max_preemptions` a
pass. Until its victims give back what they hold, the preemptor waits
(PREEMPTION_PENDING); what they gave back is kept for it from the jobs
before it in the pass (another preemptor would otherwise take it, and this
one preempt again). A suspended victim whose slots were given back resumes
when they are free again, first in its queue. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from scheduler import preemption
from scheduler.decisions import Dispatch, Preempt
from scheduler.host_index import HostIndex
from scheduler.pass_usage import PassUsage
from xce.rules import feasibility
from xce.v1 import api_pb2 as api

# Only a lack of slots preempts: a license short cluster-wide (NO_FREE_RESOURCES) is not a host's to
# give, and preempting for it would stop one victim after another, every pass.
_PREEMPTS_FOR = frozenset({api.PEND_NO_FREE_SLOTS})
PREEMPTION_PENDING = feasibility.Reason(api.PEND_PREEMPTION_PENDING, "preemption pending: waiting for the "
                                        "jobs it preempted to give back their slots", "preempting")


class PreemptFallback:
    """The pass's preemptions: the running jobs by host, what is preempted already."""

    def __init__(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue], now_ms: int,
                 max_preemptions: int) -> None:
        self.queues = queues
        self.now_ms = now_ms
        self.max_preemptions = max_preemptions
        self.by_host: dict[str, list[api.Job]] = {}  # the running jobs of preemptable queues
        self.holding: dict[int, int] = Counter()  # preemptor -> victims not yet given back
        self.freed: dict[int, list[api.HostAllocation]] = {}  # preemptor -> what its victims gave back
        preemptable = {name for name, queue in queues.items() if queue.preemptable}
        priority = {name: queue.priority for name, queue in queues.items()}
        bounds: dict[str, preemption.Bound] = {}
        run, ssusp, unknown = api.RUN, api.SSUSP, api.UNKWN
        for job in jobs:
            state = job.state
            if state != run and state != ssusp and state != unknown:
                continue
            by = job.preempted_by
            if by:  # (a victim whose host went silent still holds what it held: UNKWN)
                if not job.released:
                    self.holding[by] += 1
                elif state == ssusp:
                    self.freed.setdefault(by, []).extend(job.released)
            elif state == run and (queue := (spec := job.spec).queue) in preemptable:  # a possible victim
                allocation = job.allocation
                if len(allocation) <= 1:
                    host = allocation[0].host if allocation else job.host
                    self.by_host.setdefault(host, []).append(job)
                    # rules/preemption.rank and feasibility.held_slots of a job on one host, read here once
                    # (75,000 running jobs a pass in the arbitration bench)
                    low = (priority[queue], spec.priority)
                    most = allocation[0].slots if allocation else spec.slots
                    known = bounds.get(host)
                    bounds[host] = (low, most) if known is None else (min(known[0], low), max(known[1], most))
        self.bounds = bounds  # preemption.Candidates.bound's, made in this same look at the running jobs
        self.sent: list[Preempt] = []
        self.candidates: preemption.Candidates | None = None  # made on first need
        self.kept: dict[int, list[api.HostAllocation]] = {}  # preemptor -> what is kept for it until its turn

    def keep(self, waiting: Sequence[api.Job], usage: PassUsage, index: HostIndex) -> None:
        """What a pending preemptor's victims gave back is its own: kept from the jobs before it in the
        pass (another preemptor among them would otherwise take it, and this one preempt again)."""
        for job in waiting:
            freed = self.freed.get(job.id)
            if freed:
                self.kept[job.id] = usage.reserve(freed, index)

    def instead(self, job: api.Job, need: feasibility.Need, slots: int, reason: feasibility.Reason,
                kept: list[api.HostAllocation] | None, usage: PassUsage,
                index: HostIndex) -> feasibility.Reason | Preempt:
        """What the job that found no room for `reason` does: a preemption, or the reason it waits."""
        if reason.code not in _PREEMPTS_FOR:
            return reason
        if self.waits(job):
            if kept is None:
                usage.reserve(self.freed.get(job.id, ()), index)  # kept for it, all the pass
            return PREEMPTION_PENDING
        if len(self.sent) < self.max_preemptions:
            choice = self.choose(job, need, slots, usage)
            if choice is not None:
                return choice
        return reason

    def waits(self, job: api.Job) -> bool:
        """It preempted jobs that still hold their slots."""
        return self.holding.get(job.id, 0) > 0

    def choose(self, job: api.Job, need: feasibility.Need, slots: int, usage: PassUsage) -> Preempt | None:
        if need.reservation or not preemption.preemptive(self.queues.get(job.spec.queue)):
            return None  # (a job of a reservation runs in its slots alone)
        if self.candidates is None:
            self.candidates = preemption.Candidates(self.by_host, self.queues, self.now_ms, self.bounds)
        choice = preemption.choose(job, need, slots, usage.states, self.candidates)
        if choice is None:
            return None
        self.candidates.taken(choice.host, choice.victims)
        decision = Preempt(job.id, job.attempt, tuple((v.id, v.attempt) for v in choice.victims))
        self.sent.append(decision)
        return decision


def resume(job: api.Job, usage: PassUsage, index: HostIndex) -> Dispatch | None:
    """A preempted job whose slots were given back takes them again, if they are free: its dispatch."""
    if not usage.take_back(job, index):
        return None
    single = not job.allocation
    return Dispatch(job.id, job.attempt, job.host, () if single else tuple(
        (part.host, part.slots) for part in job.allocation))


def with_resumes(waiting: list[api.Job], suspended: Sequence[api.Job],
                 queues: Mapping[str, api.Queue]) -> list[api.Job]:
    """The pass's order with the suspended victims (of `suspended`) that gave back their slots first in
    their queue: after the pending jobs of queues above theirs (which might only preempt them again)."""
    resumable = sorted((j for j in suspended if j.released and not j.kill_requested
                        and not j.requeue_requested),
                       key=lambda j: (-j.spec.priority, j.start_time_ms, j.id))
    if not resumable:
        return waiting

    def rank(job: api.Job) -> tuple[int, str]:
        queue = queues.get(job.spec.queue)
        return (-(queue.priority if queue else 0), job.spec.queue)

    return sorted([*resumable, *waiting], key=rank)  # stable: resumes, then the picker's order

