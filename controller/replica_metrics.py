"""A replica's Prometheus metrics, served on its `[[replicas]] metrics` address.

Read at scrape time from what the replica already keeps: its Raft role, term and indexes, and from
its state (live jobs by state and by queue, hosts by status) by counting index keys, not reading
records, at most every CACHE_S (a read holds off apply while it lasts). Commit latency (proposal
to its result on this leader) and role changes are counted as they happen. A driver.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from controller.fsm import job_index
from xce.metrics import BUCKETS
from xce.v1 import api_pb2 as api

CACHE_S = 10.0


class ReplicaMetrics:
    def __init__(self, replica: Any, sync_streams: Callable[[], int] = lambda: 0) -> None:
        self.registry = CollectorRegistry()
        self.commit_latency = Histogram("xce_commit_latency_seconds", "From proposal to its applied result, "
                                        "on the leader", buckets=BUCKETS, registry=self.registry)
        self.role_changes = Counter("xce_role_changes_total", "Raft role changes of this replica "
                                    "(leader elections it saw)", registry=self.registry)
        self.sync_streams = sync_streams
        self.registry.register(_State(replica, self))


class _State:
    def __init__(self, replica: Any, metrics: ReplicaMetrics) -> None:
        self.replica = replica
        self.metrics = metrics
        self._counted_at = float("-inf")
        self._lock = threading.Lock()
        self._counts: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})

    def collect(self) -> Iterator[Metric]:
        status = self.replica.local_status()
        yield _gauge("xce_raft_term", "This replica's Raft term", status.term)
        yield _gauge("xce_leader", "1 while this replica is the Raft leader", int(status.role == "leader"))
        yield _gauge("xce_applied_index", "The last entry this replica applied (the revision)",
                     status.applied_index)
        yield _gauge("xce_commit_index", "The last entry this replica knows committed", status.commit_index)
        yield _gauge("xce_sync_streams", "Sync streams this replica serves", self.metrics.sync_streams())
        states, queues, hosts = self._count()
        jobs = GaugeMetricFamily("xce_jobs", "Live jobs by state", labels=["state"])
        for state, count in sorted(states.items()):
            jobs.add_metric([state], count)
        yield jobs
        by_queue = GaugeMetricFamily("xce_queue_jobs", "Live jobs by queue", labels=["queue"])
        for queue, count in sorted(queues.items()):
            by_queue.add_metric([queue], count)
        yield by_queue
        workers = GaugeMetricFamily("xce_hosts", "Hosts (workers) by status", labels=["status"])
        for status_name, count in sorted(hosts.items()):
            workers.add_metric([status_name], count)
        yield workers

    def _count(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        with self._lock:  # scrapes at once count once
            now = self.replica.clock.monotonic_s()
            if now - self._counted_at >= CACHE_S:
                self._counts = self._read()
                self._counted_at = now
            return self._counts

    def _read(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        states: dict[str, int] = {}
        queues: dict[str, int] = {}
        hosts: dict[str, int] = {}
        with self.replica.store.read() as tables:
            for number in api.JobState.values():
                if number:
                    name = api.JobState.Name(number)
                    states[name] = _keys(tables, job_index.prefix("state", name))
            for _, raw in tables.scan("queues"):
                name = api.Queue.FromString(raw).name
                queues[name] = _keys(tables, job_index.prefix("queue", name))
            for _, raw in tables.scan("hosts"):
                status_name = api.HostStatus.Name(api.Host.FromString(raw).status)
                hosts[status_name] = hosts.get(status_name, 0) + 1
        return states, queues, hosts


def _keys(tables: Any, prefix: bytes) -> int:
    count = 0
    for key, _ in tables.scan(job_index.TABLE, prefix):
        if not key.startswith(prefix):
            break
        count += 1
    return count


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
