"""The replicated state machine: apply(tables, index, entry) -> results.

Theory of operation. Every state change is a Raft log entry (xce.v1.Entry,
protobuf with a oneof type tag). Each replica applies the committed entries
in index order through `apply`, inside one storage transaction that the
driver commits; the applied index is written in that same transaction, so an
entry replayed after a restart (pysyncobj re-applies its journal after the
last dump) is recognised and skipped. Applying is a pure function of the
stored state and the entry: the proposer stamped the time (`stamp_ms`) and
its replica id into the entry; nothing here reads a clock, randomness or the
environment.

Two kinds of failure, kept apart:
- a request that does not validate (bad input, or the state moved since the
  leader checked it; a stale lease) is a deterministic rejection: a Result
  with a code and words, stored under its request id, identical on every
  replica;
- an entry this code cannot apply (undecodable, a kind it has no handler
  for, a format above ENTRY_FORMAT: EntryNotUnderstood) or a bug inside a
  handler (an exception, a broken invariant) raises. The driver then stops
  the replica before it applies anything else (fail-stop, as etcd panics):
  replicas running different code must never diverge silently.

Every applied entry sets the revision to its index and appends what it
changed to the bounded `events` table, for the resync stream.

The package, by concept: records (keys, readers, job ids), validation
(checks shared with the leader's pre-check), applier (writes and the event),
requests (dedupe by request id), jobs (submit, control table, modify, the end
of an instance), holdings (slots and counters a running attempt holds),
decisions (dispatch, the commit barrier, the lease), reports, hosts, cluster
(init, queues, announcements), membership, recovery (after a rollback),
retention, versions, dump.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from google.protobuf.message import DecodeError

from controller.fsm import (
    arrays,
    audit,
    chunks,
    cluster,
    decisions,
    depends,
    history,
    hosts,
    job_index,
    jobs,
    limit_config,
    loads,
    membership,
    recovery,
    reports,
    reservations,
    resources,
    shares,
    tokens,
)
from controller.fsm.applier import Applier, Derived, finish
from controller.fsm.dump import canonical_dump
from controller.fsm.holdings import CommittedUsage
from controller.fsm.records import (
    FINISHED,
    MAX_JOB_ID,
    MAX_REQUEST_ID_BYTES,
    META_KEY,
    PENDING,
    RUNNING,
    find_job,
    host_job_ids,
    host_job_key,
    job_key,
    parse_job_id,
    read_counter,
    read_host,
    read_job,
    read_meta,
    read_queue,
    read_result,
    readable_id,
    revision_key,
)
from controller.fsm.retention import EVENTS_KEPT, EVENTS_MAX_BYTES, PRUNE_PER_APPLY, REQUEST_RETENTION_MS
from controller.fsm.validation import (
    DEFAULT_MAX_SLOTS,
    DEFAULT_QUEUE,
    MAX_COMMAND_ARGS,
    MAX_QUEUE_NAME,
    MAX_STAMP_MS,
    MIN_STAMP_MS,
    check_modify,
    check_queue,
    check_queue_open,
    check_request_id,
    check_spec,
)
from controller.fsm.versions import ENTRY_FORMAT, RECOVERY_FORMAT, EntryNotUnderstood, describe
from controller.tables import Tables
from xce.host_spec import MAX_HOST_NAME, MAX_STRING, check_host_spec
from xce.invariant import InvariantViolated
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

Handler = Callable[[Applier], list[log.Result]]


def _follow_history(applier: Applier, before: api.Job | None, job: api.Job, raw: bytes) -> None:
    history.follow(applier.tables, before, job, applier.entry.format, raw)


# The state derived from the jobs, kept in step by the applier: each job write calls `follow` in
# this order (arrays before history, which forgets a job that is live again), and the end of each
# entry `settle`, before its counters are written (applier.py).
DERIVED = Derived(
    follow=(arrays.follow, _follow_history, depends.follow, shares.follow, chunks.follow),
    # A chunk's next job first: starting it writes its array's record and moves dependencies, which
    # the others then settle (and nothing they do ends a chunk's lead).
    settle=(chunks.settle, arrays.settle, depends.settle),
)

# The entry kinds this code applies: the oneof field of Entry -> its handler.
HANDLERS: Mapping[str, Handler] = {
    "submit": jobs.apply_submit,
    "control": jobs.apply_control,
    "modify": jobs.apply_modify,
    "put_queue": cluster.apply_put_queue,
    "init": cluster.apply_init,
    "announce": cluster.apply_announce,
    "join_host": hosts.apply_join_host,
    "joins": hosts.apply_joins,
    "host_status": hosts.apply_host_status,
    "host_statuses": hosts.apply_host_statuses,
    "resolve_host": hosts.apply_resolve_host,
    "dispatch": decisions.apply_dispatch,
    "lease": decisions.apply_lease,
    "decisions": decisions.apply_decisions,
    "report": reports.apply_report,
    "reports": reports.apply_reports,
    "token": tokens.apply_token,
    "member_change": membership.apply_member_change,
    "host_control": resources.apply_host_control,
    "host_loads": loads.apply_host_loads,
    "audit": audit.apply_audit,
    "job_group": limit_config.apply_job_group,
    "reservation": reservations.apply_reservation,
}


def apply(tables: Tables, index: int, data: bytes,
          handlers: Mapping[str, Handler] = HANDLERS) -> list[log.Result] | None:
    """Apply the entry at `index`; None when it was applied already.

    Raises EntryNotUnderstood (or whatever a handler's bug raises): the
    caller stops the replica, and the transaction is not committed.
    """
    meta = read_meta(tables)
    if index <= meta.applied_index:
        return None
    return _apply(tables, index, decode(index, data, handlers), meta, handlers).results


class Applied(NamedTuple):
    results: list[log.Result]
    event: log.Event  # as stored in the events table at the entry's revision


def apply_entry(tables: Tables, index: int, entry: log.Entry,
                handlers: Mapping[str, Handler] = HANDLERS) -> Applied | None:
    """apply(), for a driver that makes each entry itself and keeps no log (the simulator): the entry
    as a message (apply would decode the bytes it serialized into the same fields), and its event
    with the results (the events table has those bytes). The same checks, the same writes; a map
    field may iterate in another order than after decoding, which can change only which of several
    bad environment names or host resources a refusal names first. The entry is the apply's to
    change: do not use it afterwards."""
    meta = read_meta(tables)
    if index <= meta.applied_index:
        return None
    understood(index, entry, handlers)
    return _apply(tables, index, entry, meta, handlers)


def _apply(tables: Tables, index: int, entry: log.Entry, meta: log.Meta,
           handlers: Mapping[str, Handler]) -> Applied:
    kind = entry.WhichOneof("body") or ""
    applier = Applier(tables, index, entry, meta, DERIVED, kind)
    if not MIN_STAMP_MS <= entry.stamp_ms <= MAX_STAMP_MS:
        results = [log.Result(code=log.INVALID_ARGUMENT, message=f"stamp {entry.stamp_ms} out of range")]
        applier.entry = log.Entry()
        finish(applier, results, rejected=True)
        return Applied(results, applier.event)
    if entry.format >= RECOVERY_FORMAT:
        recovery.time_passes(applier)  # first: a dispatch stamped past the wait is the wait's end
    results = handlers[kind](applier)
    if not results:  # an invariant, its message made only if broken (every entry passes here)
        raise InvariantViolated(f"entry {index} ({kind}) applied without a result")
    if entry.HasField("audit_note"):
        audit.confirm_note(applier, results)
    finish(applier, results, rejected=False)
    return Applied(results, applier.event)


# The version of the derived tables (job_index, history): a store whose meta table records
# another is rebuilt from its jobs when opened (rebuild_derived).
DERIVED_KEY = b"derived"
DERIVED_VERSION = b"1"


def rebuild_derived(tables: Tables) -> bool:
    """Make the derived tables from the jobs table if they are of another version; True if rebuilt."""
    if tables.get("meta", DERIVED_KEY) == DERIVED_VERSION:
        return False
    job_index.rebuild(tables, (api.Job.FromString(raw) for _, raw in tables.scan("jobs")))
    history.rebuild(tables, (api.Job.FromString(raw) for _, raw in tables.scan("jobs")))
    tables.put("meta", DERIVED_KEY, DERIVED_VERSION)
    return True


def decode(index: int, data: bytes, handlers: Mapping[str, Handler] = HANDLERS) -> log.Entry:
    """The entry, if this code can apply it; else EntryNotUnderstood."""
    try:
        entry = log.Entry.FromString(data)
    except DecodeError as exc:
        raise EntryNotUnderstood(index, "undecodable", 0, f"undecodable: {exc}") from None
    understood(index, entry, handlers, data)
    return entry


def understood(index: int, entry: log.Entry, handlers: Mapping[str, Handler] = HANDLERS,
               data: bytes | None = None) -> None:
    """Raise EntryNotUnderstood unless this code can apply the entry (`data`: its bytes, if known)."""
    kind = entry.WhichOneof("body")
    if entry.format <= ENTRY_FORMAT and kind is not None and kind in handlers:
        return
    named = describe(entry.SerializeToString() if data is None else data)[0]
    if entry.format > ENTRY_FORMAT:
        raise EntryNotUnderstood(index, named, entry.format,
                                 f"format {entry.format} is newer than this code's ({ENTRY_FORMAT})")
    raise EntryNotUnderstood(index, named, entry.format or 1, "this code has no handler for the entry's kind")


__all__ = [
    "DEFAULT_MAX_SLOTS", "DEFAULT_QUEUE", "ENTRY_FORMAT", "EVENTS_KEPT", "EVENTS_MAX_BYTES", "FINISHED",
    "HANDLERS", "MAX_COMMAND_ARGS", "MAX_HOST_NAME", "MAX_JOB_ID", "MAX_QUEUE_NAME", "MAX_REQUEST_ID_BYTES",
    "MAX_STAMP_MS", "MAX_STRING", "META_KEY", "MIN_STAMP_MS", "PENDING", "PRUNE_PER_APPLY", "arrays",
    "REQUEST_RETENTION_MS", "RUNNING", "Applied", "Applier", "resources",
    "CommittedUsage", "EntryNotUnderstood", "Handler", "Tables",
    "apply", "apply_entry", "canonical_dump", "check_host_spec", "check_modify", "check_queue",
    "check_queue_open",
    "check_request_id", "check_spec", "decode", "describe", "find_job", "host_job_ids", "host_job_key",
    "job_key", "parse_job_id", "read_counter", "read_host", "read_job", "read_meta", "read_queue",
    "read_result", "readable_id", "rebuild_derived", "revision_key",
]
