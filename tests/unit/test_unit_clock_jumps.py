"""xce/clock_jumps.py: a step of the wall clock is reported once, a drift once it adds up."""

from __future__ import annotations

import logging

import pytest

from xce.clock_jumps import ClockJumps


def test_a_step_is_reported_once_and_ticking_on_is_not() -> None:
    jumps = ClockJumps()
    assert jumps.seen(1000.0, 5.0) is None  # the first reading is the reference
    assert jumps.seen(1001.0, 6.0) is None
    assert jumps.seen(1602.0, 7.0) == pytest.approx(600.0)  # ten minutes ahead at once
    assert jumps.seen(1603.0, 8.0) is None  # and no more, while it ticks on from there
    assert jumps.seen(1004.0, 9.0) == pytest.approx(-600.0) and jumps.total_s == pytest.approx(0.0)


def test_a_drift_is_reported_each_time_it_adds_up_to_the_threshold() -> None:
    jumps = ClockJumps(threshold_s=1.0)
    reports = [jumps.seen(1000.0 + t * 1.05, float(t)) for t in range(0, 61)]  # 5 % fast, 60 s
    moved = [r for r in reports if r is not None]
    assert len(moved) == 3 and all(1.0 <= r < 1.1 for r in moved)  # at 20, 40 and 60 s
    assert jumps.total_s == pytest.approx(3.0)


def test_the_log_line_names_the_daemon_and_the_jump(caplog: pytest.LogCaptureFixture) -> None:
    jumps = ClockJumps()
    logger = logging.getLogger("test.clock")
    with caplog.at_level(logging.WARNING, logger="test.clock"):
        jumps.log_if_moved(logger, "replica 2", 1000.0, 0.0)
        jumps.log_if_moved(logger, "replica 2", 400.0, 1.0)
    assert len(caplog.records) == 1
    assert "replica 2: the wall clock jumped by -601.0 s" in caplog.records[0].getMessage()
