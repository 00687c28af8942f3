"""Clock faults on real processes (soak/clockfault.py, libfaketime): one replica's, the scheduler's or a
worker's wall clock jumps 10 minutes ahead and back and drifts, its monotonic clock does not. Leases,
heartbeats and timeouts run on monotonic time, so nothing unsafe follows: every job runs once, no host
goes UNAVAIL or its jobs UNKWN, the lease stays with its holder, writes go on."""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, print_logs_if_failed, wait_until

from client.channel import Client
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from soak import clockfault
from xce.v1 import api_pb2 as api

# 30 s; `make test-faults` (make test keeps its budget; the clock faults' soaks run there too).
pytestmark = [pytest.mark.cluster, pytest.mark.faults,
              pytest.mark.skipif(clockfault.available() is not None, reason=str(clockfault.available()))]

JUMP_S = 600.0
UNKNOWN_S = 30.0  # a host given up this long after UNAVAIL: a judge by wall clock would do it at once
JOB_S = 0.6


class Fleet:
    """Three replicas, each with a clock control file; schedulers and workers added by the test."""

    def __init__(self, data: Path) -> None:
        self.data = data
        # Without TLS: a certificate issued seconds ago is "not yet valid" to a host 10 minutes behind
        # (pki backdates by 5); docs/faults-clock.md says so. Tokens here never expire.
        self.cluster = LocalCluster(data / "cluster", insecure=True,
                                    extra_config=FAST_HOSTS + f"unknown_timeout_s = {UNKNOWN_S}\n")
        self.controls = {rid: data / f"clock-replica-{rid}" for rid in self.cluster.replica_ids()}
        for rid, control in self.controls.items():
            self.cluster.env[rid] = clockfault.environment(control)
        self.workers = LocalWorkers(self.cluster)
        self.schedulers: list[LocalScheduler] = []
        self.ledger = data / "ledger"
        self.seen: list[api.Job] = []  # every job state sampled while the test ran

    def scheduler(self, name: str, env: dict[str, str] | None = None) -> LocalScheduler:
        scheduler = LocalScheduler(self.cluster, name, env=env)
        self.schedulers.append(scheduler)
        scheduler.start()
        return scheduler

    def submit(self, client: Client, count: int, sleep_s: float = JOB_S) -> list[int]:
        script = f'echo "$XCE_JOB_ID.$XCE_JOB_ATTEMPT" >> {self.ledger}; sleep {sleep_s}'
        jobs = client.submit([api.JobSpec(command=["sh", "-c", script], cwd=str(self.data), rerunnable=True)
                              for _ in range(count)]).jobs
        return [j.id for j in jobs]

    def watch(self, client: Client) -> None:
        """One sample of every job and host: none may be UNKWN or UNAVAIL, ever."""
        jobs = client.list_jobs()
        self.seen.extend(jobs)
        unknown = [j.id for j in jobs if j.state == api.UNKWN]
        down = [h.spec.name for h in client.list_hosts().hosts if h.status != api.HOST_OK]
        assert not unknown and not down, f"UNKWN jobs {unknown}, hosts not OK {down}"

    def all_done(self, client: Client, ids: list[int]) -> bool:
        self.watch(client)
        jobs = {j.id: j for j in client.list_jobs()}
        return all(jobs[i].state == api.DONE for i in ids)

    def ran_once(self, client: Client, ids: list[int]) -> None:
        jobs = {j.id: j for j in client.list_jobs()}
        assert all(jobs[i].attempt == 0 and jobs[i].exit_code == 0 for i in ids)
        assert Counter(self.ledger.read_text().split()) == Counter(f"{i}.0" for i in ids)  # once each

    def stop(self) -> None:
        for scheduler in self.schedulers:
            scheduler.kill()
        self.workers.stop()
        self.cluster.stop()


