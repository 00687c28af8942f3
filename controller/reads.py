"""Reads, answered from a replica's applied state: jobs, queues, hosts (the gRPC layer first waits for
the read barrier, replica.read_barrier, unless the request is `stale`).

Each answer carries the revision it reflects. A filtered ListJobs reads
through the secondary indexes (fsm/job_index.py) when a filter names a user,
a queue or states; history is read by history_reads.py. Pure functions over the state
tables; a bad request raises ServiceError. The gRPC adapter (grpc_api.py)
runs the potentially long ones (ListJobs) off the event loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from controller import fsm
from controller.fsm import job_index
from controller.tables import Tables
from xce import job_filter
from xce.errors import ServiceError, invalid
from xce.rules import fairshare, feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

MAX_PAGE_SIZE = 5000
MAX_PAGE_BYTES = 4 << 20  # a page ends once past it (a job may be ~1 MiB: under the 16 MiB of a message)
DEFAULT_PAGE_SIZE = 500


# What the caller is shown of a job: the job, redacted as it may see it; None: not at all.
Viewer = Callable[[api.Job], "api.Job | None"]


def as_is(job: api.Job) -> api.Job | None:
    return job


def get_job(tables: Tables, request: api.GetJobRequest, viewer: Viewer = as_is) -> api.JobResponse:
    job, wanted = fsm.arrays.find_target(tables, request.job_id)
    if wanted is not None:
        if len(wanted) != 1 or wanted[0].start != wanted[0].end:
            raise invalid(f"one element at a time: {job.id}[42], not {request.job_id[:80]!r}")
        job = fsm.arrays.element_view(tables, job, wanted[0].start)
    shown = viewer(job)
    if shown is None:  # the same answer as for a job that does not exist: nothing to learn
        raise ServiceError(log.NOT_FOUND, f"no job {request.job_id}")
    return api.JobResponse(job=shown, revision=fsm.read_meta(tables).applied_index)


class JobListing:
    """A checked ListJobs request: its filters, page size and where the page starts."""

    def __init__(self, request: api.ListJobsRequest, viewer: Viewer = as_is) -> None:
        self.viewer = viewer
        try:
            self.filters = [job_filter.parse(f) for f in request.filters]
        except job_filter.FilterError as exc:
            raise invalid(str(exc)) from None
        if request.page_size < 0:
            raise invalid("page_size must not be negative")
        self.size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        token = request.page_token
        if token and not (token.isascii() and token.isdecimal() and len(token) <= 19
                          and int(token) < fsm.MAX_JOB_ID):
            raise invalid("bad page_token")
        self.after = int(token or 0)

    def _index(self) -> list[bytes] | None:
        """Prefixes of job_index that hold every match (of the most selective kind of
        filter: user, then queue, then state); None: every job must be looked at."""
        for field in job_index.INDEXED[::-1]:
            for f in self.filters:
                if f.field == field and f.op in ("eq", "in"):
                    values = sorted(f.value) if f.op == "in" else [f.value]
                    return [job_index.prefix(field, value) for value in values]
        return None

    def _candidates(self, tables: Tables) -> Iterator[api.Job]:
        prefixes = self._index()
        if prefixes is None:
            for _, raw in tables.scan("jobs", fsm.job_key(self.after + 1)):
                yield api.Job.FromString(raw)
            return
        for job_id in heapq.merge(*(job_index.ids(tables, p, self.after) for p in prefixes)):
            job = fsm.read_job(tables, job_id)
            if job is not None:
                yield job

    def read(self, tables: Tables) -> api.ListJobsResponse:
        """A page of at most `size` jobs and about MAX_PAGE_BYTES (jobs with large environments or job
        scripts, as bsub copies them: 500 of 33 KB would pass the 16 MiB a message may be)."""
        response = api.ListJobsResponse(revision=fsm.read_meta(tables).applied_index)
        size = 0
        for job in self._candidates(tables):
            if not job_filter.matches_all(self.filters, job):
                continue
            shown = self.viewer(job)
            if shown is None:
                continue
            if len(response.jobs) == self.size or response.jobs and size >= MAX_PAGE_BYTES:
                response.next_page_token = str(response.jobs[-1].id)
                break
            response.jobs.append(shown)
            size += shown.ByteSize()
        return response


def list_queues(tables: Tables) -> api.ListQueuesResponse:
    meta = fsm.read_meta(tables)
    queues = [api.Queue.FromString(raw) for _, raw in tables.scan("queues")]
    queues.sort(key=lambda q: (-q.priority, q.name))
    defs = [api.Limit.FromString(raw) for _, raw in tables.scan("limits")]
    used = {}
    for key, _ in tables.scan("counters", b"limit/"):
        if not key.startswith(b"limit/"):
            break
        used[key.decode()] = fsm.read_counter(tables, key.decode())
    shares = []
    for key, raw in tables.scan("share_usage"):
        record = api.ShareUsage.FromString(raw)
        record.queue, record.project, record.user = fairshare.split_key(key)
        shares.append(record)
    return api.ListQueuesResponse(queues=queues, default_queue=meta.default_queue,
                                  revision=meta.applied_index, limits=defs, limit_used=used,
                                  share_usage=shares, user_groups=meta.user_groups)


def pending_of(tables: Tables, user: str, enough: int) -> int:
    """`user`'s pending jobs (PEND, PSUSP; an array's pending elements each), counted up to `enough`."""
    count = 0
    for job_id in job_index.ids(tables, job_index.prefix("user", user)):
        job = fsm.read_job(tables, job_id)
        if job is None or job.array_id:  # an element is counted by its array's record
            continue
        if fsm.arrays.is_array(job):
            count += sum(n for state, n in enumerate(job.array.counts) if state in fsm.PENDING)
        elif job.state in fsm.PENDING:
            count += 1
        if count >= enough:
            return count
    return count


def list_hosts(tables: Tables) -> api.ListHostsResponse:
    hosts = [api.Host.FromString(raw) for _, raw in tables.scan("hosts")]
    meta = fsm.read_meta(tables)
    shared = [api.SharedResource.FromString(raw) for _, raw in tables.scan("shared")]
    used = {r.name: fsm.read_counter(tables, feasibility.shared_counter(r.name)) for r in shared}
    return api.ListHostsResponse(hosts=hosts, revision=meta.applied_index, groups=meta.host_groups,
                                 shared=shared, shared_used=used,
                                 reservations=fsm.reservations.every(tables))
