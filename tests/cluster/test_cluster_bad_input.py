"""Bad input on a live cluster: the documented status code, and nothing changed.

Every case checks the leader's revision before and after: a refused request
never reaches the Raft log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from client.channel import Client, XceError
from ops.local_cluster import LocalCluster, write_config
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("bad-input") / "cluster").running() as cluster:
        with cluster.client() as client:
            client.submit([api.JobSpec(command=["true"], name="existing")])
        yield cluster


def _revision(cluster: LocalCluster) -> int:
    with Client([cluster.address(cluster.leader())], cluster.credentials) as client:
        return client.status(local_only=True).replicas[0].revision


def _refused(cluster: LocalCluster, code: grpc.StatusCode, call: Callable[[Client], object],
             needle: str = "") -> str:
    before = _revision(cluster)
    with cluster.client() as client, pytest.raises(XceError) as caught:
        call(client)
    assert caught.value.code == code, caught.value
    assert needle.lower() in caught.value.message.lower()
    assert _revision(cluster) == before
    return caught.value.message


def _spec(**kwargs: object) -> api.JobSpec:
    spec = api.JobSpec(command=["sleep", "1"])
    for key, value in kwargs.items():
        if key == "command":
            del spec.command[:]
            spec.command.extend(value)  # type: ignore[arg-type]
        elif key == "env":
            spec.env.update(value)  # type: ignore[call-overload]
        else:
            setattr(spec, key, value)
    return spec


INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(("spec", "needle"), [
    (_spec(command=[]), "empty command"),
    (_spec(command=[" "]), "empty command"),
    (_spec(slots=0), "slots"),
    (_spec(slots=-3), "slots"),
    (_spec(slots=1025), "slots"),
    (_spec(queue="nosuchqueue"), "unknown queue"),
    (_spec(name="a\x00b"), "NUL"),
    (_spec(resource_req="select[mem>]"), "column 12"),
    (_spec(resource_req="span[hosts=2] rusage[gpu=1]"), "column 12: span[hosts=] takes 1"),
])
def test_bad_job_spec_is_invalid_argument(live: LocalCluster, spec: api.JobSpec, needle: str) -> None:
    _refused(live, INVALID, lambda c: c.submit([spec]), needle)


def test_one_bad_spec_refuses_the_whole_request(live: LocalCluster) -> None:
    _refused(live, INVALID, lambda c: c.submit([_spec(), _spec(slots=0)]), "slots")
    with live.client() as client:
        assert len(client.list_jobs()) == 1


def test_oversized_request_is_refused(live: LocalCluster) -> None:
    before = _revision(live)
    spec = _spec(name="x" * 4000, env={f"K{i}": "v" * 1000 for i in range(1100)})
    request = api.SubmitJobsRequest(request_id="big", jobs=[spec])
    assert request.ByteSize() > 1 << 20
    with live.credentials.channel(live.address(live.leader()),
                                  [("grpc.max_send_message_length", 8 << 20)]) as channel:
        stub = channel.unary_unary("/xce.v1.JobService/SubmitJobs",
                                   request_serializer=api.SubmitJobsRequest.SerializeToString,
                                   response_deserializer=api.SubmitJobsResponse.FromString)
        with pytest.raises(grpc.RpcError) as caught:
            stub(request, timeout=10, metadata=live.credentials.metadata())
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _revision(live) == before


def test_invalid_utf8_is_invalid_argument(live: LocalCluster) -> None:
    before = _revision(live)
    bad_string = b"\xff\xfe sleep"
    job = b"\x0a" + bytes([len(bad_string)]) + bad_string  # JobSpec.command[0]
    raw = b"\x12" + bytes([len(job)]) + job  # SubmitJobsRequest.jobs[0]
    with live.credentials.channel(live.address(live.leader())) as channel:
        stub = channel.unary_unary("/xce.v1.JobService/SubmitJobs")
        with pytest.raises(grpc.RpcError) as caught:
            stub(raw, timeout=10, metadata=live.credentials.metadata())
    assert caught.value.code() == INVALID
    assert "utf-8" in (caught.value.details() or "").lower()
    assert _revision(live) == before


@pytest.mark.parametrize("job_id", ["999999", "local-1-20260101000000-1", "local-9-20200101000000-999"])
def test_unknown_job_id_is_not_found(live: LocalCluster, job_id: str) -> None:
    _refused(live, grpc.StatusCode.NOT_FOUND, lambda c: c.get_job(job_id))
    _refused(live, grpc.StatusCode.NOT_FOUND, lambda c: c.control(job_id, api.KILL))
    _refused(live, grpc.StatusCode.NOT_FOUND, lambda c: c.modify(job_id, priority=3))


def test_malformed_job_id_is_invalid_argument(live: LocalCluster) -> None:
    _refused(live, INVALID, lambda c: c.get_job("not-an-id"), "not a job id")


def test_readable_id_is_accepted_everywhere(live: LocalCluster) -> None:
    with live.client() as client:
        job = client.submit([_spec(name="readable")]).jobs[0]
        assert client.get_job(job.readable_id).id == job.id
        assert client.modify(job.readable_id, priority=9).spec.priority == 9
        assert client.control(job.readable_id, api.HOLD).state == api.PSUSP
        assert client.control(str(job.id), api.RELEASE).state == api.PEND


@pytest.mark.parametrize(("action", "needle"), [
    (api.RELEASE, "cannot release"), (api.RESUME, "cannot resume"), (api.REQUEUE, "cannot requeue"),
])
def test_action_invalid_in_state_is_failed_precondition(live: LocalCluster, action: int, needle: str) -> None:
    with live.client() as client:
        job = client.submit([_spec(name="pending")]).jobs[0]
    _refused(live, grpc.StatusCode.FAILED_PRECONDITION, lambda c: c.control(job.id, action), needle)


def test_finished_job_refuses_kill_and_modify(live: LocalCluster) -> None:
    with live.client() as client:
        job = client.submit([_spec(name="to-kill")]).jobs[0]
        killed = client.control(job.id, api.KILL)
        assert killed.state == api.EXIT
    _refused(live, grpc.StatusCode.FAILED_PRECONDITION, lambda c: c.control(job.id, api.KILL))
    _refused(live, grpc.StatusCode.FAILED_PRECONDITION, lambda c: c.modify(job.id, priority=1))


def test_modify_to_unknown_queue_is_invalid_argument(live: LocalCluster) -> None:
    with live.client() as client:
        job = client.submit([_spec(name="mod")]).jobs[0]
    _refused(live, INVALID, lambda c: c.modify(job.id, queue="nosuchqueue"), "unknown queue")


def test_a_bad_requirement_is_refused_at_submit_and_modify_with_its_column(live: LocalCluster) -> None:
    env = {**os.environ, "XCE_DATA": str(live.data)}
    env.pop("XCE_CONTROLLERS", None)
    before = _revision(live)
    done = subprocess.run([sys.executable, "-m", "cli", "submit", "-R", "select[gpu > 1 &&]", "--",
                           "true"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and "INVALID_ARGUMENT" in done.stderr, done.stderr
    assert "column 18" in done.stderr and _revision(live) == before, done.stderr
    with live.client() as client:
        job = client.submit([_spec(name="mod", resource_req="select[gpu > 1]", queue="idle")]).jobs[0]
    _refused(live, INVALID, lambda c: c.modify(job.id, resource_req="order[-]"), "column 8")
    with live.client() as client:
        assert client.get_job(str(job.id)).spec.resource_req == "select[gpu > 1]"


@pytest.mark.parametrize("flt", ["state", "colour:eq:red", "state:like:PEND", "priority:gt:high",
                                 "state:eq:SLEEPING"])
def test_bad_filter_is_invalid_argument(live: LocalCluster, flt: str) -> None:
    _refused(live, INVALID, lambda c: c.list_jobs([flt]))


def test_bad_queue_admin(live: LocalCluster) -> None:
    _refused(live, grpc.StatusCode.ALREADY_EXISTS,
             lambda c: c.put_queue(api.Queue(name="normal", priority=1), create=True))
    _refused(live, grpc.StatusCode.NOT_FOUND,
             lambda c: c.put_queue(api.Queue(name="ghost", priority=1), create=False))
    _refused(live, INVALID, lambda c: c.put_queue(api.Queue(name="bad name!"), create=True), "queue name")


def test_closed_queue_refuses_submit(live: LocalCluster) -> None:
    with live.client() as client:
        client.put_queue(api.Queue(name="shut", priority=10, closed=True), create=True)
        names = [q.name for q in client.list_queues().queues]
        assert "shut" in names
    _refused(live, grpc.StatusCode.FAILED_PRECONDITION, lambda c: c.submit([_spec(queue="shut")]), "closed")


def test_follower_redirects_with_leader_address(live: LocalCluster) -> None:
    leader = live.leader()
    follower = next(r for r in (1, 2, 3) if r != leader)
    with live.credentials.channel(live.address(follower)) as channel:
        stub = channel.unary_unary("/xce.v1.JobService/SubmitJobs",
                                   request_serializer=api.SubmitJobsRequest.SerializeToString,
                                   response_deserializer=api.SubmitJobsResponse.FromString)
        with pytest.raises(grpc.RpcError) as caught:
            stub(api.SubmitJobsRequest(jobs=[_spec()]), timeout=10, metadata=live.credentials.metadata())
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ("x-xce-leader", live.address(leader)) in tuple(caught.value.trailing_metadata())


def test_no_leader_is_unavailable(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster()
    cluster.start()
    leader = cluster.leader()
    survivor = next(r for r in (1, 2, 3) if r != leader)
    for replica_id in (1, 2, 3):
        if replica_id != survivor:
            cluster.kill(replica_id)
    with Client([cluster.address(survivor)], cluster.credentials, deadline_s=3) as client, \
            pytest.raises(XceError) as caught:
        client.submit([_spec()])
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


def _start_replica(config: Path, replica_id: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", "controller", "--config", str(config),
                           "--id", str(replica_id)], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_corrupt_state_file_refuses_to_start(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c")
    state = tmp_path / "c" / "replica-1" / "state"
    state.mkdir(parents=True)
    (state / "data.mdb").write_bytes(os.urandom(64 << 10))
    result = _start_replica(config, 1)
    assert result.returncode == 2
    assert "corrupt" in result.stderr
    assert (state / "data.mdb").stat().st_size == 64 << 10  # left as it was


def test_state_of_another_cluster_refuses_to_start(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c", cluster_id="alpha")
    from controller.store import StateStore

    StateStore(tmp_path / "c" / "replica-1" / "state", "beta").close()
    result = _start_replica(config, 1)
    assert result.returncode == 2
    assert "belongs to cluster 'beta'" in result.stderr


def test_unknown_replica_id_and_bad_config_are_clear(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c")
    result = _start_replica(config, 7)
    assert result.returncode == 2 and "no replica with id 7" in result.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("cluster_id = [unclosed")
    result = _start_replica(bad, 1)
    assert result.returncode == 2 and "not valid TOML" in result.stderr


def test_corrupt_snapshot_stops_the_replica_with_a_message(make_cluster) -> None:  # type: ignore[no-untyped-def]
    # pysyncobj swallows snapshot load errors and would then never apply
    # again; the replica must stop and say why instead.
    cluster = make_cluster(extra_config="\n[raft]\ncompaction_min_entries = 20\n")
    cluster.start()
    cluster.leader()
    with cluster.client() as client:
        for i in range(60):
            client.submit([_spec(name=f"snap-{i}")])
    cluster.stop()
    snapshot = cluster.config.replica_dir(1) / "snapshot"
    assert snapshot.exists()
    snapshot.write_bytes(b"garbage" * 100)
    result = _start_replica(cluster.config_path, 1)
    assert result.returncode == 70
    assert "loading snapshot" in result.stderr and "not an XCE snapshot" in result.stderr
