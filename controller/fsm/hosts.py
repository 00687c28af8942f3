"""Hosts: joins, status changes by the leader's heartbeat watchdog, hosts given up.

A join updates the host record in place with generation + 1 (M2); every
later status change carries the generation it is about, and one about a
generation that re-joined meanwhile changes nothing. An UNAVAIL host's
running jobs become UNKWN (the state before is kept, restored when its
worker reports again); a host given up (`resolve_host`, after the second
timeout) settles its UNKWN jobs: requeued if rerunnable, else EXIT.
"""

from __future__ import annotations

from controller.fsm import recovery, resources
from controller.fsm.applier import Applier, each
from controller.fsm.jobs import settle_lost
from controller.fsm.records import host_at, host_job_ids, read_host, read_job
from controller.fsm.versions import RECOVERY_FORMAT, RESOURCES_FORMAT
from xce.errors import ServiceError
from xce.host_spec import check_host_spec
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


def apply_join_host(applier: Applier) -> list[log.Result]:
    return [join_one(applier, applier.entry.join_host)]


def apply_joins(applier: Applier) -> list[log.Result]:
    return each(applier, applier.entry.joins.joins, join_one, "joins")


def join_one(applier: Applier, spec: api.HostSpec) -> log.Result:
    try:
        check_host_spec(spec)
    except ServiceError as exc:
        return exc.to_result()
    host = read_host(applier.tables, spec.name) or api.Host()
    host.spec.CopyFrom(spec)
    if applier.entry.format >= RECOVERY_FORMAT:
        host.spec.ClearField("running")  # what runs now is the join's news, not the host's record
        recovery.host_joined(applier, spec)
    if applier.entry.format >= RESOURCES_FORMAT:
        host.ClearField("groups")
        host.groups.extend(resources.groups_of(applier.meta, spec.name))
    host.ClearField("load")  # the old generation's; the new one reports its own
    host.ClearField("load_time_ms")
    host.generation += 1
    host.status = api.HOST_OK
    host.status_time_ms = applier.stamp_ms
    applier.put_host(host)
    return log.Result(code=log.OK, generation=host.generation)


def apply_host_status(applier: Applier) -> list[log.Result]:
    return [status_one(applier, applier.entry.host_status)]


def apply_host_statuses(applier: Applier) -> list[log.Result]:
    return each(applier, applier.entry.host_statuses.changes, status_one, "host status changes")


def status_one(applier: Applier, change: log.SetHostStatus) -> log.Result:
    host = host_at(applier.tables, change.name, change.generation)
    if isinstance(host, log.Result):  # no such host, or it re-joined meanwhile: stale
        return host
    if change.status not in (api.HOST_OK, api.HOST_UNAVAIL):
        return log.Result(code=log.INVALID_ARGUMENT, message=f"bad host status {change.status}")
    if host.status != change.status:
        host.status = change.status
        host.status_time_ms = applier.stamp_ms
        applier.put_host(host)
        if change.status == api.HOST_UNAVAIL:
            _mark_unknown(applier, host.spec.name)
    return log.Result(code=log.OK, generation=host.generation)


def _mark_unknown(applier: Applier, host_name: str) -> None:
    """The host stopped answering: what ran there is UNKWN until it reports again. Only the jobs
    whose command it runs (their first host): a parallel job's other hosts do not report on it."""
    for job_id in host_job_ids(applier.tables, host_name):
        job = read_job(applier.tables, job_id)
        if job is not None and job.host == host_name and job.state in (api.RUN, api.USUSP, api.SSUSP):
            job.state_before_unknown = job.state
            job.state = api.UNKWN
            job.modify_time_ms = applier.stamp_ms
            applier.put_job(job)


def apply_resolve_host(applier: Applier) -> list[log.Result]:
    """The host stayed unavailable past the second timeout: requeue its UNKWN
    jobs marked rerunnable, EXIT the others (their outcome is unknown)."""
    change = applier.entry.resolve_host
    host = read_host(applier.tables, change.name)
    if host is None or host.generation != change.generation or host.status != api.HOST_UNAVAIL:
        return [log.Result(code=log.FAILED_PRECONDITION, message="the host is back or changed")]
    settled = []
    for job_id in host_job_ids(applier.tables, host.spec.name):
        job = read_job(applier.tables, job_id)
        if job is None:
            continue
        if job.host != host.spec.name:
            _lose_part(applier, job, host.spec.name)
            continue
        if job.state != api.UNKWN:
            continue
        settle_lost(applier, job, f"host {host.spec.name} lost")
        settled.append(job.id)
    if applier.entry.format >= RECOVERY_FORMAT:
        recovery.host_resolved(applier, host.spec.name)
    return [log.Result(code=log.OK, job_ids=settled)]


def _lose_part(applier: Applier, job: api.Job, host_name: str) -> None:
    """A host of a parallel job's allocation, not its first, is given up: the job cannot go on whole
    (its tasks there are lost), so its first host kills it, and the end that host reports gives
    every host's part back (requeued if rerunnable, as Slurm requeues a job on NODE_FAIL)."""
    if job.state not in (api.RUN, api.USUSP, api.SSUSP) or job.kill_requested:
        return  # UNKWN: its first host is away too, and settles it
    job.kill_requested = True
    job.requeue_requested = job.requeue_requested or job.spec.rerunnable
    job.modify_time_ms = applier.stamp_ms
    applier.put_job(job)
