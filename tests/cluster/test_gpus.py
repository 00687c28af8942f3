"""GPUs on real processes: 100 jobs with rusage[gpu=1] on two hosts of 2 GPUs each never run
more than 2 at once per host, and never share an index, by the workers' journals; each job sees only
its own index in CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until

from ops.local_cluster import LocalScheduler
from worker.journal import Journal
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

JOBS = 100


def test_a_hundred_gpu_jobs_never_share_an_index_nor_pass_two_per_host(  # type: ignore[no-untyped-def]
        make_fleet, tmp_path: Path) -> None:
    cluster, workers = make_fleet(FAST_HOSTS)
    for name in ("g1", "g2"):
        workers.start(name, 4, "[resources]\ngpu = 2\n")  # more slots than GPUs: GPUs are the bound
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    try:
        out = tmp_path / "seen"
        out.mkdir()
        script = f'echo "$CUDA_VISIBLE_DEVICES" > {out}/$XCE_JOB_ID; sleep 0.05'
        spec = api.JobSpec(command=["sh", "-c", script], resource_req="rusage[gpu=1]", cwd=str(tmp_path))
        with cluster.client() as client:
            ids = [j.id for j in client.submit([spec] * JOBS).jobs]
            wait_until(lambda: sum(1 for j in client.list_jobs() if j.state == api.DONE) == JOBS,
                       "every GPU job to run", timeout_s=240)
            hosts = {j.id: j.host for j in client.list_jobs()}
    finally:
        scheduler.kill()
        workers.stop()
    spans: dict[str, list[tuple[int, int, list[int], int]]] = {"g1": [], "g2": []}
    for name in spans:
        journal = Journal(workers.spool(name) / "journal")
        try:
            for (job_id, _), record in journal.items():
                if job_id in ids and record.get("started_ms"):
                    final = api.JobReport.FromString(bytes.fromhex(record["final"]))
                    spans[name].append((int(record["started_ms"]), final.finished.time_ms,
                                        list(record.get("gpus", [])), job_id))
        finally:
            journal.close()
    assert sum(len(s) for s in spans.values()) == JOBS  # each ran once
    for name, runs in spans.items():
        assert all(len(gpus) == 1 and 0 <= gpus[0] < 2 for _, _, gpus, _ in runs), runs
        for start, end, gpus, job_id in runs:
            # Its own index, as the job saw it.
            assert (out / str(job_id)).read_text().strip() == str(gpus[0])
            assert hosts[job_id] == name
            sharing = [r for r in runs if r[3] != job_id and r[0] < end and start < r[1] and r[2] == gpus]
            assert not sharing, (name, job_id, gpus, sharing)  # no index held by two at once
        # At most two at once, at every moment (ends before starts at the same millisecond).
        moments = sorted([(start, 1) for start, _, _, _ in runs] + [(end, -1) for _, end, _, _ in runs],
                         key=lambda m: (m[0], m[1]))
        running = peak = 0
        for _, step in moments:
            running += step
            peak = max(peak, running)
        assert peak <= 2, (name, peak)
