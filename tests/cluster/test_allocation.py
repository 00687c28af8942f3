"""Allocation on real processes: host groups and -m, closed hosts, shared resources
(licenses), a modified requirement taking effect at the next pass, jobs spread over hosts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until, xce_cli

from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

CONFIG = FAST_HOSTS + '\n[host_groups]\ngpu_nodes = ["g1", "g2"]\n\n[shared_resources]\nlicense_x = 1\n'


@pytest.fixture
def setup(make_fleet, tmp_path: Path) -> Iterator[tuple[LocalCluster, LocalWorkers]]:  # type: ignore[no-untyped-def]
    cluster, workers = make_fleet(CONFIG)
    for name, slots in (("g1", 1), ("g2", 1), ("c1", 2)):
        workers.start(name, slots)
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    try:
        with cluster.client() as client:
            # The groups and licenses come with the configuration push once every replica reads them.
            wait_until(lambda: len(client.list_hosts().hosts) == 3 and all(
                list(h.groups) == (["gpu_nodes"] if h.spec.name != "c1" else [])
                for h in client.list_hosts().hosts) and client.list_hosts().shared,
                "the host groups and shared resources to be committed")
        yield cluster, workers
    finally:
        scheduler.kill()


def _waiter(flag: Path) -> list[str]:
    """A job that runs until the test says so (the flag file), never for a fixed time."""
    return ["sh", "-c", f'i=0; while [ ! -e "{flag}" ] && [ $i -lt 12000 ]; do sleep 0.05; i=$((i+1)); done']


def _submit(cluster: LocalCluster, *options: str, command: list[str]) -> int:
    out = xce_cli(cluster, "submit", *options, "--", *command)
    return int(out.split("<", 1)[1].split(">", 1)[0])


def test_groups_closed_hosts_licenses_and_a_modified_requirement(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, _ = setup
    flag = tmp_path / "go"
    with cluster.client() as client:
        def job(job_id: int) -> api.Job:
            return client.get_job(str(job_id))

        def running_on(job_id: int) -> str:
            found = job(job_id)
            return found.host if found.state == api.RUN and found.pid else ""

        # -m gpu_nodes: the group's first member is full after the first job, the second takes the next.
        first = _submit(cluster, "-m", "gpu_nodes", "--cwd", str(tmp_path), command=_waiter(flag))
        second = _submit(cluster, "-m", "gpu_nodes", "--cwd", str(tmp_path), command=_waiter(flag))
        hosts = {wait_until(lambda: running_on(first), "the first job to run"),
                 wait_until(lambda: running_on(second), "the second job to run")}
        assert hosts == {"g1", "g2"}
        third = _submit(cluster, "-m", "gpu_nodes", "--cwd", str(tmp_path), command=_waiter(flag))
        wait_until(lambda: job(third).pending_code == api.PEND_NO_FREE_SLOTS, "the third to wait for slots")
        assert "1 host not among -m" in job(third).pending_reason  # c1 is not a member

        # A closed host takes nothing new; its mark shows in xce hosts; opened, it takes the job.
        xce_cli(cluster, "host", "close", "c1", "--reason", "disk swap")
        listed = xce_cli(cluster, "hosts")
        assert any(line.startswith("c1") and "closed_Adm" in line for line in listed.splitlines()), listed
        assert "disk swap" in xce_cli(cluster, "hosts", "-l")
        anywhere = _submit(cluster, "--cwd", str(tmp_path), command=["true"])
        wait_until(lambda: job(anywhere).pending_code != api.PENDING_REASON_UNSPECIFIED, "a pending reason")
        assert job(anywhere).state == api.PEND and "1 closed" in job(anywhere).pending_reason
        xce_cli(cluster, "host", "open", "c1")
        wait_until(lambda: job(anywhere).state == api.DONE, "the job to run on the reopened host")
        assert job(anywhere).host == "c1"

        # One license: the second job that takes it waits for the first to end, whatever the host.
        licensed = [_submit(cluster, "-R", "rusage[license_x=1]", "--cwd", str(tmp_path),
                            command=_waiter(flag)) for _ in range(2)]
        wait_until(lambda: any(running_on(j) for j in licensed), "a licensed job to run")
        waiting = next(j for j in licensed if not running_on(j))
        wait_until(lambda: job(waiting).pending_code == api.PEND_NO_FREE_RESOURCES, "the license reason")
        assert "license_x: 1 of 1 in use" in job(waiting).pending_reason
        shown = json.loads(xce_cli(cluster, "hosts", "--json"))
        assert shown["shared"] == [{"name": "license_x", "total": "1"}] and shown["shared_used"] == {
            "license_x": "1"}

        # A requirement no host meets, then modified: the next pass places it.
        picky = _submit(cluster, "-R", "select[defined(nosuch)]", "--cwd", str(tmp_path), command=["true"])
        wait_until(lambda: job(picky).pending_code == api.PEND_NO_HOST_MATCHES, "no host to match")
        assert job(picky).pending_reason.startswith("select[defined(nosuch)] matched 0 of 3 hosts")
        xce_cli(cluster, "modify", str(picky), "-R", "select[maxslots >= 2]")
        wait_until(lambda: job(picky).state == api.DONE, "the modified job to run")
        assert job(picky).host == "c1"

        flag.touch()
        for job_id in (first, second, third, *licensed):
            wait_until(lambda: job(job_id).state == api.DONE, f"job {job_id} to end")  # noqa: B023
        assert all(h.slots_used == 0 and not h.reserved for h in client.list_hosts().hosts)
        assert dict(client.list_hosts().shared_used) == {"license_x": 0}


def test_load_indices_reach_the_planner_and_hosts_l(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Workers' load indices, committed, read by select[] in the planner and shown by hosts -l."""
    cluster, _ = setup
    with cluster.client() as client:
        wait_until(lambda: all({"r1m", "r15m", "ut", "mem", "tmp"} <= h.load.keys()
                               for h in client.list_hosts().hosts), "every host's load to be committed")
        hosts = client.list_hosts().hosts
        assert all(h.load_time_ms > 0 and 0 <= h.load["ut"] <= 1 for h in hosts)
        detail = xce_cli(cluster, "hosts", "-l")
        assert detail.count("  load       r15s=") == 3 and " r1m=" in detail, detail
        runs = _submit(cluster, "-R", "select[r1m >= 0 && tmp > 0] order[r15s]", "--cwd", str(tmp_path),
                       command=["true"])
        never = _submit(cluster, "-R", "select[r1m > 100000]", "--cwd", str(tmp_path), command=["true"])
        wait_until(lambda: client.get_job(str(runs)).state == api.DONE, "the job on load to run")
        wait_until(lambda: client.get_job(str(never)).pending_code == api.PEND_NO_HOST_MATCHES,
                   "the job no load matches to say so")
        reason = client.get_job(str(never)).pending_reason
        assert reason.startswith("select[r1m>100000] matched 0 of 3 hosts"), reason


def test_a_job_of_more_slots_than_any_host_spreads_and_each_host_holds_its_part(  # type: ignore[no-untyped-def]
        setup, tmp_path: Path) -> None:
    cluster, _ = setup
    flag = tmp_path / "go"
    with cluster.client() as client:
        spread = _submit(cluster, "-n", "4", "--cwd", str(tmp_path), command=_waiter(flag))
        wait_until(lambda: client.get_job(str(spread)).state == api.RUN, "the 4-slot job to run")
        placed = client.get_job(str(spread))
        assert placed.host == "c1" and sorted((a.host, a.slots) for a in placed.allocation) == [
            ("c1", 2), ("g1", 1), ("g2", 1)]
        used = {h.spec.name: h.slots_used for h in client.list_hosts().hosts}
        assert used == {"c1": 2, "g1": 1, "g2": 1}
        assert "c1*2 g1*1 g2*1" in xce_cli(cluster, "job", str(spread))
        flag.touch()
        wait_until(lambda: client.get_job(str(spread)).state == api.DONE, "the job to end")
        assert all(h.slots_used == 0 for h in client.list_hosts().hosts)
