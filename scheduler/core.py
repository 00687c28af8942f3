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
cluster does not churn the log. What the pass reads of each job is its
digest (job_digest.py), which the caller may keep between passes; a job that
asks for nothing but slots takes the plain lane (plain_lane.py), which
decides as the stack would without reading the job's fields.

Pure: no I/O, no clock, no threads; the same inputs give the same decisions.
What happens across passes (decisions in flight, hosts cooling down after a
refusal) is the planner's (planner.py).
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler import gates, host_checks
from scheduler.decisions import Decision, Dispatch, PassResult
from scheduler.host_index import Fleet, HostIndex
from scheduler.job_digest import PENDING, SUSPENDED, Digest, Digests
from scheduler.pass_state import PassState
from scheduler.pass_usage import PassUsage
from scheduler.picker import Fcfs, PassContext, Picker, in_order
from scheduler.plain_lane import PlainLane
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
    # A job that asks for nothing but slots takes the plain lane (plain_lane.py) in a pass without limits,
    # backfill order, chunks or recovery. Off: every job the general way (the same decisions: tests compare
    # the two).
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
             context: PassContext | None = None, fleet: Fleet | None = None,
             digests: Digests | None = None) -> PassResult:
    """One pass. `recount`: also send reasons whose only change is in their counts (the planner
    allows it at a bounded rate); a changed code or wording is always sent. `fleet`: what the pass
    would make of `hosts`, if the caller keeps it between passes (the pass changes it as it places
    jobs, and puts it back as it was before it returns); `digests`: what it would make of each job
    (scheduler/job_digest.py), if the caller keeps them (the pass adds those it lacks)."""
    queue_map = {q.name: q for q in queues}
    usage = PassUsage(hosts, queue_map, counters, shared or {}, limit_defs,
                      lent=fleet.states if fleet is not None else None)
    index = HostIndex(usage.states, fleet)
    # The cyclic collector is paused while a pass runs: its collections during a pass walked every record the
    # process holds (13 % of a pass placing 35,000 jobs), and what a pass makes is freed by its reference
    # counts (a cycle would wait for the first collection after the pass).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _placed(jobs, queues, queue_map, config, recount, limit_defs, context, usage, index,
                       digests if digests is not None else Digests())
    finally:
        usage.give_back()
        if collecting:
            gc.enable()


def _placed(jobs: Sequence[api.Job], queues: Sequence[api.Queue], queue_map: Mapping[str, api.Queue],
            config: CoreConfig, recount: bool, limit_defs: Sequence[api.Limit], context: PassContext | None,
            usage: PassUsage, index: HostIndex, digests: Digests) -> PassResult:
    """run_pass, on its hosts' states and index."""
    context = context or PassContext(jobs)
    state = PassState(usage, index, context, config, queues, queue_map, limit_defs)
    pending, suspended = digests.waiting(jobs)  # (an array's record is never dispatched: fsm/arrays.py)
    blocked: list[Digest] = []
    bounded = state.limited or any(made.array_limit for made in pending)
    if bounded:
        # A job a limit refuses at the pass's start is refused all through it: such jobs are not
        # ordered (their reasons do not depend on their places), and the jobs that may run are
        # ordered without them (LSF skips the jobs of a user at its limit too).
        pending, blocked = gates.limit_blocked(pending, state)
    waiting = in_order(pending, queue_map, config.picker, config.queue_pickers, context, digests)
    fallback = state.fallback
    if fallback is not None:
        fallback.keep([made.job for made in waiting], usage, index)
    chunking = Chunking.of(waiting, queue_map)
    if suspended:  # (a resume in flight is not among `jobs`)
        resumes = with_resumes([made.job for made in waiting], suspended, queue_map)
        waiting = [digests.of(job) for job in resumes]
    one = _OneJob(state, recount, bounded, chunking, config.plain_lane)
    order = iter(waiting)
    for made in order:
        one(made)
        if state.dispatched >= state.max_dispatches:
            break
    # Past the pass's cap (dispatches only grow), and for a job a limit refuses all through the pass: a
    # pending job that waits for nothing of its own, in no chunk and keeping nothing gets its queue's
    # refusal, else the cap's or the limit's, as its gates would give it (most jobs of a long queue, every
    # pass), without the rest of the stack.
    capped = gates.limit_reached(state.max_dispatches)
    quick = not state.recovering
    refused_by_limit, fallback = state.blocked, state.fallback
    for made in itertools.chain(order, blocked):
        if quick and made.free and made.kind == PENDING \
                and (chunking is None or made.id not in chunking.taken) \
                and (fallback is None or made.id not in fallback.kept):
            reason = gates.queue_active(made, state) or refused_by_limit.get(made.id, capped)
            state.pended(made, reason, recount)
        else:
            one(made)
    if state.holds is not None:
        state.result.reservations = state.holds.kept(usage.states)
    return state.result


