"""After a rollback: no job runs twice when the state forgot a dispatch.

Theory of operation. A state restored from a backup (`xce snapshot restore`)
or forced from a lone survivor (`--force-new-cluster`) may lack dispatches
the old cluster committed after it: a job it holds as pending may be running
on some host. Dispatching it again would run it twice. So `prepare`, run by
those commands on the state before the new cluster starts (offline, the same
on every replica, from the same inputs), records a Recovery in the meta:
- every host the state knows is awaited: none of the cluster's jobs is
  dispatched until each has joined again (its join says which instances it
  runs) or has been given up (resolve_host, after the hosts' two timeouts);
- and not before `wait_ms` after the first entry the new cluster applies:
  a worker that never comes back (or one the backup did not know) has been
  cut off from any serving leader at least that long, so its worker-side
  fence (`fence_s`, which is `wait_ms`) has killed its rerunnable jobs;
- jobs that were running are UNKWN until their host joins and reports them
  (the worker then adopts or reports an instance, and never starts one: a
  RunJob of an UNKWN job only asks after it).
The count of what is awaited is the counter RECOVERY_COUNTER; while it is
above zero, xce/rules/feasibility.py refuses every DISPATCH, forced ones included
(the planner shows PEND_RECOVERING).

A join (from entry format 3) lists the instances its worker runs. While a
recovery is on, one that the state does not hold on that host at that
attempt, of a job that has not finished, is a stray: the job keeps that host
in `stray_hosts` (the `strays` table, host NUL job key -> attempt, indexes it
by host) and its next run takes a later attempt (`next_attempt`; a pending
job moves to it at once), until the worker reports the instance ended (its
session kills it: the state does not want it), joins again without it, or
the host is given up (the watchdog gives up an awaited host, or one with
strays, like a host with UNKWN jobs). A job with strays is never dispatched
(PEND_STRAY_INSTANCE). Outside a recovery a join's list marks nothing: a
worker could otherwise hold any pending job back by naming it; what runs
that the state does not want is killed by the session, as always. An
attempt far beyond the job's own is ignored (MAX_AHEAD).

Apply reads no clock: time is the entries' stamps.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from controller.fsm.applier import Applier, Derived
from controller.fsm.records import (
    FINISHED,
    META_KEY,
    PENDING,
    RUNNING,
    counter_value,
    job_key,
    read_host,
    read_job,
    read_meta,
)
from controller.tables import Tables
from xce.rules import feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

RECOVERY_COUNTER = feasibility.RECOVERY_COUNTER
MAX_AHEAD = 1000  # how far past the job's attempt a stray's may be (requeues since the backup)
LEASE_EPOCH_JUMP = 1000  # past any epoch the old cluster reached after the backup, in all likelihood


def stray_key(host: str, job_id: int) -> bytes:
    return host.encode() + b"\x00" + job_key(job_id)


def prepare(tables: Tables, cluster_id: str, membership: Sequence[api.Member], incarnation: str,
            wait_ms: int, why: str, capabilities: log.Capabilities, derived: Derived) -> int:
    """Make a restored or forced state (of cluster `cluster_id` from now on, with `membership`, whose
    replicas run code of `capabilities`) wait for its hosts (module docstring); how many things it
    awaits. `derived`: the state machine's (fsm.DERIVED), kept in step with the jobs written."""
    meta = read_meta(tables)
    applier = Applier(tables, meta.applied_index, log.Entry(), meta, derived)  # jobs with their indexes
    hosts = sorted(key.decode() for key, _ in tables.scan("hosts"))
    for name in hosts:
        host = read_host(tables, name)
        if host is not None and host.status != api.HOST_OK:
            # Timed from the new cluster's first leader (host_liveness.py), not from the backup's
            # time: unavailable long ago, it would be given up at once, its jobs with it.
            host.status = api.HOST_OK
            applier.put_host(host)
    for _, raw in list(tables.scan("jobs")):
        job = api.Job.FromString(raw)
        if job.state in RUNNING and job.state != api.UNKWN:
            job.state_before_unknown = job.state
            job.state = api.UNKWN
            applier.put_job(job)
    meta.cluster_id = cluster_id
    meta.incarnation = incarnation
    meta.recovery.CopyFrom(log.Recovery(from_revision=meta.applied_index, hosts=hosts, wait_ms=wait_ms,
                                        why=why))
    del meta.membership[:]
    meta.membership.extend(membership)
    # The replicas run the restoring code: recorded as announced, so the first leader proposes
    # format 3 (joins that list what runs) from its first entry; they announce again as they run.
    meta.members.clear()
    for member in membership:
        meta.members[member.id].CopyFrom(capabilities)
    meta.lease_holder = ""  # a scheduler takes a new lease (a new epoch fences what it sent before)
    meta.lease_expires_ms = 0
    meta.lease_epoch += LEASE_EPOCH_JUMP
    waiting = len(hosts) + (1 if wait_ms else 0)
    if waiting:
        tables.put("counters", RECOVERY_COUNTER.encode(), counter_value(waiting))
    else:
        tables.delete("counters", RECOVERY_COUNTER.encode())
    tables.put("meta", META_KEY, meta.SerializeToString(deterministic=True))
    return waiting


