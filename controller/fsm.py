"""The replicated state machine: apply(tables, index, entry) -> results.

Theory of operation. Every state change is a Raft log entry (xce.v1.Entry,
protobuf with a oneof type tag). Each replica applies the committed entries
in index order through this module, inside one storage transaction that the
driver commits; the applied index is written in that same transaction, so an
entry replayed after a restart (pysyncobj re-applies its journal after the
last dump) is recognised and skipped. Applying is a pure function of the
stored state and the entry: the proposer stamped the time (`stamp_ms`) and
its replica id into the entry; nothing here reads a clock, randomness or the
environment.

Applying never raises for bad input: a request that no longer validates
(the state moved since the leader checked it) gets a Result with a code and
a message, stored under its request id. An exception inside a pysyncobj
apply would make it retry the same entry forever.

Every applied entry sets the revision to its index and appends what it
changed (jobs and queues) to the bounded `events` table, for the resync
stream.

Request ids make retries safe: a client keeps the id across retries, and a
command that pysyncobj applies twice (a retried proposal after a lost
callback) finds its first result in `requests` and changes nothing.
"""

from __future__ import annotations

import datetime
import functools
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from controller.tables import Tables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

# How many events the resync stream can replay; older ones are dropped and
# the floor moves up (a scheduler further behind gets a full snapshot).
EVENTS_KEPT = 100_000
EVENTS_MAX_BYTES = 64 << 20  # whichever bound is hit first
# Request ids are remembered this long (by proposer time) to dedupe retries.
REQUEST_RETENTION_MS = 24 * 3600 * 1000
# Bound on the clean-up work one apply does, so no entry is slow to apply.
PRUNE_PER_APPLY = 256

MAX_COMMAND_ARGS = 4096
MAX_REQUEST_ID_BYTES = 256
MAX_QUEUE_NAME = 64
MAX_HOST_NAME = 64
MAX_HOST_SLOTS = 100_000
MAX_JOB_ID = 1 << 63
# datetime's range (years 1-9999), which readable ids need.
MIN_STAMP_MS, MAX_STAMP_MS = -62135596800000, 253402300799999
MAX_STRING = 4096
DEFAULT_QUEUE = "normal"
DEFAULT_MAX_SLOTS = 1024

FINISHED = (api.DONE, api.EXIT)
PENDING = (api.PEND, api.PSUSP)
RUNNING = (api.RUN, api.USUSP, api.SSUSP, api.UNKWN)

META_KEY = b"meta"


