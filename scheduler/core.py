"""The scheduling core: one pass over a view -> decisions.

Theory of operation. A pass orders the pending jobs with the pickers
(picker.py), then places each in that order, counting what it has already
handed out in this pass (pass_usage.py: slots, consumables and cluster-wide
counters), so one pass never over-commits a host or passes a limit. It is
Nomad's scheduler stack: each job meets the job gates (gates.py: queue,
dependency, start retry, recovery, the pass's dispatch cap, limits,
backfill order), whose first refusal is its reason; a job they let through
meets the host checks (host_checks.py: the pass's answers of no room,
licenses, the host index, the barrier of apply's own check, explanations,
preemption as a fallback). What "fits" means is xce/rules/feasibility.py, the same
module apply re-checks every DISPATCH with. A suspended victim whose slots
were given back resumes first in its queue (preempt_fallback.py). Every job
the pass does not dispatch gets a pending reason, and a PEND decision is
made only when that reason differs from the job's committed one, so a busy
cluster does not churn the log.

Pure: no I/O, no clock, no threads; the same inputs give the same decisions.
What happens across passes (decisions in flight, hosts cooling down after a
refusal) is the planner's (planner.py).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler import gates, host_checks
from scheduler.decisions import Decision, Dispatch, PassResult, Pend
from scheduler.host_index import Fleet, HostIndex
from scheduler.pass_state import PassState
from scheduler.pass_usage import PassUsage
from scheduler.picker import Fcfs, PassContext, Picker, ordered
from scheduler.preempt_fallback import resume, with_resumes
from xce.rules import chunks, feasibility
from xce.v1 import api_pb2 as api

__all__ = ["REASON_NO_HOSTS", "REASON_QUEUE_INACTIVE", "WAITING", "CoreConfig", "Reason", "run_pass",
           "schedule"]

Reason = tuple[int, str]  # (code: api.PendingReason, words), as `bjobs -p` shows them

REASON_NO_HOSTS: Reason = feasibility.REASON_NO_HOSTS.key()
REASON_QUEUE_INACTIVE: Reason = feasibility.REASON_QUEUE_INACTIVE.key()


@dataclass
class CoreConfig:
    picker: Picker = field(default_factory=Fcfs)
    queue_pickers: Mapping[str, Picker] = field(default_factory=dict)
    max_dispatches: int = 4000  # per pass: one entry of ~100 KB, applied in ~0.05 s
    max_explains: int = 200  # requirements explained per pass (each reads every host: ~20 ms at 5,000)
    max_preemptions: int = 16  # PREEMPT decisions per pass (each looks at the hosts with victims)
    # A job that asks for nothing but slots takes the short way to its host (host_checks.place_plain), in
    # a pass without limits, backfill order or chunks. Off: every job the general way (the same decisions:
    # tests compare the two).
    plain_lane: bool = True


# The states of the jobs a pass may act on: pending ones, and suspended ones it may resume.
WAITING = frozenset({api.PEND, api.SSUSP})


def schedule(jobs: Sequence[api.Job], queues: Sequence[api.Queue], hosts: Sequence[api.Host],
             now_ms: int, config: CoreConfig, counters: Mapping[str, int] | None = None,
             shared: Mapping[str, int] | None = None, limit_defs: Sequence[api.Limit] = ()) -> list[Decision]:
    return run_pass(jobs, queues, hosts, config, counters or {}, shared=shared,
                    limit_defs=limit_defs).decisions


def run_pass(jobs: Sequence[api.Job], queues: Sequence[api.Queue], hosts: Sequence[api.Host],
             config: CoreConfig, counters: Mapping[str, int], recount: bool = True,
             shared: Mapping[str, int] | None = None, limit_defs: Sequence[api.Limit] = (),
             context: PassContext | None = None, fleet: Fleet | None = None) -> PassResult:
    """One pass. `recount`: also send reasons whose only change is in their counts (the planner
    allows it at a bounded rate); a changed code or wording is always sent. `fleet`: what the pass
    would make of `hosts`, if the caller keeps it between passes (the pass changes it as it places
    jobs, and puts it back as it was before it returns)."""
    queue_map = {q.name: q for q in queues}
    usage = PassUsage(hosts, queue_map, counters, shared or {}, limit_defs,
                      lent=fleet.states if fleet is not None else None)
    index = HostIndex(usage.states, fleet)
    try:
        return _placed(jobs, queues, queue_map, config, recount, limit_defs, context, usage, index)
    finally:
        usage.give_back()


def _placed(jobs: Sequence[api.Job], queues: Sequence[api.Queue], queue_map: Mapping[str, api.Queue],
            config: CoreConfig, recount: bool, limit_defs: Sequence[api.Limit], context: PassContext | None,
            usage: PassUsage, index: HostIndex) -> PassResult:
    """run_pass, on its hosts' states and index."""
    context = context or PassContext(jobs)
    state = PassState(usage, index, context, config, queues, queue_map, limit_defs)
    pending, suspended = _waiting(jobs)
    blocked: list[api.Job] = []
    bounded = state.limited or any(j.array_limit for j in pending)
    if bounded:
        # A job a limit refuses at the pass's start is refused all through it: such jobs are not
        # ordered (their reasons do not depend on their places), and the jobs that may run are
        # ordered without them (LSF skips the jobs of a user at its limit too).
        pending, blocked = gates.limit_blocked(pending, state)
    waiting = ordered(pending, queue_map, config.picker, config.queue_pickers, context)
    fallback = state.fallback
    if fallback is not None:
        fallback.keep(waiting, usage, index)
    job_gates, slot_gates = gates.stack(state, bounded)
    decisions, waiting_for = state.decisions, state.result.waiting
    chunking = Chunking.of(waiting, queue_map)
    # (a resume in flight is not among `jobs`)
    place, place_plain = host_checks.place, host_checks.place_plain
    lane = config.plain_lane and not slot_gates and chunking is None
    ssusp = api.SSUSP
    for job in itertools.chain(with_resumes(waiting, suspended, queue_map), blocked):
        if chunking is not None and job.id in chunking.taken:
            continue  # it waits in a chunk dispatched in this pass
        kept = fallback.kept.pop(job.id, None) if fallback is not None and fallback.kept else None
        if job.state == ssusp:  # a preempted job whose slots were given back: it takes them again
            if state.dispatched < state.max_dispatches and (resumed := resume(job, usage, index)) is not None:
                state.dispatched += 1
                decisions.append(resumed)
            continue
        reason = _gated(job, job_gates, slot_gates, state)
        if reason is None:  # every gate let it through: its hosts
            if lane and kept is None and place_plain(job, state):
                continue
            reason = place(job, kept, state)
            if reason is None:
                if chunking is not None:
                    chunking.fill(job, state)
                continue  # dispatched, preempted for, or unexplained this pass
        waiting_for[reason.code] += 1
        if reason.code != job.pending_code or (reason.words != job.pending_reason and (
                recount or _shape(reason.words) != _shape(job.pending_reason))):
            decisions.append(Pend(job.id, reason.words, reason.code))
    if state.holds is not None:
        state.result.reservations = state.holds.kept(usage.states)
    return state.result


