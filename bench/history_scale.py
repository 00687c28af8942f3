"""Scale of the state: 1,000,000 finished jobs in history, 110,000 live ones (100,000 pending) and
10,000 hosts on a real cluster.

`.venv/bin/python bench/history_scale.py [--finished 1000000 --live 110000 --running 10000
--hosts 10000]`
(also `make bench-scale`). The state is built once by the real apply (bench/big_state.py;
cached under --work, about 3 minutes the first time) and every replica of a fresh
three-replica LocalCluster starts from it as from a Raft snapshot. Then, on that cluster:

- the CLI, as a user runs it: `xce history --user u3` (its first 1,000), `xce jobs --state RUN`,
  `xce acct`: wall time of the whole command, best and median of 5;
- ListJobs with a filter (one page of 500: state RUN, user u1, queue idle), ListHistory by
  user, p50/p99 of 50 calls through one client;
- each replica's RSS, the state's and the snapshot's size;
- a snapshot install: a follower's data wiped, the time until it has caught up again;
- compactions at this size: `[raft] compaction_min_entries` is set low, writes make every
  replica snapshot the whole state; the term must not move (the copy runs off the tick thread);
- committed submits/s (16 clients, one job a call) on clusters started from the state and on
  empty ones, alternately (`--write-rounds`), with the leader's RSS: the ratio is the speed target's
  "within 10 % of an empty cluster's";
- the scheduler's pass on 100,000 pending jobs and 10,000 hosts (bench/scheduler_pass.py: scale),
  pure, as the daemon runs it.

Prints figures and one JSON line; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import big_state  # noqa: E402
import scheduler_pass  # noqa: E402
import xce_bench  # noqa: E402

from client.channel import Client  # noqa: E402
from ops.local_cluster import LocalCluster  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

COMPACT_EVERY = 300


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cli_s(cluster: LocalCluster, *args: str, runs: int = 5) -> dict[str, float]:
    env = {**os.environ, "XCE_DATA": str(cluster.data)}
    env.pop("XCE_CONTROLLERS", None)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, env=env,
                              timeout=120)
        times.append(time.perf_counter() - started)
        assert done.returncode == 0, done.stderr
    lines = done.stdout.count(b"\n")
    return {"best_s": round(min(times), 3), "median_s": round(statistics.median(times), 3), "lines": lines}


def calls_ms(call: object, n: int = 50) -> dict[str, float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        call()  # type: ignore[operator]
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"p50_ms": round(times[len(times) // 2], 1), "p99_ms": round(times[min(n - 1, int(n * 0.99))], 1)}


def writes_beside_empty(built: big_state.Built, clients: int, seconds: float,
                        rounds: int) -> dict[str, object]:
    """Committed submits/s (`clients` processes, one job a call, bench/xce_bench.py's load) on a cluster
    started from the built state and on an empty one, alternately, each round on fresh clusters of
    the default configuration (the compaction above is set to run every few hundred entries); the
    leader's RSS after each. The ratio of the medians: "within 10 % of an empty cluster's"."""
    figures: dict[str, list[float]] = {"empty": [], "scale": []}
    rss: dict[str, list[float]] = {"empty": [], "scale": []}
    for _ in range(rounds):
        for kind in ("empty", "scale"):
            home = Path(tempfile.mkdtemp(prefix="xce-scale-writes-"))
            cluster = LocalCluster(home / "cluster")
            try:
                if kind == "scale":
                    big_state.seed(cluster, built)
                cluster.start()
                leader = cluster.leader(timeout_s=600)
                load = xce_bench.throughput(cluster, clients, seconds, max_ops=1_000_000)
                figures[kind].append(round(load.per_second, 1))
                rss[kind].append(round(rss_mb(cluster.procs[cluster.leader()].pid)))
                print(f"writes, {kind}: {load.per_second:.0f} submits/s ({clients} clients), leader "
                      f"{leader} RSS {rss[kind][-1]} MB", file=sys.stderr)
            finally:
                cluster.stop()
                shutil.rmtree(home, ignore_errors=True)
    empty, scale = statistics.median(figures["empty"]), statistics.median(figures["scale"])
    return {"clients": clients, "seconds": seconds, "submits_per_s": figures, "leader_rss_mb": rss,
            "scale_over_empty": round(scale / empty, 3) if empty else None}


RSS_TARGET_MB = 2048  # a replica's, at 10,000 hosts and 100,000 pending
WRITES_TARGET = 0.9  # submits/s at this size over an empty cluster's ("within 10 %")


def targets(results: dict[str, Any]) -> str:
    """The scale targets beside the figures (bench/README.md)."""
    rss = max([*results["replica_rss_mb"].values(), *results.get("replica_rss_mb_after", {}).values()])
    writes = results["writes"]["scale_over_empty"]
    passed = results["pass_at_scale"]
    lines = [f"replica RSS at most {rss} MB (target <= {RSS_TARGET_MB} MB: {_met(rss <= RSS_TARGET_MB)})",
             f"submits/s here over an empty cluster's: {writes} (target >= {WRITES_TARGET}: "
             f"{_met(writes is not None and writes >= WRITES_TARGET)})"]
    if "pass_s_median" in passed:
        took, most = passed["pass_s_median"], passed["target_s"]
        lines.append(f"the pass at {passed['jobs']:,} pending x {passed['hosts']:,} hosts: {took} s "
                     f"(target <= {most} s: {_met(took <= most)})")
    return "\n".join(lines)


def _met(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=110_000)
    parser.add_argument("--running", type=int, default=10_000)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--write-clients", type=int, default=16)
    parser.add_argument("--write-seconds", type=float, default=10.0)
    parser.add_argument("--write-rounds", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "xce-big-state")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="xce-scale-"))
    cluster = LocalCluster(home / "cluster",
                           extra_config=f"\n[raft]\ncompaction_min_entries = {COMPACT_EVERY}\n")
    results: dict[str, object] = {"finished": args.finished, "live": args.live, "running": args.running,
                                  "hosts": args.hosts}
    try:
        started = time.perf_counter()
        print(f"building the state ({args.finished:,} finished, {args.live:,} live) under {args.work} ...",
              file=sys.stderr)
        args.work.mkdir(parents=True, exist_ok=True)
        built = big_state.build(args.work, cluster.config.cluster_id, list(cluster.config.queues),
                                args.finished, args.live, args.running, progress=True, hosts=args.hosts)
        results["build_s"] = round(time.perf_counter() - started, 1)
        results["snapshot_mb"] = round(built.snapshot.stat().st_size / 2**20)
        big_state.seed(cluster, built)
        started = time.perf_counter()
        cluster.start()
        leader = cluster.leader(timeout_s=600)
        results["start_from_snapshot_s"] = round(time.perf_counter() - started, 1)
        results["state_mb"] = round((cluster.config.replica_dir(leader) / "state" / "data.mdb").stat().st_size
                                    / 2**20)
        results["replica_rss_mb"] = {r: round(rss_mb(p.pid)) for r, p in cluster.procs.items()}
        print("cluster up; timing queries", file=sys.stderr)
        results["cli"] = {
            "xce history --user u3": cli_s(cluster, "history", "--user", "u3"),
            "xce jobs --state RUN": cli_s(cluster, "jobs", "--state", "RUN"),
            "xce acct": cli_s(cluster, "acct"),
        }
        with Client(cluster.addresses, cluster.credentials) as client:
            def page(*filters: str) -> object:
                return lambda: client.call("JobService", "ListJobs", api.ListJobsRequest(
                    filters=list(filters), page_size=500), api.ListJobsResponse)

            results["list_jobs_one_page"] = {
                "state:eq:RUN": calls_ms(page("state:eq:RUN")),
                "user:eq:u1": calls_ms(page("user:eq:u1")),
                "queue:eq:idle": calls_ms(page("queue:eq:idle")),
            }
            by_user = api.HistoryRequest(user="u3", page_size=500)
            results["history_one_page"] = {"user u3": calls_ms(lambda: client.call(
                "JobService", "ListHistory", by_user, api.HistoryResponse))}
            term = client.status().replicas[0].term
            # A snapshot install: a follower loses its data and catches up from the leader.
            follower = next(r.id for r in cluster.config.replicas if r.id != cluster.leader())
            cluster.kill(follower)
            shutil.rmtree(cluster.config.replica_dir(follower))
            target = client.submit([api.JobSpec(command=["true"])]).revision
            started = time.perf_counter()
            cluster.start([follower])
            while True:
                with Client([cluster.address(follower)], cluster.credentials, follow_leader=False) as one:
                    try:
                        if one.status(local_only=True).replicas[0].applied_index >= target:
                            break
                    except Exception:  # noqa: BLE001 - not up yet
                        pass
                time.sleep(0.2)
            results["snapshot_install_s"] = round(time.perf_counter() - started, 1)
            cluster.leader(timeout_s=120)
            term = max(s.term for s in client.status().replicas)
            # Compactions of the whole state on every replica: writes past compaction_min_entries.
            for _ in range(COMPACT_EVERY * 2):
                client.submit([api.JobSpec(command=["true"])])
            deadline = time.monotonic() + 600
            pattern = re.compile(r"Raft snapshot at entry \d+ written in ([\d.]+) s")
            while time.monotonic() < deadline:
                copies = [float(m) for r in cluster.config.replicas
                          for m in pattern.findall((cluster.data / f"replica-{r.id}.log").read_text())]
                if len(copies) >= 3:
                    break
                time.sleep(0.5)
            results["compactions"] = {"copies_s": copies, "term_before": term,
                                      "term_after": max(s.term for s in client.status().replicas)}
            results["replica_rss_mb_after"] = {r: round(rss_mb(p.pid)) for r, p in cluster.procs.items()}
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)
    results["writes"] = writes_beside_empty(built, args.write_clients, args.write_seconds, args.write_rounds)
    print("timing the scheduler's pass at 10,000 hosts and 100,000 pending jobs", file=sys.stderr)
    results["pass_at_scale"] = scheduler_pass.scale()
    print(json.dumps(results, indent=2))
    print(targets(results))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
