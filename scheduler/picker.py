"""Job pickers: in which order a pass considers pending jobs (F1, F2).

A picker is anything with `order(jobs, queues) -> jobs`. FCFS, the built-in
one, goes across queues by queue priority (descending), and inside a queue
by job priority (descending), then submit time (ascending), then job id
(ascending), so equal submit times still give one order. The core asks
`pickers_for(config)` which picker serves each queue: `job_pick_plugin` for
all, with a per-queue override in `queue_pickers`; third-party pickers
register under the `xce.pickers` entry point group. A picker keeps no state
between calls: the daemon and the decider load one per name and keep it, and
a replay or a simulation must order jobs as the live pass did.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Protocol

from scheduler.backfill import Kept
from scheduler.job_digest import Digest, Digests
from xce.rules import fairshare
from xce.v1 import api_pb2 as api

ENTRY_POINT_GROUP = "xce.pickers"
_RANK = operator.itemgetter(0)  # a Digest's rank


class Picker(Protocol):
    def order(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue]) -> list[api.Job]: ...


@dataclass(frozen=True)
class PassContext:
    """What a picker with `reads_context` is given besides the pending jobs (committed, and the
    pass's time): every job of the view, and the fair-share usage records."""

    jobs: Sequence[api.Job] = ()
    share_usage: Mapping[str, Mapping[tuple[str, str], tuple[int, int]]] = field(default_factory=dict)
    now_ms: int = 0
    # end_before queues' heads' reservations kept from earlier passes, by job (planner.PlannerState)
    reservations: Mapping[int, Kept] = field(default_factory=dict)


class Fcfs:
    """First come, first served, within queue and job priorities (F2)."""

    def order(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue]) -> list[api.Job]:
        if len(jobs) < 2:
            return list(jobs)  # (most passes order one job)

        rank = {name: -queue.priority for name, queue in queues.items()}

        def key(job: api.Job) -> tuple[int, int, int, int]:
            spec = job.spec
            return (rank.get(spec.queue, 0), -spec.priority, job.submit_time_ms, job.id)

        return sorted(jobs, key=key)


class Lifo:
    """Last come, first served inside a queue: an example of a per-queue override."""

    def order(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue]) -> list[api.Job]:
        if len(jobs) < 2:
            return list(jobs)  # (most passes order one job)

        def key(job: api.Job) -> tuple[int, int, int, int]:
            queue = queues.get(job.spec.queue)
            return (-(queue.priority if queue else 0), -job.spec.priority, -job.submit_time_ms, -job.id)

        return sorted(jobs, key=key)


class FairShare:
    """LSF's fairshare inside a queue with `fairshare` shares (xce/rules/fairshare.py); FCFS in one
    without."""

    reads_context = True

    def order(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue],
              context: PassContext | None = None) -> list[api.Job]:
        context = context or PassContext()
        by_queue: dict[str, list[api.Job]] = {}
        for job in jobs:
            by_queue.setdefault(job.spec.queue, []).append(job)
        result: list[api.Job] = []
        for name, waiting in by_queue.items():
            queue = queues.get(name)
            if queue is None or not queue.HasField("fairshare"):
                result.extend(Fcfs().order(waiting, queues))
                continue
            running = [j for j in context.jobs if j.spec.queue == name and j.state in fairshare.RUNNING]
            result.extend(fairshare.order(queue.fairshare, name, [*waiting, *running],
                                          context.share_usage.get(name, {}), context.now_ms))
        return result


BUILT_IN: dict[str, type] = {"fcfs": Fcfs, "lifo": Lifo, "fairshare": FairShare}


class PickerError(ValueError):
    pass


def load(name: str) -> Picker:
    if name in BUILT_IN:
        picker: Picker = BUILT_IN[name]()
        return picker
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name == name:
            loaded: Picker = point.load()()
            return loaded
    raise PickerError(f"unknown job picker {name!r} (built in: {', '.join(BUILT_IN)}; "
                      f"others register under the {ENTRY_POINT_GROUP!r} entry point group)")


def ordered(jobs: Iterable[api.Job], queues: Mapping[str, api.Queue], default: Picker,
            overrides: Mapping[str, Picker], context: PassContext | None = None) -> list[api.Job]:
    """All jobs in pass order: queues by priority, each queue ordered by its picker."""
    digests = Digests()
    return [d.job for d in in_order([digests.of(j) for j in jobs], queues, default, overrides, context,
                                    digests)]


def in_order(pending: Iterable[Digest], queues: Mapping[str, api.Queue], default: Picker,
             overrides: Mapping[str, Picker], context: PassContext | None, digests: Digests) -> list[Digest]:
    """ordered(), of the jobs' digests (scheduler/job_digest.py): a queue of the FCFS picker is ordered by
    its digests alone, reading no job."""
    by_queue: dict[str, list[Digest]] = {}
    for made in pending:
        group = by_queue.get(made.queue)
        if group is None:
            by_queue[made.queue] = [made]
        else:
            group.append(made)

    def queue_key(name: str) -> tuple[int, str]:
        queue = queues.get(name)
        return (-(queue.priority if queue else 0), name)

    result: list[Digest] = []
    for name in sorted(by_queue, key=queue_key) if len(by_queue) > 1 else by_queue:
        chosen = overrides.get(name, default)
        group = by_queue[name]
        if type(chosen) is Fcfs:  # (its order within one queue is the digests' rank)
            group.sort(key=_RANK)
            result.extend(group)
            continue
        jobs = [made.job for made in group]
        if getattr(chosen, "reads_context", False):
            jobs = chosen.order(jobs, queues, context)  # type: ignore[call-arg]
        else:
            jobs = chosen.order(jobs, queues)
        result.extend(digests.of(job) for job in jobs)
    return result
