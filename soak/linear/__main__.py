"""`python -m soak.linear check HISTORY.jsonl`: is the soak's client history linearizable?

Prints `linearizable: yes|no|unknown`, the counts and the time; writes
DIR/linear.json and, on a violation, DIR/violation.html and DIR/violation.png.
Exit status 0 (yes), 1 (no), 2 (unknown: the time budget ran out).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soak.linear import history, jobs_model, kv_model, render
from soak.linear.checker import ILLEGAL, OK, Model, Operation, Result, check

ANSWER = {OK: "yes", ILLEGAL: "no"}


def model_and_operations(name: str, recorded: Sequence[history.Op]) -> tuple[Model, list[Operation]]:
    if name == "kv":
        return kv_model.KvModel(), kv_model.kv_operations(recorded)
    return jobs_model.JobsModel(), jobs_model.operations(recorded)


def report(model: Model, result: Result) -> dict[str, Any]:
    def described(ops: Sequence[Operation]) -> list[dict[str, Any]]:
        return [{"index": op.index, "client": op.client,
                 "what": model.describe_operation(op.input, op.output), "input": op.input,
                 "output": op.output, "call": op.call,
                 "ret": None if op.unknown else op.ret} for op in ops]

    return {"linearizable": ANSWER.get(result.verdict, "unknown"), "operations": result.operations,
            "partitions": result.partitions, "timed_out_partitions": result.timed_out_partitions,
            "elapsed_s": round(result.elapsed_s, 3), "failing": described(result.failing),
            "linearization": described(result.linearization), "reduced_fully": result.reduced_fully,
            "failing_partition_size": len(result.failing_partition)}


def check_history(recorded: Sequence[history.Op], out: Path, title: str, budget_s: float = 600.0,
                  model_name: str = "jobs") -> dict[str, Any]:
    """Check a history; write out/linear.json, and on a violation out/violation.html and .png."""
    model, ops = model_and_operations(model_name, recorded)
    result = check(model, ops, budget_s=budget_s)
    out.mkdir(parents=True, exist_ok=True)
    summary = report(model, result)
    (out / "linear.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    if result.verdict == ILLEGAL:
        render.render(model, result.failing_partition, result.failing, result.linearization, out, title)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m soak.linear", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    checking = sub.add_parser("check", help="check a history file (JSON lines, soak/linear/history.py)")
    checking.add_argument("history", type=Path)
    checking.add_argument("--model", choices=("jobs", "kv"), default="jobs")
    checking.add_argument("--out", type=Path, default=Path("linear-out"))
    checking.add_argument("--budget-s", type=float, default=600.0, help="time for the search (then: unknown)")
    args = ap.parse_args(argv)
    recorded = history.load(args.history)
    summary = check_history(recorded, args.out, f"{args.history.name}: not linearizable", args.budget_s,
                            args.model)
    print(f"linearizable: {summary['linearizable']}")
    print(f"operations: {len(recorded)} recorded, {summary['operations']} checked in {summary['partitions']} "
          f"partitions ({summary['timed_out_partitions']} timed out); {summary['elapsed_s']:.2f} s")
    if summary["linearizable"] == "no":
        print(f"violation: {len(summary['failing'])} operations (of a partition of "
              f"{summary['failing_partition_size']}); {args.out}/violation.html, {args.out}/violation.png")
        for op in summary["failing"]:
            print(f"  #{op['index']} {op['client']}: {op['what']}")
    return {"yes": 0, "no": 1}.get(summary["linearizable"], 2)


if __name__ == "__main__":
    sys.exit(main())
