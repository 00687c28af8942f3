"""The end of a job's stdout or stderr file, for the leader (GetJobOutput, `xce peek`).

Theory of operation. The file is where the spawn put it (instances.py):
the path the owner chose, relative to the job's working directory, or the
owner's directory in the spool. It is read as the job's owner, through no
symbolic link, a regular file of the owner's only (output_reader.py): the
owner chose the path. The owner must be one this host runs jobs of at all;
a draining host still answers.
"""

from __future__ import annotations

from pathlib import Path

from worker import spawn
from worker.instances import Instances
from worker.output_reader import OutputUnreadable
from xce.v1 import api_pb2 as api


def output_tail(instances: Instances, job: api.Job, stderr: bool, tail: int) -> api.OutputAnswer:
    account, refused = instances.check(job, draining_too=False)  # whose jobs this host runs at all
    if account is None:
        reason = refused.dispatch_failed.reason if refused is not None else "no account"
        return api.OutputAnswer(error=reason)
    suffix, chosen = ("err", job.spec.stderr_path) if stderr else ("out", job.spec.stdout_path)
    cwd = spawn.working_dir(job, account)
    # (the spool resolved: its own path may hold a link, which output reads never pass through)
    spooled = instances.files.resolved(instances.spool) / "users" / account.name
    path = str(Path(cwd) / spawn.output_path(chosen, job)) if chosen else \
        str(spooled / f"{job.id}.{job.attempt}.{suffix}")
    try:
        data, size = instances.host.read_output(account, path, tail, instances.spool / "shims.log")
    except OutputUnreadable as exc:
        return api.OutputAnswer(path=path, error=str(exc))
    return api.OutputAnswer(path=path, data=data, size=size)