def _waiting(jobs: Sequence[api.Job]) -> tuple[list[api.Job], list[api.Job]]:
    """(the pending jobs, the suspended ones), in one read of the jobs. An array's record is never
    dispatched: its elements are jobs of their own (fsm/arrays.py)."""
    pend, ssusp = api.PEND, api.SSUSP
    pending: list[api.Job] = []
    suspended: list[api.Job] = []
    for job in jobs:
        if (job_state := job.state) == pend:
            if not job.spec.HasField("array"):
                pending.append(job)
        elif job_state == ssusp:
            suspended.append(job)
    return pending, suspended


def _gated(job: api.Job, job_gates: Sequence[gates.JobGate], slot_gates: Sequence[gates.JobGate],
           state: PassState) -> feasibility.Reason | None:
    """The first gate's refusal; None if every gate lets the job through (the slots it may take set)."""
    for gate in job_gates:
        if (reason := gate(job, state)) is not None:
            return reason
    state.least, state.most, state.charged = feasibility.least_slots(job), job.spec.slots, ()
    for gate in slot_gates:
        if (reason := gate(job, state)) is not None:
            return reason
    return None


@dataclass
class Chunking:
    """The pass's chunks (xce/rules/chunks.py): the chunkable jobs of chunk queues by key, in the pass's
    order, and those taken into a dispatched job's chunk."""

    queues: Mapping[str, api.Queue]
    by_key: dict[chunks.Key, list[api.Job]]
    taken: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, waiting: Sequence[api.Job], queues: Mapping[str, api.Queue]) -> Chunking | None:
        """None when no queue chunks (most passes)."""
        if not any(chunks.size(q) for q in queues.values()):
            return None
        by_key: dict[chunks.Key, list[api.Job]] = {}
        for job in waiting:
            if not job.chunk_lead and chunks.chunkable(job, queues.get(job.spec.queue)):
                by_key.setdefault(chunks.key(job), []).append(job)
        return cls(queues, by_key)

    def fill(self, lead: api.Job, state: PassState) -> None:
        """`lead` was just dispatched: the next jobs alike that may run now wait in its chunk."""
        last = state.decisions[-1] if state.decisions else None
        queue = self.queues.get(lead.spec.queue)
        if not isinstance(last, Dispatch) or last.job_id != lead.id or not chunks.chunkable(lead, queue):
            return
        if state.holds is not None and state.holds.blocks:
            return  # a job waits for room with a reservation: a chunk would hold the slot past the lead's end
        alike, room = self.by_key.get(chunks.key(lead), []), chunks.size(queue) - 1
        found: list[int] = []
        start = next((i for i, job in enumerate(alike) if job.id == lead.id), len(alike)) + 1
        for job in alike[start:]:
            if len(found) >= room:
                break
            if job.id not in self.taken and gates.waits(job, state) is None:
                found.append(job.id)
        if found:
            self.taken.update(found)
            state.decisions[-1] = dataclasses.replace(last, chunk=tuple(found))


_DIGITS = str.maketrans("", "", "0123456789")


@functools.lru_cache(maxsize=4096)  # a pass compares each waiting job's words: the same few, pass after pass
def _shape(words: str) -> str:
    """A reason's words without its numbers: what changes only when the counts do not."""
    return words.translate(_DIGITS)


