"""The planner (scheduler/planner.py): what spans passes, on plain records and a given clock."""

from __future__ import annotations

from scheduler import picker, planner
from scheduler.decider import Decider
from scheduler.decisions import Dispatch, Pend
from scheduler.lease import Lease
from scheduler.planner import PassView, PlannerConfig, PlannerState
from xce.rules import feasibility
from xce.v1 import api_pb2 as api

CONFIG = PlannerConfig()
QUEUES = [api.Queue(name="normal", priority=30)]


def job(job_id: int, attempt: int = 0, refused_host: str = "", queue: str = "normal") -> api.Job:
    refused = api.PEND_DISPATCH_REFUSED if refused_host else api.PENDING_REASON_UNSPECIFIED
    words = f"dispatch to {refused_host} failed" if refused_host else ""
    return api.Job(id=job_id, attempt=attempt, state=api.PEND, submit_time_ms=job_id, pending_code=refused,
                   pending_reason=words, refused_host=refused_host,
                   spec=api.JobSpec(command=["true"], queue=queue, slots=1))


def host(name: str, slots: int, used: int = 0) -> api.Host:
    return api.Host(spec=api.HostSpec(name=name, slots=slots), status=api.HOST_OK, slots_used=used)


def view(jobs: list[api.Job], hosts: list[api.Host], revision: int = 10,
         queues: list[api.Queue] | None = None, counters: dict[str, int] | None = None) -> PassView:
    return PassView(jobs, queues or QUEUES, hosts, counters or {}, revision)


def dispatches(plan: planner.Plan) -> list[tuple[int, str]]:
    return [(d.job_id, d.host) for d in plan.decisions if isinstance(d, Dispatch)]


def test_a_dispatch_in_flight_is_not_made_again_until_it_expires() -> None:
    world = view([job(1)], [host("a", 4)])
    first = planner.plan(world, PlannerState(), 1_000, CONFIG)
    assert dispatches(first) == [(1, "a")]
    again = planner.plan(world, first.state, 2_000, CONFIG)  # the view does not show it yet
    assert dispatches(again) == []
    later = planner.plan(world, again.state, 1_000 + CONFIG.in_flight_ms, CONFIG)
    assert dispatches(later) == [(1, "a")]


def test_a_rejected_dispatch_may_be_made_again_at_once() -> None:
    world = view([job(1)], [host("a", 4)])
    first = planner.plan(world, PlannerState(), 1_000, CONFIG)
    batch = planner.to_batch(first, PlannerState(), 3, "s", world.revision, 1_000, 1_700_000_001_000)
    reply = api.DecisionBatchResponse(revision=11, outcomes=[api.DecisionOutcome(
        code=api.REJECT_INFEASIBLE, reason=api.PEND_NO_FREE_SLOTS)])
    state, stale = planner.after_reply(first.state, batch, reply, 1_100, CONFIG)
    assert not stale and planner.ready(state, 11, 1_100) and not planner.ready(state, 10, 1_100)
    assert dispatches(planner.plan(world, state, 1_200, CONFIG)) == [(1, "a")]


def test_a_refusing_host_gets_no_dispatch_for_the_cool_down() -> None:
    hosts = [host("a", 8), host("b", 2)]  # a has the most free slots: it would be chosen
    refused = view([job(1, attempt=1, refused_host="a")], hosts)
    first = planner.plan(refused, PlannerState(), 5_000, CONFIG)
    assert dispatches(first) == [(1, "b")] and first.cooled == [("a", 1)]
    other = view([job(2)], hosts)  # the refusal is no longer in view; the cool-down stays
    assert dispatches(planner.plan(other, first.state, 5_000 + CONFIG.refusal_cooldown_ms - 1, CONFIG)) == \
        [(2, "b")]
    assert dispatches(planner.plan(other, first.state, 5_000 + CONFIG.refusal_cooldown_ms, CONFIG)) == \
        [(2, "a")]


