"""Fail-stop and versioned entries on real replicas (controller/fsm/versions.py, controller/faults.py).

- A replica whose code cannot apply a committed entry (XCE_FAULT
  raise-on-entry=KIND: a bug in apply) stops at that entry with a fatal log
  line naming its index, kind and format, and a non-zero exit; the other two
  stay writable; restarted without the fault it applies the entry and
  reaches the same canonical dump as the others.
- With the fault on all three, every replica stops at the same index and
  none applies past it: each exits as it learns the entry is committed,
  and the last one may be left without a quorum to learn it, still at that
  index; restarted with working code, the cluster applies the entry and
  serves again (the operator's recovery, docs/architecture/state-and-apply.md).
- Rolling upgrade: while one replica runs code without an entry kind
  (lacks-entry=host_statuses), the leader never proposes that kind and
  nothing stops; once that replica runs the full code, the kind is used.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest
from conftest import FAST_HOSTS, replica_dump, wait_until

from client.channel import Client, XceError
from controller.raft import FAIL_STOP_EXIT
from ops.local_cluster import LocalCluster, LocalWorkers
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

pytestmark = pytest.mark.cluster
DEADLINE_S = 60.0


def wait_for(condition: Callable[[], object], what: str, cluster: LocalCluster,
             timeout_s: float = DEADLINE_S) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(cluster.data.glob("*.log")))
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


def exited(cluster: LocalCluster, replica_id: int) -> int | None:
    proc = cluster.procs.get(replica_id)
    return None if proc is None else proc.poll()


def status(cluster: LocalCluster, replica_id: int) -> api.ReplicaStatus | None:
    try:
        with Client([cluster.address(replica_id)], cluster.credentials, deadline_s=0.5, call_timeout_s=0.5,
                    follow_leader=False) as client:
            return client.status(local_only=True).replicas[0]
    except XceError:
        return None


def submit_and_modify(client: Client, request_id: str = "") -> int:
    job = client.submit([api.JobSpec(command=["true"])]).jobs[0]
    request = api.ModifyJobRequest(job_id=str(job.id), priority=7, request_id=request_id or f"m-{job.id}")
    client.call("JobService", "ModifyJob", request, api.JobResponse)
    return job.id


def test_a_replica_that_cannot_apply_an_entry_stops_there_and_catches_up_once_fixed(
        make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    cluster.start()
    leader = cluster.leader()
    victim = next(r.id for r in cluster.config.replicas if r.id != leader)
    cluster.env[victim] = {"XCE_FAULT": "raise-on-entry=modify"}
    cluster.restart(victim)
    wait_for(lambda: status(cluster, victim), "the broken replica to answer", cluster)
    with cluster.client() as client:
        submit_and_modify(client)
        rc = wait_for(lambda: exited(cluster, victim), "the broken replica to stop", cluster)
        assert rc == FAIL_STOP_EXIT
        text = (cluster.data / f"replica-{victim}.log").read_text()
        fatal = re.search(r"FATAL: applying entry (\d+) \(kind modify, format \d+\) failed", text)
        assert fatal, text[-3000:]
        index = int(fatal.group(1))
        _, applied = replica_dump(cluster, victim)
        assert applied < index  # stopped before the entry: nothing of it or after it applied
        # The other two carry on, writes included.
        job = submit_and_modify(client)
        assert client.get_job(job).spec.priority == 7
    cluster.env.pop(victim)
    cluster.restart(victim)  # fixed code
    with cluster.client() as client:
        final = client.submit([api.JobSpec(command=["true"])]).revision
    wait_for(lambda: (s := status(cluster, victim)) is not None and s.applied_index >= final,
             "the fixed replica to catch up", cluster)
    cluster.stop()
    dumps = {rid: replica_dump(cluster, rid) for rid in (1, 2, 3)}
    assert len({d for d, _ in dumps.values()}) == 1, {rid: a for rid, (_, a) in dumps.items()}


def test_with_the_bug_on_every_replica_all_stop_at_the_same_entry_and_recover_with_fixed_code(
        make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    for replica in cluster.config.replicas:
        cluster.env[replica.id] = {"XCE_FAULT": "raise-on-entry=modify"}
    cluster.start()
    cluster.leader()
    with cluster.client(deadline_s=3.0) as client:
        job = client.submit([api.JobSpec(command=["true"])]).jobs[0]
        before = client.status(local_only=True).replicas[0].applied_index
        with pytest.raises(XceError):
            client.call("JobService", "ModifyJob", api.ModifyJobRequest(
                job_id=str(job.id), priority=7, request_id="the-poison"), api.JobResponse)
    # The leader stops applying it; a new leader commits it again and stops too; the last
    # replica alone has no quorum to learn that it is committed.
    wait_for(lambda: sum(exited(cluster, rid) is not None for rid in (1, 2, 3)) >= 2,
             "two replicas to stop", cluster)
    codes = {rid: exited(cluster, rid) for rid in (1, 2, 3)}
    assert set(codes.values()) - {None} == {FAIL_STOP_EXIT}, codes
    for rid, code in codes.items():
        if code is None:
            survivor = status(cluster, rid)
            assert survivor is None or survivor.applied_index == before  # alive: still at that index
    cluster.stop()
    applied = {rid: replica_dump(cluster, rid)[1] for rid in (1, 2, 3)}
    assert set(applied.values()) == {before}, applied  # the same index everywhere, nothing past it
    # Recovery: the same data with code that applies the entry (docs/architecture/state-and-apply.md,
    # "Fail-stop").
    cluster.env.clear()
    cluster.start()
    cluster.leader()
    with cluster.client() as client:
        retried = client.call("JobService", "ModifyJob", api.ModifyJobRequest(
            job_id=str(job.id), priority=7, request_id="the-poison"), api.JobResponse)
        assert retried.job.spec.priority == 7  # the committed entry applied once, the retry found it
        assert client.submit([api.JobSpec(command=["true"])]).jobs


def entry_kinds(cluster: LocalCluster) -> list[str]:
    """The kinds of the committed entries the leader's events table holds (read-only, while it runs)."""
    path = cluster.config.replica_dir(cluster.leader()) / "state"
    env = lmdb.open(str(path), readonly=True, lock=True, max_dbs=16)
    try:
        events = env.open_db(b"events", create=False)
        with env.begin() as txn:
            return [log.Event.FromString(bytes(raw)).kind for _, raw in txn.cursor(db=events)]
    finally:
        env.close()


