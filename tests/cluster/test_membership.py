"""Membership changes on real processes: a replica added as a learner and promoted, a dead one removed,
the leader removing itself, leader kills between the steps, and bad commands refused.

Each new replica runs `xce controller --join` with a cluster file of its own (the cluster's, with it
added; LocalCluster.new_replica); the others keep theirs, which stays the bootstrap list."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import grpc
import pytest

from client.channel import Client, XceError
from client.credentials import Credentials
from ops.local_cluster import LocalCluster
from tests.conftest import Submitting, leaders_per_term, replica_dump, role_of, wait_until, xce_cli
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


def _members(cluster: LocalCluster, via: list[int]) -> dict[int, int]:
    with Client([cluster.address(r) for r in via], cluster.credentials) as client:
        return {m.id: m.role for m in client.list_members().members}


def _refused(cluster: LocalCluster, call: str, *args: object,
             credentials: Credentials | None = None) -> XceError:
    with Client(cluster.addresses, credentials or cluster.credentials) as client, \
            pytest.raises(XceError) as refused:
        getattr(client, call)(*args)
    return refused.value


def _converged(cluster: LocalCluster, ids: list[int]) -> int:
    def same() -> int | None:
        applied = set()
        for replica_id in ids:
            try:
                with Client([cluster.address(replica_id)], cluster.credentials, deadline_s=1,
                            follow_leader=False) as client:
                    applied.add(client.status(local_only=True).replicas[0].applied_index)
            except XceError:
                return None
        return applied.pop() if len(applied) == 1 else None

    return wait_until(same, f"replicas {ids} to apply the same entries")


def _all_acknowledged_jobs_there(cluster: LocalCluster, load: Submitting, via: list[int]) -> None:
    with Client([cluster.address(r) for r in via], cluster.credentials) as client:
        jobs = {j.request_id: j.id for j in client.list_jobs()}
    missing = [rid for rid, (job_id, _) in load.acked.items() if jobs.get(rid) != job_id]
    assert not missing, f"{len(missing)} acknowledged jobs missing, e.g. {missing[:3]}"


def test_a_dead_replica_is_replaced_while_writes_go_on(make_cluster) -> None:  # type: ignore[no-untyped-def]
    # Logs compacted every 100 entries: the new replica catches up from a snapshot, as a learner.
    cluster: LocalCluster = make_cluster(extra_config="\n[raft]\ncompaction_min_entries = 100\n")
    cluster.start()
    cluster.leader()
    with Submitting(cluster) as load:
        wait_until(lambda: load.count() >= 300, "the first submits (past a compaction)")
        cluster.kill(2)  # for good: its host is gone
        shutil.rmtree(cluster.config.replica_dir(2))
        new = cluster.new_replica(4)
        cluster.start([4])
        wait_until(lambda: role_of(cluster, 4) == "learner", "replica 4 to run as a learner")
        before_add = time.monotonic()
        out = xce_cli(cluster, "member", "add", new.grpc)
        assert "replica 4 is a voter" in out
        assert load.since(before_add) > 0, "no write was acknowledged while replica 4 was added"
        learned = (cluster.data / "replica-4.log").read_text().split("starts as a standby")[0]
        assert "installed" in learned and "snapshot at index" in learned  # a snapshot, as a learner
        before_remove = time.monotonic()
        out = xce_cli(cluster, "member", "remove", "2")
        assert "replica 2 is gone" in out
        wait_until(lambda: load.since(before_remove) >= 10, "writes after the removal")
    assert not load.errors
    assert _members(cluster, [1, 3, 4]) == {1: api.MEMBER_VOTER, 3: api.MEMBER_VOTER, 4: api.MEMBER_VOTER}
    _all_acknowledged_jobs_there(cluster, load, [1, 3, 4])
    status = xce_cli(cluster, "status")
    assert "members (committed): 1 voter" in status and "4 voter" in status
    assert "cluster file (bootstrap): 1 " in status and " 2 " in status.split("cluster file")[1]
    revision = _converged(cluster, [1, 3, 4])
    for replica_id in (1, 3, 4):
        cluster.kill(replica_id)
    dumps = {r: replica_dump(cluster, r) for r in (1, 3, 4)}
    assert {applied for _, applied in dumps.values()} == {revision}
    assert len({dump for dump, _ in dumps.values()}) == 1, "replica 4's state differs from the others'"


def test_a_leader_that_is_removed_hands_leadership_over_first(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: LocalCluster = make_cluster()
    cluster.start()
    old = cluster.leader()
    out = xce_cli(cluster, "member", "remove", str(old))
    assert f"replica {old} is gone" in out
    others = [r for r in (1, 2, 3) if r != old]
    new = cluster.leader(exclude=old)
    assert new in others
    assert set(_members(cluster, others)) == set(others)
    with Client([cluster.address(r) for r in others], cluster.credentials) as client:
        client.submit([api.JobSpec(command=["true"], cwd="/tmp")])
        voters = {r.id: r.role for r in client.list_members().replicas}
    assert sorted(voters.values()) == ["follower", "leader"]
    # The old leader still runs (its operator stops it), holding its elections: it never leads again,
    # restarted or not.
    assert cluster.procs[old].poll() is None and role_of(cluster, old) == "standby"
    cluster.restart(old)
    wait_until(lambda: role_of(cluster, old) == "standby", f"replica {old} to come back holding elections")
    with Client([cluster.address(r) for r in others], cluster.credentials) as client:
        client.submit([api.JobSpec(command=["true"], cwd="/tmp")])
    assert cluster.leader(exclude=old) in others and role_of(cluster, old) == "standby"


def test_leader_kills_between_the_steps_lose_nothing(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Every replica waits 1.5 s before each step (XCE_FAULT member-pause), so the leader can be killed
    exactly between two steps: in the learner's catch-up, after its promotion, after the Raft
    configuration took it in, after a removal began and after the Raft configuration let it go."""
    cluster: LocalCluster = make_cluster()
    for replica_id in (1, 2, 3, 4):
        cluster.env[replica_id] = {"XCE_FAULT": "member-pause=1.5"}
    cluster.start()
    cluster.leader()
    kills = 0

    def kill_leader() -> None:
        nonlocal kills
        leader = cluster.leader()
        cluster.kill(leader)
        cluster.start([leader])  # back at once: three of four voters stay up
        kills += 1

    def leader_logrole_of(words: str) -> bool:
        return any(words in p.read_text(errors="replace") for p in cluster.data.glob("replica-*.log"))

    new = cluster.new_replica(4)
    cluster.start([4])
    wait_until(lambda: role_of(cluster, 4) == "learner", "replica 4 to run as a learner")
    with Submitting(cluster) as load:
        with Client(cluster.addresses, cluster.credentials) as client:
            client.add_member(new.grpc)
        kill_leader()  # LEARNER, before its promotion
        wait_until(lambda: _members(cluster, [1, 2, 3]).get(4) == api.MEMBER_PROMOTING, "the promotion")
        kill_leader()  # PROMOTING, before the Raft configuration takes it in
        wait_until(lambda: leader_logrole_of("in the Raft configuration: done"), "the Raft add")
        kill_leader()  # in the Raft configuration, before BECOME_VOTER
        wait_until(lambda: _members(cluster, [1, 2, 3]).get(4) == api.MEMBER_VOTER, "replica 4 a voter")
        victim = next(r for r in (1, 2, 3) if r != cluster.leader())
        with Client(cluster.addresses, cluster.credentials) as client:
            client.remove_member(victim)
        kill_leader()  # REMOVING, before the Raft configuration lets it go
        wait_until(lambda: leader_logrole_of(f"remove {cluster.replica_config(victim).raft} in the Raft "
                                           "configuration: done"), "the Raft removal")
        kill_leader()  # out of the Raft configuration, before REMOVED
        remaining = [r for r in (1, 2, 3, 4) if r != victim]
        wait_until(lambda: victim not in _members(cluster, remaining), f"replica {victim} to be gone")
        after = load.count()
        wait_until(lambda: load.count() >= after + 10, "writes after the change")
    assert kills == 5 and not load.errors
    _all_acknowledged_jobs_there(cluster, load, remaining)
    assert all(len(leaders) == 1 for leaders in leaders_per_term(cluster.data).values()), \
        leaders_per_term(cluster.data)
    revision = _converged(cluster, remaining)
    for replica_id in list(cluster.procs):
        cluster.kill(replica_id)
    dumps = {r: replica_dump(cluster, r) for r in remaining}
    assert {applied for _, applied in dumps.values()} == {revision}
    assert len({dump for dump, _ in dumps.values()}) == 1


