"""Where the CPU of one placement, of one submit and of one short job goes, on each process.

    .venv/bin/python bench/where_cpu_goes.py [--part placement|submit|htc|both|all] [--out DIR]

Placement: the fleet (bench/fleet.py: 500 simulated hosts x 40 slots, 20,000 one-slot jobs, TLS),
py-spy on every replica and the scheduler while the jobs are placed. Submit: 16 client processes
submitting one job per call for 10 s (bench/xce_bench.py's load), py-spy on every replica. For each
process: its CPU seconds over the operations done (microseconds an operation), split by what its
GIL-holding samples were doing (the rules below: the first that names a frame of a sample takes it).
A sample is the Python stack holding the GIL: C work done without it (TLS, LMDB's sync) shows in the
CPU figure, not in the split. py-spy (in the dev dependencies) must be allowed to read the processes
(root here). Short job (`--part htc`, not profiled): `make bench-htc`'s array (b), 500 `true` elements
on 2 workers of 4 slots, and each process's CPU over the elements (a worker's with its shims' and
its jobs', which its server of shims reaps), beside the whole machine's (/proc/stat). Prints tables;
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fleet  # noqa: E402
import htc as htc_bench  # noqa: E402
import xce_bench  # noqa: E402

from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers  # noqa: E402

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


def htc(elements: int = 500) -> str:
    with tempfile.TemporaryDirectory(prefix="xce-where-") as data:
        cluster = LocalCluster(Path(data) / "cluster")
        workers, scheduler = LocalWorkers(cluster), LocalScheduler(cluster)
        try:
            cluster.start()
            leader = cluster.leader()
            scheduler.start()
            for name in ("w1", "w2"):
                workers.start(name, 4)
            with cluster.client() as client:
                htc_bench.wait_hosts_ok(client, 2)
                roots = {("leader" if rid == leader else f"follower-{rid}"): p.pid
                         for rid, p in cluster.procs.items()}
                roots["scheduler"] = scheduler.pid()
                roots |= {f"worker {name}": proc.pid for name, proc in workers.procs.items()}
                own_before = {name: fleet.cpu_s(proc.pid) for name, proc in workers.procs.items()}
                before, machine = _tree_cpu(roots), _machine_cpu_s()
                _, took = htc_bench.run_array(client, elements, Path(data))
                cpu = {role: seconds - before[role] for role, seconds in _tree_cpu(roots).items()}
                for name, proc in workers.procs.items():  # the daemon apart from its shims and jobs
                    cpu[f"worker {name}: the daemon"] = fleet.cpu_s(proc.pid) - own_before[name]
                    cpu[f"worker {name}"] -= cpu[f"worker {name}: the daemon"]
                machine = _machine_cpu_s() - machine
        finally:
            scheduler.kill()
            workers.stop()
            cluster.stop()
    lines = [f"## One short job (an array of {elements:,} `true` on 2 x 4 slots, TLS: {elements / took:.1f} "
             f"jobs/s; the machine's CPU {machine / elements * 1000:.1f} ms a job)", "",
             "| process | CPU a job |", "|---|---|"]
    named = {role if not role.startswith("worker") or role.endswith("daemon") else
             f"{role}: its server of shims, shims and jobs": seconds for role, seconds in cpu.items()}
    lines += [f"| {role} | {seconds / elements * 1000:.2f} ms |" for role, seconds in sorted(named.items())]
    rest = machine - sum(cpu.values())
    lines.append(f"| the rest (kernel threads, this client, the processes of other work) | "
                 f"{rest / elements * 1000:.2f} ms |")
    return "\n".join(lines)


def _tree_cpu(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds of each process, its live descendants and the children they reaped."""
    def tree(pid: int) -> list[int]:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return [pid]
        return [pid, *(p for child in children for p in tree(int(child)))]

    return {role: sum(fleet.cpu_s(p, reaped=True) for p in tree(pid)) for role, pid in roots.items()}


def _machine_cpu_s() -> float:
    """CPU seconds the machine spent busy (all CPUs, /proc/stat)."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--part", choices=("placement", "submit", "htc", "both", "all"), default="both",
                    help="both: placement and submit; all: the three")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "xce-where-cpu-goes",
                    help="py-spy's raw stacks go here")
    args = ap.parse_args()
    if args.part in ("placement", "both", "all"):
        print(placement(args.out), end="\n\n", flush=True)
    if args.part in ("submit", "both", "all"):
        print(submit(args.out), end="\n\n", flush=True)
    if args.part in ("htc", "all"):
        print(htc(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
