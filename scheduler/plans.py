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
  k-1 in preference order with P free, and the first other host with the
  rest free (the plan lists them all in preference order).
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

`by_free=True` says the hosts come most free first (the default order, no
order[]): then the k hosts that give most are the first k, so the rule
reads only as many hosts as it tries (k <= N), not all of them; the plans
are the same.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence

from xce.rules import feasibility

# One host's part of a plan: the allocation apply re-checks, as it is (the barrier copies nothing).
Placement = feasibility.Allocation


Plan = tuple[Placement, ...]


class Hosts:
    """A lazy host iterator, read once, remembered: each k walks it again from the start. A name
    seen before is skipped (a host is in a plan at most once)."""

    def __init__(self, hosts: Iterable[tuple[str, int]], by_free: bool = False) -> None:
        self.by_free = by_free  # the source comes most free first: the k that give most are the first k
        self._source = iter(hosts)
        self._seen: list[tuple[str, int]] = []
        self._names: set[str] = set()
        self._done = False
        self._prefix: list[int] | None = None  # sums of the largest frees, for the quick test per k
        self._ascending: list[int] = []
        self._running = [0]  # by_free: sums of the first frees, as read
        self._negated: list[int] = []  # ... and the frees, negated (ascending)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        index = 0
        while True:
            if index < len(self._seen) or self._read():
                yield self._seen[index]
                index += 1
                continue
            return

    def _read(self) -> bool:
        """One more host from the source into what is seen; False when there is none."""
        while not self._done:
            try:
                name, free = next(self._source)
            except StopIteration:
                self._done = True
                return False
            if free > 0 and name not in self._names:
                self._names.add(name)
                self._seen.append((name, free))
                return True
        return False

    def all(self) -> Sequence[tuple[str, int]]:
        while self._read():
            pass
        return self._seen

    def count(self, k: int) -> int:
        """How many of the first k hosts there are (reading no further than k)."""
        while len(self._seen) < k and self._read():
            pass
        return min(k, len(self._seen))

    def first(self, k: int) -> Sequence[tuple[str, int]]:
        """The first k hosts (fewer if there are not so many)."""
        return self._seen[:self.count(k)]

    def most(self, k: int, cap: int) -> int:
        """The most k hosts give at cap slots each: the k largest frees, each cut to cap."""
        if self.by_free:  # the first k, in order: O(log k) once read
            k = self.count(k)
            while len(self._running) <= k:
                free = self._seen[len(self._running) - 1][1]
                self._running.append(self._running[-1] + free)
                self._negated.append(-free)
            full = bisect.bisect_right(self._negated, -cap, 0, k)  # of the first k, those with >= cap free
            return full * cap + self._running[k] - self._running[full]
        if self._prefix is None:
            descending = sorted((free for _, free in self.all()), reverse=True)
            self._prefix = [0, *itertools.accumulate(descending)]
            self._ascending = descending[::-1]
        at_cap = len(self._ascending) - bisect.bisect_left(self._ascending, cap)  # hosts with >= cap free
        full = min(k, at_cap)
        return full * cap + self._prefix[k] - self._prefix[full]


def plans(slots: int, hosts: Iterable[tuple[str, int]], span_hosts: int = 0,
          ptile: int = 0, by_free: bool = False) -> Iterator[Plan]:
    """The plans for `slots` slots, fewest hosts first (see the module's rule)."""
    if span_hosts not in (0, 1):
        raise ValueError(f"span[hosts=] takes 1, not {span_hosts}")
    if slots < 1:
        return
    candidates = hosts if isinstance(hosts, Hosts) else Hosts(hosts, by_free)
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
    if candidates.by_free:
        count = slots  # the first k are read as k grows; no more than there are
    else:
        count = len(candidates.all())  # every k ranks all of them
        if candidates.most(count, slots) < slots:
            return  # fewer free slots than asked for, on all hosts together
    last: Plan | None = None
    for k in range(1, min(slots, count) + 1):
        if candidates.by_free and candidates.count(k) < k:
            return  # fewer hosts than k: no larger k either
        cap = -(-slots // k)
        if candidates.most(k, cap) < slots:
            continue  # O(log hosts): only a k that fits is planned
        plan = _balanced(slots, k, cap, candidates)
        if plan is not None and plan != last:
            yield plan
            last = plan


def _balanced(slots: int, k: int, cap: int, hosts: Hosts) -> Plan | None:
    ranked = heapq.nsmallest(k, ((-min(free, cap), position, name) for position, (name, free)
                                 in enumerate(hosts.first(k) if hosts.by_free else hosts)))
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
        order = {name: position for position, (name, _) in enumerate(hosts)}
        plan.sort(key=lambda placement: order[placement.host])  # preference order, the rest's host too
    return tuple(plan)


def best(low: int, high: int, hosts: Iterable[tuple[str, int]], span_hosts: int = 0,
         ptile: int = 0, by_free: bool = False) -> Plan | None:
    """`-n low,high`: the plan for the largest count in [low, high] that has one, else None.

    span[hosts=1]: the most free slots of one host. span[ptile=P]: a count that has a plan
    leaves one for every smaller count (a slot less on the last host, or the last full tile made
    the rest), so the largest is found by bisection. The k-host rule is not monotone in the
    count (frees 6, 5, 3, 1 take 13 slots at 5 per host, but not 12 at 6, 4 or 3), so for each
    k the largest count c with cap = ceil(c / k) is read from the k that give most: c fits at k
    exactly when (cap - 1) k < c <= min(cap k, most(k, cap)), an interval per cap."""
    candidates = hosts if isinstance(hosts, Hosts) else Hosts(hosts, by_free)
    if low > high or low < 1:
        return None
    if span_hosts == 1:
        top = min(high, max((free for _, free in candidates), default=0))
        return next(plans(top, candidates, 1), None) if top >= low else None
    top = min(high, sum(free for _, free in candidates.all()))
    if top < low:
        return None
    if ptile:
        def fits(count: int) -> bool:
            return next(plans(count, candidates, 0, ptile), None) is not None

        if not fits(low):
            return None
        lowest, highest = low, top  # fits(lowest)
        while lowest < highest:
            middle = (lowest + highest + 1) // 2
            lowest, highest = (middle, highest) if fits(middle) else (lowest, middle - 1)
        return next(plans(lowest, candidates, 0, ptile), None)
    found = 0
    for k in range(1, min(top, len(candidates.all())) + 1):
        for cap in range(-(-top // k), 0, -1):
            upper = min(cap * k, candidates.most(k, cap), top)
            if upper < low or cap * k < found:
                break  # smaller caps give smaller counts
            if upper > (cap - 1) * k:
                found = max(found, upper)
                break
    return next(plans(found, candidates), None) if found >= low else None
