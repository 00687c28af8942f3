"""The AppendEntries plan (controller/raft_append.py) against Raft's rule, and against pysyncobj's.

Logs here are lists of terms from a first index. `raft_rule` is Raft's receiver (Figure 2, steps
2-5) written out literally; `pysyncobj_rule` is what pysyncobj 0.3.17 does with a message
(SyncObj.__onMessageReceived): delete everything after the previous entry when the log is longer,
then append. The adapter (controller/raft.py) hands pysyncobj the message the plan rewrites, or,
when every entry is present, no entries at all; `through_the_adapter` does the same, so the
properties show what the replica's log becomes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.raft_append import (
    Accept,
    AppendEntries,
    Malformed,
    Plan,
    Reject,
    RemovesApplied,
    plan_append,
    snapshot_is_held,
)
from controller.raft_snapshot_arrival import SnapshotArrival
from controller.store import SNAPSHOT_MAGIC


@dataclass
class ListLog:
    first: int
    terms: list[int]  # terms[k] is the term of entry first + k

    def first_index(self) -> int:
        return self.first

    def last_index(self) -> int:
        return self.first + len(self.terms) - 1

    def term_at(self, index: int) -> int:
        assert self.first <= index <= self.last_index(), index
        return self.terms[index - self.first]

    def holds(self, index: int, term: int) -> bool:
        return self.first <= index <= self.last_index() and self.term_at(index) == term


@dataclass(frozen=True)
class RaftOutcome:
    terms: list[int] | None  # None: refused
    commit: int
    removed_from: int | None  # the first index step 3 deleted


def raft_rule(log: ListLog, message: AppendEntries) -> RaftOutcome:
    """Figure 2 of the Raft paper, receiver steps 2-5, one entry at a time."""
    if not log.holds(message.prev_index, message.prev_term):
        return RaftOutcome(None, 0, None)
    terms = list(log.terms)
    removed_from = None
    for index, term in message.entries:
        position = index - log.first
        if position < len(terms) and terms[position] != term:  # 3: a conflict
            del terms[position:]
            removed_from = index if removed_from is None else removed_from
        if position >= len(terms):  # 4: new
            terms.append(term)
    return RaftOutcome(terms, min(message.leader_commit, message.last_index), removed_from)


def pysyncobj_rule(log: ListLog, prev_index: int,
                   entries: list[tuple[int, int]]) -> tuple[list[int], int | None]:
    """pysyncobj's append path once the previous entry matched: (the log's terms, the first index it
    deleted)."""
    terms = list(log.terms)
    removed_from = None
    if prev_index < log.last_index():
        removed_from = prev_index + 1
        del terms[prev_index + 1 - log.first:]
    terms += [term for _, term in entries]
    return terms, removed_from


def through_the_adapter(log: ListLog, message: AppendEntries, plan: Accept) -> list[int]:
    """What the replica's log becomes: controller/raft.py's DurableTransport with this plan."""
    if plan.present == len(message.entries):
        return list(log.terms)  # pysyncobj gets no prevLogIdx: no append path at all
    terms, removed_from = pysyncobj_rule(log, plan.prev_index, list(message.entries[plan.present:]))
    assert removed_from == plan.truncate_from, "pysyncobj would remove what the plan does not"
    assert log.holds(plan.prev_index, plan.prev_term), "pysyncobj would refuse the rewritten message"
    return terms


# ------------------------------------------------------------------------------------ strategies

TERMS = st.integers(1, 4)


@st.composite
def any_log_and_message(draw: st.DrawFn) -> tuple[ListLog, AppendEntries, int]:
    """A log and a message of any terms at all (not only ones Raft produces), and a last applied entry."""
    first = draw(st.integers(1, 4))
    log = ListLog(first, draw(st.lists(TERMS, min_size=1, max_size=10)))
    prev = draw(st.integers(first - 1, log.last_index() + 2))
    in_log = first <= prev <= log.last_index()
    prev_term = log.term_at(prev) if in_log and draw(st.booleans()) else draw(TERMS)
    entries = [(prev + 1 + k, term) for k, term in enumerate(draw(st.lists(TERMS, max_size=8)))]
    applied = draw(st.integers(first - 1, log.last_index()))
    return log, AppendEntries(prev, prev_term, entries, draw(st.integers(0, 20))), applied


@st.composite
def raft_logs(draw: st.DrawFn) -> tuple[list[int], ListLog]:
    """A leader's log (terms of entries 1, 2, ...) and a follower's that agrees with it up to some
    entry and then holds entries no leader after them kept (an old leader's, never committed). The
    leader's terms are even and the stale ones odd, so no stale entry equals the leader's at its
    index (Raft's Log Matching Property: equal index and term mean equal logs up to there)."""
    leader = sorted(draw(st.lists(st.sampled_from([2, 4, 6, 8]), min_size=1, max_size=12)))
    shared = draw(st.integers(1, len(leader)))
    stale = sorted(draw(st.lists(st.sampled_from([1, 3, 5, 7, 9]).filter(lambda t: t > leader[shared - 1]),
                                 max_size=5)))
    return leader, ListLog(1, leader[:shared] + stale)


def slice_of(leader: list[int], prev: int, count: int, commit: int) -> AppendEntries:
    """The AppendEntries a pysyncobj leader with this log sends from entry prev + 1 (indexes from 1)."""
    entries = [(index, leader[index - 1]) for index in range(prev + 1, min(len(leader), prev + count) + 1)]
    return AppendEntries(prev, leader[prev - 1], entries, commit)


def apply(log: ListLog, message: AppendEntries, applied: int = 0) -> tuple[ListLog, Plan]:
    plan = plan_append(log, message, applied)
    if isinstance(plan, Accept):
        return ListLog(log.first, through_the_adapter(log, message, plan)), plan
    return log, plan


# ------------------------------------------------------------------------------------ properties


@settings(max_examples=300, deadline=None)
@given(case=any_log_and_message())
def test_the_plan_is_rafts_receiver_rule(case: tuple[ListLog, AppendEntries, int]) -> None:
    log, message, applied = case
    expected = raft_rule(log, message)
    after, plan = apply(log, message, applied)
    if expected.terms is None:
        assert isinstance(plan, Reject)
        assert plan.next_index == (message.prev_index if log.first <= message.prev_index <= log.last_index()
                                   else log.last_index() + 1)  # pysyncobj's answer
    elif expected.removed_from is not None and expected.removed_from <= applied:
        assert plan == RemovesApplied(expected.removed_from, applied)
    else:
        assert isinstance(plan, Accept)
        assert after.terms == expected.terms
        assert plan.commit_index == expected.commit
        assert plan.truncate_from == expected.removed_from


@settings(max_examples=300, deadline=None)
@given(case=any_log_and_message())
def test_matching_entries_are_never_removed(case: tuple[ListLog, AppendEntries, int]) -> None:
    log, message, applied = case
    after, plan = apply(log, message, applied)
    if not isinstance(plan, Accept):
        assert after == log
        return
    for index, term in message.entries:
        if log.holds(index, term):
            assert after.holds(index, term)
    if plan.truncate_from is None:
        assert after.terms[:len(log.terms)] == log.terms  # nothing removed: the log only grew
    else:
        kept = plan.truncate_from - log.first
        assert after.terms[:kept] == log.terms[:kept]
        _, replacing = message.entries[plan.truncate_from - message.prev_index - 1]
        assert not log.holds(plan.truncate_from, replacing)  # a conflict: the same index, another term


@settings(max_examples=200, deadline=None)
@given(case=any_log_and_message())
def test_a_repeated_append_entries_changes_nothing(case: tuple[ListLog, AppendEntries, int]) -> None:
    log, message, _ = case
    once, plan = apply(log, message)
    twice, again = apply(once, message, applied=once.last_index())  # even with everything applied
    assert twice == once
    if isinstance(plan, Accept):
        assert isinstance(again, Accept) and again.present == len(message.entries)
        assert again.truncate_from is None and again.next_index == plan.next_index


@settings(max_examples=200, deadline=None)
@given(logs=raft_logs(), data=st.data())
def test_a_delayed_append_entries_removes_nothing(logs: tuple[list[int], ListLog],
                                                  data: st.DataObject) -> None:
    """The leader's messages arrive out of order: an earlier one (a shorter prefix, or one from
    further back) after a later one took the log up to date with the leader. The follower has applied
    everything the later message committed."""
    leader, follower = logs
    later = slice_of(leader, data.draw(st.integers(1, len(leader))), len(leader), len(leader))
    caught_up, plan = apply(follower, later)
    if not isinstance(plan, Accept):
        return
    applied = plan.commit_index
    earlier = slice_of(leader, data.draw(st.integers(1, len(leader))), data.draw(st.integers(0, 12)),
                       data.draw(st.integers(0, len(leader))))
    after, late = apply(caught_up, earlier, applied)
    assert not isinstance(late, RemovesApplied)
    if isinstance(late, Accept):
        assert late.truncate_from is None
    assert after.terms[:len(caught_up.terms)] == caught_up.terms


@settings(max_examples=200, deadline=None)
@given(logs=raft_logs(), data=st.data())
def test_the_answer_claims_no_entry_the_message_did_not_verify(logs: tuple[list[int], ListLog],
                                                                data: st.DataObject) -> None:
    """On success the leader sets the follower's matchIndex to next_index - 1 and may count it toward
    a commit: the follower's log must then agree with the leader's up to there; and the commit index
    covers only entries the message vouched for, not stale ones past it."""
    leader, follower = logs
    message = slice_of(leader, data.draw(st.integers(1, len(leader))), data.draw(st.integers(0, 12)),
                       len(leader))
    after, plan = apply(follower, message)
    if isinstance(plan, Accept):
        match = plan.next_index - 1
        assert after.last_index() >= match
        assert after.terms[:match] == leader[:match]
        assert plan.commit_index <= match


def test_pysyncobj_alone_removes_entries_a_repeated_message_matches() -> None:
    """Why the plan exists: a follower holding entries 1-10 of term 1 gets again an AppendEntries of
    entries 5-7 it took long ago; pysyncobj's own rule deletes 5-10 and adds 5-7 back: 8-10 are gone,
    which the follower acknowledged and applied."""
    log = ListLog(1, [1] * 10)
    message = AppendEntries(4, 1, [(5, 1), (6, 1), (7, 1)], 10)
    terms, removed_from = pysyncobj_rule(log, message.prev_index, list(message.entries))
    assert (len(terms), removed_from) == (7, 5)
    after, plan = apply(log, message, applied=9)
    assert after == log
    assert plan == Accept(present=3, prev_index=7, prev_term=1, truncate_from=None, commit_index=7,
                          last_verified=7)


def test_the_commit_index_stops_at_the_messages_last_entry_not_the_logs() -> None:
    """Entries 4-6 here are an old leader's, never committed; the new leader's heartbeat covers up
    to entry 3 and its commit index is 6 (its own entries 4-6, of term 2)."""
    log = ListLog(1, [1, 1, 1, 1, 1, 1])
    plan = plan_append(log, AppendEntries(3, 1, [], 6), last_applied=2)
    assert isinstance(plan, Accept) and plan.commit_index == 3  # pysyncobj: min(6, log end 6) = 6


def test_a_conflict_past_the_applied_entries_truncates_there() -> None:
    log = ListLog(1, [1, 1, 1, 2, 2])
    message = AppendEntries(2, 1, [(3, 1), (4, 3), (5, 3), (6, 3)], 6)
    after, plan = apply(log, message, applied=3)
    assert isinstance(plan, Accept)
    assert (plan.present, plan.prev_index, plan.truncate_from) == (1, 3, 4)
    assert after.terms == [1, 1, 1, 3, 3, 3]


def test_a_conflict_at_an_applied_entry_is_a_fail_stop() -> None:
    log = ListLog(1, [1, 1, 1, 2, 2])
    assert plan_append(log, AppendEntries(2, 1, [(3, 1), (4, 3)], 4), last_applied=4) == RemovesApplied(4, 4)


@pytest.mark.parametrize("entries", [[(4, 1)], [(3, 1), (5, 1)], [(2, 1)]])
def test_entries_that_do_not_follow_the_previous_entry_are_malformed(entries: list[tuple[int, int]]) -> None:
    assert isinstance(plan_append(ListLog(1, [1, 1, 1]), AppendEntries(2, 1, entries, 0), 0), Malformed)


def test_a_previous_entry_outside_the_log_or_of_another_term_is_refused_as_pysyncobj_answers() -> None:
    log = ListLog(3, [1, 2, 2])  # entries 3-5 (a snapshot covers 1-2)
    assert plan_append(log, AppendEntries(7, 2, [], 9), 0) == Reject(next_index=6)
    assert plan_append(log, AppendEntries(2, 1, [(3, 1)], 9), 0) == Reject(next_index=6)
    assert plan_append(log, AppendEntries(4, 1, [(5, 2)], 9), 0) == Reject(next_index=4)


@pytest.mark.parametrize(("last_index", "last_term", "applied", "held"), [
    (5, 1, 8, True),  # applied: committed entries are the same everywhere
    (3, 9, 8, True),  # applied, whatever term the header claims (compacted below the log's first entry)
    (9, 1, 8, True),  # in the log with the same term, not yet applied
    (9, 2, 8, False),  # in the log with another term: the log conflicts and goes
    (12, 1, 8, False),  # past the log's end: new to this replica
])
def test_a_snapshot_is_held_when_its_last_entry_is_applied_or_in_the_log_with_its_term(
        last_index: int, last_term: int, applied: int, held: bool) -> None:
    log = ListLog(first=4, terms=[1] * 7)  # entries 4-10 of term 1
    assert snapshot_is_held(log, last_index, last_term, applied) is held


def snapshot_bytes(last: tuple[int, int], body: bytes = b"lmdb" * 100) -> bytes:
    header = json.dumps({"cluster_id": "c", "applied_index": 0, "last": ["00" * 300, *last]}).encode()
    return SNAPSHOT_MAGIC + struct.pack(">I", len(header)) + header + body


@pytest.mark.parametrize("held", [True, False])
def test_a_snapshot_arriving_in_parts_is_decided_once_its_header_is_whole(held: bool) -> None:
    """Parts are held until the header (here longer than a part) is whole; then each gets the verdict,
    in order, the first kept part answering the leader, and every later part the same verdict."""
    data = snapshot_bytes((9, 1))
    parts = [data[at:at + 100] for at in range(0, len(data), 100)]
    asked: list[tuple[int, int]] = []
    arrival = SnapshotArrival()
    decided: list[tuple[str, dict[str, int]]] = []
    for n, part in enumerate(parts):
        decided += arrival.take({"n": n}, part, n == len(parts) - 1,
                                lambda index, term: asked.append((index, term)) or held)
        if n == 0:
            assert decided == []  # the header goes on past the first part
    assert asked == [(9, 1)]
    assert [message["n"] for _, message in decided] == list(range(len(parts)))
    verdicts = [verdict for verdict, _ in decided]
    if held:
        assert verdicts == [SnapshotArrival.KEEP_ANSWER] + [SnapshotArrival.KEEP] * (len(parts) - 1)
        assert arrival.last_index == 9
    else:
        assert verdicts == [SnapshotArrival.INSTALL] * len(parts)


@pytest.mark.parametrize("data", [b"not a snapshot at all", SNAPSHOT_MAGIC + b"\x00\x00\x00\x05{bad}",
                                  SNAPSHOT_MAGIC + b"\x00\x00"],
                         ids=["foreign", "bad-json", "ends-in-header"])
def test_a_snapshot_whose_header_cannot_be_read_goes_to_pysyncobj(data: bytes) -> None:
    """Its loader then stops the replica with the reason (the store's checks), as before."""
    arrival = SnapshotArrival()
    decided = list(arrival.take({}, data, True, lambda index, term: True))
    assert decided == [(SnapshotArrival.INSTALL, {})]
