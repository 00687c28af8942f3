"""The job gates of a pass: whether a job may be placed at all, before any host is read.

Theory of operation. A gate is a small function `(job, state) -> Reason |
None` (Nomad's feasibility checkers, asked of the job rather than of each
node), the job given as its digest (scheduler/job_digest.py: what a pass
reads of it, kept between passes): None lets the job through, a Reason is
the pending reason the pass records for it, exactly as `xce jobs -p` shows
it. `stack()` composes them, in one place and in the order they are asked:
the first refusal is the job's reason. The gates on slots (limits, backfill)
narrow the most slots the job in hand may take (PassState.most). A pass
leaves out the gates that cannot refuse anything in it (no limit and no
array limit; no queue with a backfill mode), and `waits` for a job that
waits for nothing of its own (`for_free`). Pure: the pass's time is in its
state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from scheduler.job_digest import Digest
from scheduler.pass_state import PassState
from xce import start_failures
from xce.rules import dependency_conditions, feasibility
from xce.v1 import api_pb2 as api

JobGate = Callable[[Digest, PassState], "feasibility.Reason | None"]

_UNSEEN = feasibility.Reason(api.PENDING_REASON_UNSPECIFIED, "", "unseen")  # a cache miss


def stack(state: PassState, bounded: bool) -> tuple[tuple[JobGate, ...], tuple[JobGate, ...]]:
    """The gates a pass asks of each job, in order: those on the job itself, then those on its slots
    (asked with PassState.least and most set: most jobs of a long queue are refused before, and need
    no count of their slots). `bounded`: some job of the pass has a limit."""
    slot_gates: list[JobGate] = []
    if bounded:
        slot_gates.append(within_limits)
    if state.holds is not None:
        slot_gates.append(backfill_order)
    return (queue_active, waits, dispatch_cap), tuple(slot_gates)


def for_free(job_gates: tuple[JobGate, ...], state: PassState) -> tuple[JobGate, ...]:
    """The job gates for a job that waits for nothing of its own (scheduler/job_digest.py: its digest's
    `free`): `waits` would let it through, unless the cluster is recovering."""
    return job_gates if state.recovering else tuple(gate for gate in job_gates if gate is not waits)


def queue_active(made: Digest, state: PassState) -> feasibility.Reason | None:
    """The queue's own checks (active, its slot limit's counter), once per queue and pass."""
    queue = made.queue
    reason = state.by_queue.get(queue, _UNSEEN)
    if reason is _UNSEEN:
        reason = state.by_queue[queue] = feasibility.queue_refusal(queue, state.usage)
    return reason


def waits(made: Digest, state: PassState) -> feasibility.Reason | None:
    """What the job itself waits for, in one gate (each is a test of a field or two; a call each
    was a tenth of a pass over 50,000 jobs): its -w condition (apply's verdict), the backoff after
    its own start failed, its begin time (-b), its termination time passed (-t: it would be killed
    as it starts), and a host it may still run on (a cluster recovering; hosts it ran on gone
    silent)."""
    job = made.job
    spec = job.spec
    if job.chunk_lead:  # it runs after its chunk's lead, on its slot (xce/rules/chunks.py): as apply said
        return feasibility.Reason(api.PEND_CHUNK_WAIT, job.pending_reason, "chunk")
    if spec.depend and job.depend_state != api.DEPEND_SATISFIED:
        return dependency_reason(job)
    if job.attempt and job.not_before_ms > state.now_ms:
        return start_retry_reason(job)
    if spec.begin_time_ms > state.now_ms:
        return begin_time_reason(spec.begin_time_ms)
    if 0 < spec.term_time_ms <= state.now_ms:
        return term_time_reason(spec.term_time_ms)
    if state.recovering or job.stray_hosts:
        return feasibility.safety_refusal(job, state.usage)
    return None


def dispatch_cap(made: Digest, state: PassState) -> feasibility.Reason | None:
    """The pass's own bound on dispatches (a job its limits refuse gets their reason, looked at below)."""
    if state.dispatched >= state.max_dispatches and made.id not in state.blocked:
        return limit_reached(state.max_dispatches)
    return None


def within_limits(made: Digest, state: PassState) -> feasibility.Reason | None:
    """The limits at its least slots; -n min,max: as many as the limits leave."""
    if not (state.limited or made.array_limit):
        return None
    reason = state.blocked.get(made.id) or limit_reason(made, state)
    if state.least < state.most:  # (least fits: checked just above)
        state.most = min(state.most, state.usage.room(made.job, state.most))
    return reason


def backfill_order(made: Digest, state: PassState) -> feasibility.Reason | None:
    """Its queue's head, and the reservations of the queues before it (scheduler/backfill.py)."""
    holds = state.holds
    if holds is None or not holds.blocks:
        return None
    reason, state.most, state.charged = holds.verdict(made.job, state.least, state.most, state.usage.states)
    return reason


@functools.lru_cache(maxsize=16)  # the same few limits, pass after pass (an f-string a pass was ~1 %)
def limit_reached(max_dispatches: int) -> feasibility.Reason:
    return feasibility.Reason(api.PEND_DISPATCH_LIMIT, f"this pass placed {max_dispatches} jobs, its limit: "
                              "the next pass looks again", "dispatch_limit")


def limit_reason(made: Digest, state: PassState) -> feasibility.Reason | None:
    """limit_refusal at the job's least slots; a refusal is kept for the rest of the pass, for every job
    whose limits read the same of it (its digest's `limits`)."""
    key = made.limits
    refused = state.limit_refused
    reason = refused.get(key)
    if reason is None:
        reason = feasibility.limit_refusal(made.job, state.usage, made.least)
        if reason is not None:
            refused[key] = reason
    return reason


def limit_blocked(pending: list[Digest], state: PassState) -> tuple[list[Digest], list[Digest]]:
    """(the jobs no limit refuses now, the ones one does); why, by job, in state.blocked. Counters only
    grow in a pass: a job a limit refuses at its start is refused all through it."""
    open_, blocked = [], []
    limited = state.limited
    for made in pending:
        reason = limit_reason(made, state) if limited or made.array_limit else None
        if reason is None:
            open_.append(made)
        else:
            blocked.append(made)
            state.blocked[made.id] = reason
    return open_, blocked


def dependency_reason(job: api.Job) -> feasibility.Reason:
    """DEPENDENCY_PENDING or DEPENDENCY_NEVER_SATISFIED, with the condition (apply's verdict)."""
    try:
        shown = dependency_conditions.show(dependency_conditions.parse(job.spec.depend))
    except dependency_conditions.DependencyError:  # refused at submit
        shown = job.spec.depend
    shown = shown if len(shown) <= 200 else shown[:197] + "..."
    if job.depend_state == api.DEPEND_NEVER:
        return feasibility.Reason(api.PEND_DEPENDENCY_NEVER, f"dependency never satisfied: {shown} can no "
                                  "longer hold (xce kill it, or requeue what it waits for)", "depend")
    return feasibility.Reason(api.PEND_DEPENDENCY, f"dependency pending: {shown}", "depend")


@functools.lru_cache(maxsize=64)
def begin_time_reason(begin_ms: int) -> feasibility.Reason:
    return feasibility.Reason(api.PEND_BEGIN_TIME, f"its begin time ({_utc(begin_ms)}) is not reached "
                              "(bsub -b)", "begin_time")


@functools.lru_cache(maxsize=64)
def term_time_reason(term_ms: int) -> feasibility.Reason:
    return feasibility.Reason(api.PEND_TERM_TIME_PASSED, f"its termination time ({_utc(term_ms)}) passed "
                              "before it could start (bsub -t): kill it", "term_time")


def _utc(ms: int) -> str:
    """A time in words that are the same wherever the scheduler runs (the pass is a pure function)."""
    import datetime

    return datetime.datetime.fromtimestamp(ms // 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def start_retry_reason(job: api.Job) -> feasibility.Reason:
    """A job waiting out the backoff after its worker refused a start for a reason of its own (its output
    file): the words apply wrote, so that no PEND decision changes them (controller/fsm/refusals.py)."""
    return feasibility.Reason(api.PEND_START_RETRY, start_failures.retry_words(job), "start_retry")
