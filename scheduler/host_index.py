"""Which hosts a job may read first: the pass's index of the hosts with free slots.

Theory of operation. Before it places anything a pass makes a `Fleet` of
the hosts: each host's feasibility state, the hosts with a free slot most
free first (then by name), and the names whose values change as jobs are
placed (usage, load, consumables). `HostIndex` keeps that order sorted as
the pass takes slots, and reads a job's candidates from it, filtered by the
job's requirement: the static terms of its select[] and -m once per host
and pass, the terms on usage and the rusage[] free each time. A job with
order[] reads a ranking kept the same way. scheduler/plans.py lays the
candidates out into a plan. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from scheduler import plans
from xce.invariant import invariant
from xce.rules import feasibility, reservations, resreq

Entry = tuple[int, str]  # (-free slots, host name): most free first, then by name


def free_entry(name: str, state: feasibility.HostState) -> Entry | None:
    """The host's place in HostIndex's order, if it takes jobs and has a free slot."""
    if state.available and not state.closed and state.slots > state.used:
        return (state.used - state.slots, name)
    return None


MOVING_ALWAYS = feasibility.USAGE_NAMES | feasibility.LOAD_INDICES


@dataclass(frozen=True)
class Fleet:
    """What a pass makes of the hosts before it places anything, for a caller that keeps it between
    passes (scheduler/view.py: View.fleet): each host's feasibility state, HostIndex's order of the
    hosts with free slots, and the names whose values are not static (usage, load, consumables)."""

    states: dict[str, feasibility.HostState]  # (a pass changes it while it runs: run_pass)
    free: Sequence[Entry]  # sorted
    moving: frozenset[str]

    @classmethod
    def of(cls, states: dict[str, feasibility.HostState]) -> Fleet:
        moving = set(MOVING_ALWAYS)
        for state in states.values():
            moving.update(state.totals)
        free = sorted(e for e in (free_entry(n, s) for n, s in states.items()) if e is not None)
        return cls(states, free, frozenset(moving))


class _ByFree:
    """Entries (-free slots, name) in order, as a sorted list of names per free count: a placement moves a
    host from one short list to another (one list of every host moved thousands of pointers each time, a
    sixth of a pass of one-slot jobs at 5,000 hosts), and makes no entry to keep."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        """`entries`: sorted."""
        self._names: dict[int, list[str]] = {}  # by -free
        for negative_free, name in entries:
            found = self._names.get(negative_free)
            if found is None:
                self._names[negative_free] = [name]
            else:
                found.append(name)
        self._keys = sorted(self._names)  # (-free) of the lists, most free first

    def __iter__(self) -> Iterator[Entry]:
        names = self._names
        return itertools.chain.from_iterable([zip(itertools.repeat(key), names[key]) for key in self._keys])

    def first(self) -> Entry | None:
        if not self._keys:
            return None
        key = self._keys[0]
        return key, self._names[key][0]

    def remove(self, negative_free: int, name: str) -> None:
        """The host's entry, if there (a host that had no free slot has none)."""
        found = self._names.get(negative_free)
        if found is None:
            return
        position = 0 if found[0] == name else bisect.bisect_left(found, name)  # (most often the first)
        if position < len(found) and found[position] == name:
            del found[position]
            if not found:
                del self._names[negative_free]
                del self._keys[bisect.bisect_left(self._keys, negative_free)]

    def add(self, negative_free: int, name: str) -> None:
        found = self._names.get(negative_free)
        if found is None:
            self._names[negative_free] = [name]
            bisect.insort(self._keys, negative_free)
        else:
            bisect.insort(found, name)


