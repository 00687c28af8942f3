"""Unit tests of the LMDB state store (controller/store.py): snapshots,
restore, identity and corruption checks."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from controller import fsm
from controller import store as store_module
from controller.store import PULSE_EVERY, SNAPSHOT_MAGIC, LmdbTables, StateStore, StoreError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CLUSTER = "demo"
STAMP_MS = 1_700_000_000_000


def init_entry(cluster_id: str = CLUSTER) -> bytes:
    return log.Entry(stamp_ms=STAMP_MS, proposer=1, init=log.InitCluster(
        cluster_id=cluster_id, config_digest="d1", queues=[api.Queue(name="normal")])).SerializeToString()


def submit_entry(request_id: str, count: int = 2) -> bytes:
    entry = log.Entry(stamp_ms=STAMP_MS, proposer=1)
    entry.submit.requests.add(request_id=request_id, jobs=[api.JobSpec(command=["true"])] * count)
    return entry.SerializeToString()


def fill(store: StateStore, first_index: int, entries: int) -> None:
    for offset in range(entries):
        data = init_entry() if first_index + offset == 1 else submit_entry(f"r{first_index + offset}")
        results = store.apply(first_index + offset, data)
        assert results is not None and results[0].code == log.OK


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[StateStore]]:
    """Stores opened by a test; each is closed at the end."""
    opened: list[StateStore] = []
    yield opened
    for store in opened:
        store.close()


def open_store(stores: list[StateStore], path: Path, cluster_id: str = CLUSTER) -> StateStore:
    store = StateStore(path, cluster_id)
    stores.append(store)
    return store


def snapshot(store: StateStore, path: Path, header: dict[str, object] | None = None) -> Path:
    with open(path, "wb") as out:
        store.write_snapshot(out, header or {"raft": "entries"})
    return path


# ---------------------------------------------------------------- snapshots


def test_snapshot_restores_into_another_store_of_the_cluster(
        tmp_path: Path, stores: list[StateStore]) -> None:
    source = open_store(stores, tmp_path / "a" / "state")
    fill(source, 1, 5)
    file = snapshot(source, tmp_path / "snap", {"raft": "abc", "members": [1, 2, 3]})

    header, offset = StateStore.read_snapshot_header(file)
    assert header == {"raft": "abc", "members": [1, 2, 3], "cluster_id": CLUSTER, "applied_index": 5,
                      "incarnation": ""}
    assert offset == len(SNAPSHOT_MAGIC) + 4 + len(json.dumps(header, sort_keys=True).encode())

    target = open_store(stores, tmp_path / "b" / "state")
    fill(target, 1, 2)
    assert target.restore_snapshot(file) is True
    assert target.canonical_dump() == source.canonical_dump()
    assert target.meta().applied_index == 5
    # The swap leaves no side directories behind, and the store goes on.
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["state", "state.unsynced"]  # (its note)
    assert target.apply(5, submit_entry("late")) is None
    fill(target, 6, 1)
    fill(source, 6, 1)
    assert target.canonical_dump() == source.canonical_dump()


def test_restored_state_survives_reopen(tmp_path: Path, stores: list[StateStore]) -> None:
    source = open_store(stores, tmp_path / "a" / "state")
    fill(source, 1, 3)
    file = snapshot(source, tmp_path / "snap")
    target = StateStore(tmp_path / "b" / "state", CLUSTER)
    assert target.restore_snapshot(file)
    target.close()
    again = open_store(stores, tmp_path / "b" / "state")
    assert again.canonical_dump() == source.canonical_dump()


@pytest.mark.parametrize("target_entries", [3, 4], ids=["same-index", "newer"])
def test_restore_refused_when_snapshot_is_not_newer(
        tmp_path: Path, stores: list[StateStore], target_entries: int) -> None:
    source = open_store(stores, tmp_path / "a" / "state")
    fill(source, 1, 3)
    file = snapshot(source, tmp_path / "snap")
    target = open_store(stores, tmp_path / "b" / "state")
    fill(target, 1, 1)
    target.apply(2, init_entry())  # different content: a restore would show
    for index in range(3, target_entries + 1):
        target.apply(index, submit_entry(f"t{index}", count=1))
    before = target.canonical_dump()
    assert target.restore_snapshot(file) is False
    assert target.canonical_dump() == before


def test_restore_of_another_clusters_snapshot_raises(tmp_path: Path, stores: list[StateStore]) -> None:
    source = open_store(stores, tmp_path / "a" / "state", cluster_id="other")
    fill_other = [init_entry("other"), submit_entry("r2")]
    for index, data in enumerate(fill_other, start=1):
        source.apply(index, data)
    file = snapshot(source, tmp_path / "snap")
    target = open_store(stores, tmp_path / "b" / "state")
    before = target.canonical_dump()
    with pytest.raises(StoreError, match="other"):
        target.restore_snapshot(file)
    assert target.canonical_dump() == before


@pytest.mark.parametrize("content", [b"", b"XCESNAP", b"PK\x03\x04 a zip file", b"hello world\n" * 100],
                         ids=["empty", "short-magic", "zip", "text"])
def test_non_xce_file_as_snapshot_raises(tmp_path: Path, stores: list[StateStore], content: bytes) -> None:
    target = open_store(stores, tmp_path / "state")
    fill(target, 1, 1)
    before = target.canonical_dump()
    file = tmp_path / "not-a-snapshot"
    file.write_bytes(content)
    with pytest.raises(StoreError, match="not an XCE snapshot"):
        target.restore_snapshot(file)
    assert target.canonical_dump() == before


def test_interrupted_restore_swap_finishes_at_next_open(tmp_path: Path, stores: list[StateStore]) -> None:
    source = open_store(stores, tmp_path / "a" / "state")
    fill(source, 1, 3)
    file = snapshot(source, tmp_path / "snap")
    _, offset = StateStore.read_snapshot_header(file)
    # A crash between the two renames: the old state moved away, the new one
    # still under .incoming.
    incoming = tmp_path / "b" / "state.incoming"
    incoming.mkdir(parents=True)
    (incoming / "data.mdb").write_bytes(file.read_bytes()[offset:])
    (tmp_path / "b" / "state.old").mkdir()
    target = open_store(stores, tmp_path / "b" / "state")
    assert target.canonical_dump() == source.canonical_dump()
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["state", "state.unsynced"]  # (its note)


# ---------------------------------------------------------------- identity and corruption


def test_fresh_store_holds_only_its_identity(tmp_path: Path, stores: list[StateStore]) -> None:
    store = open_store(stores, tmp_path / "state")
    expected = b""
    for key, value in sorted([(fsm.DERIVED_KEY, fsm.DERIVED_VERSION), (b"identity", CLUSTER.encode())]):
        expected += struct.pack(">HI", len("meta"), len(key)) + b"meta" + key
        expected += struct.pack(">I", len(value)) + value
    assert store.canonical_dump() == expected
    assert store.meta() == log.Meta()


def test_store_of_another_cluster_refuses_to_open(tmp_path: Path) -> None:
    StateStore(tmp_path / "state", "alpha").close()
    with pytest.raises(StoreError, match=r"belongs to cluster 'alpha', not 'beta'"):
        StateStore(tmp_path / "state", "beta")
    # The refusal changed nothing: its own cluster still opens it.
    StateStore(tmp_path / "state", "alpha").close()


@pytest.mark.parametrize("size", [100, 4096, 3 * 4096 + 7])
def test_garbage_data_file_raises_corrupt(tmp_path: Path, size: int) -> None:
    path = tmp_path / "state"
    path.mkdir()
    (path / "data.mdb").write_bytes(bytes((i * 37 + 11) % 256 for i in range(size)))
    with pytest.raises(StoreError, match="corrupt"):
        StateStore(path, CLUSTER)


def test_jobs_without_identity_refuse_to_open(tmp_path: Path) -> None:
    path = tmp_path / "state"
    env = lmdb.open(str(path), max_dbs=8)
    jobs = env.open_db(b"jobs")
    with env.begin(write=True) as txn:
        txn.put(fsm.job_key(1), api.Job(id=1).SerializeToString(), db=jobs)
    env.close()
    with pytest.raises(StoreError, match="no cluster identity"):
        StateStore(path, CLUSTER)


@pytest.mark.parametrize("content", [
    SNAPSHOT_MAGIC + b"\x00\x00",
    SNAPSHOT_MAGIC + struct.pack(">I", 4) + b"{bad",
    SNAPSHOT_MAGIC + struct.pack(">I", 2) + b"{}",
    SNAPSHOT_MAGIC + struct.pack(">I", 2) + b"[]",
], ids=["truncated-length", "bad-json", "no-fields", "not-an-object"])
def test_corrupt_snapshot_header_raises_store_error(
        tmp_path: Path, stores: list[StateStore], content: bytes) -> None:
    target = open_store(stores, tmp_path / "state")
    fill(target, 1, 1)
    before = target.canonical_dump()
    file = tmp_path / "bad-snapshot"
    file.write_bytes(content)
    with pytest.raises(StoreError):
        target.restore_snapshot(file)
    assert target.canonical_dump() == before


def test_snapshot_with_corrupt_body_keeps_the_local_state(tmp_path: Path, stores: list[StateStore]) -> None:
    # A newer header over a body that is not an LMDB environment (a damaged
    # transfer): the restore must fail without destroying the state it had.
    target = open_store(stores, tmp_path / "b" / "state")
    fill(target, 1, 3)
    before = target.canonical_dump()
    raw = json.dumps({"cluster_id": CLUSTER, "applied_index": 100}).encode()
    file = tmp_path / "snap"
    file.write_bytes(SNAPSHOT_MAGIC + struct.pack(">I", len(raw)) + raw + bytes(range(256)) * 40)
    with pytest.raises(StoreError):
        target.restore_snapshot(file)
    assert target.canonical_dump() == before
    fill(target, 4, 1)


# ---------------------------------------------------------------- apply failures


def test_entry_whose_apply_raises_propagates_with_nothing_half_written(
        tmp_path: Path, stores: list[StateStore]) -> None:
    store = open_store(stores, tmp_path / "state")
    fill(store, 1, 1)
    before = store.canonical_dump()

    def half_then_crash(applier: fsm.Applier) -> list[log.Result]:
        applier.put_job(api.Job(id=77))
        raise RuntimeError("bug in a handler")

    store.handlers = {**fsm.HANDLERS, "submit": half_then_crash}
    with pytest.raises(RuntimeError, match="bug in a handler"):
        store.apply(2, submit_entry("r2"))
    # Nothing of the entry is written, the index does not move: the replica
    # stops here (controller/raft.py), and a fixed build applies it afresh.
    assert store.canonical_dump() == before and store.meta().applied_index == 1
    store.handlers = fsm.HANDLERS
    results = store.apply(2, submit_entry("r2"))
    assert results is not None and results[0].code == log.OK


def test_storage_error_during_apply_propagates_and_commits_nothing(
        tmp_path: Path, stores: list[StateStore]) -> None:
    store = open_store(stores, tmp_path / "state")
    fill(store, 1, 1)
    before = store.canonical_dump()

    def disk_full(applier: fsm.Applier) -> list[log.Result]:
        applier.put_job(api.Job(id=77))
        raise lmdb.MapFullError("disk full")

    store.handlers = {**fsm.HANDLERS, "submit": disk_full}
    with pytest.raises(lmdb.Error):
        store.apply(2, submit_entry("r2"))
    assert store.canonical_dump() == before


# ---------------------------------------------------------------- Raft snapshots off the tick thread


def test_the_snapshot_writer_copies_in_its_own_thread_and_reports_once(
        tmp_path: Path, stores: list[StateStore]) -> None:
    from pysyncobj.config import SERIALIZER_STATE

    from controller.raft_snapshot import SnapshotWriter

    store = open_store(stores, tmp_path / "a" / "state")
    fill(store, 1, 4)
    (tmp_path / "snapshot.writing").write_bytes(b"half a copy a crash left")
    writer = SnapshotWriter(store, tmp_path / "snapshot")
    assert not (tmp_path / "snapshot.writing").exists()  # cleared at start
    assert writer.state() == SERIALIZER_STATE.NOT_SERIALIZING
    with store._lock.write():  # hold the copy back (as a slow disk would): the caller is not held
        writer.start({"last": ["", 4, 1]})
        assert writer.state() == SERIALIZER_STATE.SERIALIZING
        writer.start({"last": ["", 4, 1]})  # never two at once
        assert not (tmp_path / "snapshot").exists()
    writer.join()
    assert writer.state() == SERIALIZER_STATE.SUCCESS
    assert writer.state() == SERIALIZER_STATE.NOT_SERIALIZING  # told once
    header, _ = StateStore.read_snapshot_header(tmp_path / "snapshot")
    assert (header["applied_index"], header["last"]) == (4, ["", 4, 1])
    target = open_store(stores, tmp_path / "b" / "state")
    assert target.restore_snapshot(tmp_path / "snapshot")
    assert target.canonical_dump() == store.canonical_dump()
    assert writer.written == 1


def test_a_failed_snapshot_copy_is_reported_failed_and_leaves_the_old_snapshot(
        tmp_path: Path, stores: list[StateStore]) -> None:
    from pysyncobj.config import SERIALIZER_STATE

    from controller.raft_snapshot import SnapshotWriter

    store = open_store(stores, tmp_path / "a" / "state")
    fill(store, 1, 2)
    (tmp_path / "snapshot").write_bytes(b"the previous snapshot")
    writer = SnapshotWriter(store, tmp_path / "snapshot")
    writer.start({"last": object()})  # a header that cannot be written: the copy fails
    writer.join()
    assert writer.state() == SERIALIZER_STATE.FAILED
    assert (tmp_path / "snapshot").read_bytes() == b"the previous snapshot"
    assert not (tmp_path / "snapshot.writing").exists()


@pytest.mark.parametrize("how", ["received-meanwhile", "cancelled"])
def test_a_snapshot_copy_never_replaces_one_received_from_the_leader_meanwhile(
        tmp_path: Path, stores: list[StateStore], how: str) -> None:
    import threading

    from pysyncobj.config import SERIALIZER_STATE

    from controller.raft_snapshot import SnapshotWriter

    store = open_store(stores, tmp_path / "a" / "state")
    fill(store, 1, 2)
    (tmp_path / "snapshot").write_bytes(b"the snapshot before")
    writer = SnapshotWriter(store, tmp_path / "snapshot")
    with store._lock.write():  # the copy waits here, as a slow one would
        writer.start({"last": ["", 2, 1]})
        if how == "received-meanwhile":  # pysyncobj renames a received snapshot into place
            (tmp_path / "received").write_bytes(b"the leader's newer snapshot")
            (tmp_path / "received").rename(tmp_path / "snapshot")
        else:  # the install calls cancel() before it reads the file (the one in place stays)
            canceller = threading.Thread(target=writer.cancel)
            canceller.start()
            while not writer._cancelled:
                pass
    writer.join()
    if how == "cancelled":
        canceller.join()
    assert writer.state() == SERIALIZER_STATE.FAILED
    expected = b"the leader's newer snapshot" if how == "received-meanwhile" else b"the snapshot before"
    assert (tmp_path / "snapshot").read_bytes() == expected
    assert not (tmp_path / "snapshot.writing").exists()


def test_a_snapshot_is_of_one_moment_though_entries_apply_while_it_is_written(
        tmp_path: Path, stores: list[StateStore]) -> None:
    """SnapshotWriter copies while the tick thread goes on applying: an entry applied between the
    header and the copy must be in neither (a copy of its own later moment failed the restore)."""
    store = open_store(stores, tmp_path / "a" / "state")
    fill(store, 1, 3)
    real = store._env

    class ApplyingDuringTheCopy:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def copyfd(self, fd: int, **options: object) -> None:
            with real.begin(write=True) as txn:  # entry 4, applied as the copy starts
                fsm.apply(LmdbTables(txn, store._dbs), 4, submit_entry("late"))
            real.copyfd(fd, **options)

    store._env = ApplyingDuringTheCopy()  # type: ignore[assignment]
    try:
        file = snapshot(store, tmp_path / "snap")
    finally:
        store._env = real
    header, _ = StateStore.read_snapshot_header(file)
    target = open_store(stores, tmp_path / "b" / "state")
    assert target.restore_snapshot(file)  # the body is at the header's index: accepted
    assert header["applied_index"] == target.meta().applied_index == 3
    assert store.meta().applied_index == 4


def test_a_long_apply_calls_pulse_as_it_goes_and_ends_in_the_same_state(
        tmp_path: Path, stores: list[StateStore]) -> None:
    """raft.py keeps a node heard from `pulse`; it must come during the apply, often, and change
    nothing about what the entry does."""
    plain, pulsed = open_store(stores, tmp_path / "plain"), open_store(stores, tmp_path / "pulsed")
    calls: list[int] = []
    pulsed.pulse = lambda: calls.append(1)
    for store in (plain, pulsed):
        store.apply(1, init_entry())
    calls.clear()
    big = submit_entry("big", count=2000)
    results = [store.apply(2, big) for store in (plain, pulsed)]
    assert results[0] == results[1] and results[0] is not None and len(results[0][0].job_ids) == 2000
    assert len(calls) >= 2000 * 3 // PULSE_EVERY  # every job's writes count: more than one per job
    assert plain.canonical_dump() == pulsed.canonical_dump()


# ---------------------------------------------------------------- commits without a sync


def test_a_store_closed_is_synced_and_one_left_open_in_this_boot_is_used_as_it_was(
        tmp_path: Path, stores: list[StateStore]) -> None:
    """Commits are not synced: a close syncs and removes the store's note of its boot; a store that
    was not closed (its process died) is used as it was when this boot opens it again."""
    path = tmp_path / "r" / "state"
    note = path.with_name("state.unsynced")
    first = StateStore(path, CLUSTER)
    assert note.read_text() == store_module.boot_id() != ""
    fill(first, 1, 4)
    first.close()
    assert not note.exists()
    died = StateStore(path, CLUSTER)
    fill(died, 5, 2)
    died._env.close()  # as a killed process leaves it: no sync, the note stays
    again = open_store(stores, path)
    assert not again.rebuilt and again.meta().applied_index == 6 and note.exists()


def test_a_store_left_unsynced_by_another_boot_is_set_aside_and_starts_empty(
        tmp_path: Path, stores: list[StateStore]) -> None:
    """The machine went down: the disk may hold some commits since the last sync and not others, so
    the state is not used; the replica rebuilds it from its snapshot and log (raft.py)."""
    path = tmp_path / "r" / "state"
    died = StateStore(path, CLUSTER)
    fill(died, 1, 4)
    died._env.close()
    path.with_name("state.unsynced").write_text("another-boot")
    again = open_store(stores, path)
    assert again.rebuilt and again.meta().applied_index == 0
    assert path.with_name("state.untrusted").is_dir()
    assert path.with_name("state.unsynced").read_text() == store_module.boot_id()
    fill(again, 1, 2)  # and the log replays into it
    assert again.meta().applied_index == 2


class _FailingSync:
    """An environment whose syncs fail, as after a write-back error the kernel reports."""

    def __init__(self, env: lmdb.Environment) -> None:
        self.env = env

    def sync(self, force: bool = False) -> None:
        raise lmdb.Error("EIO")

    def close(self) -> None:
        self.env.close()


def test_a_failed_sync_leaves_the_state_untrusted_whatever_boot_opens_it_next(
        tmp_path: Path, stores: list[StateStore]) -> None:
    path = tmp_path / "r" / "state"
    failing = StateStore(path, CLUSTER)
    fill(failing, 1, 3)
    failing._env = _FailingSync(failing._env)  # type: ignore[assignment]
    with pytest.raises(StoreError, match="a sync failed"):
        failing.sync()
    with pytest.raises(StoreError, match="a sync failed"):
        failing.close()  # the close's sync too: the note stays, marked
    assert path.with_name("state.unsynced").read_bytes() == store_module.NOT_SYNCED
    again = open_store(stores, path)  # this very boot
    assert again.rebuilt and again.meta().applied_index == 0


def test_the_state_is_synced_in_the_background_until_closed(tmp_path: Path, stores: list[StateStore]) -> None:
    store = open_store(stores, tmp_path / "r" / "state")
    fill(store, 1, 2)
    failures: list[BaseException] = []
    store._env = _FailingSync(store._env)  # type: ignore[assignment]
    store.start_syncing(failures.append, every_s=0.01)
    deadline = time.monotonic() + 10
    while not failures and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(failures) == 1 and isinstance(failures[0], StoreError)
    with pytest.raises(StoreError):  # a snapshot's sync, say: the replica hears of it too
        store.sync()
    assert len(failures) == 2
    stores.remove(store)
    store._closed.set()
    store._env.close()
