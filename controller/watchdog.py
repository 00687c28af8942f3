"""The leader's heartbeat watchdog: which hosts to mark UNAVAIL, which to give up on.

Theory of operation. Every `period_s` (half the heartbeat period) while the
leader serves, `proposals` looks at the hosts: one whose current generation
missed its heartbeats for `heartbeat_timeout_s` (host_liveness.Liveness) is
proposed UNAVAIL; one this leader has seen UNAVAIL for `unknown_timeout_s`
by its monotonic clock (`unavailable_since`: from its first look at the host
UNAVAIL in this leadership) that still has UNKWN jobs, or that a restored cluster still awaits or
a job's stray instance is on (fsm/recovery.py), is given up (`resolve_host`:
its rerunnable jobs are requeued, the others end). Each change carries the generation it is
about, so a host that re-joined meanwhile is left alone by apply. The hosts
found late together go as one `host_statuses` entry once every replica
understands that kind (fsm/versions.py), else as one `host_status` entry
each. A change
is not proposed again while it is in flight.

Why not the committed `status_time_ms`: it is the wall clock of whichever
leader committed the UNAVAIL, and comparing it with this leader's wall clock
gives a host up early when either clock jumped or the two disagree (a host
cut off for 10 s, a leader 10 minutes ahead: lost at once, its rerunnable
jobs requeued while the worker, not yet fenced, still runs them). A new
leader therefore waits a full `unknown_timeout_s` again, as Liveness gives
every host a full heartbeat timeout again.

Pure: the time is passed in; the caller proposes and reports back.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from controller import fsm
from controller.host_liveness import Liveness
from controller.tables import Tables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

HostGeneration = tuple[str, int]


@dataclass(frozen=True)
class Change:
    """One proposal: the entry, and the (host, generation) pairs it is about."""

    entry: log.Entry
    hosts: tuple[HostGeneration, ...]
    what: str  # "unavailable" or "lost"


@dataclass
class Watchdog:
    liveness: Liveness
    period_s: float
    unknown_timeout_ms: int
    next_s: float = 0.0
    in_flight: set[HostGeneration] = field(default_factory=set)
    unavailable_since: dict[HostGeneration, float] = field(default_factory=dict)  # monotonic, first seen

    def due(self, now_s: float) -> bool:
        return now_s >= self.next_s

    def proposals(self, tables: Tables, now_s: float, batched: bool) -> list[Change]:
        self.next_s = now_s + self.period_s
        hosts = [api.Host.FromString(raw) for _, raw in tables.scan("hosts")]
        late = [pair for pair in self.liveness.overdue(hosts, now_s) if pair not in self.in_flight]
        changes = _unavailable(late, batched)
        down = {(h.spec.name, h.generation) for h in hosts if h.status == api.HOST_UNAVAIL}
        self.unavailable_since = {pair: self.unavailable_since.get(pair, now_s) for pair in down}
        given_up = {pair for pair, since in self.unavailable_since.items()
                    if (now_s - since) * 1000 >= self.unknown_timeout_ms}
        lost = [(h.spec.name, h.generation) for h in _lost(tables, hosts, given_up)]
        for name, generation in lost:
            if (name, generation) not in self.in_flight:
                entry = log.Entry(resolve_host=log.SetHostStatus(name=name, generation=generation))
                changes.append(Change(entry, ((name, generation),), "lost"))
        for change in changes:
            self.in_flight.update(change.hosts)
        return changes

    def settled(self, change: Change) -> None:
        self.in_flight.difference_update(change.hosts)


def _unavailable(late: list[HostGeneration], batched: bool) -> list[Change]:
    statuses = [log.SetHostStatus(name=name, generation=generation, status=api.HOST_UNAVAIL)
                for name, generation in late]
    if batched and statuses:
        entry = log.Entry(host_statuses=log.HostStatuses(changes=statuses))
        return [Change(entry, tuple(late), "unavailable")]
    return [Change(log.Entry(host_status=status), (pair,), "unavailable")
            for status, pair in zip(statuses, late, strict=True)]


def _lost(tables: Tables, hosts: Iterable[api.Host], given_up: set[HostGeneration]) -> list[api.Host]:
    """Unavailable long enough (`given_up`), with something to settle: UNKWN jobs, or a recovery
    that waits for it, or strays on it."""
    lost = []
    awaited = set(fsm.read_meta(tables).recovery.hosts)
    for host in hosts:
        if host.status != api.HOST_UNAVAIL or (host.spec.name, host.generation) not in given_up:
            continue
        name = host.spec.name
        jobs = (fsm.read_job(tables, i) for i in fsm.host_job_ids(tables, name))
        prefix = name.encode() + b"\x00"
        strays = any(key.startswith(prefix) for key, _ in itertools.islice(tables.scan("strays", prefix), 1))
        if name in awaited or strays or any(j is not None and j.state == api.UNKWN for j in jobs):
            lost.append(host)
    return lost
