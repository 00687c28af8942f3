"""The table interface the state machine writes through, and an in-memory one.

The state machine (fsm.py) sees only `Tables`: named tables of byte keys to
byte values, read and written inside one transaction that its driver opens
and commits. store.py implements it over one LMDB write transaction; the
in-memory `MemoryTables` here serves unit tests of the pure core.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Protocol

TABLES = ("meta", "jobs", "queues", "hosts", "host_jobs", "counters", "requests", "request_expiry", "events",
          "tokens", "job_index", "history", "history_index", "acct", "strays", "shared", "limits",
          "share_usage")


class Tables(Protocol):
    def get(self, table: str, key: bytes) -> bytes | None: ...

    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def delete(self, table: str, key: bytes) -> None: ...

    def scan(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Items with key >= start in key order."""
        ...

    def scan_back(self, table: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Items with key <= start in reverse key order."""
        ...


class MemoryTables:
    """Dicts, with each table's keys kept sorted; what LMDB would hold, for pure tests and the
    simulator. A scan sees the table as it is at each step, as an LMDB cursor in a write transaction."""

    def __init__(self) -> None:
        self._data: dict[str, dict[bytes, bytes]] = {t: {} for t in TABLES}
        self._keys: dict[str, list[bytes]] = {t: [] for t in TABLES}

    def copy(self) -> MemoryTables:
        """An independent copy (a transaction's scratch, a snapshot)."""
        fresh = MemoryTables()
        fresh._data = {table: dict(rows) for table, rows in self._data.items()}
        fresh._keys = {table: list(keys) for table, keys in self._keys.items()}
        return fresh

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._data[table].get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        items = self._data[table]
        if key not in items:
            bisect.insort(self._keys[table], key)
        items[key] = value

    def delete(self, table: str, key: bytes) -> None:
        items = self._data[table]
        if items.pop(key, None) is not None:
            keys = self._keys[table]
            del keys[bisect.bisect_left(keys, key)]

    def scan(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        # Each step finds its place again: the table may change between steps (a cursor's walk), and
        # most scans stop after a few keys (no copy of the keys).
        items, keys = self._data[table], self._keys[table]
        at = bisect.bisect_left(keys, start)
        while at < len(keys):
            key = keys[at]
            yield key, items[key]
            at = bisect.bisect_right(keys, key)

    def scan_back(self, table: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        items, keys = self._data[table], self._keys[table]
        at = bisect.bisect_right(keys, start) - 1
        while at >= 0:
            key = keys[at]
            yield key, items[key]
            at = bisect.bisect_left(keys, key) - 1