def test_bad_membership_commands_are_refused_and_change_nothing(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster: LocalCluster = make_cluster(extra_config="")
    for replica_id in (1, 2, 3):  # a change in flight stays in flight long enough to try a second one
        cluster.env[replica_id] = {"XCE_FAULT": "member-pause=5"}
    cluster.start()
    cluster.leader()
    before = _members(cluster, [1, 2, 3])
    assert before == {1: api.MEMBER_VOTER, 2: api.MEMBER_VOTER, 3: api.MEMBER_VOTER}

    nobody_home = f"127.0.0.1:{_free_port()}"
    refused = _refused(cluster, "add_member", nobody_home)
    assert refused.code == grpc.StatusCode.FAILED_PRECONDITION and "no replica answers" in refused.message
    refused = _refused(cluster, "add_member", cluster.address(1))
    assert refused.code == grpc.StatusCode.ALREADY_EXISTS and "is replica 1's" in refused.message
    refused = _refused(cluster, "add_member", "not-an-address")
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    refused = _refused(cluster, "remove_member", 9)
    assert refused.code == grpc.StatusCode.NOT_FOUND
    operator = cluster.new_user("olga", role="operator")
    refused = _refused(cluster, "remove_member", 3, credentials=operator)
    assert refused.code == grpc.StatusCode.PERMISSION_DENIED and "cluster.members" in refused.message
    cluster.kill(3)  # with 3 down, removing 2 would leave 1 and 3: one reachable, two needed
    refused = _refused(cluster, "remove_member", 2)
    assert refused.code == grpc.StatusCode.FAILED_PRECONDITION and "fewer than the 2" in refused.message
    cluster.start([3])
    assert _members(cluster, [1, 2, 3]) == before

    # A second change while one is in flight: replica 4 is a learner (its promotion waits 5 s).
    four, five = cluster.new_replica(4), cluster.new_replica(5)
    cluster.start([4, 5])
    wait_until(lambda: role_of(cluster, 4) == role_of(cluster, 5) == "learner", "replicas 4, 5 as learners")
    with Client(cluster.addresses, cluster.credentials) as client:
        client.add_member(four.grpc)
    refused = _refused(cluster, "add_member", five.grpc)
    assert refused.code == grpc.StatusCode.FAILED_PRECONDITION and "in flight" in refused.message
    assert _members(cluster, [1, 2, 3]) == {**before, 4: api.MEMBER_LEARNER}
    with Client(cluster.addresses, cluster.credentials) as client:
        client.remove_member(4)  # cancels the add; the learner stops by itself
    assert _members(cluster, [1, 2, 3]) == before
    assert cluster.procs[4].wait(timeout=60) == 0
    assert "no longer a member (the add was cancelled)" in (cluster.data / "replica-4.log").read_text()

    solo = make_cluster(replicas=1, name="solo")
    solo.start()
    solo.leader()
    refused = _refused(solo, "remove_member", 1)
    assert refused.code == grpc.StatusCode.FAILED_PRECONDITION and "last member" in refused.message
    assert _members(solo, [1]) == {1: api.MEMBER_VOTER}
    solo.kill(1, signal.SIGTERM)


def _free_port() -> int:
    from ops.local_cluster import free_ports

    return free_ports(1)[0]
