"""A replica's Prometheus metrics, served on its `[[replicas]] metrics` address.

Read at scrape time from what the replica already keeps: its Raft role, term and indexes, and from
its applied state: live jobs by queue and state, pending jobs by queue and pending reason, hosts by
status and each host's liveness. Apply keeps no count for them: the counts are read at scrape time,
at most every CACHE_S and at most READ_SHARE of the time (a slow count waits longer before the next),
and in short read transactions (KEYS_PER_READ index keys, BATCH records), since a read holds off
apply while it lasts. The job counts come from index keys (no record read), the pending reasons from
the pending jobs' records. Commit latency (proposal to its result on this leader) and role changes
are counted as they happen. A driver.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from controller.fsm import job_index
from controller.fsm.records import PENDING
from xce.metrics import BUCKETS, daemon_registry
from xce.v1 import api_pb2 as api

CACHE_S = 10.0
READ_SHARE = 0.05  # the share of the time spent counting, at most: 20 times the last read's length apart
BATCH = 2000  # pending jobs' records read in one read transaction
KEYS_PER_READ = 10_000  # index keys read in one read transaction


class ReplicaMetrics:
    def __init__(self, replica: Any, sync_streams: Callable[[], int] = lambda: 0) -> None:
        self.registry = daemon_registry("replica")
        self.commit_latency = Histogram("xce_commit_latency_seconds", "From proposal to its applied result, "
                                        "on the leader", buckets=BUCKETS, registry=self.registry)
        self.role_changes = Counter("xce_role_changes_total", "Raft role changes of this replica "
                                    "(leader elections it saw)", registry=self.registry)
        self.sync_streams = sync_streams
        self.registry.register(_State(replica, self))


@dataclass
class Counts:
    """What the state says, as of one count."""

    jobs: Tally[tuple[str, str]] = field(default_factory=Tally)  # (queue, state) -> live jobs
    pending: Tally[tuple[str, str]] = field(default_factory=Tally)  # (queue, pending reason) -> jobs
    hosts: dict[str, bool] = field(default_factory=dict)  # host -> its status is HOST_OK
    host_status: Tally[str] = field(default_factory=Tally)


class _State:
    def __init__(self, replica: Any, metrics: ReplicaMetrics) -> None:
        self.replica = replica
        self.metrics = metrics
        self._next_s = float("-inf")
        self._lock = threading.Lock()
        self._counts = Counts()

    def collect(self) -> Iterator[Metric]:
        status = self.replica.local_status()
        yield _gauge("xce_raft_term", "This replica's Raft term", status.term)
        yield _gauge("xce_leader", "1 while this replica is the Raft leader", int(status.role == "leader"))
        yield _gauge("xce_applied_index", "The last entry this replica applied (the revision)",
                     status.applied_index)
        yield _gauge("xce_commit_index", "The last entry this replica knows committed", status.commit_index)
        yield _gauge("xce_sync_streams", "Sync streams this replica serves", self.metrics.sync_streams())
        counts = self._count()
        yield _family("xce_jobs", "Live jobs by queue and state", ["queue", "state"], counts.jobs)
        yield _family("xce_pending_jobs", "Pending jobs (PEND, PSUSP) by queue and pending reason",
                      ["queue", "reason"], counts.pending)
        yield _family("xce_hosts", "Hosts (workers) by status", ["status"],
                      {(name,): n for name, n in counts.host_status.items()})
        yield _family("xce_host_up", "1 while the host's worker is joined and heartbeating (HOST_OK)",
                      ["host"], {(host,): int(up) for host, up in counts.hosts.items()})

    def _count(self) -> Counts:
        with self._lock:  # scrapes at once count once
            clock = self.replica.clock
            started = clock.monotonic_s()
            if started >= self._next_s:
                self._counts = count(self.replica.store.read)
                took = clock.monotonic_s() - started
                self._next_s = started + max(CACHE_S, took / READ_SHARE)
            return self._counts


def count(read: Callable[[], Any]) -> Counts:
    """The counts, in many short read transactions (`read()`: one): the queues and hosts, then index
    keys KEYS_PER_READ at a time, then the pending jobs' records BATCH at a time. A job that changed
    meanwhile is counted as it was when read (one submitted or moved between the scans of the queues
    and of the states, not at all), until the next count."""
    counts = Counts()
    with read() as tables:
        queues = [api.Queue.FromString(raw).name for _, raw in tables.scan("queues")]
        for _, raw in tables.scan("hosts"):
            host = api.Host.FromString(raw)
            counts.hosts[host.spec.name] = host.status == api.HOST_OK
            counts.host_status[api.HostStatus.Name(host.status)] += 1
    queue_of: dict[bytes, str] = {}
    for name in queues:
        queue_prefix = job_index.prefix("queue", name)
        for key in _keys(read, queue_prefix):
            queue_of[key[len(queue_prefix):]] = name
    pending: list[bytes] = []
    for number in api.JobState.values():
        if not number:
            continue
        state = api.JobState.Name(number)
        state_prefix = job_index.prefix("state", state)
        for key in _keys(read, state_prefix):
            tail = key[len(state_prefix):]  # the job's key
            queue = queue_of.get(tail)
            if queue is not None:
                counts.jobs[(queue, state)] += 1
                if number in PENDING:
                    pending.append(tail)
    for start in range(0, len(pending), BATCH):
        with read() as tables:
            for tail in pending[start:start + BATCH]:
                raw = tables.get("jobs", tail)
                if raw is not None:
                    job = api.Job.FromString(raw)
                    counts.pending[(job.spec.queue, api.PendingReason.Name(job.pending_code))] += 1
    return counts


def _keys(read: Callable[[], Any], prefix: bytes) -> Iterator[bytes]:
    """The index keys under `prefix`, KEYS_PER_READ to a read transaction."""
    start = prefix
    while True:
        keys: list[bytes] = []
        with read() as tables:
            for key, _ in tables.scan(job_index.TABLE, start):
                if not key.startswith(prefix) or len(keys) == KEYS_PER_READ:
                    break
                keys.append(key)
        yield from keys
        if len(keys) < KEYS_PER_READ:
            return
        start = keys[-1] + b"\0"  # the next key after the last one read


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _family(name: str, documentation: str, labels: list[str],
            values: dict[tuple[str, ...], int] | Tally[tuple[str, str]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family
