"""Fair-share usage in the state (entry format 11): each job's slot-time, credited at its end.

The `share_usage` table maps queue \\0 project \\0 user to a ShareUsage (from format 24
the project path ends with the job's user group, `research/@physics`, where
the queue gives groups shares): the
slot-ms its jobs used, decayed with the queue's half-life as of `stamp_ms`
(xce/rules/fairshare.py: `credit`, integer arithmetic, so every replica agrees).
A job of a queue with `fairshare` that ends after it started adds its
slots times its run time (its start and end times, as the job records
them: from entry format 18 the start is the dispatch's until its worker
reports its own, holdings.py), decayed to the entry's stamp. From entry format 13 an
attempt that is requeued adds what it used until the requeue's entry, and
the time a preempted job spent suspended with its slots given back is not
counted (controller/fsm/preempt.py records it in `suspended_ms`). The Sync stream carries the
table: the scheduler decays each record to its pass's time and orders the
queue's jobs (scheduler/picker.py: FairShare). Records are never deleted:
there is one per queue, project and user that ever ran there.
"""

from __future__ import annotations

from controller.fsm.applier import Applier
from controller.fsm.records import FINISHED, RUNNING, read_queue
from controller.fsm.versions import CHARGE_FORMAT, FAIRSHARE_FORMAT, USER_GROUP_FORMAT
from xce.rules import fairshare
from xce.v1 import api_pb2 as api

TABLE = "share_usage"


def follow(applier: Applier, before: api.Job | None, job: api.Job, written: bytes) -> None:
    """After a job write: a job that has just ended credits its queue's fair share; from format 13,
    so does an attempt that was requeued (what it used until the requeue's entry)."""
    if applier.entry.format < FAIRSHARE_FORMAT or (before is not None and before.state in FINISHED):
        return
    if job.state in FINISHED:
        charged, end_ms = job, 0
    elif applier.entry.format >= CHARGE_FORMAT and before is not None and before.state in RUNNING \
            and job.state == api.PEND and job.attempt > before.attempt:
        charged, end_ms = before, applier.stamp_ms
    else:
        return
    if job.spec.HasField("array"):
        return
    # The queue before the amount: most queues have no fair share, and then no amount is needed.
    queue = read_queue(applier.tables, job.spec.queue)
    if queue is None or not queue.HasField("fairshare"):
        return
    amount = fairshare.slot_ms(charged, end_ms)
    if amount <= 0:
        return
    # From format 24 a queue that gives user groups shares charges the job's group (under its project).
    spec = job.spec
    charged_to = fairshare.charge_path(queue.fairshare, spec) if applier.entry.format >= USER_GROUP_FORMAT \
        else fairshare.project_of(spec)
    key = fairshare.usage_key(job.spec.queue, charged_to, job.spec.user)
    raw = applier.tables.get(TABLE, key)
    record = api.ShareUsage() if raw is None else api.ShareUsage.FromString(raw)
    value, stamp = fairshare.credit(record.slot_ms, record.stamp_ms or applier.stamp_ms, applier.stamp_ms,
                                    fairshare.half_life_ms(queue.fairshare), amount)
    applier.put_raw(TABLE, key, api.ShareUsage(slot_ms=value, stamp_ms=stamp).SerializeToString(
        deterministic=True))
