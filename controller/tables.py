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
    """Sorted dicts; what LMDB would hold, for pure tests."""

    def __init__(self) -> None:
        self._data: dict[str, dict[bytes, bytes]] = {t: {} for t in TABLES}

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._data[table].get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._data[table][key] = value

    def delete(self, table: str, key: bytes) -> None:
        self._data[table].pop(key, None)

    def scan(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        items = self._data[table]
        keys = sorted(items)
        for key in keys[bisect.bisect_left(keys, start):]:
            if key in items:
                yield key, items[key]

    def scan_back(self, table: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        items = self._data[table]
        keys = sorted(items)
        for key in reversed(keys[:bisect.bisect_right(keys, start)]):
            if key in items:
                yield key, items[key]
