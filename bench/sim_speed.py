"""How fast `xce sim` simulates: jobs simulated per second through the real apply and passes.

Two workloads: the NASA iPSC trace (128 one-slot hosts; all its 18,066 jobs, or the first
--nasa-jobs) and a synthetic trace (simulator/workload.py: synthetic, Poisson arrivals, seed 1) of
--jobs jobs (default 100,000) on --hosts (default 1,000 of 16 slots) at an offered load of 0.8. Each
runs whole (every event an apply, the passes after each); the rate is jobs ended / wall seconds, and
the time 100,000 jobs take at that rate is printed beside the issue's target (60 s). Asserts nothing.

`.venv/bin/python bench/sim_speed.py [--jobs 100000] [--nasa-jobs N] [--hosts 1000x16]`; part of
`make bench` (about 1.5 minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator import (  # noqa: E402
    engine,
    report,
    swf,  # noqa: E402
    workload,
)

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
TARGET_JOBS, TARGET_S = 100_000, 60.0


def measure(name: str, w: workload.Workload) -> dict[str, object]:
    began = time.perf_counter()
    result = engine.simulate(w)
    seconds = time.perf_counter() - began
    rate = len(result.finished) / seconds if seconds > 0 else 0.0
    overall = report.figures(result.finished, result.slots)
    return {"workload": name, "jobs": len(result.finished), "hosts": len(w.hosts), "slots": w.slots,
            "seconds": round(seconds, 1), "jobs_per_s": round(rate, 1), "passes": result.passes,
            "entries": result.entries, "utilization": overall.utilization, "avg_bsld": overall.avg_bsld,
            "projected_100k_s": round(TARGET_JOBS / rate) if rate else None, "target_100k_s": TARGET_S}


def run(jobs: int = TARGET_JOBS, hosts: str = "1000x16", nasa_jobs: int | None = None) -> dict[str, object]:
    nasa = swf.read(TRACES / "NASA-iPSC-1993-3.1-cln.swf.gz")
    first = swf.Trace(nasa.jobs[:nasa_jobs], nasa.header)
    count, _, slots = hosts.partition("x")
    return {"runs": [measure(f"NASA iPSC, {len(first.jobs)} jobs", workload.from_swf(first, "nasa")),
                     measure(f"synthetic {jobs} jobs on {hosts} at load 0.8",
                             workload.synthetic(jobs, int(count), int(slots or 1), 0.8, seed=1))]}


def summary(figures: dict[str, object]) -> str:
    return (f"xce sim, {figures['workload']}: {figures['jobs']} jobs in {figures['seconds']} s, "
            f"{figures['jobs_per_s']} jobs/s; 100,000 jobs take ~{figures['projected_100k_s']} s at that "
            f"rate (target {TARGET_S:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=TARGET_JOBS, help="synthetic jobs (default 100000)")
    parser.add_argument("--nasa-jobs", type=int, default=None, help="the NASA trace's first N (default all)")
    parser.add_argument("--hosts", default="1000x16", help="the synthetic machine (default 1000x16)")
    args = parser.parse_args()
    for figures in run(args.jobs, args.hosts, args.nasa_jobs)["runs"]:  # type: ignore[union-attr]
        print(summary(figures))
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
