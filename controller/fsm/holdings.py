"""What a running attempt holds: slots and consumables on its hosts, amounts of cluster-wide counters.

`place` takes them when a DISPATCH is accepted; `release` gives back exactly
what `place` took (each host's slots and reserved consumables, as the job's
allocation records them, the base counters by the same rule on fields that
cannot change while the job runs, and the extra ones recorded in its
`holds`) when the attempt ends or is given up. Accounting errors are bugs:
an invariant stops the replica rather than clamp a count at zero.

A parallel job holds a `host_jobs` row on every host of its allocation; its
first host runs the command (`job.host`).

From entry format 18 (START_FORMAT) a placed job's start time is its
dispatch's commit time until its worker reports when it started: the attempt
counts from its allocation, as Slurm's StartTime and usage do (and LSF's
start at dispatch). So what a pass reads of a running job (backfill's
expected end, preemption's newest victims and minimum run time) holds from
its dispatch, and accounting (started, wait and run time) and fair share's
charge count the slots it held from then, whether or not its worker ever ran
the process (a job killed, refused or lost before its worker started it held
them). Before format 18, an attempt whose worker never reported a start
counted nothing, and could not be a preemption's victim.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from controller.fsm import reservations
from controller.fsm.applier import Applier
from controller.fsm.records import host_job_key, read_counter, read_host, read_queue
from controller.fsm.versions import START_FORMAT
from controller.tables import Tables
from xce.invariant import InvariantViolated, invariant
from xce.rules import feasibility, limits
from xce.v1 import api_pb2 as api


class CommittedUsage:
    """feasibility.Usage over the state tables, with the counters as this entry left them."""

    def __init__(self, tables: Tables, applier: Applier | None = None) -> None:
        self._tables = tables
        self._applier = applier
        self._hosts: dict[str, api.Host | None] = {}
        # Each host's record and the state last made of it: what comes of its spec and groups alone
        # is taken from it again (feasibility.host_state's `earlier`, whose check of the spec is
        # always true here: the record is the same object). So nothing may change a host's spec or
        # groups through a live CommittedUsage: only joins and host configuration change them, and
        # they read their records themselves.
        self._states: dict[str, tuple[api.Host, feasibility.HostState]] = {}
        self._queues: dict[str, api.Queue | None] = {}
        self._limits: dict[str, int] | None = None
        self._shared: dict[str, int] | None = None
        self._limit_defs: limits.LimitSet | None = None

    def host_record(self, name: str) -> api.Host | None:
        """The host record, read once per entry; `place` updates this same object (what it holds,
        never its spec or groups: `host` keeps what it made of those)."""
        if name not in self._hosts:
            self._hosts[name] = read_host(self._tables, name)
        return self._hosts[name]

    def host(self, name: str) -> feasibility.HostState | None:
        record = self.host_record(name)
        if record is None:
            return None
        state = feasibility.host_state(record, earlier=self._states.get(name))
        self._states[name] = (record, state)
        return state

    def reservation(self, name: str) -> api.Reservation | None:
        """An advance reservation's record (controller/fsm/reservations.py)."""
        return reservations.read(self._tables, name)

    def hosts(self) -> Iterable[tuple[str, feasibility.HostState]]:
        for _, raw in self._tables.scan("hosts"):
            record = api.Host.FromString(raw)
            yield record.spec.name, feasibility.host_state(record)

    def queue(self, name: str) -> api.Queue | None:
        if name not in self._queues:
            self._queues[name] = read_queue(self._tables, name)
        return self._queues[name]

    def counter(self, name: str) -> int:
        return self._applier.counter(name) if self._applier is not None else read_counter(self._tables, name)

    def shared(self) -> dict[str, int]:
        if self._shared is None:
            self._shared = {r.name: r.total for r in (api.SharedResource.FromString(raw)
                                                      for _, raw in self._tables.scan("shared"))}
        return self._shared

    def limit_defs(self) -> limits.LimitSet:
        if self._limit_defs is None:
            raws = self._tables.scan("limits")
            self._limit_defs = limits.LimitSet(api.Limit.FromString(raw) for _, raw in raws)
        return self._limit_defs

    def limits(self) -> dict[str, int]:
        if self._limits is None:
            queues = (api.Queue.FromString(raw) for _, raw in self._tables.scan("queues"))
            self._limits = feasibility.limits_of(queues)
        return self._limits


