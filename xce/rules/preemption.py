"""Preemption's rules (LSF's model): which running jobs a pending job may take a host from, what
each gives back, and the fewest of them on one host.

A queue lists the queues it is `preemptive` over; those must be
`preemptable`. A pending job of the first that no host can take now may
take one host's slots from running jobs of the second, if each victim:
- is of lower priority (its queue's, then its own: never equal or higher);
- has run its queue's `preempt_min_run_s` (from its start, by the caller's
  clock: the pass's, or the entry's stamp at apply) and has been preempted
  fewer than its queue's `max_preemptions`;
- is not already on its way out (killed, requeued, or preempted);
- for the `requeue` action, is rerunnable.
Victims are taken lowest priority first (then most slots, then the most
recently started) until the host fits the job, counting what each
victim gives back: its slots on that host and, when its queue suspends,
only the consumables its queue lists in `preemptable_resources` (SIGSTOP
frees CPU, not memory); a requeued victim gives back everything. Victims
the set does not need are then dropped, so the set is the smallest that is
sufficient (`smallest_sufficient`). The scheduler's search among hosts is
scheduler/preemption.py; apply re-checks each victim with `may_take`.

Pure: no I/O, no clock (the time is passed in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from xce.rules import dependency_conditions, feasibility
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
    if victim.spec.reservation:  # it runs in slots its reservation keeps, which no preemptor may take
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


class Candidate(NamedTuple):
    """Its fields in the order victims are taken (as a tuple, it sorts so: the job id is unique)."""

    rank: tuple[int, int]
    fewer_slots: int  # -slots: the most slots first
    started_before: int  # -start time: the most recently started first
    job_id: int
    slots: int  # given back on its host
    resources: dict[str, int]
    job: api.Job


def candidate(job: api.Job, host: str, queues: Mapping[str, api.Queue]) -> Candidate:
    """`job` (an eligible victim) as a candidate on `host`."""
    slots, resources = given_back(job, host, queues)
    return Candidate(rank(job, queues), -slots, -job.start_time_ms, job.id, slots, resources, job)


def waited_on(preemptor: api.Job) -> frozenset[int]:
    """The jobs (and arrays) its -w condition reads: never its victims. Preempting one would undo the
    condition (started(V) no longer holds once V is requeued), and the two would take turns for ever.
    The scheduler's choice only: apply's check (may_take) is unchanged."""
    depend = preemptor.spec.depend
    return dependency_conditions.references_of(depend) if depend else frozenset()


def smallest_sufficient(need: feasibility.Need, slots: int, host: str, state: feasibility.HostState,
            candidates: Sequence[Candidate]) -> list[Candidate] | None:
    """The fewest of `candidates` (in the order they are taken) that, preempted, let the job fit on
    `host`; None if all of them do not."""
    def fits(freed: feasibility.HostState) -> bool:
        return feasibility.host_refusal(host, freed, slots, need) is None

    def without(victims: Iterable[Candidate]) -> feasibility.HostState:
        freed = state
        for victim in victims:
            freed = _freed(freed, victim.slots, victim.resources)
        return freed

    taken: list[Candidate] = []
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
