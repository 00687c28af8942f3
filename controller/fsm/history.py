"""Job history: every finished job, kept past its clean period for a retention; usage totals per hour.

Theory of operation (LSF's CLEAN_PERIOD and bhist/bacct, Slurm's sacct). A
job is written to the `history` table the moment it finishes (DONE or EXIT),
and leaves it if it is requeued. The live `jobs` table keeps a finished job
for the clean period (default an hour), then `clean` deletes it there (the
deletion is an event, so the scheduler's view lets it go too). History keeps
it for the retention (default 30 days), then `prune` drops it. Lookups by id
(`find_job`) fall back to history, so `xce job` and requeue still find a
cleaned job.

Tables:
- `history`: id (8 bytes) -> Job, as it finished;
- `history_index`: b"e" finished_ms id, b"u" len user finished_ms id,
  b"q" len queue finished_ms id (values empty): history newest first per
  user, per queue or overall; b"a" array index id: a finished element by its
  array and index (ELEMENT_FORMAT), for dependency conditions;
- `acct`: hour (8 bytes) len user len queue -> UsageTotals: what the jobs
  in history that finished in that hour used. Kept in step with `history`
  (a requeued job's totals are taken back) and pruned with it.

finished_ms is the stamp of the entry that ended the job (job_index.py).
Cleaning and pruning run in `finish` only for entries of format 2 or more
(versions.py): a replica of older code would not clean, and the replicas
must not diverge. Each entry cleans and prunes at most PER_APPLY jobs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from controller.fsm import job_index
from controller.fsm.job_index import finished_ms, name_part
from controller.fsm.records import FINISHED, job_key
from controller.fsm.versions import ELEMENT_FORMAT
from controller.tables import Tables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CLEAN_PERIOD_MS = 3600 * 1000
RETENTION_MS = 30 * 24 * 3600 * 1000
HOUR_MS = 3600 * 1000
PER_APPLY = 256
# From ELEMENT_FORMAT, finished elements are keyed by array and index (b"a" array(8) index(8) id(8)):
# a replica must not find an element that another, which applied the element's end with older code,
# cannot.


def clean_period_ms(meta: log.Meta) -> int:
    return meta.clean_period_ms or CLEAN_PERIOD_MS


def retention_ms(meta: log.Meta) -> int:
    return max(meta.history_retention_ms or RETENTION_MS, clean_period_ms(meta))


def read(tables: Tables, job_id: int) -> api.Job | None:
    raw = tables.get("history", job_key(job_id))
    return None if raw is None else api.Job.FromString(raw)


def index_keys(job: api.Job, elements: bool = True) -> set[bytes]:
    tail = struct.pack(">q", finished_ms(job)) + job_key(job.id)
    found = {b"e" + tail, b"u" + name_part(job.spec.user) + tail, b"q" + name_part(job.spec.queue) + tail}
    if job.array_id and elements:
        found.add(_element_key(job.array_id, job.array_index) + job_key(job.id))
    return found


def _element_key(array_id: int, index: int) -> bytes:
    return b"a" + job_key(array_id) + struct.pack(">q", index)


def element_id(tables: Tables, array_id: int, index: int) -> int | None:
    """The id of an array's element that finished and left the live tables (from entry format
    ELEMENT_FORMAT on: what a -w condition on `17[3]` reads once it is cleaned)."""
    prefix = _element_key(array_id, index)
    for key, _ in tables.scan("history_index", prefix):
        return struct.unpack(">Q", key[-8:])[0] if key.startswith(prefix) and len(key) == 25 else None
    return None


def acct_key(job: api.Job) -> bytes:
    hour = struct.pack(">q", finished_ms(job) // HOUR_MS)
    return hour + name_part(job.spec.user) + name_part(job.spec.queue)


def usage_of(job: api.Job) -> api.UsageTotals:
    return api.UsageTotals(user=job.spec.user, queue=job.spec.queue, **dict(_counts(job)))


def _counts(job: api.Job) -> tuple[tuple[str, int], ...]:
    """The job's usage totals, each count by its name (COUNTS)."""
    started = job.start_time_ms > 0
    run_ms = max(0, job.end_time_ms - job.start_time_ms) if started else 0
    usage = job.usage
    return (("jobs", 1), ("done", int(job.state == api.DONE)), ("exited", int(job.state == api.EXIT)),
            ("started", int(started)), ("slot_ms", run_ms * max(1, job.spec.slots)),
            ("cpu_ms", round((usage.user_cpu_s + usage.system_cpu_s) * 1000)),
            ("wait_ms", max(0, job.start_time_ms - job.submit_time_ms) if started else 0), ("run_ms", run_ms))


COUNTS = ("jobs", "done", "exited", "started", "slot_ms", "cpu_ms", "wait_ms", "run_ms")


def add_totals(into: api.UsageTotals, more: api.UsageTotals, sign: int = 1) -> None:
    _add_counts(into, ((name, getattr(more, name)) for name in COUNTS), sign)


def _add_counts(into: api.UsageTotals, counts: Iterable[tuple[str, int]], sign: int) -> None:
    for name, amount in counts:
        if amount:  # most are 0 for a job (cpu, exits...), and a read and a write of each cost more
            setattr(into, name, getattr(into, name) + sign * amount)


