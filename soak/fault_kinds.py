"""The soak's fault kinds beyond kills and partitions, one injected per chaos round.

Each kind picks its victim in turn (the leader, then a scheduler, then a worker, from a seeded
start: a short run covers each), injects the fault on the real process, file system
or network, waits for its planned length, heals it, and returns what it did as a FaultEvent. A
fault that takes the leader away is timed as a failover too (Chaos._measure: the first committed
write after it, and the first new dispatch). Rounds do not overlap: two faults at once on two
replicas are a loss of quorum, not a fault to survive (the mixed long run still mixes the kinds
round after round).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ops.local_cluster import kill_jobs_under
from soak import clockfault, diskfull, faultio, peer_cut

if TYPE_CHECKING:
    from soak.chaos import Chaos

CLASSIC = ("kill", "partition")
KINDS = ("kill", "partition", "peer-cut", "netem", "pause", "host-reboot", "disk-full", "fsync-stall",
         "slow-disk", "power-loss", "clock-jump", "clock-skew")
DISK_KINDS = ("fsync-stall", "slow-disk", "power-loss")  # every daemon's files under faultio (faultio/)
CLOCK_KINDS = ("clock-jump", "clock-skew")  # every daemon runs under a clock of its own (clockfault.py)
NET_KINDS = ("partition", "peer-cut", "netem")  # kinds that need the replicas in network namespaces
PEER_CUT_S = 5.0


@dataclass
class FaultEvent:
    kind: str
    target: str          # "replica-2", "sched-a", "worker-w3", ...
    at: float            # wall time the fault began
    end: float = 0.0     # wall time it was healed (0: not healed by the soak: a kill's restart)
    detail: str = ""
    recovered_s: float | None = None  # the victim (or its replacement) served again, from `at`


def inject(chaos: Chaos, kind: str) -> None:
    """One fault of `kind`, from injection to heal (the classic kinds as chaos.py does them)."""
    if kind == "kill":
        chaos.kill_round()
    elif kind == "partition":
        chaos.partition()
    elif kind == "peer-cut":
        _peer_cut(chaos)
    elif kind == "netem":
        _netem(chaos)
    elif kind == "pause":
        _pause(chaos)
    elif kind == "host-reboot":
        _host_reboot(chaos)
    elif kind == "disk-full":
        _disk_full(chaos)
    elif kind in ("fsync-stall", "slow-disk"):
        _slow(chaos, kind)
    elif kind == "power-loss":
        _power_loss(chaos)
    elif kind in CLOCK_KINDS:
        _clock(chaos, kind)
    else:
        raise ValueError(f"unknown fault kind {kind!r}")


def _peer_cut(chaos: Chaos) -> None:
    """The leader cut off from the other replicas, still reached by every client (peer_cut.py)."""
    net = chaos.net
    assert net is not None

    def peers(leader: int) -> tuple[str, list[str]]:
        return net.namespaces[leader - 1], [a for i, a in enumerate(net.addresses) if i != leader - 1]

    _cut_leader(chaos, "peer-cut", f"{PEER_CUT_S:.0f} s", lambda leader: peer_cut.cut(*peers(leader)),
                lambda leader: peer_cut.heal(*peers(leader)))


def _cut_leader(chaos: Chaos, kind: str, detail: str, cut: Callable[[int], None],
                heal: Callable[[int], None]) -> None:
    """The leader cut off by `cut` for PEER_CUT_S, its failover timed, then healed."""
    leader = chaos.cluster.leader(timeout_s=30)
    event = FaultEvent(kind, f"replica-{leader}", time.time(), detail=detail)
    try:  # the heal undoes a cut made only in part too
        with chaos.lock:
            cut(leader)
        chaos.count(kind)
        chaos.measure(chaos.failover(kind, leader))
        chaos.stopping.wait(max(0.0, event.at + PEER_CUT_S - time.time()))
    finally:
        with chaos.lock:
            heal(leader)
        event.end = time.time()
        chaos.record.events.append(event)


def _netem(chaos: Chaos) -> None:
    """A lossy network, in turn: every replica's packets lost (5-30 %), delayed with jitter,
    duplicated and reordered (soak/netfault.py, user-space netem: this kernel has none); or an
    asymmetric partition of the leader (the others do not hear it, it hears them)."""
    net, rng = chaos.net, chaos.rng
    assert net is not None
    if chaos.turn("netem", ("lossy", "one-way")) == "one-way":
        _cut_leader(chaos, "netem", f"one-way {PEER_CUT_S:.0f} s",
                    lambda leader: net.one_way(leader - 1, "out"),
                    lambda leader: net.heal_one_way(leader - 1))
        return
    loss, delay = rng.uniform(0.05, 0.3), rng.uniform(10.0, 80.0)
    jitter, duplicate, reorder = delay / 2, rng.uniform(0.0, 0.05), rng.uniform(0.0, 0.2)
    length = rng.uniform(8.0, 12.0)
    event = FaultEvent("netem", "replicas", time.time(),
                       detail=f"loss {loss:.0%}, {delay:.0f}±{jitter:.0f} ms, dup {duplicate:.0%}, "
                              f"reorder {reorder:.0%}, {length:.1f} s")
    try:  # the heal clears what was impaired before a failure too
        with chaos.lock:
            for i in range(len(net.namespaces)):
                net.impair(i, loss, delay, jitter, duplicate, reorder, seed=rng.randrange(1 << 30))
        chaos.count("netem")
        chaos.stopping.wait(length)
    finally:
        with chaos.lock:
            for i in range(len(net.namespaces)):
                net.clear(i)
        event.end = time.time()
        chaos.record.events.append(event)


def _pause(chaos: Chaos) -> None:
    """SIGSTOP a leader, the lease-holding scheduler or a worker for longer than its lease or
    heartbeat timeout, then SIGCONT: the stale process must be fenced when it wakes."""
    rng = chaos.rng
    victim = chaos.turn("pause", ("leader", "scheduler", "worker"))
    if victim == "leader":
        leader = chaos.cluster.leader(timeout_s=30)
        proc = chaos.cluster.procs[leader]
        target, length = f"replica-{leader}", rng.uniform(3.0, 6.0)  # elections time out in ~1 s
    elif victim == "scheduler":
        holder = chaos.lease_holder()
        scheduler = next((s for s in chaos.schedulers if s.name == holder and s.proc is not None), None)
        if scheduler is None or scheduler.proc is None:
            return
        proc, target, length = scheduler.proc, scheduler.name, rng.uniform(4.0, 8.0)  # lease 3 s
    else:
        name = rng.choice(sorted(chaos.workers.procs))
        proc, target, length = chaos.workers.procs[name], f"worker-{name}", rng.uniform(4.0, 8.0)
    event = FaultEvent("pause", target, time.time(), detail=f"{length:.1f} s")
    with chaos.lock:
        proc.send_signal(signal.SIGSTOP)
    chaos.count("pause")
    try:
        if victim == "leader":
            chaos.measure(chaos.failover("pause", int(target.split("-")[1])))
        chaos.stopping.wait(max(0.0, event.at + length - time.time()))
    finally:
        with chaos.lock:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        event.end = time.time()
        chaos.record.events.append(event)


def _host_reboot(chaos: Chaos) -> None:
    """A worker host's processes all vanish, its job processes with them; its spool survives."""
    rng = chaos.rng
    name = rng.choice(sorted(chaos.workers.procs))
    down = rng.uniform(1.0, 5.0)
    event = FaultEvent("host-reboot", f"worker-{name}", time.time(), detail=f"down {down:.1f} s")
    try:
        with chaos.lock:
            chaos.workers.kill(name)
            kill_jobs_under(chaos.workers.spool(name))
        chaos.count("host-reboot")
        chaos.stopping.wait(down)
    finally:
        chaos.restart_worker(name)
        event.end = time.time()
        chaos.record.events.append(event)


