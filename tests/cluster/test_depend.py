"""Dependencies (-w) on real processes: a job starts only after what it waits for ended as asked (by the
workers' journals), a condition that can never hold says so or kills the job, and a condition on an
unknown job is refused at submit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.local_cluster import LocalCluster, LocalWorkers
from tests.cluster.test_arrays import _array_id, _cli, _instances, htc  # noqa: F401 (htc: the fixture)
from tests.conftest import wait_until
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


def _job_id(out: str) -> int:
    return _array_id(out)


@pytest.fixture
def two_hosts(htc: tuple[LocalCluster, LocalWorkers]) -> Iterator[tuple[LocalCluster, LocalWorkers]]:  # noqa: F811
    cluster, workers = htc
    workers.start("w1", 4)
    workers.start("w2", 4)
    yield cluster, workers


def test_jobs_start_only_once_their_conditions_hold(two_hosts: tuple[LocalCluster, LocalWorkers],
                                                   tmp_path: Path) -> None:
    cluster, workers = two_hosts
    go = tmp_path / "go"

    def submit(*args: str, ok: bool = True) -> str:
        done = _cli(cluster, tmp_path, "submit", *args, ok=ok)
        return done.stdout if ok else done.stderr

    # `first` waits for the test's word, so the dependents are seen pending while it runs.
    first = _job_id(submit("--", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"))
    failing = _job_id(submit("--", "sh", "-c", "exit 3"))
    array = _array_id(submit("-J", "a[1-3]", "--", "true"))
    after = _job_id(submit("-w", f"done({first}) && exit({failing}, == 3)", "--", "true"))
    counted = _job_id(submit("-w", f"numdone({array}, *) && started({first})", "--", "true"))
    never = _job_id(submit("-w", f"done({failing})", "--", "true"))
    killed = _job_id(submit("-w", f"done({failing}) || done({first})", "--kill-on-invalid-dep", "--", "true"))
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(never)).pending_code == api.PEND_DEPENDENCY_NEVER,
                   "the never-satisfied reason")
        shown = _cli(cluster, tmp_path, "job", str(never)).stdout
        assert f"dependency never satisfied: done({failing})" in shown and "never satisfied)" in shown, shown
        wait_until(lambda: client.get_job(str(after)).pending_code == api.PEND_DEPENDENCY,
                   "the pending reason")
        assert client.get_job(str(after)).state == api.PEND  # its condition holds only once `first` is done
        assert client.get_job(str(killed)).state == api.PEND  # `first` may still end DONE
        go.touch()
        for job_id in (after, counted):
            wait_until(lambda j=job_id: client.get_job(str(j)).state == api.DONE, f"job {job_id} to run")
        # `first` ended DONE: `killed` holds too (||), and runs.
        wait_until(lambda: client.get_job(str(killed)).state == api.DONE, "the || to hold")
        assert client.get_job(str(never)).state == api.PEND
        elements = [j.id for j in client.list_jobs([f"array:eq:{array}"])]
        # A condition that can never hold from the start, asked to kill: killed, never run.
        doomed = _job_id(submit("-w", f"done({failing})", "--kill-on-invalid-dep", "--", "true"))
        wait_until(lambda: client.get_job(str(doomed)).state == api.EXIT, "the kill")
        assert client.get_job(str(doomed)).exit_reason == "DEPENDENCY"
    refused = submit("-w", "done(987654)", "--", "true", ok=False)
    assert "job 987654 is not known" in refused, refused
    refused = submit("-w", f"done({first}", "--", "true", ok=False)
    assert "column" in refused and "expected )" in refused, refused
    runs = {job_id: (start, end) for job_id, _, start, end in _instances(workers, ["w1", "w2"])}
    assert never not in runs and doomed not in runs
    assert runs[after][0] >= max(runs[first][1], runs[failing][1])
    assert runs[counted][0] >= max(runs[e][1] for e in elements)
    assert len(elements) == 3
