"""The job credential (Slurm's): what proves a request comes from inside a running allocation.

An HMAC-SHA256, under a key every replica derives from the cluster's Raft
password (which only replicas hold), over the cluster id, the job, its
attempt, its owner and the hosts of its allocation. The leader sends it with
every RunJob to each host of the allocation (never committed: it is in no
log, snapshot or event); the worker gives it to the job (XCE_JOB_CREDENTIAL).
`xce launch` presents it to its host's worker, which passes the request to
the leader only if it matches the one it holds; the leader checks it again
by recomputing it, and the target worker once more against its own copy. A
new leader recomputes the same value, so a job's credential outlives a
failover; a new attempt or another job has another one.

Pure: hmac over its arguments.
"""

from __future__ import annotations

import hashlib
import hmac

from xce.rules import feasibility
from xce.v1 import api_pb2 as api


def key_from(password: str, cluster_id: str) -> bytes:
    return hmac.new(password.encode(), f"xce job credential {cluster_id}".encode(), hashlib.sha256).digest()


def credential(key: bytes, job: api.Job) -> str:
    """The credential of the job's current attempt on its allocation ("" without a key)."""
    if not key:
        return ""
    hosts = ",".join(part.host for part in feasibility.allocation_of(job))
    message = f"{job.id}\0{job.attempt}\0{job.spec.user}\0{hosts}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def matches(key: bytes, job: api.Job, presented: str) -> bool:
    expected = credential(key, job)
    return bool(expected) and hmac.compare_digest(expected, presented)
