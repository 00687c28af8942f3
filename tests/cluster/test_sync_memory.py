"""Sync snapshots are streamed, not built: stalled watchers cost the leader little memory."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import pytest

from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

pytestmark = pytest.mark.cluster

JOBS = int(os.environ.get("XCE_SYNC_JOBS", "40000"))  # the acceptance's: XCE_SYNC_JOBS=100000
STREAMS = 40


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_40_stalled_snapshot_streams_cost_the_leader_less_than_100_mb(  # type: ignore[no-untyped-def]
        make_cluster) -> None:
    cluster: LocalCluster = make_cluster(extra_config="\n[auth]\nmax_sync_streams = 64\n")
    cluster.start()
    spec = api.JobSpec(command=["true"], name="sync-memory", queue="idle")
    with cluster.client() as client:
        for start in range(0, JOBS, 5000):
            client.submit([spec] * min(5000, JOBS - start))
    # On a loaded machine leadership may move while the streams open (a replica refuses them once it
    # no longer leads): then the measurement starts again on the new leader, a bounded number of times.
    for attempt in range(3):
        leader = cluster.leader()
        try:
            before, peak = _stalled_streams(cluster, leader)
            break
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION or attempt == 2:
                raise
    print(f"leader RSS {before:.0f} -> {peak:.0f} MB with {STREAMS} stalled streams on {JOBS} jobs")
    assert peak - before < 100, f"leader RSS {before:.0f} -> {peak:.0f} MB with {STREAMS} stalled streams"


def _stalled_streams(cluster: LocalCluster, leader: int) -> tuple[float, float]:
    """The leader's RSS before, and at its peak over 5 s with STREAMS snapshot streams open and unread."""
    pid = cluster.procs[leader].pid
    before = _rss_mb(pid)
    credentials = cluster.credentials
    calls = []
    with credentials.channel(cluster.address(leader)) as channel:
        sync = channel.unary_stream("/xce.v1.SyncService/Sync",
                                    request_serializer=log.SyncRequest.SerializeToString,
                                    response_deserializer=log.SyncMessage.FromString)
        try:
            for _ in range(STREAMS):
                call = sync(log.SyncRequest(), timeout=120, metadata=credentials.metadata())
                first = next(call)  # the stream is open; then it stalls: nothing more is read
                assert first.WhichOneof("body") in ("snapshot_begin", "progress")
                calls.append(call)
            peak, deadline = before, time.monotonic() + 5
            while time.monotonic() < deadline:
                peak = max(peak, _rss_mb(pid))
                time.sleep(0.1)
        finally:
            for call in calls:
                call.cancel()
    return before, peak
