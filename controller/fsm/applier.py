"""One entry being applied: its writes, recorded as the entry's event.

Every write goes through the Applier, which records it as a Change of the
entry's Event; `finish` stores the Event (what the Sync stream replays), moves
the applied index in the same transaction, and prunes old events and request
ids a bounded amount. Counter updates are summed per entry and written once.
A job write also keeps the job's secondary indexes (job_index.py) in step,
and calls the derived state's `follow` hooks in order; `finish` calls their
`settle` hooks. Which derived state there is (arrays' counts, history,
dependencies, fair share) is a table in controller/fsm/__init__.py
(`DERIVED`), handed to each Applier: the applier imports none of them, so
they may import it.
From entry format 2, `finish` also cleans finished jobs out of the live
table and prunes history past its retention, a bounded amount each.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from controller.fsm import history, job_index, retention, timeline
from controller.fsm.records import FINISHED, META_KEY, counter_value, job_key, read_counter, revision_key
from controller.fsm.versions import HISTORY_FORMAT, PASS_RECORD_FORMAT
from controller.tables import Tables
from xce.invariant import InvariantViolated
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

T = TypeVar("T")

# After a job write: (applier, the job it replaced or None, the job, the job's bytes as written).
Follow = Callable[["Applier", api.Job | None, api.Job, bytes], None]
Settle = Callable[["Applier"], None]  # at the end of an entry, before its counters are written


class Derived(NamedTuple):
    """State derived from the jobs, kept in step by the applier (registered in fsm/__init__.py)."""

    follow: tuple[Follow, ...]  # in this order, after each job write
    settle: tuple[Settle, ...]  # in this order, at the end of each entry



@dataclass(slots=True)
class Applier:
    tables: Tables
    index: int
    entry: log.Entry
    meta: log.Meta
    derived: Derived
    kind: str = ""
    # The entry's event, its changes added as they are made (copying a list of them into it cost ~1 us each)
    event: log.Event = field(default_factory=log.Event)
    counter_deltas: dict[str, int] = field(default_factory=dict)
    arrays: dict[int, api.Job] = field(default_factory=dict)  # array records this entry loaded (arrays.py)
    arrays_read: dict[int, bytes] = field(default_factory=dict)  # ... and their bytes when loaded
    depend_touched: set[int] = field(default_factory=set)  # jobs whose dependents are due (depends.py)
    depend_due: set[int] = field(default_factory=set)  # jobs whose own condition is due
    # Chunk leads that left their slot, with their chunks as they were (chunks.py)
    chunks_due: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    audit_rows: int = 0  # audit rows this entry wrote (audit.py: their keys' order in the entry)
    requests_run: int = 0  # requests this entry ran (not repeats of an applied request id: requests.py)
    # Job records as the table holds them now (None: no such job), of the jobs this entry read with
    # `job` or wrote: `put_job` takes what it replaces from here instead of reading and parsing it again.
    jobs_seen: dict[int, bytes | None] = field(default_factory=dict)

    @property
    def stamp_ms(self) -> int:
        return self.entry.stamp_ms

    def job(self, job_id: int) -> api.Job | None:
        """The job's record as this entry has it so far (fsm.read_job, remembered for `put_job`)."""
        seen = self.jobs_seen
        if job_id not in seen:
            seen[job_id] = self.tables.get("jobs", job_key(job_id))
        raw = seen[job_id]
        return None if raw is None else api.Job.FromString(raw)

    def put_job(self, job: api.Job) -> None:
        key = job_key(job.id)
        raw = self.jobs_seen[job.id] if job.id in self.jobs_seen else self.tables.get("jobs", key)
        before = None if raw is None else api.Job.FromString(raw)
        if before is None or before.state != job.state:
            timeline.note(job, before, self.stamp_ms, self.entry.format)
        value = job.SerializeToString(deterministic=True)
        self._put("jobs", key, value)
        self.jobs_seen[job.id] = value
        job_index.update(self.tables, before, job)
        for follow in self.derived.follow:
            follow(self, before, job, value)

    def clean_job(self, job_id: int) -> None:
        """A finished job leaves the live table (its history record stays)."""
        key = job_key(job_id)
        raw = self.tables.get("jobs", key)
        job = None if raw is None else api.Job.FromString(raw)
        if job is not None and job.state not in FINISHED:  # its message made only if broken (each job's end)
            raise InvariantViolated(f"cleaning job {job_id}, which has not finished")
        if job is not None:
            self.delete("jobs", key)
            job_index.update(self.tables, job, None)
        self.jobs_seen[job_id] = None

    def put_host(self, host: api.Host) -> None:
        self._put("hosts", host.spec.name.encode(), host.SerializeToString(deterministic=True))

    def put_queue(self, queue: api.Queue) -> None:
        self._put("queues", queue.name.encode(), queue.SerializeToString(deterministic=True))

    def put_raw(self, table: str, key: bytes, value: bytes) -> None:
        """A record of a table without a writer of its own (fair-share usage)."""
        self._put(table, key, value)

    def replace_table(self, table: str, wanted: dict[bytes, bytes]) -> None:
        """Make a small configuration table exactly `wanted`, writing only what differs."""
        for key, _ in list(self.tables.scan(table)):
            if key not in wanted:
                self.delete(table, key)
        for key in sorted(wanted):
            if self.tables.get(table, key) != wanted[key]:
                self._put(table, key, wanted[key])

    def _put(self, table: str, key: bytes, value: bytes) -> None:
        self.tables.put(table, key, value)
        self.event.changes.add(table=table, key=key, value=value)

    def delete(self, table: str, key: bytes) -> None:
        self.tables.delete(table, key)
        self.event.changes.add(table=table, key=key, deleted=True)

    def counter(self, name: str) -> int:
        """A cluster-wide counter as this entry has left it so far."""
        return read_counter(self.tables, name) + self.counter_deltas.get(name, 0)

    def add_counter(self, name: str, amount: int) -> None:
        self.counter_deltas[name] = self.counter_deltas.get(name, 0) + amount

    def remember(self, request_id: str, result: log.Result) -> None:
        if not request_id:
            return
        result.revision = self.index
        result.stamp_ms = self.entry.stamp_ms
        self.tables.put("requests", request_id.encode(), result.SerializeToString(deterministic=True))
        expiry = struct.pack(">q", self.entry.stamp_ms) + request_id.encode()
        self.tables.put("request_expiry", expiry, b"")