def _disk_full(chaos: Chaos) -> None:
    """A replica's file system fills (the leader half of the time): it must stop rather than
    acknowledge what it cannot write, and catch up once space returns."""
    rng = chaos.rng
    leader = chaos.cluster.leader(timeout_s=30)
    others = sorted(r for r in chaos.cluster.procs if r != leader)
    victim = leader if chaos.turn("disk-full", ("leader", "follower")) == "leader" or not others \
        else rng.choice(others)
    path = chaos.cluster.config.replica_dir(victim)
    length = rng.uniform(5.0, 10.0)
    event = FaultEvent("disk-full", f"replica-{victim}", time.time(), detail=f"{length:.1f} s")
    filled = 0
    chaos.may_exit.add(victim)  # it must stop rather than acknowledge what it cannot write
    try:  # the ballast goes whatever happens
        filled = diskfull.fill(path)
        chaos.count("disk-full")
        if victim == leader:
            chaos.measure(chaos.failover("disk-full", victim))
        chaos.stopping.wait(max(0.0, event.at + length - time.time()))
    finally:
        diskfull.release(path)
        event.end = time.time()
        proc = chaos.cluster.procs.get(victim)
        stopped = proc is not None and proc.poll() is not None
        event.detail += f", {filled >> 20} MB ballast, " + (
            f"replica stopped (exit {proc.returncode})" if stopped and proc else "replica ran on")
        if stopped:
            chaos.restart_replica(victim)  # not once the run is stopping: the final heal restarts it,
        if not (stopped and chaos.stopping.is_set()):  # and must not take it for an unexpected exit
            chaos.may_exit.discard(victim)
        event.recovered_s = chaos.serving_again(victim, event.at)
        _recovered(chaos, event)
        chaos.record.events.append(event)


