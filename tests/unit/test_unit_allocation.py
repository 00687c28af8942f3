"""Allocations at the commit barrier (entry format 6): requirements, consumables, several
hosts all or nothing, and exactly what was taken given back."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import fsm
from controller.fsm import history
from controller.tables import MemoryTables
from scheduler import core
from scheduler.decisions import Dispatch, Pend
from xce.rules import feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STAMP = 1_700_000_000_000
FORMAT = 9  # the newest: what 6 (allocations), 7 (groups, licenses), 8 (parts) brought too


class State:
    """A replica's state in memory, entries applied at format 6 unless told otherwise."""

    def __init__(self, queues: Sequence[api.Queue] = (api.Queue(name="normal"),)) -> None:
        self.tables = MemoryTables()
        self.index = 0
        self.apply(log.Entry(init=log.InitCluster(cluster_id="c", config_digest="d", queues=queues)))
        lease = log.LeaseEntry(scheduler_id="s", duration_ms=10**9)
        self.epoch = self.apply(log.Entry(lease=lease)).lease_epoch

    def apply(self, entry: log.Entry, format_: int = FORMAT) -> log.Result:
        self.index += 1
        entry.stamp_ms = entry.stamp_ms or STAMP + self.index
        entry.format = format_
        results = fsm.apply(self.tables, self.index, entry.SerializeToString())
        assert results is not None
        return results[0]

    def join(self, name: str, slots: int, memory_mb: int = 0, tags: Sequence[str] = (),
             **resources: float) -> None:
        spec = api.HostSpec(name=name, slots=slots, memory_mb=memory_mb, tags=list(tags), resources=resources)
        assert self.apply(log.Entry(join_host=spec)).code == log.OK

    def submit(self, slots: int = 1, req: str = "", least: int | None = None, queue: str = "") -> int:
        spec = api.JobSpec(command=["true"], slots=slots, resource_req=req, queue=queue)
        if least is not None:
            spec.min_slots = least
        result = self.apply(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[spec])])))
        assert result.code == log.OK, result.message
        return int(result.job_ids[0])

    def dispatch(self, job_id: int, *parts: tuple[str, int], format_: int = FORMAT) -> api.DecisionOutcome:
        decision = api.DispatchDecision(job_id=job_id, attempt=self.job(job_id).attempt, host=parts[0][0])
        if len(parts) > 1 or parts[0][1] != self.job(job_id).spec.slots:
            decision.hosts.extend(api.HostSlots(host=h, slots=n) for h, n in parts)
        batch = api.DecisionBatch(lease_epoch=self.epoch, scheduler_id="s")
        batch.decisions.add(dispatch=decision)
        result = self.apply(log.Entry(decisions=batch), format_)
        return result.outcomes[0]

    def finish(self, job_id: int, host: str) -> None:
        job = self.job(job_id)
        generation = self.host(host).generation
        report = log.HostReport(host=host, generation=generation, report=api.JobReport(
            job_id=job_id, attempt=job.attempt, finished=api.JobFinished(exit_code=0)))
        assert self.apply(log.Entry(report=report)).code == log.OK

    def job(self, job_id: int) -> api.Job:
        job = fsm.read_job(self.tables, job_id)
        assert job is not None
        return job

    def host(self, name: str) -> api.Host:
        host = fsm.read_host(self.tables, name)
        assert host is not None
        return host

    def host_jobs(self) -> list[bytes]:
        return [key for key, _ in self.tables.scan("host_jobs")]


def accepted(outcome: api.DecisionOutcome) -> bool:
    return outcome.code == api.DECISION_ACCEPTED


def test_rusage_reserves_on_the_host_for_the_job_s_life_and_gives_back_exactly_that() -> None:
    state = State()
    state.join("g1", 8, memory_mb=16000, gpu=2)
    jobs = [state.submit(req="rusage[gpu=1:mem=4000]") for _ in range(3)]
    assert accepted(state.dispatch(jobs[0], ("g1", 1)))
    assert accepted(state.dispatch(jobs[1], ("g1", 1)))
    assert dict(state.host("g1").reserved) == {"gpu": 2, "mem": 8000}
    assert [(a.host, a.slots, dict(a.resources)) for a in state.job(jobs[0]).allocation] == \
        [("g1", 1, {"gpu": 1, "mem": 4000})]
    refused = state.dispatch(jobs[2], ("g1", 1))  # slots are free, GPUs are not
    assert (refused.code, refused.reason) == (api.REJECT_INFEASIBLE, api.PEND_NO_FREE_RESOURCES)
    assert "0 gpu free" in refused.message
    state.finish(jobs[0], "g1")
    assert dict(state.host("g1").reserved) == {"gpu": 1, "mem": 4000}
    assert accepted(state.dispatch(jobs[2], ("g1", 1)))
    state.finish(jobs[1], "g1")
    state.finish(jobs[2], "g1")
    assert dict(state.host("g1").reserved) == {} and state.host("g1").slots_used == 0