def each(applier: Applier, items: Sequence[T], one: Callable[[Applier, T], log.Result],
         what: str) -> list[log.Result]:
    """A group-committed entry: each item applies on its own, with a result each."""
    if not items:
        return [log.Result(code=log.INVALID_ARGUMENT, message=f"no {what}")]
    return [one(applier, item) for item in items]


def finish(applier: Applier, results: list[log.Result], rejected: bool) -> None:
    """Counters, the event, the applied index: the end of every applied entry."""
    meta, tables, index = applier.meta, applier.tables, applier.index
    for settle in applier.derived.settle:
        settle(applier)
    _write_counters(applier)
    if applier.entry.format >= HISTORY_FORMAT:
        for job_id in history.clean(tables, meta, applier.stamp_ms):
            applier.clean_job(job_id)
        history.prune(tables, meta, applier.stamp_ms)
    meta.applied_index = index
    event = applier.event
    event.revision = index
    event.kind = applier.kind
    by = principals(applier.entry)
    if by:  # most entries are the leader's own
        event.by.extend([f"{p.role}:{p.name}" for p in by])
    if rejected:
        event.rejected.CopyFrom(results[0])
    if applier.kind == "decisions" and applier.entry.format >= PASS_RECORD_FORMAT:
        event.batch.CopyFrom(applier.entry.decisions)  # the pass's inputs and decisions, for xce record
    raw_event = event.SerializeToString(deterministic=True)
    tables.put("events", revision_key(index), raw_event)
    meta.events_bytes += len(raw_event)
    meta.events_floor = retention.prune_events(tables, index, meta)
    retention.prune_requests(tables, applier.entry.stamp_ms)
    tables.put("meta", META_KEY, meta.SerializeToString(deterministic=True))


def principals(entry: log.Entry) -> list[log.Principal]:
    """Who asked for the entry (G6), as the leader recorded it; none for the leader's own entries."""
    if entry.HasField("by"):
        return [entry.by]
    if entry.WhichOneof("body") == "submit":
        return list(entry.submit.by)
    return []


def _write_counters(applier: Applier) -> None:
    for name in sorted(applier.counter_deltas):
        delta = applier.counter_deltas[name]
        if delta == 0:
            continue
        value = read_counter(applier.tables, name) + delta
        if value < 0:  # an invariant, its message made only if broken (most entries move a counter)
            raise InvariantViolated(f"counter {name} would go below zero ({value}) at entry {applier.index}")
        if value == 0:
            applier.delete("counters", name.encode())
        else:
            applier._put("counters", name.encode(), counter_value(value))
    applier.counter_deltas.clear()
