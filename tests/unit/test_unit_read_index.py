"""Raft's ReadIndex (controller/read_index.py): when a leader may answer a read from its own state."""

from __future__ import annotations

from controller.read_index import ReadIndex

PEERS = ["b", "c"]


def _read(index: ReadIndex, commit: int = 10, now: float = 0.0) -> list[bool]:
    answers: list[bool] = []
    index.arrived(commit, PEERS, now, answers.append)
    return answers


def test_a_read_waits_for_a_majority_to_answer_an_append_entries_sent_after_it() -> None:
    index = ReadIndex()
    index.sent("b")
    index.answered("b")  # answered before the read arrived: says nothing about now
    answers = _read(index)
    index.step(leader=True, last_applied=10, now_s=0.01)
    assert answers == []
    index.sent("b")  # the next AppendEntries, after the read
    index.step(leader=True, last_applied=10, now_s=0.02)
    assert answers == []  # sent, not answered
    index.answered("b")
    index.step(leader=True, last_applied=10, now_s=0.03)
    assert answers == [True]  # the leader and b: a majority of three


def test_it_also_waits_until_the_commit_index_it_saw_is_applied() -> None:
    index = ReadIndex()
    answers = _read(index, commit=12)
    index.sent("c")
    index.answered("c")
    index.step(leader=True, last_applied=11, now_s=0.01)
    assert answers == []
    index.step(leader=True, last_applied=12, now_s=0.02)
    assert answers == [True]


def test_a_leader_cut_off_from_the_others_never_answers() -> None:
    """Its followers moved to a newer term: they do not answer its AppendEntries (or it cannot reach
    them), so the read is refused at the deadline, never answered from stale state."""
    index = ReadIndex(timeout_s=2.0)
    answers = _read(index)
    for t in range(1, 20):
        index.sent("b")
        index.sent("c")
        index.step(leader=True, last_applied=10, now_s=t * 0.1)
    assert answers == []
    index.step(leader=True, last_applied=10, now_s=2.5)
    assert answers == [False]


def test_an_answer_on_a_new_connection_does_not_confirm_a_read_that_waited_on_the_old_one() -> None:
    index = ReadIndex()
    index.sent("b")
    answers = _read(index)  # wants b's answer to its 2nd AppendEntries on this connection
    index.disconnected("b")
    index.sent("b")
    index.sent("b")
    index.answered("b")
    index.answered("b")  # two answers on the new connection: not the ones the read waits for
    index.step(leader=True, last_applied=10, now_s=0.1)
    assert answers == []
    index.sent("c")
    index.answered("c")
    index.step(leader=True, last_applied=10, now_s=0.2)
    assert answers == [True]


def test_losing_the_leadership_refuses_every_waiting_read() -> None:
    index = ReadIndex()
    first, second = _read(index), _read(index)
    index.step(leader=False, last_applied=10, now_s=0.1)
    assert first == [False] and second == [False] and index.waiting == 0


def test_a_single_replica_answers_at_once() -> None:
    index = ReadIndex()
    answers: list[bool] = []
    index.arrived(3, [], 0.0, answers.append)
    index.step(leader=True, last_applied=3, now_s=0.0)
    assert answers == [True]


def test_an_append_entries_left_unanswered_does_not_slow_every_later_read() -> None:
    """A follower does not answer an AppendEntries of a term older than its own: sent while this
    node was being deposed, it leaves the counts one apart for good. When this node leads again, the
    answer repeating the number of the first AppendEntries sent after a read confirms it, one
    round later, not one round per answer ever missing."""
    index = ReadIndex()
    for _ in range(5):
        index.sent("b")  # five never answered: b had moved to a newer term
        index.sent("c")
    answers = _read(index)
    b, c = index.sent("b"), index.sent("c")
    index.answered("b", b)
    index.step(leader=True, last_applied=10, now_s=0.01)
    assert answers == [True]
    assert c == 6


def test_an_answer_to_an_append_entries_sent_before_the_read_confirms_nothing() -> None:
    index = ReadIndex()
    before = index.sent("b")
    answers = _read(index)
    index.answered("b", before)  # arrives after the read, but answers what was sent before it
    index.step(leader=True, last_applied=10, now_s=0.01)
    assert answers == []
    index.answered("c", index.sent("c"))
    index.step(leader=True, last_applied=10, now_s=0.02)
    assert answers == [True]


def test_a_numbered_answer_on_a_new_connection_confirms_a_read_whose_append_entries_it_answers() -> None:
    """Numbers are never reused, so unlike the counts they outlive a connection: the answer to an
    AppendEntries sent after the read is one, on whichever connection it came."""
    index = ReadIndex()
    answers = _read(index)
    index.sent("b")  # lost with its connection
    index.disconnected("b")
    index.answered("b", index.sent("b"))
    index.step(leader=True, last_applied=10, now_s=0.1)
    assert answers == [True]


def test_an_answer_repeating_a_number_this_process_never_sent_confirms_nothing() -> None:
    """A late answer to an AppendEntries of this replica's earlier process (pysyncobj may keep the
    old connection open a while) carries that process's number: never one of this one's, whose
    numbers start at a random point."""
    index = ReadIndex(first_sequence=1000)
    answers = _read(index)
    index.answered("b", 5000)  # the earlier process had sent 5000 AppendEntries to b
    index.answered("b", 7)  # or fewer
    index.sent("b")
    index.step(leader=True, last_applied=10, now_s=0.01)
    assert answers == []
    index.answered("b", 1001)
    index.step(leader=True, last_applied=10, now_s=0.02)
    assert answers == [True]


def test_numbered_answers_are_not_counted() -> None:
    """After a reconnect the counts start over, and answers to what was sent on the old connection
    may still arrive: counted, they would run ahead of what was sent on the new one."""
    index = ReadIndex()
    early = [index.sent("b") for _ in range(3)]
    index.disconnected("b")
    answers = _read(index)  # wants the answer to the first AppendEntries on the new connection
    for number in early:
        index.answered("b", number)  # late answers to the old connection's
    index.step(leader=True, last_applied=10, now_s=0.01)
    assert answers == []
