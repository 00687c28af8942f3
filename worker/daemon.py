"""`xce worker`: join the cluster through any replica, heartbeat, reconnect forever.

Theory of operation. The worker opens the WorkerService.Connect stream to the
replica it believes leads and sends `join` with its host (name, slots,
memory, resources, tags). The leader commits the join, which sets the host
OK and bumps its generation, and answers `joined` with that generation and
the heartbeat period it wants; the worker then heartbeats with that
generation until the stream ends. A follower refuses the stream with the
leader's address, which the worker follows at once; any other failure (the
leader died, no leader yet) moves it to the next replica after a capped,
jittered exponential backoff, started afresh after any session that had
joined. A replica that knows no leader holds the stream until it does (the
controller's Replica.leader_settled), so a worker that reconnects during an
election hears of the new leader when that replica does. It never gives up
(H1): every reconnect is a new join, so the leader knows the host is back
and which connection is current.

The worker-side fence (Nomad's stop_after_client_disconnect): the leader
says in `joined` how long a worker may go without a heartbeat answered by a
serving leader (`fence_s`, from `[hosts] fence_s`; default half of
`unknown_timeout_s`). Past it, cut off or not connected at all, the worker
kills its rerunnable jobs (TERM, KILL after `kill_grace_s`) and reports
them `fenced`, so the leader requeues them; it does so before the leader
gives up on the host (UNAVAIL, then `unknown_timeout_s`) and requeues them
itself, so no job runs twice even if the host is only cut off. The fence's
clock (the last answer, as wall time) and settings are kept in the journal,
so a worker restarted while cut off does not start the clock afresh.

Over the same stream the leader sends RunJob and SignalJob (only for
committed state); the executor runs them and produces reports (started,
finished, dispatch failed), which the worker keeps and re-sends on every
connection until the leader acknowledges them (H4). After a reconnect it
also re-reports every instance still running, so the new leader learns what
runs here.

What one connection means (`opening`, `receive`, `heartbeat`, `closed`) is
kept apart from the gRPC loop that drives it, so the protocol simulation
drives the same methods over its simulated network.
"""

from __future__ import annotations

import logging
import queue
import random
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry, Gauge

from worker import launch_socket
from worker.config import WorkerConfig, WorkerConfigError, load
from worker.executor import Executor
from worker.host_load import LoadMeter
from worker.journal import JournalStore
from worker.process_host import ProcessHost
from xce import daemon_logging, sd_notify, worker_wire
from xce.clock import REAL_CLOCK, Clock
from xce.grpc_transport import channel_options, leader_hint
from xce.metrics import serve as serve_metrics
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

INITIAL_BACKOFF_S = 0.05
# Heartbeat periods without a word from the leader (it answers each one): the
# stream is dead. Not less than MIN_SILENCE_S, so a busy leader is not taken for a dead one.
SILENT_PERIODS = 3
MIN_SILENCE_S = 2.0
# Thousands of workers: their heartbeats notice a silent leader, so their pings are rare.
WORKER_KEEPALIVE_MS = 10_000
JOIN_TIMEOUT_S = 5.0  # a join is one commit: far less than this unless the replica is unreachable
MAX_BACKOFF_S = 2.0  # a failover takes about a second: do not sleep through it
MAX_FAILURES_KEPT = 100
FENCE_NOTE = "fence"  # the journal note: fence_s, unknown_timeout_s, the last answer's wall time
FENCE_NOTE_EVERY_S = 1.0  # how often the last answer's time is written down
RESTART_JOIN_S = 2 * JOIN_TIMEOUT_S  # after a restart, the fence waits this long for a join

Send = Callable[[api.WorkerMessage], None]


