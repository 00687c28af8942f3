"""Shared fixtures: real controller processes on loopback, always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from xce.local_cluster import LocalCluster


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
