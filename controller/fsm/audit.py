"""The audit trail (G6): one row per audited request, written by apply.

An audited request carries an AuditRequest, its note: a job write in the request itself (a submit
batch: one note per request, however many jobs or array elements it makes), any other write in its
entry (`audit_note`, entry format 27). The leader fills the note in (action, parameters, how the
request came, the caller's key), then either proposes the request, whose apply writes the row beside
its changes (CONFIRMED, with the result apply gave it), or, for a dry run and for a request it
refused, an `audit` entry that writes only the row (DRY_RUN, REFUSED). The row's time and principal
are the entry's. Rows are keyed by revision and their order in the entry, so the trail reads in
commit order; the newest AUDIT_KEPT are kept, and apart from them the newest DRY_RUNS_KEPT dry runs
and (from entry format 27, when any client's denied write leaves a row) the newest REFUSED_KEPT
refusals: a caller denied in a loop pushes out only refusals, never a row of what was done.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterator

from controller.fsm.applier import Applier
from controller.fsm.requests import guarded
from controller.fsm.versions import AUDIT_FORMAT, FOREIGN_AUDIT_FORMAT, KEYED_AUDIT_FORMAT
from controller.tables import Tables
from xce.errors import invalid
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

AUDIT_KEPT = 50_000    # confirmed and refused rows kept; the oldest go first
DRY_RUNS_KEPT = 10_000  # dry-run rows, kept apart: dry runs cost nothing, and must not push the rest out
REFUSED_KEPT = 10_000  # refused rows, kept apart from format 27: anyone may be refused, as often as they like
PRUNE_PER_ROW = 4      # rows pruned at most per row written: bounded work per apply
MAX_PARAMS = 2048      # characters of a request's parameters kept in its row (a row is at most ~3 KB)
MAX_VIA = 32
MAX_KEY_DESCRIPTION = 200  # characters of the key's description a row keeps (it is repeated in every row)
ACTED, DRY, REFUSED = b"a", b"d", b"r"  # the key spaces of the table
# The entry kinds whose row is the entry's `audit_note` (one request each; the job writes carry their
# notes in their requests).
NOTED_KINDS = frozenset({"put_queue", "token", "member_change", "host_control", "job_group", "reservation",
                         "dispatch"})


def key(revision: int, seq: int) -> bytes:
    return struct.pack(">QH", revision, seq)


def write(applier: Applier, record: api.AuditRecord, by: log.Principal) -> None:
    """Store `record` with the entry's revision, time and `by`."""
    row = api.AuditRecord()
    row.CopyFrom(record)
    row.revision = applier.index
    row.time_ms = applier.stamp_ms
    row.principal, row.role = by.name, by.role
    space = DRY if row.outcome == api.DRY_RUN else ACTED
    if row.outcome == api.REFUSED and applier.entry.format >= KEYED_AUDIT_FORMAT:
        space = REFUSED
    applier.tables.put("audit", space + key(applier.index, applier.audit_rows),
                       row.SerializeToString(deterministic=True))
    applier.audit_rows += 1
    meta = applier.meta
    if space == DRY:
        meta.audit_dry_rows = _prune(applier, DRY, meta.audit_dry_rows + 1, DRY_RUNS_KEPT)
    elif space == REFUSED:
        meta.audit_refused_rows = _prune(applier, REFUSED, meta.audit_refused_rows + 1, REFUSED_KEPT)
    else:
        meta.audit_rows = _prune(applier, ACTED, meta.audit_rows + 1, AUDIT_KEPT)


def _prune(applier: Applier, space: bytes, rows: int, kept: int) -> int:
    """The oldest rows of `space` past `kept` (a bounded number each time); the rows left."""
    if rows <= kept:
        return rows
    doomed: list[bytes] = []
    for k, _ in applier.tables.scan("audit", space):
        if not k.startswith(space) or len(doomed) >= min(PRUNE_PER_ROW, rows - kept):
            break
        doomed.append(k)
    for old in doomed:
        applier.tables.delete("audit", old)
    return rows - len(doomed)


