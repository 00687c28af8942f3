"""Workers joining, heartbeating and re-joining, on real processes (H1, M2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from client.channel import Client
from ops.local_cluster import LocalCluster, LocalWorkers
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster



@pytest.fixture
def setup(fleet: tuple[LocalCluster, LocalWorkers]) -> tuple[LocalCluster, LocalWorkers]:
    return fleet


def _hosts(cluster: LocalCluster) -> dict[str, api.Host]:
    with cluster.client() as client:
        return {h.spec.name: h for h in client.list_hosts().hosts}


def _wait_for(cluster: LocalCluster, check: Callable[[dict[str, api.Host]], bool],
              timeout_s: float = 15.0) -> dict[str, api.Host]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        hosts = _hosts(cluster)
        if check(hosts):
            return hosts
        time.sleep(0.05)
    raise AssertionError(f"condition not met; hosts: {hosts}")


def _ok(name: str, generation: int | None = None) -> Callable[[dict[str, api.Host]], bool]:
    def check(hosts: dict[str, api.Host]) -> bool:
        host = hosts.get(name)
        return host is not None and host.status == api.HOST_OK and (
            generation is None or host.generation == generation)
    return check


def test_worker_joins_with_its_config_and_shows_in_hosts(setup: tuple[LocalCluster, LocalWorkers]) -> None:
    cluster, workers = setup
    workers.start("node1", 4, 'tags = ["gpu"]\nmemory_mb = 2048\n[resources]\ngpu = 2\n')
    workers.start("node2", 0)  # a closed host is valid (LSF MXJ=0)
    hosts = _wait_for(cluster, lambda h: _ok("node1")(h) and _ok("node2")(h))
    node1 = hosts["node1"]
    # its tags, then what its code carries out (worker/config.py CODE_TAGS)
    assert (node1.spec.slots, node1.spec.memory_mb, list(node1.spec.tags)) == (4, 2048, ["gpu", "xce_lsf"])
    assert dict(node1.spec.resources) == {"gpu": 2.0} and node1.generation == 1
    env = {**os.environ, "XCE_DATA": str(cluster.data)}
    shown = subprocess.run([sys.executable, "-m", "cli", "hosts"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert "node1" in shown.stdout and "closed" in shown.stdout
    listed = json.loads(subprocess.run([sys.executable, "-m", "cli", "hosts", "--json"], env=env,
                                       capture_output=True, text=True, timeout=60).stdout)
    assert {h["spec"]["name"] for h in listed["hosts"]} == {"node1", "node2"}


def test_dead_worker_becomes_unavail_and_rejoins_in_place(setup: tuple[LocalCluster, LocalWorkers]) -> None:
    cluster, workers = setup
    workers.start("node1", 0)
    _wait_for(cluster, _ok("node1", 1))
    workers.kill("node1")
    killed = time.monotonic()
    hosts = _wait_for(cluster, lambda h: h["node1"].status == api.HOST_UNAVAIL)
    assert time.monotonic() - killed < 1.5 + 3  # the timeout, plus a check period and a commit
    assert hosts["node1"].generation == 1
    workers.start("node1", 8)  # back with other resources (M2: bug-1494's slots 0 -> 8)
    hosts = _wait_for(cluster, _ok("node1", 2))
    assert hosts["node1"].spec.slots == 8
    assert len(hosts) == 1  # updated in place, not a second record


def test_worker_follows_a_new_leader_and_stays_ok(setup: tuple[LocalCluster, LocalWorkers]) -> None:
    cluster, workers = setup
    workers.start("node1", 2)
    _wait_for(cluster, _ok("node1", 1))
    old = cluster.leader()
    cluster.kill(old)
    cluster.leader(exclude=old)
    hosts = _wait_for(cluster, _ok("node1", 2))  # re-joined the new leader: generation + 1
    assert hosts["node1"].spec.slots == 2
    time.sleep(2.0)  # longer than the heartbeat timeout: heartbeats reach the new leader
    assert _hosts(cluster)["node1"].status == api.HOST_OK


def test_worker_config_with_negative_slots_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "w.toml"
    config.write_text('controllers = ["127.0.0.1:1"]\nname = "n"\nslots = -1\n')
    result = subprocess.run([sys.executable, "-m", "cli", "worker", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "slots must be between 0" in result.stderr


@pytest.mark.parametrize("spec", [api.HostSpec(name="", slots=1), api.HostSpec(name="bad name", slots=1),
                                  api.HostSpec(name="n", slots=-4), api.HostSpec(name="n", memory_mb=-1)])
def test_bad_join_is_invalid_argument_and_changes_nothing(setup: tuple[LocalCluster, LocalWorkers],
                                                          spec: api.HostSpec) -> None:
    cluster, _ = setup
    leader = cluster.address(cluster.leader())
    with Client([leader], cluster.credentials) as client:
        before = client.status(local_only=True).replicas[0].revision
    with cluster.worker_credentials(spec.name or "n").channel(leader) as channel:
        connect = channel.stream_stream("/xce.v1.WorkerService/Connect",
                                        request_serializer=api.WorkerMessage.SerializeToString,
                                        response_deserializer=api.ControllerMessage.FromString)
        with pytest.raises(grpc.RpcError) as caught:
            list(connect(iter([api.WorkerMessage(join=spec)]), timeout=10))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with Client([leader], cluster.credentials) as client:
        assert client.status(local_only=True).replicas[0].revision == before
        assert list(client.list_hosts().hosts) == []


def test_follower_refuses_a_worker_stream_with_the_leader_address(
        setup: tuple[LocalCluster, LocalWorkers]) -> None:
    cluster, _ = setup
    leader = cluster.leader()
    follower = next(r for r in (1, 2, 3) if r != leader)
    with cluster.worker_credentials("n").channel(cluster.address(follower)) as channel:
        connect = channel.stream_stream("/xce.v1.WorkerService/Connect",
                                        request_serializer=api.WorkerMessage.SerializeToString,
                                        response_deserializer=api.ControllerMessage.FromString)
        with pytest.raises(grpc.RpcError) as caught:
            list(connect(iter([api.WorkerMessage(join=api.HostSpec(name="n", slots=1))]), timeout=10))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ("x-xce-leader", cluster.address(leader)) in tuple(caught.value.trailing_metadata())
