"""Preemption: which running jobs a pending job may take a host from, and the fewest of them (LSF's model).

A queue lists the queues it is `preemptive` over; those must be
`preemptable`. A pending job of the first that no host can take now may
take one host's slots from running jobs of the second, if each victim:
- is of lower priority (its queue's, then its own: never equal or higher);
- has run its queue's `preempt_min_run_s` (from its start, by the pass's
  clock) and has been preempted fewer than its queue's `max_preemptions`;
- is not already on its way out (killed, requeued, or preempted);
- for the `requeue` action, is rerunnable.
Victims are taken lowest priority first (then most slots, then the most
recently started) until the host fits the job, counting what each
victim gives back: its slots on that host and, when its queue suspends,
only the consumables its queue lists in `preemptable_resources` (SIGSTOP
frees CPU, not memory); a requeued victim gives back everything. Victims
the set does not need are then dropped, so the set is the smallest that is
sufficient. Among hosts, the set whose highest-priority victim is lowest
wins, then the fewest jobs, then the fewest slots, then the host's name.

One host only: a job that would need several hosts does not preempt.
Pure: no I/O, no clock (the pass's time is passed in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from xce import depend, feasibility
from xce.v1 import api_pb2 as api


@dataclass(frozen=True)
class Choice:
    host: str
    victims: tuple[api.Job, ...]


def rank(job: api.Job, queues: Mapping[str, api.Queue]) -> tuple[int, int]:
    queue = queues.get(job.spec.queue)
    return (queue.priority if queue is not None else 0, job.spec.priority)


def preemptive(queue: api.Queue | None) -> bool:
    return queue is not None and bool(queue.preemptive)


def may_take(preemptor: api.Job, victim: api.Job, queues: Mapping[str, api.Queue], now_ms: int) -> bool:
    """Whether `victim` may be preempted for `preemptor` now (also apply's check, by the entry's stamp)."""
    mine = queues.get(preemptor.spec.queue)
    if mine is None or victim.spec.queue not in mine.preemptive or victim.id == preemptor.id:
        return False
    return rank(victim, queues) < rank(preemptor, queues) and eligible(victim, queues, now_ms)


def eligible(victim: api.Job, queues: Mapping[str, api.Queue], now_ms: int) -> bool:
    """What makes a job a possible victim of any preemptor (the rest is the pair's ranks and queues)."""
    theirs = queues.get(victim.spec.queue)
    if theirs is None or not theirs.preemptable:
        return False
    if victim.state != api.RUN or victim.kill_requested or victim.requeue_requested or victim.preempted_by:
        return False
    if victim.spec.HasField("array") or victim.spec.exclusive:  # an exclusive job's host stays its own
        return False
    if theirs.max_preemptions and victim.preemptions >= theirs.max_preemptions:
        return False
    if theirs.preempt_action == api.PREEMPT_REQUEUE and not victim.spec.rerunnable:
        return False
    started = victim.start_time_ms
    return bool(started) and now_ms - started >= theirs.preempt_min_run_s * 1000


def given_back(victim: api.Job, host: str, queues: Mapping[str, api.Queue]) -> tuple[int, dict[str, int]]:
    """What the victim gives back on `host` once preempted: slots, and consumables."""
    if not victim.allocation:  # most jobs: one host, nothing reserved (feasibility.allocation_of)
        return (victim.spec.slots, {}) if victim.host == host else (0, {})
    queue = queues.get(victim.spec.queue)
    requeue = queue is not None and queue.preempt_action == api.PREEMPT_REQUEUE
    listed = set(queue.preemptable_resources) if queue is not None else set()
    for part in feasibility.allocation_of(victim):
        if part.host == host:
            return part.slots, {name: amount for name, amount in part.resources.items()
                                if requeue or name in listed}
    return 0, {}


def _freed(state: feasibility.HostState, slots: int, resources: Mapping[str, int]) -> feasibility.HostState:
    reserved = dict(state.reserved)
    for name, amount in resources.items():
        reserved[name] = reserved.get(name, 0) - amount
    return state._replace(used=state.used - slots, reserved=reserved)


class _Candidate(NamedTuple):
    """Its fields in the order victims are taken (as a tuple, it sorts so: the job id is unique)."""

    rank: tuple[int, int]
    fewer_slots: int  # -slots: the most slots first
    started_before: int  # -start time: the most recently started first
    job_id: int
    slots: int  # given back on its host
    resources: dict[str, int]
    job: api.Job


class Candidates:
    """A pass's possible victims by host, each host's in the order they would be taken (lowest
    priority, then most slots given back, then the most recently started); a preemptor filters
    them by its queue and rank. A host's list is made when a preemptor first looks at it; before
    that, bounds over the host's running jobs (the lowest rank, the most slots one holds) let a
    preemptor pass over a host where no set could beat the best it has (most hosts, most passes)."""

    def __init__(self, by_host: Mapping[str, Sequence[api.Job]], queues: Mapping[str, api.Queue],
                 now_ms: int) -> None:
        self.queues = queues
        self.now_ms = now_ms
        self._jobs = by_host
        self._hosts = sorted(by_host)
        self._built: dict[str, list[_Candidate]] = {}
        self._for_queue: dict[tuple[str, str], list[_Candidate]] = {}  # (preemptor's queue, host) -> ...
        # (preemptor's queue, host) -> what its candidates there give back together, and the most one does
        self._sums: dict[tuple[str, str], tuple[int, int]] = {}
        self._bounds: dict[str, tuple[tuple[int, int], int]] | None = None
        self._preemptable = {name for name, queue in queues.items() if queue.preemptable}

    def hosts(self) -> list[str]:
        return self._hosts

    def bound(self, host: str) -> tuple[tuple[int, int], int] | None:
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

    def listed(self, queue: api.Queue, host: str) -> list[_Candidate]:
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

    def _build(self, host: str) -> list[_Candidate]:
        found = []
        for job in self._jobs.get(host, ()):
            if job.spec.queue in self._preemptable and eligible(job, self.queues, self.now_ms):
                slots, resources = given_back(job, host, self.queues)
                found.append(_Candidate(rank(job, self.queues), -slots, -job.start_time_ms, job.id, slots,
                                        resources, job))
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

    def sums(self, queue: str, host: str, listed: Sequence[_Candidate]) -> tuple[int, int]:
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
        taken = _enough(need, slots, host, state, usable)
        if taken is None:
            continue
        key = (max(c.rank for c in taken), len(taken), sum(c.slots for c in taken), host)
        if best is None or key < best[0]:
            best = (key, Choice(host, tuple(c.job for c in taken)))
            if key[:3] == unbeatable:
                break
    return None if best is None else best[1]


def waited_on(preemptor: api.Job) -> frozenset[int]:
    """The jobs (and arrays) its -w condition reads: never its victims. Preempting one would undo the
    condition (started(V) no longer holds once V is requeued), and the two would take turns for ever.
    The scheduler's choice only: apply's check (may_take) is unchanged."""
    return depend.references_of(preemptor.spec.depend) if preemptor.spec.depend else frozenset()


def _enough(need: feasibility.Need, slots: int, host: str, state: feasibility.HostState,
            candidates: Sequence[_Candidate]) -> list[_Candidate] | None:
    def fits(freed: feasibility.HostState) -> bool:
        return feasibility.host_refusal(host, freed, slots, need) is None

    def without(victims: Iterable[_Candidate]) -> feasibility.HostState:
        freed = state
        for victim in victims:
            freed = _freed(freed, victim.slots, victim.resources)
        return freed

    taken: list[_Candidate] = []
    freed = state
    for candidate in candidates:
        taken.append(candidate)
        freed = _freed(freed, candidate.slots, candidate.resources)
        if fits(freed):
            break
    else:
        return None
    # Drop what the set does not need, the highest priority first: the smallest sufficient set.
    for victim in sorted(taken, key=lambda c: c.rank, reverse=True):
        rest = [c for c in taken if c is not victim]
        if rest and fits(without(rest)):
            taken = rest
    return taken
