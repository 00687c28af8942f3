"""Unit tests of the replicated state machine (controller/fsm/).

Every test runs twice: over the in-memory `MemoryTables` and over a real LMDB
`StateStore` in the test's own directory, since the two must agree. A record
the API cannot reach (a job in RUN, before the worker issue) is written
straight into the tables, as `seed_job` says.
"""

from __future__ import annotations

import datetime
import random
import re
import struct
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from controller import fsm, sync_stream
from controller.fsm import retention, versions
from controller.store import LmdbTables, StateStore
from controller.tables import MemoryTables, Tables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CLUSTER = "demo"
STAMP_MS = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
STAMP_TEXT = "20231114221320"
DAY_MS = 24 * 3600 * 1000

ALL_STATES = (api.PEND, api.PSUSP, api.RUN, api.USUSP, api.SSUSP, api.DONE, api.EXIT, api.UNKWN)

# The job action table of docs/architecture/jobs.md, written out independently of
# fsm._transitions: (action, state) -> state after. Missing: FAILED_PRECONDITION.
EXPECTED_TRANSITIONS: dict[tuple[int, int], int] = {
    (api.KILL, api.PEND): api.EXIT,
    (api.KILL, api.PSUSP): api.EXIT,
    (api.KILL, api.RUN): api.RUN,
    (api.KILL, api.USUSP): api.USUSP,
    (api.KILL, api.SSUSP): api.SSUSP,
    (api.KILL, api.UNKWN): api.UNKWN,
    (api.STOP, api.PEND): api.PSUSP,
    (api.STOP, api.RUN): api.USUSP,
    (api.STOP, api.SSUSP): api.USUSP,
    (api.RESUME, api.USUSP): api.RUN,
    (api.RESUME, api.PSUSP): api.PEND,
    (api.HOLD, api.PEND): api.PSUSP,
    (api.RELEASE, api.PSUSP): api.PEND,
    **{(api.REQUEUE, s): api.PEND for s in (api.DONE, api.EXIT)},
    # a running instance is killed first; the job is pending once it ended (test_unit_hosts)
    **{(api.REQUEUE, s): s for s in (api.RUN, api.USUSP, api.SSUSP, api.UNKWN)},
}
ACTIONS = (api.KILL, api.STOP, api.RESUME, api.HOLD, api.RELEASE, api.REQUEUE)


# ---------------------------------------------------------------- backends


class Backend:
    """One state machine replica for a test: apply, read, seed, dump."""

    def __init__(self) -> None:
        self.index = 0

    def apply(self, index: int, data: bytes,
              handlers: Mapping[str, fsm.Handler] = fsm.HANDLERS) -> list[log.Result] | None:
        raise NotImplementedError

    def read(self) -> Iterator[Tables]:
        raise NotImplementedError

    def write(self) -> Iterator[Tables]:
        raise NotImplementedError

    def dump(self) -> bytes:
        raise NotImplementedError

    def step(self, entry: log.Entry | bytes) -> list[log.Result] | None:
        """Apply at the next index."""
        self.index += 1
        data = entry if isinstance(entry, bytes) else entry.SerializeToString()
        return self.apply(self.index, data)

    def step_with(self, entry: log.Entry, handlers: Mapping[str, fsm.Handler]) -> list[log.Result] | None:
        self.index += 1
        return self.apply(self.index, entry.SerializeToString(), handlers)

    def one(self, entry: log.Entry | bytes) -> log.Result:
        results = self.step(entry)
        assert results is not None and len(results) == 1, results
        return results[0]

    def meta(self) -> log.Meta:
        with self.read() as tables:
            return fsm.read_meta(tables)

    def job(self, job_id: int) -> api.Job | None:
        with self.read() as tables:
            return fsm.read_job(tables, job_id)

    def queue(self, name: str) -> api.Queue | None:
        with self.read() as tables:
            return fsm.read_queue(tables, name)

    def event(self, revision: int) -> log.Event | None:
        with self.read() as tables:
            raw = tables.get("events", fsm.revision_key(revision))
        return None if raw is None else log.Event.FromString(raw)

    def keys(self, table: str) -> list[bytes]:
        with self.read() as tables:
            return [key for key, _ in tables.scan(table)]


class MemoryBackend(Backend):
    def __init__(self) -> None:
        super().__init__()
        self.tables = MemoryTables()

    def apply(self, index: int, data: bytes,
              handlers: Mapping[str, fsm.Handler] = fsm.HANDLERS) -> list[log.Result] | None:
        # One transaction, as the store's: apply to a copy, keep it only if apply returns.
        scratch = self.tables.copy()
        results = fsm.apply(scratch, index, data, handlers)
        self.tables = scratch
        return results

    @contextmanager
    def read(self) -> Iterator[Tables]:
        yield self.tables

    @contextmanager
    def write(self) -> Iterator[Tables]:
        yield self.tables

    def dump(self) -> bytes:
        return b"".join(fsm.canonical_dump(self.tables))


class LmdbBackend(Backend):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.store = StateStore(path, CLUSTER)

    def apply(self, index: int, data: bytes,
              handlers: Mapping[str, fsm.Handler] = fsm.HANDLERS) -> list[log.Result] | None:
        self.store.handlers = handlers
        try:
            return self.store.apply(index, data)
        finally:
            self.store.handlers = fsm.HANDLERS

    def read(self) -> Iterator[Tables]:
        return self.store.read()

    @contextmanager
    def write(self) -> Iterator[Tables]:
        # Test-only seeding of records no API reaches yet: one write
        # transaction on the store's own environment, as StateStore.apply opens.
        with self.store._env.begin(write=True) as txn:
            yield LmdbTables(txn, self.store._dbs)

    def dump(self) -> bytes:
        return self.store.canonical_dump()


