"""Job arrays: the index syntax (xce/rules/array_spec.py) and the array record in the state machine
(controller/fsm/arrays.py): lazy elements, counts, the running limit, actions on selections."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controller import fsm, reads
from controller.fsm import arrays
from controller.fsm.versions import ARRAY_FORMAT
from controller.store import StateStore
from controller.tables import TABLES, MemoryTables, Tables
from scheduler import core
from scheduler.decisions import Dispatch
from xce.errors import ServiceError
from xce.rules import array_spec
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STAMP = 1_700_000_000_000
FORMAT = ARRAY_FORMAT

# ---------------------------------------------------------------- the syntax


@pytest.mark.parametrize(("text", "name", "indices", "limit"), [
    ("sim[1-1000:2%50]", "sim", [(1, 1000, 2)], 50),       # the form
    ("sim[1-1000:2]%50", "sim", [(1, 1000, 2)], 50),       # LSF's form
    ("a[1-3,7,10-20:5]", "a", [(1, 3, 1), (7, 7, 1), (10, 20, 5)], 0),
    ("[5]", "", [(5, 5, 1)], 0),
])
def test_array_names_parse_as_lsf_writes_them(text: str, name: str, indices: list[tuple[int, int, int]],
                                             limit: int) -> None:
    got_name, spec = array_spec.parse_name(text)
    assert spec is not None
    assert got_name == name
    assert [(r.start, r.end, r.step) for r in spec.ranges] == indices
    assert spec.limit == limit


@pytest.mark.parametrize(("text", "words"), [
    ("x[0-]", "is not start"), ("x[5-1]", "ends before it starts"), ("x[1-10:0]", "step"),
    ("x[1-10]%0", "positive"), ("x[1-10%0]", "positive"), ("x[0]", "from 1"), ("x[1-10", "bad job array"),
    ("x[1-3]%2%3", "positive"), ("x[1-3%2]%3", "twice"), ("x[a-b]", "is not start"), ("x[]", "is not start"),
    ("x[" + "9" * 5000 + "]", "is not start"), ("x[1-2]%" + "9" * 5000, "positive"),  # no int() of it
])
def test_bad_array_names_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(array_spec.ArraySpecError, match=words):
        array_spec.parse_name(text)


def test_a_plain_name_is_not_an_array() -> None:
    assert array_spec.parse_name("build") == ("build", None)


def test_check_refuses_overlaps_and_sizes_over_the_maximum() -> None:
    _, spec = array_spec.parse_name("x[1-10:3,4]")  # 1 4 7 10, and 4 again
    assert spec is not None
    with pytest.raises(array_spec.ArraySpecError, match="index 4 is in a job array twice"):
        array_spec.check(spec, 100)
    _, spec = array_spec.parse_name("x[1-10:2,2-10:2]")  # odd and even: no overlap
    assert spec is not None and array_spec.check(spec, 100) == 10
    with pytest.raises(array_spec.ArraySpecError, match="at most 9"):
        array_spec.check(spec, 9)


def test_positions_map_indices_both_ways() -> None:
    _, spec = array_spec.parse_name("x[1-1000:2,5000-5002]")
    assert spec is not None
    assert array_spec.size_of(spec) == 503
    assert [array_spec.index_at(spec, p) for p in (0, 1, 499, 500, 502)] == [1, 3, 999, 5000, 5002]
    # 200-400 selects the odd indices 201..399: positions 100..199; 5001 is position 501.
    wanted = array_spec.parse_indices("200-400,5001")
    assert array_spec.positions_of(spec, wanted) == [(100, 199), (501, 501)]
    assert array_spec.positions_of(spec, array_spec.parse_indices("2-8:2")) == []  # evens: none there


# ---------------------------------------------------------------- the record


class State:
    """One in-memory state with a cluster, a host and a scheduler's lease."""

    def __init__(self, tables: Tables | None = None, store: StateStore | None = None, **init: int) -> None:
        self.tables = tables or MemoryTables()
        self.store = store
        self.index = 0
        self.run(log.Entry(init=log.InitCluster(cluster_id="c", config_digest="d", default_queue="normal",
                                                queues=[api.Queue(name="normal"), api.Queue(name="other")],
                                                **init)))
        self.run(log.Entry(join_host=api.HostSpec(name="n1", slots=100)))
        lease = log.LeaseEntry(scheduler_id="s", duration_ms=10**9)
        self.epoch = self.run(log.Entry(lease=lease)).lease_epoch

    def apply(self, entry: log.Entry) -> list[log.Result]:
        entry.stamp_ms = entry.stamp_ms or STAMP + self.index
        entry.format = entry.format or FORMAT
        self.index += 1
        if self.store is not None:
            results = self.store.apply(self.index, entry.SerializeToString())
        else:
            results = fsm.apply(self.tables, self.index, entry.SerializeToString())
        assert results is not None
        return results

    def run(self, entry: log.Entry) -> log.Result:
        return self.apply(entry)[0]

    def read(self, job_id: int) -> api.Job:
        if self.store is not None:
            with self.store.read() as tables:
                job = fsm.read_job(tables, job_id)
        else:
            job = fsm.read_job(self.tables, job_id)
        assert job is not None, job_id
        return job

    def submit(self, name: str, **fields: object) -> log.Result:
        _, array = array_spec.parse_name(name)
        spec = api.JobSpec(command=["true"], name=name.split("[")[0], array=array, **fields)
        return self.run(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[spec])])))

    def dispatch(self, *job_ids: int) -> log.Result:
        batch = api.DecisionBatch(lease_epoch=self.epoch, scheduler_id="s", decisions=[
            api.Decision(dispatch=api.DispatchDecision(job_id=j, attempt=0, host="n1")) for j in job_ids])
        return self.run(log.Entry(decisions=batch))

    def finish(self, job_id: int, code: int = 0) -> None:
        for body in ({"started": api.JobStarted(pid=7, time_ms=1)},
                     {"finished": api.JobFinished(exit_code=code, time_ms=2)}):
            assert self.run(log.Entry(report=log.HostReport(host="n1", generation=1, report=api.JobReport(
                job_id=job_id, attempt=0, **body)))).code == log.OK

    def control(self, target: str, action: int) -> log.Result:
        return self.run(log.Entry(control=api.ControlJobRequest(job_id=target, action=action,
                                                                request_id=f"c{self.index}")))

    def elements(self, array_id: int) -> dict[int, api.Job]:
        return {index: self.read(job_id) for index, job_id in arrays.elements(self.tables, array_id)}


