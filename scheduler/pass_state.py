"""What one pass has done so far, which its gates and host checks read and write (Nomad's EvalContext).

Theory of operation. A pass makes one PassState and hands it to every job
gate (scheduler/gates.py) and host check (scheduler/host_checks.py): the
usage it has handed out and its host index, its decisions and counts, and
the answers it keeps for the rest of the pass (a queue's refusal, a limit's,
a requirement that found no room). Free amounts only shrink in a pass, so
an answer of no room holds until the pass ends, or, for a requirement on
usage (select[] on slots or memory), until the next placement. Before a
job's gates run, the pass sets the job in hand: the fewest and most slots it
may take (`least`, `most`, narrowed by the limits and backfill gates) and
the backfill reservations it would start on (`charged`). Pure: no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from scheduler import backfill, plans, preemption
from scheduler.decisions import Dispatch, PassResult, Pend
from scheduler.host_index import HostIndex
from scheduler.job_digest import Digest, LimitKey
from scheduler.pass_usage import PassUsage
from scheduler.picker import PassContext
from scheduler.preempt_fallback import PreemptFallback
from xce.rules import feasibility
from xce.v1 import api_pb2 as api

if TYPE_CHECKING:
    from scheduler.core import CoreConfig

NoRoomKey = tuple[int, int, feasibility.Need]  # (fewest slots, most slots, requirement)


class PassState:
    """One pass's bookkeeping: see the module's docstring."""

    def __init__(self, usage: PassUsage, index: HostIndex, context: PassContext, config: CoreConfig,
                 queues: Sequence[api.Queue], queue_map: Mapping[str, api.Queue],
                 limit_defs: Sequence[api.Limit]) -> None:
        self.usage = usage
        self.index = index
        self.context = context
        self.now_ms = context.now_ms
        self.max_dispatches = config.max_dispatches
        self.max_explains = config.max_explains
        self.result = PassResult([])
        self.decisions = self.result.decisions
        self.dispatched = 0
        self.explains = 0  # requirements explained (each reads every host)
        self.recovering = usage.counter(feasibility.RECOVERY_COUNTER) > 0
        self.limited = bool(usage.limits()) or bool(limit_defs)
        self.by_queue: dict[str, feasibility.Reason | None] = {}  # the queue checks, once per queue
        self.queues_with_req = frozenset(q.name for q in queues if q.res_req)  # (no job of these is plain)
        self.limit_refused: dict[LimitKey, feasibility.Reason] = {}
        self.blocked: dict[int, feasibility.Reason] = {}  # job -> the limit that refuses it all the pass
        self.no_plan: dict[NoRoomKey, feasibility.Explanation] = {}
        # A select[] term on usage (slots < 4, mem < 2000) may start to hold as the pass fills hosts:
        # such a job's answer is kept only until the next placement.
        self.until_placed: dict[NoRoomKey, feasibility.Explanation] = {}
        self.tried_static: set[NoRoomKey] = set()  # no plan this pass
        self.tried_moving: set[NoRoomKey] = set()  # ... until the next placement
        # A queue's backfill (scheduler/backfill.py): its first job that finds no room holds the rest.
        modes = {q.name: q.backfill for q in queues if q.backfill and q.backfill != "any"}
        self.holds = (backfill.Holds(modes, context.jobs, context.now_ms, context.reservations) if modes
                      else None)
        # Running jobs as the view has them (a dispatch in flight is not among `jobs`, but it runs).
        preempts = any(preemption.preemptive(q) for q in queues)
        self.fallback = PreemptFallback(context.jobs, queue_map, context.now_ms,
                                        config.max_preemptions) if preempts else None
        # The job in hand.
        self.least = 0
        self.most = 0
        self.charged: Sequence[backfill.Block] = ()

    def forget_no_room(self) -> None:
        """What found no room before may find it now (a reservation given back)."""
        for forgotten in (self.no_plan, self.until_placed, self.tried_static, self.tried_moving):
            forgotten.clear()

    def placed(self, job: api.Job, need: feasibility.Need, plan: plans.Plan) -> None:
        """The job dispatched on its plan: taken, counted and decided."""
        usage = self.usage
        usage.take(plan, need, self.index)
        if self.limited or job.array_limit:
            usage.hold(job, sum(part.slots for part in plan), need, len(plan))
        if need.shared_usage:
            usage.hold_shared(need)
        if self.until_placed:
            self.until_placed.clear()
        if self.tried_moving:
            self.tried_moving.clear()
        self.dispatched += 1
        single = len(plan) == 1 and plan[0].slots == job.spec.slots
        self.decisions.append(Dispatch(job.id, job.attempt, plan[0].host,
                                       () if single else tuple((p.host, p.slots) for p in plan)))
        if self.holds is not None:
            self.holds.placed(job, sum(p.slots for p in plan), self.charged)

    def placed_plain(self, job: api.Job, host: str, before: feasibility.HostState, slots: int) -> None:
        """placed() of a job that asks for nothing but `slots`, on one host (its state `before`), in a pass
        without limits or backfill order (scheduler/plain_lane.py)."""
        self.usage.take_slots(host, before, slots, self.index)
        if self.until_placed:
            self.until_placed.clear()
        if self.tried_moving:
            self.tried_moving.clear()
        self.dispatched += 1
        self.decisions.append(Dispatch(job.id, job.attempt, host))

    def pended(self, made: Digest, reason: feasibility.Reason, recount: bool) -> None:
        """The job waits for `reason` at the end of the pass: counted, and a PEND decision if its committed
        reason differs (`recount`: also if only its counts do)."""
        self.result.waiting[reason.code] += 1
        if reason.code != made.pending_code or (reason.words != made.pending_reason and (
                recount or _shape(reason.words) != _shape(made.pending_reason))):
            self.decisions.append(Pend(made.id, reason.words, reason.code))

    def waits(self, job: api.Job, code: int) -> None:
        """The job, placed on no host, waits for `code`: it may become its queue's head."""
        if self.holds is not None:
            self.holds.hold(job, code)
            self.holds.missed(self.charged, job, self.least)


_DIGITS = str.maketrans("", "", "0123456789")


@functools.lru_cache(maxsize=4096)  # a pass compares each waiting job's words: the same few, pass after pass
def _shape(words: str) -> str:
    """A reason's words without its numbers: what changes only when the counts do not."""
    return words.translate(_DIGITS)
