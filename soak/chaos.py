"""The soak's chaos loop: SIGKILL the leader every K seconds, and now and then
the lease-holding scheduler, a worker or a follower; cut the leader off the
network (replicas in network namespaces) at planned rounds. Every victim is
restarted after a random delay. Seeded: the same seed makes the same choices.

Each leader kill or partition is timed two ways: to the first write the
cluster commits afterwards (a probe submit), and to the first new committed
dispatch (the soak's own Sync follower). For a partition, also how long the
cut-off leader took to step down, asked from inside its own namespace.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from client.channel import Client, XceError
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from soak.fault_kinds import CLASSIC, FaultEvent, inject
from soak.load import LoadRecord
from soak.netns import Net
from soak.observe import DispatchWatch
from xce.v1 import api_pb2 as api

PARTITION_S = 5.0
T = TypeVar("T")


@dataclass
class Failover:
    kind: str            # "kill" or "partition"
    leader: int
    at: float            # wall time of the kill or cut
    revision: int        # the dispatch watch's revision just before
    write_s: float | None = None
    dispatch_s: float | None = None
    step_down_s: float | None = None  # partition: the old leader no longer leads
    minority_write: str = ""          # partition: what a submit to the cut-off leader got


@dataclass
class ChaosRecord:
    failovers: list[Failover] = field(default_factory=list)
    kills: dict[str, int] = field(default_factory=dict)  # victim kind -> count
    errors: list[str] = field(default_factory=list)
    events: list[FaultEvent] = field(default_factory=list)  # the faults beyond kills (fault_kinds.py)
    # Faults the soak fails on: a daemon that stopped when nothing made it (a fail-stop, a store it
    # could not open), a victim that never caught up again.
    unexpected_exits: list[str] = field(default_factory=list)
    not_recovered: list[str] = field(default_factory=list)


class Chaos:
    def __init__(self, cluster: LocalCluster, schedulers: list[LocalScheduler], workers: LocalWorkers,
                 worker_slots: dict[str, int], worker_extra: str, net: Net | None, watch: DispatchWatch,
                 load: LoadRecord, kill_every_s: float, partition_rounds: set[int], seed: int,
                 kinds: tuple[str, ...] = CLASSIC) -> None:
        self.cluster, self.schedulers, self.workers = cluster, schedulers, workers
        self.worker_slots, self.worker_extra = worker_slots, worker_extra
        self.net, self.watch, self.load = net, watch, load
        self.kill_every_s = kill_every_s
        self.kinds = kinds
        self.partition_rounds = partition_rounds if net is not None else set()
        self.rng = random.Random(seed)
        self.record = ChaosRecord()
        self._turns: dict[str, int] = {}
        self.may_exit: set[int] = set()  # replicas a fault may stop (a full disk), while it lasts
        self.stopping = threading.Event()
        self._timers: list[threading.Timer] = []
        self.lock = threading.Lock()  # restarts (timers) against the loop and the final stop
        self._cut: int | None = None
        self._thread = threading.Thread(target=self._run, name="chaos", daemon=True)
        self._probe = Client(cluster.addresses, cluster.credentials, deadline_s=60.0, call_timeout_s=1.0)

    def start(self) -> None:
        self._thread.start()

    def abort(self) -> None:
        """Stop at once, restarting nothing (the run is being torn down)."""
        self.stopping.set()
        with self.lock:
            self._halt()

    def stop(self) -> None:
        """No more faults: heal, restart whatever is down now."""
        self.stopping.set()
        self._thread.join(timeout=120)
        with self.lock:
            self._halt()
            self._restart_all()
        self._probe.close()

    def _halt(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if self._cut is not None and self.net is not None:
            self.net.heal(self._cut - 1)
            self._cut = None

    # -------------------------------------------------------------- the loop

    def _run(self) -> None:
        if set(self.kinds) <= set(CLASSIC):
            self._run_classic()
            return
        # One fault a round, each healed before the next: two at once on two replicas would be
        # a loss of quorum, not a fault to survive.
        round_ = 0
        kinds = [k for k in self.kinds if k != "partition" or self.net is not None]
        while not self.stopping.wait(self.kill_every_s / 2):
            round_ += 1
            kind = self.rng.choice(kinds)
            try:
                inject(self, kind)
            except Exception as exc:  # noqa: BLE001 - reported; the soak goes on
                self.record.errors.append(f"round {round_} ({kind}): {type(exc).__name__}: {exc}"[:300])
            self.stopping.wait(self.kill_every_s / 2)

    def _run_classic(self) -> None:
        # Half-way through each round the other faults; at its end the leader's.
        # Apart, so a leader kill does not fall on a follower still restarting
        # (two replicas down is a loss of quorum, not a failover to time).
        round_ = 0
        while not self.stopping.wait(self.kill_every_s / 2):
            round_ += 1
            try:
                self._other_kills()
                if self.stopping.wait(self.kill_every_s / 2):
                    break
                if round_ in self.partition_rounds:
                    self.partition()
                else:
                    self.kill_leader()
            except Exception as exc:  # noqa: BLE001 - reported; the soak goes on
                self.record.errors.append(f"round {round_}: {type(exc).__name__}: {exc}"[:300])

    def kill_round(self) -> None:
        """The classic round in a mixed run: perhaps a scheduler, a worker or a follower, then the
        leader."""
        self._other_kills()
        if not self.stopping.wait(self.kill_every_s / 4):
            self.kill_leader()

    def _other_kills(self) -> None:
        if self.rng.random() < 0.3:
            self._kill_scheduler()
        if self.rng.random() < 0.25:
            self._kill_worker()
        if self.rng.random() < 0.15:
            self._kill_follower()

    def turn(self, kind: str, victims: Sequence[T]) -> T:
        """The next of `victims` for `kind`, in turn from a seeded start: a short run covers each."""
        start = self._turns.setdefault(kind, self.rng.randrange(1 << 16))
        self._turns[kind] = start + 1
        return victims[start % len(victims)]

    def failover(self, kind: str, leader: int) -> Failover:
        """A failover to time from now (kinds beyond kills: fault_kinds.py)."""
        return Failover(kind, leader, time.time(), self.watch.revision)

    def lease_holder(self) -> str:
        with Client(self.cluster.addresses, self.cluster.credentials, deadline_s=5.0) as client:
            return client.status().scheduler_lease_holder

    def serving_again(self, replica_id: int, since: float, timeout_s: float = 60.0) -> float | None:
        """Seconds from `since` until the replica answers and has applied what the leader had
        committed when it was asked (None: not within the timeout: it did not come back)."""
        deadline = time.monotonic() + timeout_s
        target: int | None = None
        while time.monotonic() < deadline:  # the soak's end waits for it: part of the fault's figures
            if self.stopping.is_set() and not self._replica_running(replica_id):
                return None  # stopped, and no restart may come before the final heal
            try:
                if target is None:
                    with Client(self.cluster.addresses, self.cluster.credentials, deadline_s=5.0) as client:
                        target = max(r.commit_index for r in client.status().replicas)
                with Client([self.cluster.address(replica_id)], self.cluster.credentials, deadline_s=1.0,
                            call_timeout_s=1.0, follow_leader=False) as client:
                    mine = [r for r in client.status(local_only=True).replicas if r.id == replica_id]
                if mine and mine[0].applied_index >= target:
                    return time.time() - since
            except XceError:
                pass
            time.sleep(0.2)
        return None

    def kill_leader(self) -> None:
        leader = self.cluster.leader(timeout_s=30)
        failover = Failover("kill", leader, time.time(), self.watch.revision)
        with self.lock:
            self.cluster.kill(leader)
        self.count("leader")
        self.later(self.rng.uniform(0.5, 3.0), lambda: self.restart_replica(leader))
        self.measure(failover)

    def partition(self) -> None:
        assert self.net is not None
        leader = self.cluster.leader(timeout_s=30)
        failover = Failover("partition", leader, time.time(), self.watch.revision)
        probe = subprocess.Popen([*self.net.prefix(leader - 1), sys.executable, "-m", "soak.minority",
                                  self.cluster.address(leader), str(PARTITION_S),
                                  str(self.cluster.config_path)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "XCE_TOKEN": self.cluster.admin_token})
        assert probe.stdin is not None and probe.stdout is not None
        probe.stdout.readline()  # "ready": it runs, and the replica answers it
        with self.lock:
            failover.at = time.time()
            self.net.cut(leader - 1)
            self._cut = leader
        try:
            probe.stdin.write("go\n")
            probe.stdin.flush()
            self.count("partition")
            stepped = threading.Thread(target=self._step_down, args=(failover, probe), daemon=True)
            stepped.start()
            self.measure(failover)
            self.stopping.wait(max(0.0, failover.at + PARTITION_S - time.time()))
            stepped.join(timeout=10)
        finally:
            if probe.poll() is None:
                probe.kill()
            probe.wait()
            with self.lock:
                if self._cut == leader:
                    self.net.heal(leader - 1)
                    self._cut = None

    def measure(self, failover: Failover) -> None:
        try:
            job = self._probe.submit([api.JobSpec(command=["true"], queue="idle", name="soak-probe")]).jobs[0]
            failover.write_s = time.time() - failover.at
            self.load.acknowledged[job.id] = int(time.time() * 1000)
        except XceError as exc:
            self.record.errors.append(f"probe after {failover.kind}: {exc}"[:300])
        self.record.failovers.append(failover)

    def _step_down(self, failover: Failover, probe: subprocess.Popen[str]) -> None:
        """Read what the probe inside the cut-off namespace saw (soak/minority.py)."""
        assert probe.stdout is not None
        for line in probe.stdout:
            words = line.split()
            if words and words[0] == "stepped":
                failover.step_down_s = float(words[1]) - failover.at
            elif words and words[0].startswith("minority-"):
                failover.minority_write = words[0].removeprefix("minority-")

    def _kill_scheduler(self) -> None:
        holder = self.lease_holder()
        for scheduler in self.schedulers:
            if scheduler.name == holder and scheduler.proc is not None:
                with self.lock:
                    scheduler.kill()
                self.count("scheduler")
                self.later(self.rng.uniform(1.0, 4.0), lambda s=scheduler: self._restart_scheduler(s))

    def _kill_worker(self) -> None:
        name = self.rng.choice(sorted(self.workers.procs))
        with self.lock:
            self.workers.kill(name)
        self.count("worker")
        self.later(self.rng.uniform(1.0, 5.0), lambda: self.restart_worker(name))

    def _kill_follower(self) -> None:
        leader = self.cluster.leader(timeout_s=30)
        followers = sorted(r for r in self.cluster.procs if r != leader)
        if not followers:
            return
        victim = self.rng.choice(followers)
        with self.lock:
            self.cluster.kill(victim)
        self.count("follower")
        self.later(self.rng.uniform(0.5, 3.0), lambda: self.restart_replica(victim))

    # -------------------------------------------------------------- restarts

    def count(self, kind: str) -> None:
        self.record.kills[kind] = self.record.kills.get(kind, 0) + 1

    def later(self, delay_s: float, action: object) -> None:
        timer = threading.Timer(delay_s, action)  # type: ignore[arg-type]
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def running(self, target: str) -> bool:
        """Whether a replica ("replica-2"), or every one ("replicas"), runs now (other targets: True)."""
        if target == "replicas":
            ids = [r.id for r in self.cluster.config.replicas]
        elif target.startswith("replica-") and target[8:].isdigit():
            ids = [int(target[8:])]
        else:
            return True
        return all(self._replica_running(i) for i in ids)

    def _replica_running(self, replica_id: int) -> bool:
        proc = self.cluster.procs.get(replica_id)
        return proc is not None and proc.poll() is None

    def restart_replica(self, replica_id: int) -> None:
        with self.lock:
            proc = self.cluster.procs.get(replica_id)
            if not self.stopping.is_set() and (proc is None or proc.poll() is not None):
                self._exited(replica_id)
                self.cluster.restart(replica_id)

    def _exited(self, replica_id: int) -> None:
        """A replica found stopped that chaos did not kill (killed ones are out of `procs`) is a fault
        of the soak's, unless a fault meant it (a full disk: `may_exit`)."""
        proc = self.cluster.procs.get(replica_id)
        if proc is None or proc.poll() is None or replica_id in self.may_exit:
            return
        log = self.cluster.data / f"replica-{replica_id}.log"
        try:
            last = [line for line in log.read_text(errors="replace").splitlines() if "FATAL" in line][-1:]
        except OSError:
            last = []
        self.record.unexpected_exits.append(f"replica-{replica_id} exit {proc.returncode}: "
                                            f"{(last or ['(no FATAL line)'])[0][-300:]}")

    def _restart_scheduler(self, scheduler: LocalScheduler) -> None:
        with self.lock:
            if not self.stopping.is_set() and scheduler.proc is None:
                scheduler.start()

    def restart_worker(self, name: str) -> None:
        with self.lock:
            if not self.stopping.is_set() and name not in self.workers.procs:
                self.workers.start(name, self.worker_slots[name], self.worker_extra)

    def _restart_all(self) -> None:
        for replica in self.cluster.config.replicas:
            proc = self.cluster.procs.get(replica.id)
            if proc is None or proc.poll() is not None:  # killed, or stopped on its own (a full disk)
                self._exited(replica.id)
                self.cluster.restart(replica.id)
        for scheduler in self.schedulers:
            if scheduler.proc is None:
                scheduler.start()
        for name, slots in self.worker_slots.items():
            if name not in self.workers.procs:
                self.workers.start(name, slots, self.worker_extra)
