"""`make demo`: a local three-replica cluster taking jobs, surviving a leader kill.

Starts three real controller processes under ./xce-data/demo (fresh each
run), submits jobs through the `xce` CLI and the client library, controls a
few, kills the leader with SIGKILL, shows that every job is still there and
that writes go on, restarts the replica, and stops everything.
(The scheduler and workers arrive with their own issues; until then jobs
stay pending.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from xce.local_cluster import LocalCluster
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


def main() -> int:
    shutil.rmtree(DATA, ignore_errors=True)
    cluster = LocalCluster(DATA)
    try:
        cluster.start()
        leader = cluster.leader(timeout_s=30)
        print(f"== three replicas up under {DATA}; replica {leader} leads\n")
        xce("status")
        xce("queues")
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

        print(f"\n== kill -9 the leader (replica {leader})")
        before = time.monotonic()
        cluster.kill(leader)
        with cluster.client() as client:
            client.submit([api.JobSpec(command=["true"], name="after-failover")])
            print(f"   first committed write {1000 * (time.monotonic() - before):.0f} ms after the kill")
            count = len(client.list_jobs())
            print(f"   jobs on the new leader: {count} (expected 202)")
        xce("status")
        print(f"\n== restart replica {leader}; it catches up")
        cluster.start([leader])
        time.sleep(2)
        xce("status")
        xce("jobs", "--state", "EXIT,PSUSP")
        return 0 if count == 202 else 1
    finally:
        cluster.stop()
        print("\n== cluster stopped; data left in", DATA)


if __name__ == "__main__":
    sys.exit(main())
