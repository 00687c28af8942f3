"""Secondary indexes of the live jobs: by state, user and queue; finished ones in the order they are cleaned.

Keys of the `job_index` table (values empty); each ends in the job's 8-byte
id, so a scan of one prefix yields job ids in order (the order of ListJobs):

    b"s" state(1)          id    -- every live job, by state
    b"u" len(2) user       id
    b"q" len(2) queue      id
    b"f" finished_ms(8)    id    -- finished jobs, by when the cluster recorded the end
    b"a" array(8) index(8) id    -- an array's element jobs, by index (arrays.py)
    b"w" job(8)            id    -- a pending job whose -w condition reads `job` (depends.py)

Names are length-prefixed, so no name is a prefix of another's keys. The
index is derived from the jobs table alone: `update` follows every job write
(Applier.put_job, delete_job), and `rebuild` makes it from scratch for a
store written before it existed (store.py, at open). `finished_ms` is the
stamp of the entry that ended the job (its modify time: a finished job is
never modified), not the worker's end time, so a worker's clock cannot
reorder the clean-up.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator

from controller.fsm.records import FINISHED, PENDING, job_key
from controller.tables import Tables
from xce.rules import dependency_conditions
from xce.v1 import api_pb2 as api

TABLE = "job_index"
# The fields ListJobs can look up through the index (job_filter's names).
INDEXED = ("state", "user", "queue")


@functools.lru_cache(maxsize=4096)
def name_part(name: str) -> bytes:
    # Cached: every job write encodes its user and queue, for its old and new keys both.
    raw = name.encode()
    return struct.pack(">H", len(raw)) + raw


def prefix(field: str, value: str) -> bytes:
    """The key prefix of the jobs whose `field` is `value` (a state by its name)."""
    if field == "state":
        return b"s" + bytes([api.JobState.Value(value)])
    return (b"u" if field == "user" else b"q") + name_part(value)


def finished_ms(job: api.Job) -> int:
    return job.modify_time_ms


def keys(job: api.Job) -> set[bytes]:
    tail, spec = job_key(job.id), job.spec
    found = _state_keys(job, tail)
    found.add(b"u" + name_part(spec.user) + tail)
    found.add(b"q" + name_part(spec.queue) + tail)
    if job.array_id:
        found.add(array_prefix(job.array_id) + struct.pack(">q", job.array_index) + tail)
    return found


def _state_keys(job: api.Job, tail: bytes) -> set[bytes]:
    """The keys that follow the job's state (and its end time, and its -w condition while pending)."""
    state = job.state
    found = {b"s" + bytes((state,)) + tail}
    if state in FINISHED:
        found.add(b"f" + struct.pack(">q", finished_ms(job)) + tail)
    if state in PENDING:
        depend_text = job.spec.depend
        if depend_text:
            refs = dependency_conditions.references_of(depend_text)
            found.update(b"w" + job_key(ref) + tail for ref in refs)
    return found


def dependents(tables: Tables, job_id: int) -> list[int]:
    """The pending jobs whose -w condition reads `job_id`, in order."""
    return list(ids(tables, b"w" + job_key(job_id)))


def any_waiting(tables: Tables) -> bool:
    """Whether any pending job has a -w condition (some job has dependents)."""
    first = tables.first(TABLE, b"w")
    return first is not None and first[0].startswith(b"w")


def array_prefix(array_id: int) -> bytes:
    """The keys of an array's element jobs: b"a" array(8) index(8) id(8)."""
    return b"a" + job_key(array_id)


def state_key(state: int, job_id: int) -> bytes:
    return b"s" + bytes([state]) + job_key(job_id)


def update(tables: Tables, before: api.Job | None, after: api.Job | None) -> None:
    if before is None or after is None or before.id != after.id or before.array_id != after.array_id \
            or before.array_index != after.array_index or before.spec.user != after.spec.user \
            or before.spec.queue != after.spec.queue:
        old = keys(before) if before is not None else set()
        new = keys(after) if after is not None else set()
    else:  # most writes: only the keys that follow the state can differ (each prefix is a key family)
        if before.state == after.state and before.state not in FINISHED \
                and (before.state not in PENDING or before.spec.depend == after.spec.depend):
            return  # a start report, a usage sample: no indexed field moved
        tail = job_key(after.id)
        old, new = _state_keys(before, tail), _state_keys(after, tail)
    for key in sorted(old - new):
        tables.delete(TABLE, key)
    for key in sorted(new - old):
        tables.put(TABLE, key, b"")


def ids(tables: Tables, key_prefix: bytes, after_id: int = 0) -> Iterator[int]:
    """Ids of the jobs under one prefix, in order, from after_id + 1."""
    for key, _ in tables.scan(TABLE, key_prefix + job_key(after_id + 1)):
        if not key.startswith(key_prefix) or len(key) != len(key_prefix) + 8:
            return
        yield struct.unpack(">Q", key[-8:])[0]


def finished_before(tables: Tables, cutoff_ms: int, limit: int) -> list[int]:
    """Up to `limit` ids of finished jobs whose end was recorded at or before cutoff_ms, oldest first."""
    found: list[int] = []
    first = tables.first(TABLE, b"f")
    if first is None or not first[0].startswith(b"f") or struct.unpack(">q", first[0][1:9])[0] > cutoff_ms:
        return found  # (most entries: one look)
    for key, _ in tables.scan(TABLE, b"f"):
        if not key.startswith(b"f") or len(found) >= limit \
                or struct.unpack(">q", key[1:9])[0] > cutoff_ms:
            break
        found.append(struct.unpack(">Q", key[9:])[0])
    return found


def rebuild(tables: Tables, jobs: Iterable[api.Job]) -> None:
    doomed = [key for key, _ in tables.scan(TABLE)]
    for key in doomed:
        tables.delete(TABLE, key)
    for job in jobs:
        update(tables, None, job)