def place(applier: Applier, job: api.Job, hosts: Sequence[api.Host], parts: Sequence[feasibility.Allocation],
          need: feasibility.Need = feasibility.NO_NEED, limit_defs: Sequence[api.Limit] = ()) -> None:
    """DISPATCH accepted: the job runs on its hosts (the first runs the command) and holds their
    slots, what its rusage[] reserves on each, and its counters (the configured limits' among them,
    as they are now: recorded in `holds`, so a limit changed meanwhile gives back what was taken)."""
    job.state = api.RUN
    job.host = parts[0].host
    job.pending_reason = ""
    job.ClearField("pending_code")
    job.ClearField("refused_host")
    job.ClearField("preempting")
    job.ClearField("chunk_lead")  # (a job of a chunk run by hand, brun: out of it)
    job.modify_time_ms = applier.stamp_ms
    if applier.entry.format >= START_FORMAT:
        job.start_time_ms = applier.stamp_ms  # until its worker's `started` says (reports.py)
    job.ClearField("allocation")
    if len(parts) > 1 or parts[0].slots != job.spec.slots or need.host_usage:
        for part in parts:
            job.allocation.add(host=part.host, slots=part.slots, resources=dict(need.host_usage))
    job.holds.clear()
    job.holds.update(feasibility.extra_demands(job))
    job.holds.update({feasibility.shared_counter(name): amount for name, amount in need.shared_usage})
    for demand in feasibility.limit_demands(job, limit_defs, sum(p.slots for p in parts), need, len(parts)):
        job.holds[demand.counter] = demand.amount
    for name, amount in {**feasibility.base_demands(job), **job.holds}.items():
        applier.add_counter(name, amount)
    kept = job.spec.reservation
    if kept:  # (only such a job reads the reservations table: the others' dispatch pays nothing)
        reservations.taken(applier, job)
    applier.put_job(job)
    for host, part in zip(hosts, parts, strict=True):
        if kept and kept in host.rsv_free:  # its reservation's slots, counted as used since it began
            host.rsv_free[kept] -= part.slots
            invariant(host.rsv_free[kept] >= 0, f"job {job.id} takes {part.slots} slots of reservation "
                                                f"{kept} on {host.spec.name}, which keeps fewer free")
        else:
            host.slots_used += part.slots
        host.running_jobs += 1
        if need.exclusive:
            host.exclusive_job = job.id
        # The message is made only if broken: a dispatch's hot path. (A reservation may begin on a busy
        # host: then what its slots count exceeds the host until the jobs there end.)
        if host.slots_used > host.spec.slots and (
                not host.rsv_free or host.slots_used - sum(host.rsv_free.values()) > host.spec.slots):
            raise InvariantViolated(f"host {host.spec.name} over its slots: {host.slots_used} of "
                                    f"{host.spec.slots}")
        for resource, amount in need.host_usage:
            host.reserved[resource] += amount
        applier.put_host(host)
        applier.tables.put("host_jobs", host_job_key(host.spec.name, job.id), struct.pack(">i", job.attempt))


def release(applier: Applier, job: api.Job) -> None:
    """The job's current attempt gives back what it holds, on every host of its allocation (a
    suspended victim: less what it gave back already, preempt.py)."""
    given = {part.host: part for part in job.released}
    for part in feasibility.allocation_of(job):
        if part.host in given:
            back = given[part.host]
            kept = {name: amount - back.resources.get(name, 0) for name, amount in part.resources.items()}
            part = feasibility.Part(part.host, part.slots - back.slots, {n: a for n, a in kept.items() if a})
        host = read_host(applier.tables, part.host)
        # Invariants whose messages are made only if broken (each job's end passes here).
        if host is None:
            raise InvariantViolated(f"job {job.id} holds slots on {part.host!r}, which has no record")
        slots = part.slots
        if job.spec.reservation and job.spec.reservation in host.rsv_free:  # still active: back to it
            slots = reservations.give_back(applier, job, host, slots)
        if host.slots_used < slots or host.running_jobs < 1:
            raise InvariantViolated(f"job {job.id} gives back {slots} slots on {part.host}, which has "
                                    f"{host.slots_used} in use by {host.running_jobs} jobs")
        host.slots_used -= slots
        host.running_jobs -= 1
        if host.exclusive_job == job.id:
            host.exclusive_job = 0
        for resource, amount in sorted(part.resources.items()):
            left = host.reserved[resource] - amount
            invariant(left >= 0, f"job {job.id} gives back {amount} {resource} on {part.host}, which has "
                                 f"{host.reserved[resource]} reserved")
            if left:
                host.reserved[resource] = left
            else:
                del host.reserved[resource]
        applier.put_host(host)
        # In the event too: it tells the leader which host's worker to look at
        # (worker_session.route) when the job itself no longer names a host.
        applier.delete("host_jobs", host_job_key(part.host, job.id))
    for name, amount in sorted({**feasibility.base_demands(job), **job.holds}.items()):
        applier.add_counter(name, -amount)
    job.holds.clear()
    job.ClearField("released")
    job.ClearField("reservation_serial")
