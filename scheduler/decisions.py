"""What a scheduling pass decides, and what it counts on the way (scheduler/core.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from scheduler.backfill import Kept
from xce.v1 import api_pb2 as api


# Named tuples: a pass makes one decision per placement, at a third of a frozen dataclass's cost.
class Dispatch(NamedTuple):
    job_id: int
    attempt: int
    host: str  # the first host: it runs the command
    hosts: tuple[tuple[str, int], ...] = ()  # the whole allocation, unless it is `host` with the job's slots
    chunk: tuple[int, ...] = ()  # jobs to wait in its chunk, to run on its slot after it (rules/chunks.py)


class Pend(NamedTuple):
    job_id: int
    reason: str
    code: api.PendingReason = api.PENDING_REASON_UNSPECIFIED


class Preempt(NamedTuple):
    """The job takes one host from its victims (scheduler/preemption.py), each at its attempt."""

    job_id: int
    attempt: int
    victims: tuple[tuple[int, int], ...]


Decision = Dispatch | Pend | Preempt


@dataclass
class PassResult:
    decisions: list[Decision]
    waiting: Counter[int] = field(default_factory=Counter)  # jobs not dispatched, per pending reason code
    refusals: Counter[str] = field(default_factory=Counter)  # hosts refused, per check, over explanations
    reservations: dict[int, Kept] = field(default_factory=dict)  # end_before heads' reservations to keep
