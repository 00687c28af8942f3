"""Job chunks (LSF's CHUNK_JOB_SIZE): short one-slot jobs alike, dispatched to one slot together.

A queue with `chunk_job_size = N` (N >= 2) lets the scheduler dispatch a job
with up to N - 1 others of the same key (queue, owner, requirement, -m,
project, job groups: what decides where they may run and what they count
in) waiting in its chunk: the lead runs, the others wait on its slot (LSF's
WAIT: pending, reason PEND_CHUNK_WAIT) and, as each ends, apply starts the
next there at once, with no pass and no decision in between
(controller/fsm/chunks.py). Only jobs that would fit a chunk are chunked: one
slot, not exclusive, not interactive, in no reservation, not an array's
record, and, where the queue sets `chunk_job_duration_s`, a -W (or -We) no
longer than that (LSF's CHUNK_JOB_DURATION).
"""

from __future__ import annotations

from xce.v1 import api_pb2 as api

Key = tuple[str, str, str, tuple[str, ...], str, str, str]


def size(queue: api.Queue | None) -> int:
    """The queue's chunk size (0: it chunks nothing)."""
    return queue.chunk_job_size if queue is not None and queue.chunk_job_size >= 2 else 0


def chunkable(job: api.Job, queue: api.Queue | None) -> bool:
    spec = job.spec
    if not size(queue) or spec.slots != 1 or spec.min_slots > 1 or spec.exclusive or spec.reservation \
            or spec.HasField("array") or "XCE_INTERACTIVE" in spec.env:
        return False
    assert queue is not None
    longest = queue.chunk_job_duration_s
    return not longest or 0 < (spec.run_limit_s or spec.estimate_s) <= longest


def key(job: api.Job) -> Key:
    spec = job.spec
    return (spec.queue, spec.user, spec.resource_req, tuple(spec.hosts), spec.project, spec.job_group,
            spec.user_group)


def waiting_words(lead: int, host: str) -> str:
    return f"waiting in the chunk of job {lead} on host {host}: it runs there when the jobs before it end"