@pytest.fixture(params=["memory", "lmdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "memory":
        yield MemoryBackend()
        return
    lmdb_backend = LmdbBackend(tmp_path / "state")
    try:
        yield lmdb_backend
    finally:
        lmdb_backend.store.close()


# ---------------------------------------------------------------- entries


def spec(*command: str, **fields: object) -> api.JobSpec:
    return api.JobSpec(command=list(command or ("sleep", "1")), **fields)


def request(request_id: str, *specs: api.JobSpec) -> api.SubmitJobsRequest:
    return api.SubmitJobsRequest(request_id=request_id, jobs=list(specs or (spec(),)))


def submit(*requests: api.SubmitJobsRequest, stamp_ms: int = STAMP_MS, proposer: int = 1) -> log.Entry:
    return log.Entry(stamp_ms=stamp_ms, proposer=proposer, submit=log.SubmitBatch(requests=requests))


def control(job_id: str | int, action: int, request_id: str = "", stamp_ms: int = STAMP_MS) -> log.Entry:
    return log.Entry(stamp_ms=stamp_ms, proposer=1, control=api.ControlJobRequest(
        job_id=str(job_id), action=action, request_id=request_id))


def modify(job_id: str | int, stamp_ms: int = STAMP_MS, **fields: object) -> log.Entry:
    return log.Entry(stamp_ms=stamp_ms, proposer=1,
                     modify=api.ModifyJobRequest(job_id=str(job_id), **fields))


def put_queue(queue: api.Queue, create: bool, request_id: str = "") -> log.Entry:
    return log.Entry(stamp_ms=STAMP_MS, proposer=1,
                     put_queue=log.PutQueueEntry(queue=queue, create=create, request_id=request_id))


DEFAULT_QUEUES = (api.Queue(name="normal", priority=30), api.Queue(name="low", priority=10),
                  api.Queue(name="shut", priority=5, closed=True))


def init(digest: str = "d1", queues: tuple[api.Queue, ...] = DEFAULT_QUEUES, cluster_id: str = CLUSTER,
         default_queue: str = "normal", max_slots_per_job: int = 0) -> log.Entry:
    return log.Entry(stamp_ms=STAMP_MS, proposer=1, init=log.InitCluster(
        cluster_id=cluster_id, default_queue=default_queue, max_slots_per_job=max_slots_per_job,
        config_digest=digest, queues=queues))


def seed_job(backend: Backend, state: int, job_id: int = 1, **fields: object) -> api.Job:
    """A job record written straight into the tables (states no API reaches yet)."""
    job = api.Job(id=job_id, readable_id=f"{CLUSTER}-1-{STAMP_TEXT}-{job_id}", state=state,
                  spec=api.JobSpec(command=["sleep", "1"], queue="normal", slots=1),
                  submit_time_ms=STAMP_MS - 1000, modify_time_ms=STAMP_MS - 1000, **fields)
    with backend.write() as tables:
        tables.put("jobs", fsm.job_key(job_id), job.SerializeToString(deterministic=True))
    return job


def job_bytes(backend: Backend, job_id: int) -> bytes | None:
    with backend.read() as tables:
        return tables.get("jobs", fsm.job_key(job_id))


def ok(result: log.Result) -> log.Result:
    assert result.code == log.OK, result.message
    return result


# ---------------------------------------------------------------- submit


def test_submit_before_init_cluster_is_rejected_for_lack_of_queues(backend: Backend) -> None:
    result = backend.one(submit(request("r1")))
    assert result.code == log.INVALID_ARGUMENT
    assert "unknown queue 'normal'" in result.message and "none" in result.message
    assert backend.keys("jobs") == []


def test_submit_assigns_dense_ids_across_requests_and_entries(backend: Backend) -> None:
    ok(backend.one(init()))
    first = backend.step(submit(request("a", spec(), spec()), request("b", spec())))
    assert first is not None
    assert [list(r.job_ids) for r in first] == [[1, 2], [3]]
    assert list(ok(backend.one(submit(request("c", spec())))).job_ids) == [4]
    assert backend.keys("jobs") == [fsm.job_key(i) for i in (1, 2, 3, 4)]
    assert backend.meta().next_job_id == 5


def test_submit_fills_defaults_queue_from_init_and_one_slot(backend: Backend) -> None:
    queues = (*DEFAULT_QUEUES, api.Queue(name="batch"))
    ok(backend.one(init(queues=queues, default_queue="batch")))
    ok(backend.one(submit(request("r1", spec("echo", "hi")))))
    job = backend.job(1)
    assert job is not None
    assert job.spec.queue == "batch"
    assert job.spec.HasField("slots") and job.spec.slots == 1
    assert job.state == api.PEND
    assert job.submit_time_ms == job.modify_time_ms == STAMP_MS
    assert job.request_id == "r1"
    assert list(job.spec.command) == ["echo", "hi"]
    assert job.attempt == 0


def test_submit_keeps_explicit_queue_and_slots(backend: Backend) -> None:
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1", spec(queue="low", slots=8, priority=7)))))
    job = backend.job(1)
    assert job is not None
    assert (job.spec.queue, job.spec.slots, job.spec.priority) == ("low", 8, 7)


def test_submit_without_init_default_uses_normal_queue(backend: Backend) -> None:
    ok(backend.one(init(default_queue="")))
    assert backend.meta().default_queue == "normal"
    ok(backend.one(submit(request("r1"))))
    job = backend.job(1)
    assert job is not None and job.spec.queue == "normal"


def test_submit_readable_id_is_cluster_proposer_time_seq(backend: Backend) -> None:
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1", spec(), spec()), proposer=3)))
    for job_id in (1, 2):
        job = backend.job(job_id)
        assert job is not None
        assert job.readable_id == f"{CLUSTER}-3-{STAMP_TEXT}-{job_id}"
        assert re.fullmatch(r"[A-Za-z0-9_.]+-\d+-\d{14}-\d+", job.readable_id)


def test_readable_id_time_is_the_utc_datetime_text_over_the_whole_stamp_range() -> None:
    """The time is formatted from whole seconds with time.gmtime: the text a UTC datetime of the
    stamp gave, which older replicas wrote (negative stamps and single-digit years included)."""
    rng = random.Random(7)
    stamps = [fsm.MIN_STAMP_MS, fsm.MAX_STAMP_MS, 0, -1, -999, -1000, -1001, 1, 999, 1000, 1500, -1500]
    stamps += [rng.randint(fsm.MIN_STAMP_MS, fsm.MAX_STAMP_MS) for _ in range(5000)]
    for stamp in stamps:
        when = datetime.datetime.fromtimestamp(stamp / 1000, tz=datetime.UTC).strftime("%Y%m%d%H%M%S")
        assert fsm.readable_id("c", 2, stamp, 9) == f"c-2-{when}-9", stamp


def test_rejected_submit_is_all_or_nothing_and_consumes_no_ids(backend: Backend) -> None:
    ok(backend.one(init()))
    bad = backend.one(submit(request("r1", spec(), api.JobSpec(command=[]), spec())))
    assert bad.code == log.INVALID_ARGUMENT and "empty command" in bad.message
    assert backend.keys("jobs") == []
    assert list(ok(backend.one(submit(request("r2")))).job_ids) == [1]


def test_submit_batch_rejects_one_request_and_accepts_the_other(backend: Backend) -> None:
    ok(backend.one(init()))
    results = backend.step(submit(request("bad", spec(queue="nope")), request("good")))
    assert results is not None
    assert results[0].code == log.INVALID_ARGUMENT and not results[0].job_ids
    assert results[1].code == log.OK and list(results[1].job_ids) == [1]


@pytest.mark.parametrize(("job_spec", "code", "words"), [
    (api.JobSpec(command=[]), log.INVALID_ARGUMENT, "empty command"),
    (api.JobSpec(command=["  ", "x"]), log.INVALID_ARGUMENT, "empty command"),
    (api.JobSpec(command=["a\x00b"]), log.INVALID_ARGUMENT, "NUL"),
    (api.JobSpec(command=["x"] * (fsm.MAX_COMMAND_ARGS + 1)), log.INVALID_ARGUMENT, "arguments"),
    (api.JobSpec(command=["x"], name="n" * (fsm.MAX_STRING + 1)), log.INVALID_ARGUMENT, "name longer"),
    (api.JobSpec(command=["x"], env={"K": "v\x00"}), log.INVALID_ARGUMENT, "environment value"),
    (api.JobSpec(command=["x"], slots=0), log.INVALID_ARGUMENT, "slots must be between 1 and 4"),
    (api.JobSpec(command=["x"], slots=-3), log.INVALID_ARGUMENT, "slots"),
    (api.JobSpec(command=["x"], slots=5), log.INVALID_ARGUMENT, "got 5"),
    (api.JobSpec(command=["x"], queue="nope"), log.INVALID_ARGUMENT, "unknown queue 'nope'"),
    (api.JobSpec(command=["x"], queue="shut"), log.FAILED_PRECONDITION, "closed"),
], ids=["empty", "blank", "nul", "too-many-args", "long-name", "nul-env", "slots-0",
        "slots-negative", "slots-over-limit", "unknown-queue", "closed-queue"])
def test_submit_validation_rejects_with_code_and_message(
        backend: Backend, job_spec: api.JobSpec, code: int, words: str) -> None:
    ok(backend.one(init(max_slots_per_job=4)))
    result = backend.one(submit(api.SubmitJobsRequest(request_id="r", jobs=[job_spec])))
    assert result.code == code
    assert words in result.message
    assert backend.keys("jobs") == []


def test_submit_with_no_jobs_is_rejected(backend: Backend) -> None:
    ok(backend.one(init()))
    result = backend.one(submit(api.SubmitJobsRequest(request_id="r")))
    assert result.code == log.INVALID_ARGUMENT and "no jobs" in result.message


def test_submit_at_slot_limit_is_accepted(backend: Backend) -> None:
    ok(backend.one(init(max_slots_per_job=4)))
    ok(backend.one(submit(request("r", spec(slots=4)))))


# ---------------------------------------------------------------- dedupe


def test_same_request_id_in_two_entries_creates_jobs_once(backend: Backend) -> None:
    ok(backend.one(init()))
    first = ok(backend.one(submit(request("r1", spec(), spec()))))
    later = backend.one(submit(request("r1", spec("other")), stamp_ms=STAMP_MS + 5000))
    assert later.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)
    assert list(later.job_ids) == [1, 2]
    assert later.revision == 2 and later.stamp_ms == STAMP_MS
    assert backend.keys("jobs") == [fsm.job_key(1), fsm.job_key(2)]
    assert backend.meta().next_job_id == 3
    job = backend.job(1)
    assert job is not None and list(job.spec.command) == ["sleep", "1"]


def test_same_request_id_twice_in_one_entry_returns_the_first_result(backend: Backend) -> None:
    ok(backend.one(init()))
    results = backend.step(submit(request("r1"), request("r1", spec(), spec())))
    assert results is not None
    assert list(results[0].job_ids) == list(results[1].job_ids) == [1]
    assert backend.keys("jobs") == [fsm.job_key(1)]


def test_rejected_request_is_remembered_under_its_id(backend: Backend) -> None:
    ok(backend.one(init()))
    first = backend.one(submit(request("r1", spec(queue="nope"))))
    assert first.code == log.INVALID_ARGUMENT
    again = backend.one(submit(request("r1", spec())))
    assert again.code == log.INVALID_ARGUMENT and again.message == first.message
    assert backend.keys("jobs") == []


def test_retried_control_request_returns_first_result_and_changes_nothing(backend: Backend) -> None:
    seed_job(backend, api.RUN)
    ok(backend.one(control(1, api.KILL, request_id="k1")))
    before = job_bytes(backend, 1)
    again = backend.one(control(1, api.KILL, request_id="k1", stamp_ms=STAMP_MS + 1))
    assert again.code == log.OK and again.revision == 1
    assert job_bytes(backend, 1) == before
    # Without the request id the same kill is refused: it already applies.
    assert backend.one(control(1, api.KILL, request_id="k2")).code == log.FAILED_PRECONDITION


def test_request_id_is_remembered_for_exactly_the_retention_time(backend: Backend) -> None:
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1"))))
    # An entry stamped exactly 24 h later keeps it: a retry is still deduped.
    retry = backend.one(submit(request("r1"), stamp_ms=STAMP_MS + DAY_MS))
    assert list(retry.job_ids) == [1]
    ok(backend.one(submit(request("other"), stamp_ms=STAMP_MS + DAY_MS + 1)))
    with backend.read() as tables:
        assert fsm.read_result(tables, "r1") is None
    assert backend.keys("request_expiry") == [
        struct.pack(">q", STAMP_MS + DAY_MS + 1) + b"other"]
    # Forgotten: the same id now makes a new job.
    assert list(ok(backend.one(submit(request("r1"), stamp_ms=STAMP_MS + DAY_MS + 2))).job_ids) == [3]


# ---------------------------------------------------------------- replay


def test_replayed_index_returns_none_and_changes_nothing(backend: Backend) -> None:
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1"))))
    ok(backend.one(control(1, api.HOLD)))
    dump = backend.dump()
    for index in (3, 2, 1, 0):
        assert backend.apply(index, submit(request(f"new{index}")).SerializeToString()) is None
        assert backend.apply(index, b"\xff\xff") is None
    assert backend.dump() == dump
    assert backend.meta().applied_index == 3


def test_applied_index_follows_the_entry_index_across_gaps(backend: Backend) -> None:
    ok(backend.one(init()))
    backend.index = 10
    ok(backend.one(submit(request("r1"))))
    assert backend.meta().applied_index == 11
    assert backend.apply(7, init().SerializeToString()) is None
    results = backend.apply(12, submit(request("r2")).SerializeToString())
    assert results is not None and results[0].revision == 12


# ---------------------------------------------------------------- control


@pytest.mark.parametrize("state", ALL_STATES, ids=[api.JobState.Name(s) for s in ALL_STATES])
@pytest.mark.parametrize("action", ACTIONS, ids=[api.ControlAction.Name(a) for a in ACTIONS])
def test_control_action_allowed_only_from_its_states(backend: Backend, action: int, state: int) -> None:
    seed_job(backend, state)
    before = job_bytes(backend, 1)
    result = backend.one(control(1, action, stamp_ms=STAMP_MS + 7))
    job = backend.job(1)
    assert job is not None
    expected = EXPECTED_TRANSITIONS.get((action, state))
    if expected is None:
        assert result.code == log.FAILED_PRECONDITION
        assert api.JobState.Name(state) in result.message
        assert api.ControlAction.Name(action).lower() in result.message
        assert job_bytes(backend, 1) == before
        event = backend.event(backend.index)
        assert event is not None and list(event.changes) == []
    else:
        assert result.code == log.OK, result.message
        assert list(result.job_ids) == [1]
        assert job.state == expected
        assert job.modify_time_ms == STAMP_MS + 7


def test_kill_pending_job_exits_it_with_code_137(backend: Backend) -> None:
    seed_job(backend, api.PSUSP, pending_reason="held by user")
    ok(backend.one(control(1, api.KILL, stamp_ms=STAMP_MS + 9)))
    job = backend.job(1)
    assert job is not None
    assert (job.state, job.exit_code, job.end_time_ms) == (api.EXIT, 137, STAMP_MS + 9)
    assert job.pending_reason == ""
    assert not job.kill_requested


def test_kill_running_job_requests_kill_once(backend: Backend) -> None:
    seed_job(backend, api.RUN, start_time_ms=STAMP_MS - 10)
    ok(backend.one(control(1, api.KILL)))
    job = backend.job(1)
    assert job is not None and job.state == api.RUN and job.kill_requested
    assert job.end_time_ms == 0
    again = backend.one(control(1, api.KILL))
    assert again.code == log.FAILED_PRECONDITION


def test_requeue_resets_run_fields_and_counts_the_attempt(backend: Backend) -> None:
    seed_job(backend, api.EXIT, exit_code=3, start_time_ms=STAMP_MS - 50, end_time_ms=STAMP_MS - 5,
             attempt=2, kill_requested=True)
    ok(backend.one(control(1, api.REQUEUE)))
    job = backend.job(1)
    assert job is not None
    assert job.state == api.PEND and job.attempt == 3
    assert (job.exit_code, job.start_time_ms, job.end_time_ms) == (0, 0, 0)
    assert not job.kill_requested
    assert job.pending_reason == "requeued"


@pytest.mark.parametrize(("state", "action", "reason", "code"), [
    (api.PEND, api.STOP, "stopped by user", api.PEND_JOB_HELD),
    (api.PEND, api.HOLD, "held by user", api.PEND_JOB_HELD),
    (api.PSUSP, api.RELEASE, "", api.PENDING_REASON_UNSPECIFIED),
    (api.PSUSP, api.RESUME, "", api.PENDING_REASON_UNSPECIFIED),
    (api.RUN, api.STOP, "", api.PENDING_REASON_UNSPECIFIED),
    (api.EXIT, api.REQUEUE, "requeued", api.PEND_REQUEUED),
    (api.RUN, api.REQUEUE, "", api.PENDING_REASON_UNSPECIFIED),  # not pending until its instance ended
])
def test_control_sets_pending_reason_only_while_pending(
        backend: Backend, state: int, action: int, reason: str, code: int) -> None:
    seed_job(backend, state, pending_reason="old reason", pending_code=api.PEND_NO_FREE_SLOTS)
    ok(backend.one(control(1, action)))
    job = backend.job(1)
    assert job is not None and (job.pending_reason, job.pending_code) == (reason, code)


@pytest.mark.parametrize("action", [api.CONTROL_ACTION_UNSPECIFIED, 42])
def test_control_unknown_action_is_invalid_argument(backend: Backend, action: int) -> None:
    seed_job(backend, api.PEND)
    result = backend.one(control(1, action))
    assert result.code == log.INVALID_ARGUMENT and "unknown control action" in result.message


def test_control_by_readable_id(backend: Backend) -> None:
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1"), proposer=2)))
    readable = f"{CLUSTER}-2-{STAMP_TEXT}-1"
    assert ok(backend.one(control(f"  {readable} ", api.HOLD))).job_ids == [1]
    job = backend.job(1)
    assert job is not None and job.state == api.PSUSP


@pytest.mark.parametrize(("job_id", "code"), [
    ("2", log.NOT_FOUND),
    ("0", log.NOT_FOUND),
    (f"{CLUSTER}-1-{STAMP_TEXT}-1", log.NOT_FOUND),    # right seq, wrong proposer
    (f"other-2-{STAMP_TEXT}-1", log.NOT_FOUND),
    ("abc", log.INVALID_ARGUMENT),
    ("", log.INVALID_ARGUMENT),
    ("1-x", log.INVALID_ARGUMENT),
])
def test_control_unknown_or_malformed_job_id(backend: Backend, job_id: str, code: int) -> None:
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1"), proposer=2)))
    before = job_bytes(backend, 1)
    result = backend.one(control(job_id, api.HOLD))
    assert result.code == code, result.message
    assert job_bytes(backend, 1) == before


@pytest.mark.parametrize("job_id", ["18446744073709551616", "99999999999999999999999", "\u00b2",
                                    "x-\u00b2"],
                         ids=["2**64", "huge", "superscript-two", "readable-superscript"])
def test_control_with_unrepresentable_job_id_is_rejected_not_raised(backend: Backend, job_id: str) -> None:
    # Apply must never raise on bad input (pysyncobj would stop the replica);
    # str.isdigit() accepts '²' which int() refuses, and ids past 2**64-1 do
    # not fit job_key's 8 bytes.
    seed_job(backend, api.PEND)
    result = backend.one(control(job_id, api.HOLD))
    assert result.code in (log.INVALID_ARGUMENT, log.NOT_FOUND)
    assert backend.meta().applied_index == 1


# ---------------------------------------------------------------- modify


def test_modify_with_nothing_to_change_is_invalid(backend: Backend) -> None:
    seed_job(backend, api.PEND)
    result = backend.one(modify(1))
    assert result.code == log.INVALID_ARGUMENT and "nothing to modify" in result.message


@pytest.mark.parametrize("state", [api.DONE, api.EXIT])
def test_modify_finished_job_is_refused(backend: Backend, state: int) -> None:
    seed_job(backend, state)
    before = job_bytes(backend, 1)
    result = backend.one(modify(1, priority=5))
    assert result.code == log.FAILED_PRECONDITION and "finished" in result.message
    assert job_bytes(backend, 1) == before


@pytest.mark.parametrize("state", [api.RUN, api.USUSP, api.SSUSP, api.UNKWN, api.PEND, api.PSUSP])
def test_modify_priority_in_any_unfinished_state(backend: Backend, state: int) -> None:
    seed_job(backend, state)
    ok(backend.one(modify(1, stamp_ms=STAMP_MS + 3, priority=-4)))
    job = backend.job(1)
    assert job is not None
    assert job.spec.priority == -4 and job.state == state
    assert job.modify_time_ms == STAMP_MS + 3
    assert job.spec.queue == "normal"


@pytest.mark.parametrize("field", ["queue", "resource_req"])
@pytest.mark.parametrize("state", [api.RUN, api.USUSP, api.SSUSP, api.UNKWN])
def test_modify_queue_or_requirement_refused_unless_pending(backend: Backend, state: int, field: str) -> None:
    ok(backend.one(init()))
    seed_job(backend, state)
    before = job_bytes(backend, 1)
    result = backend.one(modify(1, **{field: "low"}))
    assert result.code == log.FAILED_PRECONDITION and "pending" in result.message
    assert job_bytes(backend, 1) == before


@pytest.mark.parametrize("state", [api.PEND, api.PSUSP])
def test_modify_queue_and_requirement_while_pending(backend: Backend, state: int) -> None:
    ok(backend.one(init()))
    seed_job(backend, state)
    ok(backend.one(modify(1, queue="low", resource_req="rusage[mem=10]", priority=2)))
    job = backend.job(1)
    assert job is not None
    assert (job.spec.queue, job.spec.resource_req, job.spec.priority) == ("low", "rusage[mem=10]", 2)


@pytest.mark.parametrize(("queue", "code", "words"), [
    ("nope", log.INVALID_ARGUMENT, "unknown queue"),
    ("shut", log.FAILED_PRECONDITION, "closed"),
    ("x\x00", log.INVALID_ARGUMENT, "NUL"),
])
def test_modify_to_unusable_queue_is_refused(backend: Backend, queue: str, code: int, words: str) -> None:
    ok(backend.one(init()))
    seed_job(backend, api.PEND)
    result = backend.one(modify(1, queue=queue))
    assert result.code == code and words in result.message


def test_modify_to_empty_queue_name_is_rejected_not_raised(backend: Backend) -> None:
    # An empty queue name is a present-but-empty optional field. Over LMDB the
    # lookup of the empty key raises MDB_BAD_VALSIZE instead of a Result.
    ok(backend.one(init()))
    seed_job(backend, api.PEND)
    result = backend.one(modify(1, queue=""))
    assert result.code == log.INVALID_ARGUMENT
    assert backend.meta().applied_index == 2


# ---------------------------------------------------------------- queues


def test_put_queue_create_and_update_rules(backend: Backend) -> None:
    gpu = api.Queue(name="gpu", priority=50, description="cards")
    ok(backend.one(put_queue(gpu, create=True)))
    assert backend.queue("gpu") == gpu
    assert backend.one(put_queue(gpu, create=True)).code == log.ALREADY_EXISTS
    assert backend.one(put_queue(api.Queue(name="cpu"), create=False)).code == log.NOT_FOUND
    closed = api.Queue(name="gpu", priority=50, closed=True)
    ok(backend.one(put_queue(closed, create=False)))
    assert backend.queue("gpu") == closed
    assert backend.queue("cpu") is None


@pytest.mark.parametrize("name", ["", "has space", "slash/", "q" * 65, "tab\t"])
def test_put_queue_bad_name_is_invalid(backend: Backend, name: str) -> None:
    result = backend.one(put_queue(api.Queue(name=name), create=True))
    assert result.code == log.INVALID_ARGUMENT and "bad queue name" in result.message
    assert backend.keys("queues") == []


def test_put_queue_negative_slot_limit_is_invalid_and_stores_nothing(backend: Backend) -> None:
    result = backend.one(put_queue(api.Queue(name="gpu", slot_limit=-1), create=True))
    assert result.code == log.INVALID_ARGUMENT and "slot_limit" in result.message
    assert backend.keys("queues") == []


@pytest.mark.parametrize("announce", [
    log.Announce(replica_id=0, kinds=["submit"], format=1),
    log.Announce(replica_id=1, kinds=["k" * 65], format=1),
    log.Announce(replica_id=1, kinds=[f"k{i}" for i in range(300)], format=1),
], ids=["no-replica", "long-kind", "too-many"])
def test_a_bad_announcement_is_rejected_and_changes_nothing(backend: Backend, announce: log.Announce) -> None:
    ok(backend.one(init()))
    result = backend.one(log.Entry(stamp_ms=STAMP_MS, announce=announce))
    assert result.code == log.INVALID_ARGUMENT
    assert not backend.meta().members


def test_put_queue_same_definition_records_no_change(backend: Backend) -> None:
    gpu = api.Queue(name="gpu", priority=50)
    ok(backend.one(put_queue(gpu, create=True)))
    ok(backend.one(put_queue(gpu, create=False)))
    event = backend.event(backend.index)
    assert event is not None and list(event.changes) == []


# ---------------------------------------------------------------- bad entries


@pytest.mark.parametrize(("data", "kind", "words"), [
    (b"\xff\xff\xff\xff", "undecodable", "undecodable"),
    (b"\x0a\x05ab", "undecodable", "undecodable"),  # a field longer than the data
    (b"", "none", "no handler"),
    (log.Entry(stamp_ms=STAMP_MS, proposer=1).SerializeToString(), "none", "no handler"),
    (b"\x98\x06\x01", "unknown (field 99)", "no handler"),  # a body type from a newer build
    (log.Entry(stamp_ms=STAMP_MS, format=fsm.ENTRY_FORMAT + 1,
               lease=log.LeaseEntry(scheduler_id="s", duration_ms=1)).SerializeToString(),
     "lease", "is newer than this code's"),
], ids=["garbage", "truncated", "empty", "no-body", "unknown-body", "newer-format"])
def test_an_entry_this_code_cannot_apply_stops_apply_and_changes_nothing(
        backend: Backend, data: bytes, kind: str, words: str) -> None:
    ok(backend.one(init()))
    before = backend.dump()
    with pytest.raises(fsm.EntryNotUnderstood, match=words) as raised:
        backend.step(data)
    assert (raised.value.index, raised.value.kind) == (2, kind)
    assert backend.meta().applied_index == 1  # nothing applied: the driver stops the replica here
    assert backend.dump() == before


def test_a_bug_inside_a_handler_raises_and_writes_nothing(backend: Backend) -> None:
    ok(backend.one(init()))
    before = backend.dump()

    def broken(applier: fsm.Applier) -> list[log.Result]:
        applier.put_job(api.Job(id=99))  # a write before the bug: must not survive
        raise RuntimeError("a bug")

    handlers = {**fsm.HANDLERS, "submit": broken}
    with pytest.raises(RuntimeError, match="a bug"):
        backend.step_with(submit(request("r1")), handlers)
    assert backend.dump() == before and backend.meta().applied_index == 1


def test_slot_accounting_that_would_go_negative_is_a_broken_invariant(backend: Backend) -> None:
    ok(backend.one(init()))
    ok(backend.one(log.Entry(stamp_ms=STAMP_MS, join_host=api.HostSpec(name="n1", slots=2))))
    ok(backend.one(submit(request("r1"))))
    ok(backend.one(log.Entry(stamp_ms=STAMP_MS, dispatch=log.Dispatch(job_id=1, host="n1", attempt=0))))
    with backend.write() as tables:  # a bug elsewhere left the host with fewer slots in use
        host = fsm.read_host(tables, "n1")
        assert host is not None
        host.slots_used = 0
        tables.put("hosts", b"n1", host.SerializeToString())
    before = backend.dump()
    finished = log.HostReport(host="n1", generation=1, report=api.JobReport(
        job_id=1, attempt=0, finished=api.JobFinished(exit_code=0)))
    with pytest.raises(AssertionError, match="gives back 1 slots on n1"):
        backend.step(log.Entry(stamp_ms=STAMP_MS, report=finished))
    assert backend.dump() == before


# ---------------------------------------------------------------- events


def test_every_applied_entry_has_one_event_with_its_changes(backend: Backend) -> None:
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1", spec(), spec()))))
    submitted = [job_bytes(backend, 1), job_bytes(backend, 2)]
    ok(backend.one(control(2, api.HOLD)))
    backend.one(control(2, api.RESUME + 100))
    backend.step(submit(request("r9"), stamp_ms=fsm.MAX_STAMP_MS + 1))  # rejected as a whole
    assert backend.keys("events") == [fsm.revision_key(i) for i in range(1, 6)]

    init_event = backend.event(1)
    assert init_event is not None and init_event.revision == 1
    assert {(c.table, c.key) for c in init_event.changes} == {
        ("queues", q.name.encode()) for q in DEFAULT_QUEUES}

    submit_event = backend.event(2)
    assert submit_event is not None and submit_event.revision == 2
    assert [(c.table, c.key, c.value) for c in submit_event.changes] == [
        ("jobs", fsm.job_key(1), submitted[0]), ("jobs", fsm.job_key(2), submitted[1])]
    assert not submit_event.HasField("rejected") and submit_event.kind == "submit"

    control_event = backend.event(3)
    assert control_event is not None
    assert [(c.table, c.key, c.value) for c in control_event.changes] == [
        ("jobs", fsm.job_key(2), job_bytes(backend, 2))]

    refused_event = backend.event(4)
    assert refused_event is not None and list(refused_event.changes) == []
    whole = backend.event(5)
    assert whole is not None and whole.HasField("rejected") and whole.rejected.code == log.INVALID_ARGUMENT
    assert list(whole.changes) == []
    assert backend.meta().events_floor == 0  # none dropped


def test_replay_adds_no_event(backend: Backend) -> None:
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1"))))
    assert backend.apply(2, submit(request("r2")).SerializeToString()) is None
    assert backend.keys("events") == [fsm.revision_key(1), fsm.revision_key(2)]


def test_events_older_than_the_window_are_pruned(backend: Backend) -> None:
    ok(backend.one(init()))
    backend.index = fsm.EVENTS_KEPT
    ok(backend.one(submit(request("r1"))))
    # Index EVENTS_KEPT + 1 keeps revisions > 1: revision 1's event is dropped.
    assert backend.keys("events") == [fsm.revision_key(fsm.EVENTS_KEPT + 1)]
    assert backend.meta().events_floor == 2


def test_the_events_floor_passes_over_revisions_without_events(backend: Backend) -> None:
    """Revisions 3..EVENTS_KEPT + 1 have no event (Raft no-ops, as at each election). Once
    the events of 1 and 2 are dropped, a watcher at revision 2 has lost nothing and resumes;
    one at 1 lost 2's and resyncs. (Trace validation found the floor set at the oldest
    event kept, past the no-ops, which sent the first to a full snapshot too.)"""
    ok(backend.one(init()))
    ok(backend.one(submit(request("r1"))))
    backend.index = fsm.EVENTS_KEPT + 1
    ok(backend.one(submit(request("r2"))))
    meta = backend.meta()
    assert meta.events_floor == 3
    assert sync_stream.events_available(meta, 2) and not sync_stream.events_available(meta, 1)
    with backend.read() as tables:
        feed = sync_stream.SyncFeed(log.SyncRequest(from_revision=2, cluster_id=CLUSTER), CLUSTER)
        assert feed.opening(tables) == []
        messages, _, _ = feed.next(tables)
    assert [m.event.revision for m in messages] == [fsm.EVENTS_KEPT + 2]


def test_events_past_the_byte_bound_are_pruned_oldest_first(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    ok(backend.one(init()))
    for i in range(6):
        ok(backend.one(submit(request(f"r{i}", spec("sleep", "1", name="x" * 200)))))
    sizes = {}
    with backend.read() as tables:
        for key, value in tables.scan("events"):
            sizes[key] = len(value)
    assert backend.meta().events_bytes == sum(sizes.values())
    # Room for about three events: the next apply drops the oldest ones.
    monkeypatch.setattr(retention, "EVENTS_MAX_BYTES", 3 * max(sizes.values()))
    ok(backend.one(submit(request("last", spec("true")))))
    kept = backend.keys("events")
    assert kept[-1] == fsm.revision_key(backend.index)
    assert len(kept) <= 4 and kept == sorted(kept)
    meta = backend.meta()
    with backend.read() as tables:
        assert meta.events_bytes == sum(len(v) for _, v in tables.scan("events"))
    assert meta.events_bytes <= fsm.EVENTS_MAX_BYTES
    dropped = [revision for revision in range(1, backend.index + 1) if fsm.revision_key(revision) not in kept]
    assert meta.events_floor == max(dropped) + 1  # the newest dropped + 1


def test_event_pruning_is_bounded_per_apply() -> None:
    backend = MemoryBackend()
    rejected = submit(request("x"), stamp_ms=fsm.MAX_STAMP_MS + 1)  # an entry that changes nothing
    for _ in range(fsm.PRUNE_PER_APPLY + 50):
        backend.step(rejected)
    backend.index = 10 * fsm.EVENTS_KEPT
    backend.step(rejected)
    remaining = backend.keys("events")
    assert len(remaining) == 50 + 1
    assert remaining[0] == fsm.revision_key(fsm.PRUNE_PER_APPLY + 1)
    assert backend.meta().events_floor == fsm.PRUNE_PER_APPLY + 1


# ---------------------------------------------------------------- no clock


def test_apply_never_reads_clock_or_randomness(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> object:
        raise AssertionError("apply read the clock or randomness")

    class NoNowDatetime(datetime.datetime):
        now = classmethod(forbidden)
        utcnow = classmethod(forbidden)
        today = classmethod(forbidden)

    class NoTodayDate(datetime.date):
        today = classmethod(forbidden)

    for name in ("time", "time_ns", "monotonic", "monotonic_ns", "localtime", "gmtime", "ctime"):
        monkeypatch.setattr(time, name, forbidden)
    monkeypatch.setattr(datetime, "datetime", NoNowDatetime)
    monkeypatch.setattr(datetime, "date", NoTodayDate)
    for name in ("random", "getrandbits", "randint", "choice"):
        monkeypatch.setattr(random, name, forbidden)
    monkeypatch.setattr(uuid, "uuid4", forbidden)

    ok(backend.one(init()))
    ok(backend.one(submit(request("r1", spec(), spec()))))
    ok(backend.one(control(1, api.HOLD, request_id="c1")))
    ok(backend.one(modify(2, priority=3)))
    ok(backend.one(put_queue(api.Queue(name="gpu"), create=True)))
    backend.step(submit(request("r2"), stamp_ms=fsm.MAX_STAMP_MS + 1))
    with pytest.raises(fsm.EntryNotUnderstood):
        backend.step(b"\xff")
    monkeypatch.undo()
    job = backend.job(1)
    assert job is not None and job.readable_id == f"{CLUSTER}-1-{STAMP_TEXT}-1"


# ---------------------------------------------------------------- config push


def test_init_sets_cluster_identity_and_limits(backend: Backend) -> None:
    ok(backend.one(init(max_slots_per_job=16, default_queue="low")))
    meta = backend.meta()
    assert (meta.cluster_id, meta.default_queue, meta.max_slots_per_job, meta.config_digest) == (
        CLUSTER, "low", 16, "d1")
    assert [backend.queue(q.name) for q in DEFAULT_QUEUES] == list(DEFAULT_QUEUES)


def test_init_of_another_cluster_is_refused_and_changes_nothing(backend: Backend) -> None:
    ok(backend.one(init()))
    dump_meta = backend.meta()
    result = backend.one(init(cluster_id="other", digest="d9", queues=(api.Queue(name="x"),)))
    assert result.code == log.FAILED_PRECONDITION and "other" in result.message
    meta = backend.meta()
    assert (meta.cluster_id, meta.config_digest) == (dump_meta.cluster_id, dump_meta.config_digest)
    assert backend.queue("x") is None


def test_init_with_a_bad_queue_writes_no_queue(backend: Backend) -> None:
    result = backend.one(init(queues=(api.Queue(name="fine"), api.Queue(name="not fine"))))
    assert result.code == log.INVALID_ARGUMENT
    assert backend.keys("queues") == []
    assert backend.meta().cluster_id == ""


def test_config_push_same_digest_keeps_operator_queue_updates(backend: Backend) -> None:
    ok(backend.one(init(digest="d1")))
    updated = api.Queue(name="normal", priority=99, description="by the operator")
    ok(backend.one(put_queue(updated, create=False)))
    ok(backend.one(init(digest="d1")))
    assert backend.queue("normal") == updated
    event = backend.event(backend.index)
    assert event is not None and list(event.changes) == []


def test_config_push_same_digest_does_not_rewrite_queues(backend: Backend) -> None:
    ok(backend.one(init(digest="d1")))
    ok(backend.one(put_queue(api.Queue(name="low", priority=10), create=False)))
    # Same digest but other queue content: a restart must not rewrite queues.
    ok(backend.one(init(digest="d1", queues=(api.Queue(name="normal", priority=1),
                                             api.Queue(name="new")))))
    assert backend.queue("normal") == DEFAULT_QUEUES[0]
    assert backend.queue("new") is None


def test_config_push_new_digest_overwrites_queues(backend: Backend) -> None:
    ok(backend.one(init(digest="d1")))
    ok(backend.one(put_queue(api.Queue(name="normal", priority=99), create=False)))
    ok(backend.one(put_queue(api.Queue(name="extra"), create=True)))
    edited = (api.Queue(name="normal", priority=30), api.Queue(name="gpu", priority=70))
    ok(backend.one(init(digest="d2", queues=edited, max_slots_per_job=8)))
    assert backend.queue("normal") == edited[0]
    assert backend.queue("gpu") == edited[1]
    assert backend.queue("extra") == api.Queue(name="extra")  # not in the file: kept
    meta = backend.meta()
    assert (meta.config_digest, meta.max_slots_per_job) == ("d2", 8)
    event = backend.event(backend.index)
    assert event is not None
    assert sorted(c.key for c in event.changes) == [b"gpu", b"normal"]


# ---------------------------------------------------------------- crash inputs


@pytest.mark.parametrize("length", [503, 504, 600], ids=["503", "504", "600"])
def test_long_request_id_is_applied_or_rejected_not_raised(backend: Backend, length: int) -> None:
    # The request id becomes an LMDB key in `requests` and, behind 8 bytes of
    # stamp, in `request_expiry`; LMDB keys are at most 511 bytes. Nothing
    # limits the id's length before it reaches the log.
    ok(backend.one(init()))
    results = backend.step(submit(request("r" * length)))
    assert results is not None and len(results) == 1
    assert backend.meta().applied_index == 2


@pytest.mark.parametrize("stamp_ms", [253_402_300_800_000, -62_135_596_800_001, 2**62],
                         ids=["year-10000", "year-0", "2**62"])
def test_submit_with_out_of_range_stamp_is_rejected_not_raised(backend: Backend, stamp_ms: int) -> None:
    # fsm.readable_id formats stamp_ms through datetime, which refuses years
    # outside 1..9999; apply must still not raise.
    ok(backend.one(init()))
    results = backend.step(submit(request("r1"), stamp_ms=stamp_ms))
    assert results is not None and len(results) == 1
    assert backend.meta().applied_index == 2


@pytest.mark.parametrize("spec", ["nonsense", "raise-on-entry=nokind", "lacks-entry=",
                                  "requeue-on-success=x"])
def test_an_unknown_fault_is_refused_at_start(spec: str) -> None:
    from controller import faults

    with pytest.raises(faults.FaultError, match="unknown XCE_FAULT"):
        faults.handlers(spec)
    assert faults.handlers("") == fsm.HANDLERS
    assert "modify" not in faults.handlers("lacks-entry=modify")


@pytest.mark.parametrize("text", ["select[mem>]", "span[hosts=2]", "rusage[mem=1:mem=2]"])
def test_a_bad_resource_requirement_is_refused_from_format_5_with_its_column(
        backend: Backend, text: str) -> None:
    ok(backend.one(init()))
    entry = submit(request("r1", spec(resource_req=text)))
    entry.format = fsm.ENTRY_FORMAT
    result = backend.one(entry)
    assert result.code == log.INVALID_ARGUMENT and "column " in result.message and text in result.message
    assert backend.job(1) is None and backend.meta().next_job_id in (0, 1)
    older = submit(request("r2", spec(resource_req=text)))  # format 4 and before: stored verbatim
    older.format = 4
    ok(backend.one(older))
    job = backend.job(1)
    assert job is not None and job.spec.resource_req == text


def test_a_modify_with_a_bad_resource_requirement_changes_nothing(backend: Backend) -> None:
    ok(backend.one(init()))
    seed_job(backend, api.PEND)
    before = job_bytes(backend, 1)
    entry = modify(1, resource_req="select[gpu >")
    entry.format = fsm.ENTRY_FORMAT
    result = backend.one(entry)
    assert result.code == log.INVALID_ARGUMENT and "column 13" in result.message
    assert job_bytes(backend, 1) == before
    good = modify(1, resource_req="select[gpu > 1] rusage[gpu=1]")
    good.format = fsm.ENTRY_FORMAT
    ok(backend.one(good))
    job = backend.job(1)
    assert job is not None and job.spec.resource_req == "select[gpu > 1] rusage[gpu=1]"


def test_a_job_script_or_environment_variable_may_be_as_long_as_exec_takes_from_format_20(
        backend: Backend) -> None:
    """bsub < script passes the script as one argument, and copies the submitter's environment: from
    ARG_FORMAT each may be as long as exec takes one; before, 4096 characters as every text."""
    ok(backend.one(init()))
    script = "echo " + "x" * 100_000
    entry = submit(request("r1", spec("/bin/sh", "-c", script, env={"BIG": "y" * 100_000})))
    entry.format = versions.ARG_FORMAT
    ok(backend.one(entry))
    job = backend.job(1)
    assert job is not None and job.spec.command[2] == script and len(job.spec.env["BIG"]) == 100_000
    for fields in ({"command": ["sh", "-c", "x" * 131_072]},
                   {"command": ["true"], "env": {"BIG": "y" * 131_068}},  # BIG= and the value: 131,072
                   {"command": ["true"], "env": {"K": "a\x00b"}}):
        over = submit(request(f"r{len(fields)}-{len(str(fields))}", api.JobSpec(**fields)))
        over.format = versions.ARG_FORMAT
        result = backend.one(over)
        assert result.code == log.INVALID_ARGUMENT and ("131071 bytes" in result.message or "NUL" in
                                                        result.message), result.message
    older = submit(request("r9", spec("/bin/sh", "-c", script)))
    older.format = versions.ARG_FORMAT - 1
    result = backend.one(older)
    assert result.code == log.INVALID_ARGUMENT and "longer than 4096" in result.message
    assert backend.meta().next_job_id == 2
