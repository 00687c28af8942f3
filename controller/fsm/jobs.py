"""Jobs: submit, the control actions (a table), modify, and the end of an instance.

Control actions follow one table, `CONTROL`: for each action, the states it
is allowed from and what it does there (docs/architecture/jobs.md,
"Job actions"). A running job cannot be ended by a table lookup alone: kill and
requeue set flags, the worker ends the process group, and its report (or
the loss of its host) ends the attempt (reports.py, hosts.py), through
`requeue_ended` and `settle_lost` here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from controller.fsm import arrays, audit, chunks, refusals
from controller.fsm.applier import Applier
from controller.fsm.holdings import release
from controller.fsm.records import FINISHED, PENDING, RUNNING, find_job, next_attempt, readable_id
from controller.fsm.validation import DEFAULT_QUEUE, check_modify, check_spec
from controller.fsm.versions import ARRAY_FORMAT, CHECKPOINT_FORMAT, HISTORY_FORMAT, LSF_FORMAT
from xce.errors import ServiceError, invalid
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

SIGKILL = 9
# The exit code of a job killed with SIGKILL (a shell's 128 + signal), also
# given to a job killed before it ran.
EXIT_KILLED = 128 + SIGKILL
# What an attempt leaves on the job; cleared when the job goes back to PEND.
INSTANCE_FIELDS = ("exit_code", "end_time_ms", "start_time_ms", "kill_requested", "requeue_requested", "pid",
                   "term_signal", "exit_status_unknown", "usage", "host", "state_before_unknown", "holds",
                   "allocation", "parts_ended", "exit_reason", "usage_now", "usage_time_ms", "preempted_by",
                   "released", "suspended_ms", "stopped_at_ms", "checkpoints", "checkpoint_time_ms",
                   "reservation_serial", "chunk_lead", "chunk")


@dataclass(frozen=True)
class Transition:
    to: api.JobState
    reason: str = ""
    requeue: bool = False          # back to PEND now, attempt + 1
    kill_requested: bool = False
    code: api.PendingReason = api.PENDING_REASON_UNSPECIFIED
    requeue_requested: bool = False  # back to PEND once the running instance has ended
    checkpoint: bool = False       # count a checkpoint (its worker sends the job's -k signal)


HELD_AT_SUBMIT = "held at submission (bsub -H)"
_REQUEUED = Transition(api.PEND, "requeued", requeue=True, code=api.PEND_REQUEUED)

# action -> state -> transition; a state missing from an action's row is refused.
CONTROL: dict[int, dict[int, Transition]] = {
    api.KILL: {api.PEND: Transition(api.EXIT), api.PSUSP: Transition(api.EXIT),
               **{s: Transition(s, kill_requested=True) for s in RUNNING}},
    api.STOP: {api.PEND: Transition(api.PSUSP, "stopped by user", code=api.PEND_JOB_HELD),
               api.RUN: Transition(api.USUSP), api.SSUSP: Transition(api.USUSP)},
    api.RESUME: {api.USUSP: Transition(api.RUN), api.PSUSP: Transition(api.PEND)},
    api.HOLD: {api.PEND: Transition(api.PSUSP, "held by user", code=api.PEND_JOB_HELD)},
    api.RELEASE: {api.PSUSP: Transition(api.PEND)},
    # Like LSF's brequeue: a running instance is killed first, and the job is
    # pending again only once that instance has ended (its slots held until
    # then), so the next attempt can never run beside it.
    api.REQUEUE: {**{s: _REQUEUED for s in FINISHED},
                  **{s: Transition(s, kill_requested=True, requeue_requested=True) for s in RUNNING}},
    # Like LSF's bchkpnt: a running job is sent its -k signal (entry format 17); it goes on running.
    api.CHECKPOINT: {api.RUN: Transition(api.RUN, checkpoint=True)},
}


def check_control(job: api.Job, action: api.ControlAction,
                  entry_format: int = CHECKPOINT_FORMAT) -> Transition:
    table = CONTROL.get(action)
    if table is None or (action == api.CHECKPOINT and entry_format < CHECKPOINT_FORMAT):
        raise invalid(f"unknown control action {action}")  # what code before format 17 said
    if action == api.CHECKPOINT and not job.spec.checkpoint_signal:
        raise ServiceError(log.FAILED_PRECONDITION, f"job {job.id} is not checkpointable: submit it with -k")
    # A kill asked twice is refused; a kill after a requeue turns it into a kill.
    being_killed = job.state in RUNNING and job.kill_requested \
        and (action == api.REQUEUE or not job.requeue_requested)
    # A preempted job is stopped and resumed by the scheduler (preempt.py): a user's stop or resume
    # would take it out of that, and its slots are the preemptor's.
    preempted = job.preempted_by and job.state == api.SSUSP and action in (api.STOP, api.RESUME)
    if job.state not in table or (action in (api.KILL, api.REQUEUE) and being_killed) or preempted:
        raise ServiceError(log.FAILED_PRECONDITION,
                           f"cannot {api.ControlAction.Name(action).lower()} job {job.id} "
                           f"in state {api.JobState.Name(job.state)}")
    return table[job.state]


def clear_instance(job: api.Job) -> None:
    """What its last attempt left, and what its refused starts left (a requeue is a fresh try; those
    fields are set from entry format 19 only, so clearing them changes nothing before)."""
    for name in INSTANCE_FIELDS:
        job.ClearField(name)
    for name in refusals.START_FIELDS:
        job.ClearField(name)


def apply_submit(applier: Applier) -> list[log.Result]:
    batch = applier.entry.submit
    by = list(batch.by)
    return [audit.audited(applier, request.request_id, request.audit if request.HasField("audit") else None,
                          by[i] if i < len(by) else None, functools.partial(_submit_one, applier, request))
            for i, request in enumerate(batch.requests)]


def _submit_one(applier: Applier, request: api.SubmitJobsRequest) -> log.Result:
    meta, tables, entry = applier.meta, applier.tables, applier.entry
    if not request.jobs:
        raise invalid("no jobs in the request")
    # All or nothing: check every spec first. Each check reads its queue, which is cheap, and a long
    # apply keeps its Raft node heard only between table operations (store._PulsingTables).
    for spec in request.jobs:
        check_spec(tables, meta, spec, entry.format)
        if spec.HasField("array"):
            if entry.format < ARRAY_FORMAT:
                raise invalid(f"job arrays need entry format {ARRAY_FORMAT}")
            arrays.check_submit(spec, arrays.MAX_SIZE, entry.format)
    result = log.Result(code=log.OK)
    for spec in request.jobs:
        job_id = meta.next_job_id or 1
        meta.next_job_id = job_id + 1
        job = api.Job(id=job_id, spec=spec, state=api.PEND, submit_time_ms=entry.stamp_ms,
                      modify_time_ms=entry.stamp_ms, request_id=request.request_id,
                      readable_id=readable_id(meta.cluster_id, entry.proposer, entry.stamp_ms, job_id))
        if not job.spec.queue:
            job.spec.queue = meta.default_queue or DEFAULT_QUEUE
        if not job.spec.HasField("slots"):
            job.spec.slots = 1
        held = spec.hold and entry.format >= LSF_FORMAT
        if spec.HasField("array"):
            arrays.submit(applier, job)  # written, with its first elements, at the entry's end
            if held:
                _control_array(applier, job, None, api.HOLD)
        else:
            if held:  # bsub -H: as a hold right after the submit
                transition = CONTROL[api.HOLD][api.PEND]
                job.state, job.pending_code = transition.to, transition.code
                job.pending_reason = HELD_AT_SUBMIT
            applier.put_job(job)
        result.job_ids.append(job_id)
    return result


def apply_control(applier: Applier) -> list[log.Result]:
    request = applier.entry.control

    def body() -> log.Result:
        in_history = applier.entry.format >= HISTORY_FORMAT
        if applier.entry.format >= ARRAY_FORMAT:
            job, wanted = arrays.find_target(applier.tables, request.job_id, in_history, applier.entry.format)
            if arrays.is_array(job):
                return _control_array(applier, job, wanted, request.action)
        else:
            job = find_job(applier.tables, request.job_id, in_history=in_history)
        _control_one(applier, job, check_control(job, request.action, applier.entry.format))
        return log.Result(code=log.OK, job_ids=[job.id])

    return [_audited(applier, request, body)]


def _control_one(applier: Applier, job: api.Job, transition: Transition) -> None:
    job.state = transition.to
    job.modify_time_ms = applier.stamp_ms
    job.pending_reason = transition.reason if transition.to in PENDING else ""
    job.pending_code = transition.code if transition.to in PENDING else api.PENDING_REASON_UNSPECIFIED
    job.ClearField("refused_host")
    if transition.kill_requested:
        job.kill_requested = True
        job.requeue_requested = transition.requeue_requested
    if transition.requeue:
        job.attempt = next_attempt(job)
        clear_instance(job)
    if transition.checkpoint:
        job.checkpoints += 1
        job.checkpoint_time_ms = applier.stamp_ms
    if transition.to == api.EXIT:
        job.end_time_ms = applier.stamp_ms
        job.exit_code = EXIT_KILLED  # like a job killed with SIGKILL before it ran
    applier.put_job(job)


def _control_array(applier: Applier, record: api.Job, wanted: list[api.IndexRange] | None,
                   action: api.ControlAction) -> log.Result:
    """An action on a whole array or a selection: each selected element it applies to."""
    if action not in CONTROL or (action == api.CHECKPOINT and applier.entry.format < CHECKPOINT_FORMAT):
        raise invalid(f"unknown control action {action}")
    arrays.load(applier, record.id)
    record = applier.arrays[record.id]
    planned = arrays.plan_runs(record, action, wanted)  # first: a refusal must find nothing changed
    changed = 0
    # Only a requeue reaches finished elements: the others skip them without reading them.
    for job in arrays.selected_jobs(applier.tables, record, wanted, finished=action == api.REQUEUE):
        try:
            transition = check_control(job, action, applier.entry.format)
        except ServiceError:
            continue  # an element in a state the action does not apply to is left as it is
        _control_one(applier, job, transition)
        changed += 1
    moved = arrays.commit_runs(record, planned)
    if not changed and not moved:
        raise ServiceError(log.FAILED_PRECONDITION,
                           f"no element of array {record.id} selected can be "
                           f"{api.ControlAction.Name(action).lower()}ed now")
    return log.Result(code=log.OK, job_ids=[record.id])  # the elements' ids would make a large result


def kill_array(applier: Applier, record: api.Job) -> None:
    """Every element of an array that a kill reaches (a -w condition that can never hold)."""
    _control_array(applier, record, None, api.KILL)


def apply_modify(applier: Applier) -> list[log.Result]:
    request = applier.entry.modify

    def body() -> log.Result:
        in_history = applier.entry.format >= HISTORY_FORMAT
        if applier.entry.format >= ARRAY_FORMAT:
            job, wanted = arrays.find_target(applier.tables, request.job_id, in_history, applier.entry.format)
            if arrays.is_array(job):
                return _modify_array(applier, job, wanted, request)
        else:
            job = find_job(applier.tables, request.job_id, in_history=in_history)
        check_modify(applier.tables, job, request, applier.entry.format)
        _modify_one(applier, job, request)
        return log.Result(code=log.OK, job_ids=[job.id])

    return [_audited(applier, request, body)]


def _audited(applier: Applier, request: api.ControlJobRequest | api.ModifyJobRequest,
             body: Callable[[], log.Result]) -> log.Result:
    entry = applier.entry
    return audit.audited(applier, request.request_id, request.audit if request.HasField("audit") else None,
                         entry.by if entry.HasField("by") else None, body)


def _modify_one(applier: Applier, job: api.Job, request: api.ModifyJobRequest) -> None:
    _modify_spec(job.spec, request)
    if job.chunk_lead:  # changed, it is not alike any more: out of its chunk, as LSF takes it
        chunks.leave(job)
    job.modify_time_ms = applier.stamp_ms
    applier.put_job(job)


def _modify_spec(spec: api.JobSpec, request: api.ModifyJobRequest) -> None:
    if request.HasField("priority"):
        spec.priority = request.priority
    if request.HasField("queue"):
        spec.queue = request.queue
    if request.HasField("resource_req"):
        spec.resource_req = request.resource_req


def _modify_array(applier: Applier, record: api.Job, wanted: list[api.IndexRange] | None,
                  request: api.ModifyJobRequest) -> log.Result:
    """A modify of a whole array changes its template (the elements still inside the record) and
    every element job it applies to; of a selection, the selected elements, made jobs first."""
    # The record's state says RUN while any element runs; what a modify may do depends on whether
    # any is still pending or held.
    as_checked = api.Job(id=record.id, state=record.state, spec=record.spec)
    if record.array.counts[api.PEND] or record.array.counts[api.PSUSP]:
        as_checked.state = api.PEND
    check_modify(applier.tables, as_checked, request, applier.entry.format)
    arrays.load(applier, record.id)
    record = applier.arrays[record.id]
    if wanted is None:
        _modify_spec(record.spec, request)  # the record is written at the entry's end
    else:
        arrays.materialize_selection(applier, record, wanted)
    changed = 0
    for job in arrays.selected_jobs(applier.tables, record, wanted, finished=False):
        try:
            check_modify(applier.tables, job, request, applier.entry.format)
        except ServiceError:
            continue
        _modify_one(applier, job, request)
        changed += 1
    if not changed and wanted is not None:
        raise ServiceError(log.FAILED_PRECONDITION, f"no element of array {record.id} selected can be "
                                                    "modified now")
    return log.Result(code=log.OK, job_ids=[record.id])


def requeue_ended(applier: Applier, job: api.Job, why: str) -> None:
    """The job's instance has ended (or is given up): what it held comes back,
    and the job is pending again at the next attempt."""
    release(applier, job)
    job.attempt = next_attempt(job)
    clear_instance(job)
    job.state = api.PEND
    job.pending_reason = why
    job.pending_code = api.PEND_REQUEUED
    job.modify_time_ms = applier.stamp_ms
    applier.put_job(job)


def settle_lost(applier: Applier, job: api.Job, why: str) -> None:
    """An instance whose end nobody knows: requeue if rerunnable (and not being
    killed) or if a requeue was asked, else EXIT."""
    if job.requeue_requested or (job.spec.rerunnable and not job.kill_requested):
        requeue_ended(applier, job, f"{why}; requeued" + ("" if job.requeue_requested else " (rerunnable)"))
        return
    release(applier, job)
    stamp = applier.stamp_ms
    job.state = api.EXIT
    job.exit_status_unknown = not job.kill_requested
    job.exit_code = EXIT_KILLED if job.kill_requested else job.exit_code
    job.end_time_ms = stamp
    job.pending_reason = ""
    job.kill_requested = False
    job.modify_time_ms = stamp
    applier.put_job(job)