def audited(applier: Applier, request_id: str, audit: api.AuditRequest | None, by: log.Principal | None,
            body: Callable[[], log.Result]) -> log.Result:
    """`guarded(request_id, body)`, and the request's CONFIRMED row if it asked for one and ran now (a
    repeat of a request id returns the first result and writes nothing)."""
    ran = [False]

    def run() -> log.Result:
        ran[0] = True
        return body()

    result = guarded(request_id, applier, run)
    if ran[0] and audit is not None and by is not None and applier.entry.format >= AUDIT_FORMAT:
        write(applier, confirmed(audit, result, applier.entry.format), by)
    return result


def confirm_note(applier: Applier, results: list[log.Result]) -> None:
    """The CONFIRMED row of a write whose entry carries its note (entry format 27: queues, hosts,
    tokens, members, ...), if its request ran now (a repeat of a request id writes nothing)."""
    entry = applier.entry
    if entry.format < KEYED_AUDIT_FORMAT or applier.kind not in NOTED_KINDS or not applier.requests_run \
            or not entry.HasField("audit_note") or not entry.HasField("by"):
        return
    write(applier, confirmed(entry.audit_note, results[0], entry.format), entry.by)


def confirmed(note: api.AuditRequest, result: log.Result, entry_format: int) -> api.AuditRecord:
    """The CONFIRMED row of a request that ran: its note, and what apply made of it. The key is
    named from entry format 27 (code before it copied the note's first four fields only)."""
    words = "OK" if result.code == log.OK else f"{log.Code.Name(result.code)}: {result.message}"
    record = api.AuditRecord(via=note.via, action=note.action, params=note.params, outcome=api.CONFIRMED,
                             result=words)
    if entry_format >= KEYED_AUDIT_FORMAT:
        record.key_id, record.key_description = note.key_id, note.key_description
    return record


def apply_audit(applier: Applier) -> list[log.Result]:
    """A dry run's or a refusal's row alone; or (entry format 25) the gateway's row of an action on
    another of its clusters, in any outcome."""
    entry = applier.entry
    record = entry.audit.record
    outcomes: tuple[api.AuditOutcome, ...] = (api.DRY_RUN, api.REFUSED)
    if record.cluster and entry.format >= FOREIGN_AUDIT_FORMAT:
        outcomes += (api.CONFIRMED,)
    if record.outcome not in outcomes or not entry.HasField("by"):
        return [log.Result(code=log.INVALID_ARGUMENT, message="an audit entry is a dry run or a refusal (or "
                                                              "another cluster's row), with its principal")]
    write(applier, record, entry.by)
    return [log.Result(code=log.OK)]


def read(tables: Tables, principal: str, since_ms: int, page_size: int, page_token: str
         ) -> tuple[list[api.AuditRecord], str]:
    """Rows newest first (of `principal` only, if given), after `page_token`; the next page's token."""
    try:
        start = bytes.fromhex(page_token) if page_token else b"\xff" * 10
    except ValueError:
        raise invalid(f"bad page token {page_token[:40]!r}") from None
    if len(start) != 10:
        raise invalid(f"bad page token {page_token[:40]!r}")
    rows: list[api.AuditRecord] = []
    last = b""
    spaces = (_back(tables, space, start) for space in (ACTED, DRY, REFUSED))
    for k, raw in heapq.merge(*spaces, reverse=True):
        if page_token and k == start:
            continue  # the last row of the page before
        record = api.AuditRecord.FromString(raw)
        if since_ms and record.time_ms < since_ms:
            break
        last = k
        if principal and record.principal != principal:
            continue
        rows.append(record)
        if len(rows) >= page_size:
            return rows, last.hex()
    return rows, ""


def _back(tables: Tables, space: bytes, start: bytes) -> Iterator[tuple[bytes, bytes]]:
    """One key space's rows at or before `start`, newest first, keyed without the space."""
    for k, raw in tables.scan_back("audit", space + start):
        if not k.startswith(space):
            return
        yield k[len(space):], raw
