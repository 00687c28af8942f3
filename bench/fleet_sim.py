"""Simulated hosts: the real worker protocol over real gRPC, without forking jobs.

One process runs many hosts on one asyncio loop. Each host does what
`xce worker` does on the wire (worker/daemon.py): Connect, join, heartbeat
with its generation, follow the leader hint, reconnect forever, report
started and finished for every RunJob, re-send unacknowledged reports and
re-report what still runs after every join, answer a repeated RunJob with
its reports again, and obey KILL. A job "runs" for its declared duration:
the number after `sleep` in its command (0 otherwise).

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
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worker.daemon import WORKER_KEEPALIVE_MS  # noqa: E402
from xce import worker_wire  # noqa: E402
from xce.credentials import Credentials, for_cluster  # noqa: E402
from xce.grpc_transport import channel_options, leader_hint  # noqa: E402
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


@dataclass
class SimHost:
    name: str
    slots: int
    fleet: Fleet
    target: str
    index: int = 0
    attributes: bool = False
    generation: int = 0
    unacked: dict[tuple[int, int, str], api.JobReport] = field(default_factory=dict)
    running: dict[Key, asyncio.TimerHandle] = field(default_factory=dict)
    ended: dict[Key, api.JobReport] = field(default_factory=dict)
    outbox: asyncio.Queue[api.WorkerMessage | None] | None = None

    async def run_forever(self, start_s: float = 0.0) -> None:
        await asyncio.sleep(start_s)
        backoff = 0.05
        while True:
            try:
                if await self._session():
                    backoff = 0.05
            except grpc.aio.AioRpcError as exc:
                leader = leader_hint(exc)
                if leader and leader != self.target:
                    self.target = leader
                    continue
                addresses = self.fleet.addresses
                self.target = addresses[(addresses.index(self.target) + 1) % len(addresses)] \
                    if self.target in addresses else addresses[0]
            await asyncio.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, 2.0)

    async def _session(self) -> bool:
        outbox: asyncio.Queue[api.WorkerMessage | None] = asyncio.Queue()
        spec = api.HostSpec(name=self.name, slots=self.slots)
        outbox.put_nowait(api.WorkerMessage(join=described(spec, self.index) if self.attributes else spec))
        call = self.fleet.channel(self.target).stream_stream(
            CONNECT, request_serializer=api.WorkerMessage.SerializeToString,
            response_deserializer=api.ControllerMessage.FromString)(
                _drain(outbox), metadata=(("authorization", f"Bearer {self.fleet.tokens[self.name]}"),))
        joined = False
        heartbeat: asyncio.Task[None] | None = None
        try:
            async for frame in call:
                for message in worker_wire.controller_messages(frame):
                    if message.WhichOneof("body") == "joined" and not joined:
                        joined = True
                        heartbeat = self._joined(message.joined, outbox)
                    elif joined:
                        self._handle(message)
        finally:
            self.outbox = None
            if heartbeat is not None:
                heartbeat.cancel()
            outbox.put_nowait(None)
            call.cancel()
        return joined

    def _joined(self, joined: api.Joined,
                outbox: asyncio.Queue[api.WorkerMessage | None]) -> asyncio.Task[None]:
        self.generation = joined.generation
        self.outbox = outbox
        for key in list(self.running):  # the new leader learns what runs here
            self._send(api.JobReport(job_id=key[0], attempt=key[1], started=api.JobStarted(pid=1)))
        for report in list(self.unacked.values()):
            outbox.put_nowait(api.WorkerMessage(report=report))
        return asyncio.get_running_loop().create_task(
            self._heartbeat(outbox, self.generation, max(0.05, joined.heartbeat_s)))

    async def _heartbeat(self, outbox: asyncio.Queue[api.WorkerMessage | None], generation: int,
                         period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            load = load_of(self.index, time.time()) if self.attributes else {}
            outbox.put_nowait(api.WorkerMessage(heartbeat=api.Heartbeat(generation=generation, load=load)))

    def _handle(self, message: api.ControllerMessage) -> None:
        kind = message.WhichOneof("body")
        if kind == "run":
            job = message.run.job
            key = (job.id, job.attempt)
            if key in self.ended:  # a repeat: say again how it ended
                self._send(self.ended[key])
            elif key in self.running:
                self._send(api.JobReport(job_id=key[0], attempt=key[1], started=api.JobStarted(pid=1)))
            else:
                self.fleet.first_run(key, self.target)
                self._send(api.JobReport(job_id=key[0], attempt=key[1],
                                         started=api.JobStarted(pid=1, time_ms=int(time.time() * 1000))))
                self.running[key] = asyncio.get_running_loop().call_later(
                    declared_seconds(job), self._finish, key, 0)
        elif kind == "signal" and message.signal.kind == api.SIGNAL_KILL:
            key = (message.signal.job_id, message.signal.attempt)
            handle = self.running.get(key)
            if handle is not None:
                handle.cancel()
                self._finish(key, 9)
        elif kind == "ack":
            ack = message.ack
            self.unacked.pop((ack.job_id, ack.attempt, ack.kind), None)
            if ack.kind != "started":
                self.ended.pop((ack.job_id, ack.attempt), None)

    def _finish(self, key: Key, term_signal: int) -> None:
        self.running.pop(key, None)
        report = api.JobReport(job_id=key[0], attempt=key[1], finished=api.JobFinished(
            exit_code=0, term_signal=term_signal, time_ms=int(time.time() * 1000)))
        self.ended[key] = report
        self._send(report)

    def _send(self, report: api.JobReport) -> None:
        self.unacked[(report.job_id, report.attempt, report.WhichOneof("body") or "")] = report
        if self.outbox is not None:
            self.outbox.put_nowait(api.WorkerMessage(report=report))


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
        self.first_seen: dict[Key, tuple[float, str]] = {}  # when, and from which replica

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
        joined = sum(1 for h in hosts if h.outbox is not None)
        progress.write_text(json.dumps({"runs": len(fleet.first_seen), "joined": joined}))
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            pass
    for task in tasks:
        task.cancel()
    out.write_text(json.dumps({"first_seen": [[t, source, k[0], k[1]]
                                              for k, (t, source) in fleet.first_seen.items()]}))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]),
                     int(sys.argv[5]), Path(sys.argv[6]), Path(sys.argv[7]),
                     float(sys.argv[8]) if len(sys.argv) > 8 else 0.0, sys.argv[9:10] == ["1"]))