def counts(record: api.Job) -> dict[str, int]:
    return {api.JobState.Name(s): n for s, n in enumerate(record.array.counts) if n}


def test_a_million_elements_cost_one_record_and_a_window_of_jobs() -> None:
    state = State()
    result = state.submit("big[1-1000000]")
    assert result.code == log.OK, result.message
    (array_id,) = result.job_ids
    record = state.read(array_id)
    assert record.state == api.PEND and record.array.size == 1_000_000
    assert counts(record) == {"PEND": 1_000_000}
    elements = state.elements(array_id)
    assert sorted(elements) == list(range(1, arrays.WINDOW + 1))
    first = elements[1]
    assert (first.array_id, first.array_index, first.spec.name) == (array_id, 1, "big[1]")
    assert first.state == api.PEND
    assert first.readable_id == f"{record.readable_id}[1]" and not first.spec.HasField("array")
    assert len(state.tables._data["jobs"]) == 1 + arrays.WINDOW  # and nothing per element beyond it


def test_elements_become_jobs_as_others_are_dispatched_and_the_record_finishes_with_them() -> None:
    state = State()
    (array_id,) = state.submit("a[1-5]%2").job_ids
    assert sorted(state.elements(array_id)) == [1, 2]  # the window is the limit
    first, second = (state.elements(array_id)[i].id for i in (1, 2))
    outcome = state.dispatch(first, second)
    assert list(outcome.rejections) == ["", ""]
    assert sorted(state.elements(array_id)) == [1, 2, 3, 4]  # two more wait as jobs
    third = state.elements(array_id)[3].id
    refused = state.dispatch(third)  # the limit of 2 is reached: the commit barrier refuses a third
    assert refused.outcomes[0].code == api.REJECT_INFEASIBLE
    assert refused.outcomes[0].reason == api.PEND_LIMIT_REACHED
    state.finish(first)
    assert state.dispatch(third).rejections == [""]
    state.finish(second, code=3)
    for index in (4, 5):
        job_id = state.elements(array_id)[index].id
        assert state.dispatch(job_id).rejections == [""]
        state.finish(job_id)
    state.finish(third)
    record = state.read(array_id)
    assert counts(record) == {"DONE": 4, "EXIT": 1}
    assert record.state == api.EXIT and record.array.materialized == 5 and not record.array.runs


