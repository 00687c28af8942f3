"""Whether a job's record already holds an instance's start as its worker says it.

One rule for both ends of a restated start: the leader acknowledges a start said again without an
entry when the committed record holds it (controller/worker_session.py `restated`), and a worker
answers a repeated RunJob whose record holds its instance's start with no report
(worker/executor.py). Holding it means: running or stopped (not UNKWN, which only the start report
ends), the same nonzero start time and the same pid: fsm/reports.py's `_started` would change
nothing but the record's modify time.
"""

from __future__ import annotations

from xce.v1 import api_pb2 as api

HELD_STATES = (api.RUN, api.USUSP, api.SSUSP)


def holds_start(job: api.Job, started: api.JobStarted) -> bool:
    return job.state in HELD_STATES and started.time_ms != 0 and job.start_time_ms == started.time_ms \
        and job.pid == started.pid
