"""A replica's tick starts with its WAL's flush (pysyncobj_internals.FlushedTicks, raft.py's _Replica):
a leader's AppendEntries leave before its own entries are durable (raft_transport.py), and at the top
of its tick pysyncobj counts the leader as holding every entry of its log towards a commit."""

from __future__ import annotations

from typing import Any

import pytest
from pysyncobj import SyncObj

from controller.raft import RaftNode, _Replica
from xce.clock import ManualClock


class Wal:
    def __init__(self) -> None:
        self.pending = ["entry 7"]  # appended and sent to the followers, not yet durable

    def flush(self, lazy_commit_index: bool = False) -> None:
        self.pending.clear()


def test_the_wal_is_flushed_before_pysyncobj_s_tick_counts_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    wal = Wal()

    def tick(replica: Any, timeToWait: float = 0.0) -> None:  # noqa: N803 - pysyncobj's name
        seen.append(list(wal.pending))  # what pysyncobj's commit count would take as the leader's

    monkeypatch.setattr(SyncObj, "_onTick", tick)
    node = object.__new__(RaftNode)  # its parts, without a pysyncobj node (no threads, no sockets)
    node._wal, node._clock = wal, ManualClock()
    replica = object.__new__(_Replica)
    replica._xce_before_tick = node._before_tick
    replica._onTick(0.01)
    assert seen == [[]]