def test_the_planner_keeps_to_the_running_limit_in_one_pass() -> None:
    state = State()
    (array_id,) = state.submit("a[1-10]%3").job_ids
    jobs = [api.Job.FromString(raw) for _, raw in sorted(state.tables._data["jobs"].items())]
    hosts = [api.Host.FromString(raw) for raw in state.tables._data["hosts"].values()]
    queues = [api.Queue(name="normal")]
    counters = {key.decode(): int.from_bytes(v, "big") for key, v in state.tables._data["counters"].items()}
    result = core.run_pass(jobs, queues, hosts, core.CoreConfig(), counters)
    dispatched = [d for d in result.decisions if isinstance(d, Dispatch)]
    assert len(dispatched) == 3 and array_id not in {d.job_id for d in dispatched}


def test_a_bulk_kill_ends_exactly_the_selected_elements() -> None:
    state = State()
    (array_id,) = state.submit("k[1-600]").job_ids
    running = [state.elements(array_id)[i].id for i in (199, 200, 201, 250)]
    assert state.dispatch(*running).rejections == [""] * 4
    result = state.control(f"{array_id}[200-400]", api.KILL)
    assert result.code == log.OK, result.message
    elements = state.elements(array_id)
    assert elements[199].state == api.RUN and not elements[199].kill_requested
    assert elements[200].kill_requested and elements[250].kill_requested  # the worker ends them
    assert elements[202].state == api.EXIT  # a pending job among the selection
    record = state.read(array_id)
    # 201 selected elements: 3 running (being killed), the other 198 exited, jobs or not.
    assert counts(record) == {"PEND": 600 - 201 - 1, "RUN": 4, "EXIT": 198}
    view = arrays.element_view(state.tables, record, 399)
    assert view.state == api.EXIT and view.id == 0
    assert state.control(f"{array_id}[300-310]", api.KILL).code == log.FAILED_PRECONDITION  # nothing left


def test_hold_and_release_of_a_whole_array_reach_jobs_and_runs() -> None:
    state = State()
    (array_id,) = state.submit("h[1-1000]").job_ids
    assert state.control(str(array_id), api.HOLD).code == log.OK
    record = state.read(array_id)
    assert counts(record) == {"PSUSP": 1000} and record.state == api.PSUSP
    assert all(j.state == api.PSUSP for j in state.elements(array_id).values())
    assert state.control(f"{array_id}[1-10]", api.RELEASE).code == log.OK
    record = state.read(array_id)
    assert counts(record) == {"PEND": 10, "PSUSP": 990} and record.state == api.PEND
    assert state.control(str(array_id), api.RELEASE).code == log.OK
    assert counts(state.read(array_id)) == {"PEND": 1000}