def test_a_refusal_counts_once_and_a_new_one_starts_a_new_cool_down() -> None:
    hosts = [host("a", 8)]
    refused = view([job(1, attempt=1, refused_host="a")], hosts)
    first = planner.plan(refused, PlannerState(), 5_000, CONFIG)
    second = planner.plan(refused, first.state, 6_500, CONFIG)  # the same refusal seen again
    assert second.cooled == [] and second.state.cooldown["a"] == 5_000 + CONFIG.refusal_cooldown_ms
    third = planner.plan(view([job(1, attempt=2, refused_host="a")], hosts), second.state, 6_600, CONFIG)
    assert third.cooled == [("a", 1)] and third.state.cooldown["a"] == 6_600 + CONFIG.refusal_cooldown_ms


def test_a_worker_s_refusal_is_not_overwritten_and_others_see_the_host_unavailable() -> None:
    world = view([job(1, attempt=1, refused_host="a"), job(2)], [host("a", 1)])
    plan = planner.plan(world, PlannerState(), 1_000, CONFIG)
    # Job 1 keeps its refusal as its reason; job 2 is told the only host is unavailable for now.
    assert plan.decisions == [Pend(2, "0 of 1 hosts can take 1 slot; 1 unavailable",
                                   api.PEND_HOSTS_UNAVAILABLE)]


def test_a_stale_lease_answer_is_a_code() -> None:
    world = view([job(1)], [host("a", 4)])
    first = planner.plan(world, PlannerState(), 1_000, CONFIG)
    batch = planner.to_batch(first, PlannerState(), 3, "s", world.revision, 1_000, 1_700_000_001_000)
    stale_outcome = api.DecisionOutcome(code=api.REJECT_STALE_LEASE, message="any words")
    _, stale = planner.after_reply(first.state, batch, api.DecisionBatchResponse(outcomes=[stale_outcome]),
                                   1_100, CONFIG)
    assert stale


def test_a_batch_records_the_pass_inputs_and_the_digest_is_the_state_s() -> None:
    world = view([job(1), job(2), job(3, attempt=2), job(4)], [host("a", 4), host("b", 1)], revision=42)
    started = PlannerState(in_flight={3: (2, 1_000)}, cooldown={"b": 9_999},
                           refusals_seen=frozenset({(5, 1)}), await_revision=41, await_until_ms=3_000,
                           recounted_ms=0)
    config = PlannerConfig(max_pends=7, recount_ms=3_000)
    plan = planner.plan(world, started, 1_234, config)
    settings = config.settings("fcfs")
    batch = planner.to_batch(plan, started, 7, "s1", world.revision, 1_234, 1_700_000_001_234, settings)
    assert (batch.base_revision, batch.clock_ms, batch.now_ms, batch.lease_epoch, batch.scheduler_id) == \
        (42, 1_234, 1_700_000_001_234, 7, "s1")
    assert batch.planner_digest == started.digest() != PlannerState().digest()
    # Re-run from what the batch alone records (its state is checked against the digest): the same decisions.
    recorded = PlannerState.from_proto(api.DecisionBatch.FromString(batch.SerializeToString()).planner_state)
    assert recorded == started and recorded.digest() == batch.planner_digest
    again = planner.configured(batch.planner, world.queues, picker.load)
    assert (again.max_pends, again.recount_ms, type(again.core.picker)) == (7, 3_000, picker.Fcfs)
    replay = planner.plan(world, recorded, batch.clock_ms, again)
    again_batch = planner.to_batch(replay, recorded, 7, "s1", 42, batch.clock_ms, batch.now_ms, batch.planner)
    assert again_batch == batch
    assert [d.dispatch.job_id for d in batch.decisions] == [1, 2, 4]  # 3 is in flight; b cools


