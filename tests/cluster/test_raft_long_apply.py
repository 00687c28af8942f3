"""Replicas stay heard through an entry that takes long to apply (controller/raft.py, `_pulse`).

pysyncobj applies committed entries in its tick thread, which meanwhile neither sends heartbeats nor
reads its peers' answers. A submit of 10,000 jobs took over a second to apply beside 5,000 hosts'
streams on this machine: the followers elected another leader, the submit failed over, and it
happened again at the next large entry. Here every replica applies one submit slowly (XCE_FAULT
slow-entry: 1 ms per table operation, several seconds in all, longer than the election timeout and
than the leader's step-down after silence) and nothing changes hands: one leader, one Raft term."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import wait_until

from client.channel import Client
from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

# Timeouts twice the default ones, which a loaded machine does not reach by itself (only the slow
# entry does), so that an election here means the replicas went silent while applying; and pysyncobj
# drops a connection silent for connection_timeout_s, which the apply must stay under.
RAFT = ("[raft]\nelection_min_s = 0.6\nelection_max_s = 0.7\nleader_fallback_s = 1.5\n"
        "connection_timeout_s = 10.0\n")
JOBS = 400  # ~7 table operations each: ~3 s of applying on every replica


def _slowed(cluster: LocalCluster, replica_id: int) -> None:
    cluster.env[replica_id] = {"XCE_FAULT": "slow-entry=submit"}


def _wait_caught_up(client: Client, replica_id: int, revision: int) -> None:
    wait_until(lambda: any(r.id == replica_id and r.role == "follower" and r.applied_index >= revision
                           for r in client.status().replicas), f"replica {replica_id} back and caught up")


def _submit_and_check_nothing_changed_hands(cluster: LocalCluster, leader: int) -> None:
    with cluster.client() as client:
        client.call_timeout_s = 30  # the slowed apply takes ~3 s on the leader, more on a busy machine
        before = {r.id: r.term for r in client.status().replicas}
        assert len(set(before.values())) == 1, before
        client.prefer(cluster.config.replica(leader).grpc)
        response = client.submit([api.JobSpec(command=["true"])] * JOBS)
        assert len(response.jobs) == JOBS
        after = wait_until(lambda: (s := client.status().replicas) and all(
            r.applied_index >= response.revision for r in s) and s, "every replica to apply the submit")
        assert {r.id: r.term for r in after} == before  # no replica ever stood for election
        assert next(r.id for r in after if r.role == "leader") == leader
        assert client.retries == 0  # the submit never had to fail over


def test_no_election_while_every_replica_applies_one_entry_for_seconds(
        make_cluster: Callable[..., LocalCluster]) -> None:
    """The leader keeps sending heartbeats from inside its apply."""
    cluster = make_cluster(extra_config=RAFT)
    for replica in cluster.config.replicas:
        _slowed(cluster, replica.id)
    cluster.start()
    _submit_and_check_nothing_changed_hands(cluster, cluster.leader())


def test_the_leader_stays_while_both_followers_apply_one_entry_for_seconds(
        make_cluster: Callable[..., LocalCluster]) -> None:
    """Followers silent for longer than leader_fallback_s would make the leader step down; they tell
    it from inside their apply that they are alive."""
    cluster = make_cluster(extra_config=RAFT)
    cluster.start()
    leader = cluster.leader()
    with cluster.client() as client:
        for replica in cluster.config.replicas:
            if replica.id != leader:  # one at a time: the leader keeps a majority throughout
                _slowed(cluster, replica.id)
                cluster.restart(replica.id)
                _wait_caught_up(client, replica.id, client.submit([api.JobSpec(command=["true"])]).revision)
    assert cluster.leader() == leader
    _submit_and_check_nothing_changed_hands(cluster, leader)