def test_modify_of_a_selection_makes_its_elements_jobs() -> None:
    state = State()
    (array_id,) = state.submit("m[1-100000]").job_ids
    result = state.run(log.Entry(modify=api.ModifyJobRequest(job_id=f"{array_id}[50000-50009]", priority=7)))
    assert result.code == log.OK, result.message
    elements = state.elements(array_id)
    assert all(elements[i].spec.priority == 7 for i in range(50000, 50010))
    assert elements[1].spec.priority == 0 and state.read(array_id).spec.priority == 0
    assert state.run(log.Entry(modify=api.ModifyJobRequest(job_id=str(array_id), priority=9))).code == log.OK
    assert state.read(array_id).spec.priority == 9 and state.elements(array_id)[1].spec.priority == 9
    too_many = log.Entry(modify=api.ModifyJobRequest(job_id=f"{array_id}[60000-90000]", priority=1))
    assert state.run(too_many).code == log.FAILED_PRECONDITION
    assert 60000 not in state.elements(array_id)  # and it changed nothing


def test_bad_arrays_are_refused_by_apply_and_create_nothing() -> None:
    state = State()
    before = dict(state.tables._data["jobs"])
    for bad in (api.ArraySpec(), api.ArraySpec(ranges=[api.IndexRange(start=5, end=1)]),
                api.ArraySpec(ranges=[api.IndexRange(start=1, end=arrays.MAX_SIZE + 1)])):
        spec = api.JobSpec(command=["true"], array=bad)
        result = state.run(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(jobs=[spec])])))
        assert result.code == log.INVALID_ARGUMENT, result
    old_format = log.Entry(format=3, submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(jobs=[
        api.JobSpec(command=["true"], array=api.ArraySpec(ranges=[api.IndexRange(start=1, end=2)]))])]))
    assert state.run(old_format).code == log.INVALID_ARGUMENT
    assert state.tables._data["jobs"] == before


def test_selections_on_plain_jobs_and_unknown_indices_are_refused() -> None:
    state = State()
    plain = state.run(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        jobs=[api.JobSpec(command=["true"])])]))).job_ids[0]
    assert state.control(f"{plain}[1]", api.KILL).code == log.INVALID_ARGUMENT
    (array_id,) = state.submit("a[1-3]").job_ids
    with pytest.raises(ServiceError, match="no index 9"):
        reads.get_job(state.tables, api.GetJobRequest(job_id=f"{array_id}[9]"))
    shown = reads.get_job(state.tables, api.GetJobRequest(job_id=f"{array_id}[2]")).job
    assert (shown.array_index, shown.state) == (2, api.PEND) and shown.id
    assert state.control(f"{array_id}[1-2", api.KILL).code == log.INVALID_ARGUMENT


