"""Preemption in the scheduling pass: the host, and the victims there, for a job no host can take now.

The rules (who may be a victim, what each gives back, the order victims are taken, the smallest
sufficient set on one host) are xce/rules/preemption.py, shared with apply's re-check. This is
the search: `Candidates` indexes a pass's possible victims by host, lazily, with bounds that let a
preemptor pass over hosts where no set could beat the best it has; `choose` takes, among hosts,
the set whose highest-priority victim is lowest, then the fewest jobs, then the fewest slots, then
the host's name. One host only: a job that would need several hosts does not preempt.
Pure: no I/O, no clock (the pass's time is passed in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xce.rules import feasibility
from xce.rules.preemption import (
    Candidate,
    Choice,
    candidate,
    eligible,
    preemptive,
    rank,
    smallest_sufficient,
    waited_on,
)
from xce.v1 import api_pb2 as api

# (preemptive: the pass asks before it builds)
__all__ = ["Bound", "Candidates", "Choice", "choose", "preemptive"]

# A host's bound over its possible victims: the lowest rank among them, the most slots one holds.
Bound = tuple[tuple[int, int], int]


class Candidates:
    """A pass's possible victims by host, each host's in the order they would be taken (lowest
    priority, then most slots given back, then the most recently started); a preemptor filters
    them by its queue and rank. A host's list is made when a preemptor first looks at it; before
    that, bounds over the host's running jobs (the lowest rank, the most slots one holds) let a
    preemptor pass over a host where no set could beat the best it has (most hosts, most passes)."""

    def __init__(self, by_host: Mapping[str, Sequence[api.Job]], queues: Mapping[str, api.Queue],
                 now_ms: int, bounds: dict[str, Bound] | None = None) -> None:
        """`bounds`: bound()'s, if the caller made them already, over the same jobs (all of preemptable
        queues)."""
        self.queues = queues
        self.now_ms = now_ms
        self._jobs = by_host
        self._hosts = sorted(by_host)
        self._built: dict[str, list[Candidate]] = {}
        self._for_queue: dict[tuple[str, str], list[Candidate]] = {}  # (preemptor's queue, host) -> ...
        # (preemptor's queue, host) -> what its candidates there give back together, and the most one does
        self._sums: dict[tuple[str, str], tuple[int, int]] = {}
        self._bounds = bounds
        self._preemptable = {name for name, queue in queues.items() if queue.preemptable}

    def hosts(self) -> list[str]:
        return self._hosts

    def bound(self, host: str) -> Bound | None:
        """No victim on `host` ranks below the first, nor gives back more slots than the second (None:
        it has no running job of a preemptable queue). Bounds over all of them, eligible or not."""
        if self._bounds is None:
            self._bounds = {}
            for name, jobs in self._jobs.items():
                mine = [job for job in jobs if job.spec.queue in self._preemptable]
                if mine:
                    self._bounds[name] = (min(rank(job, self.queues) for job in mine),
                                          max(feasibility.held_slots(job) for job in mine))
        return self._bounds.get(host)

    def lowest(self) -> tuple[int, int] | None:
        """No victim anywhere ranks below this."""
        self.bound("")
        assert self._bounds is not None
        return min((low for low, _ in self._bounds.values()), default=None)

    def listed(self, queue: api.Queue, host: str) -> list[Candidate]:
        """The candidates on `host` in the queues `queue` may preempt, in the order they would be taken."""
        key = (queue.name, host)
        found = self._for_queue.get(key)
        if found is None:
            built = self._built.get(host)
            if built is None:
                built = self._built[host] = self._build(host)
            allowed = set(queue.preemptive)
            found = self._for_queue[key] = [c for c in built if c.job.spec.queue in allowed]
        return found

    def _build(self, host: str) -> list[Candidate]:
        found = []
        for job in self._jobs.get(host, ()):
            if job.spec.queue in self._preemptable and eligible(job, self.queues, self.now_ms):
                found.append(candidate(job, host, self.queues))
        found.sort()
        return found

    def taken(self, host: str, jobs: Sequence[api.Job]) -> None:
        """These jobs are victims now: no longer candidates (the bounds, over more jobs, still hold)."""
        gone = {job.id for job in jobs}
        if host in self._built:
            self._built[host] = [c for c in self._built[host] if c.job.id not in gone]
        for key in [key for key in self._for_queue if key[1] == host]:
            self._for_queue[key] = [c for c in self._for_queue[key] if c.job.id not in gone]
            self._sums.pop(key, None)

    def sums(self, queue: str, host: str, listed: Sequence[Candidate]) -> tuple[int, int]:
        """The slots `listed` (listed()'s, on `host`) gives back together, and the most one gives."""
        found = self._sums.get((queue, host))
        if found is None:
            slots = [c.slots for c in listed]
            found = self._sums[(queue, host)] = (sum(slots), max(slots))
        return found


def choose(preemptor: api.Job, need: feasibility.Need, slots: int,
           states: Mapping[str, feasibility.HostState], candidates: Candidates) -> Choice | None:
    """The host and the smallest sufficient set of victims there, or None."""
    queues = candidates.queues
    mine = queues.get(preemptor.spec.queue)
    if mine is None or not mine.preemptive:
        return None
    ceiling = rank(preemptor, queues)
    spared = waited_on(preemptor)
    best: tuple[tuple[tuple[int, int], int, int, str], Choice] | None = None
    # No set beats one victim of the lowest rank giving back one slot (a later host only ties).
    unbeatable = (candidates.lowest(), 1, 1)
    for host in candidates.hosts():
        bound = candidates.bound(host)
        if bound is None or bound[0] >= ceiling:
            continue
        state = states.get(host)
        if state is None or not state.available or state.closed:
            continue
        free = state.slots - state.used
        missing = max(0, slots - free)
        # The best a set here could be: its lowest victim first, as few as the largest would need,
        # giving back just what is missing. A host that cannot beat the best so far is not looked at
        # further (hosts come by name: a tie loses); the bounds say so before its list is made.
        if best is not None and (bound[0], max(1, -(-missing // max(1, bound[1]))), missing) >= best[0][:3]:
            continue
        listed = candidates.listed(mine, host)
        if spared:
            listed = [c for c in listed if c.job.id not in spared and c.job.array_id not in spared]
        if not listed or listed[0].rank >= ceiling:
            continue
        if listed[-1].rank < ceiling and not spared:
            usable = listed
            total, largest = candidates.sums(mine.name, host, listed)
        else:
            usable = [c for c in listed if c.rank < ceiling]
            total, largest = sum(c.slots for c in usable), max(c.slots for c in usable)
        if free + total < slots:
            continue
        fewest = max(1, -(-missing // largest)) if largest else 1
        if best is not None and (usable[0].rank, fewest, missing) >= best[0][:3]:
            continue
        if feasibility.host_refusal(host, state._replace(used=0, reserved={}), slots, need) is not None:
            continue  # it could not run here even with the host empty
        taken = smallest_sufficient(need, slots, host, state, usable)
        if taken is None:
            continue
        key = (max(c.rank for c in taken), len(taken), sum(c.slots for c in taken), host)
        if best is None or key < best[0]:
            best = (key, Choice(host, tuple(c.job for c in taken)))
            if key[:3] == unbeatable:
                break
    return None if best is None else best[1]
