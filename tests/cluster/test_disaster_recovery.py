"""Disaster recovery and rollbacks on real processes: a lone survivor forced into a one-member cluster
(`--force-new-cluster`) that members are added back to; and a cluster restored from a backup older than
a dispatch, which must not run that job a second time while its first instance still runs."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from client.channel import Client, XceError
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from tests.conftest import FAST_HOSTS, role_of, wait_until, xce_cli
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

FENCE_S, UNKNOWN_S, GRACE_S = 3.0, 12.0, 1.0
HOSTS = FAST_HOSTS + f"unknown_timeout_s = {UNKNOWN_S}\nfence_s = {FENCE_S}\n"
WORKER = f"kill_grace_s = {GRACE_S}\n"
# The rollback test: a host given up (heartbeat timeout, then unknown_timeout_s) is no longer awaited,
# and the recovery's wait is unknown_timeout_s: the held worker is let go between the two, a window of
# the heartbeat timeout. Its stray ends STRAY_END_S after SIGTERM (within the grace, 9 + 6 < 20).
ROLLBACK_HOSTS = ("\n[hosts]\nheartbeat_s = 0.2\nheartbeat_timeout_s = 8\nunknown_timeout_s = 20\n"
                  "fence_s = 9\n")
STRAY_END_S, STRAY_GRACE_S = 5, 6.0


def _states(client: Client, ids: list[int]) -> dict[int, int]:
    return {j.id: j.state for j in client.list_jobs() if j.id in ids}


def _done(client: Client, ids: list[int]) -> bool:
    return set(_states(client, ids).values()) == {api.DONE} and len(_states(client, ids)) == len(ids)


def test_a_lone_survivor_is_forced_into_a_cluster_and_members_are_added_back(make_fleet) -> None:  # type: ignore[no-untyped-def]
    cluster: LocalCluster
    workers: LocalWorkers
    cluster, workers = make_fleet(HOSTS)
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    try:
        workers.start("w1", 2, extra=WORKER)
        workers.start("w2", 2, extra=WORKER)
        with cluster.client() as client:
            ran = [j.id for j in client.submit([api.JobSpec(command=["true"], cwd="/tmp")
                                               for _ in range(10)]).jobs]
            wait_until(lambda: _done(client, ran), "the first jobs to run")
            client.put_queue(api.Queue(name="parked", priority=10, inactive=True), create=True)
            held = client.submit([api.JobSpec(command=["true"], cwd="/tmp", queue="parked")]).jobs[0]
        # What the survivor keeps is what it applied: it has the parked job before the others are lost.
        with Client([cluster.address(1)], cluster.credentials, follow_leader=False) as survivor:
            def applied() -> bool:
                try:
                    return survivor.get_job(str(held.id), stale=True).state == api.PEND
                except XceError:  # NOT_FOUND: replica 1 has not applied the submit yet
                    return False

            wait_until(applied, "replica 1 to apply the last submit")
        for lost in (2, 3):  # two of three replicas, for good
            cluster.kill(lost)
            shutil.rmtree(cluster.config.replica_dir(lost))
        cluster.kill(1)
        cluster.args[1] = ["--force-new-cluster"]
        cluster.start([1])
        assert cluster.leader() == 1
        cluster.args.pop(1)
        log = (cluster.data / "replica-1.log").read_text()
        assert "forced into a one-member cluster" in log
        with Client([cluster.address(1)], cluster.credentials) as client:
            jobs = {j.id: j.state for j in client.list_jobs()}
            assert all(jobs.get(i) == api.DONE for i in ran) and jobs[held.id] == api.PEND
            assert {m.id for m in client.list_members().members} == {1}
        for added in (4, 5):
            new = cluster.new_replica(added)
            cluster.start([added])
            wait_until(lambda: role_of(cluster, added) == "learner",  # noqa: B023
                       f"replica {added} to run as a learner")
            assert f"replica {added} is a voter" in xce_cli(cluster, "member", "add", new.grpc)
        with Client([cluster.address(r) for r in (1, 4, 5)], cluster.credentials) as client:
            members = client.list_members()
            assert {m.id: m.role for m in members.members} == {r: api.MEMBER_VOTER for r in (1, 4, 5)}
            # The scheduler and the workers found the survivor on their own; once the workers joined
            # again and the fence's wait passed, it dispatches.
            client.put_queue(api.Queue(name="parked", priority=10), create=False)
            fresh = client.submit([api.JobSpec(command=["true"], cwd="/tmp")]).jobs[0]
            wait_until(lambda: _done(client, [held.id, fresh.id]), "jobs to run on the forced cluster")
    finally:
        scheduler.kill()


def test_a_job_dispatched_after_the_backup_does_not_run_twice_after_a_restore(  # type: ignore[no-untyped-def]
        make_fleet, tmp_path: Path) -> None:
    """Saved while job J is pending (its queue inactive); J then runs on w1. The cluster is restored
    in place from that backup (--keep-id: same addresses; scheduler and workers carry on). The restored
    state holds J as pending and has forgotten the dispatch: J must not start again until w1's
    instance of it has been killed, and then as a new attempt. w1 is held (SIGSTOP) until the
    recovery's wait is over, so that its join, which names J's instance, is the last thing awaited:
    what then keeps J back is the stray, not the wait."""
    cluster: LocalCluster
    cluster, workers = make_fleet(ROLLBACK_HOSTS)
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    ledger = tmp_path / "ledger"
    # Attempt 0 runs until killed, and takes STRAY_END_S to end after its SIGTERM (longer than the
    # recovery's wait): a new attempt started before it ended would overlap it. Later attempts end at once.
    script = (f'me="$XCE_JOB_ID.$XCE_JOB_ATTEMPT"; stamp() {{ echo "$1 $me $(date +%s.%N)" >> {ledger}; }}; '
              f'stamp start; trap \'stamp term; sleep {STRAY_END_S}; stamp end; exit 143\' TERM; '
              '[ "$XCE_JOB_ATTEMPT" = 0 ] && { sleep 600 & wait; }; exit 0')
    try:
        workers.start("w1", 2, extra=f"kill_grace_s = {STRAY_GRACE_S}\n")
        with cluster.client() as client:
            wait_until(lambda: [h.spec.name for h in client.list_hosts().hosts] == ["w1"], "w1 to join")
            client.put_queue(api.Queue(name="later", priority=10, inactive=True), create=True)
            # Not rerunnable: the workers' fence (which kills only rerunnable jobs) stays out of it.
            job = client.submit([api.JobSpec(command=["sh", "-c", script], cwd=str(tmp_path),
                                             queue="later")]).jobs[0]
        backup = tmp_path / "before.xce"
        xce_cli(cluster, "snapshot", "save", str(backup))
        xce_cli(cluster, "queue", "update", "later", "--active")
        wait_until(lambda: ledger.exists() and f"start {job.id}.0" in ledger.read_text(), "J to start")
        # The whole cluster is lost, and restored from the backup; J's instance runs on, and w1 is held.
        worker = workers.procs["w1"]
        worker.send_signal(signal.SIGSTOP)
        for replica_id in (1, 2, 3):
            cluster.kill(replica_id)
            shutil.rmtree(cluster.config.replica_dir(replica_id))
            xce_cli(cluster, "snapshot", "restore", str(backup), "--config", str(cluster.config_path),
                    "--id", str(replica_id), "--keep-id")
        cluster.start()
        cluster.leader()
        with cluster.client() as client:
            restored = client.get_job(str(job.id))
            assert restored.state == api.PEND  # the dispatch is forgotten
            xce_cli(cluster, "queue", "update", "later", "--active")
            wait_until(lambda: client.status().recovery.wait_over, "the recovery's wait", timeout_s=90)
            recovery = client.status().recovery
            assert recovery.waiting and list(recovery.hosts) == ["w1"]
            assert client.get_job(str(job.id)).state == api.PEND
            worker.send_signal(signal.SIGCONT)
            wait_until(lambda: not client.status().recovery.waiting, "w1 to join again")
            wait_until(lambda: ledger.read_text().count("start") >= 2, "J to run again", timeout_s=90)
            wait_until(lambda: client.get_job(str(job.id)).state == api.DONE, "J's new attempt to end")
            final = client.get_job(str(job.id))
        lines = [line.split() for line in ledger.read_text().splitlines()]
        events = [(kind, who, float(when)) for kind, who, when in lines]
        assert [(kind, who.split(".")[1]) for kind, who, _ in events] == \
            [("start", "0"), ("term", "0"), ("end", "0"), ("start", str(final.attempt))], events
        assert final.attempt >= 1  # a new attempt, never attempt 0 again
        assert events[3][2] >= events[2][2]  # the second run began only once the first was over
    finally:
        scheduler.kill()