def test_a_dispatch_stays_in_flight_only_while_the_view_shows_it_pending_at_that_attempt() -> None:
    hosts = [host("a", 4)]
    first = planner.plan(view([job(1), job(2)], hosts), PlannerState(), 1_000, CONFIG)
    assert set(first.state.in_flight) == {1, 2}
    running = job(1)
    running.state = api.RUN
    # The view shows 1 running and 2 requeued (attempt 1): neither is in flight any more, so the
    # batch that records this state stays small.
    later = planner.plan(view([running, job(2, attempt=1)], hosts), first.state, 1_100, CONFIG)
    assert set(later.state.in_flight) == {2} and later.state.in_flight[2][0] == 1


def test_a_queue_slot_limit_counts_the_pass_s_own_placements() -> None:
    queues = [api.Queue(name="normal", priority=30, slot_limit=3)]
    counters = {feasibility.queue_slots_counter("normal"): 1}
    world = view([job(i) for i in (1, 2, 3, 4)], [host("a", 8)], queues=queues, counters=counters)
    plan = planner.plan(world, PlannerState(), 1_000, CONFIG)
    assert dispatches(plan) == [(1, "a"), (2, "a")]
    limit = [d for d in plan.decisions if isinstance(d, Pend)]
    assert [(d.job_id, d.code) for d in limit] == [(3, api.PEND_LIMIT_REACHED), (4, api.PEND_LIMIT_REACHED)]


def test_100000_pending_half_in_an_inactive_queue_new_active_jobs_dispatch_within_two_passes() -> None:
    """60,000 jobs in an inactive queue once made every batch too big to send: nothing ran at all.
    Here every pending job has a new reason to send (half: queue inactive; half: too big for any
    host), and new jobs that fit must still be dispatched at once."""
    queues = [api.Queue(name="normal", priority=30), api.Queue(name="off", priority=40, inactive=True)]
    too_big = [job(i) for i in range(50_001, 100_001)]
    for j in too_big:
        j.spec.slots = 8
        j.spec.resource_req = "span[hosts=1]"  # all on one host: too big for any
    jobs = [job(i, queue="off") for i in range(1, 50_001)] + too_big + [job(200_001)]
    hosts = [host(f"h{i:04d}", 4) for i in range(5_000)]
    state, clock, sizes, sent_pends = PlannerState(), 1_000, [], 0
    for new in (200_001, 200_002):
        plan = planner.plan(view(jobs, hosts, queues=queues), state, clock, CONFIG)
        batch = planner.to_batch(plan, state, 1, "s", 10, clock, 1_700_000_000_000)
        sizes.append(batch.ByteSize())
        assert len(batch.decisions) <= CONFIG.max_decisions
        assert dispatches(plan) == [(new, dispatches(plan)[0][1])]  # the new job, at once
        state, clock = plan.state, clock + 100
        reasons = {d.job_id: d for d in plan.decisions if isinstance(d, Pend)}
        sent_pends += len(reasons)
        jobs = [j for j in jobs if j.id != new]  # it runs; the batch's reasons are stored
        for j in jobs:
            if j.id in reasons:
                j.pending_code, j.pending_reason = reasons[j.id].code, reasons[j.id].reason
        jobs.append(job(200_002))  # a new job in the active queue, after the first pass
    assert all(size < 1 << 20 for size in sizes), sizes
    assert sent_pends == 2 * CONFIG.max_pends  # the reasons follow, a bounded number each pass
    deferred = planner.plan(view(jobs, hosts, queues=queues), state, clock, CONFIG).deferred
    assert deferred == 100_000 - 2 * CONFIG.max_pends - CONFIG.max_pends  # what the third pass leaves


