"""The configured limits in the state (entry format 11): pushed with InitCluster, kept in the `limits` table.

The `limits` table (name -> api.Limit) is what the scheduler's view and the
commit barrier read (xce/rules/limits.py); the Sync stream carries it. A push
replaces the whole set when its digest differs from the last one applied,
so a restart proposes nothing and an edited file takes effect (badmin
reconfig). Running jobs keep what they hold: their `holds` recorded the
limits' counters as they were when they were placed. From entry format 23 a
push keeps the job groups' limits (`group:/path`, made at run time by the
`job_group` kind: bgadd -L), which the file does not hold.
"""

from __future__ import annotations

from controller.fsm.applier import Applier
from controller.fsm.requests import guarded
from controller.fsm.versions import JOB_GROUP_FORMAT
from xce.errors import ServiceError, invalid
from xce.rules import job_groups, limits
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


def check(init: log.InitCluster) -> None:
    try:
        limits.check(list(init.limits))
    except limits.LimitError as exc:
        raise invalid(str(exc)) from None


def apply_limits(applier: Applier, init: log.InitCluster) -> None:
    meta = applier.meta
    if init.limits_digest == meta.limits_digest:
        return
    wanted = {limit.name.encode(): limit.SerializeToString(deterministic=True) for limit in init.limits}
    if applier.entry.format >= JOB_GROUP_FORMAT:  # job groups' limits: made at run time, not in the file
        for key, raw in applier.tables.scan("limits", job_groups.PREFIX.encode()):
            if not key.startswith(job_groups.PREFIX.encode()):
                break
            wanted[key] = raw
    applier.replace_table("limits", wanted)
    meta.limits_digest = init.limits_digest


def apply_job_group(applier: Applier) -> list[log.Result]:
    """bgadd, bgmod, bgdel: a job group's limit (xce/rules/job_groups.py) made, changed or deleted."""
    request = applier.entry.job_group

    def body() -> log.Result:
        try:
            job_groups.check_path(request.path)
        except job_groups.JobGroupError as exc:
            raise invalid(str(exc)) from None
        if not 0 <= request.limit <= job_groups.MAX_LIMIT:
            raise invalid(f"-L {request.limit}: a job group's limit is from 0 (none) to "
                          f"{job_groups.MAX_LIMIT}")
        key = job_groups.limit_name(request.path).encode()
        raw = applier.tables.get("limits", key)
        current = api.Limit.FromString(raw) if raw is not None else None
        if request.create and current is not None:
            raise ServiceError(log.ALREADY_EXISTS, f"job group {request.path} exists")
        if not request.create and current is None:
            raise ServiceError(log.NOT_FOUND, f"no job group {request.path} (bgadd makes one)")
        if request.delete:
            applier.delete("limits", key)
        else:
            owner = current.owner if current is not None else applier.entry.by.name
            limit = job_groups.limit_of(request.path, request.limit, owner)
            applier.put_raw("limits", key, limit.SerializeToString(deterministic=True))
        return log.Result(code=log.OK)

    return [guarded(request.request_id, applier, body)]
