"""Job history (fsm/history.py), the live secondary indexes (fsm/job_index.py) and their reads:
pure apply on both table backends, entries built by hand."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path

import pytest

from controller import fsm, history_reads, reads
from controller.fsm import history, job_index
from controller.store import StateStore
from controller.tables import MemoryTables, Tables
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CLUSTER = "demo"
T0 = 1_700_000_000_000
HOUR = 3_600_000
CLEAN = HOUR
RETENTION = 48 * HOUR


class State:
    """Entries applied in order to one backend; each entry at format 2 with a stamp the test chooses."""

    def __init__(self, read: Callable[[], AbstractContextManager[Tables]],
                 apply: Callable[[int, bytes], object]) -> None:
        self._read, self._apply, self.index = read, apply, 0
        self._reading = ExitStack()

    def step(self, entry: log.Entry, at: int, format_: int = 2) -> list[log.Result]:
        self._reading.close()  # a read transaction sees the state as of its start
        self.index += 1
        entry.stamp_ms, entry.proposer, entry.format = at, 1, format_
        results = self._apply(self.index, entry.SerializeToString())
        assert isinstance(results, list)
        return results

    def ok(self, entry: log.Entry, at: int, format_: int = 2) -> log.Result:
        result = self.step(entry, at, format_)[0]
        assert result.code == log.OK, result.message
        return result

    def tables(self) -> Tables:
        self._reading.close()
        return self._reading.enter_context(self._read())


@pytest.fixture(params=["memory", "lmdb"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[State]:
    if request.param == "memory":
        memory = MemoryTables()
        fsm.rebuild_derived(memory)
        yield State(lambda: nullcontext(memory), lambda index, data: fsm.apply(memory, index, data))
        return
    store = StateStore(tmp_path / "state", CLUSTER)
    state = State(store.read, store.apply)
    try:
        yield state
    finally:
        state._reading.close()
        store.close()


def init(clean_ms: int = CLEAN, retention_ms: int = RETENTION) -> log.Entry:
    return log.Entry(init=log.InitCluster(cluster_id=CLUSTER, default_queue="normal", config_digest="d",
                                          queues=[api.Queue(name="normal"), api.Queue(name="low")],
                                          clean_period_ms=clean_ms, history_retention_ms=retention_ms))


def submit(request_id: str, user: str = "ann", queue: str = "normal", count: int = 1) -> log.Entry:
    spec = api.JobSpec(command=["true"], user=user, queue=queue)
    return log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(request_id=request_id,
                                                                            jobs=[spec] * count)]))


def control(job_id: int, action: int) -> log.Entry:
    return log.Entry(control=api.ControlJobRequest(job_id=str(job_id), action=action))


def run_to_end(state: State, job_id: int, at: int, exit_code: int = 0, cpu_s: float = 0.0) -> None:
    """Dispatch on n1, start at `at`, end 10 s later."""
    state.ok(log.Entry(dispatch=log.Dispatch(job_id=job_id, host="n1", attempt=0)), at)
    state.ok(log.Entry(report=log.HostReport(host="n1", generation=1, report=api.JobReport(
        job_id=job_id, started=api.JobStarted(pid=7, time_ms=at)))), at)
    state.ok(log.Entry(report=log.HostReport(host="n1", generation=1, report=api.JobReport(
        job_id=job_id, finished=api.JobFinished(exit_code=exit_code, time_ms=at + 10_000,
                                                usage=api.Usage(user_cpu_s=cpu_s))))), at + 10_000)


def live_ids(state: State) -> list[int]:
    return [struct.unpack(">Q", key)[0] for key, _ in state.tables().scan("jobs")]


def history_ids(state: State, **fields: object) -> list[int]:
    request = api.HistoryRequest(**fields)  # type: ignore[arg-type]
    return [j.id for j in history_reads.HistoryListing(request).read(state.tables()).jobs]


def test_a_finished_job_is_in_history_at_once_and_leaves_the_live_table_after_the_clean_period(
        state: State) -> None:
    state.ok(init(), T0)
    state.ok(submit("a", count=2), T0)
    state.ok(control(1, api.KILL), T0 + 1000)            # EXIT at T0 + 1 s
    assert history_ids(state) == [1] and live_ids(state) == [1, 2]
    state.ok(submit("b"), T0 + 1000 + CLEAN - 1)         # not yet
    assert live_ids(state) == [1, 2, 3]
    state.ok(submit("c"), T0 + 1000 + CLEAN)             # the clean period has passed
    assert live_ids(state) == [2, 3, 4]
    event = log.Event.FromString(state.tables().get("events", fsm.revision_key(state.index)) or b"")
    assert any(c.table == "jobs" and c.deleted and c.key == fsm.job_key(1) for c in event.changes)
    # Still found by id (GetJob), from history, as it finished.
    job = reads.get_job(state.tables(), api.GetJobRequest(job_id="1")).job
    assert (job.state, job.exit_code) == (api.EXIT, 137)
    assert history_ids(state) == [1]


def test_format_1_entries_never_clean(state: State) -> None:
    state.ok(init(), T0, format_=1)
    assert fsm.read_meta(state.tables()).clean_period_ms == 0  # not read at format 1
    state.ok(submit("a"), T0, format_=1)
    state.ok(control(1, api.KILL), T0, format_=1)
    state.ok(submit("b"), T0 + 10 * CLEAN, format_=1)
    assert live_ids(state) == [1, 2]
    state.ok(submit("c"), T0 + 10 * CLEAN)                # format 2, default clean period (1 h)
    assert live_ids(state) == [2, 3]


def test_requeue_of_a_cleaned_job_brings_it_back_live_and_out_of_history(state: State) -> None:
    state.ok(init(), T0)
    state.ok(submit("a"), T0)
    state.ok(control(1, api.KILL), T0)
    state.ok(submit("b"), T0 + CLEAN)
    assert live_ids(state) == [2]
    result = state.ok(control(1, api.REQUEUE), T0 + CLEAN + 5)
    assert list(result.job_ids) == [1]
    job = fsm.read_job(state.tables(), 1)
    assert job is not None and (job.state, job.attempt) == (api.PEND, 1)
    assert history_ids(state) == [] and state.tables().get("history", fsm.job_key(1)) is None
    totals = history_reads.accounting(state.tables(), api.AccountingRequest())
    assert list(totals.totals) == []  # its usage was taken back with it
    # Other actions on a cleaned job are refused as on any finished one.
    state.ok(control(1, api.KILL), T0 + CLEAN + 6)
    state.ok(submit("c"), T0 + 3 * CLEAN)
    assert state.step(control(1, api.STOP), T0 + 3 * CLEAN)[0].code == log.FAILED_PRECONDITION


def test_history_is_pruned_after_its_retention_with_its_totals(state: State) -> None:
    state.ok(init(), T0)
    state.ok(submit("a"), T0)
    state.ok(control(1, api.KILL), T0)
    state.ok(submit("b"), T0 + RETENTION - 1)
    assert history_ids(state) == [1]
    state.ok(submit("c"), T0 + RETENTION + HOUR)
    assert history_ids(state) == []
    assert [k for k, _ in state.tables().scan("history_index")] == []
    assert list(history_reads.accounting(state.tables(), api.AccountingRequest()).totals) == []
    assert reads.JobListing(api.ListJobsRequest()).read(state.tables()).jobs[0].id == 2


def test_history_newest_first_with_filters_pages_and_ranges(state: State) -> None:
    state.ok(init(), T0)
    state.ok(submit("a", user="ann", count=3), T0)
    state.ok(submit("b", user="bob", queue="low", count=3), T0)
    for job_id in (1, 4, 2, 5, 3, 6):  # finish in this order, one second apart
        state.ok(control(job_id, api.KILL), T0 + 1000 * job_id)
    assert history_ids(state) == [6, 5, 4, 3, 2, 1]
    assert history_ids(state, user="ann") == [3, 2, 1]
    assert history_ids(state, queue="low") == [6, 5, 4]
    assert history_ids(state, user="ann", queue="low") == []
    assert history_ids(state, since_ms=T0 + 2000, until_ms=T0 + 5000) == [4, 3, 2]
    assert history_ids(state, exit_code=137) == [6, 5, 4, 3, 2, 1]
    assert history_ids(state, exit_code=0) == [] and history_ids(state, states=[api.DONE]) == []
    pages, token = [], ""
    while True:
        page = history_reads.HistoryListing(api.HistoryRequest(page_size=4, page_token=token)).read(
            state.tables())
        pages.append([j.id for j in page.jobs])
        token = page.next_page_token
        if not token:
            break
    assert pages == [[6, 5, 4, 3], [2, 1]]


@pytest.mark.parametrize(("fields", "words"), [
    ({"states": [api.RUN]}, "DONE and EXIT"),
    ({"since_ms": 5, "until_ms": 5}, "since must be before until"),
    ({"since_ms": -1}, "negative"),
    ({"page_token": "x"}, "bad page_token"),
    ({"page_size": -1}, "page_size"),
])
def test_a_bad_history_request_is_invalid(fields: dict[str, object], words: str) -> None:
    with pytest.raises(ServiceError, match=words):
        history_reads.HistoryListing(api.HistoryRequest(**fields))  # type: ignore[arg-type]


def test_accounting_sums_per_user_and_queue_for_whole_hours(state: State) -> None:
    state.ok(init(), T0)
    state.step(log.Entry(join_host=api.HostSpec(name="n1", slots=4)), T0)
    state.ok(submit("a", user="ann", count=2), T0)
    state.ok(submit("b", user="bob", queue="low"), T0)
    run_to_end(state, 1, T0 + 60_000, cpu_s=2.5)      # waited 60 s, ran 10 s
    run_to_end(state, 2, T0 + 120_000, exit_code=3)   # waited 120 s
    state.ok(control(3, api.KILL), T0 + 2 * HOUR)     # never ran
    totals = history_reads.accounting(state.tables(), api.AccountingRequest()).totals
    assert [(t.user, t.queue, t.jobs, t.done, t.exited, t.started) for t in totals] == [
        ("ann", "normal", 2, 1, 1, 2), ("bob", "low", 1, 0, 1, 0)]
    ann = totals[0]
    assert (ann.run_ms, ann.slot_ms, ann.wait_ms, ann.cpu_ms) == (20_000, 20_000, 180_000, 2500)
    early = history_reads.accounting(state.tables(), api.AccountingRequest(until_ms=T0 + HOUR // 2))
    assert [t.user for t in early.totals] == ["ann"]
    assert [t.user for t in history_reads.accounting(state.tables(), api.AccountingRequest(
        user="ann"), only_user="bob").totals] == []
    assert [t.user for t in history_reads.accounting(state.tables(), api.AccountingRequest(),
                                                     only_user="bob").totals] == ["bob"]


def test_filtered_list_reads_through_the_index_and_agrees_with_a_full_scan(state: State) -> None:
    state.ok(init(), T0)
    for n, (user, queue) in enumerate([("ann", "normal"), ("bob", "low"), ("ann", "low")] * 5):
        state.ok(submit(f"r{n}", user=user, queue=queue), T0)
    for job_id in (2, 5, 7):
        state.ok(control(job_id, api.HOLD), T0)
    state.ok(control(3, api.KILL), T0)
    tables = state.tables()
    for filters in (["user:eq:ann"], ["queue:eq:low", "user:eq:bob"], ["state:in:PSUSP,EXIT"],
                    ["state:eq:PEND", "queue:eq:low"], ["user:in:bob,zed"], ["user:ne:ann"]):
        everything = reads.JobListing(api.ListJobsRequest(page_size=1000)).read(tables).jobs
        parsed = reads.JobListing(api.ListJobsRequest(filters=filters)).filters
        expected = [j.id for j in everything if all(f.matches(j) for f in parsed)]
        got, token = [], ""
        while True:
            page = reads.JobListing(api.ListJobsRequest(filters=filters, page_size=2, page_token=token)).read(
                tables)
            got += [j.id for j in page.jobs]
            token = page.next_page_token
            if not token:
                break
        assert got == expected, filters
    # The index really is what is read: a key for a job that does not match is skipped, not shown.
    assert list(job_index.ids(tables, job_index.prefix("user", "bob"))) == [2, 5, 8, 11, 14]


def test_derived_tables_are_rebuilt_from_the_jobs_of_an_older_store(state: State) -> None:
    state.ok(init(), T0)
    state.ok(submit("a", count=3), T0)
    state.ok(control(2, api.KILL), T0)
    tables = MemoryTables()
    for key, value in state.tables().scan("jobs"):
        tables.put("jobs", key, value)
    assert fsm.rebuild_derived(tables) and not fsm.rebuild_derived(tables)
    for table in ("job_index", "history", "history_index", "acct"):
        assert list(tables.scan(table)) == list(state.tables().scan(table)), table


def test_cleaning_is_bounded_per_entry() -> None:
    memory = MemoryTables()
    state = State(lambda: nullcontext(memory), lambda index, data: fsm.apply(memory, index, data))
    state.ok(init(), T0)
    count = history.PER_APPLY + 40
    state.ok(submit("a", count=count), T0)
    for job_id in range(1, count + 1):
        state.ok(control(job_id, api.KILL), T0)
    state.ok(submit("b"), T0 + CLEAN)
    assert len(live_ids(state)) == 40 + 1
    state.ok(submit("c"), T0 + CLEAN)
    assert live_ids(state) == [count + 1, count + 2]
    assert len(history_ids(state, page_size=5000)) == count


def test_a_cleaned_job_is_found_by_apply_only_from_format_2(state: State) -> None:
    state.ok(init(), T0)
    state.ok(submit("a"), T0)
    state.ok(control(1, api.KILL), T0)
    state.ok(submit("b"), T0 + CLEAN)
    assert live_ids(state) == [2]
    # An entry of format 1 (an older replica's view of the world) does not look in history.
    assert state.step(control(1, api.REQUEUE), T0 + CLEAN, format_=1)[0].code == log.NOT_FOUND
    assert state.ok(control(1, api.REQUEUE), T0 + CLEAN).job_ids == [1]


def test_totals_never_go_negative_when_their_hour_was_pruned_before_its_jobs() -> None:
    memory = MemoryTables()
    state = State(lambda: nullcontext(memory), lambda index, data: fsm.apply(memory, index, data))
    state.ok(init(), T0)
    state.ok(submit("a"), T0)
    state.ok(control(1, api.KILL), T0)
    for key, _ in list(memory.scan("acct")):  # as prune does when the hour is past the retention
        memory.delete("acct", key)
    state.ok(submit("b"), T0 + CLEAN)
    state.ok(control(1, api.REQUEUE), T0 + CLEAN)
    assert list(memory.scan("acct")) == []
