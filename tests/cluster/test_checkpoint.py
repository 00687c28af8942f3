"""Checkpoints on real processes (bsub -k, bchkpnt): a job submitted with -k USR1 gets its
signal each time it is checkpointed, through the CLI and the gateway, and goes on running."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from ops.local_cluster import LocalGateway
from tests.conftest import FAST_HOSTS, wait_until, xce_cli
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

SAVER = """
trap 'echo saved >> "$0.log"' USR1
echo started >> "$0.log"
while :; do sleep 0.1; done
"""


def test_a_checkpointable_job_gets_its_signal_each_time_and_runs_on(  # type: ignore[no-untyped-def]
        make_scheduled, tmp_path: Path) -> None:
    cluster, workers = make_scheduled(FAST_HOSTS)
    workers.start("w1", 2)
    script = tmp_path / "saver.sh"
    script.write_text(SAVER)
    log = tmp_path / "saver.sh.log"
    gateway = LocalGateway(cluster)
    try:
        gateway.start()
        with cluster.client() as client:
            job = client.submit([api.JobSpec(command=["sh", str(script)], cwd=str(tmp_path),
                                             checkpoint_signal=10)]).jobs[0]
            plain = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path))]).jobs[0]
            wait_until(lambda: log.exists() and "started" in log.read_text(), "the job to start")
            assert "checkpoint: now RUN" in xce_cli(cluster, "checkpoint", str(job.id))
            wait_until(lambda: log.read_text().count("saved") == 1, "the first checkpoint's signal")
            admin = {"Authorization": f"Bearer {cluster.admin_token}"}
            answer = httpx.post(f"{gateway.url}/xce/v1/jobs/{job.id}/actions", json={"action": "checkpoint"},
                                headers=admin, timeout=30)
            assert answer.status_code == 200 and answer.json()["checkpoints"] == 2
            wait_until(lambda: log.read_text().count("saved") == 2, "the second checkpoint's signal")
            now = client.get_job(job.id)
            assert now.state == api.RUN and now.checkpoints == 2 and now.checkpoint_time_ms > 0
            wait_until(lambda: client.get_job(plain.id).state == api.DONE, "the plain job's end")
            refused = httpx.post(f"{gateway.url}/xce/v1/jobs/{plain.id}/actions",
                                 json={"action": "checkpoint"}, headers=admin, timeout=30)
            assert refused.status_code == 400
        # A new leader's session with the worker says checkpoint 2 again (commit before send: it
        # cannot know it was sent): the worker signals each number once.
        with cluster.client() as client:
            joined = client.list_hosts().hosts[0].generation
        cluster.kill(cluster.leader())
        cluster.leader()
        with cluster.client() as client:
            wait_until(lambda: client.list_hosts().hosts[0].generation > joined,
                       "the worker's join to the new leader")
        xce_cli(cluster, "checkpoint", str(job.id))
        # Checkpoint 2 came again on the new connection before this third one: had the worker
        # signalled it again, the log would say saved four times.
        wait_until(lambda: log.read_text().count("saved") >= 3, "the third checkpoint's signal")
        assert log.read_text().count("saved") == 3
    finally:
        gateway.kill()
