"""The replica's scrape-time counts (controller/replica_metrics.py): live jobs by queue and state from
the index, pending jobs by queue and reason from their records, each host's liveness; read in short
transactions that resume where the last stopped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from controller import replica_metrics
from controller.fsm import job_index
from controller.fsm.records import job_key
from controller.tables import MemoryTables
from xce.v1 import api_pb2 as api


def put_job(tables: MemoryTables, job_id: int, queue: str, state: int, reason: int = 0) -> None:
    job = api.Job(id=job_id, state=state, pending_code=reason, spec=api.JobSpec(queue=queue, user="u"))
    tables.put("jobs", job_key(job_id), job.SerializeToString())
    job_index.update(tables, None, job)


def test_counts_by_queue_and_state_pending_reason_and_host() -> None:
    tables = MemoryTables()
    for name in ("normal", "idle"):
        tables.put("queues", name.encode(), api.Queue(name=name).SerializeToString())
    put_job(tables, 1, "normal", api.RUN)
    put_job(tables, 2, "normal", api.PEND, api.PEND_NO_FREE_SLOTS)
    put_job(tables, 3, "normal", api.PEND, api.PEND_NO_FREE_SLOTS)
    put_job(tables, 4, "idle", api.PSUSP, api.PEND_JOB_HELD)
    put_job(tables, 5, "idle", api.PEND)
    for name, status in (("n1", api.HOST_OK), ("n2", api.HOST_UNAVAIL)):
        host = api.Host(spec=api.HostSpec(name=name, slots=1), status=status)
        tables.put("hosts", name.encode(), host.SerializeToString())
    reads = []

    @contextlib.contextmanager
    def read() -> Iterator[MemoryTables]:
        reads.append(1)
        yield tables

    (replica_metrics.BATCH, batch), (replica_metrics.KEYS_PER_READ, keys) = \
        (2, replica_metrics.BATCH), (1, replica_metrics.KEYS_PER_READ)  # every scan resumed, key by key
    try:
        counts = replica_metrics.count(read)
    finally:
        replica_metrics.BATCH, replica_metrics.KEYS_PER_READ = batch, keys
    assert counts.jobs == {("normal", "RUN"): 1, ("normal", "PEND"): 2, ("idle", "PSUSP"): 1,
                           ("idle", "PEND"): 1}
    assert counts.pending == {("normal", "PEND_NO_FREE_SLOTS"): 2, ("idle", "PEND_JOB_HELD"): 1,
                              ("idle", "PENDING_REASON_UNSPECIFIED"): 1}
    assert counts.hosts == {"n1": True, "n2": False}
    assert counts.host_status == {"HOST_OK": 1, "HOST_UNAVAIL": 1}
    assert len(reads) > 2 * 5 + 2  # each key of the queue and state indexes in a read of its own, and more
