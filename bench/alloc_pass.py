"""Scheduler pass time with resource requirements: 50,000 pending jobs on 5,000 hosts.

The hosts are half full, with 10 attributes each (type, model, rack, zone, os, ssd, ib, maxmem,
ncpus, gpus); the jobs: 70 % one slot with a select[], 20 % 4-16 slots with span[ptile=4], 10 %
64 slots over several hosts. One pass of the pure core (scheduler/core.py), as the scheduler runs
it: at most 4,000 dispatches, every other job a pending reason with counts. Target: <= 0.4 s with
the hosts' states kept by the view, as the daemon runs it (bench/pass_timing.py).

Part of `make bench`; alone: `.venv/bin/python bench/alloc_pass.py`. Prints figures, asserts
nothing.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pass_timing import timed  # noqa: E402

from scheduler.core import CoreConfig, run_pass  # noqa: E402
from scheduler.decisions import Dispatch, Pend  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

SELECTS = ("type == X86_64", "type == X86_64 && defined(ssd)", "maxmem >= 128000", "zone == z2",
           "defined(ib) && ncpus >= 32", "model == epyc && mem > 16000", "rack == r07 || rack == r08",
           "type == AARCH64", "os == el9 && slots >= 2", "gpu >= 1")


def world(jobs: int, hosts: int, seed: int = 16) -> tuple[list[api.Job], list[api.Queue], list[api.Host]]:
    rng = random.Random(seed)
    queues = [api.Queue(name=n, priority=p) for n, p in (("priority", 43), ("normal", 30), ("idle", 20))]
    fleet = []
    for i in range(hosts):
        arm = rng.random() < 0.2
        tags = [f"type={'AARCH64' if arm else 'X86_64'}", f"model={rng.choice(('epyc', 'xeon', 'grace'))}",
                f"rack=r{i // 100:02d}", f"zone=z{i % 4 + 1}", "os=el9"]
        tags += [t for t, p in (("ssd", 0.5), ("ib", 0.3)) if rng.random() < p]
        gpus = rng.choice((0, 0, 0, 4))
        host = api.Host(spec=api.HostSpec(name=f"host{i:05d}", slots=16, ncpus=rng.choice((16, 32, 64)),
                                          memory_mb=rng.choice((64_000, 128_000, 256_000)), tags=tags,
                                          resources={"gpu": float(gpus)} if gpus else {}),
                        status=api.HOST_OK, slots_used=rng.randrange(17))  # half full on average
        fleet.append(host)
    pending = []
    for i in range(jobs):
        kind = rng.random()
        if kind < 0.7:
            slots, req = 1, f"select[{rng.choice(SELECTS)}]"
        elif kind < 0.9:
            slots, req = rng.choice((4, 8, 12, 16)), "span[ptile=4]"
        else:
            slots, req = 64, ""
        pending.append(api.Job(id=i + 1, state=api.PEND, submit_time_ms=rng.randrange(10**6),
                               spec=api.JobSpec(command=["true"], queue=rng.choice(queues).name,
                                                priority=rng.randrange(5), slots=slots, resource_req=req)))
    return pending, queues, fleet


def run(jobs: int = 50_000, hosts: int = 5_000, repeat: int = 3) -> dict[str, object]:
    pending, queues, fleet = world(jobs, hosts)
    config = CoreConfig()
    result, figures = timed(lambda kept: run_pass(pending, queues, fleet, config, {}, **kept), fleet, pending,
                            repeat)
    placed = [d for d in result.decisions if isinstance(d, Dispatch)]
    reasons = [d for d in result.decisions if isinstance(d, Pend)]
    codes = Counter(api.PendingReason.Name(d.code) for d in reasons)
    return {"jobs": jobs, "hosts": hosts, "dispatched": len(placed),
            "multi_host": sum(1 for d in placed if len(d.hosts) > 1), "reasons": len(reasons),
            "reason_codes": dict(codes), "example_reason": reasons[0].reason if reasons else "",
            **figures, "target_s": 0.4}


if __name__ == "__main__":
    figures = run()
    print(f"allocation pass: {figures['jobs']} pending jobs (70 % select[], 20 % ptile, 10 % 64 slots), "
          f"{figures['hosts']} hosts half full: {figures['pass_s_median']} s median "
          f"({figures['dispatched']} dispatched, {figures['multi_host']} over several hosts, "
          f"{figures['reasons']} reasons; {figures['cold_s_median']} s making the hosts' states); "
          "target <= 0.4 s")
    print(json.dumps(figures))
