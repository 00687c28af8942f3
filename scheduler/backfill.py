"""Whether a later job may start past an earlier one of its queue that waits for room (a queue's
`backfill`; issue 18).

The first job of a queue that finds no room in a pass (its head) holds the
queue for the rest of the pass, by the queue's mode:
- `any` (the default; no Block is made): any later job that fits starts;
- `none`: strict order: every later job waits behind the head;
- `end_before`: the head's reservation is the earliest time at which the
  running jobs' expected ends free enough slots for it (computed once, when
  it blocks); a later job starts only if it fits now and ends (now plus its
  estimate) strictly before that: the rule behind the published FCFS with
  backfilling figures (../shared/traces/README.md);
- `easy`: EASY backfilling: a later job starts if it fits now and ends by
  the reservation, or takes no more than the slots the reservation leaves
  over (its "extra" slots, used up as such jobs start).
A job's expected run time is its estimate (-We), else its run limit (-W). A
reservation that depends on an end nobody can tell (a running job without
either; a stopped one) is unknown; with an unknown reservation, or a
waiting job without an estimate, the job waits behind the head.

Reservations count slots over all the hosts that can take jobs (exact for
hosts of one slot, as the published traces' machines; an approximation
where the head's allocation has a shape). Pure: the pass's time is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xce import feasibility
from xce.v1 import api_pb2 as api

MODES = ("any", "none", "easy", "end_before")  # controller/config.py: BACKFILL


def estimate_ms(job: api.Job) -> int | None:
    seconds = job.spec.estimate_s or job.spec.run_limit_s
    return seconds * 1000 if seconds > 0 else None


@dataclass
class Ends:
    """When running jobs are expected to end: (end ms or None, slots), this pass's placements added."""

    known: list[tuple[int | None, int]] = field(default_factory=list)

    @classmethod
    def of(cls, jobs: Sequence[api.Job], states: Mapping[str, feasibility.HostState], now_ms: int) -> Ends:
        """Only what ends on hosts that take jobs counts (free_slots' hosts); an exclusive job frees its
        whole host; a job past its estimate is expected to end any moment, not in the past."""
        ends = cls()
        for job in jobs:
            if job.state in (api.RUN, api.USUSP, api.SSUSP, api.UNKWN):
                taking = []  # (its slots there, the host's slots) on the hosts that take jobs
                for part in feasibility.allocation_of(job):
                    state = states.get(part.host)
                    if state is not None and state.available and not state.closed:
                        taking.append((part.slots, state.slots))
                if not taking:
                    continue
                slots = sum(whole if job.spec.exclusive else mine for mine, whole in taking)
                estimate = estimate_ms(job)
                known = job.state == api.RUN and estimate is not None and job.start_time_ms > 0
                end = max(job.start_time_ms + estimate, now_ms + 1) if known and estimate else None
                ends.known.append((end, slots))
        return ends

    def placed(self, job: api.Job, slots: int, now_ms: int) -> None:
        estimate = estimate_ms(job)
        self.known.append((now_ms + estimate if estimate is not None else None, slots))


@dataclass
class Block:
    """A queue's head, the job that waits for room, and what it lets past it."""

    mode: str
    head: api.Job
    at_ms: int | None = None  # its reservation (None: unknown)
    extra: int = 0  # easy: slots left over at the reservation
    computed: bool = False
    shaped: bool = False  # enough slots are free now: it waits for a shape of hosts, not for slots

    def reserve(self, free_now: int, ends: Ends) -> None:
        """The head's reservation from the slots free now and the expected ends, once."""
        if self.computed:
            return
        self.computed = True
        need = feasibility.least_slots(self.head)
        free = free_now
        if free >= need:  # room in total, not in the shape it asks for: no end to wait for is known
            self.shaped = True
            return
        for end, slots in sorted((e for e in ends.known if e[0] is not None), key=lambda e: e[0] or 0):
            free += slots
            if free >= need:
                self.at_ms, self.extra = end, free - need
                return

    def verdict(self, job: api.Job, slots: int, now_ms: int) -> tuple[feasibility.Reason | None, bool]:
        """(None if the job may start past the head now, else why not; whether it would use the extra)."""
        head = self.head.id
        if self.mode == "none":
            return feasibility.Reason(api.PEND_RESERVATION, f"waiting behind job {head}: its queue starts "
                                      "jobs in order (backfill = none)", "in_order"), False
        estimate = estimate_ms(job)
        if self.at_ms is None or estimate is None:
            if estimate is None and self.at_ms is not None:
                why = "this job has no estimate (-We or -W)"
            elif self.shaped:
                why = "it waits for hosts of a shape, not for a number of slots: no reservation"
            else:
                why = "its reservation cannot be known (a running job without an estimate, -We or -W)"
            return feasibility.Reason(api.PEND_RESERVATION, f"waiting behind job {head}: {why}",
                                      "reservation"), False
        end = now_ms + estimate
        if end < self.at_ms or self.mode == "easy" and end == self.at_ms:
            return None, False
        if self.mode == "easy" and slots <= self.extra:
            return None, True
        return feasibility.Reason(api.PEND_RESERVATION, f"would delay job {head}, which has room in "
                                  f"{max(0, self.at_ms - now_ms) // 1000} s (its reservation)",
                                  "reservation"), False


def free_slots(states: dict[str, feasibility.HostState]) -> int:
    return sum(max(0, s.slots - s.used) for s in states.values() if s.available and not s.closed)
