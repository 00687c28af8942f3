"""The scheduler daemon on real processes: decisions through the commit barrier, lease fencing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client.channel import Client
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster



@pytest.fixture
def setup(fleet: tuple[LocalCluster, LocalWorkers]) -> Iterator[tuple[LocalCluster, LocalWorkers,
                                                                         list[LocalScheduler]]]:
    cluster, workers = fleet
    schedulers: list[LocalScheduler] = []
    try:
        yield cluster, workers, schedulers
    finally:
        for scheduler in schedulers:
            scheduler.kill()


def _wait(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert predicate()


def _jobs(cluster: LocalCluster) -> list[api.Job]:
    with cluster.client() as client:
        return client.list_jobs()


def test_24_jobs_on_3_workers_run_8_8_8_once_each(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, schedulers = setup
    for name in ("w1", "w2", "w3"):
        workers.start(name, 8)
    scheduler = LocalScheduler(cluster)
    schedulers.append(scheduler)
    scheduler.start()
    ledger = tmp_path / "ledger"
    script = f'echo "$XCE_JOB_ID.$XCE_JOB_ATTEMPT" >> {ledger}; sleep 2'
    with cluster.client() as client:
        _wait(lambda: sum(h.status == api.HOST_OK for h in client.list_hosts().hosts) == 3)
        client.submit([api.JobSpec(command=["sh", "-c", script], cwd=str(tmp_path)) for _ in range(24)])
    try:
        _wait(lambda: all(j.state == api.DONE for j in _jobs(cluster)), timeout_s=60)
    except AssertionError:
        states = [(j.id, api.JobState.Name(j.state), j.host, j.attempt, j.pending_reason)
                  for j in _jobs(cluster) if j.state != api.DONE]
        logs = {p.name: p.read_text()[-3000:] for p in cluster.data.glob("*.log")}
        raise AssertionError(f"not DONE: {states}\n{logs}") from None
    jobs = _jobs(cluster)
    assert Counter(j.host for j in jobs) == {"w1": 8, "w2": 8, "w3": 8}  # M3
    assert Counter(ledger.read_text().split()) == {f"{j.id}.0": 1 for j in jobs}  # zero duplicates


def test_leader_killed_while_batches_flow_no_job_runs_twice_or_sticks(  # type: ignore[no-untyped-def]
        setup, tmp_path: Path) -> None:
    cluster, workers, schedulers = setup
    for name in ("w1", "w2", "w3"):
        workers.start(name, 4)
    scheduler = LocalScheduler(cluster)
    schedulers.append(scheduler)
    scheduler.start()
    ledger = tmp_path / "ledger"
    script = f'echo "$XCE_JOB_ID.$XCE_JOB_ATTEMPT" >> {ledger}; sleep 0.5'
    with cluster.client() as client:
        _wait(lambda: sum(h.status == api.HOST_OK for h in client.list_hosts().hosts) == 3)
        client.submit([api.JobSpec(command=["sh", "-c", script], cwd=str(tmp_path)) for _ in range(60)])
        # 12 slots for 60 jobs: dispatch batches follow one another as jobs end.
        _wait(lambda: any(j.state == api.RUN for j in client.list_jobs()))
    cluster.kill(cluster.leader())
    _wait(lambda: all(j.state == api.DONE for j in _jobs(cluster)), timeout_s=90)
    assert scheduler.proc is not None and scheduler.proc.poll() is None  # it followed the new leader
    jobs = _jobs(cluster)
    assert Counter(ledger.read_text().split()) == {f"{j.id}.{j.attempt}": 1 for j in jobs}  # once each
    with cluster.client() as client:
        assert all(h.slots_used == 0 for h in client.list_hosts().hosts)


# Spread over hosts (no span[]), the job could take w1's 2 slots, but the cluster has no more.
TOO_BIG = "1 of 1 hosts can take a part (2 free slots together); the job needs 4; they have 2 slots in all"


def test_pending_reason_when_no_host_fits(setup) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, schedulers = setup
    workers.start("w1", 2)
    scheduler = LocalScheduler(cluster)
    schedulers.append(scheduler)
    scheduler.start()
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["true"], slots=4)]).jobs[0]
        _wait(lambda: client.get_job(job.id).pending_reason == TOO_BIG)
        assert client.get_job(job.id).pending_code == api.PEND_NO_HOST_MATCHES


def test_only_the_lease_holder_decides_and_the_standby_takes_over(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, schedulers = setup
    workers.start("w1", 4)
    first, second = LocalScheduler(cluster, "sched-a", 2.0), LocalScheduler(cluster, "sched-b", 2.0)
    schedulers.extend([first, second])
    first.start()
    with Client([cluster.address(cluster.leader())], cluster.credentials) as client:
        _wait(lambda: client.status(local_only=True).scheduler_lease_holder == "sched-a")
        second.start()
        with Client(cluster.addresses, cluster.scheduler_credentials("probe")) as probe:
            lease = probe.call("SchedulerService", "AcquireLease",
                               api.LeaseRequest(scheduler_id="probe", duration_s=1), api.LeaseResponse)
        assert not lease.granted and lease.holder == "sched-a"  # held: nobody else gets it
        job = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path))]).jobs[0]
        # A batch of an older epoch is rejected whole: fencing (by the leader, before the log).
        stale = api.DecisionBatch(lease_epoch=lease.epoch - 1, scheduler_id="sched-a", decisions=[
            api.Decision(dispatch=api.DispatchDecision(job_id=job.id, attempt=0, host="w1"))])
        with Client(cluster.addresses, cluster.scheduler_credentials("sched-a")) as imposter:
            reply = imposter.call("SchedulerService", "SubmitDecisions", stale, api.DecisionBatchResponse)
        assert reply.rejections[0].startswith("stale lease")
        _wait(lambda: client.get_job(job.id).state == api.DONE)
        first.kill()
        later = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path))]).jobs[0]
        _wait(lambda: client.get_job(later.id).state == api.DONE, timeout_s=20)  # sched-b took over
        assert client.status(local_only=True).scheduler_lease_holder == "sched-b"


def _start_scheduler(cluster: LocalCluster, schedulers: list[LocalScheduler]) -> None:
    scheduler = LocalScheduler(cluster)
    schedulers.append(scheduler)
    scheduler.start()


def test_host_back_with_slots_gets_the_pending_jobs(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, schedulers = setup
    workers.start("w1", 0)  # joined with no usable slots (bug-1494)
    _start_scheduler(cluster, schedulers)
    with cluster.client() as client:
        jobs = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path)) for _ in range(4)]).jobs
        _wait(lambda: all(client.get_job(j.id).pending_reason for j in jobs))
        workers.kill("w1")
        workers.start("w1", 8)  # re-joins with 8 slots: the scheduler's view updates in place (M2)
        _wait(lambda: all(client.get_job(j.id).state == api.DONE for j in jobs))


def test_refused_dispatch_goes_back_and_runs_once_the_worker_is_ready(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, schedulers = setup
    workers.start("w1", 2, "draining = true\n")
    _start_scheduler(cluster, schedulers)
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path))]).jobs[0]
        _wait(lambda: client.get_job(job.id).attempt >= 1)
        refused = client.get_job(job.id)
        assert refused.state == api.PEND and "draining" in refused.pending_reason  # M1
        workers.kill("w1")
        workers.start("w1", 2)  # ready now
        _wait(lambda: client.get_job(job.id).state == api.DONE)
        assert client.get_job(job.id).attempt < 10  # refusals were not retried every pass


def test_a_modified_priority_changes_the_next_pass(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, schedulers = setup
    workers.start("w1", 1)
    _start_scheduler(cluster, schedulers)
    with cluster.client() as client:
        blocker = client.submit([api.JobSpec(command=["sleep", "1.5"], cwd=str(tmp_path))]).jobs[0]
        _wait(lambda: client.get_job(blocker.id).state == api.RUN)
        specs = [api.JobSpec(command=["true"], cwd=str(tmp_path)) for _ in range(2)]
        first, second = client.submit(specs).jobs
        client.modify(second.id, priority=50)  # M4: in place, and the next pass sees it
        _wait(lambda: all(client.get_job(j.id).state == api.DONE for j in (first, second)))
        assert client.get_job(second.id).start_time_ms < client.get_job(first.id).start_time_ms


def test_no_decision_acts_before_commit(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, schedulers = setup
    workers.start("w1", 2)
    _start_scheduler(cluster, schedulers)
    scheduler = schedulers[0]
    ledger = tmp_path / "ledger"
    with cluster.client() as client:
        _wait(lambda: client.list_hosts().hosts and client.list_hosts().hosts[0].status == api.HOST_OK)
        assert scheduler.proc is not None
        scheduler.proc.send_signal(signal.SIGSTOP)
        job = client.submit([api.JobSpec(command=["sh", "-c", f"echo ran >> {ledger}"],
                                         cwd=str(tmp_path))]).jobs[0]
    leader = cluster.leader()
    followers = [r for r in (1, 2, 3) if r != leader]
    for replica in followers:
        cluster.procs[replica].send_signal(signal.SIGSTOP)
    try:
        scheduler.proc.send_signal(signal.SIGCONT)  # it decides, and sends its batch to the leader
        time.sleep(3.0)
        assert not ledger.exists()  # nothing ran: the DISPATCH could not commit
    finally:
        for replica in followers:
            cluster.procs[replica].send_signal(signal.SIGCONT)
    with cluster.client(deadline_s=60) as client:
        _wait(lambda: client.get_job(job.id).state == api.DONE, timeout_s=60)
    assert ledger.read_text() == "ran\n"


def test_jobs_p_shows_pending_reasons(setup) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, schedulers = setup
    workers.start("w1", 2)
    env = {**os.environ, "XCE_CONTROLLERS": ",".join(cluster.addresses),
           "XCE_CLUSTER": str(cluster.config_path)}

    def xce(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args], env=env, capture_output=True,
                              text=True, timeout=60)

    def reasons() -> dict[str, str]:
        lines = xce("jobs", "-p").stdout.splitlines()[1:]
        return {line.split()[3]: line.split(None, 4)[4] for line in lines}

    with cluster.client() as client:
        # w1 joined first: else the first pass may say NO_HOSTS for what it later says NO_HOST_MATCHES
        _wait(lambda: any(h.status == api.HOST_OK for h in client.list_hosts().hosts))
        client.submit([api.JobSpec(command=["true"], name="early")])
        held = client.submit([api.JobSpec(command=["true"], name="held")]).jobs[0]
        client.control(held.id, api.HOLD)
        assert reasons()["early"] == "WAITING_FOR_SCHEDULER: no scheduler holds the lease"
        assert xce("queue", "create", "slow", "--inactive", "--priority", "7").returncode == 0
        _start_scheduler(cluster, schedulers)
        big = client.submit([api.JobSpec(command=["true"], slots=4, name="too-big")]).jobs[0]
        slow = client.submit([api.JobSpec(command=["true"], queue="slow", name="in-slow")]).jobs[0]
        _wait(lambda: all(client.get_job(j.id).pending_code for j in (big, slow)))
        assert client.get_job(big.id).pending_code == api.PEND_NO_HOST_MATCHES
        # Its free-slot count may be read while "early" runs; counts alone follow within 10 s.
        _wait(lambda: reasons().get("too-big") == f"NO_HOST_MATCHES: {TOO_BIG}")
    assert reasons() == {"held": "JOB_HELD: held by user",
                         "too-big": f"NO_HOST_MATCHES: {TOO_BIG}",
                         "in-slow": "QUEUE_INACTIVE: the queue is inactive"}  # "early" ran
    assert "Open:Inact" in xce("queues").stdout
    assert xce("queue", "update", "slow", "--active").returncode == 0  # keeps the rest of the queue
    with cluster.client() as client:
        _wait(lambda: client.get_job(slow.id).state == api.DONE)
        assert [q.priority for q in client.list_queues().queues if q.name == "slow"] == [7]


def test_unknown_picker_is_refused_at_start() -> None:
    result = subprocess.run([sys.executable, "-m", "cli", "--controllers", "127.0.0.1:1", "scheduler",
                             "--picker", "nope"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "unknown job picker 'nope'" in result.stderr
