"""dask-jobqueue's LSFCluster, unmodified, on XCE's LSF commands: it writes a #BSUB job script per
worker and submits it with `bsub< script` (its default, through a shell), reads the memory unit from
LSF_ENVDIR's lsf.conf, and cancels with `bkill ID`. Four workers, each an LSF job, compute a dask
array's sum; scaled to 0, every job ends."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until
from lsf_site import serving

from ops.local_cluster import LocalCluster
from xce import lsf_bin
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

dask = pytest.importorskip("dask")
dask_array = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dask_jobqueue = pytest.importorskip("dask_jobqueue")


@pytest.fixture
def site(make_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config=FAST_HOSTS)
    with serving(cluster):
        bin_dir = lsf_bin.ensure()
        # What a site's profile.lsf sets: LSF's commands first on PATH, LSF_ENVDIR for lsf.conf.
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        monkeypatch.setenv("LSF_ENVDIR", str(Path(bin_dir).parent / "conf"))
        monkeypatch.setenv("XCE_DATA", str(cluster.data))
        monkeypatch.delenv("XCE_CONTROLLERS", raising=False)
        monkeypatch.chdir(tmp_path)
        yield cluster


# dask-jobqueue reads lsf.conf without closing it. The ResourceWarning, caught by pytest as an unraisable
# exception, would keep each job's __init__ frame (and so the job) alive: distributed then finds, on
# closing, jobs that never said they closed (dask-jobqueue's jobs do not).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_lsf_cluster_scales_to_four_workers_computes_and_scales_to_zero(site: LocalCluster,
                                                                        tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    scratch = str(tmp_path / "scratch")  # the workers' and this process's, not /tmp's dask-scratch-space
    with dask.config.set({"temporary-directory": scratch}), \
            dask_jobqueue.LSFCluster(cores=1, processes=1, memory="1GB", walltime="00:10", interface="lo",
                                     log_directory=str(logs), death_timeout=60,
                                     local_directory=scratch) as lsf:
        assert "#BSUB -M 1000" in lsf.job_script()  # its unit read from lsf.conf: MB
        lsf.scale(4)
        with distributed.Client(lsf) as client:
            client.wait_for_workers(4, timeout=180)
            with site.client() as xce:
                jobs = [j for j in xce.list_jobs(["state:eq:RUN"]) if j.spec.name == "dask-worker"]
                assert len(jobs) == 4 and all(j.spec.mem_limit_mb == 1000 for j in jobs)
            total = dask_array.ones((2000, 2000), chunks=(250, 250)).sum().compute()
            assert total == 4_000_000
        lsf.scale(0)
        with site.client() as xce:
            ended = wait_until(lambda: (js := [j for j in xce.list_jobs() if j.spec.name == "dask-worker"])
                               and all(j.state in (api.DONE, api.EXIT) for j in js) and js,
                               "every worker's job ended", timeout_s=120)
    assert len(ended) == 4
    # Each job's -o file, named as its #BSUB line said (%J: the job's id).
    named = {p.name.removesuffix(".out").rsplit("-", 1)[1] for p in logs.glob("LSFCluster-*.out")}
    assert named == {str(job.id) for job in ended}
