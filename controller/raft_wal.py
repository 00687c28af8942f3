"""The Raft log (WAL) in LMDB, behind pysyncobj's Journal interface.

Theory of operation. pysyncobj's own FileJournal never fsyncs. This journal
keeps every entry in memory (pysyncobj indexes and slices it constantly) and
in LMDB, where it becomes durable at `flush()`: one write transaction, synced.
The Raft adapter calls `flush()` before any message but a leader's
AppendEntries leaves this node, at the start and the end of every tick and
when this node becomes the leader, so an entry is on disk before anyone (a
follower's acknowledgement, or the leader counting itself in a majority)
relies on it.
The current term and vote are written synchronously, as Raft requires, before
the vote request or grant that reflects them is sent.

Layout: table `log`, key = index (8 bytes, big-endian), value = term (8
bytes) + pysyncobj's command bytes; table `meta`, JSON under b"state":
commit index, term, vote.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

from xce.private import private_lmdb

MAP_SIZE = 8 << 30
# False only under XCE_FAULT ack-before-sync (faults.py): a build that acknowledges before its log is on disk.
SYNC = True

Entry = tuple[bytes, int, int]  # pysyncobj's (command, index, term)


class LmdbJournal:
    def __init__(self, path: Path, before_truncate: Callable[[], None] | None = None,
                 on_failure: Callable[[BaseException], None] | None = None,
                 check_removal: Callable[[int], None] | None = None) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(private_lmdb(Path(path))), map_size=MAP_SIZE, max_dbs=2, sync=SYNC,
                              metasync=SYNC, mode=0o600)
        self._log = self._env.open_db(b"log")
        self._meta_db = self._env.open_db(b"meta")
        # Called before entries covered by a snapshot are dropped, so the
        # snapshot is durable first (pysyncobj renames it without an fsync).
        self._before_truncate = before_truncate
        # A write that failed must not be skipped by the next flush (a later
        # acknowledgement would cover entries that are not on disk): the ops
        # go back in front, and `on_failure` decides; the adapter stops the
        # replica, since pysyncobj would carry on after an exception.
        self._on_failure = on_failure
        # Called with the first index before entries are removed from the end (a conflict with the
        # leader's log); it raises, or stops the replica, to refuse. The adapter's guard lets only
        # a removal its AppendEntries plan found, and never of an applied entry (raft_append.py).
        self._check_removal = check_removal
        self._entries: list[Entry] = []
        self.size_bytes = 0  # commands held in memory; the adapter compacts past a bound
        self._pending: list[tuple[str, int, int, bytes]] = []
        self._meta: dict[str, Any] = {"commit": 1, "term": 0, "vote": None}
        self._meta_dirty = False
        self._vote_dirty = False
        with self._env.begin() as txn:
            raw = txn.get(b"state", db=self._meta_db)
            if raw is not None:
                self._meta.update(json.loads(raw))
            for key, value in txn.cursor(db=self._log):
                index = struct.unpack(">Q", key)[0]
                term = struct.unpack(">Q", value[:8])[0]
                self._entries.append((bytes(value[8:]), index, term))
                self.size_bytes += len(value) - 8

    # -------------------------------------------------------------- entries

    def add(self, command: bytes, idx: int, term: int) -> None:
        command = bytes(command)
        self._entries.append((command, idx, term))
        self.size_bytes += len(command)
        self._pending.append(("put", idx, term, command))

    def clear(self) -> None:
        self._entries = []
        self.size_bytes = 0
        self._pending.append(("clear", 0, 0, b""))

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802 (pysyncobj's name)
        if entryFrom >= len(self._entries):
            return
        first_gone = self._entries[entryFrom][1]
        if self._check_removal is not None:
            self._check_removal(first_gone)
        self.size_bytes -= sum(len(e[0]) for e in self._entries[entryFrom:])
        del self._entries[entryFrom:]
        self._pending.append(("from", first_gone, 0, b""))

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802
        if entryTo <= 0:
            return
        if self._before_truncate is not None:
            self._before_truncate()
        first_kept = self._entries[entryTo][1] if entryTo < len(self._entries) else None
        self.size_bytes -= sum(len(e[0]) for e in self._entries[:entryTo])
        del self._entries[:entryTo]
        if first_kept is None:
            self._pending.append(("clear", 0, 0, b""))
        else:
            self._pending.append(("to", first_kept, 0, b""))
        self.flush()

    def position_of(self, entry: Entry) -> int | None:
        """Where `entry` (command, index, term) stands in the log, if it does."""
        if not self._entries:
            return None
        position = entry[1] - self._entries[0][1]
        if 0 <= position < len(self._entries) and self._entries[position] == entry:
            return position
        return None

    def __getitem__(self, item: int | slice) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    # -------------------------------------------------------------- Raft state

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:  # noqa: N802,N803
        if raftCommitIndex != self._meta["commit"]:
            self._meta["commit"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:  # noqa: N802
        return int(self._meta["commit"])

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:  # noqa: N802,N803
        self._meta["term"] = term
        self._meta["vote"] = None if votedForNodeId is None else str(votedForNodeId)
        self._meta_dirty = self._vote_dirty = True
        self.flush()

    def getCurrentTerm(self) -> int:  # noqa: N802
        return int(self._meta["term"])

    def getVotedForNodeId(self) -> str | None:  # noqa: N802
        vote = self._meta["vote"]
        return None if vote is None else str(vote)

    def onOneSecondTimer(self) -> None:  # noqa: N802
        self.flush()

    # -------------------------------------------------------------- durability

    def flush(self, lazy_commit_index: bool = False) -> None:
        """Make every change so far durable, in one synced transaction.

        With `lazy_commit_index` a changed commit index alone is not worth an
        fsync (Raft recovers it from the leader); it rides along with the next
        entries or the once-a-second flush.
        """
        if not self._pending and not self._vote_dirty and (lazy_commit_index or not self._meta_dirty):
            return
        pending, self._pending = self._pending, []
        try:
            with self._env.begin(write=True) as txn:
                for op, idx, term, command in pending:
                    if op == "put":
                        txn.put(struct.pack(">Q", idx), struct.pack(">Q", term) + command, db=self._log)
                    elif op == "clear":
                        txn.drop(self._log, delete=False)
                    else:
                        self._delete_range(txn, idx, op)
                if self._meta_dirty:
                    txn.put(b"state", json.dumps(self._meta).encode(), db=self._meta_db)
        except Exception as exc:
            self._pending[:0] = pending
            if self._on_failure is None:
                raise
            self._on_failure(exc)
            raise
        self._meta_dirty = self._vote_dirty = False

    def _delete_range(self, txn: lmdb.Transaction, idx: int, op: str) -> None:
        cursor = txn.cursor(db=self._log)
        boundary = struct.pack(">Q", idx)
        if op == "from":
            if cursor.set_range(boundary):
                while cursor.delete():
                    pass
        else:  # "to": everything below idx
            if cursor.first():
                while cursor.key() and bytes(cursor.key()) < boundary:
                    if not cursor.delete():
                        break

    def _destroy(self) -> None:
        self.flush()
        self._env.close()

    def close(self) -> None:
        self._destroy()
