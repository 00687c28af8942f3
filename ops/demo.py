"""`xce demo`: the whole story for a newcomer, end to end, in about a minute.

Starts a local cluster (three replicas, a scheduler, two workers) in a fresh
directory, submits short jobs, kills the leader with SIGKILL half-way, and
shows every job ending DONE exactly once (each job appends its id to a
ledger), with the failover time. Stops everything; exits 0 only if it all
held.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from client.channel import Client
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce.v1 import api_pb2 as api

HOSTS = "\n[hosts]\nheartbeat_s = 0.5\nheartbeat_timeout_s = 3\n"


def say(text: str) -> None:
    print(text, flush=True)


def run(jobs: int = 100, data: Path | None = None) -> int:
    own = data is None
    root = Path(tempfile.mkdtemp(prefix="xce-demo-")) if data is None else data
    cluster = LocalCluster(root / "cluster", extra_config=HOSTS)
    workers = LocalWorkers(cluster)
    scheduler = LocalScheduler(cluster)
    try:
        return _story(cluster, workers, scheduler, jobs, root)
    finally:
        scheduler.kill()
        workers.stop()
        cluster.stop()
        if own:
            shutil.rmtree(root, ignore_errors=True)
        say("xce demo: everything stopped")


def _story(cluster: LocalCluster, workers: LocalWorkers, scheduler: LocalScheduler, count: int,
           root: Path) -> int:
    cluster.start()
    leader = cluster.leader(timeout_s=30)
    scheduler.start()
    workers.start("node1", 4)
    workers.start("node2", 4)
    say(f"xce demo: 3 replicas up (replica {leader} leads), a scheduler, 2 workers of 4 slots")
    ledger = root / "ledger"
    script = f'echo "$XCE_JOB_ID" >> {ledger}; sleep 0.3'
    with cluster.client(deadline_s=60) as client:
        _until(lambda: sum(h.status == api.HOST_OK for h in client.list_hosts().hosts) == 2, 30)
        started = time.monotonic()
        ids = [j.id for j in client.submit([api.JobSpec(command=["sh", "-c", script], cwd=str(root),
                                                        name=f"demo-{i}") for i in range(count)]).jobs]
        say(f"xce demo: {count} jobs submitted")
        _until(lambda: _done(client, ids) >= count // 2, 120)
        leader = cluster.leader()
        say(f"xce demo: {_done(client, ids)} done; kill -9 the leader (replica {leader})")
        killed = time.monotonic()
        cluster.kill(leader)
        client.submit([api.JobSpec(command=["true"], cwd=str(root), name="after-failover")])
        failover_ms = 1000 * (time.monotonic() - killed)
        say(f"xce demo: a new leader committed a write {failover_ms:.0f} ms after the kill")
        _until(lambda: _done(client, ids) == count, 180)
        elapsed = time.monotonic() - started
        jobs = [j for j in client.list_jobs() if j.id in set(ids)]
    runs = Counter(ledger.read_text().split())
    once = all(runs[str(i)] == 1 for i in ids) and len(runs) == count
    hosts = Counter(j.host for j in jobs)
    say(f"xce demo: all {count} jobs DONE in {elapsed:.1f} s on {dict(hosts)}; "
        f"each ran exactly once: {once}")
    return 0 if once and all(j.state == api.DONE for j in jobs) else 1


def _done(client: Client, ids: list[int]) -> int:
    wanted = set(ids)
    return sum(1 for j in client.list_jobs(["state:eq:DONE"]) if j.id in wanted)


def _until(predicate: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"xce demo: timed out after {timeout_s:.0f} s")
        time.sleep(0.1)
