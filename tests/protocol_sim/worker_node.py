"""Workers in the simulation: the real worker on a simulated operating system.

Theory of operation. Each host runs the real `worker.daemon.Worker` with
its real `worker.session.WorkerSession` (one connection's protocol: join,
`joined`, reports kept until acknowledged and re-sent after a join, commands
handed to the executor) with the real
`worker.executor.Executor` (at most one instance per (job, attempt), the
journal record before the start, re-adoption after a restart). What touches
the operating system comes in through the Worker's own parameters, as in
production, with simulated implementations:

- the journal is the real `worker.journal.MemoryJournal`, kept per host by
  the SimOS so it survives a worker crash, as the synced LMDB file does;
- the process host is a `SimProcessHost` (worker.process_host.ProcessHost):
  processes are `SimProcess` records with start times; signals, watching,
  and the SIGKILL-after-grace timer run on the simulated clock; the status
  file the shim would write is written by `SimOS.end` in the shim's format,
  and the real executor reads it back;
- the clock is the simulation's, so reports, entries and the state are the
  same for the same seed.

A worker crash discards the Worker object (its unacknowledged reports in
memory, its watches and timers) but not the journal or the processes; a
machine crash also kills the processes without a status file. A restart
builds a new Worker and runs the real `Worker.recover`.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from worker.config import WorkerConfig
from worker.daemon import Worker
from worker.journal import KEEP_ACKED, MemoryJournal
from worker.process_host import Account
from xce import worker_wire
from xce.rules import feasibility
from xce.v1 import api_pb2 as api

from .leader import URGENT
from .network import Stream

if TYPE_CHECKING:
    from .cluster import Sim

Key = tuple[int, int]
KILL_GRACE_S = 1.0
FIRST_PID = 10_000_000  # above any real pid_max: a simulated pid never names a real process


@dataclass
class SimProcess:
    pid: int
    host: str
    key: Key
    slots: int
    start_ticks: int
    status_file: Path
    committed_at_spawn: bool  # ghost, for DispatchAfterCommit
    ends_at_ms: int
    alive: bool = True
    stopped: bool = False  # SIGSTOP took effect: it runs nothing (state T)
    stop_due_ms: int = 0  # SIGSTOP sent, not yet in effect (the process is in a system call)
    stopped_at_ms: int = 0
    terminating: bool = False


@dataclass
class SimOS:
    """The machines: every host's processes and journal, and the timers of the daemons."""

    sim: Sim
    processes: dict[int, SimProcess] = field(default_factory=dict)
    journals: dict[str, MemoryJournal] = field(default_factory=dict)
    timers: list[tuple[int, int, SimProcessHost, Callable[[], None]]] = field(default_factory=list)
    hosts: dict[str, SimProcessHost] = field(default_factory=dict)  # each host's live daemon's
    next_pid: int = FIRST_PID
    ticks: int = 0

    def journal(self, host: str) -> MemoryJournal:
        return self.journals.setdefault(host, MemoryJournal(KEEP_ACKED))

    def live(self) -> list[SimProcess]:
        return [p for p in self.processes.values() if p.alive]

    def end(self, process: SimProcess, exit_code: int, term_signal: int, status: bool) -> None:
        """The process group ends; the shim writes the status file unless it died too."""
        process.alive = False
        if self.sim.recorder is not None:
            self.sim.recorder.on_process_end(process)
        if status:
            process.status_file.write_text(json.dumps({
                "exit_code": exit_code, "term_signal": term_signal, "user_cpu_s": 0.0, "system_cpu_s": 0.0,
                "max_rss_kb": 0, "wall_s": 0.0, "time_ms": self.sim.now_ms}))
        daemon_host = self.hosts.get(process.host)
        if daemon_host is not None:
            daemon_host.ended(process.pid, 0 if status else term_signal)

    def stop_due(self) -> None:
        """Stops that were pending take effect as time passes."""
        for process in self.live():
            if process.stop_due_ms and process.stop_due_ms <= self.sim.now_ms:
                process.stop_due_ms, process.stopped, process.stopped_at_ms = 0, True, self.sim.now_ms
                self.sim.stats["processes stopped late"] += 1

    def fire_timers(self) -> int:
        due = sorted((t for t in self.timers if t[0] <= self.sim.now_ms), key=lambda t: (t[0], t[1]))
        self.timers = [t for t in self.timers if t[0] > self.sim.now_ms]
        for _, _, _, function in due:
            function()
        return len(due)


