"""Workers in the simulation: the real worker bookkeeping on a simulated OS.

Theory of operation. Each host runs the real `worker.daemon.Worker` (reports
kept until acknowledged, everything re-sent after a join) with the real
`worker.executor.Executor` (at most one instance per (job, attempt), journal
record before the start, re-adoption after a restart). Only what touches
the operating system is replaced, in one place (`sim_os`):

- the journal is `MemoryJournal` (the LMDB Journal's five methods over a
  dict of JSON strings), kept per host by the SimOS so it survives a worker
  crash, as the synced LMDB file does;
- processes are `SimProcess` records: `_spawn` creates one, `_start_ticks`,
  `_find_by_env` and `_killpg` look them up, and the status file the shim
  would write is written by `SimOS.end` in the shim's format; the real
  `_finished` reads it back;
- `threading.Thread` runs its target at once (the executor's watch thread
  only registers the instance here) and `threading.Timer` (SIGKILL after the
  grace period) fires from the simulated clock; `time.time()` is the
  simulated clock, so reports, entries and the state are the same for the
  same seed.

A worker crash discards the Worker object (its unacknowledged reports in
memory too) but not the journal or the processes; a machine crash also kills
the processes without a status file. A restart builds a new Worker and runs
the real `Executor.recover`.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import controller.worker_session as worker_session
import worker.daemon as worker_daemon
import worker.executor as executor_module
from worker.config import WorkerConfig
from worker.daemon import Worker
from worker.executor import Executor
from worker.journal import KEEP_ACKED
from xce import worker_wire
from xce.v1 import api_pb2 as api

from .network import Stream

if TYPE_CHECKING:
    from .cluster import Sim

Key = tuple[int, int]
KILL_GRACE_S = 1.0
FIRST_PID = 10_000_000  # above any real pid_max: a simulated pid never names a real process


class MemoryJournal:
    """worker.journal.Journal without LMDB: records as JSON, in key order."""

    def __init__(self, keep_acked: int = KEEP_ACKED) -> None:
        self._rows: dict[bytes, str] = {}
        self._keep_acked = keep_acked

    def put(self, key: Key, record: dict[str, Any]) -> None:
        self._rows[_key(key)] = json.dumps(record, sort_keys=True)

    def get(self, key: Key) -> dict[str, Any] | None:
        raw = self._rows.get(_key(key))
        return None if raw is None else dict(json.loads(raw))

    def items(self) -> Iterator[tuple[Key, dict[str, Any]]]:
        for raw_key in sorted(self._rows):
            job, attempt = raw_key.decode().split(".")
            yield (int(job), int(attempt)), dict(json.loads(self._rows[raw_key]))

    def prune_acked(self) -> None:
        acked = sorted(key for key, record in self.items() if record.get("acked"))
        for key in acked[:max(0, len(acked) - self._keep_acked)]:
            del self._rows[_key(key)]

    def close(self) -> None:
        pass


def _key(key: Key) -> bytes:
    return f"{key[0]}.{key[1]}".encode()


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
    stopped: bool = False
    terminating: bool = False


class SimExecutor(Executor):
    """The real Executor; only process creation and watching are simulated."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watching: dict[int, tuple[Key, dict[str, Any], bool]] = {}

    def _spawn(self, job: api.Job, status_file: Path) -> Any:
        return _active().spawn(self.spool.name, job, status_file)

    def _watch(self, key: Key, record: dict[str, Any], popen: Any) -> None:
        self.watching[record["pid"]] = (key, record, popen is not None)

    def process_ended(self, pid: int, shim_signal: int) -> None:
        watched = self.watching.pop(pid, None)
        if watched is not None:
            key, record, with_popen = watched
            self._end(key, record, self._finished(key, record, shim_signal if with_popen else 0))


