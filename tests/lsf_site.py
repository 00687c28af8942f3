"""What the tests of LSF's commands share: a cluster serving with a scheduler and workers, and the
local time zone pinned (LSF prints local times)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from conftest import wait_until

from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce.v1 import api_pb2 as api


@contextmanager
def serving(cluster: LocalCluster, workers: Sequence[tuple[str, int]] = (("w1", 4), ("w2", 4))
            ) -> Iterator[LocalWorkers]:
    """`cluster` started with a scheduler and these workers (name, slots), joined; all stopped after."""
    fleet = LocalWorkers(cluster)
    scheduler = LocalScheduler(cluster)
    try:
        cluster.start()
        cluster.leader()
        for name, slots in workers:
            fleet.start(name, slots)
        scheduler.start()
        with cluster.client() as client:
            wait_until(lambda: {h.spec.name for h in client.list_hosts().hosts if h.status == api.HOST_OK}
                       >= {name for name, _ in workers}, "the workers joined")
        yield fleet
    finally:
        scheduler.kill()
        fleet.stop()
        cluster.stop()


@pytest.fixture
def utc() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ")
    else:
        os.environ["TZ"] = before
    time.tzset()
