"""Where the CPU of one placement and of one submit goes, on each process.

    .venv/bin/python bench/where_cpu_goes.py [--part placement|submit|both] [--out DIR]

Placement: the fleet (bench/fleet.py: 500 simulated hosts x 40 slots, 20,000 one-slot jobs, TLS),
py-spy on every replica and the scheduler while the jobs are placed. Submit: 16 client processes
submitting one job per call for 10 s (bench/xce_bench.py's load), py-spy on every replica. For each
process: its CPU seconds over the operations done (microseconds an operation), split by what its
GIL-holding samples were doing (the rules below: the first that names a frame of a sample takes it).
A sample is the Python stack holding the GIL: C work done without it (TLS, LMDB's sync) shows in the
CPU figure, not in the split. py-spy (in the dev dependencies) must be allowed to read the processes
(root here). Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fleet  # noqa: E402
import xce_bench  # noqa: E402

from ops.local_cluster import LocalCluster  # noqa: E402

# (what, any of these in a sample's frames): the first rule that matches takes the sample.
RULES: list[tuple[str, tuple[str, ...]]] = [
    ("apply: DISPATCH decisions", ("apply_decisions",)),
    ("apply: workers' reports", ("apply_reports",)),
    ("apply: submits", ("apply_submit",)),
    ("apply: other entries", ("StateStore.apply",)),
    ("worker sessions (RunJob, acks, routing)", ("WorkerSession", "Workers.", "worker_session",
                                                 "_read_worker", "worker_connect", "worker_wire")),
    ("Sync stream to the scheduler", ("sync_stream", "_Services.sync", "SyncFeed")),
    ("Raft: entries sent, received, committed", ("syncobj.py", "raft_transport", "raft_append", "raft_wal",
                                                "tcp_connection", "poller.py", "raft_connection")),
    ("client requests: gRPC handlers, checks, proposals", ("_unary", "handlers.<locals>", "group_commit",
                                                           "proposals.py", "authn", "authz")),
    ("scheduler: the pass", ("run_pass",)),
    ("scheduler: view (events applied)", ("view.py",)),
    ("scheduler: decisions sent, outcomes read", ("decider.py", "planner.py")),
    ("gRPC, asyncio, threads (the rest)", ("",)),
]


def split(raw: Path) -> tuple[int, Counter[str]]:
    """(samples, samples per rule) of a py-spy raw file."""
    shares: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        total += int(count)
        shares[next(name for name, keys in RULES if any(k in stack for k in keys))] += int(count)
    return total, shares


def table(title: str, cpu_s: dict[str, float], operations: int, raws: Path) -> str:
    lines = [f"## {title}: {operations:,} operations", "",
             "| process | CPU per operation | what its GIL-holding samples were doing |", "|---|---|---|"]
    for role, seconds in sorted(cpu_s.items()):
        raw = raws / f"{role}.txt"
        per_op_us = seconds / operations * 1e6
        if not raw.exists():
            lines.append(f"| {role} | {per_op_us:.0f} us | (not profiled) |")
            continue
        total, shares = split(raw)
        parts = ", ".join(f"{name} {100 * n / total:.0f} % ({per_op_us * n / total:.0f} us)"
                          for name, n in shares.most_common() if n / total >= 0.02)
        lines.append(f"| {role} | {per_op_us:.0f} us | {parts} |")
    return "\n".join(lines)


def placement(out: Path) -> str:
    result = fleet.run(500, 40, 20_000, 0, profile=out / "placement")
    cpu = {role: float(s) for role, s in result["cpu_s_during_placement"].items()}
    return table(f"One placement (fleet, 500 x 40, TLS; {result['placements_per_s']:,} placements/s "
                 "while profiled)", cpu, result["jobs"], out / "placement")


def submit(out: Path, seconds: float = 10.0) -> str:
    raws = out / "submit"
    raws.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xce-where-") as data:
        cluster = LocalCluster(Path(data))
        try:
            cluster.start()
            leader = cluster.leader()
            roles = {("leader" if rid == leader else f"follower-{rid}"): p.pid
                     for rid, p in cluster.procs.items()}
            before = {role: fleet.cpu_s(pid) for role, pid in roles.items()}
            spies = fleet._profile(raws, roles, int(seconds))
            started = time.monotonic()
            load = xce_bench.throughput(cluster, 16, seconds, 100_000)
            cpu = {role: fleet.cpu_s(pid) - before[role] for role, pid in roles.items()}
            for spy in spies:
                spy.wait(timeout=60)
            elapsed = time.monotonic() - started
        finally:
            cluster.stop()
    return table(f"One submit (16 client processes, one job a call, TLS and tokens; {load.per_second:,.0f} "
                 f"submits/s while profiled, {elapsed:.0f} s)", cpu, load.ops, raws)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--part", choices=("placement", "submit", "both"), default="both")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "xce-where-cpu-goes",
                    help="py-spy's raw stacks go here")
    args = ap.parse_args()
    if args.part in ("placement", "both"):
        print(placement(args.out), end="\n\n", flush=True)
    if args.part in ("submit", "both"):
        print(submit(args.out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
