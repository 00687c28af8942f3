"""Reads are linearizable by default (Raft ReadIndex on the leader); `stale` lets any replica answer."""

from __future__ import annotations

import os
import random
import signal
import time

import grpc
import pytest

from xce.client import Client, XceError
from xce.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

ROUNDS = int(os.environ.get("XCE_READ_ROUNDS", "12"))  # the acceptance's 200: XCE_READ_ROUNDS=200


def test_a_write_is_seen_by_the_next_read_from_any_replica_through_leader_kills(
        cluster: LocalCluster) -> None:
    rng = random.Random(7)
    for round_ in range(ROUNDS):
        with cluster.client() as client:
            job = client.submit([api.JobSpec(command=["true"], name=f"r{round_}")]).jobs[0]
        if round_ % 3 == 0:  # every third round the leader dies right after the write
            leader = cluster.leader()
            cluster.kill(leader)
            cluster.leader(exclude=leader)
            cluster.start([leader])
        replica = rng.choice([r.id for r in cluster.config.replicas if r.id in cluster.procs])
        with Client([cluster.address(replica)], cluster.credentials, deadline_s=30) as client:
            assert client.get_job(job.id).id == job.id  # followers refer the read to the leader
            assert job.id in {j.id for j in client.list_jobs([f"name:eq:r{round_}"])}


def test_a_stale_read_is_answered_by_a_follower_with_its_revision(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    follower = next(r.id for r in cluster.config.replicas if r.id != leader)
    with cluster.client() as client:
        client.submit([api.JobSpec(command=["true"])])
    with Client([cluster.address(follower)], cluster.credentials, deadline_s=5,
                follow_leader=False) as client:
        with pytest.raises(XceError) as caught:
            client.list_jobs()  # linearizable: only the leader answers
        assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
        response = client.call("JobService", "ListJobs", api.ListJobsRequest(stale=True),
                               api.ListJobsResponse)
        assert response.revision > 0  # its own state, at its own revision
        assert client.list_hosts(stale=True).revision >= response.revision


def test_a_leader_that_lost_its_leadership_answers_no_read_with_old_state(cluster: LocalCluster) -> None:
    """The old leader is frozen while the others elect a leader and commit a write; thawed, it may
    still believe it leads. A read it answers from its own state would miss that write."""
    old = cluster.leader()
    cluster.procs[old].send_signal(signal.SIGSTOP)
    try:
        new = cluster.leader(exclude=old, timeout_s=30)
        with Client([cluster.address(new)], cluster.credentials, deadline_s=30) as client:
            job = client.submit([api.JobSpec(command=["true"], name="after")]).jobs[0]
    finally:
        cluster.procs[old].send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with Client([cluster.address(old)], cluster.credentials, deadline_s=2, call_timeout_s=2,
                    follow_leader=False) as client:
            try:
                seen = {j.id for j in client.list_jobs(["name:eq:after"])}
            except XceError as exc:  # refused: it is not the leader, or could not confirm it
                assert exc.code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE)
                continue
        assert job.id in seen, "a read answered without the write committed before it"
