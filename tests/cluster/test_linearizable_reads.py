"""Reads are linearizable by default (Raft ReadIndex on the leader); `stale` lets any replica answer."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from conftest import print_logs_if_failed

from client.channel import Client, XceError
from ops.local_cluster import LocalCluster
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


PROBE = r"""
import json, sys
from pathlib import Path
from client.channel import Client, XceError
from client.credentials import for_cluster
from xce.v1 import api_pb2 as api
address, cluster_file = sys.argv[1], sys.argv[2]
credentials = for_cluster(Path(cluster_file))
with Client([address], credentials, deadline_s=0.5, call_timeout_s=0.5, follow_leader=False) as status:
    while True:
        try:
            status.status(local_only=True)
            break
        except XceError:
            pass
print(json.dumps({"ready": True}), flush=True)
sys.stdin.readline()
out = {}
with Client([address], credentials, deadline_s=8, call_timeout_s=8, follow_leader=False) as client:
    out["role"] = client.status(local_only=True).replicas[0].role
    stale = client.call("JobService", "ListJobs", api.ListJobsRequest(stale=True), api.ListJobsResponse)
    out["stale_ids"] = [j.id for j in stale.jobs]
    try:
        out["read_ids"] = [j.id for j in client.list_jobs()]
    except XceError as exc:
        out["refused"] = exc.code.name
print(json.dumps(out), flush=True)
"""


def test_a_leader_cut_off_in_a_network_namespace_answers_no_read_after_a_new_leader_wrote(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from soak.netns import Net, available

    if available() is not None:
        pytest.skip(str(available()))
    net = Net(3)
    # The old leader keeps believing it leads for 30 s (pysyncobj's leader fallback), long after
    # the others elected a new one: a leader answering reads from its own state would show old data.
    cluster = LocalCluster(tmp_path / "cluster", hosts=net.addresses, prefix=lambda rid: net.prefix(rid - 1),
                           extra_config="\n[raft]\nleader_fallback_s = 30\n")
    probe = None
    try:
        cluster.start()
        old = cluster.leader()
        with cluster.client() as client:
            first = client.submit([api.JobSpec(command=["true"])]).jobs[0].id
        env = {**os.environ, "XCE_TOKEN": cluster.admin_token}
        probe = subprocess.Popen([*net.prefix(old - 1), sys.executable, "-c", PROBE, cluster.address(old),
                                  str(cluster.config_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=env, cwd=str(Path(__file__).resolve().parents[2]))
        assert probe.stdout is not None and probe.stdin is not None
        assert json.loads(probe.stdout.readline()) == {"ready": True}
        net.cut(old - 1)
        others = [cluster.address(r.id) for r in cluster.config.replicas if r.id != old]
        with Client(others, cluster.credentials, deadline_s=30) as client:
            second = client.submit([api.JobSpec(command=["true"])]).jobs[0].id  # the new leader's write
        assert second > first
        probe.stdin.write("go\n")
        probe.stdin.flush()
        seen = json.loads(probe.stdout.readline())
        assert seen["role"] == "leader"  # it still believes it leads ...
        assert seen["stale_ids"] == [first]  # ... and its own state lacks the new write
        assert "read_ids" not in seen and seen["refused"] in ("UNAVAILABLE", "FAILED_PRECONDITION"), seen
    finally:
        if probe is not None:
            probe.kill()
            probe.communicate()  # reaps it and closes its pipes
        cluster.stop()
        net.close()
        print_logs_if_failed(request, cluster.data)
