"""A snapshot from the leader, arriving in parts: held until its header says whether to take it.

pysyncobj sends a snapshot as parts of its file (`serialized`: data, is first, is last), and on the
last one clears the follower's whole log and installs it. Raft's InstallSnapshot rule keeps the log
when the replica already holds the snapshot's last entry (raft_append.snapshot_is_held), which only
the header, at the start of the file, says. Parts are held here until the header is whole (it
names the last entry, whose command may be larger than a part); then the verdict applies to them
and to every later part of the same snapshot.

Pure: no I/O, no pysyncobj.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from controller.store import StateStore, StoreError


class SnapshotArrival:
    """The parts of one snapshot, from its first (module docstring)."""

    INSTALL = "install"  # pysyncobj takes the part: the snapshot is new to this replica
    KEEP = "keep"  # the replica holds the snapshot's last entry: the part is dropped, the log kept
    KEEP_ANSWER = "keep-answer"  # as KEEP, and this part's message answers the leader (once)

    def __init__(self) -> None:
        self._head = b""
        self._held: list[dict[str, Any]] = []
        self.verdict: str | None = None
        self.last_index = 0

    def take(self, message: dict[str, Any], data: bytes, last: bool,
             held: Callable[[int, int], bool]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each message now decided, with its verdict, in order. `held(index, term)`: whether the
        replica holds that entry (raft_append.snapshot_is_held)."""
        if self.verdict is not None:
            yield (self.verdict, message)
            return
        self._held.append(message)
        self._head += data
        self.verdict = self._decide(held, whole=last)
        if self.verdict is None:
            return
        for position, waiting in enumerate(self._held):
            first_kept = self.verdict == self.KEEP and position == 0
            yield (self.KEEP_ANSWER if first_kept else self.verdict, waiting)
        self._held, self._head = [], b""

    def _decide(self, held: Callable[[int, int], bool], whole: bool) -> str | None:
        try:
            found = StateStore.snapshot_header_of(self._head)
            if found is None:
                # The file ended inside its header: pysyncobj installs it, and loading it stops the
                # replica with the reason (raft_snapshot.Snapshots.load).
                return self.INSTALL if whole else None
            _, index, term = found[0]["last"]
            index, term = int(index), int(term)
        except (StoreError, KeyError, TypeError, ValueError):
            return self.INSTALL  # the same: a snapshot this replica cannot read fails loudly at load
        self.last_index = index
        return self.KEEP if held(index, term) else self.INSTALL
