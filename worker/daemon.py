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

What one stream means (the join, the leader's commands, the reports kept
until acknowledged, the fence) is the sans-I/O session (session.py); this
module drives it over gRPC: the stream, its heartbeat thread, the reconnect
loop, and the threads that watch the fence and the jobs' usage.
"""

from __future__ import annotations

import dataclasses
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

from client.grpc_transport import channel_options, leader_hint
from client.leader_route import LeaderRoute
from worker import launch_socket
from worker.config import WorkerConfig, WorkerConfigError, load
from worker.executor import Executor
from worker.host_load import LoadMeter
from worker.journal import JournalStore
from worker.process_host import ProcessHost
from worker.session import WorkerSession
from xce import daemon_logging, lsf_bin, sd_notify, worker_wire
from xce.clock import REAL_CLOCK, Clock, boot_id
from xce.clock_jumps import ClockJumps
from xce.metrics import daemon_registry
from xce.metrics import serve as serve_metrics
from xce.metrics import split as split_metrics
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
OUTPUT_READERS = 4  # output reads at once (the rest time out)


def _lsf_bindir() -> dict[str, str]:
    """LSF_BINDIR for every job here (LSF's own jobs have it: `$LSF_BINDIR/blaunch`), the LSF
    commands' directory made if it is not (xce/lsf_bin.py); none if it cannot be."""
    try:
        return {"LSF_BINDIR": lsf_bin.ensure()}
    except OSError as exc:
        log.warning("no LSF_BINDIR for jobs: cannot make the LSF commands' directory: %s", exc)
        return {}


class Worker:
    def __init__(self, config: WorkerConfig, rng: random.Random | None = None, clock: Clock = REAL_CLOCK,
                 host: ProcessHost | None = None, journal: JournalStore | None = None,
                 draining: Callable[[], bool] | None = None,
                 load: Callable[[float], dict[str, float]] | None = None) -> None:
        """`load`: the host's load indices at a monotonic time (default: measured, host_load.py)."""
        self.config = config
        self.clock = clock
        self._stop = threading.Event()
        self._route = LeaderRoute(config.controllers, rng or random.Random(), MAX_BACKOFF_S,
                                  INITIAL_BACKOFF_S)
        self._call: grpc.Call | None = None
        self._readers = threading.BoundedSemaphore(OUTPUT_READERS)
        self.launch_socket = config.spool_dir / launch_socket.SOCKET_NAME
        self.executor = Executor(config.spool_dir, config.kill_grace_s,
                                 lambda report: self.session.report(report),
                                 draining or (lambda: config.draining), config.journal_keep, host=host,
                                 clock=clock, journal=journal, allow_root_jobs=config.allow_root_jobs,
                                 name=config.host.name, tell=lambda state: self.session.tell(state),
                                 job_env={"XCE_LAUNCH_SOCKET": str(self.launch_socket), **_lsf_bindir()},
                                 gpus=int(config.host.resources.get("gpu", 0)),
                                 mail_command=config.mail_command)
        joins_as = api.HostSpec()
        joins_as.CopyFrom(config.host)
        joins_as.metrics_address = config.metrics  # said in each join, for Status (never in the host record)
        self.session = WorkerSession(joins_as, self.executor, self.executor.journal, clock,
                                     config.kill_grace_s, load or LoadMeter().sample, boot_id=boot_id())
        self.session.read_output = self._read_output
        self._clock_jumps = ClockJumps()  # said in the log: the times this worker journals moved
        self.launches: launch_socket.LaunchServer | None = None  # `xce launch` in jobs here (run())

    def _read_output(self, asked: api.OutputRequest, answer: Callable[[api.OutputAnswer], None]) -> None:
        """Read aside, in a thread of its own: a job's file may sit on a file system that hangs (its
        owner chose the path); the stream's own messages, heartbeats first, must not wait for it."""
        if self._readers.acquire(blocking=False):
            threading.Thread(target=self._read, args=(asked, answer), daemon=True).start()

    def _read(self, asked: api.OutputRequest, answer: Callable[[api.OutputAnswer], None]) -> None:
        try:
            result = self.executor.output_tail(asked.job, asked.stderr, asked.tail_bytes)
        except Exception as exc:  # noqa: BLE001 - answered, so the caller is not left waiting
            result = api.OutputAnswer(error=f"{type(exc).__name__}: {exc}")
        finally:
            self._readers.release()
        answer(result)

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
                                                       self.session.forward)
            self.session.deliver_task = self.launches.deliver
            self.session.pending_launches = self.launches.pending
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
        while not self._stop.wait(max(0.05, min(1.0, (self.session.fence_s or 10.0) / 20))):
            self.session.check_fence()

    def _connect_forever(self) -> None:
        """Reconnect forever, along the route every client follows (client/leader_route.py)."""
        route = self._route
        while not self._stop.is_set():
            target = route.target
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
                route.reset()
            if error is not None:
                leader = leader_hint(error)
                if leader and leader != target and route.redirected(target, leader):
                    continue
                route.failed(target)
                log.info("worker %s: %s from %s: %s", self.config.host.name, error.code().name, target,
                         error.details())
            self._stop.wait(route.pause_s())

    def _session(self, target: str, joined_event: threading.Event) -> None:
        """One stream: join (setting joined_event), heartbeat until it ends."""
        outgoing: queue.Queue[api.WorkerMessage | None] = queue.Queue()
        outgoing.put(self.session.opening())
        ended = threading.Event()
        with self.config.credentials.channel(target, channel_options(WORKER_KEEPALIVE_MS)) as channel:
            connect = channel.stream_stream("/xce.v1.WorkerService/Connect",
                                            request_serializer=api.WorkerMessage.SerializeToString,
                                            response_deserializer=api.ControllerMessage.FromString)
            call = connect(_drain(outgoing), metadata=self.config.credentials.metadata())
            self._call = call
            # Not joined within JOIN_TIMEOUT_S (say, a replica cut off by a partition,
            # where connecting alone can hang for 20 s): give up on it, try the next.
            join_timer = threading.Timer(JOIN_TIMEOUT_S, lambda: joined_event.is_set() or call.cancel())
            join_timer.daemon = True
            join_timer.start()
            try:
                if self._stop.is_set():
                    return
                for frame in call:
                    if self.session.receive(frame, outgoing.put):
                        joined_event.set()
                        log.info("worker %s: joined via %s", self.config.host.name, target)
                        threading.Thread(target=self._heartbeat, daemon=True,
                                         args=(outgoing, ended, max(0.05, self.session.heartbeat_s),
                                               call)).start()
            finally:
                self.session.closed(outgoing.put)
                join_timer.cancel()
                ended.set()
                outgoing.put(None)
                call.cancel()
                self._call = None

    def _heartbeat(self, outgoing: queue.Queue[api.WorkerMessage | None], ended: threading.Event,
                   period_s: float, call: grpc.Call) -> None:
        while not ended.wait(period_s):
            if self.session.silent_s() > max(SILENT_PERIODS * period_s, MIN_SILENCE_S):
                # The leader answers every heartbeat: this one is cut off or gone
                # without closing the stream (a partition). Find the current one.
                log.info("worker %s: no word from the leader for %.1f s; reconnecting", self.config.host.name,
                         self.session.silent_s())
                call.cancel()
                return
            outgoing.put(self.session.heartbeat())
            clock = self.session.clock
            self._clock_jumps.log_if_moved(log, f"worker {self.config.host.name}", clock.now_ms() / 1000,
                                           clock.monotonic_s())

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
    registry = daemon_registry("worker")
    Gauge("xce_worker_connected", "1 while joined to a leader", registry=registry).set_function(
        lambda: float(worker.session.joined))
    Gauge("xce_worker_running_jobs", "Job instances running on this host", registry=registry).set_function(
        lambda: float(len(worker.executor.running())))
    Gauge("xce_worker_reports_unacked", "Reports the leader has not acknowledged yet",
          registry=registry).set_function(lambda: float(worker.session.unacknowledged()))
    return registry


def run(config_path: Path, name: str | None = None, metrics: str = "") -> int:
    """`metrics`: serve Prometheus metrics there, whatever the file says (the unit's default)."""
    try:
        config = load(config_path, name)
        if metrics:
            split_metrics(metrics)
            config = dataclasses.replace(config, metrics=metrics)
    except ValueError as exc:
        print(f"xce worker: --metrics: {exc}", file=sys.stderr)
        return 2
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