def hosts_unavailable(cluster: LocalCluster, names: set[str]) -> bool:
    with cluster.client() as client:
        hosts = {h.spec.name: h.status for h in client.list_hosts().hosts}
    return all(hosts.get(name) == api.HOST_UNAVAIL for name in names)


def hosts_ok(cluster: LocalCluster, names: set[str]) -> bool:
    with cluster.client() as client:
        hosts = {h.spec.name: h.status for h in client.list_hosts().hosts}
    return all(hosts.get(name) == api.HOST_OK for name in names)


def lose_workers(cluster: LocalCluster, workers: LocalWorkers, names: set[str]) -> None:
    for name in sorted(names):
        workers.start(name, 1)
    wait_for(lambda: hosts_ok(cluster, names), f"{names} to join", cluster)
    for name in sorted(names):
        workers.kill(name)
    wait_for(lambda: hosts_unavailable(cluster, names), f"{names} to be UNAVAIL", cluster)


def test_a_rolling_upgrade_turns_a_new_entry_kind_on_only_once_every_replica_knows_it(
        make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    cluster = make_cluster(extra_config=FAST_HOSTS)
    cluster.env[3] = {"XCE_FAULT": "lacks-entry=host_statuses"}  # still on the old code
    cluster.start()
    cluster.leader()
    workers = LocalWorkers(cluster)
    try:
        with cluster.client() as client:
            # Each replica's capabilities are committed a moment after it starts: wait for all three.
            def settled() -> api.StatusResponse | None:
                found = client.status()
                return found if sorted(found.announced_members) == [1, 2, 3] else None

            response = wait_until(settled, "every replica's capabilities committed")
        assert "host_statuses" not in response.enabled_entry_kinds  # the kinds all three know are on
        assert sorted(response.announced_members) == [1, 2, 3]
        kinds = {r.id: set(r.entry_kinds) for r in response.replicas}
        assert "host_statuses" in kinds[1] and "host_statuses" not in kinds[3]

        lose_workers(cluster, workers, {"w1", "w2"})
        assert all(exited(cluster, rid) is None for rid in (1, 2, 3))  # nothing stopped
        seen = entry_kinds(cluster)
        assert "host_status" in seen and "host_statuses" not in seen

        cluster.env.pop(3)
        cluster.restart(3)  # the last replica upgraded
        wait_for(lambda: "host_statuses" in status_of_cluster(cluster).enabled_entry_kinds,
                 "the leader to enable host_statuses", cluster)
        lose_workers(cluster, workers, {"w3", "w4"})
        assert "host_statuses" in entry_kinds(cluster)
        assert all(exited(cluster, rid) is None for rid in (1, 2, 3))
    finally:
        workers.stop()


def status_of_cluster(cluster: LocalCluster) -> api.StatusResponse:
    with cluster.client() as client:
        return client.status()
