"""One client's one-job submits, back to back: the latency, and each replica thread's CPU a submit.

    .venv/bin/python bench/submit_path.py [--submits 3000] [--rounds 1]

A fresh local cluster (three replicas, TLS, a token), one client calling SubmitJobs with one job
a call (bench/xce_bench.py's spec, into a queue with no scheduler), the first 100 calls left out.
Each thread's CPU is read from /proc before and after (user and system apart), so what a thread
spends without the GIL (TLS, LMDB's writes and syncs) counts, and nothing is sampled. Prints the
p10/p50/p90 latency and, per replica (the leader first), each thread that used CPU (the main thread
runs the event loop; pysyncobj's tick thread and gRPC's are named by id); asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from xce_bench import job_spec  # noqa: E402

from ops.local_cluster import LocalCluster  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
WARM = 100


def stat_ticks(path: str) -> tuple[str, int, int]:
    """(name, user ticks, system ticks) of a /proc stat file: a thread's, or a whole process's
    (whose figures hold its ended threads too). The user and system split is what fleet.cpu_s,
    which sums them, leaves out."""
    stat = Path(path).read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return stat[stat.index("(") + 1:stat.rindex(")")], int(fields[11]), int(fields[12])


def threads_cpu(pid: int) -> dict[tuple[int, str], tuple[int, int]]:
    """(thread id, name) -> (user, system) ticks, for each thread of `pid`."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name, user, system = stat_ticks(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue  # ended meanwhile
        out[(int(tid), name)] = (user, system)
    return out


def process_cpu(pid: int) -> tuple[int, int]:
    """(user, system) ticks of the whole process, threads that ended included."""
    _, user, system = stat_ticks(f"/proc/{pid}/stat")
    return user, system


def one_round(submits: int) -> str:
    with tempfile.TemporaryDirectory(prefix="xce-submit-path-") as work:
        cluster = LocalCluster(Path(work) / "cluster", 3)
        try:
            cluster.start()
            leader = cluster.leader()
            with cluster.client() as client:
                spec = job_spec()
                spec.queue = "idle"
                for _ in range(WARM):
                    client.submit([spec])
                pids = {rid: proc.pid for rid, proc in cluster.procs.items()}
                before = {rid: threads_cpu(pid) for rid, pid in pids.items()}
                whole_before = {rid: process_cpu(pid) for rid, pid in pids.items()}
                latency = []
                for _ in range(submits):
                    started = time.perf_counter()
                    client.submit([spec])
                    latency.append((time.perf_counter() - started) * 1000)
                after = {rid: threads_cpu(pid) for rid, pid in pids.items()}
                whole_after = {rid: process_cpu(pid) for rid, pid in pids.items()}
        finally:
            cluster.stop()
    latency.sort()
    lines = [f"{submits} one-job submits, one client: latency p10 {latency[len(latency) // 10]:.2f} ms, "
             f"p50 {latency[len(latency) // 2]:.2f} ms, p90 {latency[len(latency) * 9 // 10]:.2f} ms",
             "", "| replica | thread | user us a submit | system us a submit |", "|---|---|---|---|"]
    for rid in sorted(pids, key=lambda r: r != leader):
        totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for key, (user_ticks, system_ticks) in after[rid].items():
            was = before[rid].get(key, (0, 0))
            row = totals["main: the event loop" if key[0] == pids[rid] else f"{key[1]} ({key[0]})"]
            row[0] += (user_ticks - was[0]) / TICK / submits * 1e6
            row[1] += (system_ticks - was[1]) / TICK / submits * 1e6
        role = "leader" if rid == leader else "follower"
        used = sorted(((n, u, s) for n, (u, s) in totals.items() if u + s >= 5), key=lambda r: -(r[1] + r[2]))
        for name, user, system in used:
            lines.append(f"| {rid} ({role}) | {name} | {user:.0f} | {system:.0f} |")
        whole = [(a - b) / TICK / submits * 1e6
                 for a, b in zip(whole_after[rid], whole_before[rid], strict=True)]
        lines.append(f"| {rid} ({role}) | the process (threads that ended too) | {whole[0]:.0f} | "
                     f"{whole[1]:.0f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--submits", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    for number in range(args.rounds):
        print(f"## Round {number + 1}\n\n{one_round(args.submits)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
