"""What a pass derives of a waiting job that holds as long as its record does not change.

Theory of operation. Every pass reads the same fields of every waiting job:
whether it is pending or suspended, its place in its queue's first-come
order, whether it waits for anything of its own, whether it asks for nothing
but slots (the plain lane: scheduler/plain_lane.py), its queue, slots, what
its limits read, its committed reason. Reading a field of a parsed record
costs as much as a dictionary lookup, and a job waits through many passes,
so the scheduler's view (scheduler/view.py: View.digests) makes a job's
Digest once, when its record is parsed, and keeps it while the record stays
the same object; a pass given them reads no field of a job that takes the
plain lane or that it leaves waiting at its queue's or the dispatch cap's
reason. A pass without them (a test, a first look) makes them as it goes.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from xce.v1 import api_pb2 as api

# What a job's limits read of it (scheduler/gates.py): queue, user, project, least slots, array, its array's
# limit, job group. Jobs with the same are refused alike.
LimitKey = tuple[str, str, str, int, int, int, str]
OTHER, PENDING, SUSPENDED = 0, 1, 2  # what a pass does with the job: nothing (an array's record), ...


class Digest(NamedTuple):
    rank: int  # the FCFS picker's order within one queue, in one number: see `rank`
    id: int
    attempt: int
    job: api.Job
    queue: str
    kind: int  # OTHER, PENDING or SUSPENDED
    free: bool  # it waits for nothing of its own (gates.waits would let it through, but for a recovery)
    slots: int
    least: int  # the fewest slots it may run with (-n min,max's min, else its slots)
    lane: int  # its slots, if it asks for nothing but slots and waits for nothing; else 0
    array_limit: int  # its array's limit of elements running at once (0: none)
    limits: LimitKey
    pending_code: int  # its committed pending reason (a pass proposes a new one only if it differs)
    pending_reason: str


def digest(job: api.Job) -> Digest:
    spec = job.spec
    state = job.state
    kind = SUSPENDED if state == api.SSUSP else PENDING if state == api.PEND and not spec.HasField(
        "array") else OTHER
    slots = spec.slots
    # Each of these may make the job wait, whatever the hosts (scheduler/gates.py: waits): a chunk's lead,
    # -w, a start's backoff, -b, -t, hosts it ran on gone silent.
    free = not (job.chunk_lead or (spec.depend and job.depend_state != api.DEPEND_SATISFIED)
                or (job.attempt and job.not_before_ms) or spec.begin_time_ms or spec.term_time_ms
                or job.stray_hosts)
    # ... and each of these sends it the general way to its hosts: a requirement of hosts (-R, -m, -x, -U,
    # -n min,max, a host that refused its owner), an array's limit. What its queue asks is the pass's to read.
    plain = free and kind == PENDING and slots >= 1 and not (
        spec.resource_req or spec.hosts or spec.exclusive or spec.reservation or spec.min_slots > 0
        or job.array_limit or (job.attempt and job.refused_owner))
    least = spec.min_slots if spec.min_slots > 0 else slots  # (feasibility.least_slots)
    queue = spec.queue
    return Digest(rank(spec.priority, job.submit_time_ms, job.id), job.id, job.attempt, job, queue, kind,
                  bool(free), slots, least, slots if plain else 0, job.array_limit,
                  (queue, spec.user, spec.project, least, job.array_id, job.array_limit, spec.job_group),
                  job.pending_code, job.pending_reason)


def rank(priority: int, submit_time_ms: int, job_id: int) -> int:
    """(-priority, submit time, id) in one integer, ordered alike (the stamp is a signed, the id an
    unsigned 64-bit number): sorting by one number is twice as fast as by a tuple."""
    return (-priority << 128) + (submit_time_ms << 64) + job_id


class Digests:
    """The digests of a set of jobs by id, each kept while its job is the same record (object)."""

    def __init__(self, jobs: Iterable[api.Job] = ()) -> None:
        self._by_id: dict[int, Digest] = {}
        self.reset(jobs)

    def reset(self, jobs: Iterable[api.Job]) -> None:
        """The digests of these jobs only."""
        self._by_id.clear()
        for job in jobs:
            self.put(job)

    def put(self, job: api.Job) -> Digest:
        made = self._by_id[job.id] = digest(job)
        return made

    def drop(self, job_id: int) -> None:
        self._by_id.pop(job_id, None)

    def of(self, job: api.Job) -> Digest:
        """The job's digest: the kept one if made of this very record."""
        kept = self._by_id.get(job.id)
        if kept is not None and kept.job is job:
            return kept
        return self.put(job)

    def waiting(self, jobs: Iterable[api.Job]) -> tuple[list[Digest], list[api.Job]]:
        """(the pending jobs' digests, the suspended jobs), in one read of the jobs (their kind: see
        `digest`)."""
        by_id, put = self._by_id, self.put
        pending: list[Digest] = []
        suspended: list[api.Job] = []
        for job in jobs:
            made = by_id.get(job.id)
            if made is None or made.job is not job:
                made = put(job)
            if (kind := made.kind) == PENDING:
                pending.append(made)
            elif kind == SUSPENDED:
                suspended.append(job)
        return pending, suspended

    def __iter__(self) -> Iterator[Digest]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)
