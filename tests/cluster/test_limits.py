"""Limits on real processes: a per-user slot limit in a queue is never exceeded, by the workers' journals,
and a job held back says which limit it reached."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.local_cluster import LocalCluster, LocalWorkers
from tests.cluster.test_arrays import _array_id, _cli, _instances, _most_at_once
from tests.conftest import FAST_HOSTS, wait_until
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

LIMITS = """
[[limits]]
name = "users_normal"
queues = ["normal"]
per_user = true
slots = 3
"""


@pytest.fixture
def limited(make_scheduled) -> tuple[LocalCluster, LocalWorkers]:  # type: ignore[no-untyped-def]
    return make_scheduled(FAST_HOSTS + LIMITS)  # type: ignore[no-any-return]


def test_a_per_user_slot_limit_is_never_exceeded(limited: tuple[LocalCluster, LocalWorkers],
                                                 tmp_path: Path) -> None:
    cluster, workers = limited
    workers.start("w1", 4)
    workers.start("w2", 4)
    go = tmp_path / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.05; done"
    ids = [_array_id(_cli(cluster, tmp_path, "submit", "-q", "normal", "--", "sh", "-c", wait).stdout)
           for _ in range(4)]
    two = _array_id(_cli(cluster, tmp_path, "submit", "-q", "normal", "-n", "2", "--", "sh", "-c",
                         wait).stdout)
    elsewhere = _array_id(_cli(cluster, tmp_path, "submit", "-q", "priority", "--", "true").stdout)
    with cluster.client() as client:
        wait_until(lambda: sum(client.get_job(str(j)).state == api.RUN for j in ids) == 3, "3 running")
        held = next(j for j in [*ids, two] if client.get_job(str(j)).state == api.PEND)
        wait_until(lambda: client.get_job(str(held)).pending_code == api.PEND_LIMIT_REACHED, "the reason")
        words = client.get_job(str(held)).pending_reason
        assert 'at 3/3 slots in queue normal (limit "users_normal")' in words, words
        wait_until(lambda: client.get_job(str(elsewhere)).state == api.DONE, "another queue's job")
        shown = _cli(cluster, tmp_path, "jobs", "-p").stdout
        assert "users_normal" in shown, shown
        table = _cli(cluster, tmp_path, "limits").stdout
        assert "users_normal" in table and "; queues normal" in table and "slots 3/3" in table, table
        go.touch()
        for job_id in [*ids, two]:
            wait_until(lambda j=job_id: client.get_job(str(j)).state == api.DONE, f"job {job_id}", 120)
    runs = _instances(workers, ["w1", "w2"])
    normal = [run for run in runs if run[0] != elsewhere]
    slots = {two: 2}
    # Slots at once, by the journals: each instance weighs its slots.
    weighted = [run for run in normal for _ in range(slots.get(run[0], 1))]
    assert len(normal) == 5 and _most_at_once(weighted) <= 3