class Worker:
    def __init__(self, config: WorkerConfig, rng: random.Random | None = None, clock: Clock = REAL_CLOCK,
                 host: ProcessHost | None = None, journal: JournalStore | None = None,
                 draining: Callable[[], bool] | None = None,
                 load: Callable[[float], dict[str, float]] | None = None) -> None:
        """`load`: the host's load indices at a monotonic time (default: measured, host_load.py)."""
        self.config = config
        self.generation = 0
        self.joined = False
        self.clock = clock
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._target = config.controllers[0]
        self._call: grpc.Call | None = None
        self._lock = threading.Lock()
        self._readers = threading.BoundedSemaphore(4)  # output reads at once (the rest time out)
        self._unacked: dict[tuple[int, int, str], api.JobReport] = {}
        self._send: Send | None = None  # the joined connection's, while there is one
        self._heard = 0.0  # when the leader last said anything on the current stream
        self.failures: list[str] = []  # commands that raised (the last MAX_FAILURES_KEPT)
        self.launch_socket = config.spool_dir / launch_socket.SOCKET_NAME
        self._load = load or LoadMeter().sample
        self.executor = Executor(config.spool_dir, config.kill_grace_s, self._report,
                                 draining or (lambda: config.draining), config.journal_keep, host=host,
                                 clock=clock, journal=journal, allow_root_jobs=config.allow_root_jobs,
                                 name=config.host.name, tell=self._tell,
                                 job_env={"XCE_LAUNCH_SOCKET": str(self.launch_socket)},
                                 gpus=int(config.host.resources.get("gpu", 0)))
        self.launches: launch_socket.LaunchServer | None = None  # `xce launch` in jobs here (run())
        self.fence_s = 0.0  # 0: no fence (the leader's word, in `joined`)
        self.unknown_timeout_s = 0.0
        self._answered_s = clock.monotonic_s()  # when a serving leader last answered
        self._fence_from_s = float("-inf")  # after a restart: not before it had a chance to join
        self._noted_s = float("-inf")
        self._load_fence_note()

    # -------------------------------------------------------------- one connection, without I/O

    def opening(self) -> api.WorkerMessage:
        """The first message of a new stream: the host, and every instance it runs (a cluster that
        was restored or forced from a survivor may have forgotten some: controller/fsm/recovery.py)."""
        self.joined = False
        join = api.HostSpec()
        join.CopyFrom(self.config.host)
        join.running.extend(api.InstanceKey(job_id=j, attempt=a)
                            for j, a in sorted(self.executor.running(parts=False)))
        join.capabilities.append("parts")  # it keeps the parts of parallel jobs (worker/tasks.py)
        join.capabilities.append("output")  # it reads a job's output for the leader (OutputRequest)
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
                log.info("worker %s: joined, generation %d", self.config.host.name, self.generation)
                self._answered(message.joined.fence_s, message.joined.unknown_timeout_s)
                self._resend(send)
            elif self.joined:
                if kind == "heartbeat" and message.heartbeat.generation == self.generation:
                    self._answered(message.heartbeat.fence_s, message.heartbeat.unknown_timeout_s)
                self._on_message(message)
        return joined_now

    # -------------------------------------------------------------- the fence

    def _answered(self, fence_s: float, unknown_timeout_s: float) -> None:
        """A serving leader answered (a join, or a heartbeat of this generation), saying the fence."""
        now = self.clock.monotonic_s()
        self._answered_s = now
        self._fence_from_s = float("-inf")
        changed = (fence_s, unknown_timeout_s) != (self.fence_s, self.unknown_timeout_s)
        if changed:
            if fence_s and fence_s + self.config.kill_grace_s >= unknown_timeout_s:
                log.error("worker %s: fence_s %.1f + kill_grace_s %.1f is not below the cluster's "
                          "unknown_timeout_s %.1f: fenced jobs get SIGKILL at once", self.config.host.name,
                          fence_s, self.config.kill_grace_s, unknown_timeout_s)
            log.info("worker %s: the fence is %s", self.config.host.name,
                     f"{fence_s:g} s" if fence_s else "off")
            self.fence_s, self.unknown_timeout_s = fence_s, unknown_timeout_s
        if changed or now - self._noted_s >= FENCE_NOTE_EVERY_S:
            self._noted_s = now
            self.executor.journal.put_note(FENCE_NOTE, {
                "fence_s": self.fence_s, "unknown_timeout_s": self.unknown_timeout_s,
                "answered_ms": self.clock.now_ms()})

    def _load_fence_note(self) -> None:
        """After a restart: the fence as it was, its clock running since the last answer."""
        note = self.executor.journal.get_note(FENCE_NOTE)
        if note is None:
            return
        self.fence_s = float(note.get("fence_s", 0.0))
        self.unknown_timeout_s = float(note.get("unknown_timeout_s", 0.0))
        since_s = max(0.0, (self.clock.now_ms() - int(note.get("answered_ms", 0))) / 1000)
        now = self.clock.monotonic_s()
        self._answered_s = now - since_s
        # A restart past fence_s has not fenced yet: let it try to join first (its jobs may be
        # UNKWN, not lost), as long as the kill still ends before the leader can give up.
        latest = self._answered_s + self.unknown_timeout_s - self.config.kill_grace_s - 1.0
        self._fence_from_s = min(now + RESTART_JOIN_S, latest)

    def fence_grace_s(self) -> float:
        """TERM to KILL for a fenced job: the configured grace, unless that would outlast the leader."""
        if self.fence_s + self.config.kill_grace_s >= self.unknown_timeout_s:
            return 0.0
        return self.config.kill_grace_s

    def check_fence(self) -> list[tuple[int, int]]:
        """Past fence_s without an answer: kill the rerunnable jobs (the ones newly fenced)."""
        now = self.clock.monotonic_s()
        unanswered = now - self._answered_s
        if not self.fence_s or unanswered < self.fence_s or now < self._fence_from_s:
            return []
        fenced = self.executor.fence(self.fence_grace_s())
        if fenced:
            log.warning("worker %s: no heartbeat answered by a leader for %.1f s (fence_s %.1f): killed "
                        "rerunnable jobs %s, to be requeued", self.config.host.name, unanswered, self.fence_s,
                        ", ".join(f"{j}.{a}" for j, a in fenced))
        return fenced

    def heartbeat(self) -> api.WorkerMessage:
        """With the host's load indices (the planner's select[r1m < 2])."""
        return api.WorkerMessage(heartbeat=api.Heartbeat(generation=self.generation,
                                                          load=self._load(self.clock.monotonic_s())))

    def silent_s(self) -> float:
        """How long the leader has said nothing on the current stream."""
        return self.clock.monotonic_s() - self._heard

    def closed(self, send: Send | None) -> None:
        """The stream ended: no connection to send reports on until the next join."""
        with self._lock:
            if send is None or self._send == send:  # bound methods are equal, not identical
                self._send = None
        self.joined = False

    def _report(self, report: api.JobReport) -> None:
        """Keep it until acknowledged; send it now if connected (any thread)."""
        with self._lock:
            self._unacked[(report.job_id, report.attempt, report.WhichOneof("body") or "")] = report
            send = self._send
        if send is not None:
            send(api.WorkerMessage(report=report))

    def _on_message(self, message: api.ControllerMessage) -> None:
        try:
            self._handle(message)
        except Exception as exc:  # noqa: BLE001 - one bad command must not take the worker down
            # Its kind and job, not the message: a RunJob or launch carries the environment and credential.
            what = _described(message)
            log.exception("worker %s: command failed: %s", self.config.host.name, what)
            self.failures = [*self.failures[-(MAX_FAILURES_KEPT - 1):], f"{what}: {exc!r}"]

    def _handle(self, message: api.ControllerMessage) -> None:
        kind = message.WhichOneof("body")
        if kind == "run":
            self.executor.run(message.run.job, message.run.credential)
        elif kind == "launch":
            self._tell(self.executor.tasks.launch(message.launch))
        elif kind == "task":
            if self.launches is not None:
                self.launches.deliver(message.task)
        elif kind == "signal":
            signal_ = message.signal
            if signal_.kind == api.SIGNAL_CHECKPOINT:
                key = (signal_.job_id, signal_.attempt)
                self.executor.checkpoint(key, signal_.signal, signal_.checkpoint)
            else:
                self.executor.signal((signal_.job_id, signal_.attempt), signal_.kind, signal_.preempted)
        elif kind == "output":
            # Read aside: a job's file may sit on a file system that hangs (its owner chose the
            # path); the stream's own messages, heartbeats first, must not wait for it.
            # Answered on the connection it was asked on, or not at all: a request number is that
            # leader's, and another leader's request may carry the same.
            with self._lock:
                asked_on = self._send
            if asked_on is not None and self._readers.acquire(blocking=False):
                threading.Thread(target=self._read_output, args=(message.output, asked_on),
                                 daemon=True).start()
        elif kind == "ack":
            ack = message.ack
            with self._lock:
                self._unacked.pop((ack.job_id, ack.attempt, ack.kind), None)
            self.executor.acknowledged((ack.job_id, ack.attempt), ack.kind)

    def _read_output(self, asked: api.OutputRequest, asked_on: Send) -> None:
        try:
            answer = self.executor.output_tail(asked.job, asked.stderr, asked.tail_bytes)
        except Exception as exc:  # noqa: BLE001 - answered, so the caller is not left waiting
            answer = api.OutputAnswer(error=f"{type(exc).__name__}: {exc}")
        finally:
            self._readers.release()
        answer.request = asked.request
        with self._lock:
            same = self._send == asked_on  # bound methods are equal, not identical
        if same:
            asked_on(api.WorkerMessage(output=answer))

    def _resend(self, send: Send) -> None:
        """After a join: everything unacknowledged, and what still runs here."""
        for key in self.executor.running():
            self.executor.rereport(key)
        with self._lock:
            self._send = send
            pending = list(self._unacked.values())
        for report in pending:
            send(api.WorkerMessage(report=report))
        for launch in self.launches.pending() if self.launches is not None else ():
            send(api.WorkerMessage(launch=launch))

    def _tell(self, state: api.TaskState) -> None:
        """What became of a task, to the leader (which passes it to the host that asked); not kept:
        a launch asked again is answered from the journal."""
        with self._lock:
            send = self._send
        if send is not None:
            send(api.WorkerMessage(task=state))

    def _forward(self, launch: api.LaunchTask) -> bool:
        with self._lock:
            send = self._send
        if send is None:
            return False  # sent when it joins again
        send(api.WorkerMessage(launch=launch))
        return True

    # -------------------------------------------------------------- the gRPC loop

    def stop(self) -> None:
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()

    def run(self) -> None:
        self.executor.recover()
        try:
            self.launches = launch_socket.LaunchServer(self.launch_socket, self.executor.launch_check,
                                                       self._forward)
        except OSError as exc:  # jobs here cannot launch tasks; the rest works
            log.warning("worker %s: no launch socket %s: %s", self.config.host.name, self.launch_socket, exc)
        sd_notify.notify("READY=1", f"STATUS=host {self.config.host.name}: joining via "
                         f"{','.join(self.config.controllers)}")
        fence = threading.Thread(target=self._fence_loop, daemon=True)
        fence.start()
        threading.Thread(target=self._monitor_loop, daemon=True, name="monitor").start()
        try:
            self._connect_forever()
        finally:
            self._stop.set()
            fence.join()
            if self.launches is not None:
                self.launches.close()
            self.executor.close()

    def _monitor_loop(self) -> None:
        """Jobs' memory against their limits every memory_poll_s; their usage every usage_report_s."""
        reported = self.clock.monotonic_s()
        while not self._stop.wait(self.config.memory_poll_s):
            now = self.clock.monotonic_s()
            report = now - reported >= self.config.usage_report_s
            if report:
                reported = now
            try:
                self.executor.monitor(report_usage=report)
            except Exception:  # noqa: BLE001 - a look that failed must not stop the next ones
                log.exception("worker %s: looking at jobs' usage failed", self.config.host.name)

    def _fence_loop(self) -> None:
        while not self._stop.wait(max(0.05, min(1.0, (self.fence_s or 10.0) / 20))):
            self.check_fence()

    def _connect_forever(self) -> None:
        backoff = INITIAL_BACKOFF_S
        while not self._stop.is_set():
            target = self._target
            joined = threading.Event()
            error: grpc.RpcError | None = None
            try:
                self._session(target, joined)
            except grpc.RpcError as exc:
                error = exc
            if joined.is_set():
                # It had joined, so whatever failed before is over: the leader that served it is gone
                # now (killed, say), which a stream mostly ends with an error, and the next one is a
                # fresh start rather than one more failure in a row.
                backoff = INITIAL_BACKOFF_S
            if error is not None:
                leader = leader_hint(error)
                if leader and leader != target:
                    self._target = leader
                    continue
                self._target = self._next(target)
                log.info("worker %s: %s from %s: %s", self.config.host.name, error.code().name, target,
                         error.details())
            self._stop.wait(backoff * (0.5 + self._rng.random()))
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _session(self, target: str, joined_event: threading.Event) -> None:
        """One stream: join (setting joined_event), heartbeat until it ends."""
        outgoing: queue.Queue[api.WorkerMessage | None] = queue.Queue()
        outgoing.put(self.opening())
        ended = threading.Event()
        with self.config.credentials.channel(target, channel_options(WORKER_KEEPALIVE_MS)) as channel:
            connect = channel.stream_stream("/xce.v1.WorkerService/Connect",
                                            request_serializer=api.WorkerMessage.SerializeToString,
                                            response_deserializer=api.ControllerMessage.FromString)
            call = connect(_drain(outgoing), metadata=self.config.credentials.metadata())
            self._call = call
            self._heard = self.clock.monotonic_s()
            # Not joined within JOIN_TIMEOUT_S (say, a replica cut off by a partition,
            # where connecting alone can hang for 20 s): give up on it, try the next.
            join_timer = threading.Timer(JOIN_TIMEOUT_S, lambda: joined_event.is_set() or call.cancel())
            join_timer.daemon = True
            join_timer.start()
            try:
                if self._stop.is_set():
                    return
                for frame in call:
                    if self.receive(frame, outgoing.put):
                        joined_event.set()
                        log.info("worker %s: joined via %s", self.config.host.name, target)
                        threading.Thread(target=self._heartbeat, daemon=True,
                                         args=(outgoing, ended, max(0.05, self._heartbeat_s(frame)),
                                               call)).start()
            finally:
                self.closed(outgoing.put)
                join_timer.cancel()
                ended.set()
                outgoing.put(None)
                call.cancel()
                self._call = None

    @staticmethod
    def _heartbeat_s(frame: api.ControllerMessage) -> float:
        joined = [m.joined for m in worker_wire.controller_messages(frame) if m.HasField("joined")]
        return joined[0].heartbeat_s if joined else 2.0

    def _heartbeat(self, outgoing: queue.Queue[api.WorkerMessage | None], ended: threading.Event,
                   period_s: float, call: grpc.Call) -> None:
        while not ended.wait(period_s):
            if self.silent_s() > max(SILENT_PERIODS * period_s, MIN_SILENCE_S):
                # The leader answers every heartbeat: this one is cut off or gone
                # without closing the stream (a partition). Find the current one.
                log.info("worker %s: no word from the leader for %.1f s; reconnecting", self.config.host.name,
                         self.silent_s())
                call.cancel()
                return
            outgoing.put(self.heartbeat())

    def _next(self, address: str) -> str:
        addresses = self.config.controllers
        if address not in addresses:
            return addresses[0]
        return addresses[(addresses.index(address) + 1) % len(addresses)]