def test_a_planner_state_s_digest_is_the_recorded_format() -> None:
    """Recordings are checked against the digest: its value for a state never changes (these were made by
    json.dumps of the state's canonical form, before the digest was made faster)."""
    assert PlannerState().digest() == "7a21ccbf1f2289cd25c3a9ed1eb3dd51a3ddae71d67eb39cc823a6c752ad7166"
    state = PlannerState(in_flight={3: (2, 1_000), 12: (0, 7)}, cooldown={"b": 9_999, 'hôte"1': 5},
                         refusals_seen=frozenset({(5, 1), (2, 3)}), await_revision=41, await_until_ms=3_000,
                         recounted_ms=0)
    assert state.digest() == "6607970bae8276b4860174ae1d13e4a86df6a896bdcad128d55ef4b331dac017"


def test_a_pass_where_nothing_waits_may_be_left_out_unless_its_recount_is_due() -> None:
    """planner.idle: the simulator leaves such a pass out. Nothing waits, so it decides nothing; what it
    drops from the state (a dispatch the view shows running, an expired cool-down, a refusal seen) the
    next pass drops the same, so that pass decides the same and leaves the same state; only the state it
    records as its start still lists them. A due recount would be stamped by the idle pass: not left out."""
    config = PlannerConfig(recount_ms=60_000)
    hosts = [host("a", 4), host("b", 4)]
    refused = planner.plan(view([job(1, attempt=1, refused_host="a"), job(2)], hosts), PlannerState(), 1_000,
                           config)
    assert refused.state.in_flight and refused.state.cooldown and refusals(refused.state)
    running = [job(1, attempt=1), job(2)]
    for one in running:
        one.state = api.RUN
    quiet = view(running, hosts)
    now = 1_000 + CONFIG.refusal_cooldown_ms + 1
    assert planner.idle([], refused.state, now, config)
    assert not planner.idle([job(3)], refused.state, now, config)  # something waits
    assert not planner.idle([], refused.state, 1_000 + 60_000, config)  # its recount is due
    assert not planner.idle([], PlannerState(), now, config)  # never counted
    passed = planner.plan(quiet, refused.state, now, config)
    assert passed.decisions == [] and passed.state != refused.state  # it would have dropped things
    later = view([*running, job(3), job(4, attempt=2, refused_host="b")], hosts)
    after_idle = planner.plan(later, passed.state, now + 500, config)
    without = planner.plan(later, refused.state, now + 500, config)
    assert (without.decisions, without.state, without.cooled) == \
        (after_idle.decisions, after_idle.state, after_idle.cooled)
    assert dispatches(without) == [(3, "a"), (4, "a")] and without.cooled == [("b", 4)]


def refusals(state: PlannerState) -> frozenset[tuple[int, int]]:
    return state.refusals_seen


def test_a_dispatch_of_unknown_outcome_keeps_every_pass() -> None:
    """planner.idle holds for accepted dispatches only. A batch with no answer may never have been
    committed: its job, held and released, is pending at the same attempt again, and a pass left out
    while it was held would not have dropped it from the in-flight dispatches (it would wait for their
    expiry). The Decider leaves out no pass while such a dispatch is in flight."""
    decider = Decider(Lease("s", 10.0**6), picker.load, config=PlannerConfig(recount_ms=60_000))
    decider.lease_answered(api.LeaseResponse(granted=True, epoch=1), 1.0, 1.0)
    batch = decider.decide(view([job(1)], [host("a", 4)]), 1.0, 1_000)
    assert batch is not None and batch.decisions[0].dispatch.job_id == 1
    decider.batch_answered(batch, None, 1.0)  # the leader died: was it committed?
    held = job(1)
    held.state = api.PSUSP  # it was not, and the job was held: nothing waits
    assert not decider.idle([], 2.0) and planner.idle([], decider.state, 2_000, decider.config)
    assert decider.decide(view([held], [host("a", 4)]), 2.0, 2_000) is None  # it drops the dispatch
    assert not decider.state.in_flight and decider.idle([], 3.0)
    released = decider.decide(view([job(1)], [host("a", 4)]), 4.0, 4_000)
    assert released is not None and released.decisions[0].dispatch.job_id == 1
