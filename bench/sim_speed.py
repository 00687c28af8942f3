"""How fast `xce sim` simulates: jobs simulated per second, counted and faithful.

Each trace of ../shared/traces whole, by the counted simulation (simulator/counting.py: one-slot hosts,
one queue, what `xce sim --swf` runs) under backfill `any` and `easy`, beside the faithful path (every
event a real apply, every pass a real pass) on its first --faithful-jobs jobs, the rate before the
counted path; the counted starts are checked to be the faithful ones on those jobs. Wide jobs: seeded
traces of --wide-jobs jobs 8-64 hosts wide, and of one-host jobs, on 100 one-slot hosts (the same load):
the per-job cost ratio. And a synthetic trace of --jobs jobs on --hosts (1,000 hosts of 16 slots by
default: the faithful path, as hosts of several slots need). Asserts nothing.

`.venv/bin/python bench/sim_speed.py [--jobs 100000] [--faithful-jobs 2000] [--wide-jobs 20000]`; part
of `make bench` (about 3 minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator import counting, engine, report, swf, workload  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
SHARED = ("lublin_256.swf", "lublin_256_new2.swf", "NASA-iPSC-1993-3.1-cln.swf.gz")
TARGET_JOBS_S = 5000  # every shared trace
WIDE_RATIO = 3.0  # wide jobs no more than this much slower per job than one-host jobs
TARGET_JOBS, TARGET_S = 100_000, 60.0  # the synthetic trace, faithful


def _timed(w: workload.Workload, faithful: bool) -> tuple[engine.Result, float]:
    began = time.perf_counter()
    result = counting.run(w, faithful=faithful)
    return result, time.perf_counter() - began


def _rate(result: engine.Result, seconds: float) -> float:
    return round(len(result.finished) / seconds) if seconds > 0 else 0.0


def trace_speed(name: str, mode: str, faithful_jobs: int) -> dict[str, object]:
    trace = swf.read(TRACES / name)
    queue = api.Queue(name=workload.DEFAULT_QUEUE, backfill="" if mode == "any" else mode)
    counted, seconds = _timed(workload.from_swf(trace, name, queue=queue), False)
    first = workload.from_swf(swf.Trace(trace.jobs[:faithful_jobs], trace.header), name, queue=queue)
    faithful, faithful_s = _timed(first, True)
    again, _ = _timed(first, False)
    same = [(f.key, f.start_ms, f.end_ms) for f in again.finished] == \
        [(f.key, f.start_ms, f.end_ms) for f in faithful.finished]
    return {"trace": name, "backfill": mode, "jobs": len(counted.finished), "path": counted.path,
            "seconds": round(seconds, 2), "jobs_per_s": _rate(counted, seconds),
            "target_jobs_per_s": TARGET_JOBS_S, "faithful_jobs": len(faithful.finished),
            "faithful_jobs_per_s": _rate(faithful, faithful_s), "same_starts_as_faithful": same,
            "avg_bsld": report.figures(counted.finished, counted.slots).avg_bsld}


def wide_speed(jobs: int) -> dict[str, object]:
    rates = {}
    for label, widths in (("one_host", (1, 1)), ("wide", (8, 64))):
        trace = workload.wide_trace(jobs, 100, widths, load=0.9, seed=1)
        w = workload.from_swf(trace, label, queue=api.Queue(name=workload.DEFAULT_QUEUE, backfill="easy"))
        result, seconds = _timed(w, False)
        rates[label] = _rate(result, seconds)
    ratio = round(rates["one_host"] / rates["wide"], 2) if rates["wide"] else None
    return {"jobs": jobs, "hosts": 100, "backfill": "easy", "one_host_jobs_per_s": rates["one_host"],
            "wide_jobs_per_s": rates["wide"], "slower_per_job": ratio, "target_at_most": WIDE_RATIO}


def synthetic_speed(jobs: int, hosts: str) -> dict[str, object]:
    count, _, slots = hosts.partition("x")
    result, seconds = _timed(workload.synthetic(jobs, int(count), int(slots or 1), 0.8, seed=1), False)
    rate = _rate(result, seconds)
    return {"workload": f"synthetic {jobs} jobs on {hosts} at load 0.8", "path": result.path,
            "jobs": len(result.finished), "seconds": round(seconds, 1), "jobs_per_s": rate,
            "projected_100k_s": round(TARGET_JOBS / rate) if rate else None, "target_100k_s": TARGET_S}


def run(jobs: int = TARGET_JOBS, hosts: str = "1000x16", faithful_jobs: int = 2000,
        wide_jobs: int = 20_000) -> dict[str, object]:
    return {"traces": [trace_speed(name, mode, faithful_jobs) for name in SHARED for mode in ("any", "easy")],
            "wide": wide_speed(wide_jobs), "synthetic": synthetic_speed(jobs, hosts) if jobs else None}


def summary(figures: dict[str, Any]) -> list[str]:
    lines = []
    for t in figures["traces"]:
        lines.append(f"xce sim {t['trace']} backfill={t['backfill']}: {t['jobs']} jobs, {t['jobs_per_s']} "
                     f"jobs/s ({t['path']}; target {TARGET_JOBS_S}); faithful "
                     f"{t['faithful_jobs_per_s']} jobs/s on the first {t['faithful_jobs']} (same starts: "
                     f"{t['same_starts_as_faithful']})")
    w = figures["wide"]
    lines.append(f"xce sim wide jobs (8-64 of 100 hosts): {w['wide_jobs_per_s']} jobs/s, one-host jobs "
                 f"{w['one_host_jobs_per_s']}: {w['slower_per_job']}x slower per job "
                 f"(target <= {WIDE_RATIO})")
    s = figures.get("synthetic")
    if s:
        lines.append(f"xce sim {s['workload']}: {s['jobs_per_s']} jobs/s ({s['path']}); 100,000 jobs take "
                     f"~{s['projected_100k_s']} s (target {TARGET_S:.0f} s)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=TARGET_JOBS,
                        help="synthetic jobs (default 100000; 0: none)")
    parser.add_argument("--hosts", default="1000x16", help="the synthetic machine (default 1000x16)")
    parser.add_argument("--faithful-jobs", type=int, default=2000, help="faithful path: each trace's first N")
    parser.add_argument("--wide-jobs", type=int, default=20_000, help="jobs of each wide-job trace")
    args = parser.parse_args()
    figures = run(args.jobs, args.hosts, args.faithful_jobs, args.wide_jobs)
    print("\n".join(summary(figures)))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
