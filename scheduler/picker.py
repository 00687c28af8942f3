"""Job pickers: in which order a pass considers pending jobs (F1, F2).

A picker is anything with `order(jobs, queues) -> jobs`. FCFS, the built-in
one, goes across queues by queue priority (descending), and inside a queue
by job priority (descending), then submit time (ascending), then job id
(ascending), so equal submit times still give one order. The core asks
`pickers_for(config)` which picker serves each queue: `job_pick_plugin` for
all, with a per-queue override in `queue_pickers`; third-party pickers
register under the `xce.pickers` entry point group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Protocol

from xce.v1 import api_pb2 as api

ENTRY_POINT_GROUP = "xce.pickers"


class Picker(Protocol):
    def order(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue]) -> list[api.Job]: ...


class Fcfs:
    """First come, first served, within queue and job priorities (F2)."""

    def order(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue]) -> list[api.Job]:
        def key(job: api.Job) -> tuple[int, int, int, int]:
            queue = queues.get(job.spec.queue)
            return (-(queue.priority if queue else 0), -job.spec.priority, job.submit_time_ms, job.id)

        return sorted(jobs, key=key)


class Lifo:
    """Last come, first served inside a queue: an example of a per-queue override."""

    def order(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue]) -> list[api.Job]:
        def key(job: api.Job) -> tuple[int, int, int, int]:
            queue = queues.get(job.spec.queue)
            return (-(queue.priority if queue else 0), -job.spec.priority, -job.submit_time_ms, -job.id)

        return sorted(jobs, key=key)


BUILT_IN: dict[str, type] = {"fcfs": Fcfs, "lifo": Lifo}


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
            overrides: Mapping[str, Picker]) -> list[api.Job]:
    """All jobs in pass order: queues by priority, each queue ordered by its picker."""
    by_queue: dict[str, list[api.Job]] = {}
    for job in jobs:
        by_queue.setdefault(job.spec.queue, []).append(job)

    def queue_key(name: str) -> tuple[int, str]:
        queue = queues.get(name)
        return (-(queue.priority if queue else 0), name)

    result: list[api.Job] = []
    for name in sorted(by_queue, key=queue_key):
        result.extend(overrides.get(name, default).order(by_queue[name], queues))
    return result
