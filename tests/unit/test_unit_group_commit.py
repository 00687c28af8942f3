"""Unit tests of the group commit policy (controller/group_commit.py).

What happens to the callers of a batch (results, unknown outcomes, a
leadership that ends) is the leader core's, and tests/unit/test_unit_leader.py
checks it.
"""

from __future__ import annotations

import pytest

from controller.group_commit import GroupCommit


def ids(batch: list[str] | None) -> list[str]:
    assert batch is not None
    return batch


def test_requests_queued_together_go_as_one_batch_in_arrival_order() -> None:
    commit: GroupCommit[str] = GroupCommit()
    for i in range(50):
        commit.add(f"r{i}", 10)
    assert ids(commit.take()) == [f"r{i}" for i in range(50)]
    assert (commit.batches, commit.requests, len(commit)) == (1, 50, 0)


def test_requests_arriving_while_a_batch_is_in_flight_form_the_next_batch() -> None:
    commit: GroupCommit[str] = GroupCommit(max_in_flight=1)
    commit.add("r0", 10)
    assert ids(commit.take()) == ["r0"]
    for i in range(1, 30):
        commit.add(f"r{i}", 10)
    assert commit.take() is None  # held back: one proposal in flight at most
    commit.done()
    assert ids(commit.take()) == [f"r{i}" for i in range(1, 30)]


def test_light_load_proposes_at_once_without_waiting_for_company() -> None:
    commit: GroupCommit[str] = GroupCommit()
    for i in range(3):
        commit.add(f"r{i}", 10)
        assert ids(commit.take()) == [f"r{i}"]
        commit.done()


def test_max_requests_bounds_every_batch() -> None:
    commit: GroupCommit[int] = GroupCommit(max_requests=7, max_in_flight=100)
    for i in range(50):
        commit.add(i, 10)
    batches = []
    while (batch := commit.take()) is not None:
        batches.append(batch)
    assert [len(b) for b in batches] == [7] * 7 + [1]
    assert [i for b in batches for i in b] == list(range(50))


def test_max_bytes_bounds_every_batch_of_more_than_one_and_a_big_request_goes_alone() -> None:
    commit: GroupCommit[int] = GroupCommit(max_bytes=350, max_in_flight=100)
    for i in range(10):
        commit.add(i, 100)
    commit.add(99, 1000)
    commit.add(100, 100)
    batches = []
    while (batch := commit.take()) is not None:
        batches.append(batch)
    assert batches == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9], [99], [100]]


def test_max_in_flight_bounds_outstanding_batches() -> None:
    commit: GroupCommit[int] = GroupCommit(max_requests=2, max_in_flight=3)
    for i in range(40):
        commit.add(i, 1)
    taken = [commit.take() for _ in range(5)]
    assert [t is not None for t in taken] == [True, True, True, False, False]
    commit.done()
    assert commit.take() == [6, 7]


def test_drain_hands_back_what_is_still_queued() -> None:
    commit: GroupCommit[int] = GroupCommit(max_requests=1)
    for i in range(4):
        commit.add(i, 1)
    assert commit.take() == [0]
    assert commit.queued() == [1, 2, 3] and len(commit) == 3  # looked at, left in place
    assert commit.drain() == [1, 2, 3] and commit.take() is None


def test_bounds_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        GroupCommit(max_in_flight=0)
