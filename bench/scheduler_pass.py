"""Scheduler pass time: the pure core on 50,000 pending jobs and 5,000 hosts.

Part of `make bench` (and runnable alone: `.venv/bin/python bench/scheduler_pass.py`).
Prints figures; asserts nothing. Target: one pass <= 0.3 s as the daemon runs it (bench/pass_timing.py:
hosts' states kept by the view); the same pass making those states, and the pass after it (the
first pass's placements taken, the rest waiting on full hosts: what most passes of a busy cluster
are), beside it.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pass_timing import timed  # noqa: E402

from scheduler.core import CoreConfig, run_pass  # noqa: E402
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
    result, figures = timed(lambda kept: run_pass(pending, queues, fleet, config, {}, **kept), fleet, pending,
                            repeat)
    placed = [d for d in result.decisions if isinstance(d, Dispatch)]
    # The next pass: those placements taken, the other jobs waiting, a pass of the usual bound.
    taken = {d.job_id for d in placed}
    on_host: dict[str, int] = {}
    by_id = {j.id: j for j in pending}
    for d in placed:
        on_host[d.host] = on_host.get(d.host, 0) + by_id[d.job_id].spec.slots
    after = [api.Host(spec=h.spec, status=h.status, slots_used=h.slots_used + on_host.get(h.spec.name, 0))
             for h in fleet]
    rest = [j for j in pending if j.id not in taken]
    _, steady = timed(lambda kept: run_pass(rest, queues, after, CoreConfig(), {}, **kept), after, rest,
                      repeat)
    return {"jobs": jobs, "hosts": hosts, "placed": len(placed), **figures, "target_s": 0.3,
            "next_pass_jobs": len(rest), "next_pass_s_median": steady["pass_s_median"]}


def scale(jobs: int = 100_000, hosts: int = 10_000, repeat: int = 3) -> dict[str, object]:
    """The pass at the scale of the issue's last step (`make bench-scale`): as the daemon runs it, with its
    bound of dispatches a pass (CoreConfig's 4,000: the rest get that reason), and placing every job it can
    in one pass, beside. Target: <= 1 s."""
    pending, queues, fleet = world(jobs, hosts)
    bounded, figures = timed(lambda kept: run_pass(pending, queues, fleet, CoreConfig(), {}, **kept), fleet,
                             pending, repeat)
    _, unbounded = timed(lambda kept: run_pass(pending, queues, fleet, CoreConfig(max_dispatches=jobs), {},
                                               **kept), fleet, pending, repeat)
    return {"jobs": jobs, "hosts": hosts,
            "placed": sum(isinstance(d, Dispatch) for d in bounded.decisions), **figures,
            "all_placed_s_median": unbounded["pass_s_median"], "target_s": 1.0}


if __name__ == "__main__":
    result = run()
    print(f"scheduler pass: {result['jobs']} pending jobs, {result['hosts']} hosts: "
          f"{result['pass_s_median']} s median ({result['placed']} placed; {result['cold_s_median']} s "
          f"making the hosts' states); target <= 0.3 s. The next pass ({result['next_pass_jobs']} "
          f"waiting on full hosts): {result['next_pass_s_median']} s")
    print(json.dumps(result))