def test_a_parallel_allocation_is_taken_all_or_nothing_on_every_host() -> None:
    state = State()
    for name in ("a", "b", "c"):
        state.join(name, 4)
    small = state.submit(slots=3)
    assert accepted(state.dispatch(small, ("c", 3)))  # c has 1 free slot now
    job = state.submit(slots=8)
    before = [state.host(n).slots_used for n in "abc"]
    refused = state.dispatch(job, ("a", 3), ("b", 3), ("c", 2))  # c cannot give 2
    assert (refused.code, refused.reason) == (api.REJECT_INFEASIBLE, api.PEND_NO_FREE_SLOTS)
    assert [state.host(n).slots_used for n in "abc"] == before and state.job(job).state == api.PEND
    assert accepted(state.dispatch(job, ("a", 4), ("b", 4)))
    placed = state.job(job)
    assert (placed.state, placed.host) == (api.RUN, "a")
    assert [(a.host, a.slots) for a in placed.allocation] == [("a", 4), ("b", 4)]
    assert (state.host("a").slots_used, state.host("b").slots_used) == (4, 4)
    assert state.host("b").running_jobs == 1
    assert fsm.host_job_key("b", job) in state.host_jobs()
    assert state.tables.get("counters", feasibility.queue_slots_counter("normal").encode()) is not None
    state.finish(job, "a")  # the first host reports the end: every host gives back its part
    assert (state.host("a").slots_used, state.host("b").slots_used) == (0, 0)
    assert fsm.host_job_key("b", job) not in state.host_jobs()
    # Kept: where it ran.
    assert [(a.host, a.slots) for a in state.job(job).allocation] == [("a", 4), ("b", 4)]


@pytest.mark.parametrize(("req", "slots", "parts", "words"), [
    ("", 8, [("a", 4), ("a", 4)], "appears twice"),
    ("", 8, [("a", 4), ("b", 3)], "has 7 slots"),
    ("", 8, [("a", 5), ("b", 3)], "at most 4 on each"),
    ("span[hosts=1]", 4, [("a", 2), ("b", 2)], "span[hosts=1]"),
    ("span[ptile=2]", 6, [("a", 3), ("b", 3)], "span[ptile=2]"),
    ("same[type]", 2, [("a", 1), ("b", 1)], "same[type]"),
    ("select[type == ARM]", 1, [("a", 1)], "does not match select[type==ARM]"),
    ("rusage[gpu=1]", 1, [("a", 1)], "has 0 gpu"),
])
def test_the_barrier_refuses_what_the_requirement_does_not_allow(
        req: str, slots: int, parts: list[tuple[str, int]], words: str) -> None:
    state = State()
    state.join("a", 8, tags=["type=X86_64"])
    state.join("b", 8, tags=["type=AARCH64"])
    job = state.submit(slots=slots, req=req)
    outcome = state.dispatch(job, *parts)
    assert outcome.code == api.REJECT_INFEASIBLE and words in outcome.message, outcome.message
    assert state.host("a").slots_used == state.host("b").slots_used == 0


def test_load_indices_are_the_planner_s_alone_the_barrier_passes_what_hangs_on_them() -> None:
    state = State()
    state.join("a", 4, tags=["type=X86_64"])
    # ut is unknown at apply: "ut < 0.5" passes, but the static part still decides.
    assert accepted(state.dispatch(state.submit(req="select[type == X86_64 && ut < 0.5]"), ("a", 1)))
    refused = state.dispatch(state.submit(req="select[type == ARM && ut < 0.5]"), ("a", 1))
    assert refused.code == api.REJECT_INFEASIBLE
    assert accepted(state.dispatch(state.submit(req="select[type == ARM || r1m < 2]"), ("a", 1)))


def test_load_indices_are_stored_for_the_generation_that_sent_them_and_cleared_by_a_join() -> None:
    state = State()
    state.join("a", 4)
    generation = state.host("a").generation
    sent = log.HostLoad(name="a", generation=generation,
                        values={"r1m": 0.5, "ut": 0.123456, "mem": 1000.0, "bogus": 1.0, "pg": float("nan"),
                                "swp": -1.0, "tmp": 1e300})
    assert state.apply(log.Entry(host_loads=log.HostLoads(loads=[sent]))).code == log.OK
    host = state.host("a")
    # A worker is not trusted: unknown names, non-finite, negative and absurd values are dropped.
    assert dict(host.load) == {"r1m": 0.5, "ut": 0.12, "mem": 1000.0} and host.load_time_ms > STAMP
    stale = log.HostLoad(name="a", generation=generation - 1, values={"r1m": 9.0})
    assert state.apply(log.Entry(host_loads=log.HostLoads(loads=[stale]))).code == log.FAILED_PRECONDITION
    assert state.host("a").load["r1m"] == 0.5
    missing = log.HostLoad(name="nope", generation=1, values={"r1m": 9.0})
    assert state.apply(log.Entry(host_loads=log.HostLoads(loads=[missing]))).code == log.NOT_FOUND
    state.join("a", 4)  # the new generation's load is its own
    assert not state.host("a").load and not state.host("a").load_time_ms


