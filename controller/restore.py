"""A replica's files rebuilt from a backup (`xce snapshot restore`), or a lone survivor made a one-member
cluster (`xce controller --force-new-cluster`): offline, before the replica starts.

Theory of operation (etcd's `snapshot restore` and `--force-new-cluster`).
Both leave a replica's data directory as a cluster would that had just
taken a Raft snapshot at the state's applied index R:
- `state/`: the state, its identity (cluster id) and its committed membership
  those of the new cluster, prepared for recovery (fsm/recovery.py: jobs that
  were running are UNKWN, every known host is awaited, and nothing is
  dispatched until they are and the workers' fence has had time to act);
- `snapshot`: a Raft snapshot of that state whose header names two entries
  at R - 1 and R of term 0 (the same on every replica restored from the same
  file) and the new members' Raft addresses; pysyncobj starts from it, and
  the first leader's entries follow at R + 1;
- no Raft log (`wal/`): a restore starts one afresh; a survivor drops its
  own, so whatever it held past its applied index is gone.
The incarnation (the Sync stream's resume point, sync_stream.stream_id) is
derived from the inputs, so every replica restored from one file agrees.

Refused, with nothing written: a file that fails its checksum or is not a
backup (backup.verify); with `--keep-id`, a configuration of another cluster
id than the backup's, and without it, one of the same id (a restore makes a
new cluster by default); a data directory that is not empty, or that a
running replica holds (store.lock_data_dir); a survivor with no state, or a
state of no entries. A survivor forced once and started since with the flag
still on refuses a second force (its new cluster may have members by then,
which a second force would leave behind): the note it leaves is removed by
its first start without the flag.

The Raft log is created with its commit index at R: pysyncobj's leader walks
the indexes from its commit index to its last one on every tick, and from 1
it would walk every revision of the backup in one tick (seconds at millions,
past the election timeout).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from controller import backup, fsm
from controller.config import ClusterConfig
from controller.fsm import recovery
from controller.pysyncobj_internals import NO_OP_COMMAND
from controller.raft_wal import LmdbJournal
from controller.store import LOCK_FILE, StateStore, StoreError, fsync_path, lock_data_dir, set_identity
from xce.private import open_private
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

FORCED_NOTE = "forced"  # in the data directory: the revision a --force-new-cluster left the state at
_NO_OP = bytes([NO_OP_COMMAND])  # the made-up entries are never applied


@dataclass(frozen=True)
class Restored:
    cluster_id: str
    revision: int
    awaited: int  # hosts (and the fence's wait) the new cluster waits for before it dispatches
    directory: Path


def restore(backup_file: Path, config: ClusterConfig, replica_id: int, data_dir: Path | None = None,
            keep_id: bool = False) -> Restored:
    """Replica `replica_id` of the cluster `config` describes, from a backup (StoreError: refused)."""
    saved = backup.verify(Path(backup_file))
    if keep_id and saved.cluster_id != config.cluster_id:
        raise StoreError(f"{backup_file} is a backup of cluster {saved.cluster_id!r}, and --keep-id keeps "
                         f"that id, but {config.path} is cluster {config.cluster_id!r}")
    if not keep_id and saved.cluster_id == config.cluster_id:
        raise StoreError(f"{config.path} has the backup's cluster id {saved.cluster_id!r}: a restore makes a "
                         "new cluster, give it a new cluster_id (or --keep-id to keep this one)")
    me = config.replica(replica_id)
    if saved.revision < 2:
        raise StoreError(f"{backup_file} is at revision {saved.revision}: nothing to restore")
    target = Path(data_dir) if data_dir is not None else config.replica_dir(me.id)
    if target.exists() and not target.is_dir():
        raise StoreError(f"{target} is not a directory")
    if target.exists() and any(p.name != LOCK_FILE for p in target.iterdir()):
        raise StoreError(f"{target} exists and is not empty: a restore never writes over a replica's files")
    held = lock_data_dir(target)
    target.chmod(0o700)
    try:
        state = target / "state"
        state.mkdir(mode=0o700)
        _, offset = StateStore.read_snapshot_header(saved.path)
        with open(saved.path, "rb") as src, os.fdopen(open_private(state / "data.mdb"), "wb") as dst:
            src.seek(offset)
            _copy(src, dst, saved.body_bytes - offset)
            dst.flush()
            os.fsync(dst.fileno())
        set_identity(state, config.cluster_id)
        members = [api.Member(id=r.id, grpc_address=r.grpc, raft_address=r.raft) for r in config.replicas]
        digest = hashlib.sha256(_checksum(saved.path) + json.dumps(
            [config.cluster_id, [(m.id, m.raft_address) for m in members]]).encode()).hexdigest()[:16]
        why = f"restored from a backup of cluster {saved.cluster_id} at revision {saved.revision}"
        result = _rebuild(target, config, members, f"r{digest}", why)
    except BaseException:
        for path in target.iterdir():
            if path.name != LOCK_FILE:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        raise
    finally:
        os.close(held)
    return result


def force_new_cluster(config: ClusterConfig, replica_id: int) -> Restored:
    """This replica's committed state as a one-member cluster (StoreError: refused)."""
    me = config.replica(replica_id)
    target = config.replica_dir(me.id)
    if not (target / "state" / "data.mdb").exists():
        raise StoreError(f"no state in {target}: --force-new-cluster keeps a survivor's state, and there "
                         "is none here")
    held = lock_data_dir(target)
    try:
        note = target / FORCED_NOTE
        store = StateStore(target / "state", config.cluster_id)
        try:
            revision = store.meta().applied_index
        finally:
            store.close()
        forced_at = note.read_text().strip() if note.exists() else ""
        if forced_at and int(forced_at) != revision:
            raise StoreError(f"replica {me.id} was forced into a new cluster at revision {forced_at} and "
                             f"has applied entries since (now {revision}) with --force-new-cluster still "
                             "on: drop it (a start without it clears this)")
        if revision < 2:
            raise StoreError(f"the state in {target} is at revision {revision}: nothing to keep")
        members = [api.Member(id=me.id, grpc_address=me.grpc, raft_address=me.raft)]
        digest = hashlib.sha256(f"{config.cluster_id} {me.id} {revision}".encode()).hexdigest()[:16]
        why = f"forced from replica {me.id} at revision {revision}"
        result = _rebuild(target, config, members, f"f{digest}", why)
        note.write_text(f"{result.revision}\n")
        fsync_path(target)
    finally:
        os.close(held)
    return result