def clock_control(data: Path, process: str) -> Path:
    """The file that sets `process`'s wall clock ("replica-2", "sched-a", "worker-w1")."""
    return data / "clocks" / process


def _clock(chaos: Chaos, kind: str) -> None:
    """One process's wall clock jumps ten minutes (ahead, then behind, in turn) and jumps back after
    a while; or runs 2-5 % fast or slow, starting off by up to a minute. Its monotonic clock does
    not move: leases, heartbeats and timeouts must not notice; nothing may run twice."""
    rng = chaos.rng
    victim = chaos.turn(kind, ("leader", "scheduler", "worker"))
    if victim == "leader":
        target = f"replica-{chaos.cluster.leader(timeout_s=30)}"
    elif victim == "scheduler":
        target = chaos.lease_holder() or chaos.schedulers[0].name
    else:
        target = f"worker-{rng.choice(sorted(chaos.workers.procs))}"
    control = clock_control(chaos.cluster.data, target)
    if kind == "clock-jump":
        offset, drift = chaos.turn("clock-jump-sign", (600.0, -600.0)), 1.0
        length = rng.uniform(6.0, 10.0)
    else:
        offset, drift = rng.uniform(-60.0, 60.0), rng.choice((0.95, 0.98, 1.02, 1.05))
        length = rng.uniform(10.0, 15.0)
    event = FaultEvent(kind, target, time.time(), detail=f"{offset:+.0f} s, x{drift:g}, {length:.1f} s")
    try:
        clockfault.set_offset(control, offset, drift)
        chaos.count(kind)
        chaos.stopping.wait(length)
    finally:
        clockfault.set_offset(control, 0.0)
        event.end = time.time()
        chaos.record.events.append(event)


def disk_control(data: Path, process: str) -> Path:
    """The faultio control directory of `process` ("replica-2", "worker-w1")."""
    return data / "faultio" / process


def _replica_victim(chaos: Chaos, kind: str) -> tuple[int, bool]:
    """The leader or a follower, in turn; (its id, whether it leads)."""
    leader = chaos.cluster.leader(timeout_s=30)
    others = sorted(r for r in chaos.cluster.procs if r != leader)
    if chaos.turn(kind, ("leader", "follower")) == "leader" or not others:
        return leader, True
    return chaos.rng.choice(others), False