def test_memory_and_lmdb_apply_arrays_alike(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s", "c")
    try:
        replicas = [State(), State(store=store)]
        for state in replicas:
            (array_id,) = state.submit("d[1-300:3]%20").job_ids
            state.control(f"{array_id}[10-40]", api.HOLD)
            state.control(f"{array_id}[13]", api.KILL)
        with store.read() as tables:
            on_disk = {t: dict(tables.scan(t)) for t in TABLES}
        for key in (b"identity", b"derived"):  # the store's own, not the state machine's
            on_disk["meta"].pop(key)
        assert {t: dict(replicas[0].tables.scan(t)) for t in TABLES} == on_disk
    finally:
        store.close()


def _finished_pair() -> tuple[State, int, list[int]]:
    """An array of two elements, both run and DONE: (state, the array's id, the elements' ids)."""
    state = State()
    (array_id,) = state.submit("a[1-2]").job_ids
    ids = [state.elements(array_id)[i].id for i in (1, 2)]
    assert state.dispatch(*ids).rejections == ["", ""]
    for job_id in ids:
        state.finish(job_id)
    return state, array_id, ids


def test_an_element_requeued_after_its_array_left_the_live_tables_brings_the_record_back() -> None:
    state, array_id, ids = _finished_pair()
    assert state.read(array_id).state == api.DONE
    later = STAMP + 2 * 3600 * 1000  # past the clean period: the finished jobs leave the live tables
    state.run(log.Entry(stamp_ms=later, join_host=api.HostSpec(name="n2", slots=1)))
    assert fsm.read_job(state.tables, array_id) is None and fsm.read_job(state.tables, ids[0]) is None
    assert state.run(log.Entry(stamp_ms=later, control=api.ControlJobRequest(
        job_id=str(ids[0]), action=api.REQUEUE, request_id="rq"))).code == log.OK
    record = state.read(array_id)
    assert counts(record) == {"PEND": 1, "DONE": 1} and record.state == api.PEND


def test_stepped_selections_match_walking_the_indices() -> None:
    import random

    rng = random.Random(7)
    for _ in range(300):
        ranges = []
        start = rng.randrange(1, 50)
        for _ in range(rng.randrange(1, 4)):
            step = rng.randrange(1, 7)
            end = start + step * rng.randrange(0, 30)
            ranges.append(api.IndexRange(start=start, end=end, step=step))
            start = end + rng.randrange(1, 20)
        spec = api.ArraySpec(ranges=ranges)
        wanted = [api.IndexRange(start=(a := rng.randrange(1, 200)), end=a + rng.randrange(0, 200),
                                 step=rng.randrange(1, 9))]
        chosen = {i for w in wanted for i in range(w.start, w.end + 1, w.step)}
        expected = [p for p, index in enumerate(array_spec.iter_indices(spec)) if index in chosen]
        got = [p for first, last in array_spec.positions_of(spec, wanted) for p in range(first, last + 1)]
        assert got == expected, (ranges, wanted)


def test_huge_selections_are_arithmetic_or_refused_never_walked() -> None:
    state = State()
    (array_id,) = state.submit("s[1-2000000]").job_ids
    started = time.monotonic()
    assert state.control(f"{array_id}[1-2147483647:2]", api.HOLD).code == log.INVALID_ARGUMENT  # 1M singles
    assert state.control(f"{array_id}[1-2147483647]", api.HOLD).code == log.OK  # one span
    assert time.monotonic() - started < 5
    assert state.control(str(array_id), api.RELEASE).code == log.OK
    # Single elements held, 100 a request: past 1,000 runs in the record the request is refused whole.
    for batch in range(11):
        picks = ",".join(str(100_000 + batch * 1000 + 2 * i) for i in range(100))
        before = state.read(array_id)
        result = state.control(f"{array_id}[{picks}]", api.HOLD)
    assert result.code == log.RESOURCE_EXHAUSTED, result
    after = state.read(array_id)
    assert after.array == before.array  # nothing of the refused request
    assert len(after.array.runs) <= arrays.MAX_RUNS and after.array.counts[api.PSUSP] < 1100


def test_overlap_checks_agree_with_the_sets_and_take_no_time_on_large_steps() -> None:
    import random

    rng = random.Random(3)
    for _ in range(2000):
        a, b = rng.randrange(1, 60), rng.randrange(1, 60)
        p, q = rng.randrange(1, 12), rng.randrange(1, 12)
        ea, eb = a + p * rng.randrange(0, 12), b + q * rng.randrange(0, 12)
        spec = api.ArraySpec(ranges=[api.IndexRange(start=a, end=ea, step=p), api.IndexRange(start=b, end=eb,
                                                                                            step=q)])
        overlap = set(range(a, ea + 1, p)) & set(range(b, eb + 1, q))
        if overlap:
            with pytest.raises(array_spec.ArraySpecError, match=f"index {min(overlap)} "):
                array_spec.check(spec, 10_000)
        else:
            array_spec.check(spec, 10_000)
    # 100 ranges with a large prime step and different residues: no overlap, and no walking.
    spec = api.ArraySpec(ranges=[api.IndexRange(start=1 + r, end=1 + r + 10007 * 9000, step=10007)
                                 for r in range(100)])
    started = time.monotonic()
    assert array_spec.check(spec, 1_000_000) == 900_100
    assert time.monotonic() - started < 1



def test_an_element_outliving_its_pruned_record_is_a_job_of_its_own() -> None:
    hour = 3600 * 1000
    state = State(clean_period_ms=hour, history_retention_ms=2 * hour)
    (array_id,) = state.submit("a[1-300]").job_ids
    assert state.control(str(array_id), api.KILL).code == log.OK  # its jobs and the rest: one stamp
    # One entry later than the retention: 256 cleaned and 256 pruned, oldest first: the record first.
    state.run(log.Entry(stamp_ms=STAMP + 3 * hour, join_host=api.HostSpec(name="h1", slots=1)))
    assert fsm.read_job(state.tables, array_id) is None
    assert state.tables.get("history", fsm.job_key(array_id)) is None
    leftover = max(int.from_bytes(k, "big") for k in state.tables._data["jobs"])
    result = state.run(log.Entry(stamp_ms=STAMP + 10 * hour, control=api.ControlJobRequest(
        job_id=str(leftover), action=api.REQUEUE, request_id="late")))
    assert result.code == log.OK and state.read(leftover).state == api.PEND  # and no replica stopped


def test_a_refused_action_on_a_cleaned_array_writes_nothing() -> None:
    state, array_id, ids = _finished_pair()
    state.run(log.Entry(stamp_ms=STAMP + 2 * 3600 * 1000, join_host=api.HostSpec(name="n2", slots=1)))
    before = {t: dict(state.tables._data[t]) for t in ("jobs", "history", "history_index", "job_index")}
    result = state.run(log.Entry(stamp_ms=STAMP + 2 * 3600 * 1000, control=api.ControlJobRequest(
        job_id=str(array_id), action=api.KILL, request_id="k")))
    assert result.code == log.FAILED_PRECONDITION
    assert {t: dict(state.tables._data[t]) for t in before} == before


def test_a_stepped_modify_cannot_split_the_record_past_its_bound() -> None:
    state = State()
    (array_id,) = state.submit("m[1-100000]").job_ids
    before = state.read(array_id)
    result = state.run(log.Entry(modify=api.ModifyJobRequest(job_id=f"{array_id}[1000-5000:2]", priority=3)))
    assert result.code == log.RESOURCE_EXHAUSTED, result
    assert state.read(array_id) == before and 1001 not in state.elements(array_id)


def test_elements_killed_before_they_ran_can_be_requeued() -> None:
    state = State()
    (array_id,) = state.submit("r[1-1000]").job_ids
    assert state.control(f"{array_id}[500-600]", api.KILL).code == log.OK
    assert counts(state.read(array_id)) == {"PEND": 899, "EXIT": 101}
    assert state.control(f"{array_id}[550-600]", api.REQUEUE).code == log.OK
    assert counts(state.read(array_id)) == {"PEND": 950, "EXIT": 50}


def test_a_whole_array_moves_queue_while_some_elements_run_and_others_wait() -> None:
    state = State()
    (array_id,) = state.submit("q[1-600]").job_ids
    assert state.dispatch(state.elements(array_id)[1].id).rejections == [""]
    assert state.control(f"{array_id}[2-600]", api.HOLD).code == log.OK
    assert state.read(array_id).state == api.RUN
    result = state.run(log.Entry(modify=api.ModifyJobRequest(job_id=str(array_id), queue="other")))
    assert result.code == log.OK, result.message
    elements = state.elements(array_id)
    assert state.read(array_id).spec.queue == "other" and elements[2].spec.queue == "other"
    assert elements[1].spec.queue == "normal"  # running: it stays where it runs
