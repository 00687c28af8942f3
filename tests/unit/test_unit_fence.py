"""The worker-side fence's timing (worker/session.py, WorkerSession.check_fence): when a worker kills its
rerunnable jobs, on a manual clock; the killing itself is Executor.fence (test_worker_executor.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.config import WorkerConfig
from worker.daemon import Worker
from worker.journal import MemoryJournal
from worker.session import FENCE_NOTE, WorkerSession
from xce.clock import ManualClock
from xce.v1 import api_pb2 as api

FENCE_S, UNKNOWN_S, GRACE_S = 3.0, 10.0, 1.0


def worker(tmp_path: Path, journal: MemoryJournal, clock: ManualClock) -> tuple[WorkerSession, list[float]]:
    config = WorkerConfig(path=tmp_path / "worker.toml", controllers=("a:1",), host=api.HostSpec(name="n1"),
                          spool_dir=tmp_path / "spool", kill_grace_s=GRACE_S)
    daemon = Worker(config, clock=clock, journal=journal)
    fences: list[float] = []

    def fence(grace_s: float) -> list[tuple[int, int]]:  # stands in for the real kill
        fences.append(clock.monotonic_s())
        return [(1, 0)]

    daemon.executor.fence = fence  # type: ignore[method-assign]
    return daemon.session, fences


def joined(daemon: WorkerSession) -> None:
    frame = api.ControllerMessage(joined=api.Joined(generation=1, heartbeat_s=1.0, fence_s=FENCE_S,
                                                    unknown_timeout_s=UNKNOWN_S))
    daemon.receive(frame, lambda message: None)


def answer(daemon: WorkerSession) -> None:
    heartbeat = api.Heartbeat(generation=1, fence_s=FENCE_S, unknown_timeout_s=UNKNOWN_S)
    daemon.receive(api.ControllerMessage(heartbeat=heartbeat), lambda message: None)


def test_the_fence_fires_fence_s_after_the_last_answer_and_answers_hold_it_off(tmp_path: Path) -> None:
    clock = ManualClock()
    daemon, fences = worker(tmp_path, MemoryJournal(), clock)
    assert daemon.check_fence() == []  # no fence until a leader said so
    joined(daemon)
    clock.advance(2900)
    answer(daemon)  # answered at 2.9 s
    clock.advance(2900)
    assert daemon.check_fence() == [] and fences == []
    clock.advance(200)  # 3.1 s without an answer
    assert daemon.check_fence() == [(1, 0)] and fences == [6.0]


def test_a_restarted_worker_keeps_the_fence_clock_and_first_tries_to_join(tmp_path: Path) -> None:
    clock, journal = ManualClock(), MemoryJournal()
    first, _ = worker(tmp_path, journal, clock)
    joined(first)  # the note: fence_s, unknown_timeout_s, answered now
    assert journal.get_note(FENCE_NOTE) is not None
    clock.advance(5000)  # the worker was down 5 s (> fence_s) while its jobs ran on
    daemon, fences = worker(tmp_path, journal, clock)
    assert daemon.fence_s == FENCE_S
    # Not at once: a chance to join first, but never past answered + unknown_timeout - grace - 1 s.
    assert daemon.check_fence() == []
    clock.advance(2900)
    assert daemon.check_fence() == []
    clock.advance(200)  # 8.1 s after the last answer: 10 - 1 - 1 = 8
    assert daemon.check_fence() == [(1, 0)]
    assert fences == [8.1]


class SteppedClock(ManualClock):
    """A manual clock whose wall reading can be stepped (an NTP step, an operator's `date -s`)."""

    def __init__(self) -> None:
        super().__init__()
        self.step_ms = 0

    def now_ms(self) -> int:
        return super().now_ms() + self.step_ms


@pytest.mark.parametrize("step_ms", [-600_000, 600_000])
def test_a_restarted_worker_keeps_the_fence_clock_when_the_wall_clock_stepped(tmp_path: Path,
                                                                               step_ms: int) -> None:
    """Same boot: the fence counts by the monotonic clock across the restart. By the wall clock, 10
    minutes back would restart the fence afresh (it would fire 13 s after the last answer, past the
    leader's 10 s: a double run), 10 minutes ahead would fence at once, before trying to join."""
    clock, journal = SteppedClock(), MemoryJournal()
    first, _ = worker(tmp_path, journal, clock)
    if not first.boot_id:
        pytest.skip("no boot id on this system (Linux's /proc/sys/kernel/random/boot_id)")
    joined(first)
    clock.advance(5000)
    clock.step_ms = step_ms
    daemon, fences = worker(tmp_path, journal, clock)
    clock.advance(2900)
    assert daemon.check_fence() == []
    clock.advance(200)
    assert daemon.check_fence() == [(1, 0)] and fences == [8.1]


def test_a_restarted_worker_that_joins_is_not_fenced(tmp_path: Path) -> None:
    clock, journal = ManualClock(), MemoryJournal()
    first, _ = worker(tmp_path, journal, clock)
    joined(first)
    clock.advance(5000)
    daemon, fences = worker(tmp_path, journal, clock)
    clock.advance(1000)
    joined(daemon)
    clock.advance(2000)
    assert daemon.check_fence() == [] and fences == []


def test_a_worker_joined_before_the_fence_was_on_learns_it_from_the_heartbeat_answers(tmp_path: Path) -> None:
    clock = ManualClock()
    daemon, fences = worker(tmp_path, MemoryJournal(), clock)
    daemon.receive(api.ControllerMessage(joined=api.Joined(generation=1, heartbeat_s=1.0)), lambda m: None)
    clock.advance(10_000)
    assert daemon.check_fence() == []  # off
    answer(daemon)  # the cluster now runs format 2: the answers carry the fence
    assert daemon.fence_s == FENCE_S
    clock.advance(3100)
    assert daemon.check_fence() == [(1, 0)]
