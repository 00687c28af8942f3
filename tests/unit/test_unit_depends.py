"""Dependencies in the state machine (controller/fsm/depends.py): refused at submit when unusable, the
verdict kept current by apply as the jobs read move, the barrier and the pass keeping to it, the kill of
a job whose condition can never hold. Pure: in-memory tables."""

from __future__ import annotations

import pytest

from controller import fsm
from controller.fsm import arrays, depends, job_index
from controller.fsm.versions import DEPEND_FORMAT
from scheduler import core
from scheduler.decisions import Pend
from tests.unit.test_unit_arrays import State
from xce.rules import array_spec
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

FORMAT = DEPEND_FORMAT


class Current(State):
    """The arrays' test state, with entries at the format that has dependencies."""

    def apply(self, entry: log.Entry) -> list[log.Result]:
        entry.format = entry.format or FORMAT
        return super().apply(entry)


def state(**init: int) -> Current:
    return Current(**init)


def submit(s: State, name: str = "j", **fields: object) -> log.Result:
    _, array = array_spec.parse_name(name)
    spec = api.JobSpec(command=["true"], name=name.split("[")[0], array=array, **fields)
    return s.run(log.Entry(submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id=f"r{s.index}", jobs=[spec])])))


def one(s: State, **fields: object) -> int:
    result = submit(s, **fields)
    assert result.code == log.OK, result.message
    return result.job_ids[0]


def run_and_end(s: State, job_id: int, code: int = 0) -> None:
    assert s.dispatch(job_id).rejections == [""]
    s.finish(job_id, code)


def pass_reasons(s: State) -> dict[int, tuple[int, str]]:
    jobs = [api.Job.FromString(raw) for _, raw in sorted(s.tables._data["jobs"].items())]
    hosts = [api.Host.FromString(raw) for raw in s.tables._data["hosts"].values()]
    result = core.run_pass(jobs, [api.Queue(name="normal"), api.Queue(name="other")], hosts,
                           core.CoreConfig(), {})
    return {d.job_id: (d.code, d.reason) if isinstance(d, Pend) else (0, "dispatch")
            for d in result.decisions}


@pytest.mark.parametrize("condition, words", [
    ("done(12", "column 8: unexpected the end; expected )"),
    ("done(99)", "job 99 is not known"),
    ("done(1[2])", "job 1 is not an array"),
    ("numdone(1, > 2)", "job 1 is not an array"),
    ("done(2[7])", "array 2 has no index 7"),
    ("exit(2, != 0)", "not a whole array"),
])
def test_an_unusable_condition_is_refused_at_submit_and_changes_nothing(condition: str, words: str) -> None:
    s = state()
    one(s)  # job 1
    assert submit(s, "a[1-3]").code == log.OK  # array 2
    before = dict(s.tables._data["jobs"])
    result = submit(s, depend=condition)
    assert result.code == log.INVALID_ARGUMENT and words in result.message, result.message
    assert s.tables._data["jobs"] == before


def test_the_verdict_follows_the_job_it_reads_and_the_barrier_keeps_to_it() -> None:
    s = state()
    first = one(s)
    waiting = one(s, depend=f"done({first})")
    assert s.read(waiting).depend_state == api.DEPEND_PENDING
    assert pass_reasons(s)[waiting] == (api.PEND_DEPENDENCY, f"dependency pending: done({first})")
    refused = s.dispatch(waiting)  # a scheduler with a stale view: the barrier refuses
    outcome = refused.outcomes[0]
    assert (outcome.code, outcome.reason) == (api.REJECT_INFEASIBLE, api.PEND_DEPENDENCY)
    run_and_end(s, first)
    assert s.read(waiting).depend_state == api.DEPEND_SATISFIED
    assert pass_reasons(s)[waiting] == (0, "dispatch")
    assert s.dispatch(waiting).rejections == [""]
    # Dispatched: it no longer waits on anything, so its key under `first` is gone.
    assert job_index.dependents(s.tables, first) == []


def test_a_condition_that_can_never_hold_says_so_or_kills_when_asked() -> None:
    s = state()
    first = one(s)
    stays = one(s, depend=f"done({first})")
    killed = one(s, depend=f"done({first}) || done({stays})", kill_on_invalid_dep=True)
    chained = one(s, depend=f"exit({killed}, == 137)")
    run_and_end(s, first, code=1)
    assert s.read(stays).depend_state == api.DEPEND_NEVER and s.read(stays).state == api.PEND
    code, words = pass_reasons(s)[stays]
    assert code == api.PEND_DEPENDENCY_NEVER and "can no longer hold" in words
    # `killed` reads `stays`, which is pending: not settled yet. Killing `stays` settles it.
    assert s.read(killed).depend_state == api.DEPEND_PENDING
    assert s.control(str(stays), api.KILL).code == log.OK
    gone = s.read(killed)
    assert (gone.state, gone.exit_reason, gone.exit_code) == (api.EXIT, "DEPENDENCY", 137)
    # The kill is a write like any: the job that waited for it is satisfied in the same entry.
    assert s.read(chained).depend_state == api.DEPEND_SATISFIED


