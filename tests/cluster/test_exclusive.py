"""Exclusive jobs on real processes: a -x job gets a host on which nothing else runs, and
nothing else starts there while it runs, by the workers' journals."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.local_cluster import LocalCluster, LocalWorkers
from tests.cluster.test_arrays import _array_id, _cli, _instances
from tests.conftest import FAST_HOSTS, wait_until
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


# LSF's EXCLUSIVE = Y: only a queue that says so takes -x jobs.
QUEUES = """
[[queues]]
name = "whole"
priority = 30
exclusive = true
"""


@pytest.fixture
def scheduled(make_scheduled) -> tuple[LocalCluster, LocalWorkers]:  # type: ignore[no-untyped-def]
    return make_scheduled(FAST_HOSTS + QUEUES)  # type: ignore[no-any-return]


def test_an_exclusive_job_runs_alone_on_its_host(scheduled: tuple[LocalCluster, LocalWorkers],
                                                 tmp_path: Path) -> None:
    cluster, workers = scheduled
    workers.start("w1", 4)
    workers.start("w2", 4)
    go = tmp_path / "go"
    wait = ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"]
    first = _array_id(_cli(cluster, tmp_path, "submit", "--", *wait).stdout)
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(first)).pid != 0, "a job on one host")
        alone = _array_id(_cli(cluster, tmp_path, "submit", "-q", "whole", "-x", "--", *wait).stdout)
        wait_until(lambda: client.get_job(str(alone)).pid != 0, "the exclusive job")
        assert client.get_job(str(alone)).host != client.get_job(str(first)).host  # an idle host
        others = [_array_id(_cli(cluster, tmp_path, "submit", "--", "true").stdout) for _ in range(6)]
        for job_id in others:
            wait_until(lambda j=job_id: client.get_job(str(j)).state == api.DONE, f"job {job_id}")
        host = client.get_job(str(alone)).host
        assert all(client.get_job(str(j)).host != host for j in others)
        go.touch()
        wait_until(lambda: client.get_job(str(alone)).state == api.DONE, "the exclusive job's end")
    by_host = {name: _instances(workers, [name]) for name in ("w1", "w2")}
    assert sorted(j for runs in by_host.values() for j, *_ in runs) == sorted([first, alone, *others])
    mine = next(run for run in by_host[host] if run[0] == alone)
    beside = [run for run in by_host[host] if run[0] != alone and run[2] < mine[3] and run[3] > mine[2]]
    assert not beside, (mine, beside)  # by the journal of its host: nothing ran there meanwhile
    # A queue that does not take exclusive jobs refuses -x at submit.
    refused = _cli(cluster, tmp_path, "submit", "-x", "--", "true", ok=False)  # the default queue, normal
    assert refused.returncode != 0 and "INVALID_ARGUMENT" in refused.stderr
    assert "queue normal does not take exclusive jobs" in refused.stderr
