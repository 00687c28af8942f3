"""Committed state in memory for tests of the leader's pure parts: read it, apply entries to it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from controller import fsm
from controller.tables import MemoryTables
from xce.v1 import log_pb2 as log


class MemoryState:
    """What StateStore offers the leader core and the worker sessions, over MemoryTables."""

    def __init__(self) -> None:
        self.tables = MemoryTables()
        self.index = 0

    @contextlib.contextmanager
    def read(self) -> Iterator[MemoryTables]:
        yield self.tables

    def apply_all(self, entry: log.Entry) -> list[log.Result]:
        """Apply at the next index; every result."""
        self.index += 1
        results = fsm.apply(self.tables, self.index, entry.SerializeToString())
        assert results is not None
        return results

    def apply(self, entry: log.Entry) -> log.Result:
        return self.apply_all(entry)[0]