def _awaited_done(applier: Applier) -> None:
    applier.add_counter(RECOVERY_COUNTER, -1)


def host_joined(applier: Applier, spec: api.HostSpec) -> None:
    """A join (format 3): the host is no longer awaited; while a recovery is on, its strays are what
    it runs that the state does not hold there."""
    meta = applier.meta
    recovering = applier.counter(RECOVERY_COUNTER) > 0
    if spec.name in meta.recovery.hosts:
        meta.recovery.hosts.remove(spec.name)
        _awaited_done(applier)
    running = {(i.job_id, i.attempt) for i in spec.running}
    prefix = spec.name.encode() + b"\x00"
    for key, _ in list(applier.tables.scan("strays", prefix)):
        if not key.startswith(prefix):
            break
        (job_id,) = struct.unpack(">Q", key[len(prefix):])
        if not any(j == job_id for j, _ in running):  # it ended while its worker was away
            _clear(applier, spec.name, job_id)
    if not recovering:
        return
    for job_id, attempt in sorted(running):
        job = read_job(applier.tables, job_id)
        if job is None or job.state in FINISHED or not 0 <= attempt <= job.attempt + MAX_AHEAD:
            continue
        if job.host == spec.name and job.attempt == attempt and job.state in RUNNING:
            continue  # the instance the state holds: adopted (its worker reports it)
        if spec.name not in job.stray_hosts:
            job.stray_hosts.append(spec.name)
        if job.state in PENDING and job.attempt <= attempt:
            job.attempt = attempt + 1  # its next run is a new attempt: the stray's number is taken
        job.next_attempt = max(job.next_attempt, attempt + 1)
        applier.put_job(job)
        applier.tables.put("strays", stray_key(spec.name, job_id), struct.pack(">i", attempt))


def instance_ended(applier: Applier, host: str, job_id: int, attempt: int) -> bool:
    """The worker of `host` reported that instance ended: if it was a stray, it is one no more
    (True: the job's record may have changed)."""
    raw = applier.tables.get("strays", stray_key(host, job_id))
    if raw is not None and struct.unpack(">i", raw)[0] == attempt:
        _clear(applier, host, job_id)
        return True
    return False


def host_resolved(applier: Applier, host: str) -> None:
    """The host was given up (lost for good): it is no longer awaited, and what it ran is gone or,
    for rerunnable jobs, was killed by its fence."""
    meta = applier.meta
    if host in meta.recovery.hosts:
        meta.recovery.hosts.remove(host)
        _awaited_done(applier)
    prefix = host.encode() + b"\x00"
    for key, _ in list(applier.tables.scan("strays", prefix)):
        if not key.startswith(prefix):
            break
        _clear(applier, host, struct.unpack(">Q", key[len(prefix):])[0])


def _clear(applier: Applier, host: str, job_id: int) -> None:
    applier.tables.delete("strays", stray_key(host, job_id))
    job = read_job(applier.tables, job_id)
    if job is not None and host in job.stray_hosts:
        job.stray_hosts.remove(host)
        applier.put_job(job)


def time_passes(applier: Applier) -> None:
    """At the end of every entry (format 3): the wait starts with the first entry applied after the
    rollback and ends with the first one stamped past it."""
    recovery = applier.meta.recovery
    if not recovery.wait_ms:
        return
    if not recovery.until_ms:
        recovery.until_ms = applier.stamp_ms + recovery.wait_ms
    elif applier.stamp_ms >= recovery.until_ms:
        recovery.wait_ms = 0
        _awaited_done(applier)
