"""`[tls] insecure = true`: plaintext, only when asked, and tokens are still required of everyone."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from conftest import FAST_HOSTS

from client.channel import Client, XceError
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


@pytest.fixture
def plaintext(make_cluster) -> LocalCluster:  # type: ignore[no-untyped-def]
    cluster: LocalCluster = make_cluster(extra_config=FAST_HOSTS, insecure=True)
    cluster.start()
    cluster.leader()
    return cluster


def test_a_plaintext_cluster_runs_jobs_with_worker_and_scheduler_tokens(plaintext: LocalCluster,
                                                                        tmp_path: Path) -> None:
    workers, scheduler = LocalWorkers(plaintext), LocalScheduler(plaintext)
    try:
        workers.start("w1", 2)
        scheduler.start()
        with plaintext.client() as client:
            job = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path))]).jobs[0]
            deadline = time.monotonic() + 30
            while client.get_job(job.id).state != api.DONE:
                assert time.monotonic() < deadline, client.get_job(job.id)
                time.sleep(0.1)
            assert client.status().scheduler_lease_holder == "sched-1"
    finally:
        scheduler.kill()
        workers.stop()


def test_plaintext_still_needs_a_token(plaintext: LocalCluster) -> None:
    with Client(plaintext.addresses, plaintext.credentials_for(None), deadline_s=5) as client, \
            pytest.raises(XceError) as caught:
        client.list_jobs()
    assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
    worker = plaintext.new_user("w9", "worker")  # a worker's token: it may connect, not read jobs
    with Client(plaintext.addresses, worker, deadline_s=5) as client, pytest.raises(XceError) as caught:
        client.list_jobs()
    assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
