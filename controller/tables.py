"""The table interface the state machine writes through, and an in-memory one.

The state machine (fsm.py) sees only `Tables`: named tables of byte keys to
byte values, read and written inside one transaction that its driver opens
and commits. store.py implements it over one LMDB write transaction; the
in-memory `MemoryTables` here serves unit tests of the pure core.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

TABLES = ("meta", "jobs", "queues", "hosts", "host_jobs", "counters", "requests", "request_expiry", "events",
          "tokens", "job_index", "history", "history_index", "acct", "strays", "shared", "limits",
          "share_usage", "audit", "reservations")


class Tables(Protocol):
    def get(self, table: str, key: bytes) -> bytes | None: ...

    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def delete(self, table: str, key: bytes) -> None: ...

    def scan(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Items with key >= start in key order."""
        ...

    def first(self, table: str, start: bytes = b"") -> tuple[bytes, bytes] | None:
        """The first item with key >= start (a scan's first step: most entries look once, to find
        nothing due to clean or prune)."""
        ...

    def scan_back(self, table: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Items with key <= start in reverse key order."""
        ...


class SortedKeys:
    """A table's keys in order, in chunks of at most 2 x `chunk`: a key put in the middle moves one
    chunk's pointers, not the whole table's (the simulator's history index, 300,000 keys in one
    list, moved a megabyte for each job that ended)."""

    __slots__ = ("chunk", "chunks", "maxes")

    def __init__(self, chunk: int = 1000) -> None:
        self.chunk = chunk
        self.chunks: list[list[bytes]] = []  # none empty
        self.maxes: list[bytes] = []  # each chunk's last key

    @staticmethod
    def of(keys: Iterable[bytes], chunk: int = 1000) -> SortedKeys:
        """These keys (none twice), sorted."""
        made = SortedKeys(chunk)
        ordered = sorted(keys)
        made.chunks = [ordered[at:at + chunk] for at in range(0, len(ordered), chunk)]
        made.maxes = [keys_[-1] for keys_ in made.chunks]
        return made

    def copy(self) -> SortedKeys:
        fresh = SortedKeys(self.chunk)
        fresh.chunks = [list(keys) for keys in self.chunks]
        fresh.maxes = list(self.maxes)
        return fresh

    def add(self, key: bytes) -> None:
        """Put a key that is not there."""
        maxes, chunks = self.maxes, self.chunks
        if not maxes:
            chunks.append([key])
            maxes.append(key)
            return
        at = bisect.bisect_left(maxes, key)
        if at == len(maxes):  # past the end (as keys that grow are put)
            at -= 1
            keys = chunks[at]
            keys.append(key)
            maxes[at] = key
        else:
            keys = chunks[at]
            bisect.insort(keys, key)
        if len(keys) > 2 * self.chunk:
            tail = keys[self.chunk:]
            del keys[self.chunk:]
            chunks.insert(at + 1, tail)
            maxes[at] = keys[-1]
            maxes.insert(at + 1, tail[-1])

    def remove(self, key: bytes) -> None:
        """Take out a key that is there."""
        maxes, chunks = self.maxes, self.chunks
        at = bisect.bisect_left(maxes, key)
        keys = chunks[at]
        del keys[bisect.bisect_left(keys, key)]
        if not keys:
            del chunks[at], maxes[at]
        elif maxes[at] == key:
            maxes[at] = keys[-1]

    def ceiling(self, key: bytes) -> bytes | None:
        """The first key >= key."""
        return self._after(key, bisect.bisect_left)

    def higher(self, key: bytes) -> bytes | None:
        """The first key > key."""
        return self._after(key, bisect.bisect_right)

    def floor(self, key: bytes) -> bytes | None:
        """The last key <= key."""
        return self._before(key, bisect.bisect_right)

    def lower(self, key: bytes) -> bytes | None:
        """The last key < key."""
        return self._before(key, bisect.bisect_left)

    def _after(self, key: bytes, find: Callable[[list[bytes], bytes], int]) -> bytes | None:
        """The first key past `find`'s place for key (bisect_left: >= key; bisect_right: > key)."""
        at = find(self.maxes, key)  # the first chunk that has such a key
        if at == len(self.maxes):
            return None
        keys = self.chunks[at]
        return keys[find(keys, key)]

    def _before(self, key: bytes, find: Callable[[list[bytes], bytes], int]) -> bytes | None:
        """The last key before `find`'s place for key (bisect_right: <= key; bisect_left: < key)."""
        at = bisect.bisect_left(self.maxes, key)  # the first chunk that reaches key
        if at < len(self.maxes):
            keys = self.chunks[at]
            below = find(keys, key) - 1
            if below >= 0:
                return keys[below]
        return self.chunks[at - 1][-1] if at > 0 else None


class MemoryTables:
    """Dicts, with each table's keys kept sorted; what LMDB would hold, for pure tests and the
    simulator. A scan sees the table as it is at each step, as an LMDB cursor in a write transaction.
    A table's keys are sorted from its first scan on: the tables only read by key (the jobs, the
    hosts' jobs, history...) keep no order they would pay for at each new key."""

    def __init__(self) -> None:
        self._data: dict[str, dict[bytes, bytes]] = {t: {} for t in TABLES}
        self._keys: dict[str, SortedKeys] = {}  # the tables scanned so far

    def copy(self) -> MemoryTables:
        """An independent copy (a transaction's scratch, a snapshot)."""
        fresh = MemoryTables()
        fresh._data = {table: dict(rows) for table, rows in self._data.items()}
        fresh._keys = {table: keys.copy() for table, keys in self._keys.items()}
        return fresh

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._data[table].get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        items = self._data[table]
        if key not in items:
            keys = self._keys.get(table)
            if keys is not None:
                keys.add(key)
        items[key] = value

    def delete(self, table: str, key: bytes) -> None:
        items = self._data[table]
        if items.pop(key, None) is not None:
            keys = self._keys.get(table)
            if keys is not None:
                keys.remove(key)

    def _sorted(self, table: str) -> SortedKeys:
        keys = self._keys.get(table)
        if keys is None:
            keys = self._keys[table] = SortedKeys.of(self._data[table])
        return keys

    def first(self, table: str, start: bytes = b"") -> tuple[bytes, bytes] | None:
        key = self._sorted(table).ceiling(start)
        return None if key is None else (key, self._data[table][key])

    def scan(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        # Each step finds its place again: the table may change between steps (a cursor's walk), and
        # most scans stop after a few keys (no copy of the keys).
        items, keys = self._data[table], self._sorted(table)
        key = keys.ceiling(start)
        while key is not None:
            yield key, items[key]
            key = keys.higher(key)

    def scan_back(self, table: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        items, keys = self._data[table], self._sorted(table)
        key = keys.floor(start)
        while key is not None:
            yield key, items[key]
            key = keys.lower(key)
