"""After a worker restart: the instances it had, from the journal and the host's processes.

Theory of operation. The journal says what was started; the host says
what still runs. A journaled pid is alive only if it names the same process
(its start time matches: a reused pid is never taken for the job); an
instance journaled `starting` without a pid is looked for by its
environment (the worker died between the start and journaling the pid).
A live instance is re-adopted and watched; one that ended while no worker
watched is ended from its status file, as if watched (H4); one whose start
never happened (no status file) failed to start. An unacknowledged end is
reported again. The limits and GPUs of what still runs are taken up again
(and its warning signal, unless the journal says it was sent),
and the tasks of an instance that is over are ended: its end may have come
while no worker watched.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from worker.monitor import warning_of
from xce.start_failures import START_FAILED
from xce.v1 import api_pb2 as api

if TYPE_CHECKING:
    from worker.executor import Executor

log = logging.getLogger("xce.worker")

Key = tuple[int, int]
LIVE = ("starting", "running", "part")


def recover(executor: Executor) -> None:
    executor.tasks.recover()
    for key, record in list(executor.instances.journal.items()):
        _take_up(executor, key, record)
        state = record.get("state")
        if state == "part":
            with executor.instances.lock:
                executor.instances.parts.add(key)
        elif state == "ended":
            if not record.get("acked"):
                executor.report(api.JobReport.FromString(bytes.fromhex(record["final"])))
        else:
            _command(executor, key, record)
    for key in executor.tasks.with_tasks():
        known = executor.instances.journal.get(key)
        if known is None or known.get("state") not in ("running", "part"):
            executor.tasks.over(key)


def _take_up(executor: Executor, key: Key, record: dict[str, Any]) -> None:
    """The limits and GPUs of an instance that still runs (or whose tasks still use its GPUs)."""
    state = record.get("state")
    with executor.instances.lock:
        executor.monitoring.track(key, int(record.get("mem_limit_kb") or 0) if state in LIVE else 0,
                                  int(record.get("run_limit_ms") or 0) if state in LIVE[:2] else 0,
                                  int(record.get("term_time_ms") or 0) if state in LIVE[:2] else 0,
                                  warning_of(record) if state in LIVE[:2] else None)  # unless sent
    if record.get("gpus") and (state in LIVE or key in executor.tasks.with_tasks()):
        executor.instances.gpus.restore(key, list(record["gpus"]))


def _command(executor: Executor, key: Key, record: dict[str, Any]) -> None:
    """A job's command journaled as starting or running: re-adopted, or ended."""
    instances = executor.instances
    host = instances.host
    pid = record.get("pid")
    ticks = host.start_ticks(pid) if pid else None
    if pid:  # alive only if the pid still names the same process, not a reused pid
        alive = ticks is not None and ticks == record.get("pid_start")
    else:
        pid = host.find_by_env(key, instances.spool)
        alive = bool(pid)
        ticks = host.start_ticks(pid) if pid else None
        record.setdefault("started_ms", instances.clock.now_ms())
    if alive:
        record.update(pid=pid, pid_start=ticks, state="running")
        instances.journal.put(key, record)
        with instances.lock:
            instances.running[key] = pid
        log.info("job %d.%d re-adopted, pid %d", *key, pid)
        executor.watch(key, record, started_here=False)
    elif record.get("state") == "starting" and not instances.files.exists(record["status_file"]):
        failed = api.DispatchFailed(code=START_FAILED, reason="worker died while starting it")
        executor.end(key, record, api.JobReport(job_id=key[0], attempt=key[1], dispatch_failed=failed))
    else:
        executor.end(key, record, executor.finished(key, record, None))
