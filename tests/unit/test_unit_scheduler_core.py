"""The pure scheduling core: golden FCFS order (F2), per-queue pickers (F1), placement, reasons (G5)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import core, job_digest, picker, plans
from scheduler.core import CoreConfig, schedule
from scheduler.decisions import Decision, Dispatch, Pend
from scheduler.host_index import HostIndex
from xce.rules import feasibility
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
    full = (api.PEND_NO_FREE_SLOTS, "0 of 3 hosts can take 1 slot; 2 hosts lack free slots; 1 unavailable")
    assert [d for d in decisions if isinstance(d, Pend)] == [pend(i, full) for i in (5, 6, 7)]


TOO_BIG = (api.PEND_NO_HOST_MATCHES, "1 of 1 hosts can take a part (4 free slots together); the job needs 9; "
                                     "they have 4 slots in all")


def test_a_reason_is_proposed_only_when_it_changes() -> None:
    jobs = [job(1, "normal", slots=9, reason=TOO_BIG), job(2, "normal", slots=9)]
    assert schedule(jobs, QUEUES, [host("a", 4)], 0, CoreConfig()) == [pend(2, TOO_BIG)]
    assert schedule([job(3, "normal")], QUEUES, [], 0, CoreConfig()) == [pend(3, core.REASON_NO_HOSTS)]
    assert schedule([job(3, "normal")], QUEUES, [host("a", 4, ok=False)], 0, CoreConfig()) == \
        [pend(3, (api.PEND_HOSTS_UNAVAILABLE, "0 of 1 hosts can take 1 slot; 1 unavailable"))]
    # The same words under another code (say, set before codes existed) are proposed again.
    stale = job(4, "normal", slots=9, reason=(api.PENDING_REASON_UNSPECIFIED, TOO_BIG[1]))
    assert schedule([stale], QUEUES, [host("a", 4)], 0, CoreConfig()) == [pend(4, TOO_BIG)]


def test_a_change_of_counts_alone_waits_for_a_recount_pass() -> None:
    before = (api.PEND_NO_FREE_SLOTS, "0 of 2 hosts can take 1 slot; 2 hosts lack free slots")
    waiting = job(1, "normal", reason=before)
    hosts = [host("a", 4, used=4), host("b", 4, used=4), host("c", 4, ok=False)]
    now = (api.PEND_NO_FREE_SLOTS, "0 of 3 hosts can take 1 slot; 2 hosts lack free slots; 1 unavailable")
    # A new part of the words (unavailable hosts) is news at once; counts alone only on a recount.
    decisions = core.run_pass([waiting], QUEUES, hosts, CoreConfig(), {}, recount=False).decisions
    assert decisions == [pend(1, now)]
    moved = (api.PEND_NO_FREE_SLOTS, "0 of 3 hosts can take 1 slot; 3 hosts lack free slots")
    hosts[2] = host("c", 4, used=4)
    assert core.run_pass([job(1, "normal", reason=moved)], QUEUES, hosts[:2], CoreConfig(), {},
                         recount=False).decisions == []
    assert core.run_pass([job(1, "normal", reason=moved)], QUEUES, hosts[:2], CoreConfig(), {},
                         recount=True).decisions == [pend(1, before)]


def test_an_inactive_queue_dispatches_nothing_and_says_why() -> None:
    queues = [api.Queue(name="normal", priority=30, inactive=True), api.Queue(name="night", closed=True)]
    decisions = schedule([job(1, "normal"), job(2, "night")], queues, [host("a", 4)], 0, CoreConfig())
    # A closed queue still dispatches what it holds (LSF qclose); an inactive one does not (qinact).
    assert decisions == [pend(1, core.REASON_QUEUE_INACTIVE), Dispatch(2, 0, "a")]


def test_schedule_is_deterministic() -> None:
    hosts = [host(n, 3) for n in "abcde"]
    first = schedule(GOLDEN_JOBS * 2, QUEUES, hosts, 0, CoreConfig())
    assert first == schedule(GOLDEN_JOBS * 2, QUEUES, hosts, 0, CoreConfig())


def rich(name: str, slots: int, memory_mb: int = 0, tags: tuple[str, ...] = (), used: int = 0,
         **resources: float) -> api.Host:
    return api.Host(spec=api.HostSpec(name=name, slots=slots, memory_mb=memory_mb, tags=list(tags),
                                      resources=resources), slots_used=used, status=api.HOST_OK)


def wanting(job_id: int, req: str, slots: int = 1) -> api.Job:
    return api.Job(id=job_id, state=api.PEND, spec=api.JobSpec(command=["t"], queue="normal", slots=slots,
                                                               resource_req=req))


def placed(decisions: list[Decision]) -> list[tuple[int, str]]:
    return [(d.job_id, " ".join(f"{h}:{n}" for h, n in d.hosts) or d.host)
            for d in decisions if isinstance(d, Dispatch)]


def test_order_sorts_the_hosts_by_the_names_it_lists() -> None:
    hosts = [rich("a", 4, 1000), rich("b", 4, 8000), rich("c", 8, 4000), rich("d", 4)]
    jobs = [wanting(1, "order[-mem]"), wanting(2, "order[maxmem]"),
            wanting(3, "order[-maxmem] span[hosts=1]", 2)]
    # -mem: most free memory first; maxmem: smallest first, a host without it last; then free slots.
    assert placed(schedule(jobs, QUEUES, hosts, 0, CoreConfig())) == [(1, "b"), (2, "a"), (3, "b")]


def test_an_order_s_ranking_follows_each_placement_of_the_pass() -> None:
    """order[-mem] with rusage[mem]: every placement changes the host's rank (the ranking is made once
    a pass and kept up, not made again per job); a full host leaves it and a multi-slot job reads it
    in order too."""
    hosts = [rich("a", 4, 8000), rich("b", 4, 6000), rich("c", 4, 4000), rich("d", 1, 9000)]
    jobs = [wanting(1, "rusage[mem=1000] order[-mem]")] + \
        [wanting(i, "rusage[mem=3000] order[-mem]") for i in (2, 3, 4, 5)] + \
        [wanting(6, "order[-mem] span[ptile=1]", 2)]
    # d (9000) takes job 1 and is full; then a 8000 -> 5000, b 6000 -> 3000, a 5000 -> 2000,
    # c 4000 -> 1000; job 6 takes the two hosts with most free memory left: b (3000), a (2000).
    assert placed(schedule(jobs, QUEUES, hosts, 0, CoreConfig())) == [
        (1, "d"), (2, "a"), (3, "b"), (4, "a"), (5, "c"), (6, "b:1 a:1")]


def test_a_tag_that_is_not_a_finite_number_ranks_as_missing_and_never_breaks_an_order() -> None:
    """x=nan or x=inf from a worker's tags: ranked as no value (a NaN in a ranking's keys would lose
    hosts in it). What select[] makes of them is apply's as before: not changed here."""
    hosts = [rich("a", 2, tags=("x=nan",)), rich("b", 2, tags=("x=1",)), rich("c", 2, tags=("x=inf",)),
             rich("d", 2, tags=("x=nan",)), rich("e", 2, tags=("x=2",))]
    jobs = [wanting(i, "order[x]") for i in range(1, 12)]
    decisions = schedule(jobs, QUEUES, hosts, 0, CoreConfig())
    # b and e (x 1, 2) first, then the three without a number, most free then by name; the eleventh waits.
    assert [h for _, h in placed(decisions)] == ["b", "b", "e", "e", "a", "c", "d", "a", "c", "d"]
    assert [d.job_id for d in decisions if isinstance(d, Pend)] == [11]