class _OneJob:
    """The pass's way with one job, in its order: the plain lane, a resume, or its gates and hosts."""

    def __init__(self, state: PassState, recount: bool, bounded: bool, chunking: Chunking | None,
                 plain_lane: bool) -> None:
        self.state, self.recount, self.chunking = state, recount, chunking
        self.job_gates, self.slot_gates = gates.stack(state, bounded)
        self.free_gates = gates.for_free(self.job_gates, state)
        # A job that asks for nothing but slots and waits for nothing takes the plain lane (plain_lane.py)
        # in a pass without limits, backfill order, chunks or recovery.
        self.lane = PlainLane(state, recount) if plain_lane and not self.slot_gates and chunking is None \
            and not state.recovering else None

    def __call__(self, made: Digest) -> None:
        state, chunking, fallback = self.state, self.chunking, self.state.fallback
        if chunking is not None and made.id in chunking.taken:
            return  # it waits in a chunk dispatched in this pass
        kept = fallback.kept.pop(made.id, None) if fallback is not None and fallback.kept else None
        if self.lane is not None and made.lane and kept is None and self.lane.took(made):
            return
        job = made.job
        if made.kind == SUSPENDED:  # a preempted job whose slots were given back: it takes them again
            if state.dispatched < state.max_dispatches and \
                    (resumed := resume(job, state.usage, state.index)) is not None:
                state.dispatched += 1
                state.decisions.append(resumed)
            return
        reason = _gated(made, self.free_gates if made.free else self.job_gates, self.slot_gates, state)
        if reason is None:  # every gate let it through: its hosts
            reason = host_checks.place(job, kept, state)
            if reason is None:
                if chunking is not None:
                    chunking.fill(job, state)
                return  # dispatched, preempted for, or unexplained this pass
        state.pended(made, reason, self.recount)


def _gated(made: Digest, job_gates: Sequence[gates.JobGate], slot_gates: Sequence[gates.JobGate],
           state: PassState) -> feasibility.Reason | None:
    """The first gate's refusal; None if every gate lets the job through (the slots it may take set)."""
    for gate in job_gates:
        if (reason := gate(made, state)) is not None:
            return reason
    state.least, state.most, state.charged = made.least, made.slots, ()
    for gate in slot_gates:
        if (reason := gate(made, state)) is not None:
            return reason
    return None


@dataclass
class Chunking:
    """The pass's chunks (xce/rules/chunks.py): the chunkable jobs of chunk queues by key, in the pass's
    order, and those taken into a dispatched job's chunk."""

    queues: Mapping[str, api.Queue]
    by_key: dict[chunks.Key, list[Digest]]
    taken: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, waiting: Sequence[Digest], queues: Mapping[str, api.Queue]) -> Chunking | None:
        """None when no queue chunks (most passes)."""
        if not any(chunks.size(q) for q in queues.values()):
            return None
        by_key: dict[chunks.Key, list[Digest]] = {}
        for made in waiting:
            job = made.job
            if not job.chunk_lead and chunks.chunkable(job, queues.get(made.queue)):
                by_key.setdefault(chunks.key(job), []).append(made)
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
        start = next((i for i, made in enumerate(alike) if made.id == lead.id), len(alike)) + 1
        for made in alike[start:]:
            if len(found) >= room:
                break
            if made.id not in self.taken and gates.waits(made, state) is None:
                found.append(made.id)
        if found:
            self.taken.update(found)
            state.decisions[-1] = last._replace(chunk=tuple(found))
