"""The worker protocol, without I/O: what a worker says on a stream to the leader, and what it keeps.

Theory of operation. A driver (worker/daemon.py over gRPC, the protocol
simulation over its simulated network, bench/fleet_sim.py for thousands of
hosts in one process) opens a stream and sends `opening()`: the join, with
the host and every instance it runs. It hands each frame from the leader
to `receive(frame, send)`, where `send` queues a message on that stream;
the first `joined` makes the stream joined (the driver starts heartbeating
every `heartbeat_s` with `heartbeat()`), and from then on the leader's
commands go to the host's jobs (`HostJobs`: the executor, or the fleet's
sleeping jobs). When the stream ends the driver calls `closed(send)`, and
reconnects along the route every client follows (client/leader_route.py).

The session's bookkeeping: the generation the leader gave the join (every
heartbeat carries it); reports kept until acknowledged and sent again, with
a fresh report of everything still running, after every join (H4); task
launches and task states relayed while joined; an output read answered only
on the stream that asked (a request number is that leader's); the commands
that failed. And the worker-side fence (Nomad's
stop_after_client_disconnect): the leader says in `joined` and its
heartbeat answers how long a worker may go unanswered (`fence_s`); past it,
`check_fence` kills the rerunnable jobs (HostJobs.fence) so the leader can
requeue them before it gives the host up. The fence's clock is kept in a
note (the journal's), so a worker restarted while cut off does not start it
afresh: on the same boot (`boot_id`) by the monotonic clock, which every
process of the host shares and no wall-clock jump moves (behind by 10
minutes, the wall clock would restart the fence afresh while the leader's
timeout runs on); after a reboot, by the wall clock, all there is.

Reports and task states come from the jobs' own threads: `send` may be
called from any thread, under the session's lock only for its bookkeeping.
Time is the injected clock's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from xce import worker_wire
from xce.clock import Clock
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

Key = tuple[int, int]
Send = Callable[[api.WorkerMessage], None]
ReadOutput = Callable[[api.OutputRequest, Callable[[api.OutputAnswer], None]], None]  # request, answer

MAX_FAILURES_KEPT = 100
FENCE_NOTE = "fence"  # the journal note: fence_s, unknown_timeout_s, the last answer's wall and monotonic s
FENCE_NOTE_EVERY_S = 1.0  # how often the last answer's time is written down
RESTART_JOIN_S = 10.0  # after a restart, the fence waits this long for a join (two join timeouts)
DEFAULT_HEARTBEAT_S = 2.0  # until a leader says otherwise
CAPABILITIES = ("parts", "output")  # it keeps the parts of parallel jobs; it reads a job's output


class HostJobs(Protocol):
    """The instances on this host, as the protocol drives them (worker/executor.py)."""

    def run(self, job: api.Job, credential: str = "") -> None: ...

    def signal(self, key: Key, kind: api.SignalKind, preempted: bool = False) -> None: ...

    def checkpoint(self, key: Key, sig: int, number: int) -> None: ...

    def acknowledged(self, key: Key, kind: str) -> None: ...

    def running(self, parts: bool = True) -> list[Key]: ...

    def rereport(self, key: Key, acknowledged_too: bool = False) -> None: ...

    def fence(self, grace_s: float) -> list[Key]: ...

    def launch(self, request: api.LaunchTask) -> api.TaskState: ...


class Notes(Protocol):
    """Named notes that outlive a restart (the journal's)."""

    def get_note(self, name: str) -> dict[str, Any] | None: ...

    def put_note(self, name: str, note: dict[str, Any]) -> None: ...


class WorkerSession:
    def __init__(self, host: api.HostSpec, jobs: HostJobs, notes: Notes, clock: Clock, kill_grace_s: float,
                 load: Callable[[float], dict[str, float]] = lambda now_s: {},
                 capabilities: Sequence[str] = CAPABILITIES, boot_id: str = "") -> None:
        """`load`: the host's load indices at a monotonic time; `boot_id`: this boot's (the kernel's
        random boot_id; "": unknown), under which the clock's monotonic readings are comparable."""
        self.host = host
        self.jobs = jobs
        self.notes = notes
        self.clock = clock
        self.kill_grace_s = kill_grace_s
        self.capabilities = tuple(capabilities)
        self.boot_id = boot_id
        self._load = load
        self.generation = 0
        self.joined = False
        self.heartbeat_s = DEFAULT_HEARTBEAT_S
        self.failures: list[str] = []  # commands that raised (the last MAX_FAILURES_KEPT)
        # Where the driver's other parts plug in (none: not on this host).
        self.read_output: ReadOutput | None = None
        self.deliver_task: Callable[[api.TaskState], None] | None = None
        self.pending_launches: Callable[[], Iterable[api.LaunchTask]] = lambda: ()
        self._lock = threading.Lock()
        self._unacked: dict[tuple[int, int, str], api.JobReport] = {}
        self._send: Send | None = None  # the joined stream's, while there is one
        self._heard = 0.0  # when the leader last said anything on the current stream
        self.fence_s = 0.0  # 0: no fence (the leader's word, in `joined`)
        self.unknown_timeout_s = 0.0
        self._answered_s = clock.monotonic_s()  # when a serving leader last answered
        self._fence_from_s = float("-inf")  # after a restart: not before it had a chance to join
        self._noted_s = float("-inf")
        self._load_fence_note()
        # The leader's commands, by kind.
        self._handlers: dict[str, Callable[[api.ControllerMessage], None]] = {
            "run": self._run, "ack": self._ack, "signal": self._signal, "launch": self._launch,
            "task": self._task, "output": self._output}

    # -------------------------------------------------------------- one stream

    def opening(self) -> api.WorkerMessage:
        """The first message of a new stream: the host, and every instance it runs (a cluster that
        was restored or forced from a survivor may have forgotten some: controller/fsm/recovery.py)."""
        self.joined = False
        self._heard = self.clock.monotonic_s()
        join = api.HostSpec()
        join.CopyFrom(self.host)
        running = sorted(self.jobs.running(parts=False))
        join.running.extend(api.InstanceKey(job_id=j, attempt=a) for j, a in running)
        join.capabilities.extend(self.capabilities)
        return api.WorkerMessage(join=join)

    def receive(self, frame: api.ControllerMessage, send: Send) -> bool:
        """A frame from the leader; True when it made this stream joined (start heartbeats)."""
        self._heard = self.clock.monotonic_s()
        joined_now = False
        for message in worker_wire.controller_messages(frame):
            kind = message.WhichOneof("body")
            if kind == "joined" and not self.joined:
                self.joined = joined_now = True
                self.generation = message.joined.generation
                self.heartbeat_s = message.joined.heartbeat_s
                log.info("worker %s: joined, generation %d", self.host.name, self.generation)
                self._answered(message.joined.fence_s, message.joined.unknown_timeout_s)
                self._resend(send)
            elif not self.joined:
                continue  # before the join: nothing the leader says counts yet
            elif kind == "heartbeat":
                if message.heartbeat.generation == self.generation:
                    self._answered(message.heartbeat.fence_s, message.heartbeat.unknown_timeout_s)
            elif (handler := self._handlers.get(kind or "")) is not None:  # (else a newer leader's kind)
                try:
                    handler(message)
                except Exception as exc:  # noqa: BLE001 - one bad command must not take the worker down
                    self._failed(message, exc)
        return joined_now

    def heartbeat(self) -> api.WorkerMessage:
        """With the host's load indices (the planner's select[r1m < 2])."""
        return api.WorkerMessage(heartbeat=api.Heartbeat(generation=self.generation,
                                                          load=self._load(self.clock.monotonic_s())))

    def silent_s(self) -> float:
        """How long the leader has said nothing on the current stream."""
        return self.clock.monotonic_s() - self._heard

    def closed(self, send: Send | None) -> None:
        """The stream ended: no stream to send reports on until the next join."""
        with self._lock:
            if send is None or self._send == send:  # bound methods are equal, not identical
                self._send = None
        self.joined = False

    def unacknowledged(self) -> int:
        with self._lock:
            return len(self._unacked)

    # -------------------------------------------------------------- from the host's jobs (any thread)

    def report(self, report: api.JobReport) -> None:
        """Keep it until acknowledged; send it now if joined."""
        with self._lock:
            self._unacked[(report.job_id, report.attempt, report.WhichOneof("body") or "")] = report
            send = self._send
        if send is not None:
            send(api.WorkerMessage(report=report))

    def tell(self, state: api.TaskState) -> None:
        """What became of a task, to the leader (which passes it to the host that asked); not kept:
        a launch asked again is answered from the journal."""
        with self._lock:
            send = self._send
        if send is not None:
            send(api.WorkerMessage(task=state))

    def forward(self, launch: api.LaunchTask) -> bool:
        """A task launch asked for by a job here, to the leader; False if not joined (it is sent
        with the next join, from `pending_launches`)."""
        with self._lock:
            send = self._send
        if send is None:
            return False
        send(api.WorkerMessage(launch=launch))
        return True

    # -------------------------------------------------------------- the leader's commands

    def _failed(self, message: api.ControllerMessage, exc: Exception) -> None:
        # Its kind and job, not the message: a RunJob or launch carries the environment and credential.
        what = _described(message)
        log.exception("worker %s: command failed: %s", self.host.name, what)
        self.failures = [*self.failures[-(MAX_FAILURES_KEPT - 1):], f"{what}: {exc!r}"]

    def _run(self, message: api.ControllerMessage) -> None:
        self.jobs.run(message.run.job, message.run.credential)

    def _launch(self, message: api.ControllerMessage) -> None:
        self.tell(self.jobs.launch(message.launch))

    def _task(self, message: api.ControllerMessage) -> None:
        if self.deliver_task is not None:
            self.deliver_task(message.task)

    def _signal(self, message: api.ControllerMessage) -> None:
        signal_ = message.signal
        key = (signal_.job_id, signal_.attempt)
        if signal_.kind == api.SIGNAL_CHECKPOINT:
            self.jobs.checkpoint(key, signal_.signal, signal_.checkpoint)
        else:
            self.jobs.signal(key, signal_.kind, signal_.preempted)

    def _ack(self, message: api.ControllerMessage) -> None:
        ack = message.ack
        with self._lock:
            self._unacked.pop((ack.job_id, ack.attempt, ack.kind), None)
        self.jobs.acknowledged((ack.job_id, ack.attempt), ack.kind)

    def _output(self, message: api.ControllerMessage) -> None:
        """Answered on the stream it was asked on, or not at all: a request number is that leader's,
        and another leader's request may carry the same. The read itself is the driver's (a job's
        file may sit on a file system that hangs: heartbeats must not wait for it)."""
        asked = message.output
        with self._lock:
            asked_on = self._send
        if asked_on is None or self.read_output is None:
            return

        def answer(answer: api.OutputAnswer) -> None:
            answer.request = asked.request
            with self._lock:
                same = self._send == asked_on  # bound methods are equal, not identical
            if same:
                asked_on(api.WorkerMessage(output=answer))

        self.read_output(asked, answer)

    def _resend(self, send: Send) -> None:
        """After a join: everything unacknowledged, and what still runs here."""
        for key in self.jobs.running():
            self.jobs.rereport(key)
        with self._lock:
            self._send = send
            pending = list(self._unacked.values())
        for report in pending:
            send(api.WorkerMessage(report=report))
        for launch in self.pending_launches():
            send(api.WorkerMessage(launch=launch))

    # -------------------------------------------------------------- the fence

    def _answered(self, fence_s: float, unknown_timeout_s: float) -> None:
        """A serving leader answered (a join, or a heartbeat of this generation), saying the fence."""
        now = self.clock.monotonic_s()
        self._answered_s = now
        self._fence_from_s = float("-inf")
        changed = (fence_s, unknown_timeout_s) != (self.fence_s, self.unknown_timeout_s)
        if changed:
            if fence_s and fence_s + self.kill_grace_s >= unknown_timeout_s:
                log.error("worker %s: fence_s %.1f + kill_grace_s %.1f is not below the cluster's "
                          "unknown_timeout_s %.1f: fenced jobs get SIGKILL at once", self.host.name,
                          fence_s, self.kill_grace_s, unknown_timeout_s)
            log.info("worker %s: the fence is %s", self.host.name, f"{fence_s:g} s" if fence_s else "off")
            self.fence_s, self.unknown_timeout_s = fence_s, unknown_timeout_s
        if changed or now - self._noted_s >= FENCE_NOTE_EVERY_S:
            self._noted_s = now
            self.notes.put_note(FENCE_NOTE, {
                "fence_s": self.fence_s, "unknown_timeout_s": self.unknown_timeout_s,
                "answered_ms": self.clock.now_ms(), "answered_s": now, "boot": self.boot_id})

    def _load_fence_note(self) -> None:
        """After a restart: the fence as it was, its clock running since the last answer."""
        note = self.notes.get_note(FENCE_NOTE)
        if note is None:
            return
        self.fence_s = float(note.get("fence_s", 0.0))
        self.unknown_timeout_s = float(note.get("unknown_timeout_s", 0.0))
        now = self.clock.monotonic_s()
        if self.boot_id and note.get("boot") == self.boot_id and "answered_s" in note:
            since_s = max(0.0, now - float(note["answered_s"]))  # same boot: no wall-clock jump counts
        else:
            since_s = max(0.0, (self.clock.now_ms() - int(note.get("answered_ms", 0))) / 1000)
        self._answered_s = now - since_s
        # A restart past fence_s has not fenced yet: let it try to join first (its jobs may be
        # UNKWN, not lost), as long as the kill still ends before the leader can give up.
        latest = self._answered_s + self.unknown_timeout_s - self.kill_grace_s - 1.0
        self._fence_from_s = min(now + RESTART_JOIN_S, latest)

    def fence_grace_s(self) -> float:
        """TERM to KILL for a fenced job: the configured grace, unless that would outlast the leader."""
        if self.fence_s + self.kill_grace_s >= self.unknown_timeout_s:
            return 0.0
        return self.kill_grace_s

    def check_fence(self) -> list[Key]:
        """Past fence_s without an answer: kill the rerunnable jobs (the ones newly fenced)."""
        now = self.clock.monotonic_s()
        unanswered = now - self._answered_s
        if not self.fence_s or unanswered < self.fence_s or now < self._fence_from_s:
            return []
        fenced = self.jobs.fence(self.fence_grace_s())
        if fenced:
            log.warning("worker %s: no heartbeat answered by a leader for %.1f s (fence_s %.1f): killed "
                        "rerunnable jobs %s, to be requeued", self.host.name, unanswered, self.fence_s,
                        ", ".join(f"{j}.{a}" for j, a in fenced))
        return fenced


def _described(message: api.ControllerMessage) -> str:
    kind = message.WhichOneof("body") or "empty"
    body = getattr(message, kind, None) if kind != "empty" else None
    job = getattr(body, "job", None)
    job_id = job.id if isinstance(job, api.Job) else getattr(body, "job_id", "")
    return f"{kind} {job_id}".strip()
