"""One soak run: a real cluster under load and chaos, then a drain and the checks.

Three replicas (each in a network namespace of its own when partitions are
asked for and this machine allows them; else on loopback), two schedulers
(one holds the lease), four workers running real jobs, all real processes.
The load generator (load.py) and the chaos loop (chaos.py) run for the given
duration; then no more faults, no more submits, and a drain until every
acknowledged job has finished. Everything is stopped, the workers' journals
are read, and checks.py gives the verdict. Figures and the verdict go to
OUT/soak.json, OUT/summary.txt and OUT/timeline.png (report.py).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from client.channel import Client, XceError
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from soak import checks, clockfault, diskfull, faultio, peer_cut, report
from soak.chaos import Chaos
from soak.fault_kinds import CLASSIC, CLOCK_KINDS, DISK_KINDS, KINDS, NET_KINDS, clock_control, disk_control
from soak.linear.__main__ import check_history
from soak.linear.history import History
from soak.load import LoadGenerator, load_name
from soak.netns import Net, available, fault_available
from soak.observe import DispatchWatch, LeaderWatch, MemoryWatch
from soak.readers import Readers
from soak.recorded import RecordedClient
from worker.journal import Journal
from xce.v1 import api_pb2 as api

LINEAR_BUDGET_S = 900.0  # the checker's search; past it the verdict is "unknown", which fails the soak
WORKER_SLOTS = {"w1": 8, "w2": 8, "w3": 6, "w4": 4}
WORKER_EXTRA = "kill_grace_s = 1\njournal_keep = 100000000\n[resources]\ngpu = 2\n"  # tables last
WORKER_GPUS = {name: 2 for name in ("w1", "w2", "w3", "w4")}
CLUSTER_EXTRA = """
[hosts]
heartbeat_s = 0.5
heartbeat_timeout_s = 3.0
unknown_timeout_s = 600.0
"""


@dataclass
class SoakConfig:
    duration_s: float = 150.0
    kill_every_s: float = 15.0
    seed: int = 1
    partitions: int = 1
    rate: float = 4.0
    drain_s: float = 300.0
    out: Path = Path("soak-out")
    fault: str = ""  # XCE_FAULT for the controllers: a deliberately broken build (tests)
    faults: tuple[str, ...] = CLASSIC  # the fault kinds chaos injects (fault_kinds.py)
    max_unknown: float | None = None  # fail if more of the history's operations had an unknown outcome


class SoakError(Exception):
    pass


def check_faults(faults: tuple[str, ...]) -> None:
    """Refuse fault kinds unknown, or that this machine cannot inject, before anything starts."""
    unknown = [k for k in faults if k not in KINDS]
    if unknown:
        raise SoakError(f"unknown fault kind(s) {', '.join(unknown)} (known: {', '.join(KINDS)})")
    if "disk-full" in faults and diskfull.available() is not None:
        raise SoakError(f"disk-full: {diskfull.available()}")
    if "netem" in faults and fault_available() is not None:
        raise SoakError(f"netem: {fault_available()}")
    if "peer-cut" in faults and peer_cut.available() is not None:
        raise SoakError(f"peer-cut: {peer_cut.available()}")
    if any(k in CLOCK_KINDS for k in faults) and clockfault.available() is not None:
        raise SoakError(f"clock faults: {clockfault.available()}")
    if any(k in DISK_KINDS for k in faults):
        try:
            faultio.library()
        except faultio.FaultioBuildError as exc:
            raise SoakError(f"disk faults: {exc}") from None


def run(config: SoakConfig) -> dict[str, Any]:
    check_faults(config.faults)
    config.out.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="xce-soak-"))
    net: Net | None = None
    partitions = config.partitions
    mixed = not set(config.faults) <= set(CLASSIC)
    wants_net = bool(partitions) or any(k in config.faults for k in NET_KINDS) if mixed else bool(partitions)
    if wants_net and available() is not None:
        if mixed and any(k in config.faults for k in NET_KINDS):
            raise SoakError(f"{', '.join(k for k in config.faults if k in NET_KINDS)}: {available()}")
        print(f"soak: no partitions ({available()})", flush=True)
        partitions, wants_net = 0, False
    if config.fault:
        os.environ["XCE_FAULT"] = config.fault  # inherited by the controllers this process starts
    try:
        if wants_net:
            net = Net(3)
        return _run(config, data, net, partitions)
    finally:
        os.environ.pop("XCE_FAULT", None)
        if net is not None:
            net.close()
        logs = config.out / "logs"  # kept after a failed run too: what went wrong is in them
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir()
        for path in data.glob("*.log"):
            shutil.copy(path, logs / path.name)
        shutil.rmtree(data, ignore_errors=True)


def _run(config: SoakConfig, data: Path, net: Net | None, partitions: int) -> dict[str, Any]:
    cluster = LocalCluster(data, extra_config=CLUSTER_EXTRA,
                           hosts=net.addresses if net else None,
                           prefix=(lambda rid: net.prefix(rid - 1)) if net else None)
    schedulers, workers = _daemons(config, data, cluster)
    watch = DispatchWatch(cluster.addresses, cluster.credentials)
    leaders = LeaderWatch(cluster.addresses, cluster.credentials)
    memory = MemoryWatch(lambda: {
        **{f"replica-{rid}": p.pid for rid, p in list(cluster.procs.items())},
        **{s.name: s.proc.pid for s in schedulers if s.proc is not None},
        **{f"worker-{n}": p.pid for n, p in list(workers.procs.items())}})
    history = History(config.out / "history.jsonl")
    order: list[int] = []  # the load's acknowledged jobs (load.record.order), for the readers
    readers = Readers(cluster.addresses, cluster.credentials, history, lambda: order, config.seed)
    load = LoadGenerator(cluster.addresses, cluster.credentials, config.rate, config.seed, data / "ticks",
                         history, readers.acknowledged)
    order = load.record.order
    disks = [cluster.config.replica_dir(r.id) for r in cluster.config.replicas] \
        if "disk-full" in config.faults else []
    rounds = max(1, int(config.duration_s // config.kill_every_s)) if config.kill_every_s else 0
    partition_rounds = {rounds * (i + 1) // (partitions + 1) or 1 for i in range(partitions)}
    chaos = Chaos(cluster, schedulers, workers, WORKER_SLOTS, WORKER_EXTRA, net, watch, load.record,
                  config.kill_every_s, partition_rounds, config.seed, config.faults)
    started = time.time()
    drained = False
    try:
        for disk in disks:
            diskfull.mount(disk)
        cluster.start()
        cluster.leader(timeout_s=60)
        for scheduler in schedulers:
            scheduler.start()
        for name, slots in WORKER_SLOTS.items():
            workers.start(name, slots, WORKER_EXTRA)
        for part in (watch, leaders, memory):
            part.start()
        print(f"soak: running {config.duration_s:.0f} s, seed {config.seed}, leader kill every "
              f"{config.kill_every_s:g} s, {partitions} partition(s), {config.rate:g} jobs/s", flush=True)
        load.start()
        readers.start()
        if config.kill_every_s:
            chaos.start()
        time.sleep(config.duration_s)
        if config.kill_every_s:
            chaos.stop()
        load.stop()
        readers.stop()
        load_end = time.time()
        drained = _drain(cluster, set(load.record.acknowledged), config.drain_s)
        drain_s = time.time() - load_end
        _final_reads(cluster, history, load.record.order)
        with Client(cluster.addresses, cluster.credentials, deadline_s=60.0) as client:
            jobs = client.list_jobs()
        final = {j.id: checks.FinalJob(j.id, api.JobState.Name(j.state), j.spec.slots, j.end_time_ms,
                                       tuple(a.host for a in j.allocation) or ((j.host,) if j.host else ()),
                                       j.attempt, j.spec.name, j.request_id)
                 for j in jobs}
        minority = sum(1 for j in jobs if j.spec.name == "soak-minority") \
            + sum(1 for f in chaos.record.failovers if f.minority_write == "ack")
        ended = time.time()
    finally:
        # Each step whatever the others did: a failing one must not leave daemons running (a run
        # stopped early once left its replicas behind when a reader could not be joined).
        steps: list[Callable[[], object]] = [
            chaos.abort,  # no-ops after a normal end; after an error, no restart may race the teardown
            load.abort, readers.stop, *(part.stop for part in (watch, leaders, memory)),
            *(scheduler.kill for scheduler in schedulers), workers.stop, cluster.stop,
            *(functools.partial(diskfull.unmount, disk) for disk in disks)]
        for step in steps:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - said, and the next step still runs
                print(f"soak: teardown: {getattr(step, '__qualname__', step)}: {exc!r}", flush=True)
    instances = _instances(workers)
    stops = {job: (acked, _ticks(data / "ticks" / str(job))) for job, acked in load.record.stops.items()}
    verdict = checks.verdict(load.record.acknowledged, final, instances, WORKER_SLOTS, load.record.kills,
                             stops, memory.samples, int(ended * 1000), host_gpus=WORKER_GPUS,
                             unique_name=load_name)
    verdict.minority_commits = minority
    for job in verdict.stops_not_effective:  # the evidence, for whoever reads the report
        acked, ticks = stops[job]
        (config.out / f"stop-{job}.txt").write_text(
            f"stop acknowledged at {acked / 1000:.2f}\n" + "\n".join(load.record.stop_log.get(job, []))
            + "\nticks:\n" + "\n".join(f"{t:.3f}" for t in ticks) + "\n")
    figures = report.figures(config, started, load_end, drain_s, drained, load.record, chaos.record,
                             watch, final, instances, data)
    history.close()
    ops = history.operations()
    linear = check_history(ops, config.out, "soak history: not linearizable", budget_s=LINEAR_BUDGET_S)
    verdict.linearizable = linear["linearizable"]
    verdict.fault_failures = chaos.record.unexpected_exits + chaos.record.not_recovered
    availability = report.availability(ops)
    verdict.unknown_share, verdict.max_unknown = availability["unknown_share"], config.max_unknown
    result = {"config": {k: str(v) for k, v in asdict(config).items()}, "verdict": verdict.summary(),
              "linearizability": {k: linear[k] for k in ("linearizable", "operations", "partitions",
                                                         "timed_out_partitions", "elapsed_s")}
              | {"violation": linear["failing"][:50]},
              **figures, "fault_kinds": report.fault_figures(chaos.record),
              "availability": availability, "reads": readers.reads,
              # what the per-resource and per-part checks had to look at (none: they proved nothing)
              "parallel_jobs": sum(1 for f in final.values() if len(f.hosts) > 1),
              "parts_journaled": sum(1 for i in instances if i.part),
              "gpu_instances": sum(1 for i in instances if i.gpus)}
    (config.out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    (config.out / "summary.txt").write_text(report.summary(result) + "\n")
    report.timeline(config.out / "timeline.png", started, instances, leaders.samples, chaos.record)
    return result


def _daemons(config: SoakConfig, data: Path,
             cluster: LocalCluster) -> tuple[list[LocalScheduler], LocalWorkers]:
    """The schedulers and workers, and every daemon's environment for the faults chaos injects
    (fault_kinds.py): its own wall clock, and its files under faultio."""
    clocks = any(k in CLOCK_KINDS for k in config.faults)
    disks = any(k in DISK_KINDS for k in config.faults)
    power = "power-loss" in config.faults

    def faulty(process: str, files: Path | None = None) -> dict[str, str]:
        env: dict[str, str] = {}
        if clocks:
            env = clockfault.environment(clock_control(data, process))
        if disks and files is not None:
            more = faultio.environment(disk_control(data, process), [files], power_loss=power)
            preload = ":".join(filter(None, (env.get("LD_PRELOAD", ""), more.pop("LD_PRELOAD", ""))))
            env |= more | {"LD_PRELOAD": preload}
        return env

    schedulers = [LocalScheduler(cluster, name, env=faulty(name)) for name in ("sched-a", "sched-b")]
    workers = LocalWorkers(cluster)
    for replica in cluster.config.replicas:
        cluster.env[replica.id] = faulty(f"replica-{replica.id}", cluster.config.replica_dir(replica.id))
    for name in WORKER_SLOTS:
        workers.env[name] = faulty(f"worker-{name}", workers.spool(name))
    return schedulers, workers


def _final_reads(cluster: LocalCluster, history: History, jobs: list[int]) -> None:
    """Every job the load was told of, read once more after the drain, into the history (Jepsen's
    final reads): a write lost after the readers stopped reading it shows there too."""
    with RecordedClient("final", Client(cluster.addresses, cluster.credentials, deadline_s=30.0),
                        history) as reader:
        for job in list(jobs):
            try:
                reader.get(job)
            except XceError:
                pass  # recorded


def _drain(cluster: LocalCluster, acknowledged: set[int], timeout_s: float) -> bool:
    """Until every acknowledged job has finished; what is still held or stopped is let go first."""
    deadline = time.monotonic() + timeout_s
    with Client(cluster.addresses, cluster.credentials, deadline_s=30.0) as client:
        while time.monotonic() < deadline:
            waiting = [j for j in client.list_jobs(["state:in:PEND,PSUSP,RUN,USUSP,SSUSP,UNKWN"])
                       if j.id in acknowledged]
            if not waiting:
                return True
            for job in waiting:
                action = {api.PSUSP: api.RELEASE, api.USUSP: api.RESUME}.get(job.state)
                if action is not None:
                    try:
                        client.control(job.id, action)
                    except Exception:  # noqa: BLE001 - it moved on meanwhile
                        pass
            time.sleep(1.0)
    return False


def _instances(workers: LocalWorkers) -> list[checks.Instance]:
    """Every instance a worker started, from its journal (start: when the worker
    spawned it; end: the time its shim wrote in the status file). By the host's monotonic
    clock where the journal has it (every process here shares it, and no wall-clock fault moves
    it), turned into this process's wall time; else by the worker's wall clock."""
    wall = time.time() - time.monotonic()  # this process's clock is never faked

    def when(record: dict[str, Any], mono: str, wall_ms: int) -> int:
        return int(record[mono] + wall * 1000) if record.get(mono) is not None else wall_ms

    out = []
    parts = []
    for name in WORKER_SLOTS:
        path = workers.spool(name) / "journal"
        if not path.exists():
            continue
        journal = Journal(path)
        try:
            for (job, attempt), record in journal.items():
                if record.get("part_ms"):  # a parallel job's part here: held while its command runs
                    parts.append(checks.Instance(name, job, attempt,
                                                 when(record, "part_mono_ms", int(record["part_ms"])), None,
                                                 record.get("slots"), tuple(record.get("gpus", ())),
                                                 part=True))
                    continue
                if not record.get("started_ms"):
                    continue  # never started (refused, or killed before it reached the host)
                end_ms = None
                if record.get("final"):
                    final = api.JobReport.FromString(bytes.fromhex(record["final"]))
                    if final.HasField("dispatch_failed"):
                        continue
                    end_ms = when(record, "ended_mono_ms", final.finished.time_ms) or None
                out.append(checks.Instance(name, job, attempt,
                                           when(record, "started_mono_ms", int(record["started_ms"])), end_ms,
                                           record.get("slots"), tuple(record.get("gpus", ()))))
        finally:
            journal.close()
    # A part's slots are the leader's until the job's end, which the command's host wrote (a part
    # without tasks has no process of its own to time).
    ends = {(i.job, i.attempt): i.end_ms for i in out}
    for part in parts:
        end = ends.get((part.job, part.attempt), part.start_ms)
        out.append(checks.Instance(part.host, part.job, part.attempt, part.start_ms,
                                   max(end, part.start_ms) if end is not None else None, part.slots,
                                   part.gpus, part=True))
    return out


def _ticks(path: Path) -> list[float]:
    """A tick job's ticks (the host's uptime, load.py), as this process's wall time."""
    try:
        words = path.read_text(errors="replace").split()
    except OSError:
        return []
    wall = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    ticks = []
    for word in words:
        try:
            ticks.append(float(word) + wall)
        except ValueError:
            continue  # a line cut short by the job's kill
    return sorted(ticks)
