"""Preemption at the commit barrier (entry format 12): PREEMPT, the victims' suspension, their resume.

Theory of operation (LSF's preemptive scheduling, made safe across
failover). A PREEMPT decision names a pending job at its attempt and its
victims at theirs. Apply checks every victim again with the planner's
function (xce/rules/preemption.py: may_take, by the entry's stamp), then:
- a victim of a `suspend` queue becomes SSUSP: its worker is told to stop
  it (SIGSTOP, worker_session), but it keeps every slot until its worker
  reports the process group stopped (`suspended`). Only then (`stopped`)
  are its slots given back, and the consumables its queue lists in
  `preemptable_resources`; what it gave back is recorded in `released`. A
  preemptor is therefore never placed on what a victim still runs on: the
  barrier sees those slots taken until the stop is committed, after a
  leader kill as before it (a new leader restates SSUSP to the worker,
  which stops it again and reports again);
- a victim of a `requeue` queue is killed and requeued, as `xce requeue`
  does with a running job: its slots come back when its end is reported,
  and it runs again at the next attempt;
- the preemptor waits with PEND_PREEMPTION_PENDING and its victims' ids
  in `preempting` until a later pass places it like any job.
A suspended victim resumes through a DISPATCH of its own allocation
(`resume_refusal`): the barrier takes back exactly what it released, on
the same hosts, or refuses, so no host is ever over its capacity; then it
is RUN again and its worker continues it (SIGCONT). A victim that ends while
suspended gives back only what it still holds (holdings.release).
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.fsm.applier import Applier
from controller.fsm.holdings import CommittedUsage
from controller.fsm.records import RUNNING, read_host, read_job, read_queue
from controller.fsm.versions import ONE_AT_A_TIME_FORMAT, PREEMPT_FORMAT
from controller.tables import Tables
from xce.invariant import invariant
from xce.rules import feasibility, preemption
from xce.v1 import api_pb2 as api


def queues_of(tables: Tables) -> dict[str, api.Queue]:
    return {q.name: q for q in (api.Queue.FromString(raw) for _, raw in tables.scan("queues"))}


def preempt_refusal(applier: Applier, decision: api.PreemptDecision) -> api.DecisionOutcome | None:
    """Why this PREEMPT cannot be taken now, or None."""
    def refuse(code: api.DecisionRejection, words: str) -> api.DecisionOutcome:
        return api.DecisionOutcome(code=code, reason=api.PEND_PREEMPTION_PENDING, message=words)

    job = read_job(applier.tables, decision.job_id)
    if job is None:
        return api.DecisionOutcome(code=api.REJECT_NO_JOB, message=f"no job {decision.job_id}")
    if job.state != api.PEND or job.spec.HasField("array"):
        return refuse(api.REJECT_NOT_PENDING, f"job {job.id} is not pending")
    if decision.attempt != job.attempt:
        return refuse(api.REJECT_WRONG_ATTEMPT, f"job {job.id} is at attempt {job.attempt}")
    if not decision.victims or len({v.job_id for v in decision.victims}) != len(decision.victims):
        return refuse(api.REJECT_MALFORMED, "a preemption names its victims, each once")
    if applier.entry.format >= ONE_AT_A_TIME_FORMAT:
        # Two passes on one stale view may each choose victims for it: the second would stop more jobs
        # than it needs. It preempts again only once what it took was given back (and did not do).
        for earlier in job.preempting:
            victim = read_job(applier.tables, earlier)
            if victim is not None and victim.preempted_by == job.id and victim.state in RUNNING \
                    and not victim.released:
                return refuse(api.REJECT_INFEASIBLE,
                              f"job {job.id} waits for job {earlier} to give back its slots")
    queues = queues_of(applier.tables)
    for named in decision.victims:
        victim = read_job(applier.tables, named.job_id)
        if victim is None or victim.attempt != named.attempt:
            return refuse(api.REJECT_WRONG_ATTEMPT,
                          f"victim {named.job_id} is not at attempt {named.attempt}")
        if not preemption.may_take(job, victim, queues, applier.stamp_ms):
            return refuse(api.REJECT_INFEASIBLE, f"job {job.id} may not preempt job {victim.id} now")
    return None


def take(applier: Applier, decision: api.PreemptDecision) -> None:
    """The preemption is accepted: each victim on its way to SSUSP or a requeue; the preemptor waits."""
    job = read_job(applier.tables, decision.job_id)
    assert job is not None
    queues = queues_of(applier.tables)
    for named in decision.victims:
        victim = read_job(applier.tables, named.job_id)
        assert victim is not None
        queue = queues[victim.spec.queue]
        victim.preemptions += 1
        victim.preempted_by = job.id
        victim.modify_time_ms = applier.stamp_ms
        if queue.preempt_action == api.PREEMPT_REQUEUE:
            victim.kill_requested = True
            victim.requeue_requested = True
        else:
            victim.state = api.SSUSP
            victim.pending_reason = f"preempted by job {job.id}: stopping (its slots held until it has)"
        applier.put_job(victim)
    job.ClearField("preempting")
    job.preempting.extend(v.job_id for v in decision.victims)
    job.pending_code = api.PEND_PREEMPTION_PENDING
    job.pending_reason = (f"preemption pending: waiting for job{'s' if len(job.preempting) > 1 else ''} "
                          f"{', '.join(map(str, job.preempting))} to give back their slots")
    job.modify_time_ms = applier.stamp_ms
    applier.put_job(job)


def stopped(applier: Applier, job: api.Job) -> bool:
    """Its worker says the suspended victim's processes are stopped: its slots (and the consumables its
    queue lists) go back. False if there is nothing to give back (not a victim, or given already)."""
    if job.state != api.SSUSP or not job.preempted_by or job.released:
        return False
    queue = read_queue(applier.tables, job.spec.queue)
    listed = set(queue.preemptable_resources) if queue is not None else set()
    for part in feasibility.allocation_of(job):
        host = read_host(applier.tables, part.host)
        invariant(host is not None, f"job {job.id} holds slots on {part.host!r}, which has no record")
        assert host is not None
        resources = {name: amount for name, amount in sorted(part.resources.items()) if name in listed}
        invariant(host.slots_used >= part.slots,
                  f"job {job.id} gives back {part.slots} slots on {part.host}: {host.slots_used} in use")
        host.slots_used -= part.slots
        for name, amount in resources.items():
            left = host.reserved[name] - amount
            invariant(left >= 0, f"job {job.id} gives back {amount} {name} on {part.host}: too much")
            if left:
                host.reserved[name] = left
            else:
                del host.reserved[name]
        applier.put_host(host)
        job.released.add(host=part.host, slots=part.slots, resources=resources)
    job.pending_reason = f"preempted by job {job.preempted_by}: suspended; resumes when its slots are free"
    if applier.entry.format >= ONE_AT_A_TIME_FORMAT:
        job.stopped_at_ms = applier.stamp_ms  # from here its slots are another's: not charged to it
    return True


def resume_refusal(usage: CommittedUsage, job: api.Job, host: str, hosts: Sequence[api.HostSlots],
                   entry_format: int = PREEMPT_FORMAT) -> api.DecisionOutcome | None:
    """A DISPATCH of a suspended victim: its own allocation, and room for what it gave back; not one
    on its way out (format 13: it would take slots back to be killed)."""
    if entry_format >= ONE_AT_A_TIME_FORMAT and (job.kill_requested or job.requeue_requested):
        return api.DecisionOutcome(code=api.REJECT_NOT_PENDING,
                                   message=f"job {job.id} is being killed: it does not resume")
    mine = [(part.host, part.slots) for part in feasibility.allocation_of(job)]
    asked = [(h.host, h.slots) for h in hosts] or [(host, job.spec.slots)]
    if asked != mine or host != job.host:
        return api.DecisionOutcome(code=api.REJECT_MALFORMED, message=f"job {job.id} resumes where it is: "
                                   f"{', '.join(f'{h}*{n}' for h, n in mine)}")
    for part in job.released:
        state = usage.host(part.host)
        if state is None or not state.available:
            return api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=api.PEND_HOSTS_UNAVAILABLE,
                                       message=f"host {part.host} is unavailable")
        if state.slots - state.used < part.slots:
            return api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=api.PEND_NO_FREE_SLOTS,
                                       message=f"host {part.host} has {state.slots - state.used} free slots; "
                                               f"job {job.id} takes back {part.slots}")
        for name, amount in part.resources.items():
            if state.totals.get(name, 0) - state.reserved.get(name, 0) < amount:
                return api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=api.PEND_NO_FREE_RESOURCES,
                                           message=f"host {part.host} lacks {amount} {name} for job {job.id}")
    return None


def resume(applier: Applier, usage: CommittedUsage, job: api.Job) -> None:
    """Take back what the suspended victim gave back; it runs again (its worker continues it)."""
    for part in job.released:
        host = usage.host_record(part.host)
        assert host is not None  # resume_refusal found it
        host.slots_used += part.slots
        invariant(host.slots_used <= host.spec.slots,
                  f"host {part.host} over its slots: {host.slots_used} of {host.spec.slots}")
        for name, amount in part.resources.items():
            host.reserved[name] += amount
        applier.put_host(host)
    job.ClearField("released")
    if job.stopped_at_ms:
        job.suspended_ms += max(0, applier.stamp_ms - job.stopped_at_ms)
        job.stopped_at_ms = 0
    job.state = api.RUN
    job.preempted_by = 0
    job.pending_reason = ""
    job.modify_time_ms = applier.stamp_ms
    applier.put_job(job)