class HostIndex:
    """The available hosts with free slots, most free first (then by name), kept sorted as the
    pass places jobs (a sorted list per free count: an update is a bisection and a move of a few
    pointers, fast at thousands of hosts). A job's candidates are read from it in that order,
    filtered by its requirement: the terms of its select[] that read static attributes only, and
    -m, are looked at once per host and pass and remembered (static attributes do not change in a
    pass; a job that takes the first host that passes reads no further); the terms on usage or
    load, and the rusage[] free, each time. scheduler/plans.py lays them out.

    A job with order[] reads its candidates from a ranking of the hosts by that order, made once
    a pass per order and kept sorted as placements move hosts (as the list by free slots is), so
    that a one-slot job takes the first host of the ranking that passes instead of ranking every
    host again: 18,000 jobs with order[] on 500 hosts were 9 million keys a pass. Hosts that refused
    the job's owner (its Need's `avoid`) are skipped."""

    def __init__(self, states: dict[str, feasibility.HostState], fleet: Fleet | None = None) -> None:
        """`fleet`: the same states' order and names, kept by the caller (else made here)."""
        self._states = states
        fleet = fleet or Fleet.of(states)
        self._all = _ByFree(fleet.free)
        # Per static select[] term and -m: which hosts pass, each looked at once a pass (on first
        # need: a job that takes the first host that passes reads no further).
        self._passes: dict[tuple[resreq.Expr | None, frozenset[str]], dict[str, bool]] = {}
        self._moving = fleet.moving  # names whose value is not static
        self._splits: dict[resreq.Expr, tuple[resreq.Expr | None, resreq.Expr | None]] = {}
        self._rankings: dict[tuple[tuple[str, bool], ...], _Ranking] = {}
        self._kept_by: dict[str, list[tuple[int, str]]] = {}  # per reservation: its hosts (_kept)

    def moved(self, name: str, free_before: int, free_after: int) -> None:
        """A placement changed the host's state (its new one is in the states already); or a
        reservation was given back to the job it was kept for (free again: listed again)."""
        state = self._states[name]
        if state.held and self._kept_by:  # what its reservations' jobs may take there moved too
            self._kept_by.clear()
        if not state.available or state.closed:
            free_after = 0
        entries = self._all
        entries.remove(-free_before, name)
        if free_after > 0:
            entries.add(-free_after, name)
        if self._rankings:
            for ranking in self._rankings.values():
                ranking.moved(name, free_after)

    def most_free(self) -> Entry | None:
        """The first host of the order (most free slots, then by name), if any has a free slot."""
        return self._all.first()

    def plan(self, need: feasibility.Need, least: int, most: int) -> plans.Plan | None:
        """The job's allocation: the plan for the most slots in [least, most] that has one."""
        if least == most and need.plain:  # (most passes: the host with the most free slots, if it is enough)
            top = self.most_free()
            if top is None:
                return None
            if -top[0] >= most >= 1:
                return (plans.Placement(top[1], most),)
        req = need.requirement
        by_free = not req.order
        candidates: Iterable[tuple[str, int]] = self.candidates(need)
        if not by_free and most == 1 and not req.same:  # one slot: the first host of its ranking
            best = next(iter(candidates), None)
            return (plans.Placement(best[0], 1),) if best is not None else None
        if by_free and least == most and not req.same and req.span_hosts in (0, 1) and (
                req.ptile == 0 or most <= req.ptile):
            # The first candidate has the most free slots: if it takes the job alone, that is the plan
            # of fewest hosts whatever the layout (plans.plans reads it first), without laying one out.
            first = next(iter(candidates), None)
            if first is None:
                return None
            if first[1] >= most >= 1:
                return (plans.Placement(first[0], most),)
            candidates = itertools.chain((first,), candidates)
        if req.same:
            candidates = list(candidates)
        groups = _same_groups(candidates, req.same, self._states) if req.same else [candidates]
        for group in groups:
            if least == most:
                plan = next(plans.plans(most, group, req.span_hosts, req.ptile, by_free), None)
            else:
                plan = plans.best(least, most, group, req.span_hosts, req.ptile, by_free)
            if plan is not None:
                return plan
        return None

    def reads_usage(self, need: feasibility.Need) -> bool:
        """Whether the job's select[] has terms on usage or load (not only static attributes)."""
        return need.requirement.select is not None and self._split(need.requirement.select)[1] is not None

    def candidates(self, need: feasibility.Need) -> Iterator[tuple[str, int]]:
        """Hosts with free slots that pass select[] and have the rusage[] free, most free first."""
        static, moving = self._split(need.requirement.select)
        asked = need.asked
        known = self._passes.setdefault((static, asked), {}) if static is not None or asked else None
        static_test = resreq.compiled(static) if static is not None else None
        usage = need.host_usage
        states = self._states
        test = resreq.compiled(moving) if moving is not None else None
        order = need.requirement.order
        hosts: Iterable[tuple[int, str]] = self._ranking(order).entries() if order else self._all
        if need.reservation:  # its reservation's hosts, by the slots free in it (counted as used)
            hosts = self._kept(need.reservation)
        if need.avoid:  # hosts that refused the job's owner (feasibility.refused_owner); rare: not per host
            hosts = [entry for entry in hosts if entry[1] not in need.avoid]
        for negative_free, name in hosts:
            if known is not None:
                passes = known.get(name)
                if passes is None:
                    state = states[name]
                    passes = known[name] = (static_test is None or static_test(state.static)) and \
                        (not asked or name in asked or bool(state.groups & asked))
                if not passes:
                    continue
            if need.exclusive and not need.reservation and -negative_free < states[name].slots:
                continue  # not idle
            if test is not None or usage:
                state = states[name]
                if test is not None and not test(feasibility.attributes(state)):
                    continue
                if any(state.totals.get(r, 0) - state.reserved.get(r, 0) < a for r, a in usage):
                    continue
            yield name, -negative_free

    def kept_changed(self) -> None:
        """A placement changed what some reservation keeps free: its hosts are looked at again."""
        self._kept_by.clear()

    def _kept(self, reservation: str) -> list[tuple[int, str]]:
        """The available, open hosts where `reservation` keeps free slots: (-free, name), most first
        (made once a pass per reservation, until a placement changes them)."""
        known = self._kept_by.get(reservation)
        if known is not None:
            return known
        found = []
        for name, state in self._states.items():
            if reservation in state.held and state.available and not state.closed:
                free = reservations.free_in(state.slots, state.used, state.held, reservation)
                if free > 0:
                    found.append((-free, name))
        found.sort()
        self._kept_by[reservation] = found
        return found

    def _split(self, select: resreq.Expr | None) -> tuple[resreq.Expr | None, resreq.Expr | None]:
        """select[] as (the terms of its top-level && that read static attributes only, the rest)."""
        if select is None:
            return None, None
        if (known := self._splits.get(select)) is not None:
            return known
        static: list[resreq.Expr] = []
        moving: list[resreq.Expr] = []
        for term in _conjuncts(select):
            (moving if resreq.names(term) & self._moving else static).append(term)
        split = self._splits[select] = (_conjunction(static), _conjunction(moving))
        return split

    def _ranking(self, order: tuple[tuple[str, bool], ...]) -> _Ranking:
        ranking = self._rankings.get(order)
        if ranking is None:
            ranking = self._rankings[order] = _Ranking(self._states, order,
                                                       [(name, -negative) for negative, name in self._all])
        return ranking


