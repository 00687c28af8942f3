"""Scheduler pass time: the pure core on 50,000 pending jobs and 5,000 hosts.

Part of `make bench` (and runnable alone: `.venv/bin/python bench/scheduler_pass.py`).
Prints figures; asserts nothing. Target (scheduler issue): one pass <= 1 s.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core import CoreConfig, schedule  # noqa: E402
from scheduler.decisions import Dispatch  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402


def world(jobs: int, hosts: int, seed: int = 7) -> tuple[list[api.Job], list[api.Queue], list[api.Host]]:
    rng = random.Random(seed)
    queues = [api.Queue(name=n, priority=p) for n, p in (("priority", 43), ("normal", 30), ("idle", 20))]
    pending = [api.Job(id=i + 1, state=api.PEND, submit_time_ms=rng.randrange(10**6),
                       spec=api.JobSpec(command=["true"], queue=rng.choice(queues).name,
                                        priority=rng.randrange(5), slots=rng.choice((1, 1, 1, 2, 4))))
               for i in range(jobs)]
    fleet = [api.Host(spec=api.HostSpec(name=f"host{i:05d}", slots=16), status=api.HOST_OK,
                      slots_used=rng.randrange(8)) for i in range(hosts)]
    return pending, queues, fleet


def run(jobs: int = 50_000, hosts: int = 5_000, repeat: int = 3) -> dict[str, object]:
    pending, queues, fleet = world(jobs, hosts)
    config = CoreConfig(max_dispatches=jobs)
    times, placed = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        decisions = schedule(pending, queues, fleet, 0, config)
        times.append(time.perf_counter() - started)
        placed = sum(isinstance(d, Dispatch) for d in decisions)
    return {"jobs": jobs, "hosts": hosts, "placed": placed,
            "pass_s_median": round(statistics.median(times), 3), "pass_s_max": round(max(times), 3),
            "target_s": 1.0}


if __name__ == "__main__":
    result = run()
    print(f"scheduler pass: {result['jobs']} pending jobs, {result['hosts']} hosts: "
          f"{result['pass_s_median']} s median ({result['placed']} placed); target <= 1 s")
    print(json.dumps(result))