def test_the_planner_reads_load_indices_and_the_smaller_free_mem_and_apply_does_not() -> None:
    def host(name: str, load: dict[str, float]) -> api.Host:
        return api.Host(spec=api.HostSpec(name=name, slots=4, memory_mb=8000), status=api.HOST_OK, load=load)

    hosts = [host("busy", {"r1m": 6.0, "mem": 7000.0}), host("idle", {"r1m": 0.2, "mem": 1500.0}),
             host("silent", {})]
    queues = [api.Queue(name="normal")]

    def job(job_id: int, req: str) -> api.Job:
        return api.Job(id=job_id, state=api.PEND,
                       spec=api.JobSpec(command=["t"], queue="normal", slots=1, resource_req=req))

    jobs = [job(1, "select[r1m < 1]"), job(2, "select[mem > 4000]"), job(3, "select[r1m < 0.1]"),
            job(4, "order[r1m]")]
    decisions = core.schedule(jobs, queues, hosts, 0, core.CoreConfig())
    placed = {d.job_id: d.host for d in decisions if isinstance(d, Dispatch)}
    # idle has 8000 unreserved but said 1500 available: only busy has 4000 free. A host that has not
    # reported (silent) matches no select on load. order[r1m]: the least loaded.
    assert placed == {1: "idle", 2: "busy", 4: "idle"}
    pends = {d.job_id: d.code for d in decisions if isinstance(d, Pend)}
    assert pends == {3: api.PEND_NO_HOST_MATCHES}
    # A host without maxmem has no mem to reserve: what it reports never stands for one (apply would
    # find mem undefined and refuse what the planner sent).
    bare = api.Host(spec=api.HostSpec(name="bare", slots=4), status=api.HOST_OK, load={"mem": 90000.0})
    assert [d for d in core.schedule([job(5, "select[mem > 4000]")], queues, [bare], 0, core.CoreConfig())
            if isinstance(d, Dispatch)] == []
    # At apply, the same hosts' records carry no load: select[r1m < 0.1] hangs on an unknown and passes.
    at_apply = feasibility.host_state(hosts[1])
    assert not at_apply.load and feasibility.attributes(at_apply)["mem"] == 8000.0
    assert feasibility.attributes(feasibility.host_state(hosts[1], load=True))["mem"] == 1500.0


def test_a_queue_s_res_req_merges_with_the_job_s() -> None:
    state = State([api.Queue(name="normal", res_req="select[defined(ssd)] rusage[mem=1000]")])
    state.join("disk", 4, memory_mb=4000, tags=["ssd"])
    state.join("plain", 4, memory_mb=4000)
    assert state.dispatch(state.submit(), ("plain", 1)).code == api.REJECT_INFEASIBLE  # no ssd
    job = state.submit(req="rusage[mem=3000]")  # the job's amount wins over the queue's
    assert accepted(state.dispatch(job, ("disk", 1)))
    assert dict(state.host("disk").reserved) == {"mem": 3000}


def test_n_min_max_runs_with_a_count_in_the_range_and_holds_that_count() -> None:
    state = State([api.Queue(name="normal", slot_limit=100)])
    state.join("a", 4)
    state.join("b", 2)
    job = state.submit(slots=8, least=4)
    assert state.dispatch(job, ("a", 3)).code == api.REJECT_INFEASIBLE  # fewer than the least
    assert accepted(state.dispatch(job, ("a", 3), ("b", 2)))
    assert feasibility.held_slots(state.job(job)) == 5
    assert fsm.read_counter(state.tables, feasibility.queue_slots_counter("normal")) == 5
    state.finish(job, "a")
    assert fsm.read_counter(state.tables, feasibility.queue_slots_counter("normal")) == 0


def test_before_format_6_requirements_and_hosts_are_not_read_as_older_replicas_do() -> None:
    state = State()
    state.join("a", 4, gpu=1)
    state.join("b", 4)
    job = state.submit(slots=2, req="select[type == ARM] rusage[gpu=1]")
    outcome = state.dispatch(job, ("a", 1), ("b", 1), format_=5)  # `hosts` is unknown there: a with 2
    assert accepted(outcome)
    assert (state.host("a").slots_used, state.host("b").slots_used) == (2, 0)
    assert not state.job(job).allocation and dict(state.host("a").reserved) == {}
    state.finish(job, "a")
    assert state.host("a").slots_used == 0