class SimProcessHost:
    """worker.process_host.ProcessHost for one daemon's life on one simulated host."""

    def __init__(self, os_: SimOS, host: str) -> None:
        self.os = os_
        self.host = host
        self.watchers: dict[int, tuple[bool, Callable[[int], None]]] = {}

    def spawn(self, argv: Sequence[str], env: dict[str, str], stdin: bytes, log: Path) -> int:
        os_ = self.os
        key = (int(env["XCE_JOB_ID"]), int(env["XCE_JOB_ATTEMPT"]))
        os_.next_pid += 1
        os_.ticks += 1
        status_file = Path(next(argv[i + 1] for i, arg in enumerate(argv) if arg.endswith("shim.py")))
        job = os_.sim.committed_job(key[0])
        # The slots its committed allocation holds here (its part of a parallel job).
        slots = 1 if job is None else next(
            (p.slots for p in feasibility.allocation_of(job) if p.host == self.host), job.spec.slots)
        # With preemption, preemptable work runs long and urgent work short: urgent jobs meet full
        # hosts; the jobs runner.start fills the cluster with run past its urgent job's preemption.
        lasts = (200, 3000) if job is None or not os_.sim.options.preemption else \
            (200, 1500) if job.spec.queue == URGENT else \
            (3000, 6000) if job.id <= os_.sim.client.warm else (1000, 4000)
        process = SimProcess(os_.next_pid, self.host, key, slots, os_.ticks, status_file,
                             os_.sim.placement_committed(key[0], key[1], self.host),
                             os_.sim.now_ms + os_.sim.rng.randrange(*lasts))
        os_.processes[process.pid] = process
        return process.pid

    def watch(self, pid: int, started_here: bool, start_ticks: int | None,
              on_end: Callable[[int], None]) -> None:
        self.watchers[pid] = (started_here, on_end)

    def ended(self, pid: int, shim_signal: int) -> None:
        watched = self.watchers.pop(pid, None)
        if watched is not None:
            started_here, on_end = watched
            on_end(shim_signal if started_here else 0)

    def killpg(self, pgid: int, sig: int) -> None:
        process = self.os.processes.get(pgid)
        if process is None or not process.alive:
            return
        now = self.os.sim.now_ms
        if sig == signal.SIGSTOP:
            if not process.stopped and not process.stop_due_ms:
                # At once, or once the process leaves a system call: a worker must wait for T.
                delay = self.os.sim.rng.choice((0, 0, 150, 1200))
                if delay:
                    process.stop_due_ms = now + delay
                else:
                    process.stopped, process.stopped_at_ms = True, now
                    self.os.sim.stats["processes stopped"] += 1
        elif sig == signal.SIGCONT:
            if process.stopped:
                process.ends_at_ms += now - process.stopped_at_ms  # its work waited while stopped
                self.os.sim.stats["processes continued"] += 1
            process.stopped, process.stop_due_ms = False, 0
        elif sig == signal.SIGTERM:
            process.terminating = True  # the shim ignores it; the command ends at its next step
        elif sig == signal.SIGKILL:
            self.os.end(process, exit_code=0, term_signal=signal.SIGKILL, status=False)

    def start_ticks(self, pid: int) -> int | None:
        process = self.os.processes.get(pid)
        return process.start_ticks if process is not None and process.alive else None

    def find_by_env(self, key: Key, spool: Path) -> int:
        for process in self.os.live():
            if process.key == key and process.host == spool.name:
                return process.pid
        return 0

    def find_served(self, status_file: Path) -> int:
        return 0  # the simulation launches no tasks

    def group_stopped(self, pgid: int) -> bool:
        process = self.os.processes.get(pgid)
        return process is not None and process.alive and process.stopped

    def sessions_usage(self) -> dict[int, tuple[int, float]]:
        return {}  # simulated processes use nothing

    def host_name(self) -> str:
        return self.host

    def account(self, user: str) -> Account | None:
        return Account(user, 1000, 1000, "/", "/bin/sh")  # every simulated owner has an account

    def euid(self) -> int:
        return 1000

    def owner_dir(self, path: Path, account: Account) -> Path:
        return path

    def call_later(self, delay_s: float, function: Callable[[], None]) -> None:
        timers = self.os.timers
        timers.append((self.os.sim.now_ms + int(delay_s * 1000), len(timers), self, function))

    def close(self) -> None:
        pass


