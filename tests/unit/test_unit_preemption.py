"""Preemption's victims (xce/rules/preemption.py, scheduler/preemption.py): lowest priority first,
the smallest sufficient set, never equal or higher priority, never inside the minimum run time or
past the most preemptions, a requeue only of rerunnable jobs; suspended victims keep memory unless
their queue lists it. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler import core, picker, preemption
from scheduler.decisions import Dispatch, Pend, Preempt
from tests.unit.test_unit_config import GOOD, load_error
from xce.rules import feasibility
from xce.rules import preemption as rules
from xce.v1 import api_pb2 as api

NOW = 1_000_000
QUEUES = {
    "high": api.Queue(name="high", priority=50, preemptive=["low", "mid"]),
    "mid": api.Queue(name="mid", priority=40, preemptable=True),
    "low": api.Queue(name="low", priority=30, preemptable=True, preempt_min_run_s=60, max_preemptions=2),
    "other": api.Queue(name="other", priority=10),
}


def running(job_id: int, queue: str, slots: int, host: str = "h1", priority: int = 0, started: int = 0,
            mem: int = 0, **fields: object) -> api.Job:
    job = api.Job(id=job_id, state=api.RUN, host=host, start_time_ms=started or NOW - 3_600_000,
                  spec=api.JobSpec(queue=queue, slots=slots, priority=priority), **fields)
    if mem:
        job.allocation.add(host=host, slots=slots, resources={"mem": mem})
    return job


def choose(preemptor: api.Job, jobs: list[api.Job], slots_total: int = 8, mem_total: int = 0,
           need: feasibility.Need = feasibility.NO_NEED) -> preemption.Choice | None:
    used = sum(j.spec.slots for j in jobs)
    held = sum(p.resources.get("mem", 0) for j in jobs for p in j.allocation)
    reserved = {"mem": held} if mem_total else {}
    totals = {"mem": mem_total} if mem_total else {}
    states = {"h1": feasibility.HostState(slots_total, True, used, totals, reserved)}
    candidates = preemption.Candidates({"h1": jobs}, QUEUES, NOW)
    return preemption.choose(preemptor, need, preemptor.spec.slots, states, candidates)


def pending(slots: int, queue: str = "high") -> api.Job:
    return api.Job(id=100, state=api.PEND, spec=api.JobSpec(queue=queue, slots=slots))


def ids(choice: preemption.Choice | None) -> list[int]:
    assert choice is not None
    return sorted(j.id for j in choice.victims)


def test_the_lowest_priority_goes_first_and_the_set_is_the_smallest_sufficient() -> None:
    jobs = [running(1, "mid", 4), running(2, "low", 1), running(3, "low", 1), running(4, "low", 2)]
    assert ids(choose(pending(2), jobs)) == [4]  # one low job of 2 slots, not two of 1
    assert ids(choose(pending(4), jobs)) == [2, 3, 4]  # every low job before the mid one
    assert ids(choose(pending(5), jobs)) == [1, 3]  # the mid one is needed; then one low of 1 slot (5, not 6)


def test_a_job_the_preemptor_waits_on_is_never_its_victim() -> None:
    """-w started(4): preempting job 4 (or its array's element) would undo the condition, and the two
    would take turns for ever (found by the simulator: dispatch, preempt, requeue, over and over)."""
    jobs = [running(1, "mid", 4), running(4, "low", 2), running(5, "low", 2, array_id=9)]
    waiting = pending(2)
    assert ids(choose(waiting, jobs)) == [4]  # the lowest of 2 slots, first by id
    waiting.spec.depend = "started(4) && ended(9)"
    assert ids(choose(waiting, jobs)) == [1]  # neither 4 nor array 9's element: the mid job
    waiting.spec.depend = "started(1) && started(4) && ended(9)"
    assert choose(waiting, jobs) is None


def test_equal_or_higher_priority_and_other_queues_are_never_taken() -> None:
    same = [running(1, "high", 8)]
    assert choose(pending(1), same) is None
    assert choose(pending(1), [running(2, "other", 8)]) is None  # not in `preemptive`
    assert choose(pending(1, "mid"), [running(3, "low", 8)]) is None  # mid preempts nothing
    higher_job = [running(4, "low", 8, priority=5)]
    assert ids(choose(pending(1), higher_job)) == [4]  # the queue's priority decides first


def test_the_minimum_run_time_and_the_most_preemptions_protect_a_job() -> None:
    young = running(1, "low", 8, started=NOW - 30_000)  # 30 s of its queue's 60
    assert choose(pending(1), [young]) is None
    tired = running(2, "low", 8, preemptions=2)
    assert choose(pending(1), [tired]) is None
    leaving = running(3, "low", 8, kill_requested=True)
    assert choose(pending(1), [leaving]) is None


def test_a_requeue_queue_takes_only_rerunnable_jobs_and_gives_back_everything() -> None:
    queues = dict(QUEUES, low=api.Queue(name="low", priority=30, preemptable=True,
                                        preempt_action=api.PREEMPT_REQUEUE))
    plain = running(1, "low", 8, mem=1000)
    assert rules.given_back(plain, "h1", queues) == (8, {"mem": 1000})
    assert not rules.may_take(pending(1), plain, queues, NOW)
    plain.spec.rerunnable = True
    assert rules.may_take(pending(1), plain, queues, NOW)


def test_suspended_victims_keep_their_memory_unless_the_queue_lists_it() -> None:
    need = feasibility.need("", "rusage[mem=3000]")
    victim = running(1, "low", 4, mem=3000)
    assert choose(pending(1), [victim], slots_total=4, mem_total=4000, need=need) is None  # mem stays held
    QUEUES["low"].preemptable_resources.append("mem")
    try:
        assert ids(choose(pending(1), [victim], slots_total=4, mem_total=4000, need=need)) == [1]
    finally:
        del QUEUES["low"].preemptable_resources[:]


@pytest.mark.parametrize("text, words", [
    ('[[queues]]\nname = "a"\npriority = 50\npreemptive = ["b"]\npreemptable = true\n'
     '[[queues]]\nname = "b"\npriority = 40\npreemptive = ["a"]\npreemptable = true\n',
     "queue 'a': preemptive: a preemption cycle"),
    ('[[queues]]\nname = "a"\npreemptive = ["nope"]\n', "queue 'a': preemptive: no queue 'nope'"),
    ('[[queues]]\nname = "a"\npriority = 50\npreemptive = ["normal"]\n',
     "queue 'a': preemptive: queue 'normal' is not preemptable"),
    ('[[queues]]\nname = "a"\npriority = 10\npreemptive = ["b"]\n[[queues]]\nname = "b"\npriority = 20\n'
     'preemptable = true\n', "queue 'a': preemptive: queue 'b' has priority 20, not below 10"),
    ('[[queues]]\nname = "a"\npreempt_min_run_s = -1\n', "queue 'a': preempt_min_run_s: a whole number >= 0"),
    ('[[queues]]\nname = "a"\npreempt_action = "kill"\n', "queue 'a': preempt_action: suspend or requeue"),
    ('[[queues]]\nname = "a"\nmax_preemptions = -3\n', "queue 'a': max_preemptions"),
])
def test_a_bad_preemption_is_refused_at_load_naming_the_queue_and_the_key(tmp_path: Path, text: str,
                                                                          words: str) -> None:
    assert words in load_error(tmp_path, GOOD + "\n" + text)


def test_the_pass_keeps_what_victims_gave_back_for_their_preemptor_and_resumes_them_first() -> None:
    queues = [api.Queue(name="high", priority=50, preemptive=["low"]),
              api.Queue(name="low", priority=30, preemptable=True)]
    host = api.Host(spec=api.HostSpec(name="h1", slots=4), slots_used=3, status=api.HOST_OK)
    given = running(1, "low", 1, preempted_by=9)
    given.state = api.SSUSP
    given.released.add(host="h1", slots=1)
    stopping = running(2, "low", 1, preempted_by=9)
    stopping.state = api.SSUSP
    others = [running(3, "low", 2)]
    preemptor = api.Job(id=9, state=api.PEND, spec=api.JobSpec(queue="high", slots=2), preempting=[1, 2])
    small = api.Job(id=10, state=api.PEND, submit_time_ms=1, spec=api.JobSpec(queue="low", slots=1))
    jobs = [given, stopping, *others, preemptor, small]
    result = core.run_pass(jobs, queues, [host], core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    reasons = {d.job_id: d.code for d in result.decisions if isinstance(d, Pend)}
    assert reasons[9] == api.PEND_PREEMPTION_PENDING  # one victim still holds its slot
    # the freed slot is kept for 9
    assert not [d for d in result.decisions if isinstance(d, Dispatch)]
    # Once the preemptor is gone, the suspended victim takes its slot back before a pending job does.
    preemptor.state = api.DONE
    stopping.released.add(host="h1", slots=1)
    host.slots_used = 2
    result = core.run_pass(jobs, queues, [host], core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    dispatched = [d.job_id for d in result.decisions if isinstance(d, Dispatch)]
    assert dispatched == [1, 2]  # both resume (2 free slots); job 10 waits


def test_an_exclusive_job_is_never_a_victim_and_a_license_short_preempts_nobody() -> None:
    alone = running(1, "low", 8)
    alone.spec.exclusive = True
    assert choose(pending(1), [alone]) is None  # its host would stay closed to the preemptor too
    queues = [api.Queue(name="high", priority=50, preemptive=["low"]),
              api.Queue(name="low", priority=30, preemptable=True)]
    host = api.Host(spec=api.HostSpec(name="h1", slots=8), slots_used=2, status=api.HOST_OK)
    jobs = [running(2, "low", 1), running(3, "low", 1),
            api.Job(id=9, state=api.PEND,
                    spec=api.JobSpec(queue="high", slots=1, resource_req="rusage[lic=1]"))]
    result = core.run_pass(jobs, queues, [host], core.CoreConfig(), {"shared/lic": 1}, shared={"lic": 1},
                           context=picker.PassContext(jobs, {}, NOW))
    # slots are free: no victim helps
    assert not [d for d in result.decisions if isinstance(d, Preempt)]


def test_what_victims_gave_back_is_their_preemptor_s_not_an_earlier_job_s() -> None:
    """Two urgent jobs: the later one's victim gave back its slot. The earlier one does not take it (and
    preempts its own victim); the later one runs there (found by the protocol simulation: the earlier
    took it, and the later preempted again)."""
    queues = [api.Queue(name="high", priority=50, preemptive=["low"]),
              api.Queue(name="low", priority=30, preemptable=True)]
    host = api.Host(spec=api.HostSpec(name="h1", slots=2), slots_used=1, status=api.HOST_OK)
    given = running(1, "low", 1, preempted_by=9)
    given.state = api.SSUSP
    given.released.add(host="h1", slots=1)
    other = running(2, "low", 1)
    earlier = api.Job(id=8, state=api.PEND, submit_time_ms=1, spec=api.JobSpec(queue="high", slots=1))
    preemptor = api.Job(id=9, state=api.PEND, submit_time_ms=2, spec=api.JobSpec(queue="high", slots=1),
                        preempting=[1])
    jobs = [given, other, earlier, preemptor]
    result = core.run_pass(jobs, queues, [host], core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    assert [d.job_id for d in result.decisions if isinstance(d, Dispatch)] == [9]
    preempts = [d for d in result.decisions if isinstance(d, Preempt)]
    assert [(d.job_id, d.victims) for d in preempts] == [(8, ((2, 0),))]


def test_a_suspended_victim_being_killed_is_not_resumed() -> None:
    queues = [api.Queue(name="high", priority=50, preemptive=["low"]),
              api.Queue(name="low", priority=30, preemptable=True)]
    host = api.Host(spec=api.HostSpec(name="h1", slots=2), slots_used=0, status=api.HOST_OK)
    dying = running(1, "low", 1, preempted_by=9, kill_requested=True)
    dying.state = api.SSUSP
    dying.released.add(host="h1", slots=1)
    resting = running(2, "low", 1, preempted_by=9)
    resting.state = api.SSUSP
    resting.released.add(host="h1", slots=1)
    jobs = [dying, resting]
    result = core.run_pass(jobs, queues, [host], core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    assert [d.job_id for d in result.decisions if isinstance(d, Dispatch)] == [2]


def test_a_preemptor_whose_victim_s_host_went_silent_waits_for_it() -> None:
    """UNKWN keeps what the victim held: the preemptor waits and preempts nobody else meanwhile."""
    queues = [api.Queue(name="high", priority=50, preemptive=["low"]),
              api.Queue(name="low", priority=30, preemptable=True)]
    hosts = [api.Host(spec=api.HostSpec(name="h1", slots=1), slots_used=1, status=api.HOST_UNAVAIL),
             api.Host(spec=api.HostSpec(name="h2", slots=1), slots_used=1, status=api.HOST_OK)]
    silent = running(1, "low", 1, preempted_by=9, state_before_unknown=api.SSUSP)
    silent.state = api.UNKWN
    other = running(2, "low", 1, host="h2")
    preemptor = api.Job(id=9, state=api.PEND, spec=api.JobSpec(queue="high", slots=1), preempting=[1])
    jobs = [silent, other, preemptor]
    result = core.run_pass(jobs, queues, hosts, core.CoreConfig(), {},
                           context=picker.PassContext(jobs, {}, NOW))
    assert not [d for d in result.decisions if isinstance(d, Preempt)]
    assert {d.job_id: d.code for d in result.decisions if isinstance(d, Pend)} == \
        {9: api.PEND_PREEMPTION_PENDING}


def test_the_pass_bounds_each_host_s_victims_as_the_search_would_itself() -> None:
    """PreemptFallback makes each host's bounds (lowest rank, most slots one victim holds) in its one
    look at the running jobs: the same as Candidates makes of the jobs it is given."""
    import random

    from scheduler.preempt_fallback import PreemptFallback

    rng = random.Random(5)
    for _ in range(50):
        jobs = []
        for n in range(rng.randint(0, 30)):
            job = running(n + 1, rng.choice(["low", "mid", "other", "high"]), rng.randint(1, 4),
                          host=rng.choice(["h1", "h2", "h3"]), priority=rng.randint(0, 3))
            if rng.random() < 0.3:
                job.allocation.add(host=job.host, slots=job.spec.slots + rng.randint(0, 2))
            if rng.random() < 0.1:
                job.state = api.SSUSP
            jobs.append(job)
        fallback = PreemptFallback(jobs, QUEUES, NOW, 16)
        made_here = preemption.Candidates(fallback.by_host, QUEUES, NOW)
        for host in ("h1", "h2", "h3", "h4"):
            assert fallback.bounds.get(host) == made_here.bound(host), host