def test_a_forced_run_skips_select_but_reserves_and_checks_consumables() -> None:
    state = State()
    state.join("a", 4, gpu=1)
    first, second = state.submit(req="select[type == ARM] rusage[gpu=1]"), state.submit(req="rusage[gpu=1]")
    assert state.apply(log.Entry(dispatch=log.Dispatch(job_id=first, host="a"))).code == log.OK
    assert dict(state.host("a").reserved) == {"gpu": 1}
    refused = state.apply(log.Entry(dispatch=log.Dispatch(job_id=second, host="a")))
    assert refused.code == log.FAILED_PRECONDITION and "gpu" in refused.message


def test_whole_amounts_and_a_sane_minimum_are_required_at_submit() -> None:
    state = State()
    spec = api.JobSpec(command=["true"], resource_req="rusage[mem=0.5]")
    result = state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="x", jobs=[spec])])))
    assert result.code == log.INVALID_ARGUMENT and "whole numbers" in result.message
    spec = api.JobSpec(command=["true"], slots=2, min_slots=3)
    result = state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="y", jobs=[spec])])))
    assert result.code == log.INVALID_ARGUMENT and "minimum" in result.message
    assert list(state.tables.scan("jobs")) == []


def test_what_the_planner_places_the_barrier_takes() -> None:
    """The same definition on both sides: every placement of a pass over a mixed cluster is accepted
    by apply, in one batch, and no host ends over its slots or consumables."""
    state = State()
    for i in range(6):
        state.join(f"h{i}", 4, memory_mb=8000, tags=["type=X86_64" if i % 2 else "type=ARM"],
                   **({"gpu": 2} if i < 2 else {}))
    wanted = [(1, "rusage[gpu=1]"), (8, ""), (4, "span[ptile=2] select[type == X86_64]"),
              (2, "span[hosts=1]"), (1, "rusage[mem=6000]"), (3, "same[type]"), (16, ""),
              (1, "select[maxmem > 100000]")]
    ids = [state.submit(slots=n, req=r) for n, r in wanted]
    view_jobs = [state.job(i) for i in ids]
    hosts = [api.Host.FromString(raw) for _, raw in state.tables.scan("hosts")]
    queues = [api.Queue.FromString(raw) for _, raw in state.tables.scan("queues")]
    decisions = core.schedule(view_jobs, queues, hosts, 0, core.CoreConfig())
    batch = api.DecisionBatch(lease_epoch=state.epoch, scheduler_id="s")
    for decision in decisions:
        if isinstance(decision, Dispatch):
            batch.decisions.add(dispatch=api.DispatchDecision(
                job_id=decision.job_id, attempt=0, host=decision.host,
                hosts=[api.HostSlots(host=h, slots=n) for h, n in decision.hosts]))
    result = state.apply(log.Entry(decisions=batch))
    assert [o.code for o in result.outcomes] == [api.DECISION_ACCEPTED] * len(batch.decisions)
    running = {i for i in ids if state.job(i).state == api.RUN}
    assert running == {ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]}  # 16 slots and 100 GB wait
    for i in range(6):
        host = state.host(f"h{i}")
        assert host.slots_used <= 4 and all(host.reserved[r] <= feasibility.consumables(host)[r]
                                            for r in host.reserved)


REQUIREMENTS = ["", "rusage[gpu=1]", "rusage[mem=3000]", "span[hosts=1]", "span[ptile=2]", "same[type]",
                "select[type == X86_64]", "select[mem > 2000] order[-mem]", "select[slots >= 2]",
                "select[defined(gpu)] rusage[gpu=2] span[ptile=1]", "order[maxmem]", "select[ut < 0.5]"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts=st.lists(st.tuples(st.integers(1, 6), st.sampled_from([0, 4000, 8000]), st.integers(0, 2),
                                st.booleans()), min_size=1, max_size=6),
       jobs=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 4), st.sampled_from(REQUIREMENTS)),
                     min_size=1, max_size=12))
