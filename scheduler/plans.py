"""Where a job's slots go: the plans for N slots over the hosts that may take them (A2-A5).

Theory of operation. The caller hands in the hosts that pass the job's
select[] and have its rusage[] free, in its order of preference (order[],
else most free slots first), each with how many slots it has free, and the
job's slot count. `plans` yields, lazily, every plan worth trying, fewest
hosts first, reading the hosts only as far as it needs (span[hosts=1] and
ptile stop at the first hosts that fit; the balanced rule ranks them all);
the caller takes the first plan it can use and drops the iterator (nothing
is held: cancelling is just not asking for the next one).

The rule, for N slots:
- span[hosts=1]: one host with N free; the first in preference order.
- span[ptile=P]: k = ceil(N/P) hosts, P slots on each but the last, which
  takes the rest (N - P(k-1)), as LSF places ptile; the hosts are the first
  k-1 in preference order with P free, then the next with the rest free.
- otherwise, for k = 1, 2, ..., N: at most c = ceil(N/k) slots on any host
  and exactly N in all. The k hosts that can give most (min(free, c), ties
  by preference) are taken if together they give N; each gives min(free, c)
  in preference order until N are placed (the last may give fewer). So 16
  slots on four hosts of 4 free are 4+4+4+4, found at k = 4.
- `-n min,max` (`best`): the largest count in [min, max] that has a plan,
  its plan with the fewest hosts; never fewer than min.

A plan lists (host, slots) in preference order; its first host runs the
command (it has the most slots of the plan when the order is most free
first). Pure: no I/O, no clock; the same hosts give the same plans.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple


class Placement(NamedTuple):
    host: str
    slots: int


Plan = tuple[Placement, ...]


class Hosts:
    """A lazy host iterator, read once, remembered: each k walks it again from the start."""

    def __init__(self, hosts: Iterable[tuple[str, int]]) -> None:
        self._source = iter(hosts)
        self._seen: list[tuple[str, int]] = []
        self._done = False

    def __iter__(self) -> Iterator[tuple[str, int]]:
        index = 0
        while True:
            if index < len(self._seen):
                yield self._seen[index]
                index += 1
                continue
            if self._done:
                return
            try:
                name, free = next(self._source)
            except StopIteration:
                self._done = True
                return
            if free > 0:
                self._seen.append((name, free))

    def all(self) -> Sequence[tuple[str, int]]:
        for _ in self:
            pass
        return self._seen


def plans(slots: int, hosts: Iterable[tuple[str, int]], span_hosts: int = 0,
          ptile: int = 0) -> Iterator[Plan]:
    """The plans for `slots` slots, fewest hosts first (see the module's rule)."""
    if slots < 1:
        return
    candidates = hosts if isinstance(hosts, Hosts) else Hosts(hosts)
    if span_hosts == 1:
        for name, free in candidates:
            if free >= slots:
                yield (Placement(name, slots),)
                return
        return
    if ptile > 0:
        plan = _tiled(slots, ptile, candidates)
        if plan is not None:
            yield plan
        return
    count = len(candidates.all())  # every k ranks all of them
    for k in range(1, min(slots, count) + 1):
        plan = _balanced(slots, k, -(-slots // k), candidates)
        if plan is not None:
            yield plan


def _balanced(slots: int, k: int, cap: int, hosts: Hosts) -> Plan | None:
    ranked = heapq.nsmallest(k, ((-min(free, cap), position, name) for position, (name, free)
                                 in enumerate(hosts)))
    if -sum(give for give, _, _ in ranked) < slots:
        return None
    plan: list[Placement] = []
    left = slots
    for give, _, name in sorted(ranked, key=lambda r: r[1]):  # preference order
        if left == 0:
            break
        take = min(-give, left)
        plan.append(Placement(name, take))
        left -= take
    return tuple(plan)


def _tiled(slots: int, ptile: int, hosts: Hosts) -> Plan | None:
    full, rest = divmod(slots, ptile)
    plan: list[Placement] = []
    if full:
        for name, free in hosts:
            if free >= ptile:
                plan.append(Placement(name, ptile))
                if len(plan) == full:
                    break
        if len(plan) < full:
            return None
    if rest:
        taken = {p.host for p in plan}
        last = next((name for name, free in hosts if name not in taken and free >= rest), None)
        if last is None:
            return None
        plan.append(Placement(last, rest))
    return tuple(plan)


def best(low: int, high: int, hosts: Iterable[tuple[str, int]], span_hosts: int = 0,
         ptile: int = 0) -> Plan | None:
    """`-n low,high`: the plan for the largest count in [low, high] that has one, else None."""
    candidates = hosts if isinstance(hosts, Hosts) else Hosts(hosts)
    most = min(high, sum(free for _, free in candidates))
    for count in range(most, low - 1, -1):
        plan = next(plans(count, candidates, span_hosts, ptile), None)
        if plan is not None:
            return plan
    return None
