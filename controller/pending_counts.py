"""How many jobs each user has pending: the leader's index for MAX_PEND_JOBS.

Theory of operation. `[auth] max_pend_jobs_per_user` (LSF's MAX_PEND_JOBS)
refuses a submit that would take a user past that many pending jobs (PEND
or PSUSP). Apply keeps no such count. Adding a counter to apply would make
an existing state's first decrement go below zero, which stops a replica.
So the leader keeps the count in memory instead: one scan of the jobs table
when it first needs it in a leadership, then the job changes of every
applied entry's event. When events were pruned before it read them, the
index is dropped and scanned again on next use. The count is of committed
jobs: submits in flight are not in it, so a user can pass the limit by at
most one group-committed batch. LSF's check is as soft. A job array counts
its pending elements, as LSF counts them (the array's record holds the
counts of its elements by state; an element's own record is not counted).

Pure: the caller hands in tables and events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from controller.fsm import arrays
from controller.fsm.records import PENDING
from controller.tables import Tables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


class PendingCounts:
    def __init__(self) -> None:
        self._owner: dict[int, tuple[str, int]] | None = None  # job -> (owner, pending); None: not built
        self._counts: Counter[str] = Counter()

    def count(self, tables: Tables, user: str) -> int:
        if self._owner is None:
            self._build(tables)
        return self._counts[user]

    @property
    def following(self) -> bool:
        """Built, so following the applied entries (not until a submit held to the limit needed it)."""
        return self._owner is not None

    def applied(self, events: Iterable[log.Event | None]) -> None:
        """The events of entries just applied, in order; None for one already pruned."""
        if self._owner is None:
            return  # built on next use, from the state
        for event in events:
            if event is None:
                self.forget()
                return
            for change in event.changes:
                if change.table == "jobs":
                    self._track(int.from_bytes(change.key, "big"),
                                None if change.deleted else api.Job.FromString(change.value))

    def forget(self) -> None:
        self._owner = None
        self._counts.clear()

    def _build(self, tables: Tables) -> None:
        self._owner, self._counts = {}, Counter()
        for key, raw in tables.scan("jobs"):
            self._track(int.from_bytes(key, "big"), api.Job.FromString(raw))

    def _track(self, job_id: int, job: api.Job | None) -> None:
        assert self._owner is not None
        before = self._owner.pop(job_id, None)
        if before is not None:
            user, pending = before
            self._counts[user] -= pending
            if not self._counts[user]:
                del self._counts[user]
        pending = _pending(job) if job is not None and job.spec.user else 0
        if pending:
            assert job is not None
            self._owner[job_id] = (job.spec.user, pending)
            self._counts[job.spec.user] += pending


def _pending(job: api.Job) -> int:
    if job.array_id:  # an element: its array's record counts it
        return 0
    if arrays.is_array(job):
        return sum(n for state, n in enumerate(job.array.counts) if state in PENDING)
    return 1 if job.state in PENDING else 0
