"""Scheduler pass time with arbitration on: 50,000 pending jobs on 5,000 hosts, fair share,
30 % of the running jobs preemptable, a slot limit per user.

The hosts (16 slots) are full or nearly (half full, the rest 12-16 slots used) with running jobs of
500 users, 30 % of them in the preemptable queue `low`; the pending jobs: 10 % in the preemptive
queue `urgent` (1-4 slots), 90 % in
`normal`, a fair-share queue (shares per user, recent usage of each user), every user under a limit of
64 slots in `normal`. One pass of the pure core as the scheduler runs it (at most 4,000 dispatches and
16 preemptions). Target: <= 0.4 s with the hosts' states kept by the view, as the daemon runs it
(bench/pass_timing.py). The live scheduler runs this same pass over TLS, its view fed by the Sync
stream; what is timed here is the pass.

Part of `make bench`; alone: `.venv/bin/python bench/arbitration_pass.py`. Prints figures, asserts
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

from scheduler import picker  # noqa: E402
from scheduler.core import CoreConfig, run_pass  # noqa: E402
from scheduler.decisions import Dispatch, Pend, Preempt  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

NOW = 1_800_000_000_000


def world(jobs: int, hosts: int, users: int = 500, seed: int = 17) -> dict[str, object]:
    rng = random.Random(seed)
    shares = {f"u{i:03d}": rng.choice((1, 1, 2, 4)) for i in range(users)}
    queues = [api.Queue(name="urgent", priority=60, preemptive=["low"]),
              api.Queue(name="normal", priority=30, job_pick_plugin="fairshare",
                        fairshare=api.FairShare(half_life_s=3600, users=shares)),
              api.Queue(name="low", priority=10, preemptable=True, preempt_min_run_s=60)]
    fleet, running, next_id = [], [], 1
    counters: Counter[str] = Counter()
    for i in range(hosts):
        name = f"host{i:05d}"
        used = 0
        for _ in range(16 if i % 2 else rng.randrange(12, 17)):  # half the hosts full: preemption
            queue = "low" if rng.random() < 0.3 else "normal"
            user = f"u{rng.randrange(users):03d}"
            if queue == "normal" and counters[f"limit/per_user/u={user}/slots"] >= 64:
                queue = "low"
            running.append(api.Job(id=next_id, state=api.RUN, host=name, start_time_ms=NOW - 3_600_000,
                                   spec=api.JobSpec(command=["x"], queue=queue, user=user, slots=1)))
            if queue == "normal":
                counters[f"limit/per_user/u={user}/slots"] += 1
            used += 1
            next_id += 1
        fleet.append(api.Host(spec=api.HostSpec(name=name, slots=16), status=api.HOST_OK, slots_used=used))
    pending = []
    for _ in range(jobs):
        urgent = rng.random() < 0.1
        pending.append(api.Job(id=next_id, state=api.PEND, submit_time_ms=NOW - rng.randrange(10**6),
                               spec=api.JobSpec(command=["x"], queue="urgent" if urgent else "normal",
                                                user=f"u{rng.randrange(users):03d}",
                                                slots=rng.choice((1, 2, 4)) if urgent else 1)))
        next_id += 1
    usage = {("default", user): (rng.randrange(10**9), NOW - rng.randrange(3_600_000)) for user in shares}
    limit = api.Limit(name="per_user", queues=["normal"], per_user=True, slots=64)
    return {"jobs": [*running, *pending], "queues": queues, "hosts": fleet, "counters": dict(counters),
            "usage": {"normal": usage}, "limits": [limit], "running": len(running)}


def run(jobs: int = 50_000, hosts: int = 5_000, repeat: int = 3) -> dict[str, object]:
    made = world(jobs, hosts)
    all_jobs = made["jobs"]
    assert isinstance(all_jobs, list)
    config = CoreConfig(queue_pickers={"normal": picker.FairShare()})
    context = picker.PassContext(all_jobs, made["usage"], NOW)  # type: ignore[arg-type]
    fleet_hosts = made["hosts"]
    assert isinstance(fleet_hosts, list)
    result, figures = timed(lambda kept: run_pass(
        all_jobs, made["queues"], fleet_hosts, config, made["counters"],
        limit_defs=made["limits"], context=context, **kept), fleet_hosts, all_jobs, repeat)
    placed = [d for d in result.decisions if isinstance(d, Dispatch)]
    preempts = [d for d in result.decisions if isinstance(d, Preempt)]
    reasons = [d for d in result.decisions if isinstance(d, Pend)]
    codes = Counter(api.PendingReason.Name(d.code) for d in reasons)
    return {"jobs": jobs, "hosts": hosts, "running": made["running"], "dispatched": len(placed),
            "preemptions": len(preempts), "victims": sum(len(p.victims) for p in preempts),
            "reasons": len(reasons), "reason_codes": dict(codes),
            **figures, "target_s": 0.4}


if __name__ == "__main__":
    figures = run()
    print(f"arbitration pass: {figures['jobs']} pending jobs on {figures['hosts']} hosts with "
          f"{figures['running']} running (30 % preemptable), fair share, a limit per user: "
          f"{figures['pass_s_median']} s median ({figures['dispatched']} dispatched, "
          f"{figures['preemptions']} preemptions of {figures['victims']} victims, {figures['reasons']} "
          f"reasons; {figures['cold_s_median']} s making the hosts' states); target <= 0.4 s")
    print(json.dumps(figures))