class _Ranking:
    """The hosts with free slots in order[]'s preference: by each name, largest first for -name,
    smallest first otherwise; a host without the value last; then most free, then by name."""

    def __init__(self, states: Mapping[str, feasibility.HostState], order: tuple[tuple[str, bool], ...],
                 hosts: Iterable[tuple[str, int]]) -> None:
        self._states = states
        self._order = order
        self._keys = {name: self._key(name, free) for name, free in hosts}
        self._sorted = sorted(self._keys.values())

    def _key(self, name: str, free: int) -> tuple[object, ...]:
        state = self._states[name]
        parts: list[object] = []
        for attribute, descending in self._order:
            value = feasibility.value_of(state, attribute)
            number = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
            parts.append((1, 0.0) if number is None else (0, -number if descending else number))
        return (*parts, -free, name)

    def moved(self, name: str, free: int) -> None:
        old = self._keys.pop(name, None)
        if old is not None:
            position = bisect.bisect_left(self._sorted, old)
            invariant(self._sorted[position] == old, f"the ranking by {self._order} lost host {name}")
            del self._sorted[position]
        if free > 0:
            key = self._keys[name] = self._key(name, free)
            bisect.insort(self._sorted, key)

    def entries(self) -> Iterator[tuple[int, str]]:
        """(-free slots, name) in preference order, as HostIndex's own list gives them."""
        for key in self._sorted:
            yield key[-2], key[-1]  # type: ignore[misc]


def _conjuncts(expr: resreq.Expr) -> list[resreq.Expr]:
    if expr[0] == "and":
        return [*_conjuncts(expr[1]), *_conjuncts(expr[2])]
    return [expr]


def _conjunction(terms: list[resreq.Expr]) -> resreq.Expr | None:
    if not terms:
        return None
    result = terms[0]
    for term in terms[1:]:
        result = ("and", result, term)
    return result


def _same_groups(candidates: Iterable[tuple[str, int]], same: tuple[str, ...],
                 states: Mapping[str, feasibility.HostState]) -> list[list[tuple[str, int]]]:
    """same[]: the candidates by their values of those attributes, groups in the order of their
    first host. A host lacking one is a group of its own: it may take a job alone, never with
    others (the barrier's rule)."""
    groups: dict[object, list[tuple[str, int]]] = {}
    for candidate in candidates:
        static = states[candidate[0]].static
        values = tuple(static.get(name) for name in same)
        groups.setdefault(("alone", candidate[0]) if None in values else values, []).append(candidate)
    return list(groups.values())
