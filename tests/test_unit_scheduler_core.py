"""The pure scheduling core: golden FCFS order (F2), per-queue pickers (F1), placement, reasons (G5)."""

from __future__ import annotations

import pytest

from scheduler import core, picker
from scheduler.core import CoreConfig, Dispatch, Pend, schedule
from xce.v1 import api_pb2 as api

QUEUES = [api.Queue(name="night", priority=20), api.Queue(name="normal", priority=30),
          api.Queue(name="priority", priority=43)]


def job(job_id: int, queue: str, priority: int = 0, submit: int = 1000, slots: int = 1,
        reason: core.Reason = (api.PENDING_REASON_UNSPECIFIED, "")) -> api.Job:
    return api.Job(id=job_id, state=api.PEND, submit_time_ms=submit, pending_code=reason[0],
                   pending_reason=reason[1],
                   spec=api.JobSpec(command=["true"], queue=queue, priority=priority, slots=slots))


def pend(job_id: int, reason: core.Reason) -> Pend:
    return Pend(job_id, reason[1], reason[0])


def host(name: str, slots: int, used: int = 0, ok: bool = True) -> api.Host:
    return api.Host(spec=api.HostSpec(name=name, slots=slots), slots_used=used,
                    status=api.HOST_OK if ok else api.HOST_UNAVAIL)


GOLDEN_JOBS = [job(1, "night", 9), job(2, "normal"), job(3, "priority"), job(4, "normal", 5),
               job(5, "priority", 1), job(6, "normal", 5, submit=900), job(7, "night"),
               job(8, "normal", submit=900), job(9, "priority")]
# queue priority desc; then job priority desc; then submit time asc; then id asc
GOLDEN_ORDER = [5, 3, 9, 6, 4, 8, 2, 1, 7]


def test_fcfs_golden_order_across_three_queues() -> None:
    ordered = picker.ordered(GOLDEN_JOBS, {q.name: q for q in QUEUES}, picker.Fcfs(), {})
    assert [j.id for j in ordered] == GOLDEN_ORDER


def test_dispatch_follows_the_picker_order() -> None:
    decisions = schedule(GOLDEN_JOBS, QUEUES, [host("a", 9)], 0, CoreConfig())
    assert [d.job_id for d in decisions] == GOLDEN_ORDER
    assert all(isinstance(d, Dispatch) and d.host == "a" for d in decisions)


def test_per_queue_picker_override() -> None:
    config = CoreConfig(queue_pickers={"normal": picker.Lifo()})
    ordered = picker.ordered(GOLDEN_JOBS, {q.name: q for q in QUEUES}, config.picker, config.queue_pickers)
    assert [j.id for j in ordered] == [5, 3, 9, 4, 6, 2, 8, 1, 7]  # normal: newest first within priority


def test_unknown_picker_is_a_clear_error() -> None:
    with pytest.raises(picker.PickerError, match="unknown job picker 'nope'"):
        picker.load("nope")
    assert isinstance(picker.load("fcfs"), picker.Fcfs)


def test_placement_never_overcommits_and_spreads_by_free_slots() -> None:
    jobs = [job(i, "normal", slots=2) for i in range(1, 8)]
    decisions = schedule(jobs, QUEUES, [host("a", 4), host("b", 6, used=2), host("c", 4, ok=False)], 0,
                         CoreConfig())
    placed = [d for d in decisions if isinstance(d, Dispatch)]
    assert [(d.job_id, d.host) for d in placed] == [(1, "a"), (2, "b"), (3, "a"), (4, "b")]
    assert [d for d in decisions if isinstance(d, Pend)] == [pend(i, core.REASON_NO_SLOTS) for i in (5, 6, 7)]


def test_a_reason_is_proposed_only_when_it_changes() -> None:
    jobs = [job(1, "normal", slots=9, reason=core.REASON_TOO_BIG), job(2, "normal", slots=9)]
    assert schedule(jobs, QUEUES, [host("a", 4)], 0, CoreConfig()) == [pend(2, core.REASON_TOO_BIG)]
    assert schedule([job(3, "normal")], QUEUES, [], 0, CoreConfig()) == [pend(3, core.REASON_NO_HOSTS)]
    assert schedule([job(3, "normal")], QUEUES, [host("a", 4, ok=False)], 0, CoreConfig()) == \
        [pend(3, core.REASON_HOSTS_UNAVAILABLE)]
    # The same words under another code (say, set before codes existed) are proposed again.
    stale = job(4, "normal", slots=9, reason=(api.PENDING_REASON_UNSPECIFIED, core.REASON_TOO_BIG[1]))
    assert schedule([stale], QUEUES, [host("a", 4)], 0, CoreConfig()) == [pend(4, core.REASON_TOO_BIG)]


def test_an_inactive_queue_dispatches_nothing_and_says_why() -> None:
    queues = [api.Queue(name="normal", priority=30, inactive=True), api.Queue(name="night", closed=True)]
    decisions = schedule([job(1, "normal"), job(2, "night")], queues, [host("a", 4)], 0, CoreConfig())
    # A closed queue still dispatches what it holds (LSF qclose); an inactive one does not (qinact).
    assert decisions == [pend(1, core.REASON_QUEUE_INACTIVE), Dispatch(2, 0, "a")]


def test_schedule_is_deterministic() -> None:
    hosts = [host(n, 3) for n in "abcde"]
    first = schedule(GOLDEN_JOBS * 2, QUEUES, hosts, 0, CoreConfig())
    assert first == schedule(GOLDEN_JOBS * 2, QUEUES, hosts, 0, CoreConfig())
