"""A queue's backfill (scheduler/backfill.py): strict order, the published figures'
end-before rule, EASY with its extra slots, and unknown estimates. Pure: the core's pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler import backfill, core, picker
from scheduler.decisions import Dispatch, Pend
from xce.v1 import api_pb2 as api

NOW = 1_800_000_000_000


def run(job_id: int, host: str, slots: int, started_s_ago: int, estimate_s: int) -> api.Job:
    return api.Job(id=job_id, state=api.RUN, host=host, start_time_ms=NOW - started_s_ago * 1000,
                   spec=api.JobSpec(queue="q", slots=slots, estimate_s=estimate_s))


def pend(job_id: int, slots: int, estimate_s: int = 0, run_limit_s: int = 0) -> api.Job:
    return api.Job(id=job_id, state=api.PEND, submit_time_ms=job_id,
                   spec=api.JobSpec(queue="q", slots=slots, estimate_s=estimate_s, run_limit_s=run_limit_s))


def one_pass(mode: str, jobs: list[api.Job], hosts: dict[str, tuple[int, int]]) -> dict[int, str]:
    """Each pending job's outcome: "run" or its pending code's name."""
    fleet = [api.Host(spec=api.HostSpec(name=name, slots=slots), slots_used=used, status=api.HOST_OK)
             for name, (slots, used) in sorted(hosts.items())]
    queues = [api.Queue(name="q", priority=30, backfill=mode)]
    result = core.run_pass(jobs, queues, fleet, core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    outcome = {d.job_id: "run" for d in result.decisions if isinstance(d, Dispatch)}
    outcome.update({d.job_id: api.PendingReason.Name(d.code) for d in result.decisions
                    if isinstance(d, Pend)})
    return outcome


# Four hosts of one slot, as the published traces' machines: jobs 1 and 2 run (ending in 90 s and 50 s);
# head 10 needs 3 slots, 2 are free: its reservation is in 50 s (when job 2 ends).
RUNNING = [run(1, "h1", 1, 10, 100), run(2, "h2", 1, 0, 50)]
HOSTS = {"h1": (1, 1), "h2": (1, 1), "h3": (1, 0), "h4": (1, 0)}
WAITING = [pend(10, 3, 100), pend(11, 1, 30), pend(12, 1, 200), pend(13, 1)]


@pytest.mark.parametrize(("mode", "expected"), [
    ("any", {10: "PEND_NO_FREE_SLOTS", 11: "run", 12: "run", 13: "PEND_NO_FREE_SLOTS"}),
    ("none", {10: "PEND_NO_FREE_SLOTS", 11: "PEND_RESERVATION", 12: "PEND_RESERVATION",
              13: "PEND_RESERVATION"}),
    # 11 ends in 30 s, before the head's reservation: it starts; 12 would end after; 13 has no estimate
    ("end_before", {10: "PEND_NO_FREE_SLOTS", 11: "run", 12: "PEND_RESERVATION", 13: "PEND_RESERVATION"}),
    ("easy", {10: "PEND_NO_FREE_SLOTS", 11: "run", 12: "PEND_RESERVATION", 13: "PEND_RESERVATION"}),
])
def test_later_jobs_past_a_waiting_head_by_the_queue_s_mode(mode: str, expected: dict[int, str]) -> None:
    assert one_pass(mode, [*RUNNING, *WAITING], HOSTS) == expected


def test_easy_lets_a_long_job_start_on_the_slots_the_reservation_leaves_over() -> None:
    """Job 2 holds 2 slots of h2: at its end 3 are free, the head needs 2: one extra slot. EASY starts the
    long job 12 on it (and only one such job); end_before does not."""
    running = [run(1, "h1", 1, 10, 100), run(2, "h2", 2, 0, 50)]
    hosts = {"h1": (1, 1), "h2": (2, 2), "h3": (1, 0), "h4": (1, 0)}
    waiting = [pend(10, 3, 100), pend(12, 1, 200), pend(14, 1, 300)]
    easy = one_pass("easy", [*running, *waiting], hosts)
    assert (easy[12], easy[14]) == ("run", "PEND_RESERVATION")
    assert one_pass("end_before", [*running, *waiting], hosts)[12] == "PEND_RESERVATION"


def test_an_unknown_end_makes_the_reservation_unknown_and_later_jobs_wait() -> None:
    running = [run(1, "h1", 1, 10, 0), run(2, "h2", 1, 0, 0)]  # no estimates: no end is known
    outcome = one_pass("end_before", [*running, pend(10, 3, 100), pend(11, 1, 30)], HOSTS)
    assert outcome[11] == "PEND_RESERVATION"


def test_a_run_limit_stands_for_a_missing_estimate_and_reasons_name_the_head() -> None:
    fleet = [api.Host(spec=api.HostSpec(name=name, slots=1), slots_used=used, status=api.HOST_OK)
             for name, (_, used) in sorted(HOSTS.items())]
    jobs = [*RUNNING, pend(10, 3, 100), pend(11, 1, run_limit_s=30), pend(12, 1, 200)]
    result = core.run_pass(jobs, [api.Queue(name="q", backfill="end_before")], fleet, core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    assert [d.job_id for d in result.decisions if isinstance(d, Dispatch)] == [11]
    words = {d.job_id: d.reason for d in result.decisions if isinstance(d, Pend)}
    assert words[12] == "would delay job 10, which has room in 50 s (its reservation)"


def test_a_job_held_by_a_limit_or_a_dependency_does_not_hold_its_queue() -> None:
    held = pend(10, 3, 100)
    held.spec.depend, held.depend_state = "done(99)", api.DEPEND_PENDING
    outcome = one_pass("none", [*RUNNING, held, pend(11, 1, 30)], HOSTS)
    assert outcome == {10: "PEND_DEPENDENCY", 11: "run"}


def test_a_bad_backfill_is_refused_at_load_naming_the_queue_and_the_key(tmp_path: Path) -> None:
    from tests.unit.test_unit_config import GOOD, load_error

    words = load_error(tmp_path, GOOD + '\n[[queues]]\nname = "a"\nbackfill = "sometimes"\n')
    assert "queue 'a': backfill: one of any, none, easy, end_before, conservative, not 'sometimes'" in words


def test_easy_takes_no_more_than_the_extra_slots_for_a_job_of_several_sizes() -> None:
    """-n 1,4 past the reservation: on the extra slot only (found by review)."""
    running = [run(1, "h1", 1, 10, 100), run(2, "h2", 2, 0, 50)]
    hosts = {"h1": (1, 1), "h2": (2, 2), "h3": (1, 0), "h4": (1, 0), "h5": (1, 0), "h6": (1, 0)}
    flexible = pend(12, 4, 200)
    flexible.spec.min_slots = 1
    jobs = [*running, pend(10, 5, 100), flexible]
    fleet = [api.Host(spec=api.HostSpec(name=name, slots=slots), slots_used=used, status=api.HOST_OK)
             for name, (slots, used) in sorted(hosts.items())]
    result = core.run_pass(jobs, [api.Queue(name="q", backfill="easy")], fleet, core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    placed = [d for d in result.decisions if isinstance(d, Dispatch)]
    assert [(d.job_id, sum(n for _, n in d.hosts) if d.hosts else 1) for d in placed] == [(12, 1)]


def test_a_preemptor_held_behind_its_queue_keeps_what_its_victims_gave_back() -> None:
    """Strict order holds preemptor 9 behind job 8: its victim's freed slot stays its own; the victim
    does not resume on it (found by review)."""
    queues = [api.Queue(name="high", priority=50, preemptive=["low"], backfill="none"),
              api.Queue(name="low", priority=30, preemptable=True)]
    host = api.Host(spec=api.HostSpec(name="h1", slots=2), slots_used=1, status=api.HOST_OK)
    victim = api.Job(id=1, state=api.SSUSP, host="h1", start_time_ms=NOW - 3_600_000, preempted_by=9,
                     spec=api.JobSpec(queue="low", slots=1))
    victim.released.add(host="h1", slots=1)
    other = api.Job(id=2, state=api.RUN, host="h1", start_time_ms=NOW - 10, spec=api.JobSpec(queue="high",
                                                                                             slots=1))
    head = api.Job(id=8, state=api.PEND, submit_time_ms=1, spec=api.JobSpec(queue="high", slots=2))
    preemptor = api.Job(id=9, state=api.PEND, submit_time_ms=2, spec=api.JobSpec(queue="high", slots=1),
                        preempting=[1])
    jobs = [victim, other, head, preemptor]
    result = core.run_pass(jobs, queues, [host], core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    assert not [d for d in result.decisions if isinstance(d, Dispatch)]  # not the victim's resume


def test_a_lower_queue_does_not_delay_a_higher_queue_s_reservation() -> None:
    queues = [api.Queue(name="hi", priority=50, backfill="easy"), api.Queue(name="lo", priority=10)]
    fleet = [api.Host(spec=api.HostSpec(name=name, slots=1), slots_used=used, status=api.HOST_OK)
             for name, (_, used) in sorted(HOSTS.items())]
    head = pend(10, 3, 100)
    head.spec.queue = "hi"
    long, short = pend(11, 1, 10**6), pend(12, 1, 20)
    long.spec.queue = short.spec.queue = "lo"
    jobs = [*RUNNING, head, long, short]
    result = core.run_pass(jobs, queues, fleet, core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    assert [d.job_id for d in result.decisions if isinstance(d, Dispatch)] == [12]
    codes = {d.job_id: d.code for d in result.decisions if isinstance(d, Pend)}
    assert codes[11] == api.PEND_RESERVATION


# Four hosts of one slot: job 1 ends in 100 s, job 2 in 300 s; two are free. Head 10 (4 slots) has its
# reservation at 300 s. Job 11 (3 slots, 100 s) fits at 100 s; job 12 (1 slot, 250 s) ends before the
# head's reservation but would delay job 11's; job 13 (1 slot, 50 s) delays nobody.
SECOND = [run(1, "h1", 1, 0, 100), run(2, "h2", 1, 0, 300)]
SECOND_WAITING = [pend(10, 4, 100), pend(11, 3, 100), pend(12, 1, 250), pend(13, 1, 50)]


def test_conservative_reserves_for_every_job_where_easy_delays_the_second() -> None:
    jobs = [*SECOND, *SECOND_WAITING]
    assert one_pass("easy", jobs, HOSTS) == {10: "PEND_NO_FREE_SLOTS", 11: "PEND_NO_FREE_SLOTS", 12: "run",
                                             13: "run"}
    assert one_pass("conservative", jobs, HOSTS) == {10: "PEND_NO_FREE_SLOTS", 11: "PEND_RESERVATION",
                                                     12: "PEND_RESERVATION", 13: "run"}
    fleet = [api.Host(spec=api.HostSpec(name=name, slots=1), slots_used=used, status=api.HOST_OK)
             for name, (_, used) in sorted(HOSTS.items())]
    result = core.run_pass(jobs, [api.Queue(name="q", backfill="conservative")], fleet, core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    words = {d.job_id: d.reason for d in result.decisions if isinstance(d, Pend)}
    assert words[11] == "would delay earlier jobs' reservations (job 10 first); its own: room in 100 s"
    # 12 would overlap 11 (100-200 s) and the head (300-400 s): its room is after both
    assert words[12] == "would delay earlier jobs' reservations (job 10 first); its own: room in 400 s"


def test_conservative_in_the_common_case_is_easy_and_unknown_ends_hold_later_jobs() -> None:
    jobs = [*RUNNING, *WAITING]
    assert one_pass("conservative", jobs, HOSTS) == one_pass("easy", jobs, HOSTS)
    unknown = [run(1, "h1", 1, 10, 0), run(2, "h2", 1, 0, 0)]
    outcome = one_pass("conservative", [*unknown, pend(10, 3, 100), pend(11, 1, 30)], HOSTS)
    assert outcome[11] == "PEND_RESERVATION"


def test_a_conservative_job_that_finds_no_host_of_its_shape_is_reserved_for_from_the_next_end() -> None:
    """Job 11 (2 slots on one host) passes the profile (2 slots free) but no single host has 2 before
    job 1 ends (100 s), when the head takes them all (100-200 s): it is reserved for at 200 s, and job 13
    (3 slots) after it, at 250 s; job 12 takes a free slot now (it ends before anyone's reservation)."""
    hosts = {"h1": (2, 2), "h2": (1, 0), "h3": (1, 0)}
    running = [run(1, "h1", 2, 0, 100)]
    shaped = pend(11, 2, 50)
    shaped.spec.resource_req = "span[hosts=1]"
    jobs = [*running, pend(10, 4, 100), shaped, pend(12, 1, 50), pend(13, 3, 100)]
    assert one_pass("conservative", jobs, hosts) == {10: "PEND_NO_FREE_SLOTS", 11: "PEND_NO_FREE_SLOTS",
                                                     12: "run", 13: "PEND_RESERVATION"}
    fleet = [api.Host(spec=api.HostSpec(name=name, slots=slots), slots_used=used, status=api.HOST_OK)
             for name, (slots, used) in sorted(hosts.items())]
    result = core.run_pass(jobs, [api.Queue(name="q", backfill="conservative")], fleet, core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    words = {d.job_id: d.reason for d in result.decisions if isinstance(d, Pend)}
    assert words[13] == "would delay earlier jobs' reservations (job 10 first); its own: room in 250 s"


def test_easy_counts_every_job_that_ends_at_the_reservation_in_its_extra_slots() -> None:
    """Jobs 1 and 2 both end in 50 s; 2 slots are free and the head needs 3. At its reservation (50 s)
    4 slots are free, not 3: one extra slot, on which EASY starts the long job 12 (Mu'alem & Feitelson:
    the extra processors are those free at the shadow time). Counting only the first of the equal ends
    made that 0 and held 12."""
    running = [run(1, "h1", 1, 0, 50), run(2, "h2", 1, 0, 50)]
    hosts = {"h1": (1, 1), "h2": (1, 1), "h3": (1, 0), "h4": (1, 0)}
    waiting = [pend(10, 3, 100), pend(12, 1, 200), pend(14, 1, 300)]
    easy = one_pass("easy", [*running, *waiting], hosts)
    assert (easy[10], easy[12], easy[14]) == ("PEND_NO_FREE_SLOTS", "run", "PEND_RESERVATION")


def _end_before(jobs: list[api.Job], hosts: dict[str, tuple[int, int]],
                kept: dict[int, backfill.Kept]) -> tuple[dict[int, str], dict[int, backfill.Kept]]:
    fleet = [api.Host(spec=api.HostSpec(name=name, slots=slots), slots_used=used, status=api.HOST_OK)
             for name, (slots, used) in sorted(hosts.items())]
    result = core.run_pass(jobs, [api.Queue(name="q", backfill="end_before")], fleet, core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW, kept))
    return {d.job_id: "run" if isinstance(d, Dispatch) else api.PendingReason.Name(d.code)
            for d in result.decisions if isinstance(d, Dispatch | Pend)}, result.reservations


def test_end_before_keeps_a_reservation_only_for_what_it_was_reckoned_for() -> None:
    """Head 10 (3 slots) waits on four one-slot hosts; reckoned now its reservation is in 50 s (job 2's
    end). Kept from an earlier pass at 120 s, job 12 (ends in 100 s) starts past it; kept for another
    attempt, another queue or a larger machine, it is reckoned again and 12 waits. A reservation
    reckoned as unknown now (a head of all four slots waits for job 2, stopped) stays unknown, whatever
    was kept."""
    jobs = [*RUNNING, pend(10, 3, 100), pend(12, 1, 100)]
    outcome, kept = _end_before(jobs, HOSTS, {})
    assert outcome[12] == "PEND_RESERVATION" and kept == {10: backfill.Kept(NOW + 50_000, 0, "q", 4)}
    later = backfill.Kept(NOW + 120_000, 0, "q", 4)
    outcome, kept = _end_before(jobs, HOSTS, {10: later})
    assert outcome[12] == "run" and kept == {10: later}
    for stale in (backfill.Kept(NOW + 120_000, 1, "q", 4), backfill.Kept(NOW + 120_000, 0, "other", 4),
                  backfill.Kept(NOW + 120_000, 0, "q", 5)):
        outcome, kept = _end_before(jobs, HOSTS, {10: stale})
        assert outcome[12] == "PEND_RESERVATION" and kept == {10: backfill.Kept(NOW + 50_000, 0, "q", 4)}
    stopped = [run(1, "h1", 1, 10, 100), api.Job(id=2, state=api.USUSP, host="h2", start_time_ms=NOW,
                                                  spec=api.JobSpec(queue="q", slots=1, estimate_s=50))]
    outcome, kept = _end_before([*stopped, pend(10, 4, 100), pend(12, 1, 1)], HOSTS, {10: later})
    assert outcome[12] == "PEND_RESERVATION" and kept == {}


def test_a_planner_state_with_kept_reservations_is_recorded_and_read_back_whole() -> None:
    from scheduler.planner import PlannerState

    state = PlannerState(reservations={10: backfill.Kept(NOW, 2, "q", 64)})
    again = PlannerState.from_proto(api.PlannerState.FromString(state.to_proto().SerializeToString()))
    assert again == state and again.digest() == state.digest() != PlannerState().digest()
