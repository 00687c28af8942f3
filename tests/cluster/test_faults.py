"""Each fault kind in a short soak of its own, and the linearizability checker against injected bugs.

Each soak (`python -m soak --faults KIND`) runs real replicas, schedulers and workers under load,
injects KIND round after round (the victims in turn: leader, scheduler, worker; leader, follower),
drains, and checks: the clients' history linearizable (soak/linear), nothing lost, run twice or
over-committed, and what KIND must leave behind (below). The bug builds (XCE_FAULT, controller/
faults.py) must fail the check, with the checker naming the failing operations. `make test-faults`
runs them (about a minute each; `make test` has the short classic soak, tests/cluster/test_soak.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from soak_run import result, soak

from soak import clockfault, diskfull, peer_cut
from soak.netns import available, fault_available

pytestmark = [pytest.mark.cluster, pytest.mark.faults]


def _needs_root_net() -> None:
    if available() is not None or peer_cut.available() is not None:
        pytest.skip(f"network namespaces and iptables: {available() or peer_cut.available()}")


def _clean(out: Path, kind: str, *args: str, duration: int = 45, every: int = 8) -> dict[str, Any]:
    """A soak of `kind` alone that must pass every check, linearizability included."""
    code, output = soak(out, "--faults", kind, "--duration", str(duration), "--kill-every", str(every),
                        "--seed", "7", "--drain", "120", *args, timeout_s=600)
    assert code == 0, output[-5000:]
    figures = result(out)
    verdict = figures["verdict"]
    assert verdict["ok"] and verdict["linearizable"] == "yes", verdict
    assert verdict["lost"] == verdict["duplicated"] == verdict["over_committed_hosts"] == 0
    assert figures["linearizability"]["operations"] > 300  # the checker had a history to judge
    assert figures["drained"] and figures["submits_acknowledged"] > 100
    return figures


def _events(figures: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = figures["fault_kinds"].get(kind, {}).get("events", [])
    return events


def test_pause_of_a_leader_a_scheduler_and_a_worker_past_their_timeouts(tmp_path: Path) -> None:
    figures = _clean(tmp_path, "pause", "--partitions", "0")
    targets = {e["target"].split("-")[0] for e in _events(figures, "pause")}
    # Each kind of victim, in turn: the leader (failover timed), the lease holder, a worker.
    assert {"replica", "worker"} <= targets and targets & {"sched"}, targets
    assert figures["fault_kinds"]["pause"]["failover_write"]["n"] >= 1


def test_host_reboot_ends_its_jobs_once_and_the_host_serves_again(tmp_path: Path) -> None:
    figures = _clean(tmp_path, "host-reboot", "--partitions", "0", "--rate", "5")
    assert len(_events(figures, "host-reboot")) >= 3
    assert figures["instances"] >= figures["jobs_finished"]


@pytest.mark.skipif(diskfull.available() is not None, reason=str(diskfull.available()))
def test_a_full_disk_stops_its_replica_which_catches_up_once_space_returns(tmp_path: Path) -> None:
    figures = _clean(tmp_path, "disk-full", "--partitions", "0")
    events = _events(figures, "disk-full")
    assert len(events) >= 2 and any("replica stopped (exit 70)" in e["detail"] for e in events), events
    assert all(e["recovered_s"] is not None for e in events), events  # back and caught up, each time
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("replica-*.log"))
    assert "No space left on device" in logs


def test_a_leader_cut_off_from_its_peers_only_is_replaced(tmp_path: Path) -> None:
    _needs_root_net()
    figures = _clean(tmp_path, "peer-cut", duration=35, every=10)
    kind = figures["fault_kinds"]["peer-cut"]
    assert kind["n"] >= 2 and kind["failover_write"]["n"] == kind["n"]


@pytest.mark.parametrize("kind", ["fsync-stall", "slow-disk"])
def test_a_slow_disk_under_a_leader_or_a_follower(tmp_path: Path, kind: str) -> None:
    figures = _clean(tmp_path, kind, "--partitions", "0", duration=40, every=8)
    events = _events(figures, kind)
    assert {e["target"] for e in events} and all(e["recovered_s"] is not None for e in events), events
    if kind == "fsync-stall":  # a leader whose log writes stall loses its leadership to one that keeps up
        assert figures["fault_kinds"][kind]["failover_write"]["n"] >= 1


def test_power_loss_of_a_leader_a_follower_a_worker_and_every_replica(tmp_path: Path) -> None:
    figures = _clean(tmp_path, "power-loss", "--partitions", "0", duration=60, every=10)
    events = _events(figures, kind := "power-loss")
    assert {e["target"].split("-")[0] for e in events} >= {"replica", "worker", "replicas"}, events
    assert any(int(e["detail"].split(", ")[1].split()[0]) > 0 for e in events), events  # something was lost
    assert all(e["recovered_s"] is not None for e in events if e["target"].startswith("replica")), events
    assert figures["fault_kinds"][kind]["failover_write"]["n"] >= 1


def test_a_lossy_network_and_an_asymmetric_partition_of_the_leader(tmp_path: Path) -> None:
    _needs_root_net()
    if fault_available() is not None:
        pytest.skip(str(fault_available()))
    figures = _clean(tmp_path, "netem", duration=50, every=10)
    details = [e["detail"] for e in _events(figures, "netem")]
    assert any(d.startswith("loss") for d in details) and any(d.startswith("one-way") for d in details)
    assert figures["fault_kinds"]["netem"]["failover_write"]["n"] >= 1  # the unheard leader was replaced


@pytest.mark.skipif(clockfault.available() is not None, reason=str(clockfault.available()))
@pytest.mark.parametrize("kind", ["clock-jump", "clock-skew"])
def test_wall_clock_jumps_and_drift_of_a_leader_a_scheduler_and_a_worker(tmp_path: Path, kind: str) -> None:
    figures = _clean(tmp_path, kind, "--partitions", "0", duration=50)
    events = _events(figures, kind)
    assert {e["target"].split("-")[0] for e in events} >= {"replica", "sched", "worker"}, events
    if kind == "clock-jump":  # ahead and behind, by ten minutes, and each victim's log says so
        assert {e["detail"].split()[0] for e in events} == {"+600", "-600"}, events
        every = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("*.log"))
        assert "the wall clock jumped by +6" in every and "the wall clock jumped by -6" in every
    # No host was taken for lost while its clock was off (its heartbeats are timed by the monotonic
    # clock): nothing went UNAVAIL, no job UNKWN.
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("replica-*.log"))
    assert "UNAVAIL" not in logs and "UNKWN" not in logs


# ------------------------------------------------------------------ the checker against broken builds

def _broken(out: Path, bug: str, kind: str, *args: str) -> dict[str, Any]:
    code, output = soak(out, "--faults", kind, "--duration", "30", "--kill-every", "10", "--seed", "7",
                        "--drain", "60", "--fault", bug, *args, timeout_s=480)
    assert code == 1, output[-3000:]
    figures = result(out)
    assert figures["verdict"]["linearizable"] == "no", figures["verdict"]
    violation = figures["linearizability"]["violation"]
    assert 2 <= len(violation) <= 20, violation  # reduced to a few operations, rendered
    assert (out / "violation.html").stat().st_size > 1000 and (out / "violation.png").exists()
    return figures


def test_the_checker_finds_reads_served_by_followers_without_read_index(tmp_path: Path) -> None:
    figures = _broken(tmp_path, "stale-reads", "kill", "--partitions", "0")
    reads = [op for op in figures["linearizability"]["violation"] if op["what"].startswith(("get", "list"))]
    assert reads, figures["linearizability"]["violation"]


def test_the_checker_finds_writes_acknowledged_before_they_were_on_disk(tmp_path: Path) -> None:
    # Four rounds: the leader, a follower, a worker and every replica lose power, in turn.
    figures = _broken(tmp_path, "ack-before-sync", "power-loss", "--partitions", "0", "--duration", "45")
    assert figures["verdict"]["lost"] > 0  # the soak's own count agrees: acknowledged, then gone


def test_the_checker_finds_a_leader_lease_honoured_after_its_expiry(tmp_path: Path) -> None:
    _needs_root_net()
    _broken(tmp_path, "lease-reads", "peer-cut")
