"""Simulated hosts: the real worker protocol over real gRPC, without forking jobs.

One process runs many hosts on one asyncio loop. Each host is the worker's
own protocol object (worker/session.py's WorkerSession: join, heartbeat
with its generation, reports kept and re-sent until acknowledged, a re-report
of what still runs after every join, the leader's commands), driven here
over an asyncio gRPC stream as worker/daemon.py drives it over a threaded
one: follow the leader hint, reconnect forever. Its jobs are `SleepingJobs`:
a job "runs" for its declared duration (the number after `sleep` in its
command, 0 otherwise) on the event loop, a repeated RunJob is answered with
its reports again, and a KILL ends it.

For the benchmark it records, per (job, attempt), when its RunJob first
arrived (wall clock) and from which replica, and writes a progress file every half second and the
full record on SIGTERM:
  python bench/fleet_sim.py OUT.json ADDRESSES FIRST COUNT SLOTS CLUSTER TOKENS [JOINS_PER_S [ATTRS]]
(CLUSTER: the cluster file, for its TLS files; TOKENS: a JSON file of each host's worker token, since
a simulated host has no certificate of its own: it proves its name with a token of role worker;
JOINS_PER_S: the hosts first connect at this rate, not all at once; ATTRS 1: each host joins with
attributes for requirements, `described`, and heartbeats with load indices)
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.credentials import Credentials, for_cluster  # noqa: E402
from client.grpc_transport import channel_options, leader_hint  # noqa: E402
from client.leader_route import LeaderRoute  # noqa: E402
from worker.daemon import INITIAL_BACKOFF_S, MAX_BACKOFF_S, WORKER_KEEPALIVE_MS  # noqa: E402
from worker.journal import MemoryJournal  # noqa: E402
from worker.session import WorkerSession  # noqa: E402
from xce import worker_wire  # noqa: E402
from xce.clock import REAL_CLOCK  # noqa: E402
from xce.start_held import holds_start  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

Key = tuple[int, int]
CONNECT = "/xce.v1.WorkerService/Connect"


def declared_seconds(job: api.Job) -> float:
    command = list(job.spec.command)
    if len(command) >= 2 and command[0].endswith("sleep"):
        try:
            return max(0.0, float(command[1]))
        except ValueError:
            return 0.0
    return 0.0


def described(spec: api.HostSpec, index: int) -> api.HostSpec:
    """A host for the requirements benchmark: 256 GB, 8 GPUs, half X86_64 and half ARM."""
    spec.memory_mb = 256_000
    spec.ncpus = spec.slots
    spec.tags.append("type=X86_64" if index % 2 == 0 else "type=ARM")
    spec.resources["gpu"] = 8
    return spec


def load_of(index: int, now_s: float) -> dict[str, float]:
    """Load indices that differ between hosts (select[r1m < 8] matches most, order[r1m] ranks them)
    and move every 20 s, so that the leader commits each host's every load_commit_s (15 s) as it
    would on a live cluster."""
    step = int(now_s // 20)
    return {"r15s": float((index + step) % 11), "r1m": ((index + step) % 97) / 10, "r15m": 1.0,
            "ut": ((index + step) % 10) / 10, "mem": 200_000.0, "tmp": 50_000.0, "swp": 0.0}


class SleepingJobs:
    """The jobs of a simulated host (worker/session.py's HostJobs): each sleeps on the event loop."""

    def __init__(self, fleet: Fleet, source: Callable[[], str]) -> None:
        self.fleet = fleet
        self.source = source  # the replica the host is connected to (the benchmark's record)
        self.report: Callable[[api.JobReport], None] = lambda report: None  # the session's
        self._running: dict[Key, asyncio.TimerHandle] = {}
        self._started: dict[Key, api.JobReport] = {}
        self._ended: dict[Key, api.JobReport] = {}

    def run(self, job: api.Job, credential: str = "") -> None:
        key = (job.id, job.attempt)
        if key in self._ended:  # a repeat: say again how it ended
            self.report(self._ended[key])
        elif key in self._running:
            if not holds_start(job, self._started[key].started):
                self.report(self._again(key))
        else:
            self.fleet.first_run(key, self.source())
            self._started[key] = api.JobReport(job_id=key[0], attempt=key[1], started=api.JobStarted(
                pid=1, time_ms=int(time.time() * 1000)))
            self.report(self._started[key])
            self._running[key] = asyncio.get_running_loop().call_later(
                declared_seconds(job), self._finish, key, 0)

    def signal(self, key: Key, kind: api.SignalKind, preempted: bool = False) -> None:
        handle = self._running.get(key)
        if kind == api.SIGNAL_KILL and handle is not None:
            handle.cancel()
            self._finish(key, signal.SIGKILL)

    def checkpoint(self, key: Key, sig: int, number: int) -> None:
        pass  # a sleep has nothing to save

    def acknowledged(self, key: Key, kind: str) -> None:
        if kind != "started":
            self._ended.pop(key, None)

    def running(self, parts: bool = True) -> list[Key]:
        return list(self._running)

    def rereport(self, key: Key, acknowledged_too: bool = False) -> None:
        if key in self._running:
            self.report(self._again(key))

    def _again(self, key: Key) -> api.JobReport:
        """The instance's start, said again (as worker/executor.py's rereport marks it)."""
        report = api.JobReport()
        report.CopyFrom(self._started[key])
        report.started.again = True
        return report

    def fence(self, grace_s: float) -> list[Key]:
        return []  # the fleet's hosts are never cut off from the cluster

    def launch(self, request: api.LaunchTask) -> api.TaskState:
        return api.TaskState(job_id=request.job_id, attempt=request.attempt, task_id=request.task_id,
                             phase=api.TASK_REFUSED, reason="a simulated host runs no tasks")

    def _finish(self, key: Key, term_signal: int) -> None:
        self._running.pop(key, None)
        self._started.pop(key, None)
        report = api.JobReport(job_id=key[0], attempt=key[1], finished=api.JobFinished(
            exit_code=0, term_signal=term_signal, time_ms=int(time.time() * 1000)))
        self._ended[key] = report
        self.report(report)


class SimHost:
    def __init__(self, name: str, slots: int, fleet: Fleet, target: str, index: int = 0,
                 attributes: bool = False) -> None:
        self.fleet = fleet
        self.joined = False  # the current stream had joined (its end is then a fresh start)
        self.route = LeaderRoute(fleet.addresses, fleet.rng, MAX_BACKOFF_S, INITIAL_BACKOFF_S)
        self.route.target = target  # the hosts start spread over the replicas
        spec = api.HostSpec(name=name, slots=slots)
        jobs = SleepingJobs(fleet, lambda: self.route.target)

        def load(now_s: float) -> dict[str, float]:
            return load_of(index, time.time()) if attributes else {}

        self.session = WorkerSession(described(spec, index) if attributes else spec, jobs, MemoryJournal(),
                                     REAL_CLOCK, kill_grace_s=0.0, load=load,
                                     capabilities=())  # no parts of parallel jobs, no output to read
        jobs.report = self.session.report

    async def run_forever(self, start_s: float = 0.0) -> None:
        """Reconnect forever, along the route every client follows (client/leader_route.py)."""
        await asyncio.sleep(start_s)
        route = self.route
        while True:
            target = route.target
            self.joined = False
            error: grpc.aio.AioRpcError | None = None
            try:
                await self._session(target)
            except grpc.aio.AioRpcError as exc:
                error = exc
            if self.joined:  # as worker/daemon.py: a stream that had joined ends a fresh start
                route.reset()
            if error is not None:
                leader = leader_hint(error)
                if leader and leader != target and route.redirected(target, leader):
                    continue
                route.failed(target)
            await asyncio.sleep(route.pause_s())

    async def _session(self, target: str) -> None:
        """One stream: join (setting `joined`), heartbeat until it ends."""
        outbox: asyncio.Queue[api.WorkerMessage | None] = asyncio.Queue()
        outbox.put_nowait(self.session.opening())
        token = self.fleet.tokens[self.session.host.name]
        call = self.fleet.channel(target).stream_stream(
            CONNECT, request_serializer=api.WorkerMessage.SerializeToString,
            response_deserializer=api.ControllerMessage.FromString)(
                _drain(outbox), metadata=(("authorization", f"Bearer {token}"),))
        heartbeat: asyncio.Task[None] | None = None
        try:
            async for frame in call:
                if self.session.receive(frame, outbox.put_nowait):
                    self.joined = True
                    self.fleet.joins.append((time.time(), target))
                    heartbeat = asyncio.get_running_loop().create_task(
                        self._heartbeat(outbox, max(0.05, self.session.heartbeat_s)))
        finally:
            self.session.closed(outbox.put_nowait)
            if heartbeat is not None:
                heartbeat.cancel()
            outbox.put_nowait(None)
            call.cancel()

    async def _heartbeat(self, outbox: asyncio.Queue[api.WorkerMessage | None], period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            outbox.put_nowait(self.session.heartbeat())


async def _drain(outbox: asyncio.Queue[api.WorkerMessage | None]) -> AsyncIterator[api.WorkerMessage]:
    while (message := await outbox.get()) is not None:
        batch = [message]
        while not outbox.empty() and len(batch) < worker_wire.MAX_PER_FRAME:
            if (queued := outbox.get_nowait()) is None:
                for frame in worker_wire.worker_frames(batch):
                    yield frame
                return
            batch.append(queued)
        for frame in worker_wire.worker_frames(batch):
            yield frame


class Fleet:
    def __init__(self, addresses: list[str], credentials: Credentials, tokens: dict[str, str]) -> None:
        self.addresses = addresses
        self.credentials = credentials
        self.tokens = tokens
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.rng = random.Random()  # the hosts' backoff jitter
        self.first_seen: dict[Key, tuple[float, str]] = {}  # when, and from which replica
        self.joins: list[tuple[float, str]] = []  # each join of a host: when, to which replica

    def channel(self, target: str) -> grpc.aio.Channel:
        if target not in self._channels:
            self._channels[target] = self.credentials.aio_channel(target,
                                                                  channel_options(WORKER_KEEPALIVE_MS))
        return self._channels[target]

    def first_run(self, key: Key, source: str) -> None:
        self.first_seen.setdefault(key, (time.time(), source))


async def main(out: Path, addresses: list[str], first: int, count: int, slots: int, cluster: Path,
               tokens: Path, joins_per_s: float = 0.0, attributes: bool = False) -> None:
    fleet = Fleet(addresses, for_cluster(cluster, use_token_search=False), json.loads(tokens.read_text()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    hosts = [SimHost(f"sim{first + i:05d}", slots, fleet, addresses[i % len(addresses)], first + i,
                     attributes) for i in range(count)]
    tasks = [loop.create_task(host.run_forever(i / joins_per_s if joins_per_s > 0 else 0.0))
             for i, host in enumerate(hosts)]
    progress = out.with_suffix(".progress")
    while not stop.is_set():
        joined = sum(1 for h in hosts if h.session.joined)
        progress.write_text(json.dumps({"runs": len(fleet.first_seen), "joined": joined}))
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            pass
    for task in tasks:
        task.cancel()
    out.write_text(json.dumps({"first_seen": [[t, source, k[0], k[1]]
                                              for k, (t, source) in fleet.first_seen.items()],
                                "joins": fleet.joins}))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]),
                     int(sys.argv[5]), Path(sys.argv[6]), Path(sys.argv[7]),
                     float(sys.argv[8]) if len(sys.argv) > 8 else 0.0, sys.argv[9:10] == ["1"]))