class Rejected(Exception):
    """A request that cannot be applied: a code from log.Code and a message."""

    def __init__(self, code: log.Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def job_key(job_id: int) -> bytes:
    return struct.pack(">Q", job_id)


def revision_key(revision: int) -> bytes:
    return struct.pack(">Q", revision)


def read_meta(tables: Tables) -> log.Meta:
    meta = log.Meta()
    raw = tables.get("meta", META_KEY)
    if raw is not None:
        meta.ParseFromString(raw)
    return meta


def read_job(tables: Tables, job_id: int) -> api.Job | None:
    raw = tables.get("jobs", job_key(job_id))
    if raw is None:
        return None
    job = api.Job()
    job.ParseFromString(raw)
    return job


def read_queue(tables: Tables, name: str) -> api.Queue | None:
    raw = tables.get("queues", name.encode())
    if raw is None:
        return None
    queue = api.Queue()
    queue.ParseFromString(raw)
    return queue


def read_host(tables: Tables, name: str) -> api.Host | None:
    raw = tables.get("hosts", name.encode()) if name and len(name) <= MAX_HOST_NAME else None
    if raw is None:
        return None
    host = api.Host()
    host.ParseFromString(raw)
    return host


def read_result(tables: Tables, request_id: str) -> log.Result | None:
    if not request_id or len(request_id.encode()) > MAX_REQUEST_ID_BYTES:
        return None
    raw = tables.get("requests", request_id.encode())
    if raw is None:
        return None
    result = log.Result()
    result.ParseFromString(raw)
    return result


def readable_id(cluster_id: str, proposer: int, stamp_ms: int, seq: int) -> str:
    when = datetime.datetime.fromtimestamp(stamp_ms / 1000, tz=datetime.UTC)
    return f"{cluster_id}-{proposer}-{when.strftime('%Y%m%d%H%M%S')}-{seq}"


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdecimal() and len(text) <= 19 and int(text) < MAX_JOB_ID


def parse_job_id(text: str) -> int:
    """The numeric id inside either form; raises Rejected for neither."""
    text = text.strip()
    if _is_number(text):
        return int(text)
    seq = text.rsplit("-", 1)[-1]
    if "-" in text and _is_number(seq):
        return int(seq)
    raise Rejected(log.INVALID_ARGUMENT,
                   f"not a job id: {text[:80]!r} (a number or cluster-replica-time-seq)")


def check_request_id(request_id: str) -> None:
    # LMDB keys are at most 511 bytes; the expiry key adds 8.
    if len(request_id.encode()) > MAX_REQUEST_ID_BYTES:
        raise Rejected(log.INVALID_ARGUMENT, f"request id longer than {MAX_REQUEST_ID_BYTES} bytes")


def find_job(tables: Tables, text: str) -> api.Job:
    job = read_job(tables, parse_job_id(text))
    if job is None or (not text.strip().isdigit() and job.readable_id != text.strip()):
        raise Rejected(log.NOT_FOUND, f"no job {text}")
    return job


# ---------------------------------------------------------------- validation
# Shared by the leader's pre-check (bad input never reaches the log) and by
# apply (the state may have moved between the check and the commit).


def _check_text(what: str, value: str) -> None:
    if len(value) > MAX_STRING:
        raise Rejected(log.INVALID_ARGUMENT, f"{what} longer than {MAX_STRING} characters")
    if "\x00" in value:
        raise Rejected(log.INVALID_ARGUMENT, f"{what} contains a NUL character")


def check_spec(tables: Tables, meta: log.Meta, spec: api.JobSpec) -> None:
    if not spec.command or not spec.command[0].strip():
        raise Rejected(log.INVALID_ARGUMENT, "empty command")
    if len(spec.command) > MAX_COMMAND_ARGS:
        raise Rejected(log.INVALID_ARGUMENT, f"more than {MAX_COMMAND_ARGS} command arguments")
    for arg in spec.command:
        _check_text("command argument", arg)
    for what, value in (("name", spec.name), ("queue", spec.queue), ("stdout path", spec.stdout_path),
                        ("stderr path", spec.stderr_path), ("cwd", spec.cwd), ("user", spec.user),
                        ("resource requirement", spec.resource_req)):
        _check_text(what, value)
    for key, value in spec.env.items():
        _check_text("environment name", key)
        _check_text("environment value", value)
        if not key or "=" in key:
            raise Rejected(log.INVALID_ARGUMENT, f"bad environment name {key[:80]!r}")
    max_slots = meta.max_slots_per_job or DEFAULT_MAX_SLOTS
    if spec.HasField("slots") and not 1 <= spec.slots <= max_slots:
        raise Rejected(log.INVALID_ARGUMENT, f"slots must be between 1 and {max_slots}, got {spec.slots}")
    check_queue_open(tables, spec.queue or meta.default_queue or DEFAULT_QUEUE)


def check_queue_open(tables: Tables, name: str) -> None:
    if not name or len(name.encode()) > MAX_QUEUE_NAME:
        raise Rejected(log.INVALID_ARGUMENT, f"unknown queue {name[:80]!r}")
    queue = read_queue(tables, name)
    if queue is None:
        known = ", ".join(k.decode() for k, _ in tables.scan("queues"))
        raise Rejected(log.INVALID_ARGUMENT, f"unknown queue {name!r} (queues: {known or 'none'})")
    if queue.closed:
        raise Rejected(log.FAILED_PRECONDITION, f"queue {name!r} is closed")


@dataclass(frozen=True)
class Transition:
    to: api.JobState
    reason: str = ""
    requeue: bool = False          # back to PEND now, attempt + 1
    kill_requested: bool = False
    code: api.PendingReason = api.PENDING_REASON_UNSPECIFIED
    requeue_requested: bool = False  # back to PEND once the running instance has ended


def _transitions(action: api.ControlAction) -> dict[api.JobState, Transition]:
    """The control action table: state -> what happens. Missing: refused."""
    if action == api.KILL:
        return {api.PEND: Transition(api.EXIT), api.PSUSP: Transition(api.EXIT),
                **{s: Transition(s, kill_requested=True) for s in RUNNING}}
    if action == api.STOP:
        return {api.PEND: Transition(api.PSUSP, "stopped by user", code=api.PEND_JOB_HELD),
                api.RUN: Transition(api.USUSP), api.SSUSP: Transition(api.USUSP)}
    if action == api.RESUME:
        return {api.USUSP: Transition(api.RUN), api.PSUSP: Transition(api.PEND)}
    if action == api.HOLD:
        return {api.PEND: Transition(api.PSUSP, "held by user", code=api.PEND_JOB_HELD)}
    if action == api.RELEASE:
        return {api.PSUSP: Transition(api.PEND)}
    if action == api.REQUEUE:
        # Like LSF's brequeue: a running instance is killed first, and the job
        # is pending again only once that instance has ended (its slots held
        # until then), so the next attempt can never run beside it.
        requeued = Transition(api.PEND, "requeued", requeue=True, code=api.PEND_REQUEUED)
        return {**{s: requeued for s in FINISHED},
                **{s: Transition(s, kill_requested=True, requeue_requested=True) for s in RUNNING}}
    raise Rejected(log.INVALID_ARGUMENT, f"unknown control action {action}")


def check_control(job: api.Job, action: api.ControlAction) -> Transition:
    table = _transitions(action)
    # A kill asked twice is refused; a kill after a requeue turns it into a kill.
    being_killed = job.state in RUNNING and job.kill_requested \
        and (action == api.REQUEUE or not job.requeue_requested)
    if job.state not in table or (action in (api.KILL, api.REQUEUE) and being_killed):
        raise Rejected(log.FAILED_PRECONDITION,
                       f"cannot {api.ControlAction.Name(action).lower()} job {job.id} "
                       f"in state {api.JobState.Name(job.state)}")
    return table[job.state]


def check_modify(tables: Tables, job: api.Job, request: api.ModifyJobRequest) -> None:
    if not (request.HasField("priority") or request.HasField("queue")
            or request.HasField("resource_req")):
        raise Rejected(log.INVALID_ARGUMENT, "nothing to modify")
    if job.state in FINISHED:
        raise Rejected(log.FAILED_PRECONDITION, f"job {job.id} has finished")
    if request.HasField("queue"):
        if job.state not in PENDING:
            raise Rejected(log.FAILED_PRECONDITION, "the queue can change only while the job is pending")
        _check_text("queue", request.queue)
        check_queue_open(tables, request.queue)
    if request.HasField("resource_req"):
        if job.state not in PENDING:
            raise Rejected(log.FAILED_PRECONDITION,
                           "the resource requirement can change only while the job is pending")
        _check_text("resource requirement", request.resource_req)


def check_host_spec(spec: api.HostSpec) -> None:
    name = spec.name
    if not name or len(name) > MAX_HOST_NAME or not all(c.isascii() and (c.isalnum() or c in "_-.")
                                                         for c in name):
        raise Rejected(log.INVALID_ARGUMENT, f"bad host name {name[:80]!r} (letters, digits, _ - . ; 1-64)")
    if not 0 <= spec.slots <= MAX_HOST_SLOTS:
        raise Rejected(log.INVALID_ARGUMENT, f"host slots must be between 0 and {MAX_HOST_SLOTS}, "
                                             f"got {spec.slots}")
    if spec.memory_mb < 0:
        raise Rejected(log.INVALID_ARGUMENT, "host memory must not be negative")
    for key, value in spec.resources.items():
        _check_text("resource name", key)
        if not key or not value >= 0 or value == float("inf"):
            raise Rejected(log.INVALID_ARGUMENT, f"resource {key!r} must be a finite number >= 0")
    for tag in spec.tags:
        _check_text("tag", tag)


def check_queue(queue: api.Queue) -> None:
    name = queue.name
    if not name or len(name) > MAX_QUEUE_NAME or not all(c.isalnum() or c in "_-." for c in name):
        raise Rejected(log.INVALID_ARGUMENT, f"bad queue name {name!r} (letters, digits, _ - . ; 1-64)")
    _check_text("description", queue.description)
    plugin = queue.job_pick_plugin
    if plugin and (len(plugin) > 64 or not all(c.isalnum() or c in "_-." for c in plugin)):
        raise Rejected(log.INVALID_ARGUMENT, f"bad job_pick_plugin {plugin[:80]!r}")


# ---------------------------------------------------------------- apply


@dataclass
class Applier:
    """One entry being applied: records changes for the events table."""

    tables: Tables
    index: int
    entry: log.Entry
    meta: log.Meta
    changes: list[log.Change] = field(default_factory=list)

    def put_job(self, job: api.Job) -> None:
        self._put("jobs", job_key(job.id), job.SerializeToString(deterministic=True))

    def put_host(self, host: api.Host) -> None:
        self._put("hosts", host.spec.name.encode(), host.SerializeToString(deterministic=True))

    def put_queue(self, queue: api.Queue) -> None:
        self._put("queues", queue.name.encode(), queue.SerializeToString(deterministic=True))

    def _put(self, table: str, key: bytes, value: bytes) -> None:
        self.tables.put(table, key, value)
        self.changes.append(log.Change(table=table, key=key, value=value))

    def delete(self, table: str, key: bytes) -> None:
        self.tables.delete(table, key)
        self.changes.append(log.Change(table=table, key=key, deleted=True))

    def remember(self, request_id: str, result: log.Result) -> None:
        if not request_id:
            return
        result.revision = self.index
        result.stamp_ms = self.entry.stamp_ms
        self.tables.put("requests", request_id.encode(), result.SerializeToString(deterministic=True))
        expiry = struct.pack(">q", self.entry.stamp_ms) + request_id.encode()
        self.tables.put("request_expiry", expiry, b"")


def decode_entry(data: bytes) -> log.Entry:
    entry = log.Entry()
    entry.ParseFromString(data)
    return entry


def apply(tables: Tables, index: int, data: bytes) -> list[log.Result] | None:
    """Apply the entry at `index`; None when it was applied already."""
    meta = read_meta(tables)
    if index <= meta.applied_index:
        return None
    try:
        entry = decode_entry(data)
    except DecodeError as exc:
        entry = log.Entry()
        results = [log.Result(code=log.INVALID_ARGUMENT, message=f"undecodable entry: {exc}")]
        _finish(Applier(tables, index, entry, meta), results, rejected=True)
        return results
    applier = Applier(tables, index, entry, meta)
    handler = _HANDLERS.get(entry.WhichOneof("body") or "")
    if not MIN_STAMP_MS <= entry.stamp_ms <= MAX_STAMP_MS:
        results = [log.Result(code=log.INVALID_ARGUMENT, message=f"stamp {entry.stamp_ms} out of range")]
        applier.entry = log.Entry()
        _finish(applier, results, rejected=True)
        return results
    if handler is None:
        results = [log.Result(code=log.INVALID_ARGUMENT, message="entry has no known body")]
        _finish(applier, results, rejected=True)
        return results
    results = handler(applier)
    _finish(applier, results, rejected=False)
    return results


def apply_failed(tables: Tables, index: int, data: bytes, message: str) -> list[log.Result]:
    """Record entry `index` as rejected after apply itself failed.

    The driver calls this in a fresh transaction when `apply` raised (a bug,
    not bad input: that is rejected inside apply). Every replica fails the
    same way on the same entry, so recording it keeps them identical, and the
    log moves on instead of retrying the entry forever.
    """
    meta = read_meta(tables)
    if index <= meta.applied_index:
        return []
    try:
        entry = decode_entry(data)
    except DecodeError:
        entry = log.Entry()
    body = entry.WhichOneof("body")
    count = len(entry.submit.requests) if body == "submit" else \
        len(entry.reports.reports) if body == "reports" else \
        len(entry.joins.joins) if body == "joins" else 1
    results = [log.Result(code=log.INTERNAL, message=f"entry failed to apply: {message}")
               for _ in range(max(count, 1))]
    _finish(Applier(tables, index, log.Entry(stamp_ms=entry.stamp_ms), meta), results, rejected=True)
    return results


def _finish(applier: Applier, results: list[log.Result], rejected: bool) -> None:
    meta, tables, index = applier.meta, applier.tables, applier.index
    meta.applied_index = index
    event = log.Event(revision=index, changes=applier.changes)
    if rejected:
        event.rejected.CopyFrom(results[0])
    raw_event = event.SerializeToString(deterministic=True)
    tables.put("events", revision_key(index), raw_event)
    meta.events_bytes += len(raw_event)
    meta.events_floor = _prune_events(tables, index, meta)
    _prune_requests(tables, applier.entry.stamp_ms)
    tables.put("meta", META_KEY, meta.SerializeToString(deterministic=True))


def _prune_events(tables: Tables, index: int, meta: log.Meta) -> int:
    """Drop the oldest events past either bound; return the new floor."""
    cutoff = index - (meta.events_kept or EVENTS_KEPT)
    doomed: list[bytes] = []
    floor = index
    for key, value in tables.scan("events"):
        revision = struct.unpack(">Q", key)[0]
        too_old = revision <= cutoff or (meta.events_bytes > EVENTS_MAX_BYTES and revision < index)
        if not too_old or len(doomed) >= PRUNE_PER_APPLY:
            floor = revision
            break
        doomed.append(key)
        meta.events_bytes -= len(value)
    for key in doomed:
        tables.delete("events", key)
    return floor


def _prune_requests(tables: Tables, stamp_ms: int) -> None:
    cutoff = stamp_ms - REQUEST_RETENTION_MS
    doomed: list[bytes] = []
    for key, _ in tables.scan("request_expiry"):
        if struct.unpack(">q", key[:8])[0] >= cutoff or len(doomed) >= PRUNE_PER_APPLY:
            break
        doomed.append(key)
    for key in doomed:
        tables.delete("request_expiry", key)
        request_id = key[8:]
        raw = tables.get("requests", request_id)
        if raw is not None:
            result = log.Result()
            result.ParseFromString(raw)
            if result.stamp_ms < cutoff:
                tables.delete("requests", request_id)


def _guarded(request_id: str, applier: Applier, body: Callable[[], log.Result]) -> log.Result:
    """Run one request once: a repeat returns the stored result unchanged."""
    try:
        check_request_id(request_id)
    except Rejected as exc:
        return log.Result(code=exc.code, message=exc.message)
    if request_id:
        earlier = read_result(applier.tables, request_id)
        if earlier is not None:
            return earlier
    try:
        result = body()
    except Rejected as exc:
        result = log.Result(code=exc.code, message=exc.message)
    applier.remember(request_id, result)
    return result


def _apply_submit(applier: Applier) -> list[log.Result]:
    return [_guarded(request.request_id, applier, functools.partial(_submit_one, applier, request))
            for request in applier.entry.submit.requests]


def _submit_one(applier: Applier, request: api.SubmitJobsRequest) -> log.Result:
    meta, tables, entry = applier.meta, applier.tables, applier.entry
    if not request.jobs:
        raise Rejected(log.INVALID_ARGUMENT, "no jobs in the request")
    for spec in request.jobs:  # all or nothing: check every spec first
        check_spec(tables, meta, spec)
    result = log.Result(code=log.OK)
    for spec in request.jobs:
        job_id = meta.next_job_id or 1
        meta.next_job_id = job_id + 1
        job = api.Job(id=job_id, spec=spec, state=api.PEND, submit_time_ms=entry.stamp_ms,
                      modify_time_ms=entry.stamp_ms, request_id=request.request_id,
                      readable_id=readable_id(meta.cluster_id, entry.proposer, entry.stamp_ms, job_id))
        if not job.spec.queue:
            job.spec.queue = meta.default_queue or DEFAULT_QUEUE
        if not job.spec.HasField("slots"):
            job.spec.slots = 1
        applier.put_job(job)
        result.job_ids.append(job_id)
    return result


def _apply_control(applier: Applier) -> list[log.Result]:
    request = applier.entry.control

    def body() -> log.Result:
        job = find_job(applier.tables, request.job_id)
        transition = check_control(job, request.action)
        job.state = transition.to
        job.modify_time_ms = applier.entry.stamp_ms
        job.pending_reason = transition.reason if transition.to in PENDING else ""
        job.pending_code = transition.code if transition.to in PENDING else api.PENDING_REASON_UNSPECIFIED
        if transition.kill_requested:
            job.kill_requested = True
            job.requeue_requested = transition.requeue_requested
        if transition.requeue:
            job.attempt += 1
            for name in ("exit_code", "end_time_ms", "start_time_ms", "kill_requested", "pid",
                         "term_signal", "exit_status_unknown", "usage", "host", "state_before_unknown"):
                job.ClearField(name)
        if transition.to == api.EXIT:
            job.end_time_ms = applier.entry.stamp_ms
            job.exit_code = 128 + 9  # like a job killed with SIGKILL before it ran
        applier.put_job(job)
        return log.Result(code=log.OK, job_ids=[job.id])

    return [_guarded(request.request_id, applier, body)]


# ---------------------------------------------------------------- dispatch


def host_job_key(host: str, job_id: int) -> bytes:
    return host.encode() + b"\x00" + job_key(job_id)


def host_job_ids(tables: Tables, host: str) -> list[int]:
    """Jobs whose current attempt holds slots on `host`."""
    prefix = host.encode() + b"\x00"
    ids = []
    for key, _ in tables.scan("host_jobs", prefix):
        if not key.startswith(prefix):
            break
        ids.append(struct.unpack(">Q", key[len(prefix):])[0])
    return ids


def check_dispatch(tables: Tables, job: api.Job, host_name: str, attempt: int) -> api.Host:
    """The checks a DISPATCH must pass, from the scheduler or an operator (brun)."""
    if job.state != api.PEND:
        raise Rejected(log.FAILED_PRECONDITION,
                       f"job {job.id} is not pending (state {api.JobState.Name(job.state)})")
    if attempt != job.attempt:
        raise Rejected(log.FAILED_PRECONDITION, f"job {job.id} is at attempt {job.attempt}, not {attempt}")
    host = read_host(tables, host_name)
    if host is None:
        raise Rejected(log.NOT_FOUND, f"no host {host_name[:80]!r}")
    if host.status != api.HOST_OK:
        raise Rejected(log.FAILED_PRECONDITION, f"host {host_name} is unavailable")
    free = host.spec.slots - host.slots_used
    if free < job.spec.slots:
        raise Rejected(log.FAILED_PRECONDITION,
                       f"host {host_name} has {free} free slots; job {job.id} needs {job.spec.slots}")
    return host


def _release(applier: Applier, job: api.Job) -> None:
    """The job's current attempt gives its slots on its host back."""
    host = read_host(applier.tables, job.host)
    if host is not None:
        host.slots_used = max(0, host.slots_used - job.spec.slots)
        host.running_jobs = max(0, host.running_jobs - 1)
        applier.put_host(host)
    # In the event too: it tells the leader which host's worker to look at
    # (worker_session.route) when the job itself no longer names a host.
    applier.delete("host_jobs", host_job_key(job.host, job.id))


def _apply_dispatch(applier: Applier) -> list[log.Result]:
    dispatch = applier.entry.dispatch

    def body() -> log.Result:
        job = read_job(applier.tables, dispatch.job_id)
        if job is None:
            raise Rejected(log.NOT_FOUND, f"no job {dispatch.job_id}")
        _place(applier, job, check_dispatch(applier.tables, job, dispatch.host, dispatch.attempt))
        return log.Result(code=log.OK, job_ids=[job.id])

    return [_guarded(dispatch.request_id, applier, body)]


def _place(applier: Applier, job: api.Job, host: api.Host) -> None:
    """DISPATCH accepted: the job runs on the host and holds its slots."""
    job.state = api.RUN
    job.host = host.spec.name
    job.pending_reason = ""
    job.ClearField("pending_code")
    job.modify_time_ms = applier.entry.stamp_ms
    host.slots_used += job.spec.slots
    host.running_jobs += 1
    applier.put_job(job)
    applier.put_host(host)
    applier.tables.put("host_jobs", host_job_key(host.spec.name, job.id), struct.pack(">i", job.attempt))


# ---------------------------------------------------------------- scheduler


def _apply_lease(applier: Applier) -> list[log.Result]:
    """Grant, renew or refuse the scheduler lease, by the proposer's clock.

    The holder renews (same epoch); anyone takes it once it expired (epoch +
    1), which fences the old holder's batches.
    """
    lease, meta, now = applier.entry.lease, applier.meta, applier.entry.stamp_ms
    if not lease.scheduler_id or lease.duration_ms <= 0:
        return [log.Result(code=log.INVALID_ARGUMENT, message="a lease needs a scheduler id and a duration")]
    if meta.lease_holder and meta.lease_holder != lease.scheduler_id and now < meta.lease_expires_ms:
        return [log.Result(code=log.FAILED_PRECONDITION, lease_epoch=meta.lease_epoch,
                           lease_holder=meta.lease_holder, lease_expires_ms=meta.lease_expires_ms,
                           message=f"the lease is held by {meta.lease_holder}")]
    if meta.lease_holder != lease.scheduler_id or now >= meta.lease_expires_ms:
        meta.lease_epoch += 1
        meta.lease_holder = lease.scheduler_id
    meta.lease_expires_ms = now + lease.duration_ms
    return [log.Result(code=log.OK, lease_epoch=meta.lease_epoch, lease_holder=meta.lease_holder,
                       lease_expires_ms=meta.lease_expires_ms)]


def _apply_decisions(applier: Applier) -> list[log.Result]:
    """The commit barrier: each decision checked against committed state."""
    batch, meta, now = applier.entry.decisions, applier.meta, applier.entry.stamp_ms
    if batch.lease_epoch != meta.lease_epoch or now >= meta.lease_expires_ms \
            or batch.scheduler_id != meta.lease_holder:
        why = (f"stale lease (epoch {batch.lease_epoch}; "
               f"current {meta.lease_epoch} held by {meta.lease_holder or 'nobody'})")
        return [log.Result(code=log.FAILED_PRECONDITION, message=why, revision=applier.index,
                           rejections=[why] * len(batch.decisions))]
    # The revision tells the scheduler when its view holds this batch's outcome.
    result = log.Result(code=log.OK, revision=applier.index)
    for decision in batch.decisions:
        try:
            _decide(applier, decision)
            result.rejections.append("")
        except Rejected as exc:
            result.rejections.append(exc.message or "rejected")
    return [result]


def _decide(applier: Applier, decision: api.Decision) -> None:
    kind = decision.WhichOneof("body")
    if kind == "dispatch":
        job = read_job(applier.tables, decision.dispatch.job_id)
        if job is None:
            raise Rejected(log.NOT_FOUND, f"no job {decision.dispatch.job_id}")
        _place(applier, job, check_dispatch(applier.tables, job, decision.dispatch.host,
                                            decision.dispatch.attempt))
    elif kind == "pend":
        job = read_job(applier.tables, decision.pend.job_id)
        if job is None or job.state != api.PEND:
            raise Rejected(log.FAILED_PRECONDITION, "job is not pending")
        reason = decision.pend.reason[:200]
        if (job.pending_reason, job.pending_code) != (reason, decision.pend.code):
            job.pending_reason = reason
            job.pending_code = decision.pend.code
            applier.put_job(job)
    else:
        raise Rejected(log.INVALID_ARGUMENT, "empty decision")


def _apply_report(applier: Applier) -> list[log.Result]:
    return [_report_one(applier, applier.entry.report)]


def _apply_reports(applier: Applier) -> list[log.Result]:
    if not applier.entry.reports.reports:
        return [log.Result(code=log.INVALID_ARGUMENT, message="no reports")]
    return [_report_one(applier, relayed) for relayed in applier.entry.reports.reports]


def _report_one(applier: Applier, relayed: log.HostReport) -> log.Result:
    """A worker's report about (job, attempt). Stale ones change nothing (M3)."""
    report = relayed.report
    host = read_host(applier.tables, relayed.host)
    job = read_job(applier.tables, report.job_id)
    if host is None or host.generation != relayed.generation:
        return log.Result(code=log.FAILED_PRECONDITION, message="report from a stale connection")
    if job is None or job.host != relayed.host or job.attempt != report.attempt or job.state not in RUNNING:
        return log.Result(code=log.FAILED_PRECONDITION, message="report about an instance not wanted")
    kind = report.WhichOneof("body")
    stamp = applier.entry.stamp_ms
    if kind == "started":
        job.pid = report.started.pid
        job.start_time_ms = report.started.time_ms or stamp
        if job.state == api.UNKWN:  # its worker is back and still runs it
            job.state = job.state_before_unknown or api.RUN
            job.ClearField("state_before_unknown")
    elif kind == "dispatch_failed" and report.dispatch_failed.code >= 0:  # M3: only a failure requeues
        return log.Result(code=log.INVALID_ARGUMENT, message="dispatch failure codes are negative")
    elif kind in ("finished", "dispatch_failed") and job.requeue_requested:
        _requeue_ended(applier, job, "requeued")
        return log.Result(code=log.OK, job_ids=[job.id])
    elif kind == "finished" and report.finished.status_unknown and job.spec.rerunnable:
        _settle_lost(applier, job, f"job ended on {relayed.host} with unknown status")
        return log.Result(code=log.OK, job_ids=[job.id])
    elif kind == "finished":
        finished = report.finished
        if finished.term_signal:
            job.term_signal = finished.term_signal
            job.exit_code = 128 + finished.term_signal
        else:
            job.exit_code = finished.exit_code
        job.exit_status_unknown = finished.status_unknown
        ok = job.exit_code == 0 and not finished.status_unknown
        job.state = api.DONE if ok else api.EXIT
        job.usage.CopyFrom(finished.usage)
        job.end_time_ms = finished.time_ms or stamp
        job.kill_requested = False
        job.ClearField("state_before_unknown")
        _release(applier, job)
    elif kind == "dispatch_failed":
        _release(applier, job)
        if job.kill_requested:  # it was being killed: it ends here, it is not requeued
            job.state = api.EXIT
            job.exit_code = 128 + 9
            job.end_time_ms = stamp
            job.kill_requested = False
        else:
            job.state = api.PEND
            job.attempt += 1
            job.pending_reason = f"dispatch to {relayed.host} failed: {report.dispatch_failed.reason[:200]}"
            job.pending_code = api.PEND_DISPATCH_REFUSED
            job.host = ""
            job.pid = 0
        job.ClearField("state_before_unknown")
    else:
        return log.Result(code=log.INVALID_ARGUMENT, message="empty report")
    job.modify_time_ms = stamp
    applier.put_job(job)
    return log.Result(code=log.OK, job_ids=[job.id])


def _apply_modify(applier: Applier) -> list[log.Result]:
    request = applier.entry.modify

    def body() -> log.Result:
        job = find_job(applier.tables, request.job_id)
        check_modify(applier.tables, job, request)
        if request.HasField("priority"):
            job.spec.priority = request.priority
        if request.HasField("queue"):
            job.spec.queue = request.queue
        if request.HasField("resource_req"):
            job.spec.resource_req = request.resource_req
        job.modify_time_ms = applier.entry.stamp_ms
        applier.put_job(job)
        return log.Result(code=log.OK, job_ids=[job.id])

    return [_guarded(request.request_id, applier, body)]


def _apply_put_queue(applier: Applier) -> list[log.Result]:
    put = applier.entry.put_queue

    def body() -> log.Result:
        check_queue(put.queue)
        existing = read_queue(applier.tables, put.queue.name)
        if put.create and existing is not None:
            raise Rejected(log.ALREADY_EXISTS, f"queue {put.queue.name!r} exists")
        if not put.create and existing is None:
            raise Rejected(log.NOT_FOUND, f"no queue {put.queue.name!r}")
        if existing != put.queue:  # re-pushing the same configuration changes nothing
            applier.put_queue(put.queue)
        return log.Result(code=log.OK)

    return [_guarded(put.request_id, applier, body)]


def _apply_init(applier: Applier) -> list[log.Result]:
    init, meta = applier.entry.init, applier.meta
    if meta.cluster_id and meta.cluster_id != init.cluster_id:
        return [log.Result(code=log.FAILED_PRECONDITION,
                           message=f"state belongs to cluster {meta.cluster_id}, not {init.cluster_id}")]
    for queue in init.queues:
        try:
            check_queue(queue)
        except Rejected as exc:
            return [log.Result(code=exc.code, message=exc.message)]
    meta.cluster_id = init.cluster_id
    meta.default_queue = init.default_queue or DEFAULT_QUEUE
    meta.max_slots_per_job = init.max_slots_per_job or DEFAULT_MAX_SLOTS
    meta.events_kept = init.events_kept
    if init.config_digest != meta.config_digest:
        for queue in init.queues:
            if read_queue(applier.tables, queue.name) != queue:
                applier.put_queue(queue)
        meta.config_digest = init.config_digest
    return [log.Result(code=log.OK)]


def _apply_join_host(applier: Applier) -> list[log.Result]:
    return [_join_one(applier, applier.entry.join_host)]


def _apply_joins(applier: Applier) -> list[log.Result]:
    if not applier.entry.joins.joins:
        return [log.Result(code=log.INVALID_ARGUMENT, message="no joins")]
    return [_join_one(applier, spec) for spec in applier.entry.joins.joins]


def _join_one(applier: Applier, spec: api.HostSpec) -> log.Result:
    """A worker joined: the record is updated in place, generation + 1 (M2)."""
    try:
        check_host_spec(spec)
    except Rejected as exc:
        return log.Result(code=exc.code, message=exc.message)
    host = read_host(applier.tables, spec.name) or api.Host()
    host.spec.CopyFrom(spec)
    host.generation += 1
    host.status = api.HOST_OK
    host.status_time_ms = applier.entry.stamp_ms
    applier.put_host(host)
    return log.Result(code=log.OK, generation=host.generation)


def _apply_host_status(applier: Applier) -> list[log.Result]:
    change = applier.entry.host_status
    host = read_host(applier.tables, change.name)
    if host is None:
        return [log.Result(code=log.NOT_FOUND, message=f"no host {change.name[:80]!r}")]
    if host.generation != change.generation:  # the host re-joined meanwhile: stale
        return [log.Result(code=log.FAILED_PRECONDITION,
                           message=f"host {change.name} is at generation {host.generation}, "
                                   f"not {change.generation}")]
    if change.status not in (api.HOST_OK, api.HOST_UNAVAIL):
        return [log.Result(code=log.INVALID_ARGUMENT, message=f"bad host status {change.status}")]
    if host.status != change.status:
        host.status = change.status
        host.status_time_ms = applier.entry.stamp_ms
        applier.put_host(host)
        if change.status == api.HOST_UNAVAIL:
            _mark_unknown(applier, host.spec.name)
    return [log.Result(code=log.OK, generation=host.generation)]


def _mark_unknown(applier: Applier, host_name: str) -> None:
    """The host stopped answering: what ran there is UNKWN until it reports again."""
    for job_id in host_job_ids(applier.tables, host_name):
        job = read_job(applier.tables, job_id)
        if job is not None and job.state in (api.RUN, api.USUSP, api.SSUSP):
            job.state_before_unknown = job.state
            job.state = api.UNKWN
            job.modify_time_ms = applier.entry.stamp_ms
            applier.put_job(job)


def _apply_resolve_host(applier: Applier) -> list[log.Result]:
    """The host stayed unavailable past the second timeout: requeue its UNKWN
    jobs marked rerunnable, EXIT the others (their outcome is unknown)."""
    change = applier.entry.resolve_host
    host = read_host(applier.tables, change.name)
    if host is None or host.generation != change.generation or host.status != api.HOST_UNAVAIL:
        return [log.Result(code=log.FAILED_PRECONDITION, message="the host is back or changed")]
    settled = []
    for job_id in host_job_ids(applier.tables, host.spec.name):
        job = read_job(applier.tables, job_id)
        if job is None or job.state != api.UNKWN:
            continue
        _settle_lost(applier, job, f"host {host.spec.name} lost")
        settled.append(job.id)
    return [log.Result(code=log.OK, job_ids=settled)]


def _requeue_ended(applier: Applier, job: api.Job, why: str) -> None:
    """The job's instance has ended (or is given up): its slots come back, and
    the job is pending again at the next attempt."""
    _release(applier, job)
    job.attempt += 1
    for name in ("exit_code", "end_time_ms", "start_time_ms", "kill_requested", "requeue_requested", "pid",
                 "term_signal", "exit_status_unknown", "usage", "host", "state_before_unknown"):
        job.ClearField(name)
    job.state = api.PEND
    job.pending_reason = why
    job.pending_code = api.PEND_REQUEUED
    job.modify_time_ms = applier.entry.stamp_ms
    applier.put_job(job)


def _settle_lost(applier: Applier, job: api.Job, why: str) -> None:
    """An instance whose end nobody knows: requeue if rerunnable (and not being
    killed) or if a requeue was asked, else EXIT."""
    if job.requeue_requested or (job.spec.rerunnable and not job.kill_requested):
        _requeue_ended(applier, job, f"{why}; requeued" + ("" if job.requeue_requested else " (rerunnable)"))
        return
    _release(applier, job)
    stamp = applier.entry.stamp_ms
    job.state = api.EXIT
    job.exit_status_unknown = not job.kill_requested
    job.exit_code = 128 + 9 if job.kill_requested else job.exit_code
    job.end_time_ms = stamp
    job.pending_reason = ""
    job.kill_requested = False
    job.modify_time_ms = stamp
    applier.put_job(job)


_HANDLERS: dict[str, Callable[[Applier], list[log.Result]]] = {
    "submit": _apply_submit,
    "control": _apply_control,
    "modify": _apply_modify,
    "put_queue": _apply_put_queue,
    "init": _apply_init,
    "join_host": _apply_join_host,
    "host_status": _apply_host_status,
    "dispatch": _apply_dispatch,
    "report": _apply_report,
    "reports": _apply_reports,
    "joins": _apply_joins,
    "resolve_host": _apply_resolve_host,
    "lease": _apply_lease,
    "decisions": _apply_decisions,
}


# ---------------------------------------------------------------- dumps


def canonical_dump(tables: Tables) -> Iterator[bytes]:
    """Every table in key order, one length-prefixed record per item.

    Two replicas that applied the same entries yield the same bytes.
    """
    from controller.tables import TABLES

    for table in TABLES:
        for key, value in tables.scan(table):
            yield struct.pack(">HI", len(table), len(key)) + table.encode() + key
            yield struct.pack(">I", len(value)) + value
