"""MemoryTables against the plainest model of an LMDB table: a dict read through sorted()."""

from __future__ import annotations

import random

import pytest

from controller.tables import MemoryTables, SortedKeys


def _after(model: dict[bytes, bytes], key: bytes) -> bytes | None:
    return min((k for k in model if k > key), default=None)


def _before(model: dict[bytes, bytes], key: bytes) -> bytes | None:
    return max((k for k in model if k < key), default=None)


@pytest.mark.parametrize("seed", range(6))
def test_memory_tables_agree_with_a_sorted_dict_as_chunks_split_and_empty(seed: int) -> None:
    rng = random.Random(seed)
    tables, model = MemoryTables(), {}
    tables._keys["jobs"] = SortedKeys(chunk=3)  # small chunks: they split and empty all the time
    for step in range(3000):
        key = bytes([rng.randrange(40), rng.randrange(4)])
        if rng.random() < 0.55:
            value = str(step).encode()
            tables.put("jobs", key, value)
            model[key] = value
        else:
            tables.delete("jobs", key)
            model.pop(key, None)
        if step % 25 == 0:
            start = bytes([rng.randrange(42)])
            assert list(tables.scan("jobs", start)) == [(k, model[k]) for k in sorted(model) if k >= start]
            at_start = [(k, model[k]) for k in sorted(model) if k >= start]
            assert tables.first("jobs", start) == (at_start[0] if at_start else None)
            assert list(tables.scan_back("jobs", start)) == [
                (k, model[k]) for k in sorted(model, reverse=True) if k <= start]
            assert list(tables.scan("jobs")) == sorted(model.items())
    copy = tables.copy()
    tables.put("jobs", b"\xff", b"later")
    assert list(copy.scan("jobs")) == sorted(model.items())


@pytest.mark.parametrize("seed", range(4))
def test_a_scan_walks_the_table_as_it_is_at_each_step_as_a_cursor_does(seed: int) -> None:
    """Keys put or deleted during a scan: each step goes to the first key past the last one yielded."""
    rng = random.Random(seed)
    tables, model = MemoryTables(), {}
    tables._keys["jobs"] = SortedKeys(chunk=2)
    for number in range(0, 60, 2):
        key = bytes([number])
        tables.put("jobs", key, b"v")
        model[key] = b"v"
    for backwards in (False, True):
        seen: list[bytes] = []
        walk = tables.scan_back("jobs", b"\xff") if backwards else tables.scan("jobs")
        expected = max(model) if backwards else min(model)
        for key, _ in walk:
            assert key == expected
            seen.append(key)
            change = bytes([rng.randrange(64)])
            if rng.random() < 0.5:
                tables.put("jobs", change, b"v")
                model[change] = b"v"
            else:
                tables.delete("jobs", change)
                model.pop(change, None)
            expected = _before(model, key) if backwards else _after(model, key)
        assert expected is None and seen


def test_a_table_first_scanned_late_is_sorted_then_and_kept_so() -> None:
    """A table is kept in order from its first scan on (those only read by key never pay for it): what
    was put and deleted before that, over several chunks, scans in order, as does what comes after."""
    rng = random.Random(7)
    tables, model = MemoryTables(), {}
    for step in range(6000):
        key = rng.randrange(5000).to_bytes(2, "big")
        if rng.random() < 0.7:
            tables.put("history", key, b"%d" % step)
            model[key] = b"%d" % step
        else:
            tables.delete("history", key)
            model.pop(key, None)
    unscanned = tables.copy()
    assert "history" not in tables._keys and len(model) > 2000  # (more than two chunks of 1,000)
    assert list(tables.scan("history")) == sorted(model.items()) == list(unscanned.scan("history"))
    for step in range(500):
        key = rng.randrange(5000).to_bytes(2, "big")
        if step % 2:
            tables.put("history", key, b"later")
            model[key] = b"later"
        else:
            tables.delete("history", key)
            model.pop(key, None)
    start = (2500).to_bytes(2, "big")
    assert list(tables.scan("history", start)) == [(k, model[k]) for k in sorted(model) if k >= start]
    assert list(tables.scan_back("history", start)) == [
        (k, model[k]) for k in sorted(model, reverse=True) if k <= start]