def follow(tables: Tables, before: api.Job | None, job: api.Job, entry_format: int = 1,
           raw: bytes | None = None) -> None:
    """After a write of `job` to the live table (`before`: what it replaced there):
    a finished job is (re)written to history, a job that is live again leaves it.
    `raw`: the job as written, if the caller has it."""
    if job.state in FINISHED:
        _put(tables, read(tables, job.id) if before is not None and before.state in FINISHED else None, job,
             elements=entry_format >= ELEMENT_FORMAT, raw=raw)
    elif before is None or before.state in FINISHED:
        old = read(tables, job.id)  # requeued: from the live table, or back from history
        if old is not None:
            _remove(tables, old)


def _put(tables: Tables, old: api.Job | None, job: api.Job, elements: bool = False,
         raw: bytes | None = None) -> None:
    if old is not None:
        _remove(tables, old)
    tables.put("history", job_key(job.id), job.SerializeToString(deterministic=True) if raw is None else raw)
    for key in sorted(index_keys(job, elements)):
        tables.put("history_index", key, b"")
    _account(tables, job, +1)


def _remove(tables: Tables, old: api.Job) -> None:
    tables.delete("history", job_key(old.id))
    for key in sorted(index_keys(old)):
        tables.delete("history_index", key)
    _account(tables, old, -1)


def _account(tables: Tables, job: api.Job, sign: int) -> None:
    if job.spec.HasField("array"):
        return  # an array's record ran nothing: its elements are counted, each as a job
    key = acct_key(job)
    raw = tables.get("acct", key)
    if raw is None and sign < 0:
        return  # the hour's totals were pruned already (they go a little before its jobs)
    totals = api.UsageTotals(user=job.spec.user, queue=job.spec.queue) if raw is None \
        else api.UsageTotals.FromString(raw)
    _add_counts(totals, _counts(job), sign)  # (add_totals of usage_of, without making its message)
    if totals.jobs == 0:
        tables.delete("acct", key)
    else:
        tables.put("acct", key, totals.SerializeToString(deterministic=True))


def clean(tables: Tables, meta: log.Meta, stamp_ms: int) -> list[int]:
    """Ids of live finished jobs past the clean period, at most PER_APPLY, oldest first:
    the caller deletes them from the live table (they stay in history)."""
    return job_index.finished_before(tables, stamp_ms - clean_period_ms(meta), PER_APPLY)


def prune(tables: Tables, meta: log.Meta, stamp_ms: int) -> None:
    """Drop history and usage totals older than the retention, at most PER_APPLY of each."""
    cutoff = stamp_ms - retention_ms(meta)
    if _nothing_to_prune(tables, cutoff):
        return  # (most entries: one look at each)
    doomed: list[int] = []
    for key, _ in tables.scan("history_index", b"e"):
        if not key.startswith(b"e") or len(doomed) >= PER_APPLY or struct.unpack(">q", key[1:9])[0] > cutoff:
            break
        doomed.append(struct.unpack(">Q", key[9:])[0])
    for job_id in doomed:
        old = read(tables, job_id)
        if old is not None and tables.get("jobs", job_key(job_id)) is None:
            tables.delete("history", job_key(old.id))
            for key in sorted(index_keys(old)):
                tables.delete("history_index", key)
    # Totals go with their hour once the whole hour is past the retention.
    stale: list[bytes] = []
    for key, _ in tables.scan("acct"):
        if len(stale) >= PER_APPLY or (struct.unpack(">q", key[:8])[0] + 1) * HOUR_MS > cutoff:
            break
        stale.append(key)
    for key in stale:
        tables.delete("acct", key)


def _nothing_to_prune(tables: Tables, cutoff: int) -> bool:
    """Whether neither the oldest end in history nor the oldest hour of totals is past the retention
    (the loops of prune would stop at their first key)."""
    oldest = tables.first("history_index", b"e")
    if oldest is not None and oldest[0].startswith(b"e") and struct.unpack(">q", oldest[0][1:9])[0] <= cutoff:
        return False
    hour = tables.first("acct")
    return hour is None or (struct.unpack(">q", hour[0][:8])[0] + 1) * HOUR_MS > cutoff


def newest_first(tables: Tables, key_prefix: bytes, before: bytes | None = None) -> Iterator[tuple[int, int]]:
    """(finished_ms, id) under one history_index prefix, newest first, strictly before
    the key suffix `before` (finished_ms and id, 16 bytes) when given."""
    start = key_prefix + (before if before is not None else b"\xff" * 17)
    for key, _ in tables.scan_back("history_index", start):
        if not key.startswith(key_prefix):
            return
        if before is not None and key == key_prefix + before:
            continue
        tail = key[len(key_prefix):]
        if len(tail) != 16:
            return
        when, job_id = struct.unpack(">qQ", tail)
        yield when, job_id


def rebuild(tables: Tables, live: Iterable[api.Job]) -> None:
    """History of a store written before it existed: its finished live jobs."""
    for job in live:
        if job.state in FINISHED and read(tables, job.id) is None:
            _put(tables, None, job)
