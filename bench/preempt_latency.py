"""Preemption latency: a preemptor's submit -> its victims suspended -> the preemptor running.

`python bench/preempt_latency.py [--rounds N]` (also a part of `make bench`). On one fresh local
cluster (three replicas, a scheduler, one worker of 4 slots; TLS and tokens on, linearizable reads),
each round fills the host with 4 jobs of the preemptable queue `batch`, then submits a 2-slot job of
the preemptive queue `urgent` and times, from the client:
- submit -> both victims SSUSP with their slots given back (their worker saw them stopped, T in /proc);
- submit -> the preemptor RUN (and started: its pid known).
Then the preemptor ends, the victims resume and are killed, and the next round starts. Prints p50 and
p99 of each; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

QUEUES = """
[hosts]
heartbeat_s = 0.5
heartbeat_timeout_s = 5.0

[[queues]]
name = "urgent"
priority = 60
preemptive = ["batch"]

[[queues]]
name = "batch"
priority = 10
preemptable = true
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def wait(probe, what: str, timeout_s: float = 60.0) -> float:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if probe():
            return time.monotonic()
        time.sleep(0.005)
    raise TimeoutError(what)


def run(rounds: int = 20) -> dict[str, object]:
    suspended_ms: list[float] = []
    running_ms: list[float] = []
    with tempfile.TemporaryDirectory(prefix="xce-preempt-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", extra_config=QUEUES)
        workers = LocalWorkers(cluster)
        scheduler = LocalScheduler(cluster)
        try:
            cluster.start()
            cluster.leader()
            scheduler.start()
            workers.start("w1", 4)
            with cluster.client() as client:
                wait(lambda: any(h.status == api.HOST_OK for h in client.list_hosts().hosts), "the worker")
                for number in range(rounds):
                    go = Path(tmp) / f"go-{number}"
                    loop = ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"]
                    low = api.JobSpec(command=loop, queue="batch", cwd=tmp)
                    batch = [j.id for j in client.submit([low] * 4).jobs]
                    wait(lambda b=batch: all(client.get_job(j).pid for j in b), "the batch jobs")
                    started = time.monotonic()
                    high = api.JobSpec(command=loop, queue="urgent", slots=2, cwd=tmp)
                    urgent = client.submit([high]).jobs[0].id

                    def given_back(b: list[int] = batch) -> bool:
                        jobs = [client.get_job(j) for j in b]
                        return sum(1 for j in jobs if j.state == api.SSUSP and j.released) == 2

                    suspended_ms.append((wait(given_back, "the victims suspended") - started) * 1000)
                    running_ms.append((wait(lambda u=urgent: client.get_job(u).pid != 0, "the preemptor")
                                       - started) * 1000)
                    go.touch()
                    wait(lambda b=batch, u=urgent: all(client.get_job(j).state == api.DONE for j in [*b, u]),
                         "the round's end")
        finally:
            scheduler.kill()
            workers.stop()
            cluster.stop()
    return {"rounds": rounds, "suspended_ms_p50": round(pct(suspended_ms, 0.5), 1),
            # (p99 of 20 rounds is their largest)
            "suspended_ms_p99": round(pct(suspended_ms, 0.99), 1),
            "running_ms_p50": round(pct(running_ms, 0.5), 1),
            "running_ms_p99": round(pct(running_ms, 0.99), 1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    figures = run(parser.parse_args().rounds)
    print(f"preemption latency over {figures['rounds']} rounds: submit -> victims suspended "
          f"p50 {figures['suspended_ms_p50']} ms, p99 {figures['suspended_ms_p99']} ms; submit -> "
          f"preemptor running p50 {figures['running_ms_p50']} ms, p99 {figures['running_ms_p99']} ms")
    print(json.dumps(figures))