def test_a_queue_may_kill_the_jobs_whose_condition_can_never_hold() -> None:
    s = state()
    assert s.run(log.Entry(put_queue=log.PutQueueEntry(queue=api.Queue(
        name="other", kill_invalid_depend=True)))).code == log.OK
    first = one(s)
    doomed = one(s, depend=f"done({first})", queue="other")
    run_and_end(s, first, code=2)
    assert s.read(doomed).state == api.EXIT and s.read(doomed).exit_reason == "DEPENDENCY"


def test_a_requeue_of_the_job_read_takes_the_verdict_back() -> None:
    s = state()
    first = one(s)
    waiting = one(s, depend=f"done({first})")
    run_and_end(s, first)
    assert s.read(waiting).depend_state == api.DEPEND_SATISFIED
    assert s.control(str(first), api.REQUEUE).code == log.OK
    assert s.read(waiting).depend_state == api.DEPEND_PENDING


def test_conditions_on_arrays_read_counts_and_elements_even_once_cleaned() -> None:
    s = state(clean_period_ms=1)
    array_id = submit(s, "a[1-4]").job_ids[0]
    elements = s.elements(array_id)
    counting = one(s, depend=f"numdone({array_id}, >= 2)")
    on_third = one(s, depend=f"exit({array_id}[3], == 5)")
    on_all = one(s, depend=f"done({array_id}[*])")
    run_and_end(s, elements[1].id)
    run_and_end(s, elements[3].id, code=5)
    assert s.read(on_third).depend_state == api.DEPEND_SATISFIED
    assert s.read(on_all).depend_state == api.DEPEND_NEVER  # element 3 exited
    assert s.read(counting).depend_state == api.DEPEND_PENDING
    run_and_end(s, elements[2].id)
    # Element 3 has left the live tables (a 1 ms clean period): history still says how it ended.
    assert arrays.element_id(s.tables, array_id, 3) is None
    assert s.read(counting).depend_state == api.DEPEND_SATISFIED
    assert s.read(on_third).depend_state == api.DEPEND_SATISFIED
    assert fsm.read_job(s.tables, on_third) is not None


def test_an_array_with_a_condition_keeps_its_elements_until_it_holds() -> None:
    s = state()
    first = one(s)
    array_id = submit(s, "b[1-3]", depend=f"ended({first})").job_ids[0]
    assert s.elements(array_id) == {}
    assert s.read(array_id).depend_state == api.DEPEND_PENDING
    run_and_end(s, first, code=1)
    elements = s.elements(array_id)
    assert sorted(elements) == [1, 2, 3]
    assert all(not e.spec.depend for e in elements.values())  # the record waited for them


def test_a_whole_array_condition_from_an_array_is_refused_as_lsf_means_it_element_by_element() -> None:
    s = state()
    array_id = submit(s, "a[1-2]").job_ids[0]
    result = submit(s, "b[1-2]", depend=f"done({array_id}[*])")
    assert result.code == log.INVALID_ARGUMENT and "element by element" in result.message


def test_the_leader_refuses_w_until_every_replica_reads_it() -> None:
    from controller.fsm.validation import check_min_slots_known
    from xce.errors import ServiceError

    with pytest.raises(ServiceError, match="entry format 10"):
        check_min_slots_known(api.JobSpec(command=["x"], depend="done(1)"), FORMAT - 1)
    check_min_slots_known(api.JobSpec(command=["x"], depend="done(1)"), FORMAT)


def _record(array: str, exit_code: int = 0, state: int = api.RUN) -> api.Job:
    job = api.Job(id=1, state=state, exit_code=exit_code)
    if array == "empty":
        job.array.SetInParent()  # set, with no counts
    elif array == "size only":
        job.array.size = 3
    elif array:
        job.array.counts.extend(int(n) for n in array.split(","))
    return job


ARRAYS = ("", "empty", "size only", "0", "1,2", "1,2,0", "2,1")


@pytest.mark.parametrize("before", ARRAYS)
@pytest.mark.parametrize("after", ARRAYS)
@pytest.mark.parametrize("exit_codes", [(0, 0), (0, 1)])
def test_what_a_condition_reads_moved_exactly_when_state_exit_code_or_counts_did(
        before: str, after: str, exit_codes: tuple[int, int]) -> None:
    """facts_moved: the key of state, exit code and an array's counts compared, without reading an
    unset `array` (a record without one compares as one with no counts)."""
    old, new = _record(before, exit_codes[0]), _record(after, exit_codes[1])
    key = lambda job: (job.state, job.exit_code, tuple(job.array.counts))  # noqa: E731 - the rule, plainly
    assert depends.facts_moved(old, new) == (key(old) != key(new))
    assert depends.facts_moved(old, _record(before, exit_codes[0], api.DONE))  # the state alone moves it
