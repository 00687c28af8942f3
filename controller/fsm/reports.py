"""Workers' reports about (job, attempt): started, finished, dispatch failed.

A report is relayed by the leader with the connection's generation; one from
a connection that is no longer current, or about an attempt committed state
no longer runs there, changes nothing (M3). Only a failed dispatch (a
negative code) sends a job back to PEND, or from entry format 19 ends it if
the refusal was the job's own fault (refusals.py); a success never does. A rerunnable
job its worker killed by the worker-side fence (cut off from the leader for
`fence_s`) goes back to PEND at the next attempt, from entry format 2 on.
"""

from __future__ import annotations

from controller.fsm import preempt, recovery, refusals
from controller.fsm.applier import Applier, each
from controller.fsm.holdings import release
from controller.fsm.jobs import EXIT_KILLED, requeue_ended, settle_lost
from controller.fsm.records import RUNNING, read_host
from controller.fsm.versions import FENCE_FORMAT as FENCE_FORMAT
from controller.fsm.versions import KILLED_FORMAT, PREEMPT_FORMAT, RECOVERY_FORMAT, USAGE_FORMAT
from controller.fsm.versions import PART_FORMAT as PART_FORMAT
from xce.rules import feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


def apply_report(applier: Applier) -> list[log.Result]:
    return [report_one(applier, applier.entry.report)]


def apply_reports(applier: Applier) -> list[log.Result]:
    return each(applier, applier.entry.reports.reports, report_one, "reports")


def report_one(applier: Applier, relayed: log.HostReport) -> log.Result:
    report = relayed.report
    host = read_host(applier.tables, relayed.host)
    job = applier.job(report.job_id)
    if host is None or host.generation != relayed.generation:
        return log.Result(code=log.FAILED_PRECONDITION, message="report from a stale connection")
    applied, kind = _newer_body(applier, job, relayed, report.WhichOneof("body"))
    if applied is not None:
        return applied
    if kind in ("finished", "dispatch_failed") and applier.entry.format >= RECOVERY_FORMAT \
            and recovery.instance_ended(applier, relayed.host, report.job_id, report.attempt):  # if a stray
        job = applier.job(report.job_id)  # its record changed
    if job is None or job.host != relayed.host or job.attempt != report.attempt or job.state not in RUNNING:
        return log.Result(code=log.FAILED_PRECONDITION, message="report about an instance not wanted")
    if kind == "dispatch_failed" and report.dispatch_failed.code >= 0:  # M3: only a failure requeues
        return log.Result(code=log.INVALID_ARGUMENT, message="dispatch failure codes are negative")
    settled = _settled(applier, job, relayed, kind) if kind in ("finished", "dispatch_failed") else None
    if settled is not None:
        return settled
    if kind == "started":
        _started(applier, job, report.started)
    elif kind == "finished":
        _finished(applier, job, report.finished)
    elif kind == "dispatch_failed":
        _dispatch_failed(applier, job, relayed.host, relayed.generation, report.dispatch_failed)
    else:
        return log.Result(code=log.INVALID_ARGUMENT, message="empty report")
    job.modify_time_ms = applier.stamp_ms
    applier.put_job(job)
    return log.Result(code=log.OK, job_ids=[job.id])


def _newer_body(applier: Applier, job: api.Job | None, relayed: log.HostReport,
                kind: str | None) -> tuple[log.Result | None, str | None]:
    """A body a later format added is applied on its own from that format on (its result); to an
    older format, it is an empty report (kind None), except a part's `started`."""
    report = relayed.report
    if kind == "part_ended" or (kind == "started" and report.started.part):
        if applier.entry.format >= PART_FORMAT:
            return _part(applier, job, relayed), kind
        if kind == "part_ended":
            kind = None  # a body older replicas do not know: an empty report to them
    if kind == "usage_now":
        if applier.entry.format >= USAGE_FORMAT:
            return _usage_now(applier, job, relayed), kind
        kind = None
    if kind == "suspended":
        if applier.entry.format >= PREEMPT_FORMAT:
            return _suspended(applier, job, relayed), kind
        kind = None
    return None, kind


def _settled(applier: Applier, job: api.Job, relayed: log.HostReport, kind: str) -> log.Result | None:
    """An end (`finished` or `dispatch_failed`) that settles the instance otherwise than as it
    reports: a requeue asked for, a fenced rerunnable job, an unknown status, a lost instance."""
    report = relayed.report
    if job.requeue_requested:
        requeue_ended(applier, job, "requeued")
    elif kind == "finished" and report.finished.fenced and applier.entry.format >= FENCE_FORMAT \
            and job.spec.rerunnable and not job.kill_requested:
        requeue_ended(applier, job, f"its host {relayed.host} lost the leader for longer than the fence: "
                                    "the worker killed it; requeued")
    elif kind == "finished" and report.finished.status_unknown and job.spec.rerunnable:
        settle_lost(applier, job, f"job ended on {relayed.host} with unknown status")
    elif kind == "dispatch_failed" and job.state == api.UNKWN and applier.entry.format >= RECOVERY_FORMAT:
        # Its worker came back with no record of it: the instance is lost, as with a lost host
        # (requeued only if rerunnable; a dispatch failure would requeue any job, and run a
        # non-rerunnable one that may have run already a second time).
        settle_lost(applier, job, f"host {relayed.host} has no record of it")
    else:
        return None
    return log.Result(code=log.OK, job_ids=[job.id])


