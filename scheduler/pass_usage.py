"""What one pass has handed out: feasibility.Usage as the view shows it, plus the pass's placements.

Theory of operation. A pass counts, as it places jobs, what it has already
taken on each host (slots, reserved consumables) and cluster-wide (limit
and license counters), so that one pass never over-commits a host or passes
a limit: every check of xce/rules/feasibility.py reads this usage. The hosts'
states may be lent by the caller (scheduler/view.py keeps them between
passes): the pass changes them in place and gives them back as they were.
Every change of a host's free slots is told to the pass's HostIndex.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from scheduler.host_index import HostIndex
from xce.rules import feasibility, limits
from xce.v1 import api_pb2 as api


class PassUsage:
    """feasibility.Usage as the view shows it, plus this pass's own placements."""

    def __init__(self, hosts: Sequence[api.Host], queues: Mapping[str, api.Queue],
                 counters: Mapping[str, int], shared: Mapping[str, int] | None = None,
                 limit_defs: Sequence[api.Limit] = (),
                 states: Mapping[str, feasibility.HostState] | None = None,
                 lent: dict[str, feasibility.HostState] | None = None) -> None:
        """`states`: the hosts' states, made of `hosts` if not given; `lent`: the same, changed in place
        by the pass's placements until give_back() (copying a thousand states cost more than a pass
        that places one job)."""
        self.states = lent if lent is not None else dict(states) if states is not None else {
            h.spec.name: feasibility.host_state(h, load=True) for h in hosts}
        self._lent: dict[str, feasibility.HostState] | None = {} if lent is not None else None
        self._queues = queues
        self._counters = dict(counters)
        self._limits = feasibility.limits_of(queues.values())
        self._shared = dict(shared or {})
        self._limit_defs = limits.LimitSet(limit_defs)

    def give_back(self) -> None:
        """The lent states as they were lent."""
        if self._lent:
            self.states.update(self._lent)
            self._lent.clear()

    def _put(self, name: str, state: feasibility.HostState) -> None:
        if self._lent is not None and name not in self._lent:
            self._lent[name] = self.states[name]
        self.states[name] = state

    def host(self, name: str) -> feasibility.HostState | None:
        return self.states.get(name)

    def hosts(self) -> Iterable[tuple[str, feasibility.HostState]]:
        return sorted(self.states.items())

    def queue(self, name: str) -> api.Queue | None:
        return self._queues.get(name)

    def counter(self, name: str) -> int:
        return self._counters.get(name, 0)

    def limits(self) -> Mapping[str, int]:
        return self._limits

    def shared(self) -> Mapping[str, int]:
        return self._shared

    def limit_defs(self) -> Sequence[api.Limit]:
        return self._limit_defs

    def hold_shared(self, need: feasibility.Need) -> None:
        for name, amount in need.shared_usage:
            counter = feasibility.shared_counter(name)
            self._counters[counter] = self._counters.get(counter, 0) + amount

    def room(self, job: api.Job, most: int) -> int:
        """The most slots the job may take under its queue's slot limit and the configured limits
        (most if none)."""
        name = feasibility.queue_slots_counter(job.spec.queue)
        bound = self._limits.get(name)
        if bound is not None:
            most = max(0, bound - self.counter(name))
        if self._limit_defs:
            most = limits.room(feasibility.limit_demands(job, self._limit_defs, most), self.counter, most)
        return most

    def hold(self, job: api.Job, slots: int, need: feasibility.Need | None = None, hosts: int = 1) -> None:
        """The counters a placed job holds, counted for the rest of the pass (needed only
        where some bound exists)."""
        held = dict(feasibility.demands(job, slots))
        for demand in feasibility.limit_demands(job, self._limit_defs, slots, need, hosts):
            held[demand.counter] = demand.amount
        for name, amount in held.items():
            self._counters[name] = self._counters.get(name, 0) + amount

    def take_back(self, job: api.Job, index: HostIndex) -> bool:
        """A suspended victim resumes if what it gave back is free again on its hosts: taken."""
        for part in job.released:
            state = self.states.get(part.host)
            if state is None or not state.available or state.slots - state.used < part.slots or any(
                    state.totals.get(n, 0) - state.reserved.get(n, 0) < a for n, a in part.resources.items()):
                return False
        self.reserve(job.released, index)
        return True

    def reserve(self, parts: Iterable[api.HostAllocation], index: HostIndex) -> list[api.HostAllocation]:
        """Slots and consumables taken for the rest of the pass (a resume; what a waiting preemptor's
        victims gave back already, kept for it): as much as is free, never more. What was taken."""
        taken = []
        for part in parts:
            if part.host not in self.states:
                continue
            before = self.states[part.host]
            reserved = dict(before.reserved)
            resources = {}
            for name, amount in part.resources.items():
                reserved[name] = min(before.totals.get(name, 0), reserved.get(name, 0) + amount)
                resources[name] = reserved[name] - before.reserved.get(name, 0)
            # (never below what it was: a reservation that began on a busy host counts more than it has)
            after = _with_use(before, max(before.used, min(before.slots, before.used + part.slots)), reserved)
            self._put(part.host, after)
            index.moved(part.host, before.slots - before.used, after.slots - after.used)
            taken.append(api.HostAllocation(host=part.host, slots=after.used - before.used,
                                            resources=resources))
        return taken

    def unreserve(self, parts: Iterable[api.HostAllocation], index: HostIndex) -> None:
        """What reserve took, given back (to the job it was kept for)."""
        for part in parts:
            before = self.states[part.host]
            reserved = dict(before.reserved)
            for name, amount in part.resources.items():
                reserved[name] -= amount
            after = _with_use(before, before.used - part.slots, reserved)
            self._put(part.host, after)
            index.moved(part.host, before.slots - before.used, after.slots - after.used)

    def take_slots(self, name: str, before: feasibility.HostState, slots: int, index: HostIndex) -> None:
        """take() of slots alone, on one host (its state now: `before`)."""
        self._put(name, _with_use(before, before.used + slots, before.reserved))
        free = before.slots - before.used
        index.moved(name, free, free - slots)

    def take(self, parts: Sequence[feasibility.Allocation], need: feasibility.Need, index: HostIndex) -> None:
        """A placement: its slots and reserved consumables, taken on each of its hosts."""
        if need is feasibility.NO_NEED:  # (most placements: slots alone)
            for name, slots in parts:
                self.take_slots(name, self.states[name], slots, index)
            return
        for part in parts:
            before = self.states[part.host]
            reserved = before.reserved
            if need.host_usage:
                reserved = dict(reserved)
                for resource, amount in need.host_usage:
                    reserved[resource] = reserved.get(resource, 0) + amount
            if need.reservation:  # its reservation's slots: counted as used already (rules/reservations.py)
                held = dict(before.held)
                held[need.reservation] -= part.slots
                after = _with_use(before, before.used, reserved)._replace(held=held)
                self._put(part.host, after)
                index.kept_changed()
                continue
            # An exclusive job takes the whole host: nothing else there in this pass either.
            used = before.slots if need.exclusive else before.used + part.slots
            after = _with_use(before, used, reserved)
            self._put(part.host, after)
            index.moved(part.host, before.slots - before.used, after.slots - after.used)



_USED = feasibility.HostState._fields.index("used")
_RESERVED = feasibility.HostState._fields.index("reserved")


def _with_use(state: feasibility.HostState, used: int, reserved: Mapping[str, int]) -> feasibility.HostState:
    """state._replace(used=used, reserved=reserved), at half its cost (a pass makes one per placement)."""
    fields = list(state)
    fields[_USED] = used
    fields[_RESERVED] = reserved
    return tuple.__new__(feasibility.HostState, fields)