@dataclass
class SimOS:
    sim: Sim
    processes: dict[int, SimProcess] = field(default_factory=dict)
    journals: dict[str, MemoryJournal] = field(default_factory=dict)
    timers: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = field(default_factory=list)
    next_pid: int = FIRST_PID
    ticks: int = 0

    def journal(self, path: Path, keep_acked: int = KEEP_ACKED) -> MemoryJournal:
        return self.journals.setdefault(path.parent.name, MemoryJournal(keep_acked))

    def spawn(self, host: str, job: api.Job, status_file: Path) -> SimpleNamespace:
        self.next_pid += 1
        self.ticks += 1
        key = (job.id, job.attempt)
        process = SimProcess(self.next_pid, host, key, job.spec.slots, self.ticks, status_file,
                             self.sim.placement_committed(job.id, job.attempt, host),
                             self.sim.now_ms + self.sim.rng.randrange(200, 3000))
        self.processes[process.pid] = process
        return SimpleNamespace(pid=process.pid)

    def live(self) -> list[SimProcess]:
        return [p for p in self.processes.values() if p.alive]

    def start_ticks(self, pid: int) -> int | None:
        process = self.processes.get(pid)
        return process.start_ticks if process is not None and process.alive else None

    def find_by_env(self, key: Key, spool: Path) -> int:
        for process in self.live():
            if process.key == key and process.host == spool.name:
                return process.pid
        return 0

    def killpg(self, pid: int, sig: int) -> None:
        process = self.processes.get(pid)
        if process is None or not process.alive:
            return
        if sig == signal.SIGSTOP:
            process.stopped = True
        elif sig == signal.SIGCONT:
            process.stopped = False
        elif sig == signal.SIGTERM:
            process.terminating = True  # the shim ignores it; the command ends at its next step
        elif sig == signal.SIGKILL:
            self.end(process, exit_code=0, term_signal=signal.SIGKILL, status=False)

    def end(self, process: SimProcess, exit_code: int, term_signal: int, status: bool) -> None:
        """The process group ends; the shim writes the status file unless it died too."""
        process.alive = False
        if status:
            process.status_file.write_text(json.dumps({
                "exit_code": exit_code, "term_signal": term_signal, "user_cpu_s": 0.0, "system_cpu_s": 0.0,
                "max_rss_kb": 0, "wall_s": 0.0, "time_ms": self.sim.now_ms}))
        node = self.sim.workers[process.host]
        if node.daemon is not None:
            executor = node.daemon.executor
            assert isinstance(executor, SimExecutor)
            executor.process_ended(process.pid, 0 if status else term_signal)

    def timer(self, interval_s: float, function: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.timers.append((self.sim.now_ms + int(interval_s * 1000), len(self.timers), function, args))

    def fire_timers(self) -> int:
        due = sorted(t for t in self.timers if t[0] <= self.sim.now_ms)
        self.timers = [t for t in self.timers if t[0] > self.sim.now_ms]
        for _, _, function, args in due:
            function(*args)
        return len(due)


# ------------------------------------------------------------------ patching the executor module

_ACTIVE: list[SimOS] = []


def _active() -> SimOS:
    assert _ACTIVE, "no simulation is running"
    return _ACTIVE[-1]


class _Thread:
    def __init__(self, target: Callable[..., None], args: tuple[Any, ...] = (), daemon: bool = False,
                 **_: Any) -> None:
        self._target, self._args = target, args

    def start(self) -> None:
        self._target(*self._args)


class _Timer:
    def __init__(self, interval: float, function: Callable[..., None], args: tuple[Any, ...] = ()) -> None:
        self._interval, self._function, self._args = interval, function, args
        self.daemon = True

    def start(self) -> None:
        _active().timer(self._interval, self._function, self._args)


_PATCHES: dict[str, Any] = {  # worker.executor's names
    "Journal": lambda path, *args: _active().journal(path, *args),
    "_start_ticks": lambda pid: _active().start_ticks(pid),
    "_find_by_env": lambda key, spool: _active().find_by_env(key, spool),
    "_killpg": lambda pid, sig: _active().killpg(pid, sig),
    "threading": SimpleNamespace(Lock=threading.Lock, Thread=_Thread, Timer=_Timer),
    "time": SimpleNamespace(time=lambda: _active().sim.now_ms / 1000,
                            sleep=lambda _: (_ for _ in ()).throw(AssertionError("sleep in the sim"))),
}
# The leader's session notes heartbeats by time.monotonic(): the simulated clock.
_SESSION_PATCHES: dict[str, Any] = {"time": SimpleNamespace(monotonic=lambda: _active().sim.now_s())}
_SAVED: list[tuple[Any, str, Any]] = []


def enter(os_: SimOS) -> None:
    if not _ACTIVE:
        for module, patches in ((executor_module, _PATCHES), (worker_session, _SESSION_PATCHES)):
            for name, value in patches.items():
                _SAVED.append((module, name, getattr(module, name)))
                setattr(module, name, value)
    _ACTIVE.append(os_)


def leave(os_: SimOS) -> None:
    _ACTIVE.remove(os_)
    if not _ACTIVE:
        for module, name, value in _SAVED:
            setattr(module, name, value)
        _SAVED.clear()


# ------------------------------------------------------------------ one host


class WorkerNode:
    def __init__(self, sim: Sim, name: str, slots: int) -> None:
        self.sim = sim
        self.spec = api.HostSpec(name=name, slots=slots, memory_mb=1024)
        self.spool = sim.root / name
        self.daemon: Worker | None = None
        self.stream: Stream | None = None
        self.joined = False
        self.outgoing: queue.Queue[api.WorkerMessage | None] = queue.Queue()
        self.draining = False
        self.boots = 0

    @property
    def name(self) -> str:
        return self.spec.name

    def boot(self) -> None:
        """Start the worker daemon: recover from the journal (Worker.run)."""
        config = WorkerConfig(path=self.spool / "worker.toml", controllers=("r1", "r2", "r3"),
                              host=self.spec, spool_dir=self.spool, kill_grace_s=KILL_GRACE_S)
        saved = getattr(worker_daemon, "Executor")  # noqa: B009 - the name the daemon builds its executor by
        setattr(worker_daemon, "Executor", SimExecutor)  # noqa: B010
        try:
            self.daemon = Worker(config)
        finally:
            setattr(worker_daemon, "Executor", saved)  # noqa: B010
        self.daemon.executor._draining = lambda: self.draining
        self.boots += 1
        self.daemon.executor.recover()

    def crash(self, machine: bool) -> None:
        self.disconnect()
        self.daemon = None
        # The daemon's timer threads die with it (its SIGKILL-after-grace too).
        self.sim.os.timers = [t for t in self.sim.os.timers if not _timer_of(t, self.name)]
        if machine:
            for process in self.sim.os.live():
                if process.host == self.name:
                    self.sim.os.end(process, 0, signal.SIGKILL, status=False)

    def connect(self, stream: Stream) -> None:
        assert self.daemon is not None
        self.stream = stream
        self.joined = False
        self.outgoing = queue.Queue()
        stream.send_up(api.WorkerMessage(join=self.spec))

    def disconnect(self) -> None:
        """Worker._session's finally: no connection to send reports on until the next join."""
        if self.stream is not None:
            self.stream.close()
        if self.daemon is not None:
            with self.daemon._lock:
                if self.daemon._outgoing is self.outgoing:
                    self.daemon._outgoing = None
        self.stream = None
        self.joined = False

    def deliver(self, frame: api.ControllerMessage) -> str:
        """Worker._session's loop over one received frame."""
        assert self.daemon is not None
        done = []
        for message in worker_wire.controller_messages(frame):
            kind = message.WhichOneof("body")
            if kind == "joined" and not self.joined:  # the first `joined` starts the session
                self.joined = True
                self.daemon.generation = message.joined.generation
                self.daemon._resend(self.outgoing)
                done.append(f"joined gen {message.joined.generation}")
            elif self.joined:
                self.daemon._handle(message)  # not _on_message: an exception here is a finding
                done.append(f"{kind} {_command_text(message)}")
        return f"{self.name}: {', '.join(done) or 'ignored before joined'}"

    def pump(self) -> None:
        """Worker._drain: what the daemon queued goes onto its stream, reports framed together."""
        batch: list[api.WorkerMessage] = []
        while True:
            try:
                message = self.outgoing.get_nowait()
            except queue.Empty:
                break
            if message is not None:
                batch.append(message)
        if batch and self.stream is not None:
            for frame in worker_wire.worker_frames(batch):
                self.stream.send_up(frame)

    def heartbeat(self) -> None:
        if self.joined and self.stream is not None and self.daemon is not None:
            self.stream.send_up(api.WorkerMessage(heartbeat=api.Heartbeat(generation=self.daemon.generation)))


def _timer_of(timer: tuple[int, int, Callable[..., None], tuple[Any, ...]], host: str) -> bool:
    function = timer[2]
    owner = getattr(function, "__self__", None)
    return isinstance(owner, Executor) and owner.spool.name == host


def _command_text(message: api.ControllerMessage) -> str:
    kind = message.WhichOneof("body")
    if kind == "run":
        return f"{message.run.job.id}.{message.run.job.attempt}"
    if kind == "signal":
        return f"{api.SignalKind.Name(message.signal.kind)} {message.signal.job_id}.{message.signal.attempt}"
    if kind == "ack":
        return f"{message.ack.kind} {message.ack.job_id}.{message.ack.attempt}"
    return ""
