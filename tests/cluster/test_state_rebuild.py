"""A state store left unsynced when the machine went down, on a real pysyncobj node with real LMDB files.

The state commits without a sync (controller/store.py): after a boot other than the one it was
written in, it is set aside and rebuilt from the replica's Raft snapshot and WAL; a replica that
cannot rebuild it (its log starts past entry 1 and it has no snapshot) refuses to start and says
what to do. A machine's crash is made here by the store's note naming another boot.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controller.raft import RaftNode, RaftSettings
from controller.raft_wal import LmdbJournal
from controller.store import StateStore, StoreError
from ops.local_cluster import free_ports
from tests.cluster.test_raft_snapshot_restart import (
    CLUSTER,
    _node,
    _propose,
    _snapshot_at,
    _submit,
    _twenty_submits,
    _wait_leader,
)
from xce.v1 import log_pb2 as log


def _run_then_crash(data: Path, address: str, snapshot_at: int | None) -> tuple[bytes, int]:
    """Twenty submits, maybe a snapshot of entry `snapshot_at`, then a machine's crash: the canonical
    dump and the applied index the state had."""
    node, store = _node(data, address)
    try:
        _twenty_submits(node)
        if snapshot_at is not None:
            _snapshot_at(node, store, data, address, snapshot_at)
        dump, applied = store.canonical_dump(), store.meta().applied_index
    finally:
        node.close()
        store._closed.set()  # its syncs stop, as the process's death stops them
        store._env.close()  # not the store's close (which syncs): the process died with the machine
    (data / "state.unsynced").write_text("a-boot-before-this-one")
    return dump, applied


@pytest.mark.parametrize("snapshot_at", [None, 6], ids=["from-the-log", "from-a-snapshot"])
def test_a_state_left_unsynced_by_a_machine_that_went_down_is_rebuilt_from_the_log(
        tmp_path: Path, snapshot_at: int | None) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    data = tmp_path / "replica"
    dump, applied = _run_then_crash(data, address, snapshot_at)
    node, store = _node(data, address)
    try:
        assert store.rebuilt and (data / "state.untrusted").is_dir()
        _wait_leader(node)  # a leader of the new term commits, and everything before applies
        deadline = time.monotonic() + 10
        while store.meta().applied_index < applied and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.meta().applied_index == applied and store.canonical_dump() == dump
        result = _propose(node, _submit(100))
        assert result is not None and result[0].code == log.OK
        assert store.meta().next_job_id == 22  # the twenty, and this one
    finally:
        node.close()
        store.close()
    again = StateStore(data / "state", CLUSTER)
    try:
        assert not again.rebuilt and again.meta().next_job_id == 22  # closed, hence synced: trusted
    finally:
        again.close()


def test_a_replica_that_cannot_rebuild_its_state_refuses_to_start_and_says_what_to_do(
        tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    data = tmp_path / "replica"
    _run_then_crash(data, address, snapshot_at=None)
    wal = LmdbJournal(data / "wal")
    wal.deleteEntriesTo(5)  # compacted once, and its snapshot lost since
    wal.close()
    for _ in range(2):  # and again: the first start's store noted this boot, and its state is empty
        store = StateStore(data / "state", CLUSTER)
        try:
            with pytest.raises(StoreError, match="replace the replica as a dead one"):
                RaftNode(address, [address], data, "pw", store, RaftSettings())
        finally:
            store.close()
