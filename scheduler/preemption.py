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

from xce import feasibility
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
    mine, theirs = queues.get(preemptor.spec.queue), queues.get(victim.spec.queue)
    if mine is None or theirs is None or victim.spec.queue not in mine.preemptive or not theirs.preemptable:
        return False
    if rank(victim, queues) >= rank(preemptor, queues):
        return False
    if victim.state != api.RUN or victim.kill_requested or victim.requeue_requested or victim.preempted_by:
        return False
    if victim.spec.HasField("array") or victim.id == preemptor.id:
        return False
    if theirs.max_preemptions and victim.preemptions >= theirs.max_preemptions:
        return False
    if theirs.preempt_action == api.PREEMPT_REQUEUE and not victim.spec.rerunnable:
        return False
    started = victim.start_time_ms
    return bool(started) and now_ms - started >= theirs.preempt_min_run_s * 1000


def given_back(victim: api.Job, host: str, queues: Mapping[str, api.Queue]) -> tuple[int, dict[str, int]]:
    """What the victim gives back on `host` once preempted: slots, and consumables."""
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


def choose(preemptor: api.Job, need: feasibility.Need, slots: int,
           states: Mapping[str, feasibility.HostState], by_host: Mapping[str, Sequence[api.Job]],
           queues: Mapping[str, api.Queue], now_ms: int) -> Choice | None:
    """The host and the smallest sufficient set of victims there, or None."""
    best: tuple[tuple[tuple[int, int], int, int, str], Choice] | None = None
    for host in sorted(by_host):
        state = states.get(host)
        if state is None or not state.available or state.closed:
            continue
        if feasibility.host_refusal(host, state._replace(used=0, reserved={}), slots, need) is not None:
            continue  # it could not run here even with the host empty
        candidates = sorted((v for v in by_host[host] if may_take(preemptor, v, queues, now_ms)),
                            key=lambda v: (rank(v, queues), -given_back(v, host, queues)[0],
                                           -v.start_time_ms, v.id))
        taken = _enough(preemptor, need, slots, host, state, candidates, queues)
        if taken is None:
            continue
        key = (max(rank(v, queues) for v in taken), len(taken),
               sum(given_back(v, host, queues)[0] for v in taken), host)
        if best is None or key < best[0]:
            best = (key, Choice(host, tuple(taken)))
    return None if best is None else best[1]


def _enough(preemptor: api.Job, need: feasibility.Need, slots: int, host: str, state: feasibility.HostState,
            candidates: Sequence[api.Job], queues: Mapping[str, api.Queue]) -> list[api.Job] | None:
    def fits(victims: Iterable[api.Job]) -> bool:
        freed = state
        for victim in victims:
            freed = _freed(freed, *given_back(victim, host, queues))
        return feasibility.host_refusal(host, freed, slots, need) is None

    taken: list[api.Job] = []
    for victim in candidates:
        taken.append(victim)
        if fits(taken):
            break
    else:
        return None
    # Drop what the set does not need, the highest priority first: the smallest sufficient set.
    for victim in sorted(taken, key=lambda v: rank(v, queues), reverse=True):
        rest = [v for v in taken if v is not victim]
        if rest and fits(rest):
            taken = rest
    return taken
