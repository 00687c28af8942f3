"""Raft snapshots: the state store's LMDB copy, written and loaded for pysyncobj.

Theory of operation. pysyncobj compacts its log by asking for a snapshot (serializer), polling
until it is written (serializeChecker), and loads one at start or when the leader sends it
(deserializer). Ours is the state store's own copy (store.write_snapshot) with a JSON header naming
the Raft entries pysyncobj needs (`last`, `prev`, the members); no fork, no pickle of our state.
- Writing runs in a thread of its own (SnapshotWriter): inside the tick thread no heartbeat would go
  out meanwhile.
- Loading (`Snapshots.load`) restores the state only when the snapshot is newer than the local
  state, refuses one of another history, and fails loudly on anything else wrong: pysyncobj swallows
  a deserializer's exception and then never applies again.
- pysyncobj clears the whole log to install a snapshot from the leader. The transport drops one
  whose last entry this replica holds (raft_snapshot_arrival.py); should one older than what this
  replica has applied, its log going on past it, get here anyway, clearing would drop acknowledged
  entries: the replica stops instead (fail-stop).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.node import TCPNode

from controller import fail_stop
from controller.fail_stop import LogRemovalRefused
from controller.raft_transport import RemovalGuard
from controller.raft_wal import LmdbJournal
from controller.store import StateStore, StoreError, fsync_path
from xce.clock import REAL_CLOCK, Clock
from xce.private import open_private

log = logging.getLogger(__name__)

Entry = tuple[bytes, int, int]  # pysyncobj's (command, index, term)


class SnapshotWriter:
    """A Raft snapshot written off the tick thread (pysyncobj's serializeChecker protocol).

    Copying the state takes about 80 ms per 100,000 jobs; inside the tick thread no heartbeat goes
    out meanwhile, and at a million jobs a leader that compacts would lose its leadership. The copy
    runs in a thread of its own from one LMDB read transaction (store.write_snapshot), to a file
    beside the snapshot that replaces it by rename once synced; `state` tells pysyncobj when it is
    done, and pysyncobj drops the log it covers only then. The state copied may be newer than the
    header's last entry (entries applied meanwhile): a replica that loads it skips them when the
    log replays them, as it skips any entry at or below its applied index.
    """

    def __init__(self, store: StateStore, path: Path, clock: Clock = REAL_CLOCK) -> None:
        self.store = store
        self.path = path
        self.clock = clock
        self.writing = path.with_name(path.name + ".writing")
        self.writing.unlink(missing_ok=True)  # a copy a crash interrupted
        self._thread: threading.Thread | None = None
        self._outcome: bool | None = None  # of the last copy, until pysyncobj has been told
        self.written = 0  # snapshots completed (tests, status)
        self._guard = threading.Lock()  # the rename of a finished copy, against `cancel`
        self._cancelled = False
        self._replacing: int | None = None  # the inode of the snapshot the copy is to replace

    def start(self, header: dict[str, Any]) -> None:
        if self._thread is not None and self._thread.is_alive():
            return  # pysyncobj does not start one while one runs; never two at once regardless
        self._outcome = None
        self._cancelled = False
        self._replacing = _inode(self.path)
        self._thread = threading.Thread(target=self._write, args=(header,), name="raft-snapshot",
                                        daemon=True)
        self._thread.start()

    def _write(self, header: dict[str, Any]) -> None:
        started = self.clock.monotonic_s()
        try:
            with os.fdopen(open_private(self.writing), "wb") as out:
                self.store.write_snapshot(out, header)
            with self._guard:
                # A snapshot received from the leader meanwhile is newer than this copy: it stays.
                if self._cancelled or _inode(self.path) != self._replacing:
                    log.info("Raft snapshot at entry %s dropped: a snapshot from the leader replaced "
                             "the state meanwhile", header["last"][1])
                    self.writing.unlink(missing_ok=True)
                    self._outcome = False
                    return
                os.replace(self.writing, self.path)
            fsync_path(self.path.parent)
        except Exception:
            log.exception("writing the Raft snapshot failed; the log is kept")
            self.writing.unlink(missing_ok=True)
            self._outcome = False
            return
        self.written += 1
        log.info("Raft snapshot at entry %s written in %.2f s (off the tick thread)",
                 header["last"][1], self.clock.monotonic_s() - started)
        self._outcome = True

    def state(self) -> int:
        """SERIALIZER_STATE for pysyncobj: SUCCESS or FAILED exactly once after each copy."""
        if self._thread is None:
            return int(SERIALIZER_STATE.NOT_SERIALIZING)
        if self._thread.is_alive():
            return int(SERIALIZER_STATE.SERIALIZING)
        outcome, self._thread = self._outcome, None
        return int(SERIALIZER_STATE.SUCCESS if outcome else SERIALIZER_STATE.FAILED)

    def join(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.join()

    def cancel(self) -> None:
        """A snapshot from the leader is being installed: a copy in progress is older and must
        never replace it (on a restart that older file would not match the log). Waits for it."""
        with self._guard:
            self._cancelled = True
        self.join()


class Snapshots:
    """pysyncobj's serializer and deserializer for one replica (module docstring)."""

    def __init__(self, store: StateStore, path: Path, wal: LmdbJournal, guard: RemovalGuard,
                 last_applied: Callable[[], int], clock: Clock = REAL_CLOCK) -> None:
        self.store = store
        self.path = path
        self.writer = SnapshotWriter(store, path, clock)
        self._wal = wal
        self._guard = guard
        self._last_applied = last_applied

    def save(self, path: str, data: tuple[Any, ...]) -> None:
        """pysyncobj's compaction, in the tick thread: start the snapshot in a thread of its own
        (SnapshotWriter) and return; pysyncobj asks `writer.state` until it is done."""
        last, prev, cluster = data
        # A learner's own node is None (pysyncobj's read-only node): not a member.
        header = {"last": entry_json(last), "prev": entry_json(prev),
                  "cluster": sorted(str(getattr(n, "address", n)) for n in cluster if n is not None)}
        self.writer.start(header)
        # pysyncobj renames `path` onto the snapshot as soon as this returns; there is no `path`, so
        # its rename fails (harmlessly: the writer's own rename is what replaces the snapshot).
        Path(path).unlink(missing_ok=True)

    def load(self, path: str) -> tuple[Any, ...]:
        # pysyncobj swallows any exception here and then never applies again
        # (its log starts past index 2): fail loudly instead.
        self.writer.cancel()  # a local copy in progress must not replace what arrived
        try:
            fsync_path(Path(path))  # a received snapshot is written without fsync
            header, _ = StateStore.read_snapshot_header(Path(path))
            if self._guard.installing:
                self._refuse_stale_install(entry_tuple(header["last"])[1])
            replaced = self.store.restore_snapshot(Path(path))
            mine = self.store.meta().incarnation
            if not replaced and header.get("incarnation", "") != mine:
                # A newer state of another history (replicas restored from different backups, or
                # one forced beside the others): keeping it would apply the leader's log to it.
                raise StoreError(f"a snapshot of history {header.get('incarnation') or '(never restored)'} "
                                 f"at index {header['applied_index']}, and this replica's newer state is of "
                                 f"history {mine or '(never restored)'}: restore every replica from the same "
                                 "backup, or wipe this one")
            last, prev = entry_tuple(header["last"]), entry_tuple(header["prev"])
            # As nodes: pysyncobj drops itself from this list by comparing nodes, and a string never
            # equals one (the node would count itself among its peers).
            cluster = [TCPNode(member_address(a)) for a in header["cluster"]]
        except Exception as exc:
            fail_stop.fail_stop(exc, f"loading snapshot {path}")
        log.info("snapshot at index %s %s", header["applied_index"],
                 "installed" if replaced else "older than local state: kept local state")
        # If the log still holds the snapshot's last two entries (a restart
        # after a snapshot, before pysyncobj dropped the entries it covers),
        # drop what precedes them now: pysyncobj keeps the log only when it
        # starts with exactly those two, and would otherwise clear entries
        # this replica may already have acknowledged.
        position = self._wal.position_of(prev)
        if position is not None and self._wal.position_of(last) == position + 1:
            self._wal.deleteEntriesTo(position)
        return last, prev, cluster

    def _refuse_stale_install(self, last_index: int) -> None:
        """Raft keeps the entries after the snapshot's last when the log holds them; a snapshot older
        than what this replica has applied, with its log going on past it, can only be a delayed or
        repeated one, and clearing would drop entries this replica acknowledged (a later vote of its
        could then elect a leader without them). So it stops instead (fail-stop); restarted, it has
        its log and state as they were."""
        applied, last_held = self._last_applied(), int(self._wal[-1][1])
        if applied >= last_index and last_held > last_index:
            fail_stop.fail_stop(LogRemovalRefused(
                f"a snapshot at entry {last_index} from the leader, and this replica holds entries to "
                f"{last_held}, applied to {applied}: installing it would clear acknowledged entries (a "
                "delayed or repeated snapshot)"), "installing a snapshot")


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def member_address(raw: object) -> str:
    """A member's HOST:PORT from a snapshot header (ValueError otherwise)."""
    text = str(raw)
    host, _, port = text.rpartition(":")
    if not host or not port.isascii() or not port.isdigit():
        raise ValueError(f"snapshot header names a member {text[:80]!r} that is not HOST:PORT")
    return text


def entry_json(entry: Entry) -> list[Any]:
    return [bytes(entry[0]).hex(), entry[1], entry[2]]


def entry_tuple(raw: list[Any]) -> Entry:
    return bytes.fromhex(raw[0]), int(raw[1]), int(raw[2])
