"""Shared fixtures: real controller processes on loopback, always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from xce.local_cluster import LocalCluster, LocalWorkers

# Heartbeats fast enough for tests to see hosts come and go in seconds.
FAST_HOSTS = "\n[hosts]\nheartbeat_s = 0.2\nheartbeat_timeout_s = 1.5\n"


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[type[LocalCluster]]:
    """Build LocalClusters in the test's own directory; every one is stopped."""
    started: list[LocalCluster] = []

    def build(replicas: int = 3, extra_config: str = "", name: str = "cluster") -> LocalCluster:
        cluster = LocalCluster(tmp_path / name, replicas, extra_config=extra_config)
        started.append(cluster)
        return cluster

    try:
        yield build  # type: ignore[misc]
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture
def cluster(make_cluster) -> LocalCluster:  # type: ignore[no-untyped-def]
    c = make_cluster()
    c.start()
    c.leader()
    return c


@pytest.fixture
def fleet(make_cluster) -> Iterator[tuple[LocalCluster, LocalWorkers]]:  # type: ignore[no-untyped-def]
    """A serving cluster with fast heartbeats, and its workers (started by the test; all killed)."""
    cluster = make_cluster(extra_config=FAST_HOSTS)
    cluster.start()
    cluster.leader()
    workers = LocalWorkers(cluster)
    try:
        yield cluster, workers
    finally:
        workers.stop()
