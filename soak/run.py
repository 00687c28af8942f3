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

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from client.channel import Client
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from soak import checks, report
from soak.chaos import Chaos
from soak.load import LoadGenerator
from soak.netns import Net, available
from soak.observe import DispatchWatch, LeaderWatch, MemoryWatch
from worker.journal import Journal
from xce.v1 import api_pb2 as api

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


def run(config: SoakConfig) -> dict[str, Any]:
    config.out.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="xce-soak-"))
    net: Net | None = None
    partitions = config.partitions
    if partitions and available() is not None:
        print(f"soak: no partitions ({available()})", flush=True)
        partitions = 0
    if config.fault:
        os.environ["XCE_FAULT"] = config.fault  # inherited by the controllers this process starts
    try:
        if partitions:
            net = Net(3)
        result = _run(config, data, net, partitions)
    finally:
        os.environ.pop("XCE_FAULT", None)
        if net is not None:
            net.close()
    logs = config.out / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir()
    for path in data.glob("*.log"):
        shutil.copy(path, logs / path.name)
    shutil.rmtree(data, ignore_errors=True)
    return result


def _run(config: SoakConfig, data: Path, net: Net | None, partitions: int) -> dict[str, Any]:
    cluster = LocalCluster(data, extra_config=CLUSTER_EXTRA,
                           hosts=net.addresses if net else None,
                           prefix=(lambda rid: net.prefix(rid - 1)) if net else None)
    schedulers = [LocalScheduler(cluster, "sched-a"), LocalScheduler(cluster, "sched-b")]
    workers = LocalWorkers(cluster)
    watch = DispatchWatch(cluster.addresses, cluster.credentials)
    leaders = LeaderWatch(cluster.addresses, cluster.credentials)
    memory = MemoryWatch(lambda: {
        **{f"replica-{rid}": p.pid for rid, p in list(cluster.procs.items())},
        **{s.name: s.proc.pid for s in schedulers if s.proc is not None},
        **{f"worker-{n}": p.pid for n, p in list(workers.procs.items())}})
    load = LoadGenerator(cluster.addresses, cluster.credentials, config.rate, config.seed, data / "ticks")
    rounds = max(1, int(config.duration_s // config.kill_every_s)) if config.kill_every_s else 0
    partition_rounds = {rounds * (i + 1) // (partitions + 1) or 1 for i in range(partitions)}
    chaos = Chaos(cluster, schedulers, workers, WORKER_SLOTS, WORKER_EXTRA, net, watch, load.record,
                  config.kill_every_s, partition_rounds, config.seed)
    started = time.time()
    drained = False
    try:
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
        if config.kill_every_s:
            chaos.start()
        time.sleep(config.duration_s)
        if config.kill_every_s:
            chaos.stop()
        load.stop()
        load_end = time.time()
        drained = _drain(cluster, set(load.record.acknowledged), config.drain_s)
        drain_s = time.time() - load_end
        with Client(cluster.addresses, cluster.credentials, deadline_s=60.0) as client:
            jobs = client.list_jobs()
        final = {j.id: checks.FinalJob(j.id, api.JobState.Name(j.state), j.spec.slots, j.end_time_ms,
                                       tuple(a.host for a in j.allocation) or ((j.host,) if j.host else ()),
                                       j.attempt)
                 for j in jobs}
        minority = sum(1 for j in jobs if j.spec.name == "soak-minority") \
            + sum(1 for f in chaos.record.failovers if f.minority_write == "ack")
        ended = time.time()
    finally:
        chaos.abort()  # no-ops after a normal end; after an error, no restart may race the teardown
        load.abort()
        for part in (watch, leaders, memory):
            part.stop()
        for scheduler in schedulers:
            scheduler.kill()
        workers.stop()
        cluster.stop()
    instances = _instances(workers)
    stops = {job: (acked, _ticks(data / "ticks" / str(job))) for job, acked in load.record.stops.items()}
    verdict = checks.verdict(load.record.acknowledged, final, instances, WORKER_SLOTS, load.record.kills,
                             stops, memory.samples, int(ended * 1000), host_gpus=WORKER_GPUS)
    verdict.minority_commits = minority
    for job in verdict.stops_not_effective:  # the evidence, for whoever reads the report
        acked, ticks = stops[job]
        (config.out / f"stop-{job}.txt").write_text(
            f"stop acknowledged at {acked / 1000:.2f}\n" + "\n".join(load.record.stop_log.get(job, []))
            + "\nticks:\n" + "\n".join(f"{t:.3f}" for t in ticks) + "\n")
    figures = report.figures(config, started, load_end, drain_s, drained, load.record, chaos.record,
                             watch, final, instances, data)
    result = {"config": {k: str(v) for k, v in asdict(config).items()}, "verdict": verdict.summary(),
              **figures,
              # what the per-resource and per-part checks had to look at (none: they proved nothing)
              "parallel_jobs": sum(1 for f in final.values() if len(f.hosts) > 1),
              "parts_journaled": sum(1 for i in instances if i.part),
              "gpu_instances": sum(1 for i in instances if i.gpus)}
    (config.out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    (config.out / "summary.txt").write_text(report.summary(result) + "\n")
    report.timeline(config.out / "timeline.png", started, instances, leaders.samples, chaos.record)
    return result


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
    spawned it; end: the time its shim wrote in the status file)."""
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
                    parts.append(checks.Instance(name, job, attempt, int(record["part_ms"]), None,
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
                    end_ms = final.finished.time_ms or None
                out.append(checks.Instance(name, job, attempt, int(record["started_ms"]), end_ms,
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
    try:
        words = path.read_text(errors="replace").split()
    except OSError:
        return []
    ticks = []
    for word in words:
        try:
            ticks.append(float(word))
        except ValueError:
            continue  # a line cut short by the job's kill
    return sorted(ticks)
