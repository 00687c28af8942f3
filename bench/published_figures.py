"""The published FCFS figures on the Lublin traces, reproduced with XCE's scheduling core.

Zhang et al., SC'20 (RLScheduler), average bounded slowdown over ten windows of 1,024 jobs
(../shared/traces/README.md gives the protocol): FCFS without backfilling 7273.77 (Lublin-1) and
7842.47 (Lublin-2); with their backfilling 235.82 and 247.61. Here each window runs through the real
pass (scheduler/core.py: run_pass) on a machine of one-slot hosts, on a virtual clock: an event at a
time (arrivals before ends at equal times), a pass after each; the queue's `backfill` is `none` for
the first figures and `end_before` (the paper's rule) for the second. Jobs carry their estimate as
-We. This drives the core directly, fast enough for `make test-slow`; `xce sim` drives it through
apply and gives the same figures (docs/SIMULATION.md: Fidelity).

`.venv/bin/python bench/published_figures.py [--trace lublin_256.swf] [--windows N]`; part of
`make bench`. Prints figures beside the published ones; asserts nothing.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler import backfill, core, picker  # noqa: E402
from scheduler.decisions import Dispatch  # noqa: E402
from simulator import swf  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
WINDOWS = (1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085)
WINDOW = 1024
PUBLISHED = {("lublin_256.swf", "none"): 7273.77, ("lublin_256.swf", "end_before"): 235.82,
             ("lublin_256_new2.swf", "none"): 7842.47, ("lublin_256_new2.swf", "end_before"): 247.61}


def window(trace: swf.Trace, start: int, mode: str) -> float:
    """The average bounded slowdown of jobs[start:start + 1024], from an empty machine."""
    jobs = trace.jobs[start:start + WINDOW]
    by_id = {job.id: job for job in jobs}
    used = {f"n{i:04d}": 0 for i in range(trace.max_nodes())}
    queues = [api.Queue(name="q", backfill=mode)]
    pending: dict[int, api.Job] = {}
    running: dict[int, tuple[api.Job, list[str]]] = {}
    started: dict[int, int] = {}
    kept: dict[int, backfill.Kept] = {}
    events = [(job.submit_s, 0, job.id) for job in jobs]  # (time, 0 arrival | 1 end, job): arrivals first
    heapq.heapify(events)
    while events:
        now, kind, job_id = heapq.heappop(events)
        if kind == 0:
            job = by_id[job_id]
            pending[job_id] = api.Job(id=job_id, state=api.PEND, submit_time_ms=job.submit_s * 1000,
                                      spec=api.JobSpec(queue="q", slots=job.procs, estimate_s=job.estimate_s))
        else:
            for host in running.pop(job_id)[1]:
                used[host] -= 1
        fleet = [api.Host(spec=api.HostSpec(name=name, slots=1), slots_used=n, status=api.HOST_OK)
                 for name, n in used.items()]
        view = [*(r[0] for r in running.values()), *pending.values()]
        result = core.run_pass(view, queues, fleet, core.CoreConfig(max_dispatches=10**6), {},
                               context=picker.PassContext(view, {}, now * 1000, kept))
        kept = result.reservations  # the head's, kept while it waits (as the planner keeps them)
        for decision in result.decisions:
            if isinstance(decision, Dispatch):
                placed = pending.pop(decision.job_id)
                hosts = [h for h, _ in decision.hosts] if decision.hosts else [decision.host]
                for host in hosts:
                    used[host] += 1
                placed.state, placed.start_time_ms, placed.host = api.RUN, now * 1000, hosts[0]
                placed.allocation.extend(api.HostAllocation(host=h, slots=1) for h in hosts)
                running[decision.job_id] = (placed, hosts)
                started[decision.job_id] = now
                heapq.heappush(events, (now + by_id[decision.job_id].run_s, 1, decision.job_id))
    slowdowns = [max(1.0, (started[j.id] - j.submit_s + j.run_s) / max(j.run_s, 10)) for j in jobs]
    return sum(slowdowns) / len(slowdowns)


def run(trace_name: str, mode: str, windows: int = len(WINDOWS)) -> dict[str, object]:
    trace = swf.read(TRACES / trace_name)
    began = time.perf_counter()
    values = [window(trace, start, mode) for start in WINDOWS[:windows]]
    seconds = time.perf_counter() - began
    bsld = sum(values) / len(values)
    published = PUBLISHED.get((trace_name, mode)) if windows == len(WINDOWS) else None
    off = round(100 * (bsld - published) / published, 3) if published else None
    return {"trace": trace_name, "backfill": mode, "windows": windows, "bsld": round(bsld, 2),
            "published": published, "off_pct": off, "seconds": round(seconds, 1),
            "jobs_per_s": round(windows * WINDOW / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", help="a trace of ../shared/traces (default: both Lublin)")
    parser.add_argument("--windows", type=int, default=len(WINDOWS), help="how many of the ten windows")
    args = parser.parse_args()
    for name in args.trace or ["lublin_256.swf", "lublin_256_new2.swf"]:
        for mode in ("none", "end_before"):
            figures = run(name, mode, args.windows)
            print(f"{name} backfill={mode}: bsld {figures['bsld']} (published {figures['published']}, "
                  f"off {figures['off_pct']} %), {figures['seconds']} s, {figures['jobs_per_s']} jobs/s")
            print(json.dumps(figures))


if __name__ == "__main__":
    main()
