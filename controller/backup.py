"""Backups (`xce snapshot save`): the leader's copy of its state, and the file a backup is kept in.

Theory of operation. The leader answers SaveSnapshot once its read barrier has
passed (every write acknowledged before the request is in its state), with a
copy of the state from one LMDB read transaction: the same file a Raft
snapshot is (StateStore.write_snapshot: a magic, a JSON header with the
cluster id and the applied index, the LMDB copy). The copy is written to a
private file beside the replica's state first, so the stream's memory is one
chunk whatever the state's size, and removed once sent.

A backup file is that body followed by a trailer: TRAILER_MAGIC and the
body's SHA-256. `verify` checks a file before anything trusts it: the
trailer, the checksum, the header; a restore (restore.py) refuses a file
that fails any of them.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.store import StateStore, StoreError
from xce.private import open_private

CHUNK_BYTES = 1 << 20
TRAILER_MAGIC = b"\nXCE-BACKUP-SHA256:"
TRAILER_BYTES = len(TRAILER_MAGIC) + 32
_copies = itertools.count(1)


@dataclass(frozen=True)
class Backup:
    """A verified backup file: its state's header, and where the body (a snapshot file) ends."""

    path: Path
    header: dict[str, Any]
    body_bytes: int

    @property
    def cluster_id(self) -> str:
        return str(self.header["cluster_id"])

    @property
    def revision(self) -> int:
        return int(self.header["applied_index"])


def copy_state(store: StateStore, directory: Path) -> Path:
    """A private copy of the state (a snapshot file) in `directory`; the caller removes it."""
    path = directory / f"backup-{os.getpid()}-{next(_copies)}.tmp"
    try:
        with os.fdopen(open_private(path), "wb") as out:
            store.write_snapshot(out, {"kind": "backup"})
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while data := f.read(CHUNK_BYTES):
            yield data


def trailer(sha256: bytes) -> bytes:
    return TRAILER_MAGIC + sha256


def verify(path: Path) -> Backup:
    """The backup in `path`, checked: StoreError saying what is wrong otherwise."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size < TRAILER_BYTES:
                raise StoreError(f"{path} is not an XCE backup: too short ({size} bytes)")
            f.seek(size - TRAILER_BYTES)
            tail = f.read(TRAILER_BYTES)
            if not tail.startswith(TRAILER_MAGIC):
                raise StoreError(f"{path} is not an XCE backup (no checksum trailer): truncated, or not "
                                 "made by `xce snapshot save`")
            body = size - TRAILER_BYTES
            digest = hashlib.sha256()
            f.seek(0)
            left = body
            while left:
                data = f.read(min(CHUNK_BYTES, left))
                if not data:
                    raise StoreError(f"{path}: shorter than it was a moment ago")
                digest.update(data)
                left -= len(data)
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None
    if digest.digest() != tail[len(TRAILER_MAGIC):]:
        raise StoreError(f"{path} is corrupt: its SHA-256 does not match the one it was saved with")
    header, _ = StateStore.read_snapshot_header(path)
    return Backup(path, header, body)
