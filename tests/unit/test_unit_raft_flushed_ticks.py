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
    replica._xce_flush_log = node._flush_log
    replica._onTick(0.01)
    assert seen == [[]]


def test_a_new_leader_s_first_entry_is_flushed_before_anything_counts_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pysyncobj appends the new term's first entry as the node becomes the leader; a lone voter
    elects itself and counts that entry within the same tick."""
    wal = Wal()
    wal.pending.clear()

    def become_leader(replica: Any) -> None:
        wal.pending.append("the term's first entry")

    monkeypatch.setattr(SyncObj, "_SyncObj__onBecomeLeader", become_leader, raising=False)
    node = object.__new__(RaftNode)
    node._wal, node._clock = wal, ManualClock()
    replica = object.__new__(_Replica)
    replica._xce_flush_log = node._flush_log
    replica._SyncObj__onBecomeLeader()
    assert wal.pending == []
