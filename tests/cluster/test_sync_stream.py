"""The Sync stream on real processes: the scheduler's view follows committed state (H3)."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest

from client.channel import Client
from controller import request_ids
from ops.local_cluster import LocalCluster
from scheduler.follower import Follower
from scheduler.view import View
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

pytestmark = pytest.mark.cluster


def _committed(cluster: LocalCluster) -> tuple[list[bytes], list[bytes], list[bytes], int]:
    with Client([cluster.address(cluster.leader())], cluster.credentials) as client:
        jobs = client.list_jobs()
        queues = client.list_queues()
        hosts = client.list_hosts()
        revision = client.status(local_only=True).replicas[0].revision
    return ([j.SerializeToString(deterministic=True) for j in jobs],
            sorted(q.SerializeToString(deterministic=True) for q in queues.queues),
            [h.SerializeToString(deterministic=True) for h in hosts.hosts], revision)


def _seen(follower: Follower) -> tuple[list[bytes], list[bytes], list[bytes], int]:
    """The view's state, as a read shows it to the jobs' owner (its own request ids as it sent them:
    the state keeps them under the owner's key, controller/request_ids.py)."""
    with follower.lock:
        view = follower.view
        return ([_as_read(j).SerializeToString(deterministic=True) for j in view.jobs()],
                sorted(q.SerializeToString(deterministic=True) for q in view.queues()),
                [h.SerializeToString(deterministic=True) for h in view.hosts()], view.revision)


def _as_read(job: api.Job) -> api.Job:
    shown = api.Job()
    shown.CopyFrom(job)
    shown.request_id = request_ids.shown(job.request_id)
    return shown


def _converge(cluster: LocalCluster, follower: Follower, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _seen(follower) == _committed(cluster):
            return
        time.sleep(0.1)
    assert _seen(follower) == _committed(cluster)


def _changes(cluster: LocalCluster, count: int, tag: str) -> None:
    with cluster.client() as client:
        for i in range(count):
            job = client.submit([api.JobSpec(command=["true"], name=f"{tag}-{i}")]).jobs[0]
            if i % 3 == 0:
                client.modify(job.id, priority=i)


def _follow(cluster: LocalCluster, view: View | None = None) -> Follower:
    follower = Follower(cluster.addresses, cluster.credentials, view)
    follower.start()
    return follower


def _wait(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert predicate()


def test_view_follows_committed_state_through_a_leader_kill(cluster: LocalCluster) -> None:
    _changes(cluster, 10, "before")
    follower = _follow(cluster)
    try:
        _converge(cluster, follower)
        with cluster.client() as client:
            client.put_queue(api.Queue(name="extra", priority=5), create=True)
        _changes(cluster, 10, "live")
        _converge(cluster, follower)
        connections = follower.connections
        old = cluster.leader()
        cluster.kill(old)
        cluster.leader(exclude=old)
        _changes(cluster, 10, "after")
        _converge(cluster, follower)
        assert follower.connections > connections  # it found the new leader by itself
        assert follower.view.snapshots == 1  # and resumed from its revision: events only
    finally:
        follower.stop()


def test_resync_events_when_briefly_away_snapshot_when_compacted_past(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config="\n[state]\nevents_kept = 25\n")
    cluster.start()
    cluster.leader()
    _changes(cluster, 5, "first")
    follower = _follow(cluster)
    _converge(cluster, follower)
    view = follower.view
    follower.stop()

    _changes(cluster, 4, "brief")  # fewer changes than the events kept
    follower = _follow(cluster, view)
    try:
        _converge(cluster, follower)
        assert view.snapshots == 1  # events only
    finally:
        follower.stop()

    _changes(cluster, 40, "long")  # more changes than the events kept
    follower = _follow(cluster, view)
    try:
        _converge(cluster, follower)
        assert view.snapshots == 2  # compacted past it: a full snapshot
    finally:
        follower.stop()


def test_follower_replica_refuses_sync_with_the_leader_address(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    follower_id = next(r for r in (1, 2, 3) if r != leader)
    with cluster.credentials.channel(cluster.address(follower_id)) as channel:
        sync = channel.unary_stream("/xce.v1.SyncService/Sync",
                                    request_serializer=log.SyncRequest.SerializeToString,
                                    response_deserializer=log.SyncMessage.FromString)
        with pytest.raises(grpc.RpcError) as caught:
            list(sync(log.SyncRequest(), timeout=10, metadata=cluster.credentials.metadata()))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ("x-xce-leader", cluster.address(leader)) in tuple(caught.value.trailing_metadata())


def test_idle_stream_carries_progress_marks(cluster: LocalCluster) -> None:
    with cluster.credentials.channel(cluster.address(cluster.leader())) as channel:
        sync = channel.unary_stream("/xce.v1.SyncService/Sync",
                                    request_serializer=log.SyncRequest.SerializeToString,
                                    response_deserializer=log.SyncMessage.FromString)
        call = sync(log.SyncRequest(), timeout=10, metadata=cluster.credentials.metadata())
        kinds = []
        started = time.monotonic()
        for message in call:
            kinds.append(message.WhichOneof("body"))
            if kinds.count("progress") == 2:
                break
        call.cancel()
    assert kinds[0] == "snapshot_begin" and "snapshot_end" in kinds
    assert time.monotonic() - started >= 0.9  # marks come about once a second, not in a burst
