"""Real three-process clusters on loopback: kill -9 the leader, restart everything.

Named after what they check (C1, C2, C4): an acknowledged write survives the
loss of the leader; a retried request id gives one job; a full restart
changes nothing.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import replica_dump, wait_converged

from client.channel import Client, XceError
from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


def _spec(i: int) -> api.JobSpec:
    return api.JobSpec(command=["sleep", str(i % 7)], name=f"job-{i}", priority=i % 5,
                       env={"INDEX": str(i)}, cwd="/tmp")


def test_acknowledged_jobs_survive_leader_kill(cluster: LocalCluster) -> None:
    acked: dict[int, bytes] = {}
    lock = threading.Lock()
    errors: list[str] = []
    total, threads = 1000, 8

    def submitter(offset: int) -> None:
        with cluster.client(deadline_s=60) as client:
            for i in range(offset, total, threads):
                try:
                    job = client.submit([_spec(i)]).jobs[0]
                except XceError as exc:
                    errors.append(str(exc))
                    continue
                with lock:
                    acked[job.id] = job.SerializeToString(deterministic=True)

    workers = [threading.Thread(target=submitter, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    while len(acked) < total // 3:
        time.sleep(0.01)
    old_leader = cluster.leader()
    cluster.kill(old_leader)
    for w in workers:
        w.join(timeout=120)
    assert not errors
    assert len(acked) == total

    new_leader = cluster.leader(exclude=old_leader)
    assert new_leader != old_leader
    with Client([cluster.address(new_leader)], cluster.credentials) as client:
        on_leader = {j.id: j.SerializeToString(deterministic=True) for j in client.list_jobs()}
    assert on_leader == acked  # every acknowledged job, identical, and no other
    assert sorted(on_leader) == list(range(1, total + 1))  # dense ids: nothing created twice


def test_retried_request_id_across_failover_gives_one_job(cluster: LocalCluster) -> None:
    with cluster.client() as client:
        first = client.submit([_spec(1)], request_id="retry-me")
        cluster.kill(cluster.leader())
        again = client.submit([_spec(1)], request_id="retry-me")
        assert [j.id for j in again.jobs] == [j.id for j in first.jobs]
        assert again.jobs[0].SerializeToString() == first.jobs[0].SerializeToString()
        assert len(client.list_jobs(["name:eq:job-1"])) == 1


def test_retry_of_in_flight_submit_during_leader_kill_gives_one_job(cluster: LocalCluster) -> None:
    """The leader dies while requests are in flight; each request id ends as one job."""
    results: dict[str, list[int]] = {}

    def submit(request_id: str) -> None:
        with cluster.client(deadline_s=60) as client:
            results[request_id] = [j.id for j in client.submit([_spec(2)], request_id=request_id).jobs]

    leader = cluster.leader()
    workers = [threading.Thread(target=submit, args=(f"inflight-{k}",)) for k in range(40)]
    for w in workers:
        w.start()
    cluster.kill(leader)
    for w in workers:
        w.join(timeout=90)
    assert len(results) == 40
    with cluster.client() as client:
        jobs = client.list_jobs(["name:eq:job-2"])
    assert sorted(j.request_id for j in jobs) == sorted(results)
    assert sorted(j.id for j in jobs) == sorted(i for ids in results.values() for i in ids)


def test_kill_all_replicas_and_restart_changes_nothing(cluster: LocalCluster) -> None:
    with cluster.client() as client:
        for i in range(0, 200, 20):
            client.submit([_spec(i + k) for k in range(20)])
        job = client.list_jobs()[5]
        client.control(job.id, api.HOLD)
    revision = wait_converged(cluster)
    for replica_id in list(cluster.procs):
        cluster.kill(replica_id)
    before = {r: replica_dump(cluster, r) for r in (1, 2, 3)}
    assert len({dump for dump, _ in before.values()}) == 1
    assert {applied for _, applied in before.values()} == {revision}

    cluster.start()
    cluster.leader()
    with cluster.client() as client:
        assert len(client.list_jobs()) == 200
    assert wait_converged(cluster) == revision  # nothing re-applied, no new entry
    for replica_id in list(cluster.procs):
        cluster.kill(replica_id)
    after = {r: replica_dump(cluster, r) for r in (1, 2, 3)}
    assert after == before


def test_wiped_replica_catches_up_through_snapshot(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config="\n[raft]\ncompaction_min_entries = 40\n")
    cluster.start()
    leader = cluster.leader()
    with cluster.client() as client:
        for i in range(150):
            client.submit([_spec(i)])
    follower = next(r for r in (1, 2, 3) if r != leader)
    cluster.kill(follower)
    replica_dir: Path = cluster.config.replica_dir(follower)
    import shutil

    shutil.rmtree(replica_dir)
    with cluster.client() as client:
        for i in range(150, 200):
            client.submit([_spec(i)])
    cluster.start([follower])
    revision = wait_converged(cluster, timeout_s=30)
    log_text = (cluster.data / f"replica-{follower}.log").read_text()
    assert "installed" in log_text  # it came through a snapshot, not a log replay from 1
    with Client([cluster.address(follower)], cluster.credentials) as client:
        assert len(client.list_jobs()) == 200
    for replica_id in list(cluster.procs):
        cluster.kill(replica_id)
    dumps = {r: replica_dump(cluster, r) for r in (1, 2, 3)}
    assert len({d for d, _ in dumps.values()}) == 1
    assert dumps[follower][1] == revision


def test_three_leader_kills_under_load_lose_and_duplicate_nothing(cluster: LocalCluster) -> None:
    acked: dict[str, bytes] = {}
    lock = threading.Lock()
    errors: list[str] = []
    stop = threading.Event()

    def submitter(k: int) -> None:
        with cluster.client(deadline_s=60) as client:
            for i in range(100_000):  # bounded; stopped by the event long before
                if stop.is_set():
                    return
                request_id = f"load-{k}-{i}"
                try:
                    job = client.submit([_spec(i)], request_id=request_id).jobs[0]
                except XceError as exc:
                    errors.append(str(exc))
                    return
                with lock:
                    acked[request_id] = job.SerializeToString(deterministic=True)

    workers = [threading.Thread(target=submitter, args=(k,)) for k in range(6)]
    for w in workers:
        w.start()
    try:
        for _ in range(3):
            time.sleep(0.5)
            leader = cluster.leader()
            cluster.kill(leader)
            cluster.leader(exclude=leader)
            cluster.start([leader])
        time.sleep(0.5)
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=90)
    assert not errors
    wait_converged(cluster, timeout_s=30)
    with cluster.client() as client:
        jobs = client.list_jobs()
    by_request = {j.request_id: j.SerializeToString(deterministic=True) for j in jobs}
    assert len(by_request) == len(jobs)  # no request id created two jobs
    assert all(by_request.get(rid) == raw for rid, raw in acked.items())  # every ack, identical
    assert sorted(j.id for j in jobs) == list(range(1, len(jobs) + 1))
    assert len(jobs) == len(acked)  # every call returned, so every job was acknowledged
