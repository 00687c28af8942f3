"""When a leader owes its followers an AppendEntries round only for a new commit index (raft.py).

The rule (`commit_notice`) is pure; the wiring is checked on a replica that runs no node: its
pysyncobj state set by hand, pysyncobj's own round and apply replaced by stand-ins that record.
"""

from __future__ import annotations

from typing import Any

import pytest
from pysyncobj import SyncObj

from controller.pysyncobj_internals import LazyCommitNotice, commit_sent
from controller.raft import RaftNode, RaftSettings, commit_notice
from xce.clock import ManualClock


def test_nothing_is_owed_while_the_last_round_carried_the_commit() -> None:
    assert commit_notice(False, None, 10.0, 0.005) == (False, None)
    assert commit_notice(False, 9.0, 10.0, 0.005) == (False, None)  # a round carried it meanwhile


@pytest.mark.parametrize(("owed_since", "now", "expected"), [
    (None, 10.0, (False, 10.0)),  # first seen ahead: owed from now
    (10.0, 10.004, (False, 10.0)),  # not yet: new entries may still carry it
    (10.0, 10.005, (True, None)),  # due: a round of its own, and nothing owed after it
    (10.0, 11.0, (True, None)),
])
def test_a_commit_ahead_is_owed_then_due(owed_since: float | None, now: float,
                                         expected: tuple[bool, float | None]) -> None:
    assert commit_notice(True, owed_since, now, 0.005) == expected


def test_without_a_wait_the_round_goes_at_the_first_tick() -> None:
    assert commit_notice(True, None, 10.0, 0.0) == (True, None)


def test_the_default_wait_is_well_inside_a_heartbeat() -> None:
    settings = RaftSettings()
    assert 0 < settings.commit_notice_s < settings.heartbeat_s


@pytest.mark.parametrize("wait_s", [-0.001, 0.05, 1.0])
def test_a_wait_below_zero_or_past_a_heartbeat_is_refused(wait_s: float) -> None:
    with pytest.raises(ValueError, match="commit_notice_s"):
        RaftSettings(commit_notice_s=wait_s).check()


def _replica(monkeypatch: pytest.MonkeyPatch, commit: int, leader: bool = True) -> tuple[Any, list[int]]:
    """(a LazyCommitNotice at this commit index, the commit index each of pysyncobj's rounds carried)."""
    rounds: list[int] = []
    monkeypatch.setattr(SyncObj, "_SyncObj__sendAppendEntries",
                        lambda self: rounds.append(self.raftCommitIndex))
    monkeypatch.setattr(SyncObj, "_SyncObj__applyLogEntries", lambda self: True)  # "send a round now"
    replica: Any = object.__new__(LazyCommitNotice)
    replica._SyncObj__raftCommitIndex = commit
    replica._SyncObj__raftState = 2 if leader else 0  # pysyncobj's _RAFT_STATE
    return replica, rounds


def _node(replica: Any, clock: ManualClock) -> RaftNode:
    node: Any = object.__new__(RaftNode)
    node._replica, node._clock, node.settings, node._commit_owed_since = replica, clock, RaftSettings(), None
    return node  # type: ignore[no-any-return]


def test_a_tick_that_applied_asks_for_no_round_and_each_round_notes_its_commit_index(
        monkeypatch: pytest.MonkeyPatch) -> None:
    replica, rounds = _replica(monkeypatch, commit=7)
    assert replica._SyncObj__applyLogEntries() is False  # pysyncobj's own asked for one
    assert commit_sent(replica) == 0
    replica._SyncObj__sendAppendEntries()
    assert rounds == [7] and commit_sent(replica) == 7


def test_a_leader_sends_a_round_once_a_commit_went_uncarried_for_the_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    replica, rounds = _replica(monkeypatch, commit=7)
    clock = ManualClock()
    node = _node(replica, clock)
    node._notice_commit()  # owed from now
    clock.advance(4)
    node._notice_commit()
    assert rounds == []
    clock.advance(1)
    node._notice_commit()
    assert rounds == [7] and commit_sent(replica) == 7
    clock.advance(100)
    node._notice_commit()  # carried: nothing owed
    assert rounds == [7]


def test_a_round_that_carried_the_commit_meanwhile_owes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    replica, rounds = _replica(monkeypatch, commit=7)
    clock = ManualClock()
    node = _node(replica, clock)
    node._notice_commit()
    replica._SyncObj__sendAppendEntries()  # the next entries' round, say
    clock.advance(10)
    node._notice_commit()
    assert rounds == [7]


def test_a_follower_owes_no_round(monkeypatch: pytest.MonkeyPatch) -> None:
    replica, rounds = _replica(monkeypatch, commit=7, leader=False)
    clock = ManualClock()
    node = _node(replica, clock)
    for _ in range(3):
        node._notice_commit()
        clock.advance(10)
    assert rounds == []