def test_select_reads_free_amounts_as_the_pass_reserves_them() -> None:
    hosts = [rich("a", 8, 8000, gpu=2), rich("b", 8, 8000)]
    jobs = [wanting(i, "select[mem >= 3000] rusage[mem=3000]") for i in (1, 2, 3, 4, 5)]
    # a and b each hold two 3000 MB reservations; after them mem is 2000 on both: no match.
    decisions = schedule(jobs, QUEUES, hosts, 0, CoreConfig())
    assert [d for _, d in placed(decisions)] == ["a", "b", "a", "b"]
    pend5 = [d for d in decisions if isinstance(d, Pend)]
    assert [(d.job_id, d.code, d.reason) for d in pend5] == [
        (5, api.PEND_NO_HOST_MATCHES, "select[mem>=3000] matched 0 of 2 hosts")]


def test_same_keeps_a_parallel_job_on_hosts_of_one_kind() -> None:
    hosts = [rich("a", 2, tags=("type=ARM",)), rich("b", 2, tags=("type=X86_64",)),
             rich("c", 2, tags=("type=X86_64",)), rich("d", 2)]
    assert placed(schedule([wanting(1, "same[type]", 4)], QUEUES, hosts, 0, CoreConfig())) == [(1, "b:2 c:2")]
    assert placed(schedule([wanting(1, "same[type]", 6)], QUEUES, hosts, 0, CoreConfig())) == []


