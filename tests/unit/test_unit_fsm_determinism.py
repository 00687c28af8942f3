"""Property: applying is deterministic and idempotent, in memory and in LMDB.

Any sequence of entries (every body type, undecodable bytes, no body, job ids
that exist and that do not, random stamps, repeated and skipped indexes)
applied to a fresh `MemoryTables` and to a fresh LMDB `StateStore` yields the
same results and byte-identical canonical dumps (an entry the code cannot
apply stops both alike, writing nothing); applying the sequence again at the
same indexes returns None everywhere and changes nothing. `apply_entry` (the
simulator's, given each decodable entry as a message) does the same, and
hands back the event the events table holds.

The inputs that once broke apply (request ids longer than LMDB's key
limit, non-ASCII digits and 64-bit overflows in job ids, stamps outside
datetime's years) are among the generated ones.
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import fsm
from controller.fsm.versions import ENTRY_FORMAT
from controller.store import IDENTITY_KEY, StateStore
from controller.tables import MemoryTables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CLUSTER = "demo"
STAMP_MS = 1_700_000_000_000
DAY_MS = 24 * 3600 * 1000

QUEUE_NAMES = ("normal", "low", "shut", "gpu", "nope")
BAD_QUEUE_NAMES = ("", "bad name", "x/y")
REQUEST_IDS = ("", "", "r1", "r2", "r3", "k" * 40, "q" * 600)

stamps = st.one_of(
    st.integers(STAMP_MS - DAY_MS, STAMP_MS + 3 * DAY_MS),
    st.sampled_from([STAMP_MS, STAMP_MS + DAY_MS, STAMP_MS + DAY_MS + 1]),
    st.integers(-(10**12), 4 * 10**12),
    st.sampled_from([fsm.MAX_STAMP_MS + 1, -(2**62)]),
)
request_ids = st.sampled_from(REQUEST_IDS)
job_ids = st.one_of(
    st.integers(0, 6).map(str),
    st.sampled_from(["", "abc", "x-1", " 2 ", "1-x", "\u00b2", str(2**64), "1-" + str(2**70),
                     f"{CLUSTER}-1-20231114221320-1",
                     f"{CLUSTER}-2-20231114221320-2", "other-1-20231114221320-1"]),
)
good_queues = st.builds(
    api.Queue,
    name=st.sampled_from(QUEUE_NAMES),
    priority=st.integers(-3, 100),
    description=st.sampled_from(["", "d"]),
    closed=st.sampled_from([False, False, False, True]),
)
bad_queues = st.builds(
    api.Queue,
    name=st.sampled_from(BAD_QUEUE_NAMES) | st.sampled_from(QUEUE_NAMES),
    description=st.sampled_from(["nul\x00", "x" * 4097, ""]),
)


@st.composite
def queues(draw: st.DrawFn) -> api.Queue:
    """Mostly valid queues, one in ten not."""
    return draw(bad_queues if draw(st.integers(0, 9)) == 0 else good_queues)


COMMANDS = [["sleep", "1"]] * 6 + [["echo", "a", "b"], [], [""], [" ", "x"], ["a\x00"]]


@st.composite
def specs(draw: st.DrawFn) -> api.JobSpec:
    """Mostly valid job specs, sometimes not."""
    job_spec = api.JobSpec(
        command=draw(st.sampled_from(COMMANDS)),
        name=draw(st.sampled_from(["", "n", "job-1"]) | st.text(max_size=4)),
        queue=draw(st.sampled_from(("", "", "normal") + QUEUE_NAMES)),
        priority=draw(st.integers(-5, 5)),
        env=draw(st.dictionaries(st.sampled_from(["A", "B", "C"]), st.sampled_from(["1", "x"]),
                                 max_size=3)),
        resource_req=draw(st.sampled_from(["", "mem>1"])),
    )
    slots = draw(st.sampled_from([None, None, None, -1, 0, 1, 2, 6]))
    if slots is not None:
        job_spec.slots = slots
    return job_spec


@st.composite
def submit_requests(draw: st.DrawFn) -> api.SubmitJobsRequest:
    empty = draw(st.integers(0, 5)) == 0
    return api.SubmitJobsRequest(request_id=draw(request_ids),
                                 jobs=[] if empty else draw(st.lists(specs(), min_size=1, max_size=3)))


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, object]:
    kind = draw(st.sampled_from(["submit", "control", "modify", "put_queue", "init", "join_host",
                                 "host_status", "dispatch", "report", "reports", "resolve_host",
                                 "lease", "decisions", "joins"]))
    return {kind: BODIES[kind](draw)}


def _submit(draw: st.DrawFn) -> log.SubmitBatch:
    return log.SubmitBatch(requests=draw(st.lists(submit_requests(), min_size=1, max_size=3)))


def _control(draw: st.DrawFn) -> api.ControlJobRequest:
    return api.ControlJobRequest(job_id=draw(job_ids), action=draw(st.integers(0, 7)),
                                 request_id=draw(request_ids))


def _modify(draw: st.DrawFn) -> api.ModifyJobRequest:
    modify = api.ModifyJobRequest(job_id=draw(job_ids), request_id=draw(request_ids))
    if draw(st.booleans()):
        modify.priority = draw(st.integers(-5, 5))
    if draw(st.booleans()):
        modify.queue = draw(st.sampled_from((*QUEUE_NAMES, "")))
    if draw(st.booleans()):
        modify.resource_req = draw(st.sampled_from(["", "mem>2", "nul\x00"]))
    return modify


def _put_queue(draw: st.DrawFn) -> log.PutQueueEntry:
    return log.PutQueueEntry(queue=draw(queues()), create=draw(st.booleans()), request_id=draw(request_ids))


def _join_host(draw: st.DrawFn) -> api.HostSpec:
    return api.HostSpec(name=draw(HOST_NAMES), slots=draw(st.integers(-1, 4)),
                        memory_mb=draw(st.integers(-1, 4096)))


def _host_status(draw: st.DrawFn) -> log.SetHostStatus:
    return log.SetHostStatus(name=draw(HOST_NAMES), generation=draw(st.integers(0, 3)),
                             status=draw(st.integers(0, 3)))


def _dispatch(draw: st.DrawFn) -> log.Dispatch:
    return log.Dispatch(job_id=draw(st.integers(0, 6)), host=draw(HOST_NAMES),
                        attempt=draw(st.integers(0, 2)), request_id=draw(request_ids))


def _reports(draw: st.DrawFn) -> log.HostReports:
    return log.HostReports(reports=draw(st.lists(host_reports(), max_size=3)))


def _joins(draw: st.DrawFn) -> log.HostJoins:
    specs = [api.HostSpec(name=draw(HOST_NAMES), slots=draw(st.integers(-1, 4)))
             for _ in range(draw(st.integers(0, 3)))]
    return log.HostJoins(joins=specs)


def _lease(draw: st.DrawFn) -> log.LeaseEntry:
    return log.LeaseEntry(scheduler_id=draw(st.sampled_from(["s1", "s2", ""])),
                          duration_ms=draw(st.sampled_from([0, 10, 100_000])))


def _decisions(draw: st.DrawFn) -> api.DecisionBatch:
    batch = api.DecisionBatch(lease_epoch=draw(st.integers(0, 3)),
                              scheduler_id=draw(st.sampled_from(["s1", "s2"])))
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            batch.decisions.add(dispatch=api.DispatchDecision(
                job_id=draw(st.integers(0, 6)), attempt=draw(st.integers(0, 2)), host=draw(HOST_NAMES)))
        else:
            batch.decisions.add(pend=api.PendDecision(job_id=draw(st.integers(0, 6)),
                                                      reason=draw(st.sampled_from(["", "busy"]))))
    return batch


@st.composite
def host_reports(draw: st.DrawFn) -> log.HostReport:
    report = api.JobReport(job_id=draw(st.integers(0, 6)), attempt=draw(st.integers(0, 2)))
    which = draw(st.sampled_from(["started", "finished", "dispatch_failed", "none"]))
    if which == "started":
        report.started.pid = draw(st.integers(1, 9))
    elif which == "finished":
        report.finished.exit_code = draw(st.integers(0, 2))
        report.finished.term_signal = draw(st.sampled_from([0, 0, 9]))
    elif which == "dispatch_failed":
        report.dispatch_failed.code = draw(st.integers(-9, 1))  # every kind of refusal, and junk
    return log.HostReport(host=draw(HOST_NAMES), generation=draw(st.integers(0, 3)), report=report)


# Each entry kind's body, drawn (a host status and its resolution draw alike).
BODIES: dict[str, Callable[[st.DrawFn], object]] = {
    "submit": _submit, "control": _control, "modify": _modify, "put_queue": _put_queue,
    "init": lambda draw: draw(init_bodies()), "join_host": _join_host, "host_status": _host_status,
    "dispatch": _dispatch, "report": lambda draw: draw(host_reports()), "reports": _reports,
    "resolve_host": _host_status, "lease": _lease, "decisions": _decisions, "joins": _joins,
}


HOST_NAMES = st.sampled_from(["n1", "n2", "", "bad name"])


@st.composite
def init_bodies(draw: st.DrawFn) -> log.InitCluster:
    return log.InitCluster(
        cluster_id=draw(st.sampled_from([CLUSTER, CLUSTER, "other"])),
        default_queue=draw(st.sampled_from(("",) + QUEUE_NAMES)),
        max_slots_per_job=draw(st.integers(0, 8)),
        config_digest=draw(st.sampled_from(["", "d1", "d2"])),
        queues=draw(st.lists(queues(), max_size=4)),
    )


@st.composite
def entry_data(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["body"] * 8 + ["no-body", "raw"]))
    if kind == "raw":
        return draw(st.binary(max_size=16))
    entry = log.Entry(stamp_ms=draw(stamps), proposer=draw(st.integers(0, 3)),
                      format=draw(st.sampled_from([0, 0, ENTRY_FORMAT])))  # the first and the newest
    if kind == "body":
        for name, body in draw(bodies()).items():
            getattr(entry, name).CopyFrom(body)
    return entry.SerializeToString()


USUALLY = st.sampled_from([True, True, True, True, False])


@st.composite
def programs(draw: st.DrawFn) -> list[tuple[int, bytes]]:
    """(index, entry bytes) in log order; a gap of 0 repeats the last index.

    Usually a configuration push and a few jobs come first, so that the random
    entries after them find queues and jobs to act on.
    """
    datas = draw(st.lists(entry_data(), max_size=15))
    if draw(USUALLY):  # usually a configuration push first, so submits can succeed
        first = log.Entry(stamp_ms=STAMP_MS, proposer=1)
        first.init.CopyFrom(log.InitCluster(
            cluster_id=CLUSTER, default_queue=draw(st.sampled_from(["", "normal", "normal", "nope"])),
            max_slots_per_job=draw(st.integers(0, 8)), config_digest="d0",
            queues=[api.Queue(name=n, closed=n == "shut") for n in QUEUE_NAMES[:3]]))
        datas.insert(0, first.SerializeToString())
        if draw(USUALLY):  # and some jobs for controls and modifies to find
            jobs = log.Entry(stamp_ms=STAMP_MS, proposer=2)
            jobs.submit.requests.add(request_id="seed", jobs=[api.JobSpec(command=["true"])] * 4)
            datas.insert(1, jobs.SerializeToString())
    program, index = [], 0
    for data in datas:
        index += draw(st.sampled_from([0, 1, 1, 1, 1, 2, 7]))
        program.append((index, data))
    return program


def results_bytes(results: list[log.Result] | None) -> list[bytes] | None:
    if results is None:
        return None
    return [r.SerializeToString(deterministic=True) for r in results]


def attempt(apply: Callable[..., list[log.Result] | None], *args: object) -> list[log.Result] | None | str:
    """The results, or the kind of an entry the code could not apply."""
    try:
        return apply(*args)
    except fsm.EntryNotUnderstood as exc:
        return f"stopped at {exc.index}: {exc.kind}"


def same_as_message(tables: MemoryTables, index: int, data: bytes, applied: list[log.Result] | None | str,
                    applied_to: MemoryTables) -> None:
    """apply_entry of the decoded entry does what apply of its bytes did (`applied`, to `applied_to`)."""
    try:
        entry = log.Entry.FromString(data)
    except DecodeError:
        assert applied is None or (isinstance(applied, str) and "undecodable" in applied)  # (None: applied)
        return
    try:
        by_message = fsm.apply_entry(tables, index, entry)
    except fsm.EntryNotUnderstood as exc:
        assert applied == f"stopped at {exc.index}: {exc.kind}"
        return
    if by_message is None or isinstance(applied, str) or applied is None:
        assert by_message is None and applied is None
        return
    assert results_bytes(by_message.results) == results_bytes(applied)
    stored = applied_to.get("events", fsm.revision_key(index))
    assert by_message.event.SerializeToString(deterministic=True) == stored


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs())
def test_any_entry_sequence_gives_identical_dumps_and_replay_changes_nothing(
        program: list[tuple[int, bytes]]) -> None:
    memory, by_message = MemoryTables(), MemoryTables()
    for tables in (memory, by_message):
        # What StateStore writes into its meta table when it creates the environment.
        tables.put("meta", IDENTITY_KEY, CLUSTER.encode())
        fsm.rebuild_derived(tables)  # and the version of its derived tables
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(Path(tmp) / "state", CLUSTER)
        try:
            applied: list[int] = []
            ended: dict[bytes, int] = {}  # each finished job's end, as far as seen: history may drop it
            latest_ms = 0
            for index, data in program:
                in_memory = attempt(fsm.apply, memory, index, data)
                if not isinstance(in_memory, str) and in_memory is not None:
                    latest_ms = max(latest_ms, log.Entry.FromString(data).stamp_ms)
                    for table in ("jobs", "history"):
                        for key, raw in memory.scan(table):
                            job = api.Job.FromString(raw)
                            if job.state in (api.DONE, api.EXIT):
                                ended[key] = job.end_time_ms
                in_lmdb = attempt(store.apply, index, data)
                same_as_message(by_message, index, data, in_memory, memory)
                if isinstance(in_memory, str) or isinstance(in_lmdb, str):
                    # An entry this code cannot apply stops both alike and changes nothing.
                    assert in_memory == in_lmdb, (index, data)
                    continue
                assert results_bytes(in_memory) == results_bytes(in_lmdb), (index, data)
                assert (in_memory is None) == (index <= (applied[-1] if applied else 0))
                if in_memory is not None:
                    applied.append(index)
            dump = store.canonical_dump()
            assert b"".join(fsm.canonical_dump(memory)) == dump == b"".join(fsm.canonical_dump(by_message))

            meta = store.meta()
            assert meta.applied_index == (applied[-1] if applied else 0)
            with store.read() as tables:
                events = [struct.unpack(">Q", k)[0] for k, _ in tables.scan("events")]
                job_keys = [k for k, _ in tables.scan("jobs")]
                history_keys = {k for k, _ in tables.scan("history")}
            assert events == applied  # one event per applied entry
            # Every job ever submitted is live, or finished and past its clean period: then in history,
            # unless it ended longer than the retention before the latest entry (an entry may carry any
            # stamp here, none at all too: a job may end in 1970).
            every_job = [fsm.job_key(i) for i in range(1, (meta.next_job_id or 1))]
            dropped = {key for key, end in ended.items() if end <= latest_ms - fsm.history.retention_ms(meta)}
            kept = [key for key in every_job if key not in dropped or key in job_keys or key in history_keys]
            assert job_keys == [key for key in kept if key not in history_keys or key in job_keys]
            assert set(kept) <= set(job_keys) | history_keys

            for index, data in program:
                if index in applied:
                    assert fsm.apply(memory, index, data) is None
                    assert store.apply(index, data) is None
            assert store.canonical_dump() == dump
            assert b"".join(fsm.canonical_dump(memory)) == dump
        finally:
            store.close()
