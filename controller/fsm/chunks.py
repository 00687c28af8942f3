"""Job chunks in the state (entry format 24): attached at a dispatch, started one after another at apply.

A DISPATCH of a chunk queue's job may name jobs to wait in its chunk
(xce/rules/chunks.py). Apply checks each (pending, alike, dispatchable now,
not in a chunk already; at most the queue's size in all) and attaches it:
`chunk_lead` on it, the lead's `chunk` lists it, its reason PEND_CHUNK_WAIT.
Those that fail the check stay as they were, for a later pass.

When the lead leaves its slot (its write after the end: `follow`), at the
end of the entry (`settle`) the first job still waiting in its chunk is
placed on the lead's host, with every check of a dispatch (the host may be
closed or gone, a limit reached), and takes the rest of the chunk; a job
the checks refuse leaves the chunk (it pends as any job) and the next is
tried. A lead requeued (its host lost) releases its chunk the same way.
Everything read is the state at the entry's end, so every replica starts
the same job: no pass, no decision and no clock between the jobs of a chunk.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.fsm.applier import Applier
from controller.fsm.holdings import CommittedUsage, place
from controller.fsm.records import FINISHED, read_job, read_queue
from controller.fsm.versions import CHUNK_FORMAT
from xce.rules import chunks, feasibility
from xce.v1 import api_pb2 as api


def attach(applier: Applier, lead: api.Job, ids: Iterable[int]) -> None:
    """The dispatched `lead` takes the jobs named to wait in its chunk, as far as they may."""
    queue = read_queue(applier.tables, lead.spec.queue)
    room = chunks.size(queue) - 1
    if room < 1 or not chunks.chunkable(lead, queue) or lead.chunk:
        return
    lead_key, now = chunks.key(lead), applier.stamp_ms
    taken: list[int] = []
    for job_id in ids:
        if len(taken) >= room:
            break
        job = read_job(applier.tables, job_id)
        if job is None or job.id == lead.id or job.id in taken or not _may_wait(job, queue, lead_key, now):
            continue
        job.chunk_lead = lead.id
        job.pending_code = api.PEND_CHUNK_WAIT
        job.pending_reason = chunks.waiting_words(lead.id, lead.host)
        applier.put_job(job)
        taken.append(job.id)
    if taken:
        lead.chunk.extend(taken)
        applier.put_job(lead)


def _may_wait(job: api.Job, queue: api.Queue | None, lead_key: chunks.Key, now_ms: int) -> bool:
    return job.state == api.PEND and not job.chunk_lead and not job.chunk and chunks.chunkable(job, queue) \
        and chunks.key(job) == lead_key and _ready(job, now_ms)


def _ready(job: api.Job, now_ms: int) -> bool:
    """What a dispatch checks of the job itself: its -w holds, its begin time came, its termination
    time did not, no backoff after a failed start, no stray instance."""
    spec = job.spec
    return not job.stray_hosts and (not spec.depend or job.depend_state == api.DEPEND_SATISFIED) \
        and spec.begin_time_ms <= now_ms and not (job.attempt and job.not_before_ms > now_ms) \
        and not (0 < spec.term_time_ms <= now_ms)


# A lead on its slot still: the others (SSUSP too: a preempted lead gave its slot back) let the chunk go.
_ON_ITS_SLOT = (api.RUN, api.USUSP, api.UNKWN)


def follow(applier: Applier, before: api.Job | None, job: api.Job, written: bytes) -> None:
    """After a job write: a chunk's lead that left its slot has its chunk moved on at the entry's end.
    (Its chunk as it was: a requeue clears the record's.)"""
    if before is not None and before.chunk and before.state in _ON_ITS_SLOT \
            and job.state not in _ON_ITS_SLOT and applier.entry.format >= CHUNK_FORMAT:
        applier.chunks_due.append((job.id, tuple(before.chunk)))


def settle(applier: Applier) -> None:
    """The end of an entry: each lead that left its slot passes it to the next of its chunk, or, not
    finished (requeued, preempted), lets its chunk go."""
    while applier.chunks_due:
        lead_id, ids = applier.chunks_due.pop(0)
        lead = read_job(applier.tables, lead_id)
        if lead is None:
            continue
        found = (read_job(applier.tables, i) for i in ids)
        members = [j for j in found if j is not None and j.chunk_lead == lead_id]
        waiting = [j for j in members if j.state == api.PEND]
        for job in members:  # held meanwhile (PSUSP): out of the chunk; released, it pends as any job
            if job.state == api.PSUSP:
                leave(job)
                applier.put_job(job)
        if lead.state in FINISHED:
            _hand_on(applier, lead.host, chunks.key(lead), waiting)
            continue
        for job in waiting:
            leave(job)
            applier.put_job(job)
        if lead.chunk:
            lead.ClearField("chunk")
            applier.put_job(lead)


def _hand_on(applier: Applier, host: str, lead_key: chunks.Key, waiting: list[api.Job]) -> None:
    """The first job of `waiting` that the checks of a dispatch let run on `host` starts there, and the
    rest wait in its chunk; those refused leave the chunk."""
    for position, job in enumerate(waiting):
        usage = CommittedUsage(applier.tables, applier)
        parts = [feasibility.Allocation(host, 1)]
        need = feasibility.job_need(job, usage)
        record = usage.host_record(host)
        if record is None or chunks.key(job) != lead_key or not _ready(job, applier.stamp_ms) or \
                feasibility.check(job, parts, usage, False, need) is not None:
            leave(job)
            applier.put_job(job)
            continue
        rest = waiting[position + 1:]
        job.ClearField("chunk")
        job.chunk.extend(j.id for j in rest)
        place(applier, job, [record], parts, need, usage.limit_defs())  # (it clears chunk_lead)
        for later in rest:
            later.chunk_lead = job.id
            later.pending_reason = chunks.waiting_words(job.id, host)
            applier.put_job(later)
        return


def leave(job: api.Job) -> None:
    """Out of its chunk: it pends as any job (the caller writes it)."""
    job.chunk_lead = 0
    if job.pending_code == api.PEND_CHUNK_WAIT:
        job.pending_reason = ""
        job.ClearField("pending_code")
