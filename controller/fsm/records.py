"""Keys and record readers of the state tables, and job ids.

Tables (controller/tables.py names them): `meta` (one Meta under META_KEY),
`jobs` (id as 8 bytes big-endian -> Job), `queues` and `hosts` (name ->
record), `host_jobs` (host NUL job key -> attempt: jobs whose current attempt
holds slots there), `counters` (name -> used amount, 8 bytes signed),
`requests` and `request_expiry` (dedupe), `events` (revision -> Event),
`tokens` (tokens.py), `job_index` (job_index.py), `history`, `history_index`
and `acct` (history.py).
"""

from __future__ import annotations

import functools
import struct
import time

from controller.tables import Tables
from xce.errors import ServiceError
from xce.host_spec import MAX_HOST_NAME
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

META_KEY = b"meta"
MAX_JOB_ID = 1 << 63
MAX_REQUEST_ID_BYTES = 256

FINISHED = (api.DONE, api.EXIT)
PENDING = (api.PEND, api.PSUSP)
RUNNING = (api.RUN, api.USUSP, api.SSUSP, api.UNKWN)


def job_key(job_id: int) -> bytes:
    return struct.pack(">Q", job_id)


def revision_key(revision: int) -> bytes:
    return struct.pack(">Q", revision)


def host_job_key(host: str, job_id: int) -> bytes:
    return host.encode() + b"\x00" + job_key(job_id)


def read_meta(tables: Tables) -> log.Meta:
    meta = log.Meta()
    raw = tables.get("meta", META_KEY)
    if raw is not None:
        meta.ParseFromString(raw)
    return meta


def read_job(tables: Tables, job_id: int) -> api.Job | None:
    raw = tables.get("jobs", job_key(job_id))
    return None if raw is None else api.Job.FromString(raw)


def read_queue(tables: Tables, name: str) -> api.Queue | None:
    raw = tables.get("queues", name.encode())
    return None if raw is None else api.Queue.FromString(raw)


def read_host(tables: Tables, name: str) -> api.Host | None:
    raw = tables.get("hosts", name.encode()) if name and len(name) <= MAX_HOST_NAME else None
    return None if raw is None else api.Host.FromString(raw)


def host_at(tables: Tables, name: str, generation: int) -> api.Host | log.Result:
    """The host's record if it is at that generation; else the refusal (no such host, or it
    re-joined meanwhile: what the change was about is stale)."""
    host = read_host(tables, name)
    if host is None:
        return log.Result(code=log.NOT_FOUND, message=f"no host {name[:80]!r}")
    if host.generation != generation:
        return log.Result(code=log.FAILED_PRECONDITION,
                          message=f"host {name} is at generation {host.generation}, not {generation}")
    return host


def read_counter(tables: Tables, name: str) -> int:
    raw = tables.get("counters", name.encode())
    return 0 if raw is None else int(struct.unpack(">q", raw)[0])


def next_attempt(job: api.Job) -> int:
    """The attempt a requeued job runs as: past the current one and any a stray instance holds."""
    return max(job.attempt + 1, job.next_attempt)


def counter_value(amount: int) -> bytes:
    return struct.pack(">q", amount)


def read_result(tables: Tables, request_id: str) -> log.Result | None:
    if not request_id or len(request_id.encode()) > MAX_REQUEST_ID_BYTES:
        return None
    raw = tables.get("requests", request_id.encode())
    return None if raw is None else log.Result.FromString(raw)


def readable_id(cluster_id: str, proposer: int, stamp_ms: int, seq: int) -> str:
    return f"{_readable_prefix(cluster_id, proposer, stamp_ms // 1000)}-{seq}"


@functools.lru_cache(maxsize=16)
def _readable_prefix(cluster_id: str, proposer: int, stamp_s: int) -> str:
    # Every job of an entry shares it, and every entry of the same second (keyed by the second, not
    # the millisecond: each small submit's entry formatted it again); formatting the time was a
    # sixth of a large submit's apply. From the stamp's whole seconds by time.gmtime (a
    # conversion; no clock is read): the text a UTC datetime's strftime gave over the whole stamp
    # range (test_unit_fsm), in a third of the time.
    return f"{cluster_id}-{proposer}-{time.strftime('%Y%m%d%H%M%S', time.gmtime(stamp_s))}"


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdecimal() and len(text) <= 19 and int(text) < MAX_JOB_ID


def parse_job_id(text: str) -> int:
    """The numeric id inside either form; raises ServiceError for neither."""
    text = text.strip()
    if _is_number(text):
        return int(text)
    seq = text.rsplit("-", 1)[-1]
    if "-" in text and _is_number(seq):
        return int(seq)
    raise ServiceError(log.INVALID_ARGUMENT,
                       f"not a job id: {text[:80]!r} (a number or cluster-replica-time-seq)")


def find_job(tables: Tables, text: str, in_history: bool = True) -> api.Job:
    """A job by either form of id: live, or else (in_history) in history (history.py). Apply
    looks in history only from entry format 2, when cleaning began (jobs.py)."""
    job_id = parse_job_id(text)
    job = read_job(tables, job_id)
    if job is None and in_history:
        raw = tables.get("history", job_key(job_id))
        job = None if raw is None else api.Job.FromString(raw)
    if job is None or (not text.strip().isdigit() and job.readable_id != text.strip()):
        raise ServiceError(log.NOT_FOUND, f"no job {text}")
    return job


def host_job_ids(tables: Tables, host: str) -> list[int]:
    """Jobs whose current attempt holds slots on `host`."""
    prefix = host.encode() + b"\x00"
    ids = []
    for key, _ in tables.scan("host_jobs", prefix):
        if not key.startswith(prefix):
            break
        ids.append(struct.unpack(">Q", key[len(prefix):])[0])
    return ids