def test_every_placement_of_a_pass_is_taken_by_the_barrier_and_no_host_is_over(
        hosts: list[tuple[int, int, int, bool]], jobs: list[tuple[int, int, str]]) -> None:
    state = State()
    for i, (slots, memory, gpus, x86) in enumerate(hosts):
        state.join(f"h{i}", slots, memory_mb=memory, tags=["type=X86_64" if x86 else "type=ARM"],
                   **({"gpu": gpus} if gpus else {}))
    ids = [state.submit(slots=n, req=r, least=max(1, n - extra) if extra else None) for n, extra, r in jobs]
    for _ in range(2):  # a second pass over what the first left
        view = [state.job(i) for i in ids]
        records = [api.Host.FromString(raw) for _, raw in state.tables.scan("hosts")]
        queues = [api.Queue.FromString(raw) for _, raw in state.tables.scan("queues")]
        decisions = core.schedule(view, queues, records, 0, core.CoreConfig())
        batch = api.DecisionBatch(lease_epoch=state.epoch, scheduler_id="s")
        for decision in decisions:
            if isinstance(decision, Dispatch):
                batch.decisions.add(dispatch=api.DispatchDecision(
                    job_id=decision.job_id, attempt=0, host=decision.host,
                    hosts=[api.HostSlots(host=h, slots=n) for h, n in decision.hosts]))
            else:
                assert state.job(decision.job_id).state == api.PEND
        if not batch.decisions:
            break
        result = state.apply(log.Entry(decisions=batch))
        assert [o.message for o in result.outcomes if o.code] == []
    for i in range(len(hosts)):
        host = state.host(f"h{i}")
        totals = feasibility.consumables(host)
        assert 0 <= host.slots_used <= host.spec.slots
        assert all(0 < amount <= totals.get(name, 0) for name, amount in host.reserved.items())
    for i in ids:  # each allocation within the job's range, never on a host twice
        job = state.job(i)
        if job.state == api.RUN:
            parts = feasibility.allocation_of(job)
            assert feasibility.least_slots(job) <= sum(p.slots for p in parts) <= job.spec.slots
            assert len({p.host for p in parts}) == len(parts)


# ---------------------------------------------------------------- format 7: groups, -m, shared, closed hosts

def resources_init(groups: dict[str, list[str]], shared: dict[str, int], digest: str = "r1") -> log.Entry:
    return log.Entry(init=log.InitCluster(
        cluster_id="c", config_digest="d", queues=[api.Queue(name="normal")], resources_digest=digest,
        host_groups=[api.HostGroup(name=n, members=m) for n, m in groups.items()],
        shared=[api.SharedResource(name=n, total=t) for n, t in shared.items()]))


def asking(state: State, hosts: list[str], req: str = "") -> log.Result:
    spec = api.JobSpec(command=["true"], hosts=hosts, resource_req=req)
    return state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id=f"m{state.index}", jobs=[spec])])), 7)


def test_host_groups_reach_the_host_records_and_m_keeps_a_job_to_them() -> None:
    state = State()
    state.join("g1", 2)
    assert state.apply(resources_init({"gpu_nodes": ["g1", "g2"]}, {}), 7).code == log.OK
    assert list(state.host("g1").groups) == ["gpu_nodes"]
    state.join("g2", 2)
    state.join("cpu", 2)
    assert state.apply(log.Entry(join_host=api.HostSpec(name="g2", slots=2)), 7).code == log.OK
    assert list(state.host("g2").groups) == ["gpu_nodes"] and list(state.host("cpu").groups) == []
    refused = asking(state, ["nope"])
    assert refused.code == log.INVALID_ARGUMENT and "unknown host or host group 'nope'" in refused.message
    job = int(asking(state, ["gpu_nodes"]).job_ids[0])
    outcome = state.dispatch(job, ("cpu", 1), format_=7)
    assert outcome.code == api.REJECT_INFEASIBLE and "not among -m gpu_nodes" in outcome.message
    # Format 6 did not read -m: the same dispatch is taken there, as its replicas took it.
    assert accepted(state.dispatch(int(asking(state, ["gpu_nodes"]).job_ids[0]), ("cpu", 1), format_=6))
    assert accepted(state.dispatch(job, ("g2", 1), format_=7))
    # A group is a name select[] reads too.
    picky = int(asking(state, [], "select[gpu_nodes]").job_ids[0])
    assert state.dispatch(picky, ("cpu", 1), format_=7).code == api.REJECT_INFEASIBLE


def test_shared_resources_are_taken_per_job_whatever_the_host_and_given_back() -> None:
    state = State()
    for name in ("a", "b"):
        state.join(name, 4)
    assert state.apply(resources_init({}, {"license_x": 2}), 7).code == log.OK
    jobs = [int(asking(state, [], "rusage[license_x=1]").job_ids[0]) for _ in range(3)]
    assert accepted(state.dispatch(jobs[0], ("a", 1), format_=7))
    assert accepted(state.dispatch(jobs[1], ("b", 1), format_=7))
    refused = state.dispatch(jobs[2], ("a", 1), format_=7)
    assert (refused.code, refused.reason) == (api.REJECT_INFEASIBLE, api.PEND_NO_FREE_RESOURCES)
    assert "license_x: 2 of 2 in use" in refused.message
    assert fsm.read_counter(state.tables, feasibility.shared_counter("license_x")) == 2
    assert dict(state.job(jobs[0]).holds) == {feasibility.shared_counter("license_x"): 1}
    assert dict(state.host("a").reserved) == {}  # not a host's consumable
    state.finish(jobs[0], "a")
    assert fsm.read_counter(state.tables, feasibility.shared_counter("license_x")) == 1
    assert accepted(state.dispatch(jobs[2], ("a", 1), format_=7))
    # A new total is pushed when the digest changes; a resource left out goes.
    assert state.apply(resources_init({}, {"license_y": 1}, digest="r2"), 7).code == log.OK
    assert [k for k, _ in state.tables.scan("shared")] == [b"license_y"]


