"""A cluster started from a large state (built offline by the real apply, bench/big_state.py): history,
accounting and indexed lists read right, a wiped follower catches up by snapshot install, and
compactions of the whole state move no term (the copy runs off the tick thread). The same at
1,000,000 finished jobs, with timings: bench/history_scale.py."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import big_state  # noqa: E402
from conftest import wait_until, xce_cli  # noqa: E402

from client.channel import Client, XceError  # noqa: E402
from ops.local_cluster import LocalCluster  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

pytestmark = pytest.mark.cluster

FINISHED, LIVE, RUNNING = 20_000, 5_000, 500
COMPACT_EVERY = 100


def applied(cluster: LocalCluster, replica_id: int) -> int:
    try:
        with Client([cluster.address(replica_id)], cluster.credentials, deadline_s=1, call_timeout_s=1,
                    follow_leader=False) as client:
            return int(client.status(local_only=True).replicas[0].applied_index)
    except XceError:
        return -1


def test_a_cluster_started_from_a_large_state_reads_it_right_and_compacts_without_an_election(
        make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    # Elections wait 1.0-1.3 s of silence here, not 0.3-0.4 s: on a busy CI machine a replica's
    # threads can starve that long whatever it does, and the term must move only for what this test
    # is about (a copy that held the tick thread; test_unit_store holds that the copy never does).
    cluster = make_cluster(extra_config=f"\n[raft]\ncompaction_min_entries = {COMPACT_EVERY}\n"
                                        "election_min_s = 1.0\nelection_max_s = 1.3\n")
    built = big_state.build(tmp_path / "built", cluster.config.cluster_id, list(cluster.config.queues),
                            FINISHED, LIVE, RUNNING)
    big_state.seed(cluster, built)
    cluster.start()
    cluster.leader(timeout_s=120)
    users = big_state.USERS
    # History: a user's newest first, each finished; `xce jobs` shows only live jobs.
    mine = json.loads(xce_cli(cluster, "history", "--user", "u3", "--json"))["jobs"]
    ids = [int(j["id"]) for j in mine]
    expected = [i for i in range(FINISHED, 0, -1) if users[i % len(users)] == "u3"][:1000]
    assert ids == expected
    assert all(j["state"] == "EXIT" and j["spec"]["user"] == "u3" for j in mine)
    running = json.loads(xce_cli(cluster, "jobs", "--state", "RUN", "--json"))["jobs"]
    assert sorted(int(j["id"]) for j in running) == list(range(FINISHED + 1, FINISHED + RUNNING + 1))
    totals = json.loads(xce_cli(cluster, "acct", "--json"))["totals"]
    assert sum(int(t["jobs"]) for t in totals) == FINISHED
    assert {t["user"] for t in totals} == set(users)
    with cluster.client() as client:
        assert len(client.list_jobs(["user:eq:u1"])) == len(
            [i for i in range(FINISHED + 1, FINISHED + LIVE + 1) if users[i % len(users)] == "u1"])
        assert client.get_job(1).state == api.EXIT  # cleaned long ago: from history
        # A wiped follower catches up by a snapshot install of the whole state.
        follower = next(r.id for r in cluster.config.replicas if r.id != cluster.leader())
        cluster.kill(follower)
        shutil.rmtree(cluster.config.replica_dir(follower))
        target = client.submit([api.JobSpec(command=["true"])]).revision
        cluster.start([follower])
        wait_until(lambda: applied(cluster, follower) >= target, "the wiped follower to catch up")
        cluster.leader()
        term = max(s.term for s in client.status().replicas)
        # Every replica compacts the whole state (past compaction_min_entries); no election.
        for _ in range(3 * COMPACT_EVERY):
            client.submit([api.JobSpec(command=["true"])])
        pattern = re.compile(r"Raft snapshot at entry \d+ written in [\d.]+ s")
        wait_until(lambda: all(pattern.search((cluster.data / f"replica-{r.id}.log").read_text())
                         for r in cluster.config.replicas), "every replica to compact")
        assert max(s.term for s in client.status().replicas) == term
    # And each replica restarts from its own snapshot and log to the same state.
    cluster.stop()
    cluster.start()
    cluster.leader(timeout_s=120)
    with cluster.client() as client:
        assert client.get_job(FINISHED + LIVE + 1).spec.command == ["true"]
        assert len(client.history(api.HistoryRequest(user="u3"), limit=1000)) == 1000