def _part(applier: Applier, job: api.Job | None, relayed: log.HostReport) -> log.Result:
    """A report about the job's part on a host of its allocation (its tasks): `started` after a
    re-join says it lives (refused if the job is over there, so the worker is told to kill it);
    `part_ended` adds its tasks' usage to the job's, whatever state the job is in now."""
    report = relayed.report
    hosts = [part.host for part in feasibility.allocation_of(job)] if job is not None else []
    if job is None or job.attempt != report.attempt or relayed.host not in hosts:
        return log.Result(code=log.FAILED_PRECONDITION, message="report about a part not wanted")
    if report.HasField("started"):
        if job.state not in RUNNING:
            return log.Result(code=log.FAILED_PRECONDITION, message="the job is over")
        return log.Result(code=log.OK, job_ids=[job.id])
    if relayed.host in job.parts_ended:  # a repeat (its acknowledgement was lost): counted once
        return log.Result(code=log.OK, job_ids=[job.id])
    job.parts_ended.append(relayed.host)
    _add_usage(job.usage, report.part_ended.usage)
    job.modify_time_ms = applier.stamp_ms
    applier.put_job(job)
    return log.Result(code=log.OK, job_ids=[job.id])


def _usage_now(applier: Applier, job: api.Job | None, relayed: log.HostReport) -> log.Result:
    """A sample of a running job's usage from its first host (M6): kept on the job, for xce job."""
    report = relayed.report
    if job is None or job.host != relayed.host or job.attempt != report.attempt or job.state not in RUNNING:
        return log.Result(code=log.FAILED_PRECONDITION, message="usage of an instance not running")
    job.usage_now.CopyFrom(report.usage_now.usage)
    job.usage_time_ms = report.usage_now.time_ms
    applier.put_job(job)
    return log.Result(code=log.OK, job_ids=[job.id])


def _suspended(applier: Applier, job: api.Job | None, relayed: log.HostReport) -> log.Result:
    """Its worker stopped the instance: a preempted job's slots go to its preemptor now."""
    report = relayed.report
    if job is None or job.host != relayed.host or job.attempt != report.attempt or job.state not in RUNNING:
        return log.Result(code=log.FAILED_PRECONDITION, message="report about an instance not wanted")
    if preempt.stopped(applier, job):
        job.modify_time_ms = applier.stamp_ms
        applier.put_job(job)
    return log.Result(code=log.OK, job_ids=[job.id])


def _started(applier: Applier, job: api.Job, started: api.JobStarted) -> None:
    job.pid = started.pid
    job.start_time_ms = started.time_ms or applier.stamp_ms
    if job.state == api.UNKWN:  # its worker is back and still runs it
        job.state = job.state_before_unknown or api.RUN
        job.ClearField("state_before_unknown")


def _finished(applier: Applier, job: api.Job, finished: api.JobFinished) -> None:
    if finished.term_signal:
        job.term_signal = finished.term_signal
        job.exit_code = 128 + finished.term_signal
    else:
        job.exit_code = finished.exit_code
    job.exit_status_unknown = finished.status_unknown
    ok = job.exit_code == 0 and not finished.status_unknown
    job.state = api.DONE if ok else api.EXIT
    if applier.entry.format >= USAGE_FORMAT and finished.exit_reason:
        job.exit_reason = finished.exit_reason[:32]
    if applier.entry.format >= PART_FORMAT:  # what the job's parts on other hosts reported stays
        _add_usage(job.usage, finished.usage)
        job.usage.wall_s = finished.usage.wall_s
    else:
        job.usage.CopyFrom(finished.usage)
    job.end_time_ms = finished.time_ms or applier.stamp_ms
    if job.kill_requested and not ok and not job.exit_reason and applier.entry.format >= KILLED_FORMAT:
        job.exit_reason = "OWNER"  # (killed: bjobs' TERM_OWNER, sacct's CANCELLED, once the kill is done)
    job.kill_requested = False
    job.ClearField("state_before_unknown")
    release(applier, job)


def _dispatch_failed(applier: Applier, job: api.Job, host: str, generation: int,
                     failed: api.DispatchFailed) -> None:
    release(applier, job)
    if job.kill_requested:  # it was being killed: it ends here, it is not requeued
        job.state = api.EXIT
        job.exit_code = EXIT_KILLED
        job.end_time_ms = applier.stamp_ms
        job.kill_requested = False
    else:  # pending again, or (format 19) ended if the refusal was the job's own fault
        refusals.refused(applier, job, host, generation, failed)
    job.ClearField("state_before_unknown")


def _add_usage(usage: api.Usage, more: api.Usage) -> None:
    """CPU adds up over the job's processes on every host; the peak RSS is the largest one's."""
    usage.user_cpu_s += more.user_cpu_s
    usage.system_cpu_s += more.system_cpu_s
    usage.max_rss_kb = max(usage.max_rss_kb, more.max_rss_kb)
