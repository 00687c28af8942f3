"""A job's timeline (entry format 24): each change of its state after the submit, in its record.

bhist -l shows a job's life event by event (dispatched, suspended, resumed,
requeued, ended), as LSF's does from lsb.events. Here the job's record keeps
them: when a write changes the job's state, apply appends (the entry's
stamp, the new state, the job's host, its attempt) to `timeline`, so the
history's record of a finished job has its whole story, the same on every
replica. A job requeued or suspended many times keeps its first MAX_HEAD
events and its last MAX_TAIL, so a record stays small (bhist counts the
time of the events left out in the state before them).
"""

from __future__ import annotations

from controller.fsm.versions import TIMELINE_FORMAT
from xce.v1 import api_pb2 as api

MAX_HEAD = 8
MAX_TAIL = 24


def note(job: api.Job, before: api.Job | None, stamp_ms: int, entry_format: int) -> None:
    """Called before the job is written: a change of its state since `before` (or, a job back from the
    history, since its last event) is kept."""
    if entry_format < TIMELINE_FORMAT or job.spec.HasField("array"):
        return
    previous = before.state if before is not None else job.timeline[-1].state if job.timeline else None
    if previous is None or previous == job.state:
        return
    timeline = job.timeline
    if len(timeline) >= MAX_HEAD + MAX_TAIL:
        del timeline[MAX_HEAD]
    timeline.add(time_ms=stamp_ms, state=job.state, host=job.host, attempt=job.attempt)
