"""`make bench`: XCE's committed submit rate and failover time, beside etcd's.

Prints a table and, last, one JSON line with every figure; the same JSON goes
to bench/results/latest.json. It reports, it never asserts: a part that fails
is reported as an error and the other figures are still printed.
See bench/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import alloc_pass
import arbitration_pass
import etcd_bench
import fleet
import gateway_bench
import preempt_latency
import published_figures
import scheduler_pass
import sim_speed
import xce_bench

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each load level")
    ap.add_argument("--clients", default="1,16", help="client process counts, comma separated")
    ap.add_argument("--max-ops", type=int, default=100_000, help="cap on operations per client")
    ap.add_argument("--kills", type=int, default=10, help="leader kills per system (0: none)")
    ap.add_argument("--bulk", type=int, default=10,
                    help="jobs per request of the extra bulk-submit level (1: skip it)")
    ap.add_argument("--no-etcd", action="store_true", help="skip the etcd comparison")
    ap.add_argument("--fleet", default="500x40:20000",
                    help="simulated fleet HOSTSxSLOTS:JOBS for the placement benchmark ('' to skip)")
    ap.add_argument("--fleet-kills", type=int, default=10,
                    help="leader kills under the fleet's load (the target is a p99 over 10)")
    ap.add_argument("--no-plaintext", action="store_true",
                    help="skip the comparison with plaintext gRPC (TLS off; tokens are checked either way)")
    ap.add_argument("--output", type=Path, default=RESULTS, help="where the JSON goes")
    return ap.parse_args(argv)


def code_version() -> str:
    """HEAD, plus '+dirty' if code outside bench/ differs from it: the figures
    belong to the code that was on disk, and replicas restarted mid-run load it anew."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, timeout=10).stdout.strip()
        status = ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench"]
        dirty = subprocess.run(status, cwd=REPO, text=True, capture_output=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (head or "?") + ("+dirty" if dirty else "")


def guarded(part: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one part; an exception becomes {"error": ...} so the rest still reports."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        traceback.print_exc(file=sys.stderr)
        return {"error": f"{part} failed: {type(exc).__name__}: {exc}"}


WRITE_TARGETS = {16: 1.0, 1: 0.5}  # committed submits/s against etcd's, by client processes


def ratios(xce: dict[str, Any], etcd: dict[str, Any], levels: Sequence[int]) -> dict[str, Any]:
    """XCE/etcd: above 1 means XCE is faster for throughput, slower for failover."""
    out: dict[str, Any] = {}
    for clients in levels:
        out[f"throughput_{clients}c"] = _ratio(_get(xce, "throughput", str(clients), "per_s"),
                                                _get(etcd, "throughput", str(clients), "per_s"))
    out["failover_p99"] = _ratio(_get(xce, "failover", "p99_ms"), _get(etcd, "failover", "p99_ms"))
    return out


def _get(tree: dict[str, Any], *keys: str) -> float | None:
    node: Any = tree
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return float(node) if isinstance(node, int | float) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def table(report: dict[str, Any], levels: Sequence[int]) -> str:
    xce, etcd = report["xce"], report["etcd"]
    rows = [row for c in levels for row in _load_rows(report, c)]
    rows += _bulk_rows(report) + _failover_rows(report)
    lines = [f"{'':38}{'XCE':>10}{'etcd':>10}{'XCE/etcd':>10}"]
    lines += [f"{name:38}{_fmt(a):>10}{_fmt(b):>10}{_fmt(r, 2):>10}" for name, a, b, r in rows]
    for part, tree in (("XCE", xce), ("etcd", etcd)):
        for key in ("error", "skipped"):
            if key in tree:
                lines.append(f"{part} {key}: {tree[key]}")
    return "\n".join(lines)


Row = tuple[str, float | None, float | None, float | None]  # name, XCE, etcd, ratio


def _load_rows(report: dict[str, Any], clients: int) -> list[Row]:
    xce, etcd, n = report["xce"], report["etcd"], str(clients)
    label = f"{clients} client{'s' if clients != 1 else ''}"
    rows: list[Row] = [(f"writes/s, {label}", _get(xce, "throughput", n, "per_s"),
                        _get(etcd, "throughput", n, "per_s"),
                        report["ratios"].get(f"throughput_{clients}c"))]
    for key, name in (("p50_ms", "p50 latency ms"), ("p99_ms", "p99 latency ms"),
                      ("errors", "errors")):
        rows.append((f"  {name}, {label}", _get(xce, "throughput", n, key),
                     _get(etcd, "throughput", n, key), None))
    return rows


def _bulk_rows(report: dict[str, Any]) -> list[Row]:
    bulk = report["xce"].get("bulk")
    if not bulk:
        return []
    label = f"{bulk['clients']} clients x {bulk['jobs_per_request']} jobs/request"
    return [(f"jobs/s, {label}", bulk["jobs_per_s"], None, None),
            ("  p99 request latency ms", bulk.get("p99_ms"), None, None)]


def _failover_rows(report: dict[str, Any]) -> list[Row]:
    xce, etcd = report["xce"], report["etcd"]
    kills = _get(xce, "failover", "kills") or _get(etcd, "failover", "kills") or 0
    return [(f"failover {stat} ms ({kills:.0f} kills)", _get(xce, "failover", f"{stat}_ms"),
             _get(etcd, "failover", f"{stat}_ms"),
             report["ratios"].get("failover_p99") if stat == "p99" else None)
            for stat in ("p50", "p99", "max")]


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or math.isnan(value):
        return "-"
    if digits == 1 and (value.is_integer() or value >= 100):  # counts, rates: decimals are noise
        digits = 0
    return f"{value:,.{digits}f}"


def plaintext(args: argparse.Namespace, levels: Sequence[int]) -> dict[str, Any]:
    """The same loads over plaintext gRPC ([tls] insecure = true): what TLS costs (target: with it,
    >= 0.9x of these). Authentication stays on: a token check is a SHA-256 and one LMDB read."""
    out: dict[str, Any] = {"xce": guarded("XCE plaintext", lambda: xce_bench.run(
        levels, args.seconds, args.max_ops, 0, args.bulk, insecure=True))}
    if args.fleet:
        shape, jobs = args.fleet.split(":")
        hosts, slots = shape.split("x")
        out["fleet"] = guarded("fleet plaintext", lambda: fleet.run(int(hosts), int(slots), int(jobs), 0,
                                                                    insecure=True))
    return out


def security_table(report: dict[str, Any], levels: Sequence[int]) -> str:
    plain, tls = report["plaintext"], report["xce"]
    rows = [(f"submits/s, {c} client{'s' if c != 1 else ''}", _get(tls, "throughput", str(c), "per_s"),
             _get(plain["xce"], "throughput", str(c), "per_s")) for c in levels]
    rows.append(("bulk jobs/s", _get(tls, "bulk", "jobs_per_s"), _get(plain["xce"], "bulk", "jobs_per_s")))
    rows.append(("fleet placements/s", _get(report.get("fleet", {}), "placements_per_s"),
                 _get(plain.get("fleet", {}), "placements_per_s")))
    lines = [f"{'':38}{'TLS':>10}{'plaintext':>10}{'ratio':>10}   (target >= 0.9)"]
    lines += [f"{name:38}{_fmt(a):>10}{_fmt(b):>10}{_fmt(_ratio(a, b), 2):>10}" for name, a, b in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop both clusters.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args(argv)
    levels = [int(c) for c in args.clients.split(",")]
    report: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "code": code_version(),
        "settings": {"seconds": args.seconds, "clients": levels, "max_ops_per_client": args.max_ops,
                     "kills": args.kills, "bulk_jobs_per_request": args.bulk},
    }
    print(f"# XCE bench: {levels} client processes, {args.seconds:g} s per level, "
          f"{args.kills} leader kills, {os.cpu_count()} CPUs", file=sys.stderr, flush=True)
    report["xce"] = guarded("XCE", lambda: xce_bench.run(levels, args.seconds, args.max_ops,
                                                         args.kills, args.bulk))
    if args.no_etcd:
        report["etcd"] = {"skipped": "--no-etcd"}
    else:
        report["etcd"] = guarded("etcd", lambda: etcd_bench.run(levels, args.seconds, args.max_ops,
                                                               args.kills))
    report["ratios"] = ratios(report["xce"], report["etcd"], levels)
    report["scheduler_pass"] = guarded("scheduler pass", scheduler_pass.run)
    report["alloc_pass"] = guarded("allocation pass", alloc_pass.run)
    report["arbitration_pass"] = guarded("arbitration pass", arbitration_pass.run)
    report["preempt_latency"] = guarded("preemption latency", preempt_latency.run)
    report["published_figures"] = [guarded(f"published figures, {name} {mode}",
                                           functools.partial(published_figures.run, name, mode))
                                   for name in ("lublin_256.swf", "lublin_256_new2.swf")
                                   for mode in ("none", "end_before")]
    report["sim_speed"] = guarded("simulation speed", sim_speed.run)
    report["gateway"] = guarded("gateway", lambda: gateway_bench.run(args.seconds))
    if args.fleet:
        shape, jobs = args.fleet.split(":")
        hosts, slots = shape.split("x")
        report["fleet"] = guarded("fleet", lambda: fleet.run(int(hosts), int(slots), int(jobs),
                                                             args.fleet_kills))
        # The same fleet with -R requirements on every job, attributes and load on every host (A1-A3).
        report["fleet_requirements"] = guarded("fleet with requirements", lambda: fleet.run(
            int(hosts), int(slots), int(int(hosts) * int(slots) * 0.9), 0, requirements=True))
    if not args.no_plaintext:
        report["plaintext"] = plaintext(args, levels)
    print_summary(report, args, levels)
    if code_version() != report["code"]:
        report["code_after"] = code_version()
        print(f"warning: the code changed during the run ({report['code']} -> "
              f"{report['code_after']}); figures may mix versions")
    line = json.dumps(report, separators=(",", ":"))
    print(line, flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def print_summary(report: dict[str, Any], args: argparse.Namespace, levels: list[int]) -> None:
    print(f"XCE code {report['code']}, {os.cpu_count()} CPUs, {args.seconds:g} s per level")
    print(table(report, levels))
    for clients, target in WRITE_TARGETS.items():  # the speed targets beside etcd (bench/README.md)
        ratio = report["ratios"].get(f"throughput_{clients}c")
        if ratio is not None:
            print(f"writes/s, {clients} client{'s' if clients != 1 else ''}: {ratio:.2f}x etcd (target >= "
                  f"{target}x: {'met' if ratio >= target else 'NOT met'})")
    print_passes(report)
    for figures in report["published_figures"]:
        if "bsld" in figures:
            print(f"published figures, {figures['trace']} backfill={figures['backfill']}: bsld "
                  f"{figures['bsld']} (published {figures['published']}, off {figures['off_pct']} %), "
                  f"{figures['jobs_per_s']} jobs/s")
    if "traces" in report["sim_speed"]:
        print("\n".join(sim_speed.summary(report["sim_speed"])))
    if "rest" in report["gateway"]:
        print(gateway_bench.summary(report["gateway"]))
    if "placements_per_s" in report.get("fleet", {}):
        print(fleet.summary(report["fleet"]))
    if "placements_per_s" in report.get("fleet_requirements", {}):
        print(fleet.summary(report["fleet_requirements"]).splitlines()[0])
    if "plaintext" in report:
        print(security_table(report, levels))
    for kind, load in report["xce"].get("reads", {}).items():
        print(f"GetJob, {max(levels)} clients, {kind}: {load.get('per_s')} reads/s, "
              f"p50 {load.get('p50_ms')} ms, p99 {load.get('p99_ms')} ms")


def print_passes(report: dict[str, Any]) -> None:
    sched = report["scheduler_pass"]
    if "pass_s_median" in sched:
        print(f"scheduler pass, {sched['jobs']:,} pending jobs on {sched['hosts']:,} hosts: "
              f"{sched['pass_s_median']} s median (target <= {sched['target_s']} s; "
              f"{sched['cold_s_median']} s making the hosts' states; the pass after it, "
              f"{sched['next_pass_jobs']:,} jobs waiting on full hosts: {sched['next_pass_s_median']} s)")
    alloc = report["alloc_pass"]
    if "pass_s_median" in alloc:
        print(f"allocation pass (select, ptile, 64-slot jobs), {alloc['jobs']:,} pending jobs on "
              f"{alloc['hosts']:,} hosts half full: {alloc['pass_s_median']} s median, "
              f"{alloc['dispatched']:,} dispatched ({alloc['multi_host']:,} over several hosts), "
              f"{alloc['reasons']:,} reasons "
              f"(target <= {alloc['target_s']} s)")
    arb = report["arbitration_pass"]
    if "pass_s_median" in arb:
        print(f"arbitration pass (fair share, 30 % preemptable, a limit per user), {arb['jobs']:,} pending "
              f"jobs on {arb['hosts']:,} hosts: {arb['pass_s_median']} s median, {arb['preemptions']} "
              f"preemptions (target <= {arb['target_s']} s)")
    latency = report["preempt_latency"]
    if "running_ms_p50" in latency:
        print(f"preemption latency: submit -> victims suspended p50 {latency['suspended_ms_p50']} ms, p99 "
              f"{latency['suspended_ms_p99']} ms; -> preemptor running p50 {latency['running_ms_p50']} ms, "
              f"p99 {latency['running_ms_p99']} ms")


if __name__ == "__main__":
    sys.exit(main())
