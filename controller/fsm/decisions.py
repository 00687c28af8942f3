"""The commit barrier: DISPATCH and PEND decisions, checked against committed state; the lease.

A scheduler's batch is one entry. Apply checks its lease first (fencing: a
batch of an epoch or holder that is not current changes nothing, and every
decision is answered REJECT_STALE_LEASE), then each decision on its own,
against the state as the earlier decisions of the same batch left it: a
DISPATCH needs the job pending at that attempt and the allocation to pass
xce/rules/feasibility.py, exactly the checks the planner made on its view
(Nomad's plan applier). Each decision gets a typed outcome; a rejection is
normal optimistic concurrency, not an error. An operator's forced run
(`dispatch`, like brun) passes the same host checks but not the policy ones.

From entry format 6 (ALLOCATION_FORMAT) a DISPATCH is an allocation: the
hosts and slots it lists (or its host with the job's slots), checked all or
nothing against the job's requirement (its queue's RES_REQ merged with its
-R: select[] with load indices unknown, the allocation's shape, each host's
slots and the consumables its rusage[] reserves there). Before, only the
host's slots were checked, and every replica still applies such entries so.

The lease is granted by the proposer's clock (the entry's stamp): the holder
renews at the same epoch; anyone may take an expired lease, which bumps
the epoch and so fences the old holder's batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from controller.fsm import chunks, preempt
from controller.fsm.applier import Applier
from controller.fsm.holdings import CommittedUsage, place
from controller.fsm.requests import guarded
from controller.fsm.versions import (
    ALLOCATION_FORMAT,
    CHUNK_FORMAT,
    LSF_FORMAT,
    PREEMPT_FORMAT,
    RESERVATION_FORMAT,
    RESOURCES_FORMAT,
)
from xce.errors import ServiceError
from xce.rules import feasibility
from xce.rules import reservations as reservation_rules
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


def requested(job: api.Job, host: str, hosts: Sequence[api.HostSlots], usage: CommittedUsage,
              entry_format: int) -> tuple[list[feasibility.Allocation], feasibility.Need]:
    """The allocation a DISPATCH asks for, and the requirement it is checked against."""
    if entry_format < ALLOCATION_FORMAT:
        return [feasibility.Allocation(host, job.spec.slots)], feasibility.NO_NEED
    parts = [feasibility.Allocation(h.host, h.slots) for h in hosts] \
        or [feasibility.Allocation(host, job.spec.slots)]
    need = feasibility.job_need(job, usage, groups_and_shared=entry_format >= RESOURCES_FORMAT)
    if need.exclusive and entry_format < PREEMPT_FORMAT:  # (-x is refused before it: never so)
        need = replace(need, exclusive=False)
    return parts, need


def dispatch_refusal(usage: CommittedUsage, job: api.Job, host: str, attempt: int, forced: bool = False,
                     hosts: Sequence[api.HostSlots] = (), entry_format: int = 1,
                     now_ms: int = 0) -> api.DecisionOutcome | None:
    """Why this DISPATCH cannot be taken now (`now_ms`: the entry's stamp; brun's, forced, ignores
    the begin time), or None."""
    refusal = _refusal_or_request(usage, job, host, attempt, forced, hosts, entry_format, now_ms)
    return refusal if isinstance(refusal, api.DecisionOutcome) else None


Request = tuple[list[feasibility.Allocation], feasibility.Need]


def _refusal_or_request(usage: CommittedUsage, job: api.Job, host: str, attempt: int, forced: bool,
                        hosts: Sequence[api.HostSlots], entry_format: int,
                        now_ms: int) -> api.DecisionOutcome | Request:
    """Why this DISPATCH cannot be taken now (`now_ms`: the entry's stamp); else what it was checked
    as, for `_place` (working out the requirement again cost a few us a dispatch)."""
    if job.spec.HasField("array"):
        return api.DecisionOutcome(code=api.REJECT_NOT_PENDING, message=f"job {job.id} is an array: its "
                                   "elements are dispatched, each as a job of its own")
    if job.state != api.PEND:
        return api.DecisionOutcome(code=api.REJECT_NOT_PENDING, message=f"job {job.id} is not pending "
                                   f"(state {api.JobState.Name(job.state)})")
    if attempt != job.attempt:
        return api.DecisionOutcome(code=api.REJECT_WRONG_ATTEMPT,
                                   message=f"job {job.id} is at attempt {job.attempt}, not {attempt}")
    if job.chunk_lead and not forced:  # it runs after its chunk's lead, on its slot (chunks.py)
        return api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=api.PEND_CHUNK_WAIT,
                                   message=f"job {job.id} waits in the chunk of job {job.chunk_lead}")
    if job.spec.depend and job.depend_state != api.DEPEND_SATISFIED and not forced:  # brun runs it anyway
        waiting = "can never hold" if job.depend_state == api.DEPEND_NEVER else "does not hold yet"
        return api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=api.PEND_DEPENDENCY,
                                   message=f"job {job.id}: its dependency {waiting}")
    if entry_format >= LSF_FORMAT and not forced and job.spec.begin_time_ms > now_ms:  # bsub -b (brun: now)
        return api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=api.PEND_BEGIN_TIME,
                                   message=f"job {job.id}: its begin time is not reached")
    if job.spec.reservation and entry_format >= RESERVATION_FORMAT:  # its owner may still use it?
        kept = usage.reservation(job.spec.reservation)
        if kept is None or not reservation_rules.may_use(kept, job.spec.user):
            return api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=api.PEND_NO_HOST_MATCHES,
                                       message=f"job {job.id}: reservation {job.spec.reservation} is not "
                                               "there for its owner now")
    if entry_format >= ALLOCATION_FORMAT and hosts and hosts[0].host != host:
        return api.DecisionOutcome(code=api.REJECT_MALFORMED, message=f"job {job.id}: the dispatch's host "
                                   f"{host[:80]!r} is not its allocation's first")
    parts, need = requested(job, host, hosts, usage, entry_format)
    reason = feasibility.check(job, parts, usage, forced, need, shape=entry_format >= ALLOCATION_FORMAT)
    if reason is not None:
        return api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=reason.code,
                                   message=f"job {job.id}: {reason.words}")
    return parts, need


def check_dispatch(usage: CommittedUsage, job: api.Job, host: str, attempt: int, entry_format: int) -> None:
    """An operator's forced run (brun): the same checks, as a ServiceError."""
    outcome = dispatch_refusal(usage, job, host, attempt, forced=True, entry_format=entry_format)
    if outcome is not None:
        missing = outcome.code == api.REJECT_INFEASIBLE and usage.host(host) is None
        raise ServiceError(log.NOT_FOUND if missing else log.FAILED_PRECONDITION, outcome.message)


def apply_dispatch(applier: Applier) -> list[log.Result]:
    dispatch = applier.entry.dispatch

    def body() -> log.Result:
        job = applier.job(dispatch.job_id)
        if job is None:
            raise ServiceError(log.NOT_FOUND, f"no job {dispatch.job_id}")
        usage = CommittedUsage(applier.tables, applier)
        check_dispatch(usage, job, dispatch.host, dispatch.attempt, applier.entry.format)
        _place(applier, usage, job, requested(job, dispatch.host, (), usage, applier.entry.format))
        return log.Result(code=log.OK, job_ids=[job.id])

    return [guarded(dispatch.request_id, applier, body)]


def _place(applier: Applier, usage: CommittedUsage, job: api.Job, request: Request) -> None:
    parts, need = request
    records = [usage.host_record(part.host) for part in parts]
    assert all(r is not None for r in records)  # feasibility found them
    place(applier, job, [r for r in records if r is not None], parts, need, usage.limit_defs())


def apply_lease(applier: Applier) -> list[log.Result]:
    lease, meta, now = applier.entry.lease, applier.meta, applier.stamp_ms
    if not lease.scheduler_id or lease.duration_ms <= 0:
        return [log.Result(code=log.INVALID_ARGUMENT, message="a lease needs a scheduler id and a duration")]
    if meta.lease_holder and meta.lease_holder != lease.scheduler_id and now < meta.lease_expires_ms:
        return [log.Result(code=log.FAILED_PRECONDITION, lease_epoch=meta.lease_epoch,
                           lease_holder=meta.lease_holder, lease_expires_ms=meta.lease_expires_ms,
                           message=f"the lease is held by {meta.lease_holder}")]
    if meta.lease_holder != lease.scheduler_id or now >= meta.lease_expires_ms:
        meta.lease_epoch += 1
        meta.lease_holder = lease.scheduler_id
    meta.lease_expires_ms = now + lease.duration_ms
    return [log.Result(code=log.OK, lease_epoch=meta.lease_epoch, lease_holder=meta.lease_holder,
                       lease_expires_ms=meta.lease_expires_ms)]


def lease_current(batch: api.DecisionBatch, meta: log.Meta, now_ms: int) -> bool:
    return batch.lease_epoch == meta.lease_epoch and now_ms < meta.lease_expires_ms \
        and batch.scheduler_id == meta.lease_holder


def apply_decisions(applier: Applier) -> list[log.Result]:
    batch, meta = applier.entry.decisions, applier.meta
    if not lease_current(batch, meta, applier.stamp_ms):
        why = (f"stale lease (epoch {batch.lease_epoch}; "
               f"current {meta.lease_epoch} held by {meta.lease_holder or 'nobody'})")
        stale = api.DecisionOutcome(code=api.REJECT_STALE_LEASE, message=why)
        return [log.Result(code=log.FAILED_PRECONDITION, message=why, revision=applier.index,
                           rejections=[why] * len(batch.decisions),
                           outcomes=[stale] * len(batch.decisions))]
    # The revision tells the scheduler when its view holds this batch's outcome.
    result = log.Result(code=log.OK, revision=applier.index)
    usage = CommittedUsage(applier.tables, applier)
    accepted = api.DecisionOutcome()
    for decision in batch.decisions:
        outcome = _decide(applier, usage, decision)
        result.outcomes.append(outcome or accepted)
        result.rejections.append(outcome.message or "rejected" if outcome is not None else "")
    return [result]


def _decide(applier: Applier, usage: CommittedUsage, decision: api.Decision) -> api.DecisionOutcome | None:
    kind = decision.WhichOneof("body")
    if kind == "dispatch":
        dispatch = decision.dispatch
        job = applier.job(dispatch.job_id)
        if job is None:
            return api.DecisionOutcome(code=api.REJECT_NO_JOB, message=f"no job {dispatch.job_id}")
        if job.state == api.SSUSP and job.released and applier.entry.format >= PREEMPT_FORMAT:
            if dispatch.attempt != job.attempt:
                return api.DecisionOutcome(code=api.REJECT_WRONG_ATTEMPT, message=f"job {job.id} is at "
                                           f"attempt {job.attempt}, not {dispatch.attempt}")
            outcome = preempt.resume_refusal(usage, job, dispatch.host, dispatch.hosts,
                                             applier.entry.format)
            if outcome is None:
                preempt.resume(applier, usage, job)
            return outcome
        refusal = _refusal_or_request(usage, job, dispatch.host, dispatch.attempt, False, dispatch.hosts,
                                      applier.entry.format, applier.stamp_ms)
        if isinstance(refusal, api.DecisionOutcome):
            return refusal
        _place(applier, usage, job, refusal)
        if dispatch.chunk and applier.entry.format >= CHUNK_FORMAT:  # jobs to wait in its chunk
            chunks.attach(applier, job, dispatch.chunk)
        return None
    if kind == "pend":
        job = applier.job(decision.pend.job_id)
        if job is None or job.state != api.PEND:
            return api.DecisionOutcome(code=api.REJECT_NOT_PENDING, message="job is not pending")
        reason = decision.pend.reason[:200]
        if (job.pending_reason, job.pending_code) != (reason, decision.pend.code):
            job.pending_reason = reason
            job.pending_code = decision.pend.code
            applier.put_job(job)
        return None
    if kind == "preempt" and applier.entry.format >= PREEMPT_FORMAT:
        outcome = preempt.preempt_refusal(applier, decision.preempt)
        if outcome is None:
            preempt.take(applier, decision.preempt)
        return outcome
    return api.DecisionOutcome(code=api.REJECT_MALFORMED, message="empty decision")
