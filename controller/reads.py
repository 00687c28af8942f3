"""Reads, answered from a replica's applied state: jobs, queues, hosts (the gRPC layer first waits for
the read barrier, replica.read_barrier, unless the request is `stale`).

Each answer carries the revision it reflects. Pure functions over the state
tables; a bad request raises ServiceError. The gRPC adapter (grpc_api.py)
runs the potentially long ones (ListJobs) off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from controller import fsm, job_filter
from controller.tables import Tables
from xce.errors import ServiceError, invalid
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

MAX_PAGE_SIZE = 5000
DEFAULT_PAGE_SIZE = 500


# What the caller is shown of a job: the job, redacted as it may see it; None: not at all.
Viewer = Callable[[api.Job], "api.Job | None"]


def _as_is(job: api.Job) -> api.Job | None:
    return job


def get_job(tables: Tables, request: api.GetJobRequest, viewer: Viewer = _as_is) -> api.JobResponse:
    job = fsm.find_job(tables, request.job_id)
    shown = viewer(job)
    if shown is None:  # the same answer as for a job that does not exist: nothing to learn
        raise ServiceError(log.NOT_FOUND, f"no job {request.job_id}")
    return api.JobResponse(job=shown, revision=fsm.read_meta(tables).applied_index)


class JobListing:
    """A checked ListJobs request: its filters, page size and where the page starts."""

    def __init__(self, request: api.ListJobsRequest, viewer: Viewer = _as_is) -> None:
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

    def read(self, tables: Tables) -> api.ListJobsResponse:
        response = api.ListJobsResponse(revision=fsm.read_meta(tables).applied_index)
        for _, raw in tables.scan("jobs", fsm.job_key(self.after + 1)):
            job = api.Job.FromString(raw)
            if not job_filter.matches_all(self.filters, job):
                continue
            shown = self.viewer(job)
            if shown is None:
                continue
            if len(response.jobs) == self.size:
                response.next_page_token = str(response.jobs[-1].id)
                break
            response.jobs.append(shown)
        return response


def list_queues(tables: Tables) -> api.ListQueuesResponse:
    meta = fsm.read_meta(tables)
    queues = [api.Queue.FromString(raw) for _, raw in tables.scan("queues")]
    queues.sort(key=lambda q: (-q.priority, q.name))
    return api.ListQueuesResponse(queues=queues, default_queue=meta.default_queue,
                                  revision=meta.applied_index)


def list_hosts(tables: Tables) -> api.ListHostsResponse:
    hosts = [api.Host.FromString(raw) for _, raw in tables.scan("hosts")]
    return api.ListHostsResponse(hosts=hosts, revision=fsm.read_meta(tables).applied_index)