def test_a_closed_host_takes_no_new_job_keeps_its_mark_across_joins_and_reopens() -> None:
    state = State()
    state.join("a", 4)
    running = state.submit()
    assert accepted(state.dispatch(running, ("a", 1)))
    close = api.ControlHostRequest(name="a", close=True, reason="disk swap", request_id="c1")
    by = log.Principal(name="ops", role="operator")
    assert state.apply(log.Entry(host_control=close, by=by), 7).code == log.OK
    host = state.host("a")
    assert (host.closed, host.closed_reason, host.closed_by) == (True, "disk swap", "ops")
    refused = state.dispatch(state.submit(), ("a", 1))
    assert (refused.code, refused.reason) == (api.REJECT_INFEASIBLE, api.PEND_HOST_CLOSED)
    state.join("a", 4)  # the worker restarts: still closed
    assert state.host("a").closed and state.job(running).state == api.RUN
    forced = state.apply(log.Entry(dispatch=log.Dispatch(job_id=state.submit(), host="a")), 7)
    assert forced.code == log.OK  # brun may use a closed host, as LSF's may
    reopen = api.ControlHostRequest(name="a", close=False, request_id="o1")
    assert state.apply(log.Entry(host_control=reopen), 7).code == log.OK
    assert not state.host("a").closed and not state.host("a").closed_reason
    missing = api.ControlHostRequest(name="zz", close=True, request_id="c2")
    assert state.apply(log.Entry(host_control=missing), 7).code == log.NOT_FOUND


def test_the_pass_keeps_to_groups_licenses_and_open_hosts() -> None:
    hosts = [api.Host(spec=api.HostSpec(name=n, slots=s), groups=g, status=api.HOST_OK, slots_used=u,
                      closed=c)
             for n, s, g, u, c in (("g1", 2, ["gpu_nodes"], 2, False), ("g2", 2, ["gpu_nodes"], 0, False),
                                   ("c1", 8, [], 0, False), ("x1", 8, [], 0, True))]
    queues = [api.Queue(name="normal")]

    def job(job_id: int, hosts_: list[str], req: str = "") -> api.Job:
        return api.Job(id=job_id, state=api.PEND, spec=api.JobSpec(command=["t"], queue="normal", slots=1,
                                                                   hosts=hosts_, resource_req=req))

    jobs = [job(1, ["gpu_nodes"]), job(2, ["x1"]), job(3, [], "rusage[lic=1]"), job(4, [], "rusage[lic=1]")]
    decisions = core.schedule(jobs, queues, hosts, 0, core.CoreConfig(), shared={"lic": 1})
    placed = {d.job_id: d.host for d in decisions if isinstance(d, Dispatch)}
    # The first member is full: the second takes it (the seed's resource.c tried only member 0).
    assert placed == {1: "g2", 3: "c1"}
    pends = {d.job_id: (d.code, d.reason) for d in decisions if isinstance(d, Pend)}
    assert pends[2] == (api.PEND_HOST_CLOSED, "0 of 4 hosts can take 1 slot; 3 hosts not among -m; 1 closed")
    assert pends[4] == (api.PEND_NO_FREE_RESOURCES, "lic: 1 of 1 in use; the job takes 1")


@pytest.mark.parametrize("rerunnable", [False, True])
def test_losing_a_partner_host_has_the_first_host_end_the_job_and_nothing_is_given_back_early(
        rerunnable: bool) -> None:
    state = State()
    state.join("a", 2)
    state.join("b", 2)
    spec = api.JobSpec(command=["true"], slots=4, rerunnable=rerunnable)
    job = int(state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="p", jobs=[spec])]))).job_ids[0])
    assert accepted(state.dispatch(job, ("a", 2), ("b", 2)))
    generation = state.host("b").generation
    # b stops answering: the job's command runs on a, which still reports; it is not UNKWN.
    status = log.SetHostStatus(name="b", generation=generation, status=api.HOST_UNAVAIL)
    assert state.apply(log.Entry(host_status=status)).code == log.OK
    assert state.job(job).state == api.RUN
    assert state.apply(log.Entry(resolve_host=status)).code == log.OK  # b given up
    lost = state.job(job)
    assert (lost.state, lost.kill_requested, lost.requeue_requested) == (api.RUN, True, rerunnable)
    assert (state.host("a").slots_used, state.host("b").slots_used) == (2, 2)  # until a reports the end
    report = log.HostReport(host="a", generation=state.host("a").generation, report=api.JobReport(
        job_id=job, attempt=0, finished=api.JobFinished(term_signal=9)))
    assert state.apply(log.Entry(report=report)).code == log.OK
    ended = state.job(job)
    assert ended.state == (api.PEND if rerunnable else api.EXIT)
    assert (state.host("a").slots_used, state.host("b").slots_used) == (0, 0)


