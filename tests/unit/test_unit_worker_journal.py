"""The worker's journal (LMDB): a lazily put record is read back at once, committed with the next
synced put or at close, and lost (only it) when the process dies before either."""

from __future__ import annotations

from pathlib import Path

from worker.journal import Journal


def test_a_lazy_record_reads_back_at_once_and_is_committed_with_the_next_put(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    journal.put((1, 0), {"state": "ended"})
    journal.put_lazily((1, 0), {"state": "ended", "acked": True})
    assert journal.get((1, 0)) == {"state": "ended", "acked": True}
    assert dict(journal.items()) == {(1, 0): {"state": "ended", "acked": True}}
    journal.put((2, 0), {"state": "starting"})  # commits the lazy one with it
    journal._env.close()  # noqa: SLF001 - as a crash would: no close() to commit what is left
    reopened = Journal(tmp_path / "j")
    assert dict(reopened.items()) == {(1, 0): {"state": "ended", "acked": True},
                                      (2, 0): {"state": "starting"}}
    reopened.close()


def test_a_synced_put_supersedes_a_lazy_one_of_the_same_record(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    journal.put_lazily((1, 0), {"state": "ended", "acked": True})
    journal.put((1, 0), {"state": "running"})
    assert journal.get((1, 0)) == {"state": "running"}
    journal.close()
    reopened = Journal(tmp_path / "j")
    assert reopened.get((1, 0)) == {"state": "running"}
    reopened.close()


def test_close_commits_lazy_records_and_a_crash_loses_only_them(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "closed")
    journal.put_lazily((1, 0), {"acked": True})
    journal.close()
    reopened = Journal(tmp_path / "closed")
    assert reopened.get((1, 0)) == {"acked": True}
    reopened.close()
    journal = Journal(tmp_path / "crashed")
    journal.put((1, 0), {"state": "ended"})
    journal.put_lazily((1, 0), {"state": "ended", "acked": True})
    journal._env.close()  # noqa: SLF001 - as a crash would: no close() to commit what is left
    crashed = Journal(tmp_path / "crashed")
    assert crashed.get((1, 0)) == {"state": "ended"}
    crashed.close()


def test_pruning_reads_lazy_acknowledgements_and_drops_what_it_deletes(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", keep_acked=1)
    for job in (1, 2, 3):
        journal.put((job, 0), {"state": "ended"})
        journal.put_lazily((job, 0), {"state": "ended", "acked": True})
    journal.prune_acked()
    assert dict(journal.items()) == {(3, 0): {"state": "ended", "acked": True}}
    journal.close()
    reopened = Journal(tmp_path / "j")
    assert dict(reopened.items()) == {(3, 0): {"state": "ended", "acked": True}}
    reopened.close()