def forced_note_done(directory: Path) -> None:
    """A start without --force-new-cluster: a later disaster may force again."""
    (directory / FORCED_NOTE).unlink(missing_ok=True)


def _rebuild(target: Path, config: ClusterConfig, members: list[api.Member], incarnation: str,
             why: str) -> Restored:
    """Prepare the state in target/state for recovery; a Raft snapshot of it; no Raft log."""
    # Until a worker cut off since before the rollback has killed its rerunnable jobs: its fence
    # starts the kill after fence_s, which ends, with the kill's grace, before unknown_timeout_s.
    wait_ms = round(config.unknown_timeout_s * 1000) if config.fence_s else 0
    code = log.Capabilities(kinds=sorted(fsm.HANDLERS), format=fsm.ENTRY_FORMAT)
    store = StateStore(target / "state", config.cluster_id)
    try:
        awaited = store.rewrite(lambda tables: recovery.prepare(
            tables, config.cluster_id, members, incarnation, wait_ms, why, code, fsm.DERIVED))
        revision = store.meta().applied_index
        entry = [_NO_OP.hex(), revision, 0]
        header = {"last": entry, "prev": [_NO_OP.hex(), revision - 1, 0],
                  "cluster": [m.raft_address for m in members], "kind": "restore"}
        writing = target / "snapshot.writing"
        with os.fdopen(open_private(writing), "wb") as out:
            store.write_snapshot(out, header)
    finally:
        store.close()
    shutil.rmtree(target / "wal", ignore_errors=True)  # first: the new snapshot never beside old entries
    wal = LmdbJournal(target / "wal")
    wal.setRaftCommitIndex(revision)
    wal.flush()
    wal.close()
    os.replace(writing, target / "snapshot")
    fsync_path(target)
    return Restored(config.cluster_id, revision, awaited, target)


def _checksum(path: Path) -> bytes:
    """The SHA-256 a (verified) backup ends with."""
    with open(path, "rb") as f:
        f.seek(-32, os.SEEK_END)
        return f.read(32)


def _copy(src: BinaryIO, dst: BinaryIO, size: int) -> None:
    left = size
    while left:
        data = src.read(min(backup.CHUNK_BYTES, left))
        if not data:
            raise StoreError("the backup is shorter than its header says")
        dst.write(data)
        left -= len(data)
