"""Long exploration: `python -m tests.protocol_sim --seeds N [--first S] [--steps M] [--minutes T]`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter

from .runner import SimFailure, run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.protocol_sim")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--steps", type=int, default=1500, help="safety-phase steps per seed (CI: 1500)")
    parser.add_argument("--minutes", type=float, default=0.0, help="stop starting new seeds after this long")
    args = parser.parse_args(argv)
    for name in ("xce", "controller", "scheduler", "worker"):  # refusals, stale reports: expected here
        logging.getLogger(name).setLevel(logging.ERROR)
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


if __name__ == "__main__":
    raise SystemExit(main())
