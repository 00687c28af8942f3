"""The host side of a pass: hosts for a job its gates let through, or the reason it waits.

Theory of operation. `place` asks, in this order: the pass's answer of no
room for the same requirement, if it has one (free amounts only shrink in a
pass); the licenses the job asks cluster-wide (shared resources); the host
index (scheduler/host_index.py: the hosts with free slots that pass the
job's requirement, laid out by scheduler/plans.py); the barrier: the plan
verified with `feasibility.check`, the very check apply runs on every
DISPATCH (a plan it refuses for anything but a limit on consumables is the
index disagreeing with the definition: a bug, and the pass stops). A job
that has no plan is explained by running the host checks on every host
(per-check counts), for at most `max_explains` requirements a pass: the
jobs past that keep their reasons until a later pass. A job without room
may preempt instead (scheduler/preempt_fallback.py); one that waits for
room may become its queue's head (scheduler/backfill.py). Pure: no I/O.
"""

from __future__ import annotations

from scheduler import plans
from scheduler.pass_state import PassState
from xce.invariant import InvariantViolated
from xce.rules import feasibility
from xce.v1 import api_pb2 as api

NO_ALLOCATION = feasibility.Reason(api.PEND_NO_FREE_SLOTS, "no set of hosts that fits the requirement "
                                                           "together has room now", "plan")
_NONE_UNKNOWN: frozenset[str] = frozenset()  # a plan names no host the pass does not know


def place(job: api.Job, kept: list[api.HostAllocation] | None, state: PassState) -> feasibility.Reason | None:
    """The job on hosts. None if it was dispatched, preempted for, or left unexplained this pass (it
    keeps its reason); else the reason it waits. `kept`: what its victims gave back, kept for it (it
    stays kept unless this job is placed on it)."""
    usage, index = state.usage, state.index
    if kept:
        usage.unreserve(kept, index)  # its own to take now
        state.forget_no_room()
    need = feasibility.job_need(job, usage)
    key = (state.least, state.most, need)
    moving = need.requirement.select is not None and index.reads_usage(need)
    cache, tried = (state.until_placed, state.tried_moving) if moving else (state.no_plan, state.tried_static)
    explanation = cache.get(key) if cache else None
    if explanation is None and need.shared_usage:  # licenses: the job's, whatever the hosts
        refusal = feasibility.shared_refusal(need, usage)
        if refusal is not None:
            explanation = feasibility.Explanation(refusal)
    if explanation is None:
        # A requirement tried already and not answered was left unexplained: the pass is past its
        # explanations, and only then is the set read (a requirement's hash is not free).
        untried = state.explains < state.max_explains or key not in tried
        plan = index.plan(need, state.least, state.most) if untried else None
        if plan is not None:
            explanation = _barrier(job, need, plan, state)
            if explanation is None:
                return None
        else:
            tried.add(key)
            if state.explains >= state.max_explains:
                _unexplained(job, kept, state)
                return None
            explanation = cache[key] = feasibility.explain(job, usage, need)
            state.explains += 1
            state.result.refusals.update(explanation.counts)
    if kept:
        usage.reserve(kept, index)  # not placed: still its own, all the pass
    return _waits(job, need, explanation.reason or NO_ALLOCATION, kept, state)


def _barrier(job: api.Job, need: feasibility.Need, plan: plans.Plan,
             state: PassState) -> feasibility.Explanation | None:
    """The plan, if apply's own check takes it: dispatched (None). Else why not: a limit on consumables,
    which the plan's hosts count (this job's answer, not kept for others)."""
    refusal = feasibility.check(job, plan, state.usage, need_=need, unknown=_NONE_UNKNOWN)
    if refusal is None:
        state.placed(job, need, plan)
        return None
    if refusal.check != "within_limits":  # the index and the definition disagree: a bug
        raise InvariantViolated(f"the host index chose {plan} for job {job.id}, which does "
                                f"not fit there: {refusal}")
    return feasibility.Explanation(refusal)


def _unexplained(job: api.Job, kept: list[api.HostAllocation] | None, state: PassState) -> None:
    """Past the pass's explanations: it holds its queue if its last reason did."""
    if kept:
        state.usage.reserve(kept, state.index)  # not placed: still its own
    state.waits(job, job.pending_code)


def _waits(job: api.Job, need: feasibility.Need, reason: feasibility.Reason,
           kept: list[api.HostAllocation] | None, state: PassState) -> feasibility.Reason | None:
    """The job found no room for `reason`: it preempts instead (None), or waits."""
    fallback = state.fallback
    if fallback is not None:
        instead = fallback.instead(job, need, state.least, reason, kept, state.usage, state.index)
        if not isinstance(instead, feasibility.Reason):
            state.decisions.append(instead)
            state.waits(job, api.PEND_PREEMPTION_PENDING)
            return None
        reason = instead
    state.waits(job, reason.code)
    return reason
