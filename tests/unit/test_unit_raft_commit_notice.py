"""When a leader owes its followers an AppendEntries round only for a new commit index (raft.py)."""

from __future__ import annotations

import pytest

from controller.raft import RaftSettings, commit_notice


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
