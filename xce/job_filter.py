"""ListJobs filters: `field:op:value`, all of which must hold.

Ops: eq ne lt le gt ge in (in takes a comma-separated list). Fields and
their types are in FIELDS; states are LSF names (PEND, RUN, ...). A bad
filter raises FilterError naming the part that is wrong.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xce.v1 import api_pb2 as api


class FilterError(ValueError):
    pass


def _state(job: api.Job) -> Any:
    return api.JobState.Name(job.state)


FIELDS: dict[str, tuple[Callable[[api.Job], Any], type]] = {
    "id": (lambda j: j.id, int),
    "state": (_state, str),
    "queue": (lambda j: j.spec.queue, str),
    "name": (lambda j: j.spec.name, str),
    "user": (lambda j: j.spec.user, str),
    "priority": (lambda j: j.spec.priority, int),
    "slots": (lambda j: j.spec.slots, int),
    "submit_time_ms": (lambda j: j.submit_time_ms, int),
    "attempt": (lambda j: j.attempt, int),
    "array": (lambda j: j.array_id, int),  # the array of an element; 0 for other jobs
}

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
    "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "in": lambda value, allowed: value in allowed,
}


@dataclass(frozen=True)
class Filter:
    field: str
    op: str
    value: Any

    def matches(self, job: api.Job) -> bool:
        getter, _ = FIELDS[self.field]
        return OPS[self.op](getter(job), self.value)


def parse(text: str) -> Filter:
    parts = text.split(":", 2)
    if len(parts) != 3:
        raise FilterError(f"filter {text!r} is not field:op:value")
    field, op, raw = parts
    if field not in FIELDS:
        raise FilterError(f"unknown filter field {field!r} (fields: {', '.join(FIELDS)})")
    if op not in OPS:
        raise FilterError(f"unknown filter op {op!r} (ops: {', '.join(OPS)})")
    kind = FIELDS[field][1]
    values = [_convert(field, kind, v) for v in raw.split(",")] if op == "in" else None
    return Filter(field, op, frozenset(values) if values is not None else _convert(field, kind, raw))


def _convert(field: str, kind: type, raw: str) -> Any:
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise FilterError(f"filter on {field} needs a number, got {raw!r}") from None
    if field == "state":
        name = raw.upper()
        if name not in api.JobState.keys() or name == "JOB_STATE_UNSPECIFIED":  # noqa: SIM118 (enum wrapper)
            raise FilterError(f"unknown state {raw!r}")
        return name
    return raw


def matches_all(filters: list[Filter], job: api.Job) -> bool:
    return all(f.matches(job) for f in filters)
