"""`make demo`: a local three-replica cluster with two workers doing real work.

Starts three real controller processes and two workers under ./xce-data/demo
(fresh each run), submits jobs through the `xce` CLI and the client library,
controls a few, force-runs some on the workers (like `brun`; the scheduler
arrives with its own issue), kills the leader with SIGKILL while they run,
shows that every job is still there, that the running ones finish exactly
once and that writes go on, restarts the replica, and stops everything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from xce.local_cluster import LocalCluster, LocalWorkers
from xce.v1 import api_pb2 as api

DATA = Path("xce-data/demo").resolve()


def xce(*args: str) -> str:
    env = {**os.environ, "XCE_DATA": str(DATA)}
    print(f"$ xce {' '.join(args)}", flush=True)
    result = subprocess.run([sys.executable, "-m", "xce.cli", *args], env=env, text=True,
                            capture_output=True, timeout=60)
    print(result.stdout + result.stderr, end="", flush=True)
    if result.returncode != 0:
        raise SystemExit(f"demo: `xce {' '.join(args)}` failed with {result.returncode}")
    return result.stdout


def xce_quiet(*args: str) -> str:
    env = {**os.environ, "XCE_DATA": str(DATA)}
    return subprocess.run([sys.executable, "-m", "xce.cli", *args], env=env, text=True,
                          capture_output=True, timeout=60).stdout


def _wait(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("demo: timed out waiting")
        time.sleep(0.2)


def main() -> int:
    shutil.rmtree(DATA, ignore_errors=True)
    cluster = LocalCluster(DATA, extra_config="\n[hosts]\nheartbeat_s = 0.5\nheartbeat_timeout_s = 3\n")
    workers = LocalWorkers(cluster)
    try:
        cluster.start()
        leader = cluster.leader(timeout_s=30)
        workers.start("node1", 4)
        workers.start("node2", 4)
        print(f"== three replicas and two workers up under {DATA}; replica {leader} leads\n")
        xce("status")
        xce("queues")
        _wait(lambda: len(xce_quiet("hosts").splitlines()) == 3)
        xce("hosts")
        print("\n== submitting jobs")
        xce("submit", "-J", "hello", "-q", "priority", "--", "echo", "hello")
        with cluster.client() as client:
            specs = [api.JobSpec(command=["sleep", str(i % 5 + 1)], name=f"batch-{i}", priority=i % 3)
                     for i in range(200)]
            started = time.monotonic()
            for i in range(0, 200, 20):
                client.submit(specs[i:i + 20])
            print(f"   200 more jobs in 10 requests: {time.monotonic() - started:.2f} s")
        xce("jobs", "--filter", "id:le:5")
        xce("hold", "2")
        xce("modify", "3", "--priority", "50")
        xce("kill", "4")
        xce("job", "2")

        print("\n== force-run 8 jobs on the two workers (like brun), each appends a line to a ledger")
        ledger = DATA / "ledger"
        with cluster.client() as client:
            script = f'echo "$XCE_JOB_ID" >> {ledger}; sleep 2; echo done on $(hostname)'
            ran = client.submit([api.JobSpec(command=["sh", "-c", script], name=f"work-{i}", cwd=str(DATA))
                                 for i in range(8)]).jobs
            for i, job in enumerate(ran):
                client.run(job.id, f"node{i % 2 + 1}")
        xce("jobs", "--state", "RUN")
        time.sleep(0.5)
        leader = cluster.leader()
        print(f"\n== kill -9 the leader (replica {leader}) while they run")
        before = time.monotonic()
        cluster.kill(leader)
        with cluster.client() as client:
            client.submit([api.JobSpec(command=["true"], name="after-failover")])
            print(f"   first committed write {1000 * (time.monotonic() - before):.0f} ms after the kill")
            count = len(client.list_jobs())
            print(f"   jobs on the new leader: {count} (expected 210)")
        xce("status")
        with cluster.client() as client:
            _wait(lambda: all(client.get_job(j.id).state == api.DONE for j in ran), timeout_s=30)
            usage = client.get_job(ran[0].id).usage
        lines = ledger.read_text().split()
        print(f"   all 8 forced jobs DONE; ledger: {len(lines)} lines for {len(set(lines))} jobs "
              f"(each ran once); job {ran[0].id} used {usage.wall_s:.1f} s wall, {usage.max_rss_kb} kB")
        xce("jobs", "--filter", "name:eq:work-0")
        xce("hosts")
        print(f"\n== restart replica {leader}; it catches up")
        cluster.start([leader])
        time.sleep(2)
        xce("status")
        xce("jobs", "--state", "EXIT,PSUSP")
        return 0 if count == 210 and len(lines) == 8 == len(set(lines)) else 1
    finally:
        workers.stop()
        cluster.stop()
        print("\n== cluster stopped; data left in", DATA)


if __name__ == "__main__":
    sys.exit(main())