def test_amounts_too_large_for_any_total_fit_nowhere_and_never_overflow() -> None:
    state = State()
    state.join("a", 4, memory_mb=8000, big=1e300)
    refused = state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="x", jobs=[api.JobSpec(command=["t"], resource_req="rusage[mem=1e999]")])])))
    assert refused.code == log.INVALID_ARGUMENT and "whole numbers" in refused.message
    # Format 5 took such amounts unchecked: read now, they fit nowhere, and nothing raises.
    old = [int(state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id=f"o{i}", jobs=[api.JobSpec(command=["t"], resource_req=req)])])), 5).job_ids[0])
        for i, req in enumerate(("rusage[mem=1e999]", "rusage[big=1e20]"))]
    view = [state.job(i) for i in old]
    hosts = [api.Host.FromString(raw) for _, raw in state.tables.scan("hosts")]
    decisions = core.schedule(view, [api.Queue(name="normal")], hosts, 0, core.CoreConfig())
    assert all(isinstance(d, Pend) for d in decisions) and len(decisions) == 2
    for job in old:
        assert state.dispatch(job, ("a", 1)).code == api.REJECT_INFEASIBLE
    assert dict(state.host("a").reserved) == {}


def test_before_format_6_a_stored_minimum_is_not_read_as_older_replicas_did_not() -> None:
    """An older leader passes an unknown min_slots through; older replicas dispatch such a job with
    its slots, so a newer replica must too (no shape check below format 6)."""
    state = State()
    state.join("a", 8)
    spec = api.JobSpec(command=["t"], slots=4, min_slots=6)  # nonsense, but stored by an old leader
    job = int(state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="o", jobs=[spec])])), 5).job_ids[0])
    assert accepted(state.dispatch(job, ("a", 4), format_=5))


def test_a_part_s_reports_from_format_8_and_as_older_replicas_read_them_before() -> None:
    state = State()
    state.join("a", 2)
    state.join("b", 2)
    job = state.submit(slots=4)
    assert accepted(state.dispatch(job, ("a", 2), ("b", 2)))

    def part(body: api.JobReport, host: str = "b", format_: int = 8) -> log.Result:
        report = log.HostReport(host=host, generation=state.host(host).generation, report=body)
        return state.apply(log.Entry(report=report), format_)

    alive = api.JobReport(job_id=job, attempt=0, started=api.JobStarted(part=True))
    assert part(alive).code == log.OK and state.job(job).state == api.RUN  # changes nothing
    assert part(alive, format_=7).code == log.FAILED_PRECONDITION  # as a format-7 replica reads it
    usage = api.JobReport(job_id=job, attempt=0, part_ended=api.PartEnded(usage=api.Usage(user_cpu_s=1.5)))
    assert part(usage, format_=7).code == log.FAILED_PRECONDITION and state.job(job).usage.user_cpu_s == 0
    assert part(usage).code == log.OK and state.job(job).usage.user_cpu_s == 1.5
    assert part(usage).code == log.OK and state.job(job).usage.user_cpu_s == 1.5  # a repeat: once
    stranger = api.JobReport(job_id=job, attempt=1, part_ended=api.PartEnded(usage=api.Usage(user_cpu_s=9)))
    assert part(stranger).code == log.FAILED_PRECONDITION  # another attempt: nothing added
    state.join("c", 2)
    assert part(usage, host="c").code == log.FAILED_PRECONDITION  # not a host of its allocation
    state.finish(job, "a")
    assert part(alive).code == log.FAILED_PRECONDITION  # over: the worker is told to kill the part
    assert state.job(job).usage.user_cpu_s == 1.5  # the command's own end kept the part's usage
    # The first host's tasks end after its command: their usage is added after the end too.
    assert part(usage, host="a").code == log.OK and state.job(job).usage.user_cpu_s == 3.0