def _described(message: api.ControllerMessage) -> str:
    kind = message.WhichOneof("body") or "empty"
    body = getattr(message, kind, None) if kind != "empty" else None
    job = getattr(body, "job", None)
    job_id = job.id if isinstance(job, api.Job) else getattr(body, "job_id", "")
    return f"{kind} {job_id}".strip()


def _drain(outgoing: queue.Queue[api.WorkerMessage | None]) -> Iterator[api.WorkerMessage]:
    """What is queued, reports that queued up together sent as one message."""
    while True:
        message = outgoing.get()
        if message is None:
            return
        batch = [message]
        while len(batch) < worker_wire.MAX_PER_FRAME:
            try:
                queued = outgoing.get_nowait()
            except queue.Empty:
                break
            if queued is None:
                yield from worker_wire.worker_frames(batch)
                return
            batch.append(queued)
        yield from worker_wire.worker_frames(batch)



def worker_registry(worker: Worker) -> CollectorRegistry:
    """The worker's Prometheus metrics, read when scraped."""
    registry = CollectorRegistry()
    Gauge("xce_worker_connected", "1 while joined to a leader", registry=registry).set_function(
        lambda: float(worker.joined))
    Gauge("xce_worker_running_jobs", "Job instances running on this host", registry=registry).set_function(
        lambda: float(len(worker.executor.running())))
    Gauge("xce_worker_reports_unacked", "Reports the leader has not acknowledged yet",
          registry=registry).set_function(lambda: float(len(worker._unacked)))  # noqa: SLF001
    return registry


def run(config_path: Path, name: str | None = None) -> int:
    try:
        config = load(config_path, name)
    except WorkerConfigError as exc:
        print(f"xce worker: {exc}", file=sys.stderr)
        return 2
    daemon_logging.setup(f"worker-{config.host.name}")
    worker = Worker(config)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop())
    log.info("worker %s: %d slots, controllers %s", config.host.name, config.host.slots,
             ",".join(config.controllers))
    if config.metrics:
        serve_metrics(config.metrics, worker_registry(worker))
    worker.run()
    return 0
