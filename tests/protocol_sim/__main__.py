"""Long exploration: `python -m tests.protocol_sim --seeds N [--first S] [--steps M] [--minutes T]`;
with `--trace`, each seed's traceable run is validated by TLC against tla/XceBarrier.tla."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the suite's modules, as pytest imports them

from tla_trace import validate  # noqa: E402

from .runner import SimFailure, run_seed, trace_seed  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.protocol_sim")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--steps", type=int, default=1500, help="safety-phase steps per seed (CI: 1500)")
    parser.add_argument("--minutes", type=float, default=0.0, help="stop starting new seeds after this long")
    parser.add_argument("--trace", action="store_true", help="validate each run's trace with TLC")
    args = parser.parse_args(argv)
    for name in ("xce", "controller", "scheduler", "worker"):  # refusals, stale reports: expected here
        logging.getLogger(name).setLevel(logging.ERROR)
    if args.trace:
        return validate_traces(args)
    totals: Counter[str] = Counter()
    started = time.perf_counter()
    total_steps = total_jobs = runs = 0
    for seed in range(args.first, args.first + args.seeds):
        if args.minutes and time.perf_counter() - started > args.minutes * 60:
            break
        try:
            result = run_seed(seed, args.steps, out=lambda _: None)
        except SimFailure as failure:
            print(failure, file=sys.stderr)
            return 1
        runs += 1
        total_steps += result.safety_steps
        total_jobs += result.jobs
        totals.update(result.stats)
        print(f"seed {seed}: ok, {result.safety_steps} steps with faults, {result.liveness_rounds} liveness "
              f"rounds, {result.jobs} jobs, {result.seconds:.2f} s", flush=True)
    elapsed = time.perf_counter() - started
    print(f"{runs} seeds ({args.first}..{args.first + runs - 1}), {total_steps} safety steps, "
          f"{total_jobs} jobs, all invariants held and every job ended; {elapsed:.0f} s")
    print("cases met: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    return 0


def validate_traces(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    totals: Counter[str] = Counter()
    runs = spec_steps = truncated = 0
    for seed in range(args.first, args.first + args.seeds):
        if args.minutes and time.perf_counter() - started > args.minutes * 60:
            break
        run = trace_seed(seed, args.steps)
        verdict = validate(run.steps, "init", run.constants)
        runs += 1
        spec_steps += len(run.steps)
        truncated += bool(run.truncated)
        totals.update(run.stats)
        cut = f"; recording stopped at {run.truncated}" if run.truncated else ""
        print(f"seed {seed}: {len(run.steps)} spec steps{cut}: {verdict.explain(run.steps)}", flush=True)
        if run.failure or not verdict.accepted:
            print(run.failure, file=sys.stderr)
            return 1
    elapsed = time.perf_counter() - started
    print(f"{runs} traces ({args.first}..{args.first + runs - 1}), {spec_steps} spec steps, every one a "
          f"behaviour of the spec; {truncated} stopped early; {elapsed:.0f} s")
    print("cases met: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