def test_a_job_that_fits_nowhere_leaves_the_pass_to_later_jobs_and_is_explained_once() -> None:
    hosts = [rich("g", 4, gpu=1), rich("p", 4)]
    jobs = [wanting(1, "rusage[gpu=1]"), wanting(2, "rusage[gpu=1]"), wanting(3, "rusage[gpu=1]"),
            wanting(4, "")]
    result = core.run_pass(jobs, QUEUES, hosts, CoreConfig(), {})
    assert placed(result.decisions) == [(1, "g"), (4, "p")]
    assert {d.job_id: d.code for d in result.decisions if isinstance(d, Pend)} == {
        2: api.PEND_NO_FREE_RESOURCES, 3: api.PEND_NO_FREE_RESOURCES}
    assert result.refusals == {"host_has_free_resource": 1, "host_has_resource": 1}  # one explanation


def test_nothing_is_dispatched_while_a_restored_cluster_waits_or_a_stray_instance_runs() -> None:
    from xce.rules import feasibility

    waiting = core.run_pass([job(1, "normal")], QUEUES, [host("a", 4)], CoreConfig(),
                            {feasibility.RECOVERY_COUNTER: 1}).decisions
    assert [(type(d), d.code) for d in waiting] == [(Pend, api.PEND_RECOVERING)]  # type: ignore[union-attr]
    stray = job(2, "normal")
    stray.stray_hosts.append("b")
    decisions = core.run_pass([stray, job(3, "normal")], QUEUES, [host("a", 4)], CoreConfig(), {}).decisions
    assert [(d.job_id, type(d)) for d in decisions] == [(2, Pend), (3, Dispatch)]


def test_same_lets_a_host_without_the_attribute_take_a_job_alone() -> None:
    hosts = [rich("plain", 4)]
    assert placed(schedule([wanting(1, "same[type]", 2)], QUEUES, hosts, 0, CoreConfig())) == [(1, "plain")]
    hosts = [rich("p1", 2), rich("p2", 2)]  # together they would need the same type: neither has one
    assert placed(schedule([wanting(1, "same[type]", 4)], QUEUES, hosts, 0, CoreConfig())) == []


def test_a_select_on_usage_that_starts_to_hold_as_the_pass_fills_a_host_is_asked_again() -> None:
    hosts = [rich("a", 6)]
    # Job 1 finds no host with fewer than 4 free slots; job 2 takes 3; then job 3's select holds.
    jobs = [wanting(1, "select[slots < 4]"), wanting(2, "", 3), wanting(3, "select[slots < 4]")]
    assert placed(schedule(jobs, QUEUES, hosts, 0, CoreConfig())) == [(2, "a"), (3, "a")]


