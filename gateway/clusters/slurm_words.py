"""Slurm 22.05's words for a job (slurmrestd's v0.0.38 job record) in XCE's: the one table of the
Slurm backend, the inverse of what XCE's own Slurm commands print (docs/SLURM.md, "Slurm's words").

| Slurm job_state | XCE |
|---|---|
| PENDING | PEND; PSUSP when held (JobHeldUser, JobHeldAdmin) |
| REQUEUED, REQUEUE_FED | PEND (PEND_REQUEUED); REQUEUE_HOLD, SPECIAL_EXIT: PSUSP |
| RUNNING, COMPLETING, CONFIGURING, SIGNALING, STAGE_OUT, RESIZING | RUN |
| SUSPENDED, STOPPED | USUSP |
| COMPLETED | DONE |
| CANCELLED | EXIT, exit reason OWNER |
| TIMEOUT | EXIT, RUNLIMIT |
| OUT_OF_MEMORY | EXIT, MEMLIMIT |
| DEADLINE | EXIT, DEADLINE |
| PREEMPTED | EXIT, PREEMPTED |
| NODE_FAIL, BOOT_FAIL | EXIT, its status unknown (its host was lost) |
| FAILED, REVOKED, anything else finished | EXIT |

exit_code is the raw wait status (768: exit 3; 15: signal 15). Times are seconds since the epoch;
a pending job's start and end are Slurm's estimates, not XCE's times, and are left out. Pure.
"""

from __future__ import annotations

import re
from typing import Any

from xce.v1 import api_pb2 as api

STATES: dict[str, tuple[api.JobState, str]] = {
    "PENDING": (api.PEND, ""),
    "REQUEUED": (api.PEND, ""),
    "REQUEUE_FED": (api.PEND, ""),
    "REQUEUE_HOLD": (api.PSUSP, ""),
    "SPECIAL_EXIT": (api.PSUSP, ""),
    "RUNNING": (api.RUN, ""),
    "COMPLETING": (api.RUN, ""),
    "CONFIGURING": (api.RUN, ""),
    "SIGNALING": (api.RUN, ""),
    "STAGE_OUT": (api.RUN, ""),
    "RESIZING": (api.RUN, ""),
    "SUSPENDED": (api.USUSP, ""),
    "STOPPED": (api.USUSP, ""),
    "COMPLETED": (api.DONE, ""),
    "CANCELLED": (api.EXIT, "OWNER"),
    "TIMEOUT": (api.EXIT, "RUNLIMIT"),
    "OUT_OF_MEMORY": (api.EXIT, "MEMLIMIT"),
    "DEADLINE": (api.EXIT, "DEADLINE"),
    "PREEMPTED": (api.EXIT, "PREEMPTED"),
    "NODE_FAIL": (api.EXIT, ""),
    "BOOT_FAIL": (api.EXIT, ""),
    "FAILED": (api.EXIT, ""),
    "REVOKED": (api.EXIT, ""),
}
LOST = frozenset({"NODE_FAIL", "BOOT_FAIL"})
HELD = frozenset({"JobHeldUser", "JobHeldAdmin"})
REASONS: dict[str, api.PendingReason] = {
    "JobHeldUser": api.PEND_JOB_HELD,
    "JobHeldAdmin": api.PEND_JOB_HELD,
    "Resources": api.PEND_NO_FREE_SLOTS,
    "Priority": api.PEND_RESERVATION,
    "Dependency": api.PEND_DEPENDENCY,
    "DependencyNeverSatisfied": api.PEND_DEPENDENCY_NEVER,
    "BeginTime": api.PEND_BEGIN_TIME,
    "PartitionInactive": api.PEND_QUEUE_INACTIVE,
    "PartitionDown": api.PEND_QUEUE_INACTIVE,
    "BadConstraints": api.PEND_NO_HOST_MATCHES,
    "PartitionNodeLimit": api.PEND_NO_HOST_MATCHES,
    "PartitionTimeLimit": api.PEND_NO_HOST_MATCHES,
    "ReqNodeNotAvail": api.PEND_HOSTS_UNAVAILABLE,
    "NodeDown": api.PEND_HOSTS_UNAVAILABLE,
    "Reservation": api.PEND_RESERVATION,
    "JobArrayTaskLimit": api.PEND_LIMIT_REACHED,
}


def reason_code(reason: str) -> api.PendingReason:
    if reason in REASONS:
        return REASONS[reason]
    if reason.startswith(("AssocGrp", "AssocMax", "QOSGrp", "QOSMax", "MaxJobs", "MaxCpu")):
        return api.PEND_LIMIT_REACHED
    return api.PENDING_REASON_UNSPECIFIED