def _slow(chaos: Chaos, kind: str) -> None:
    """One replica's disk: every fsync takes 1-5 s (fsync-stall), or every write 20-100 ms and every
    fsync 0.1-0.5 s (slow-disk). A slow leader must lose its leadership to a replica that keeps
    up (its heartbeats wait behind its log writes); nothing acknowledged may be lost."""
    rng = chaos.rng
    victim, leads = _replica_victim(chaos, kind)
    if kind == "fsync-stall":
        fsync_ms, write_ms, length = int(rng.uniform(1000, 5000)), 0, rng.uniform(6.0, 10.0)
    else:
        fsync_ms, write_ms = int(rng.uniform(100, 500)), int(rng.uniform(20, 100))
        length = rng.uniform(8.0, 12.0)
    event = FaultEvent(kind, f"replica-{victim}", time.time(),
                       detail=f"fsync {fsync_ms} ms, write {write_ms} ms, {length:.1f} s")
    control = disk_control(chaos.cluster.data, f"replica-{victim}")
    try:
        faultio.set_delays(control, fsync_ms=fsync_ms, write_ms=write_ms)
        chaos.count(kind)
        if leads:
            chaos.measure(chaos.failover(kind, victim))
        chaos.stopping.wait(max(0.0, event.at + length - time.time()))
    finally:
        faultio.set_delays(control)
        event.end = time.time()
        event.recovered_s = chaos.serving_again(victim, event.at)
        _recovered(chaos, event)
        chaos.record.events.append(event)


def _recovered(chaos: Chaos, event: FaultEvent) -> None:
    if event.recovered_s is None and chaos.stopping.is_set() and not chaos.running(event.target):
        event.detail += ", the run ended before it came back (the final heal restarts it)"
    elif event.recovered_s is None:
        chaos.record.not_recovered.append(f"{event.kind} of {event.target} at {event.at:.0f}: not caught up "
                                          "within 60 s")


def _power_loss(chaos: Chaos) -> None:
    """Power lost, in turn: by the leader, a follower, a worker host (its jobs die with it), or every
    replica at once. Whatever they wrote and did not sync is gone (faultio's undo journal); they
    restart 0.5-3 s later. Acknowledged writes must survive (they were synced on a majority), and a
    worker must neither lose a started job nor run an acknowledged end again."""
    rng = chaos.rng
    victim = chaos.turn("power-loss", ("leader", "follower", "worker", "every replica"))
    down = rng.uniform(0.5, 3.0)
    if victim == "worker":
        name = rng.choice(sorted(chaos.workers.procs))
        event = FaultEvent("power-loss", f"worker-{name}", time.time(), detail=f"down {down:.1f} s")
        try:
            with chaos.lock:
                chaos.workers.kill(name)
                kill_jobs_under(chaos.workers.spool(name))
                lost = faultio.power_loss(disk_control(chaos.cluster.data, f"worker-{name}"))
            chaos.count("power-loss")
            event.detail += f", {lost.bytes_dropped} unsynced bytes dropped in {len(lost.files)} files"
            chaos.stopping.wait(down)
        finally:
            chaos.restart_worker(name)
            event.end = time.time()
            chaos.record.events.append(event)
        return
    leader = chaos.cluster.leader(timeout_s=30)
    followers = [r for r in sorted(chaos.cluster.procs) if r != leader]
    if victim == "every replica":
        victims = sorted(chaos.cluster.procs)
    elif victim == "follower" and followers:
        victims = [rng.choice(followers)]
    else:
        victims = [leader]
    target = "replicas" if len(victims) > 1 else f"replica-{victims[0]}"
    event = FaultEvent("power-loss", target, time.time(), detail=f"down {down:.1f} s")
    dropped = 0
    with chaos.lock:
        for replica in victims:
            chaos.cluster.kill(replica)
        for replica in victims:
            control = disk_control(chaos.cluster.data, f"replica-{replica}")
            dropped += faultio.power_loss(control).bytes_dropped
    chaos.count("power-loss")
    event.detail += f", {dropped} unsynced bytes dropped"
    for replica in victims:
        chaos.later(down, lambda r=replica: chaos.restart_replica(r))
    if leader in victims:
        chaos.measure(chaos.failover("power-loss", leader))
    event.recovered_s = 0.0
    for replica in victims:
        recovered = chaos.serving_again(replica, event.at)
        event.recovered_s = None if recovered is None or event.recovered_s is None \
            else max(event.recovered_s, recovered)
    _recovered(chaos, event)
    event.end = time.time()
    chaos.record.events.append(event)
