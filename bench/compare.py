"""`make bench`'s figures for two versions of the code, interleaved, median of N rounds each.

    .venv/bin/python bench/compare.py BASE_TREE NEW_TREE [--rounds 3] [--parts xce,fleet,...]

Each tree is a checkout with its own .venv (`git worktree add /tmp/base COMMIT && make -C
/tmp/base .venv/.installed`). A round runs every part once in BASE, then once in NEW (the
order alternates from round to round, so that a machine warming or cooling favours neither),
each part in a process of its own, through the same `run` functions `make bench` calls. Peers
(etcd, Slurm) and the published figures (the same pure pass as `scheduler_pass`, on a trace) are
left out: they say nothing about one version of XCE against another. Shorter settings than
`make bench` (5 s per load level, 5 leader kills, 3 under the fleet) keep a round near 10 minutes.

Prints, per figure, the median of each side and NEW / BASE, with the direction that is better
(throughput up, time down); writes every round's figures to --output. Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

PARTS: dict[str, str] = {
    "xce": "xce_bench.run([1, 16], 5.0, 100_000, 5, 10)",
    "scheduler_pass": "scheduler_pass.run()",
    "alloc_pass": "alloc_pass.run()",
    "arbitration_pass": "arbitration_pass.run()",
    "preempt_latency": "preempt_latency.run()",
    "sim_speed": "sim_speed.run()",
    "gateway": "gateway_bench.run(5.0)",
    "fleet": "fleet.run(500, 40, 20_000, 3)",
    "fleet_requirements": "fleet.run(500, 40, 18_000, 0, requirements=True)",
    "htc": None,  # bench/htc.py --no-slurm: its last line is its JSON
}
# Figures compared: rates (higher is better) and times (lower is better); the rest are settings.
HIGHER = re.compile(r"(per_s|jobs_per_s|placements_per_s)$")
LOWER = re.compile(r"(_ms|_ms_p50|_ms_p99|p50|p99|pass_s_median|first_to_last_s|seconds)$")


def run_part(tree: Path, part: str, timeout_s: float) -> Any:
    python = str(tree / ".venv" / "bin" / "python")
    if PARTS[part] is None:
        command = [python, "bench/htc.py", "--no-slurm"]
    else:
        module = PARTS[part].split(".", 1)[0]
        code = (f"import json, sys; sys.path.insert(0, 'bench'); import {module}; "
                f"print('\\nFIGURES ' + json.dumps({PARTS[part]}))")
        command = [python, "-c", code]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=timeout_s)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-400:]}"}
    last = lines[-1].removeprefix("FIGURES ")
    try:
        return json.loads(last)
    except ValueError:
        return {"error": f"no JSON: {last[-200:]}"}


def flatten(value: Any, path: str = "") -> dict[str, float]:
    found: dict[str, float] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            if key != "samples":
                found.update(flatten(item, f"{path}.{key}" if path else str(key)))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        for n, item in enumerate(value):
            found.update(flatten(item, f"{path}[{n}]"))
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        found[path] = float(value)
    return found


def compared(path: str) -> str | None:
    leaf = path.rsplit(".", 1)[-1]
    if HIGHER.search(leaf):
        return "higher"
    if LOWER.search(leaf):
        return "lower"
    return None


def summary(rounds: list[dict[str, dict[str, Any]]]) -> list[str]:
    lines = [f"{'figure':<58}{'base':>12}{'new':>12}{'new/base':>10}  better"]
    # Each round's figures flattened once, per side: {path: value}.
    flat = [{side: {path: value for part, figures in one[side].items()
                    for path, value in flatten(figures, part).items()} for side in ("base", "new")}
            for one in rounds]
    paths = dict.fromkeys(path for one in flat for side in ("base", "new") for path in one[side])
    for path in paths:
        direction = compared(path)
        if direction is None:
            continue
        sides = []
        for side in ("base", "new"):
            known = [one[side][path] for one in flat if path in one[side]]
            sides.append(statistics.median(known) if known else None)
        base, new = sides
        ratio = f"{new / base:.3f}" if base and new is not None else "-"
        show = [f"{v:,.2f}" if v is not None else "-" for v in sides]
        lines.append(f"{path:<58}{show[0]:>12}{show[1]:>12}{ratio:>10}  {direction}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", default=",".join(PARTS), help="comma separated: " + ", ".join(PARTS))
    ap.add_argument("--output", type=Path, default=Path("bench/results/compare.json"))
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds a part may take")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        ap.error(f"unknown parts: {', '.join(sorted(unknown))}")
    rounds: list[dict[str, dict[str, Any]]] = []
    for n in range(args.rounds):
        one: dict[str, dict[str, Any]] = {"base": {}, "new": {}}
        order = ("base", "new") if n % 2 == 0 else ("new", "base")
        for part in parts:
            for side in order:
                tree = args.base if side == "base" else args.new
                print(f"round {n + 1}/{args.rounds}: {part} in {side} ({tree})", file=sys.stderr, flush=True)
                try:
                    one[side][part] = run_part(tree, part, args.timeout)
                except subprocess.TimeoutExpired:
                    one[side][part] = {"error": f"timed out after {args.timeout:.0f} s"}
        rounds.append(one)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(rounds, indent=1) + "\n")
    for line in summary(rounds):
        print(line)
    for one in rounds:
        for side in ("base", "new"):
            for part, figures in one[side].items():
                if isinstance(figures, dict) and "error" in figures:
                    print(f"{side} {part}: {figures['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