def native_id(record: dict[str, Any]) -> str:
    """Slurm's own id: `17`, or `16_3` for an array's element (its array's id, its index)."""
    task = record.get("array_task_id")
    if isinstance(task, int) and record.get("array_job_id"):
        return f"{record['array_job_id']}_{task}"
    return str(record.get("job_id", 0))


def job_of(record: dict[str, Any], cluster: str) -> api.Job:
    """An api.Job from one slurmrestd v0.0.38 job record."""
    slurm_state = str(record.get("job_state", ""))
    reason = str(record.get("state_reason", "") or "")
    state, exit_reason = STATES.get(slurm_state, (api.EXIT, ""))
    if state == api.PEND and reason in HELD:
        state = api.PSUSP
    spec = api.JobSpec(
        name=_text(record, "name"),
        user=_text(record, "user_name"),
        queue=_text(record, "partition"),
        project=_text(record, "account"),
        slots=_int(record, "cpus") or 1,
        cwd=_text(record, "current_working_directory"),
        stdout_path=_text(record, "standard_output"),
        stderr_path=_text(record, "standard_error"),
        comment=_text(record, "comment"),
    )
    if _text(record, "command"):
        spec.command.extend(["/bin/sh", "-c", _text(record, "command")])
    limit = record.get("time_limit")
    spec.run_limit_s = limit * 60 if isinstance(limit, int) and 0 < limit < 1 << 31 else 0
    memory = _int(record, "memory_per_node") or _int(record, "memory_per_cpu") * spec.slots
    spec.mem_limit_mb = memory if 0 < memory < 1 << 40 else 0
    job = api.Job(
        id=_int(record, "job_id"),
        readable_id=f"{cluster}:{native_id(record)}",
        spec=spec,
        state=state,
        submit_time_ms=_int(record, "submit_time") * 1000,
        exit_reason=exit_reason,
        exit_status_unknown=slurm_state in LOST,
    )
    task = record.get("array_task_id")
    if isinstance(task, int) and record.get("array_job_id"):
        job.array_id, job.array_index = _int(record, "array_job_id"), task
    if state not in (api.PEND, api.PSUSP):
        job.start_time_ms = _int(record, "start_time") * 1000
    if state in (api.DONE, api.EXIT):
        job.end_time_ms = _int(record, "end_time") * 1000
        status = _int(record, "exit_code")
        job.exit_code, job.term_signal = (status >> 8) & 0xFF, status & 0x7F
    else:
        job.pending_reason = reason if reason != "None" else ""
        job.pending_code = reason_code(reason)
    nodes = _text(record, "batch_host") or _first(_text(record, "nodes"))
    job.host = nodes
    return job


def _first(nodes: str) -> str:
    """The first host of a Slurm host list: `n[01-03,7],m1` -> `n01`."""
    found = re.match(r"([^,\[]*)(?:\[([^\],-]*))?", nodes)
    return (found.group(1) + (found.group(2) or "")) if found else ""


def _text(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    return value if isinstance(value, str) else ""


def _int(record: dict[str, Any], key: str) -> int:
    value = record.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def host_of(record: dict[str, Any]) -> api.Host:
    """A node of slurmrestd's /nodes as an XCE host: idle, mixed and allocated nodes are up; a drained
    (or draining) node is closed; down, unknown or not responding ones are unavailable."""
    state = str(record.get("state", "")).lower()
    flags = {str(f).upper() for f in record.get("state_flags") or ()}
    up = state not in ("down", "unknown", "future") and "NOT_RESPONDING" not in flags
    spec = api.HostSpec(
        name=_text(record, "name"), slots=_int(record, "cpus"), memory_mb=_int(record, "real_memory")
    )
    return api.Host(
        spec=spec,
        status=api.HOST_OK if up else api.HOST_UNAVAIL,
        slots_used=_int(record, "alloc_cpus"),
        closed="DRAIN" in flags or state in ("drain", "drained", "draining"),
    )


def queue_of(record: dict[str, Any]) -> api.Queue:
    """A partition as an XCE queue: DRAIN takes no jobs (closed), DOWN starts none (inactive),
    INACTIVE neither."""
    state = str(record.get("state", "UP")).upper()
    return api.Queue(
        name=_text(record, "name"),
        priority=_int(record, "priority_tier"),
        closed=state in ("DRAIN", "INACTIVE"),
        inactive=state in ("DOWN", "INACTIVE"),
        description="default" if "default" in (record.get("flags") or ()) else "",
    )
