"""Unit tests of the Raft WAL (controller/raft_wal.py, LmdbJournal).

The durability point: entries and the commit index reach the disk at
`flush()` (and `deleteEntriesTo`, which flushes at once); the term and vote
at `setCurrentTerm`, before it returns. A "crash" here is a child process
that makes changes and leaves with os._exit, so nothing after the last flush
can be written by a close; the test then reopens the journal and reads what
the disk holds.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysyncobj.journal import Journal

from controller.raft_wal import LmdbJournal

ROOT = Path(__file__).resolve().parents[2]


def entries(count: int, first: int = 1, term: int = 1) -> list[tuple[bytes, int, int]]:
    return [(f"cmd{i}".encode(), i, term) for i in range(first, first + count)]


@pytest.fixture
def wal_path(tmp_path: Path) -> Path:
    return tmp_path / "wal"


@pytest.fixture
def journal(wal_path: Path) -> Iterator[LmdbJournal]:
    opened = LmdbJournal(wal_path)
    try:
        yield opened
    finally:
        opened.close()


def reopened(path: Path) -> tuple[list[tuple[bytes, int, int]], int, int, str | None]:
    """What the disk holds: entries, commit index, term, vote."""
    again = LmdbJournal(path)
    try:
        return list(again[:]), again.getRaftCommitIndex(), again.getCurrentTerm(), again.getVotedForNodeId()
    finally:
        again.close()


def crash_after(path: Path, steps: str) -> None:
    """Open the journal at `path` in a child process, run `steps` on `j`, die."""
    script = "import os\nfrom controller.raft_wal import LmdbJournal\n" \
             f"j = LmdbJournal({str(path)!r})\n{textwrap.dedent(steps)}\nos._exit(0)\n"
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=60)


# ---------------------------------------------------------------- in memory


def test_journal_implements_every_pysyncobj_journal_method() -> None:
    required = [name for name, value in vars(Journal).items()
                if callable(value) and name != "__init__"]
    missing = [name for name in required if name not in vars(LmdbJournal)]
    assert missing == []


def test_add_then_index_slice_and_len(journal: LmdbJournal) -> None:
    assert len(journal) == 0
    for entry in entries(5):
        journal.add(*entry)
    journal.add(bytearray(b"cmd6"), 6, 2)
    assert len(journal) == 6
    assert journal[0] == (b"cmd1", 1, 1)
    assert journal[-1] == (b"cmd6", 6, 2)
    assert type(journal[-1][0]) is bytes
    assert journal[1:3] == [(b"cmd2", 2, 1), (b"cmd3", 3, 1)]
    assert journal[4:] == [(b"cmd5", 5, 1), (b"cmd6", 6, 2)]
    assert journal[:] == [*entries(5), (b"cmd6", 6, 2)]
    with pytest.raises(IndexError):
        journal[6]


def test_delete_entries_from_drops_the_tail_by_position(journal: LmdbJournal) -> None:
    for entry in entries(5, first=11):
        journal.add(*entry)
    journal.deleteEntriesFrom(2)  # position, not Raft index
    assert journal[:] == entries(2, first=11)
    journal.deleteEntriesFrom(7)  # past the end: nothing
    assert len(journal) == 2


def test_delete_entries_from_asks_its_check_with_the_first_index_and_removes_nothing_it_refuses(
        wal_path: Path) -> None:
    asked: list[int] = []

    def check(first_removed: int) -> None:
        asked.append(first_removed)
        if first_removed < 14:
            raise RuntimeError("refused")

    journal = LmdbJournal(wal_path, check_removal=check)
    try:
        for entry in entries(5, first=11):
            journal.add(*entry)
        with pytest.raises(RuntimeError):
            journal.deleteEntriesFrom(2)
        assert journal[:] == entries(5, first=11)
        journal.deleteEntriesFrom(3)
        journal.deleteEntriesFrom(9)  # past the end: nothing to ask about
        assert (asked, journal[:]) == ([13, 14], entries(3, first=11))
    finally:
        journal.close()


def test_delete_entries_to_drops_the_head_by_position(wal_path: Path) -> None:
    seen: list[int] = []
    journal = LmdbJournal(wal_path, before_truncate=lambda: seen.append(len(journal)))
    try:
        for entry in entries(5, first=11):
            journal.add(*entry)
        journal.deleteEntriesTo(0)
        assert seen == [] and len(journal) == 5
        journal.deleteEntriesTo(2)
        assert seen == [5]  # called before anything is dropped
        assert journal[:] == entries(3, first=13)
        journal.deleteEntriesTo(10)  # past the end: everything
        assert journal[:] == []
    finally:
        journal.close()


def test_clear_empties_and_accepts_new_entries(journal: LmdbJournal) -> None:
    for entry in entries(3):
        journal.add(*entry)
    journal.clear()
    assert len(journal) == 0
    journal.add(b"snap", 40, 3)
    assert journal[:] == [(b"snap", 40, 3)]


def test_term_vote_and_commit_index_defaults_and_updates(journal: LmdbJournal) -> None:
    assert journal.getCurrentTerm() == 0
    assert journal.getVotedForNodeId() is None
    assert journal.getRaftCommitIndex() == 1
    journal.setCurrentTerm(3, "10.0.0.2:7201")
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId()) == (3, "10.0.0.2:7201")
    journal.setCurrentTerm(4, None)
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId()) == (4, None)
    journal.setRaftCommitIndex(17)
    assert journal.getRaftCommitIndex() == 17


# ---------------------------------------------------------------- close and reopen


def test_everything_survives_close_and_reopen(wal_path: Path) -> None:
    journal = LmdbJournal(wal_path)
    for entry in entries(6):
        journal.add(*entry)
    journal.deleteEntriesTo(1)
    journal.deleteEntriesFrom(4)
    journal.add(b"new5", 5, 2)
    journal.setRaftCommitIndex(4)
    journal.setCurrentTerm(2, "n3")
    journal.close()
    assert reopened(wal_path) == ([(b"cmd2", 2, 1), (b"cmd3", 3, 1), (b"cmd4", 4, 1), (b"new5", 5, 2)],
                                  4, 2, "n3")


def test_clear_survives_reopen(wal_path: Path) -> None:
    journal = LmdbJournal(wal_path)
    for entry in entries(3):
        journal.add(*entry)
    journal.flush()
    journal.clear()
    journal.add(b"after", 9, 2)
    journal.close()
    assert reopened(wal_path)[0] == [(b"after", 9, 2)]


def test_truncated_tail_rewritten_at_the_same_indexes_survives_reopen(wal_path: Path) -> None:
    journal = LmdbJournal(wal_path)
    for entry in entries(5):
        journal.add(*entry)
    journal.flush()
    journal.deleteEntriesFrom(2)
    for entry in entries(2, first=3, term=2):
        journal.add(*entry)
    journal.deleteEntriesFrom(3)
    journal.add(b"last", 4, 3)
    journal.close()
    assert reopened(wal_path)[0] == [*entries(2), (b"cmd3", 3, 2), (b"last", 4, 3)]


# ---------------------------------------------------------------- crash: durable only after flush


def test_entries_added_after_the_last_flush_are_lost_in_a_crash(wal_path: Path) -> None:
    crash_after(wal_path, """
        for i in (1, 2, 3):
            j.add(b"cmd%d" % i, i, 1)
        j.setRaftCommitIndex(3)
        j.flush()
        for i in (4, 5):
            j.add(b"cmd%d" % i, i, 1)
        j.setRaftCommitIndex(5)
    """)
    assert reopened(wal_path)[:2] == (entries(3), 3)


def test_nothing_added_is_on_disk_without_a_flush(wal_path: Path) -> None:
    crash_after(wal_path, """
        j.add(b"cmd1", 1, 1)
        j.setRaftCommitIndex(9)
        j.clear()
    """)
    assert reopened(wal_path)[:2] == ([], 1)


def test_one_second_timer_flushes(wal_path: Path) -> None:
    crash_after(wal_path, """
        j.add(b"cmd1", 1, 1)
        j.onOneSecondTimer()
    """)
    assert reopened(wal_path)[0] == entries(1)


def test_set_current_term_is_durable_immediately(wal_path: Path) -> None:
    crash_after(wal_path, """
        j.setCurrentTerm(5, "n2")
    """)
    assert reopened(wal_path)[2:] == (5, "n2")


def test_delete_entries_from_is_durable_only_after_flush(wal_path: Path) -> None:
    crash_after(wal_path, """
        for i in (1, 2, 3):
            j.add(b"cmd%d" % i, i, 1)
        j.flush()
        j.deleteEntriesFrom(1)
    """)
    assert reopened(wal_path)[0] == entries(3)


def test_delete_entries_to_is_durable_immediately(wal_path: Path) -> None:
    crash_after(wal_path, """
        for i in (1, 2, 3, 4):
            j.add(b"cmd%d" % i, i, 1)
        j.deleteEntriesTo(2)
    """)
    assert reopened(wal_path)[0] == entries(2, first=3)


def test_size_bytes_follows_adds_deletes_and_reopen(journal: LmdbJournal, wal_path: Path) -> None:
    # The adapter forces a snapshot past a byte bound; the count must be right.
    for entry in entries(10):
        journal.add(*entry)
    total = sum(len(e[0]) for e in entries(10))
    assert journal.size_bytes == total
    journal.deleteEntriesFrom(8)
    journal.deleteEntriesTo(2)
    assert journal.size_bytes == sum(len(e[0]) for e in entries(10)[2:8])
    journal.flush()
    journal.close()
    again = LmdbJournal(wal_path)
    try:
        assert again.size_bytes == sum(len(e[0]) for e in entries(10)[2:8])
        again.clear()
        assert again.size_bytes == 0
    finally:
        again.close()


def test_failed_flush_keeps_its_ops_for_the_next_flush(journal: LmdbJournal, wal_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A write that fails must not be skipped: the next flush writes it too,
    # or a later acknowledgement would cover entries that are not on disk.
    for entry in entries(3):
        journal.add(*entry)
    journal.flush()
    for entry in entries(3, first=4):
        journal.add(*entry)
    failures: list[BaseException] = []
    journal._on_failure = failures.append
    real_begin = journal._env.begin

    def broken(*args: object, **kwargs: object) -> object:
        raise OSError("disk full")

    monkeypatch.setattr(journal, "_env", type("Env", (), {"begin": staticmethod(broken)})())
    with pytest.raises(OSError):
        journal.flush()
    assert len(failures) == 1
    monkeypatch.setattr(journal, "_env", real_begin.__self__)
    journal.add(*entries(1, first=7)[0])
    journal.flush()
    journal.close()
    assert reopened(wal_path)[0] == entries(7)
