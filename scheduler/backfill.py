"""Whether a later job may start past an earlier one of its queue that waits for room (a queue's
`backfill`).

The first job of a queue that finds no room in a pass (its head) holds the
queue for the rest of the pass, by the queue's mode:
- `any` (the default; no Block is made): any later job that fits starts;
- `none`: strict order: every later job waits behind the head;
- `end_before`: the head's reservation is the earliest time at which the
  running jobs' expected ends free enough slots for it, computed in the
  first pass in which it waits and kept (in the planner's state: Kept) while
  it heads its queue, even if jobs end before their estimates; a later job
  starts only if it fits now and ends (now plus its estimate) strictly
  before that: the rule behind the published FCFS with backfilling figures
  (../shared/traces/README.md; RLScheduler computes it once, when the head
  blocks). What the rule never meets is not papered over: a reservation
  reckoned again as unknown (a job it waits for stopped, lost its host's
  word) is unknown, and one kept from a larger machine (hosts lost or
  closed since), for another attempt or another queue is reckoned again, as
  is every one after a scheduler restart (the state is the scheduler's);
- `easy`: EASY backfilling: a later job starts if it fits now and ends by
  the reservation, or takes no more than the slots the reservation leaves
  over (its "extra" slots, used up as such jobs start);
- `conservative`: conservative backfilling: every job that cannot start gets
  a reservation, in the pass's order, in a profile of free slots over time
  (the slots free now, plus each expected end's; less each reservation over
  its estimate); a later job starts only if the profile has room for it from
  now to its end, so it delays no earlier job. A job without an estimate
  holds its slots for ever (in the profile). The first DEPTH jobs past the
  head are looked at; the rest wait behind it, as Slurm's bf_max_job_test.
A job's expected run time is its estimate (-We), else its run limit (-W). A
reservation that depends on an end nobody can tell (a running job without
either; a stopped one) is unknown; with an unknown reservation, or a
waiting job without an estimate, the job waits behind the head
(conservative: behind the first job whose reservation is unknown).

Reservations count slots over all the hosts that can take jobs (exact for
hosts of one slot, as the published traces' machines; an approximation
where the head's allocation has a shape). Pure: the pass's time is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from xce.rules import feasibility
from xce.v1 import api_pb2 as api

MODES = ("any", "none", "easy", "end_before", "conservative")  # controller/config.py: BACKFILL


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


DEPTH = 200  # conservative: the jobs after the head that a pass reserves for


@dataclass(frozen=True)
class Kept:
    """An end_before head's reservation, kept from the pass in which it first waited, with what it was
    reckoned for: that attempt of the job, in that queue, on that many slots of hosts taking jobs."""

    at_ms: int
    attempt: int
    queue: str
    capacity: int


@dataclass
class Profile:
    """Free slots over time: steps [start ms, free], ascending; the last one lasts for ever."""

    steps: list[list[int]]

    @classmethod
    def of(cls, free_now: int, ends: Ends, now_ms: int) -> Profile:
        """An end nobody can tell frees nothing (it runs for ever, as far as the profile knows)."""
        steps = [[now_ms, free_now]]
        for end, slots in sorted((e for e in ends.known if e[0] is not None), key=lambda e: e[0] or 0):
            at = max(end or 0, now_ms)
            if steps[-1][0] == at:
                steps[-1][1] += slots
            else:
                steps.append([at, steps[-1][1] + slots])
        return cls(steps)

    def room(self, start_ms: int, length_ms: int | None) -> int:
        """The fewest free slots from start for length (None: for ever)."""
        end = None if length_ms is None else start_ms + length_ms
        least = None
        for i, (at, free) in enumerate(self.steps):
            until = self.steps[i + 1][0] if i + 1 < len(self.steps) else None
            if until is not None and until <= start_ms:
                continue
            if end is not None and at >= end:
                break
            least = free if least is None else min(least, free)
        return least if least is not None else 0

    def earliest(self, slots: int, length_ms: int | None, after_ms: int) -> int | None:
        """The first time from after_ms at which slots stay free for length (None: never)."""
        for at in [after_ms, *(at for at, _ in self.steps if at > after_ms)]:
            if self.room(at, length_ms) >= slots:
                return at
        return None

    def take(self, start_ms: int, slots: int, length_ms: int | None) -> None:
        end = None if length_ms is None else start_ms + length_ms
        self._split(start_ms)
        if end is not None:
            self._split(end)
        for step in self.steps:
            if step[0] >= start_ms and (end is None or step[0] < end):
                step[1] -= slots

    def _split(self, at_ms: int) -> None:
        for i, (at, _) in enumerate(self.steps):
            if at == at_ms:
                return
            if at > at_ms:  # (never before the first step: the profile starts now)
                self.steps.insert(i, [at_ms, self.steps[max(i - 1, 0)][1]])
                return
        self.steps.append([at_ms, self.steps[-1][1]])


@dataclass
class Block:
    """A queue's head, the job that waits for room, and what it lets past it."""

    mode: str
    head: api.Job
    at_ms: int | None = None  # its reservation (None: unknown)
    extra: int = 0  # easy: slots left over at the reservation
    computed: bool = False
    shaped: bool = False  # enough slots are free now: it waits for a shape of hosts, not for slots
    profile: Profile | None = None  # conservative
    stuck: api.Job | None = None  # conservative: the first job whose reservation is unknown
    reserved: int = 0  # conservative: jobs given a reservation after the head

    def reserve(self, free_now: int, ends: Ends, now_ms: int) -> None:
        """The head's reservation from the slots free now and the expected ends, once."""
        if self.computed:
            return
        self.computed = True
        need = feasibility.least_slots(self.head)
        free = free_now
        if free >= need:  # room in total, not in the shape it asks for: no end to wait for is known
            self.shaped = True
            return
        if self.mode == "conservative":
            self.profile = Profile.of(free_now, ends, now_ms)
            self.at_ms = self.profile.earliest(need, estimate_ms(self.head), now_ms)
            if self.at_ms is not None:
                self.profile.take(self.at_ms, need, estimate_ms(self.head))
            return
        known = sorted((e for e in ends.known if e[0] is not None), key=lambda e: e[0] or 0)
        for i, (end, slots) in enumerate(known):
            free += slots
            if free >= need:
                # The extra slots are all those free at that time (Mu'alem & Feitelson's shadow time):
                # every job ending at the same time gives its slots back too, not only the first.
                free += sum(more for at, more in known[i + 1:] if at == end)
                self.at_ms, self.extra = end, free - need
                return

    def verdict(self, job: api.Job, slots: int, now_ms: int) -> tuple[feasibility.Reason | None, int | None]:
        """(None if the job may start past the head now, else why not; the most slots it may then take
        if they are counted against the reservation: charge() them once it starts)."""
        head = self.head.id
        if self.mode == "none":
            return feasibility.Reason(api.PEND_RESERVATION, f"waiting behind job {head}: its queue starts "
                                      "jobs in order (backfill = none)", "in_order"), None
        if self.mode == "conservative":
            return self._conservative(job, slots, now_ms)
        estimate = estimate_ms(job)
        if self.at_ms is None or estimate is None:
            if estimate is None and self.at_ms is not None:
                why = "this job has no estimate (-We or -W)"
            elif self.shaped:
                why = "it waits for hosts of a shape, not for a number of slots: no reservation"
            else:
                why = "its reservation cannot be known (a running job without an estimate, -We or -W)"
            return feasibility.Reason(api.PEND_RESERVATION, f"waiting behind job {head}: {why}",
                                      "reservation"), None
        end = now_ms + estimate
        if end < self.at_ms or self.mode == "easy" and end == self.at_ms:
            return None, None
        if self.mode == "easy" and slots <= self.extra:
            return None, self.extra
        return feasibility.Reason(api.PEND_RESERVATION, f"would delay job {head}, which has room in "
                                  f"{max(0, self.at_ms - now_ms) // 1000} s (its reservation)",
                                  "reservation"), None

    def _conservative(self, job: api.Job, slots: int,
                      now_ms: int) -> tuple[feasibility.Reason | None, int | None]:
        head = self.head.id
        if self.profile is None or self.at_ms is None or self.stuck is not None:
            behind = self.stuck.id if self.stuck is not None else head
            why = ("it waits for hosts of a shape, not for a number of slots: no reservation" if self.shaped
                   else "its reservation cannot be known (a running job without an estimate, -We or -W)")
            return feasibility.Reason(api.PEND_RESERVATION, f"waiting behind job {behind}: {why}",
                                      "reservation"), None
        length = estimate_ms(job)
        room = self.profile.room(now_ms, length)
        if room >= slots:
            return None, room
        if self.reserved >= DEPTH:
            return feasibility.Reason(api.PEND_RESERVATION, f"waiting behind job {head}: a pass reserves for "
                                      f"the first {DEPTH} jobs after it (backfill = conservative)",
                                      "reservation"), None
        return self._reserved(job, slots, now_ms, now_ms), None

    def _reserved(self, job: api.Job, slots: int, now_ms: int, after_ms: int) -> feasibility.Reason:
        assert self.profile is not None
        length = estimate_ms(job)
        at = self.profile.earliest(slots, length, after_ms)
        if at is None:
            self.stuck = job
            return feasibility.Reason(api.PEND_RESERVATION, f"waiting behind job {self.head.id}: its own "
                                      "reservation cannot be known (a running job without an estimate, -We "
                                      "or -W)", "reservation")
        self.profile.take(at, slots, length)
        self.reserved += 1
        return feasibility.Reason(api.PEND_RESERVATION, f"would delay earlier jobs' reservations (job "
                                  f"{self.head.id} first); its own: room in {max(0, at - now_ms) // 1000} s",
                                  "reservation")

    def charge(self, job: api.Job, slots: int, now_ms: int) -> None:
        """The job started past the head on `slots` that verdict() counted against the reservation."""
        if self.profile is not None:
            self.profile.take(now_ms, slots, estimate_ms(job))
        else:
            self.extra -= slots

    def missed(self, job: api.Job, slots: int, now_ms: int) -> None:
        """The job that verdict() let past found no room after all: enough slots, not in the shape it
        asks for. Conservative: it is reserved for like any other, from the next expected end (the
        profile counts slots, not shapes; an end is when its shape may come free)."""
        if self.profile is None or self.stuck is not None or self.reserved >= DEPTH:
            return
        later = [at for at, _ in self.profile.steps if at > now_ms]
        if later:
            self._reserved(job, slots, now_ms, later[0])
        else:
            self.stuck = job


