"""Disk faults on a real three-replica cluster, through faultio (soak/faultio): a leader whose fsyncs
stall loses its leadership and no acknowledged submit; a replica that loses its power (everything
it wrote and did not sync) restarts, catches up and loses nothing acknowledged; so do two at once.

Every submit is acknowledged only after a majority synced it (fsync before ack): these are the
tests that would fail if any replica acknowledged from its page cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import replica_dump, wait_converged, wait_until

from client.channel import XceError
from ops.local_cluster import LocalCluster
from soak import faultio
from xce.v1 import api_pb2 as api

# About 25 s: `make test-faults` (make test keeps its budget; its fsync-stall and power-loss soaks run there).
pytestmark = [pytest.mark.cluster, pytest.mark.faults]

STALL_MS = 3000
LEADERSHIP_MOVES_S = 3.0  # measured ~0.6-1.2 s (election timeouts 0.3-0.7 s): well before the stall ends


def shimmed(make_cluster, tmp_path: Path, power_loss: bool) -> tuple[LocalCluster, dict[int, Path]]:  # type: ignore[no-untyped-def]
    """A started cluster whose replicas all run under faultio (their own directories affected);
    each replica's control directory."""
    cluster: LocalCluster = make_cluster()
    controls = {}
    for replica_id in cluster.replica_ids():
        controls[replica_id] = tmp_path / f"faultio-{replica_id}"
        cluster.env[replica_id] = faultio.environment(
            controls[replica_id], [cluster.config.replica_dir(replica_id)], power_loss=power_loss)
    cluster.start()
    cluster.leader()
    return cluster, controls


class Submits:
    """Threads submitting one job per request, each with its own request id, until stopped; what
    was acknowledged (request id: job id). A retried request id gives its one job again."""

    def __init__(self, cluster: LocalCluster, threads: int = 4) -> None:
        self.cluster = cluster
        self.acked: dict[str, int] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,)) for k in range(threads)]

    def _run(self, k: int) -> None:
        with self.cluster.client(deadline_s=60) as client:
            for i in range(100_000):  # bounded; stopped long before
                if self._stop.is_set():
                    return
                request_id = f"disk-{k}-{i}"
                spec = api.JobSpec(command=["true"], name=request_id, cwd="/tmp")
                try:
                    job = client.submit([spec], request_id=request_id).jobs[0]
                except XceError as exc:
                    self.errors.append(f"{request_id}: {exc}")
                    return
                with self._lock:
                    self.acked[request_id] = job.id

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def more_than(self, n: int, timeout_s: float = 60.0) -> None:
        """Wait until more than `n` more submits are acknowledged (the cluster writes)."""
        start = self.count()
        wait_until(lambda: self.count() > start + n, f"{n} more acknowledged submits", timeout_s)

    @contextmanager
    def running(self) -> Iterator[Submits]:
        for t in self._threads:
            t.start()
        try:
            yield self
        finally:
            self._stop.set()
            for t in self._threads:
                t.join(timeout=90)


def assert_every_ack_survives(cluster: LocalCluster, submits: Submits) -> None:
    """Every acknowledged submit is there with its job id, on every replica alike; nothing twice."""
    assert not submits.errors
    assert submits.acked
    wait_converged(cluster, timeout_s=30)
    with cluster.client() as client:
        jobs = client.list_jobs()
    by_request = {j.request_id: j.id for j in jobs}
    assert len(by_request) == len(jobs)  # no request id made two jobs
    lost = {rid: job for rid, job in submits.acked.items() if by_request.get(rid) != job}
    assert not lost, f"{len(lost)} acknowledged submits lost, e.g. {sorted(lost)[:5]}"
    assert sorted(j.id for j in jobs) == list(range(1, len(jobs) + 1))
    for replica_id in list(cluster.procs):
        cluster.kill(replica_id)
    dumps = {r: replica_dump(cluster, r) for r in cluster.replica_ids()}
    assert len(set(dumps.values())) == 1  # the replicas that lost their power caught up exactly


def test_fsync_stall_on_the_leader_moves_leadership_and_loses_no_ack(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, controls = shimmed(make_cluster, tmp_path, power_loss=False)
    submits = Submits(cluster)
    with submits.running():
        submits.more_than(50)
        old = cluster.leader()
        stalled = time.monotonic()
        faultio.set_delays(controls[old], fsync_ms=STALL_MS)  # its WAL flush blocks the tick thread
        new = cluster.leader(exclude=old, timeout_s=30)
        moved_s = time.monotonic() - stalled
        print(f"fsync stall of {STALL_MS} ms on leader {old}: replica {new} leads after {moved_s:.2f} s")
        assert moved_s < LEADERSHIP_MOVES_S
        submits.more_than(50)  # the two others commit without the stalled one
        faultio.set_delays(controls[old], fsync_ms=0)
        submits.more_than(20)
    assert_every_ack_survives(cluster, submits)


def lose_power(cluster: LocalCluster, controls: dict[int, Path], victims: list[int]) -> None:
    """SIGKILL the victims together, drop what each wrote and did not sync, start them again (with
    a sound disk)."""
    for replica_id in victims:
        cluster.kill(replica_id)
    for replica_id in victims:
        faultio.set_delays(controls[replica_id])
        report = faultio.power_loss(controls[replica_id])
        files = sorted(str(f.relative_to(cluster.config.replica_dir(replica_id))) for f in report.files)
        print(f"power loss of replica {replica_id}: {report.records} writes undone, "
              f"{report.bytes_dropped} bytes dropped in {', '.join(files)}")
    cluster.start(victims)


def test_power_loss_of_a_replica_under_load_loses_no_ack(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, controls = shimmed(make_cluster, tmp_path, power_loss=True)
    submits = Submits(cluster)
    with submits.running():
        submits.more_than(100)
        leader = cluster.leader()
        faultio.set_delays(controls[leader], write_ms=10)  # a slow disk: writes in flight at the kill
        submits.more_than(20)
        lose_power(cluster, controls, [leader])
        submits.more_than(100)
        cluster.leader()
    assert_every_ack_survives(cluster, submits)


def test_power_loss_of_two_replicas_at_once_loses_no_ack(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, controls = shimmed(make_cluster, tmp_path, power_loss=True)
    submits = Submits(cluster)
    with submits.running():
        submits.more_than(100)
        leader = cluster.leader()
        follower = next(r for r in cluster.replica_ids() if r != leader)
        lose_power(cluster, controls, [leader, follower])
        submits.more_than(100)
        cluster.leader()
    assert_every_ack_survives(cluster, submits)


def test_power_loss_of_every_replica_at_once_loses_no_ack(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """All three lose their power at once: what the replicas synced still holds every acknowledged
    submit."""
    cluster, controls = shimmed(make_cluster, tmp_path, power_loss=True)
    submits = Submits(cluster)
    with submits.running():
        submits.more_than(100)
        lose_power(cluster, controls, list(cluster.replica_ids()))
        submits.more_than(50)
    assert_every_ack_survives(cluster, submits)