def test_a_pass_explains_a_bounded_number_of_requirements() -> None:
    jobs = [wanting(i, f"select[maxmem > {i}]") for i in (1, 2, 3)]  # three requirements, none fits
    decisions = core.run_pass(jobs, QUEUES, [rich("a", 4)], CoreConfig(max_explains=2), {}).decisions
    assert [d.job_id for d in decisions] == [1, 2]  # job 3 keeps its reason until a later pass


@pytest.mark.parametrize("requirement", ["", "span[hosts=1]", "span[ptile=4]", "span[ptile=16]"])
def test_the_index_plans_a_job_as_plans_lays_out_its_candidates(requirement: str) -> None:
    """HostIndex.plan's shortcut (the host with most free takes the job alone) gives plans.plans'
    first plan, and so does the rest, whatever the frees."""
    rng = random.Random(7)
    need = feasibility.need("", requirement)
    for _ in range(300):
        used = [rng.choice([0, 4, 8, 12, 15, 16]) for _ in range(rng.randint(0, 8))]
        hosts = [host(f"h{i:02d}", 16, used=u) for i, u in enumerate(used)]
        states = {h.spec.name: feasibility.host_state(h, load=True) for h in hosts}
        slots = rng.choice([1, 2, 4, 5, 8, 12, 16, 20, 33])
        index = HostIndex(states)
        expected = next(plans.plans(slots, list(index.candidates(need)), need.requirement.span_hosts,
                                    need.requirement.ptile, True), None)
        assert index.plan(need, slots, slots) == expected


# ---------------------------------------------------------------- the plain lane decides as the general way

LANE_QUEUES = [api.Queue(name="normal", priority=30),
               api.Queue(name="gpu", priority=40, res_req="select[gpu]"),
               api.Queue(name="off", priority=50, inactive=True), api.Queue(name="slow", priority=10)]
LANE_ASKS = [{}, {}, {}, {"resource_req": "rusage[mem=100]"}, {"hosts": ["h1"]}, {"exclusive": True},
             {"min_slots": 1}, {"queue": "gpu"}, {"queue": "off"}, {"queue": "nowhere"},
             {"depend": "done(1)"}, {"slots": 0}, {"begin_time_ms": 9000}, {"begin_time_ms": 100},
             {"term_time_ms": 4000}, {"term_time_ms": 90000}]


@settings(max_examples=150, deadline=None)
@given(hosts=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8), st.sampled_from(["ok", "ok", "down",
                                                                                        "closed"]),
                                st.sampled_from([0, 1, 2])), min_size=0, max_size=7),
       jobs=st.lists(st.tuples(st.integers(1, 5), st.sampled_from(range(len(LANE_ASKS))), st.integers(0, 3),
                               st.booleans()), min_size=1, max_size=25),
       cap=st.sampled_from([1, 3, 4000]), limit=st.booleans(), backfill=st.booleans())
