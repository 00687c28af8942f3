"""Run inside a replica's network namespace while the soak cuts it off:
`python -m soak.minority ADDRESS SECONDS`.

Prints "ready" once the replica answers, waits for "go" on stdin (the cut is
made), then tries one submit to it, printing "minority-ack" (a commit
without the majority: a bug) or "minority-refused", and polls its role every
50 ms, printing "stepped TIME ROLE" once it no longer calls itself leader.
Times are wall clock, as the soak's own.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from client.channel import Client, XceError
from client.credentials import for_cluster
from xce.v1 import api_pb2 as api


def main(address: str, seconds: float, cluster_file: str) -> None:
    # The admin's credentials, passed by the soak through the environment ($XCE_TOKEN).
    credentials = for_cluster(Path(cluster_file))
    status = Client([address], credentials, deadline_s=0.3, call_timeout_s=0.3, follow_leader=False)
    while True:
        try:
            status.status(local_only=True)
            break
        except XceError:
            time.sleep(0.05)
    print("ready", flush=True)
    sys.stdin.readline()
    until = time.time() + seconds

    def write() -> None:
        with Client([address], credentials, deadline_s=seconds, call_timeout_s=seconds,
                    follow_leader=False) as client:
            try:
                client.submit([api.JobSpec(command=["true"], name="soak-minority")])
                print("minority-ack", flush=True)
            except XceError:
                print("minority-refused", flush=True)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    while time.time() < until:
        try:
            role = status.status(local_only=True).replicas[0].role
        except XceError:
            role = "?"
        if role not in ("leader", "?"):
            print("stepped", time.time(), role, flush=True)
            break
        time.sleep(0.05)
    writer.join(timeout=max(0.0, until - time.time()) + 1)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3])
