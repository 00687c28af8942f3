"""Restarts around snapshots, on a real pysyncobj node with real LMDB files.

pysyncobj renames a new snapshot in one tick and drops the log entries it
covers in a later one. A kill -9 in between leaves a log that still holds
entries before the snapshot; on restart pysyncobj keeps the log only if it
starts exactly with the snapshot's last two entries and otherwise clears it,
dropping entries this replica may have acknowledged. RaftNode trims the head
first so the tail survives.
"""

from __future__ import annotations

import time
from pathlib import Path

from controller.raft import SUCCESS, RaftNode, RaftSettings
from controller.raft_snapshot import Entry
from controller.raft_wal import LmdbJournal
from controller.store import StateStore
from ops.local_cluster import free_ports
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CLUSTER = "solo"


def _node(data: Path, address: str) -> tuple[RaftNode, StateStore]:
    store = StateStore(data / "state", CLUSTER)
    return RaftNode(address, [address], data, "pw", store, RaftSettings()), store


def _propose(node: RaftNode, entry: log.Entry) -> list[log.Result] | None:
    done: list[tuple[object, int]] = []
    entry.stamp_ms = 1_700_000_000_000
    node.propose(entry.SerializeToString(), lambda result, error: done.append((result, error)))
    deadline = time.monotonic() + 10
    while not done and time.monotonic() < deadline:
        time.sleep(0.005)
    assert done, "proposal not applied"
    result, error = done[0]
    assert error == SUCCESS
    return result  # type: ignore[return-value]


def _wait_leader(node: RaftNode) -> None:
    deadline = time.monotonic() + 10
    while not node.ready_to_serve() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert node.ready_to_serve()


def _submit(i: int) -> log.Entry:
    request = api.SubmitJobsRequest(request_id=f"r{i}", jobs=[api.JobSpec(command=["true"])])
    return log.Entry(submit=log.SubmitBatch(requests=[request]))


def _twenty_submits(node: RaftNode) -> None:
    """The cluster's start, then twenty one-job submits, each applied."""
    _wait_leader(node)
    _propose(node, log.Entry(init=log.InitCluster(cluster_id=CLUSTER, config_digest="d",
                                                 queues=[api.Queue(name="normal")])))
    for i in range(20):
        _propose(node, _submit(i))


def _snapshot_at(node: RaftNode, store: StateStore, data: Path, address: str,
                 position: int) -> tuple[Entry, Entry]:
    """What pysyncobj writes when it compacts: a snapshot whose last entry is the log's at
    `position`; (its prev, its last)."""
    entries = list(node._wal[:])
    prev, last = entries[position - 1], entries[position]
    with open(data / "snapshot", "wb") as out:
        store.write_snapshot(out, {"last": [last[0].hex(), last[1], last[2]],
                                   "prev": [prev[0].hex(), prev[1], prev[2]], "cluster": [address]})
    return prev, last


def test_restart_between_snapshot_and_log_truncation_keeps_the_log_tail(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    data = tmp_path / "replica"
    node, store = _node(data, address)
    try:
        _twenty_submits(node)
        # What pysyncobj would have written at some earlier point: a snapshot
        # whose last two entries sit in the middle of the log.
        wal_entries = list(node._wal[:])
        prev, last = _snapshot_at(node, store, data, address, 6)
        applied = store.meta().applied_index
    finally:
        node.close()
        store.close()

    node, store = _node(data, address)
    try:
        _wait_leader(node)
        kept = [e[1] for e in node._wal[:]]
        assert kept[:len(wal_entries) - 5] == [e[1] for e in wal_entries[5:]]  # the tail survived
        # New writes get new indexes past everything applied, and really apply.
        result = _propose(node, _submit(100))
        assert result is not None and result[0].code == log.OK
        assert store.meta().applied_index > applied
        assert store.meta().next_job_id == 22
    finally:
        node.close()
        store.close()
    assert LmdbJournal(data / "wal")[0][1] == prev[1]
