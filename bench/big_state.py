"""A large committed state, built offline by the real apply, and a cluster started on it.

`build(dir, finished, live, running, hosts=)` applies real log entries (an init, host
joins, submits, KILLs that finish jobs, DISPATCHes) with `fsm.apply` to a
fresh LMDB state store, many entries per write transaction (the only
shortcut: a replica commits one transaction per entry), with stamps that
move 2 s per finished job so the clean period moves the finished ones into
history as they would be. `seed(cluster, snapshot)` puts the state into every
replica of a not-yet-started LocalCluster as a Raft snapshot (the entries it
covers are stand-ins of term 0), so the replicas start from it as from any
snapshot. Used by bench/history_scale.py.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller import fsm  # noqa: E402
from controller.store import SNAPSHOT_MAGIC, LmdbTables, StateStore  # noqa: E402
from ops.local_cluster import LocalCluster  # noqa: E402
from xce.private import open_private  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402
from xce.v1 import log_pb2 as log  # noqa: E402

RETENTION_MS = 365 * 86_400_000  # the history stays whole for a year after the build
USERS = [f"u{i}" for i in range(10)]
QUEUES = ["normal", "priority", "idle"]
HOSTS, HOST_SLOTS = 100, 128
ENTRIES_PER_TXN = 5000
SUBMIT_PER_ENTRY = 2000


@dataclass
class Built:
    snapshot: Path
    applied: int
    finished: int
    live: int
    running: int


class _Applier:
    def __init__(self, store: StateStore) -> None:
        self.store, self.index, self.pending = store, 0, 0
        self.txn = store._env.begin(write=True)

    def __call__(self, entry: log.Entry, stamp_ms: int) -> list[log.Result]:
        self.index += 1
        entry.stamp_ms, entry.proposer, entry.format = stamp_ms, 1, fsm.ENTRY_FORMAT
        results = fsm.apply(LmdbTables(self.txn, self.store._dbs), self.index, entry.SerializeToString())
        assert results is not None and all(r.code == log.OK for r in results), (entry, results)
        self.pending += 1
        if self.pending >= ENTRIES_PER_TXN:
            self.commit()
        return results

    def commit(self) -> None:
        self.txn.commit()
        self.txn = self.store._env.begin(write=True)
        self.pending = 0

    def close(self) -> None:
        self.txn.commit()


def build(directory: Path, cluster_id: str, queues: list[api.Queue], finished: int, live: int,
          running: int, progress: bool = False, hosts: int = HOSTS) -> Built:
    """The state at `directory/state` and its snapshot at `directory/snapshot` (reused if built)."""
    done = directory / "built.json"
    args = [cluster_id, finished, live, running, hosts]
    if done.exists():
        info = json.loads(done.read_text())
        if info["args"] == args:
            return Built(directory / "snapshot", info["applied"], finished, live, running)
    shutil.rmtree(directory / "state", ignore_errors=True)  # another size's, or half a build
    store = StateStore(directory / "state", cluster_id)
    apply = _Applier(store)
    # Stamps end about now, so the cluster's own entries (stamped now) find the history within
    # its retention: the job k finished at 2 s * k after T0, then an hour of clean-up.
    t0_ms = int(time.time() * 1000) - finished * 2000 - 2 * 3600_000
    apply(log.Entry(init=log.InitCluster(cluster_id=cluster_id, default_queue="normal", config_digest="big",
                                         queues=queues, clean_period_ms=3600_000,
                                         history_retention_ms=RETENTION_MS)), t0_ms)
    if hosts:  # none: a history beside another cluster's hosts (bench/fleet.py --history)
        apply(log.Entry(joins=log.HostJoins(joins=[api.HostSpec(name=f"h{i:05d}", slots=HOST_SLOTS)
                                                   for i in range(hosts)])), t0_ms)
    total, next_id = finished + live, 1
    while next_id <= total:
        count = min(SUBMIT_PER_ENTRY, total - next_id + 1)
        specs = [api.JobSpec(command=["true"], user=USERS[(next_id + k) % len(USERS)],
                             queue=QUEUES[(next_id + k) % len(QUEUES)]) for k in range(count)]
        apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
            request_id=f"big-{next_id}", jobs=specs)])), t0_ms)
        next_id += count
    stamp = t0_ms
    for job_id in range(1, finished + 1):
        stamp += 2000
        apply(log.Entry(control=api.ControlJobRequest(job_id=str(job_id), action=api.KILL)), stamp)
        if progress and job_id % 100_000 == 0:
            print(f"  {job_id:,} jobs finished", file=sys.stderr)
    for n, job_id in enumerate(range(finished + 1, finished + 1 + running)):
        apply(log.Entry(dispatch=log.Dispatch(job_id=job_id, host=f"h{n % hosts:05d}", attempt=0)), stamp)
    # An hour and more later: the last finished jobs are cleaned too (each entry cleans 256 at most).
    for _ in range(finished // 256 + 2):
        stamp += 1000
        apply(log.Entry(put_queue=log.PutQueueEntry(queue=queues[0], create=False)), stamp + 3600_000)
    apply.close()
    applied = apply.index
    header = {"last": ["", applied, 0], "prev": ["", applied - 1, 0], "cluster": []}
    with open(directory / "snapshot", "wb") as out:
        store.write_snapshot(out, header)
    store.close()
    done.write_text(json.dumps({"args": args, "applied": applied}))
    return Built(directory / "snapshot", applied, finished, live, running)


def seed(cluster: LocalCluster, built: Built) -> None:
    """Every replica of `cluster` (not started) starts from the built state, as from a snapshot."""
    header, offset = StateStore.read_snapshot_header(built.snapshot)
    header["cluster"] = sorted(r.raft for r in cluster.config.replicas)
    raw = json.dumps(header, sort_keys=True).encode()
    for replica in cluster.config.replicas:
        directory = cluster.config.replica_dir(replica.id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(built.snapshot, "rb") as src, os.fdopen(open_private(directory / "snapshot"), "wb") as out:
            out.write(SNAPSHOT_MAGIC + struct.pack(">I", len(raw)) + raw)
            src.seek(offset)
            shutil.copyfileobj(src, out, 1 << 22)