@pytest.fixture
def fleet(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    made = Fleet(tmp_path)
    try:
        made.cluster.start()
        made.cluster.leader()
        yield made
    finally:
        made.stop()
        print_logs_if_failed(request, made.cluster.data)


def _up(client: Client) -> int:
    return sum(h.status == api.HOST_OK for h in client.list_hosts().hosts)


def _stamps_near(client: Client, fleet: Fleet, offset_s: float, ids: list[int]) -> Callable[[], bool]:
    def probe() -> bool:
        fleet.watch(client)
        before = time.time()
        [job] = fleet.submit(client, 1, 0)
        ids.append(job)
        return abs(client.get_job(job).submit_time_ms / 1000 - before - offset_s) < 30
    return probe


def test_the_leaders_clock_jumps_ahead_and_back_and_drifts_and_nothing_runs_twice(fleet: Fleet) -> None:
    fleet.workers.start("w1", 4)
    fleet.workers.start("w2", 4)
    fleet.scheduler("sched-1")
    with fleet.cluster.client() as client:
        wait_until(lambda: _up(client) == 2, "two workers")
        leader = fleet.cluster.leader()
        ids = fleet.submit(client, 16)
        clockfault.set_offset(fleet.controls[leader], JUMP_S)
        wait_until(_stamps_near(client, fleet, JUMP_S, ids), "the leader to stamp writes 10 min ahead")
        ids += fleet.submit(client, 16)
        clockfault.set_offset(fleet.controls[leader], -JUMP_S, drift=1.01)
        wait_until(_stamps_near(client, fleet, -JUMP_S, ids), "the leader to stamp writes 10 min behind")
        ids += fleet.submit(client, 16)
        assert fleet.cluster.leader() == leader  # the jumps moved no election timer
        wait_until(lambda: fleet.all_done(client, ids), "every job to end")
        fleet.ran_once(client, ids)
        assert client.status().scheduler_lease_holder == "sched-1"


def test_the_lease_holders_clock_jumps_and_the_lease_stays_with_it(fleet: Fleet) -> None:
    fleet.workers.start("w1", 4)
    fleet.workers.start("w2", 4)
    control = fleet.data / "clock-sched-1"
    fleet.scheduler("sched-1", env=clockfault.environment(control))
    holders: list[tuple[str, int]] = []

    def lease() -> tuple[str, int]:
        status = client.status()
        holders.append((status.scheduler_lease_holder, status.scheduler_lease_epoch))
        return holders[-1]

    with fleet.cluster.client() as client:
        wait_until(lambda: lease()[0] == "sched-1", "sched-1 to take the lease")
        del holders[:-1]  # from its first grant on
        fleet.scheduler("sched-2")  # stands by; it would take an expired lease at once
        wait_until(lambda: _up(client) == 2, "two workers")
        ids = fleet.submit(client, 12)
        for offset_s in (JUMP_S, -JUMP_S, 0.0):
            clockfault.set_offset(control, offset_s)
            earlier, ids = ids, ids + fleet.submit(client, 12)
            until = time.monotonic() + 4.0  # more than a lease (3 s) after the jump took effect

            def past_the_jump(earlier: list[int] = earlier, until: float = until) -> bool:
                return bool(lease()) and fleet.all_done(client, earlier) and time.monotonic() > until
            wait_until(past_the_jump, "the earlier jobs to end, the lease watched past the jump")
        wait_until(lambda: lease() and fleet.all_done(client, ids), "every job to end")
        fleet.ran_once(client, ids)
        lease()
    assert {holder for holder, _ in holders} == {"sched-1"}
    assert len({epoch for _, epoch in holders}) == 1  # never lost, never taken again


def test_a_workers_clock_jumps_and_its_jobs_end_normally(fleet: Fleet) -> None:
    control = fleet.data / "clock-w1"
    given = clockfault.environment(control)
    fleet.workers.start("w1", 4, prefix=["env", *(f"{k}={v}" for k, v in given.items())])
    fleet.scheduler("sched-1")
    with fleet.cluster.client() as client:
        wait_until(lambda: any(h.status == api.HOST_OK for h in client.list_hosts().hosts), "w1 to join")
        ids: list[int] = []
        for offset_s in (JUMP_S, -JUMP_S):
            ids += fleet.submit(client, 8, sleep_s=1.5)
            wait_until(lambda: (fleet.watch(client) or True) and any(
                j.state == api.RUN for j in client.list_jobs()), "jobs to run")
            clockfault.set_offset(control, offset_s)  # while they run
            wait_until(functools.partial(fleet.all_done, client, ids[:]), "the jobs to end")
        fleet.ran_once(client, ids)
        for job in (client.get_job(i) for i in ids):
            assert job.host == "w1" and 1.0 < job.usage.wall_s < 30, (job.id, job.usage)
    log = (fleet.cluster.data / "worker-w1.log").read_text()
    assert "no heartbeat answered" not in log and "RUNLIMIT" not in log