class WorkerNode:
    def __init__(self, sim: Sim, name: str, slots: int, gpus: int = 0) -> None:
        self.sim = sim
        self.spec = api.HostSpec(name=name, slots=slots, memory_mb=1024,
                                 resources={"gpu": float(gpus)} if gpus else {})
        self.spool = sim.root / name
        self.daemon: Worker | None = None
        self.host: SimProcessHost | None = None
        self.stream: Stream | None = None
        self.outgoing: list[api.WorkerMessage] = []
        self.draining = False
        self.boots = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def joined(self) -> bool:
        return self.daemon is not None and self.stream is not None and self.daemon.session.joined

    def boot(self) -> None:
        """Start the worker daemon: recover from the journal (Worker.run)."""
        config = WorkerConfig(path=self.spool / "worker.toml", controllers=("r1", "r2", "r3"),
                              host=self.spec, spool_dir=self.spool, kill_grace_s=KILL_GRACE_S)
        self.host = SimProcessHost(self.sim.os, self.name)
        self.sim.os.hosts[self.name] = self.host
        self.daemon = Worker(config, rng=self.sim.rng, clock=self.sim.clock, host=self.host,
                             journal=self.sim.os.journal(self.name), draining=lambda: self.draining,
                             load=_simulated_load)
        self.boots += 1
        self.daemon.executor.recover()

    def crash(self, machine: bool) -> None:
        if self.sim.recorder is not None:
            self.sim.recorder.on_worker_crash(self, machine)
        self.disconnect()
        self.daemon = None
        # The daemon's threads die with it: its watches, and its SIGKILL-after-grace timers.
        self.sim.os.hosts.pop(self.name, None)
        self.sim.os.timers = [t for t in self.sim.os.timers if t[2] is not self.host]
        self.host = None
        if machine:
            for process in self.sim.os.live():
                if process.host == self.name:
                    self.sim.os.end(process, 0, signal.SIGKILL, status=False)

    def connect(self, stream: Stream) -> None:
        assert self.daemon is not None
        self.stream = stream
        self.outgoing = []
        stream.send_up(self.daemon.session.opening())

    def disconnect(self) -> None:
        if self.stream is not None:
            self.stream.close()
        if self.daemon is not None:
            self.daemon.session.closed(self.outgoing.append)
        self.stream = None

    def deliver(self, frame: api.ControllerMessage) -> str:
        """Worker._session's loop over one received frame: the real WorkerSession.receive."""
        assert self.daemon is not None
        was_joined = self.daemon.session.joined
        done = [_command_text(m) for m in worker_wire.controller_messages(frame)]
        self.daemon.session.receive(frame, self.outgoing.append)
        if self.sim.recorder is not None and self.stream is not None:
            self.sim.recorder.on_deliver(self, self.stream)
        if not was_joined and not self.daemon.session.joined:
            return f"{self.name}: ignored before joined"
        return f"{self.name}: {', '.join(done)}"

    def pump(self) -> None:
        """Worker._drain: what the daemon queued goes onto its stream, reports framed together."""
        batch, self.outgoing[:] = list(self.outgoing), []
        if batch and self.stream is not None:
            for frame in worker_wire.worker_frames(batch):
                self.stream.send_up(frame)

    def heartbeat(self) -> None:
        if self.joined and self.stream is not None and self.daemon is not None:
            self.stream.send_up(self.daemon.session.heartbeat())

    def check_fence(self) -> None:
        """Worker._fence_loop: the real WorkerSession.check_fence, as time passes."""
        if self.daemon is not None:
            self.daemon.session.check_fence()


def _command_text(message: api.ControllerMessage) -> str:
    kind = message.WhichOneof("body")
    if kind == "joined":
        return f"joined gen {message.joined.generation}"
    if kind == "run":
        return f"run {message.run.job.id}.{message.run.job.attempt}"
    if kind == "signal":
        signal_ = message.signal
        return f"signal {api.SignalKind.Name(signal_.kind)} {signal_.job_id}.{signal_.attempt}"
    if kind == "ack":
        return f"ack {message.ack.kind} {message.ack.job_id}.{message.ack.attempt}"
    return kind or "?"


def _simulated_load(now_s: float) -> dict[str, float]:
    """Load indices from the simulated clock, not this machine's /proc: a seed gives the same run."""
    return {"r1m": round(now_s % 4.0, 2), "ut": round((now_s % 10.0) / 10.0, 2)}