def free_slots(states: Mapping[str, feasibility.HostState]) -> int:
    return sum(max(0, s.slots - s.used) for s in states.values() if s.available and not s.closed)


def capacity(states: Mapping[str, feasibility.HostState]) -> int:
    """The slots of the hosts that take jobs."""
    return sum(s.slots for s in states.values() if s.available and not s.closed)


# A job waiting for room (not for a limit, a dependency or a host it names) holds its queue's order.
_HOLDS_ITS_QUEUE = frozenset({api.PEND_NO_FREE_SLOTS, api.PEND_NO_FREE_RESOURCES,
                              api.PEND_PREEMPTION_PENDING})


class Holds:
    """One pass's queue heads (a Block per queue with a mode whose head is known) and the running jobs'
    expected ends, made when a reservation first needs them; the pass's placements until then."""

    def __init__(self, modes: Mapping[str, str], jobs: Sequence[api.Job], now_ms: int,
                 kept: Mapping[int, Kept] | None = None) -> None:
        self.modes = modes  # queue -> its backfill mode, for the queues whose mode is not `any`
        self.blocks: dict[str, Block] = {}
        self._kept = kept or {}  # end_before heads' reservations from earlier passes, by job
        self._jobs = jobs  # the view's, running ones among them
        self._now_ms = now_ms
        self._ends: Ends | None = None
        self._started: list[tuple[api.Job, int]] = []

    def verdict(self, job: api.Job, least: int, most: int, states: dict[str, feasibility.HostState]
                ) -> tuple[feasibility.Reason | None, int, list[Block]]:
        """(None if the job may start past the heads now, else why not; the most slots it may take; the
        reservations those slots are counted against). Its queue's head holds it, and so do the
        reservations of the queues before it (a job of a lower queue must not delay them either; strict
        order holds its own queue only)."""
        charged: list[Block] = []
        for owner, block in self.blocks.items():
            if owner != job.spec.queue and block.mode == "none":
                continue
            if block.mode != "none" and not block.computed:
                self._reserve(block, states)
            reason, cap = block.verdict(job, least, self._now_ms)
            if reason is not None:
                return reason, most, charged
            if cap is not None:
                charged.append(block)
                most = min(most, cap)  # (-n min,max: no more than the reservations leave)
        return None, most, charged

    def placed(self, job: api.Job, slots: int, charged: Iterable[Block]) -> None:
        if self._ends is not None:
            self._ends.placed(job, slots, self._now_ms)
        else:
            self._started.append((job, slots))
        for block in charged:
            block.charge(job, slots, self._now_ms)

    def hold(self, job: api.Job, code: int) -> None:
        """The job, waiting for `code`, becomes its queue's head if the queue has none and a backfill mode
        (a reservation counts slots: a head short of a consumable holds only strict order)."""
        queue = job.spec.queue
        modes = self.modes
        if job.spec.reservation:  # it waits for its reservation's slots, which no other job may take
            return
        if queue in modes and queue not in self.blocks and code in _HOLDS_ITS_QUEUE and (
                modes[queue] == "none" or code != api.PEND_NO_FREE_RESOURCES):
            self.blocks[queue] = Block(modes[queue], job)

    def missed(self, charged: Iterable[Block], job: api.Job, least: int) -> None:
        for block in charged:
            block.missed(job, least, self._now_ms)

    def _reserve(self, block: Block, states: Mapping[str, feasibility.HostState]) -> None:
        block.reserve(free_slots(states), self._ends_of(states), self._now_ms)
        if block.mode != "end_before" or block.at_ms is None:
            return  # (an unknown reservation stays unknown, whatever was kept)
        kept = self._valid(block.head, states)
        if kept is not None:
            block.at_ms = kept.at_ms

    def _valid(self, head: api.Job, states: Mapping[str, feasibility.HostState]) -> Kept | None:
        kept = self._kept.get(head.id)
        if kept is None or kept.attempt != head.attempt or kept.queue != head.spec.queue or \
                kept.capacity > capacity(states):
            return None
        return kept

    def kept(self, states: Mapping[str, feasibility.HostState]) -> dict[int, Kept]:
        """At the pass's end: the end_before heads' reservations for the next passes (computed now for a
        head no later job asked about: it is the time as of the pass in which the head first waited)."""
        kept: dict[int, Kept] = {}
        for block in self.blocks.values():
            if block.mode == "end_before":
                if not block.computed:
                    self._reserve(block, states)
                head = block.head
                if block.at_ms is not None:
                    before = self._valid(head, states)
                    kept[head.id] = before if before is not None and before.at_ms == block.at_ms else Kept(
                        block.at_ms, head.attempt, head.spec.queue, capacity(states))
        return kept

    def _ends_of(self, states: Mapping[str, feasibility.HostState]) -> Ends:
        if self._ends is None:
            self._ends = Ends.of(self._jobs, states, self._now_ms)
            for job, slots in self._started:
                self._ends.placed(job, slots, self._now_ms)
        return self._ends