def test_the_plain_lane_decides_exactly_what_the_general_way_decides(
        hosts: list[tuple[int, int, str, int]], jobs: list[tuple[int, int, int, bool]], cap: int, limit: bool,
        backfill: bool) -> None:
    """A pass with the short way for jobs that ask only for slots makes the same decisions, in the same
    order, as one that takes every job the general way: mixed with jobs that use -R, -m, -x, -n min,max,
    queues with a RES_REQ, inactive or unknown queues, dependencies, on hosts up, down, closed and full,
    with a dispatch cap, a queue slot limit (the lane stands aside) and a backfill queue; and so does a
    pass given digests kept from other records of the same jobs (scheduler/job_digest.py: made again),
    and from these records."""
    records = [api.Host(spec=api.HostSpec(name=f"h{i}", slots=slots, memory_mb=1000,
                                          resources={"gpu": gpus} if gpus else {}),
                        slots_used=min(used, slots), closed=kind == "closed",
                        status=api.HOST_UNAVAIL if kind == "down" else api.HOST_OK)
               for i, (slots, used, kind, gpus) in enumerate(hosts)]
    queues = [api.Queue(name=q.name, priority=q.priority, res_req=q.res_req, inactive=q.inactive,
                        slot_limit=3 if limit and q.name == "normal" else 0,
                        backfill="easy" if backfill and q.name == "slow" else "")
              for q in LANE_QUEUES]
    pending = []
    for i, (slots, ask, priority, refused) in enumerate(jobs):
        fields: dict[str, object] = {"command": ["t"], "queue": "normal", "slots": slots,
                                     "priority": priority, "run_limit_s": 60}
        fields.update(LANE_ASKS[ask])
        if "min_slots" in fields:
            fields["min_slots"] = max(1, slots - 1)
        if fields.get("queue") == "normal" and i % 5 == 4:
            fields["queue"] = "slow"
        pending.append(api.Job(id=i + 1, state=api.PEND, submit_time_ms=1000 + i, attempt=1 if refused else 0,
                               refused_owner={"h0": 1} if refused else {},
                               depend_state=api.DEPEND_SATISFIED if i % 3 else api.DEPEND_PENDING,
                               spec=api.JobSpec(**fields)))  # type: ignore[arg-type]
    context = picker.PassContext(pending, now_ms=5000)
    decided = [core.run_pass(pending, queues, records, CoreConfig(max_dispatches=cap, plain_lane=lane), {},
                             context=context).decisions for lane in (True, False)]
    assert decided[0] == decided[1]
    others = [api.Job(id=j.id, state=api.PEND, submit_time_ms=j.submit_time_ms,
                      spec=api.JobSpec(command=["t"], queue="normal", slots=1)) for j in pending]
    kept = job_digest.Digests(others)
    for _ in range(2):
        assert core.run_pass(pending, queues, records, CoreConfig(max_dispatches=cap), {}, context=context,
                             digests=kept).decisions == decided[1]


def test_a_pass_leaves_the_cyclic_collector_as_it_found_it() -> None:
    """run_pass pauses the collector while it runs: on after a pass if it was on before, even when the
    pass raises; off after it if it was off."""
    import gc

    hosts = [host("h1", 4)]
    assert gc.isenabled()
    core.run_pass([job(1, "normal")], QUEUES, hosts, CoreConfig(), {})
    assert gc.isenabled()
    with pytest.raises(AttributeError):
        core.run_pass([None], QUEUES, hosts, CoreConfig(), {})  # type: ignore[list-item]
    assert gc.isenabled()
    gc.disable()
    try:
        core.run_pass([job(1, "normal")], QUEUES, hosts, CoreConfig(), {})
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_past_the_dispatch_cap_each_job_gets_the_reason_its_first_gate_gives() -> None:
    """Once a pass has made its last dispatch, a job that waits for something of its own still says what
    (its begin time, its dependency, its inactive queue), and only the others wait for the cap."""
    queues = [*QUEUES, api.Queue(name="off", priority=30, inactive=True)]
    waiting = [job(1, "normal"), job(2, "normal", submit=1001), job(3, "off", submit=1002),
               job(4, "normal", submit=1003), job(5, "normal", submit=1004)]
    waiting[1].spec.begin_time_ms = 10**13
    waiting[3].spec.depend = "done(99)"
    decided = core.run_pass(waiting, queues, [host("h1", 8)], CoreConfig(max_dispatches=1), {},
                            context=picker.PassContext(waiting, now_ms=5000)).decisions
    assert [d.job_id for d in decided if isinstance(d, Dispatch)] == [1]
    assert {d.job_id: d.code for d in decided if isinstance(d, Pend)} == {
        2: api.PEND_BEGIN_TIME, 3: api.PEND_QUEUE_INACTIVE, 4: api.PEND_DEPENDENCY,
        5: api.PEND_DISPATCH_LIMIT}