def test_usage_while_running_and_the_exit_reason_from_format_9() -> None:
    state = State()
    state.join("a", 2)
    state.join("b", 2)
    job = state.submit(slots=4)
    assert accepted(state.dispatch(job, ("a", 2), ("b", 2)))

    def sample(host: str, format_: int = 9, cpu: float = 3.5) -> log.Result:
        report = log.HostReport(host=host, generation=state.host(host).generation, report=api.JobReport(
            job_id=job, attempt=0, usage_now=api.UsageNow(usage=api.Usage(user_cpu_s=cpu, max_rss_kb=2048),
                                                           time_ms=77)))
        return state.apply(log.Entry(report=report), format_)

    assert sample("a", format_=8).code == log.INVALID_ARGUMENT  # an empty report, as format 8 reads it
    assert not state.job(job).HasField("usage_now")
    assert sample("b").code == log.FAILED_PRECONDITION  # only its first host speaks for it
    assert sample("a").code == log.OK
    running = state.job(job)
    now = running.usage_now
    assert (now.user_cpu_s, now.max_rss_kb, running.usage_time_ms) == (3.5, 2048, 77)
    end = log.HostReport(host="a", generation=state.host("a").generation, report=api.JobReport(
        job_id=job, attempt=0, finished=api.JobFinished(term_signal=9, exit_reason="MEMLIMIT")))
    assert state.apply(log.Entry(report=end)).code == log.OK
    ended = state.job(job)
    assert (ended.state, ended.exit_reason) == (api.EXIT, "MEMLIMIT")
    assert sample("a").code == log.FAILED_PRECONDITION  # it ended: no more samples


def test_from_format_18_a_dispatch_stamps_the_start_until_the_worker_reports_its_own() -> None:
    """What a pass reads of a running job (backfill's expected end, preemption's newest victims, fair
    share's charge) holds from the dispatch; the worker's started report sets its own time, a failed
    dispatch leaves the job never started, and before format 18 the start waits for the report."""
    state = State()
    state.join("a", 4)
    report = log.HostReport(host="a", generation=state.host("a").generation)

    def reported(body: api.JobReport) -> log.Result:
        report.report.CopyFrom(body)
        return state.apply(log.Entry(report=report), 18)

    first = state.submit()
    assert accepted(state.dispatch(first, ("a", 1), format_=18))
    dispatched = state.job(first)
    assert dispatched.start_time_ms == dispatched.modify_time_ms > 0 and dispatched.pid == 0
    started = api.JobReport(job_id=first, attempt=0, started=api.JobStarted(pid=42, time_ms=STAMP + 999_000))
    assert reported(started).code == log.OK
    assert (state.job(first).start_time_ms, state.job(first).pid) == (STAMP + 999_000, 42)

    second = state.submit()
    assert accepted(state.dispatch(second, ("a", 1), format_=18))
    failed = api.JobReport(job_id=second, attempt=0, dispatch_failed=api.DispatchFailed(code=-1, reason="no"))
    assert reported(failed).code == log.OK
    back = state.job(second)
    assert (back.state, back.attempt, back.start_time_ms) == (api.PEND, 1, 0)

    older = state.submit()
    assert accepted(state.dispatch(older, ("a", 1), format_=17))
    assert state.job(older).state == api.RUN and state.job(older).start_time_ms == 0


@pytest.mark.parametrize("format_", [17, 18])
def test_a_job_killed_before_its_worker_started_it_counts_from_its_dispatch_from_format_18(
        format_: int) -> None:
    """From format 18 an attempt counts from its allocation, as Slurm's usage does: a job killed before
    its worker reported a start held its slots from its dispatch (accounting's started, run and wait
    times; fair share charges the same times). Before, it counted nothing."""
    state = State()
    state.join("a", 4)
    job_id = state.submit(slots=2)
    assert accepted(state.dispatch(job_id, ("a", 2), format_=format_))
    dispatched = state.job(job_id).modify_time_ms
    kill = log.Entry(control=api.ControlJobRequest(job_id=str(job_id), action=api.KILL),
                     stamp_ms=dispatched + 1)
    assert state.apply(kill, format_).code == log.OK
    report = log.HostReport(host="a", generation=state.host("a").generation, report=api.JobReport(
        job_id=job_id, attempt=0, finished=api.JobFinished(term_signal=9, time_ms=dispatched + 200_000)))
    assert state.apply(log.Entry(report=report, stamp_ms=dispatched + 200_000), format_).code == log.OK
    ended = state.job(job_id)
    totals = history.usage_of(ended)
    assert ended.state == api.EXIT
    if format_ >= 18:
        assert (totals.started, totals.run_ms, totals.slot_ms) == (1, 200_000, 400_000)
        assert totals.wait_ms == dispatched - ended.submit_time_ms
    else:
        assert (ended.start_time_ms, totals.started, totals.run_ms, totals.slot_ms) == (0, 0, 0, 0)
