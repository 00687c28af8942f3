"""The scheduling core: one pass over a view -> decisions (F3).

Theory of operation. A pass orders the pending jobs with the pickers
(picker.py), then places each, counting what it has already handed out in
this pass (slots, consumables and cluster-wide counters), so one pass never
over-commits a host or passes a limit. What "fits" means is
xce/feasibility.py, the same module apply re-checks every DISPATCH with:
the job-level checks (queue active, limits) run first; the hosts come from
an index (`HostIndex`: the available hosts with free slots, most free first,
then by name, and the same per static select[]), filtered by the rest of the
job's requirement and laid out by scheduler/plans.py (one host if one can
take it, else 2 hosts, ...); the plan is verified with `feasibility.check`.
A job that has no plan is explained by running the host checks on every
host (per-check counts); both the failure and its explanation are kept for
the pass per (fewest slots, most slots, requirement), since free amounts
only shrink in a pass (A4's per-pass cache: a later job asking the same
finds it at once). Every job the pass does not dispatch gets a pending
reason (G5), and a PEND decision is made only when that reason differs from
the job's committed one, so a busy cluster does not churn the log.

Pure: no I/O, no clock, no threads; the same inputs give the same decisions.
What happens across passes (decisions in flight, hosts cooling down after a
refusal) is the planner's (planner.py).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler import backfill, plans, preemption
from scheduler.picker import Fcfs, PassContext, Picker, ordered
from xce import depend, feasibility, limits, resreq, start_failures
from xce.invariant import InvariantViolated, invariant
from xce.v1 import api_pb2 as api

Reason = tuple[int, str]  # (code: api.PendingReason, words), as `bjobs -p` shows them

REASON_NO_HOSTS: Reason = feasibility.REASON_NO_HOSTS.key()
REASON_QUEUE_INACTIVE: Reason = feasibility.REASON_QUEUE_INACTIVE.key()
_NO_ALLOCATION = feasibility.Reason(api.PEND_NO_FREE_SLOTS, "no set of hosts that fits the requirement "
                                                            "together has room now", "plan")


@dataclass(frozen=True)
class Dispatch:
    job_id: int
    attempt: int
    host: str  # the first host: it runs the command
    hosts: tuple[tuple[str, int], ...] = ()  # the whole allocation, unless it is `host` with the job's slots


@dataclass(frozen=True)
class Pend:
    job_id: int
    reason: str
    code: api.PendingReason = api.PENDING_REASON_UNSPECIFIED


@dataclass(frozen=True)
class Preempt:
    """The job takes one host from its victims (scheduler/preemption.py), each at its attempt."""

    job_id: int
    attempt: int
    victims: tuple[tuple[int, int], ...]


Decision = Dispatch | Pend | Preempt


@dataclass
class CoreConfig:
    picker: Picker = field(default_factory=Fcfs)
    queue_pickers: Mapping[str, Picker] = field(default_factory=dict)
    max_dispatches: int = 4000  # per pass: one entry of ~100 KB, applied in ~0.05 s
    max_explains: int = 200  # requirements explained per pass (each reads every host: ~20 ms at 5,000)
    max_preemptions: int = 16  # PREEMPT decisions per pass (each looks at the hosts with victims)


_UNSEEN = feasibility.Reason(api.PENDING_REASON_UNSPECIFIED, "", "unseen")  # a cache miss


@dataclass
class PassResult:
    decisions: list[Decision]
    waiting: Counter[int] = field(default_factory=Counter)  # jobs not dispatched, per pending reason code
    refusals: Counter[str] = field(default_factory=Counter)  # hosts refused, per check, over explanations


# The states of the jobs a pass may act on: pending ones, and suspended ones it may resume.
WAITING = frozenset({api.PEND, api.SSUSP})


def schedule(jobs: Sequence[api.Job], queues: Sequence[api.Queue], hosts: Sequence[api.Host],
             now_ms: int, config: CoreConfig, counters: Mapping[str, int] | None = None,
             shared: Mapping[str, int] | None = None, limit_defs: Sequence[api.Limit] = ()) -> list[Decision]:
    return run_pass(jobs, queues, hosts, config, counters or {}, shared=shared,
                    limit_defs=limit_defs).decisions


def run_pass(jobs: Sequence[api.Job], queues: Sequence[api.Queue], hosts: Sequence[api.Host],
             config: CoreConfig, counters: Mapping[str, int], recount: bool = True,
             shared: Mapping[str, int] | None = None, limit_defs: Sequence[api.Limit] = (),
             context: PassContext | None = None, fleet: Fleet | None = None) -> PassResult:
    """One pass. `recount`: also send reasons whose only change is in their counts (the planner
    allows it at a bounded rate); a changed code or wording is always sent. `fleet`: what the pass
    would make of `hosts`, if the caller keeps it between passes (the pass changes it as it places
    jobs, and puts it back as it was before it returns)."""
    queue_map = {q.name: q for q in queues}
    usage = PassUsage(hosts, queue_map, counters, shared or {}, limit_defs,
                      lent=fleet.states if fleet is not None else None)
    index = HostIndex(usage.states, fleet)
    try:
        return _placed(jobs, queues, queue_map, config, recount, limit_defs, context, usage, index)
    finally:
        usage.give_back()


def _placed(jobs: Sequence[api.Job], queues: Sequence[api.Queue], queue_map: Mapping[str, api.Queue],
            config: CoreConfig, recount: bool, limit_defs: Sequence[api.Limit], context: PassContext | None,
            usage: PassUsage, index: HostIndex) -> PassResult:
    """run_pass, on its hosts' states and index."""
    by_queue: dict[str, feasibility.Reason | None] = {}  # the queue checks, once per queue (A4)
    no_plan: dict[tuple[int, int, feasibility.Need], feasibility.Explanation] = {}
    # A select[] term on usage (slots < 4, mem < 2000) may start to hold as the pass fills hosts:
    # such a job's answer is kept only until the next placement.
    until_placed: dict[tuple[int, int, feasibility.Need], feasibility.Explanation] = {}
    tried_static: set[tuple[int, int, feasibility.Need]] = set()  # no plan this pass
    tried_moving: set[tuple[int, int, feasibility.Need]] = set()  # ... until the next placement
    explains = 0
    limited = bool(usage.limits()) or bool(limit_defs)
    limit_refused: dict[LimitKey, feasibility.Reason] = {}
    recovering = usage.counter(feasibility.RECOVERY_COUNTER) > 0
    result = PassResult([])
    decisions = result.decisions
    limit_reached = _limit_reached(config.max_dispatches)
    dispatched = 0
    context = context or PassContext(jobs)
    now_ms = context.now_ms
    # A queue's backfill (scheduler/backfill.py): its first job that finds no room holds the rest.
    modes = {q.name: q.backfill for q in queues if q.backfill and q.backfill != "any"}
    blocks: dict[str, backfill.Block] = {}
    ends: backfill.Ends | None = None  # running jobs' expected ends, made when a reservation needs them
    started: list[tuple[api.Job, int]] = []  # this pass's placements until then
    # Running jobs as the view has them (a dispatch in flight is not among `jobs`, but it runs).
    preempting = _Preempting(context.jobs, queue_map, context.now_ms) if any(
        preemption.preemptive(q) for q in queues) else None
    # An array's record is never dispatched: its elements are jobs of their own (fsm/arrays.py).
    pending = [j for j in jobs if j.state == api.PEND and not j.spec.HasField("array")]
    blocked: dict[int, feasibility.Reason] = {}  # job -> the limit that refuses it all the pass
    blocked_jobs: list[api.Job] = []
    if limited or any(j.array_limit for j in pending):
        # Counters only grow in a pass: a job a limit refuses at its start is refused all through it.
        # Such jobs are not ordered (their reasons do not depend on their places), and the jobs that
        # may run are ordered without them (LSF skips the jobs of a user at its limit too).
        pending, blocked_jobs, blocked = _limit_blocked(pending, usage, limited, limit_refused)
    waiting = ordered(pending, queue_map, config.picker, config.queue_pickers, context)
    if preempting is not None:
        preempting.keep(waiting, usage, index)
    # (a resume in flight is not among `jobs`)
    for job in itertools.chain(_with_resumes(waiting, jobs, queue_map), blocked_jobs):
        spec = job.spec
        # What its victims gave back, kept for it (it stays kept unless this job is placed on it).
        kept = preempting.kept.pop(job.id, None) if preempting is not None and preempting.kept else None
        if job.state == api.SSUSP:  # a preempted job whose slots were given back: it takes them again
            if dispatched < config.max_dispatches and usage.take_back(job, index):
                dispatched += 1
                single = not job.allocation
                decisions.append(Dispatch(job.id, job.attempt, job.host, () if single else tuple(
                    (part.host, part.slots) for part in job.allocation)))
            continue
        queue = spec.queue
        reason = by_queue.get(queue, _UNSEEN)
        if reason is _UNSEEN:
            reason = by_queue[queue] = feasibility.queue_refusal(queue, usage)
        if reason is None and spec.depend and job.depend_state != api.DEPEND_SATISFIED:
            reason = dependency_reason(job)
        if reason is None and job.attempt and job.not_before_ms > now_ms:  # its backoff: its own start failed
            reason = start_retry_reason(job)
        if reason is None and (recovering or job.stray_hosts):
            reason = feasibility.safety_refusal(job, usage)
        if reason is None and dispatched >= config.max_dispatches and job.id not in blocked:
            reason = limit_reached  # (its own limits are looked at when a pass may place it)
        bounded = limited or job.array_limit
        least, most = feasibility.least_slots(job) if reason is None else 0, spec.slots
        if reason is None and bounded:
            reason = blocked.get(job.id) or _limit_reason(job, usage, limit_refused)
            if least < most:  # -n min,max: as many as the limits leave (least fits: checked above)
                most = min(most, usage.room(job, most))
        charged: list[backfill.Block] = []  # heads whose extra slots it would start on (easy)
        if reason is None and blocks:
            # Its queue's head, and the reservations of the queues before it (a job of a lower queue
            # must not delay them either; strict order holds its own queue only).
            for owner, block in blocks.items():
                if owner != queue and block.mode == "none":
                    continue
                if block.mode != "none" and not block.computed:
                    if ends is None:
                        ends = backfill.Ends.of(context.jobs, usage.states, context.now_ms)
                        for placed_job, placed_slots in started:
                            ends.placed(placed_job, placed_slots, context.now_ms)
                    block.reserve(backfill.free_slots(usage.states), ends, context.now_ms)
                reason, cap = block.verdict(job, least, context.now_ms)
                if reason is not None:
                    break
                if cap is not None:
                    charged.append(block)
                    most = min(most, cap)  # (-n min,max: no more than the reservations leave)
        if reason is None:
            if kept:
                usage.unreserve(kept, index)  # its own to take now
                for forgotten in (no_plan, until_placed, tried_static, tried_moving):
                    forgotten.clear()  # what found no room before may find it now
            need = feasibility.job_need(job, usage)
            key = (least, most, need)
            moving = index.reads_usage(need)
            cache, tried = (until_placed, tried_moving) if moving else (no_plan, tried_static)
            explanation = cache.get(key)
            if explanation is None and need.shared_usage:  # licenses: the job's, whatever the hosts
                refusal = feasibility.shared_refusal(need, usage)
                if refusal is not None:
                    explanation = feasibility.Explanation(refusal)
            if explanation is None:
                plan = index.plan(need, least, most) if key not in tried else None
                if plan is not None:
                    parts = [feasibility.Allocation(host, slots) for host, slots in plan]
                    refusal = feasibility.check(job, parts, usage, need_=need, unknown=frozenset())
                    if refusal is None:
                        usage.take(parts, need, index)
                        if bounded:
                            usage.hold(job, sum(part.slots for part in parts), need, len(parts))
                        usage.hold_shared(need)
                        until_placed.clear()
                        tried_moving.clear()
                        dispatched += 1
                        single = len(plan) == 1 and plan[0].slots == spec.slots
                        decisions.append(Dispatch(job.id, job.attempt, plan[0].host,
                                                  () if single else tuple((p.host, p.slots) for p in plan)))
                        if modes:
                            placed = sum(p.slots for p in plan)
                            if ends is not None:
                                ends.placed(job, placed, context.now_ms)
                            else:
                                started.append((job, placed))
                            for block in charged:
                                block.charge(job, placed, context.now_ms)
                        continue
                    if refusal.check != "within_limits":  # the index and the definition disagree: a bug
                        raise InvariantViolated(f"the host index chose {plan} for job {job.id}, which does "
                                                f"not fit there: {refusal}")
                    # A limit on consumables, which the plan's hosts count: this job's answer, not cached.
                    explanation = feasibility.Explanation(refusal)
                else:
                    tried.add(key)
                    # Explaining reads every host: a pass explains at most max_explains requirements
                    # (the jobs past that keep their reasons until a later pass).
                    if explains >= config.max_explains:
                        if kept:
                            usage.reserve(kept, index)  # not placed: still its own
                        # Unexplained this pass: it holds its queue if its last reason did.
                        _hold(modes, blocks, job, job.pending_code)
                        _missed(charged, job, least, context.now_ms)
                        continue
                    explanation = cache[key] = feasibility.explain(job, usage, need)
                    explains += 1
                    result.refusals.update(explanation.counts)
            reason = explanation.reason or _NO_ALLOCATION
            if kept:
                usage.reserve(kept, index)  # not placed: still its own, all the pass
            if preempting is not None and reason.code in _PREEMPTS_FOR:
                if preempting.waits(job):
                    reason = _PREEMPTION_PENDING
                    if kept is None:
                        usage.reserve(preempting.freed.get(job.id, ()), index)  # kept for it, all the pass
                elif len(preempting.sent) < config.max_preemptions:
                    choice = preempting.choose(job, need, least, usage)
                    if choice is not None:
                        decisions.append(choice)
                        _hold(modes, blocks, job, api.PEND_PREEMPTION_PENDING)
                        _missed(charged, job, least, context.now_ms)
                        continue
            _hold(modes, blocks, job, reason.code)
            _missed(charged, job, least, context.now_ms)
        if reason is None:
            continue  # past this pass's explanations: it keeps its reason until a later pass
        result.waiting[reason.code] += 1
        if reason.code != job.pending_code or (reason.words != job.pending_reason and (
                recount or _shape(reason.words) != _shape(job.pending_reason))):
            decisions.append(Pend(job.id, reason.words, reason.code))
    return result


@functools.lru_cache(maxsize=16)  # the same few limits, pass after pass (an f-string a pass was ~1 %)
def _limit_reached(max_dispatches: int) -> feasibility.Reason:
    return feasibility.Reason(api.PEND_DISPATCH_LIMIT, f"this pass placed {max_dispatches} jobs, its limit: "
                              "the next pass looks again", "dispatch_limit")


LimitKey = tuple[str, str, str, int, int, int]


def _key_of(job: api.Job) -> LimitKey:
    """What a job's limits read of it: jobs with the same key are refused alike."""
    spec = job.spec
    return (spec.queue, spec.user, spec.project, feasibility.least_slots(job), job.array_id, job.array_limit)


def _limit_reason(job: api.Job, usage: PassUsage, refused: dict[LimitKey, feasibility.Reason]
                  ) -> feasibility.Reason | None:
    """limit_refusal at the job's least slots; a refusal is kept for the rest of the pass."""
    key = _key_of(job)
    reason = refused.get(key)
    if reason is None:
        reason = feasibility.limit_refusal(job, usage, key[3])
        if reason is not None:
            refused[key] = reason
    return reason


def _limit_blocked(pending: list[api.Job], usage: PassUsage, limited: bool,
                   refused: dict[LimitKey, feasibility.Reason]
                   ) -> tuple[list[api.Job], list[api.Job], dict[int, feasibility.Reason]]:
    """(the jobs no limit refuses now, the ones one does, and why by job)."""
    open_, blocked, why = [], [], {}
    for job in pending:
        reason = _limit_reason(job, usage, refused) if limited or job.array_limit else None
        if reason is None:
            open_.append(job)
        else:
            blocked.append(job)
            why[job.id] = reason
    return open_, blocked, why


# A job waiting for room (not for a limit, a dependency or a host it names) holds its queue's order.
_HOLDS_ITS_QUEUE = frozenset({api.PEND_NO_FREE_SLOTS, api.PEND_NO_FREE_RESOURCES,
                              api.PEND_PREEMPTION_PENDING})

def _hold(modes: Mapping[str, str], blocks: dict[str, backfill.Block], job: api.Job,
          code: int) -> None:
    """The job, waiting for `code`, becomes its queue's head if the queue has none and a backfill mode
    (a reservation counts slots: a head short of a consumable holds only strict order)."""
    queue = job.spec.queue
    if queue in modes and queue not in blocks and code in _HOLDS_ITS_QUEUE and (
            modes[queue] == "none" or code != api.PEND_NO_FREE_RESOURCES):
        blocks[queue] = backfill.Block(modes[queue], job)


def _missed(charged: Sequence[backfill.Block], job: api.Job, least: int, now_ms: int) -> None:
    for block in charged:
        block.missed(job, least, now_ms)


# Only a lack of slots preempts: a license short cluster-wide (NO_FREE_RESOURCES) is not a host's to
# give, and preempting for it would stop one victim after another, every pass.
_PREEMPTS_FOR = frozenset({api.PEND_NO_FREE_SLOTS})
_PREEMPTION_PENDING = feasibility.Reason(api.PEND_PREEMPTION_PENDING, "preemption pending: waiting for the "
                                         "jobs it preempted to give back their slots", "preempting")


def _with_resumes(waiting: list[api.Job], jobs: Sequence[api.Job],
                  queues: Mapping[str, api.Queue]) -> list[api.Job]:
    """The pass's order with the suspended victims that gave back their slots first in their queue:
    after the pending jobs of queues above theirs (which might only preempt them again)."""
    resumable = sorted((j for j in jobs if j.state == api.SSUSP and j.released and not j.kill_requested
                        and not j.requeue_requested),
                       key=lambda j: (-j.spec.priority, j.start_time_ms, j.id))
    if not resumable:
        return waiting

    def rank(job: api.Job) -> tuple[int, str]:
        queue = queues.get(job.spec.queue)
        return (-(queue.priority if queue else 0), job.spec.queue)

    return sorted([*resumable, *waiting], key=rank)  # stable: resumes, then the picker's order


class _Preempting:
    """The pass's preemptions: the running jobs by host, what is preempted already."""

    def __init__(self, jobs: Sequence[api.Job], queues: Mapping[str, api.Queue], now_ms: int) -> None:
        self.queues = queues
        self.now_ms = now_ms
        self.by_host: dict[str, list[api.Job]] = {}  # the running jobs of preemptable queues
        self.holding: dict[int, int] = Counter()  # preemptor -> victims not yet given back
        self.freed: dict[int, list[api.HostAllocation]] = {}  # preemptor -> what its victims gave back
        preemptable = {name for name, queue in queues.items() if queue.preemptable}
        run, ssusp, unknown = api.RUN, api.SSUSP, api.UNKWN
        for job in jobs:
            state = job.state
            if state != run and state != ssusp and state != unknown:
                continue
            by = job.preempted_by
            if by:  # (a victim whose host went silent still holds what it held: UNKWN)
                if not job.released:
                    self.holding[by] += 1
                elif state == ssusp:
                    self.freed.setdefault(by, []).extend(job.released)
            elif state == run and job.spec.queue in preemptable:  # a possible victim
                allocation = job.allocation
                if len(allocation) <= 1:
                    host = allocation[0].host if allocation else job.host
                    self.by_host.setdefault(host, []).append(job)
        self.sent: list[Preempt] = []
        self.candidates: preemption.Candidates | None = None  # made on first need
        self.kept: dict[int, list[api.HostAllocation]] = {}  # preemptor -> what is kept for it until its turn

    def keep(self, waiting: Sequence[api.Job], usage: PassUsage, index: HostIndex) -> None:
        """What a pending preemptor's victims gave back is its own: kept from the jobs before it in the
        pass (another preemptor among them would otherwise take it, and this one preempt again)."""
        for job in waiting:
            freed = self.freed.get(job.id)
            if freed:
                self.kept[job.id] = usage.reserve(freed, index)

    def waits(self, job: api.Job) -> bool:
        """It preempted jobs that still hold their slots."""
        return self.holding.get(job.id, 0) > 0

    def choose(self, job: api.Job, need: feasibility.Need, slots: int, usage: PassUsage) -> Preempt | None:
        if not preemption.preemptive(self.queues.get(job.spec.queue)):
            return None
        if self.candidates is None:
            self.candidates = preemption.Candidates(self.by_host, self.queues, self.now_ms)
        choice = preemption.choose(job, need, slots, usage.states, self.candidates)
        if choice is None:
            return None
        self.candidates.taken(choice.host, choice.victims)
        decision = Preempt(job.id, job.attempt, tuple((v.id, v.attempt) for v in choice.victims))
        self.sent.append(decision)
        return decision


def dependency_reason(job: api.Job) -> feasibility.Reason:
    """DEPENDENCY_PENDING or DEPENDENCY_NEVER_SATISFIED, with the condition (apply's verdict)."""
    try:
        shown = depend.show(depend.parse(job.spec.depend))
    except depend.DependencyError:  # refused at submit
        shown = job.spec.depend
    shown = shown if len(shown) <= 200 else shown[:197] + "..."
    if job.depend_state == api.DEPEND_NEVER:
        return feasibility.Reason(api.PEND_DEPENDENCY_NEVER, f"dependency never satisfied: {shown} can no "
                                  "longer hold (xce kill it, or requeue what it waits for)", "depend")
    return feasibility.Reason(api.PEND_DEPENDENCY, f"dependency pending: {shown}", "depend")


def start_retry_reason(job: api.Job) -> feasibility.Reason:
    """A job waiting out the backoff after its worker refused a start for a reason of its own (its output
    file): the words apply wrote, so that no PEND decision changes them (controller/fsm/refusals.py)."""
    return feasibility.Reason(api.PEND_START_RETRY, start_failures.retry_words(job), "start_retry")


_DIGITS = str.maketrans("", "", "0123456789")


@functools.lru_cache(maxsize=4096)  # a pass compares each waiting job's words: the same few, pass after pass
def _shape(words: str) -> str:
    """A reason's words without its numbers: what changes only when the counts do not."""
    return words.translate(_DIGITS)


class PassUsage:
    """feasibility.Usage as the view shows it, plus this pass's own placements."""

    def __init__(self, hosts: Sequence[api.Host], queues: Mapping[str, api.Queue],
                 counters: Mapping[str, int], shared: Mapping[str, int] | None = None,
                 limit_defs: Sequence[api.Limit] = (),
                 states: Mapping[str, feasibility.HostState] | None = None,
                 lent: dict[str, feasibility.HostState] | None = None) -> None:
        """`states`: the hosts' states, made of `hosts` if not given; `lent`: the same, changed in place
        by the pass's placements until give_back() (copying a thousand states cost more than a pass
        that places one job)."""
        self.states = lent if lent is not None else dict(states) if states is not None else {
            h.spec.name: feasibility.host_state(h, load=True) for h in hosts}
        self._lent: dict[str, feasibility.HostState] | None = {} if lent is not None else None
        self._queues = queues
        self._counters = dict(counters)
        self._limits = feasibility.limits_of(queues.values())
        self._shared = dict(shared or {})
        self._limit_defs = limits.LimitSet(limit_defs)

    def give_back(self) -> None:
        """The lent states as they were lent."""
        if self._lent:
            self.states.update(self._lent)
            self._lent.clear()

    def _put(self, name: str, state: feasibility.HostState) -> None:
        if self._lent is not None and name not in self._lent:
            self._lent[name] = self.states[name]
        self.states[name] = state

    def host(self, name: str) -> feasibility.HostState | None:
        return self.states.get(name)

    def hosts(self) -> Iterable[tuple[str, feasibility.HostState]]:
        return sorted(self.states.items())

    def queue(self, name: str) -> api.Queue | None:
        return self._queues.get(name)

    def counter(self, name: str) -> int:
        return self._counters.get(name, 0)

    def limits(self) -> Mapping[str, int]:
        return self._limits

    def shared(self) -> Mapping[str, int]:
        return self._shared

    def limit_defs(self) -> Sequence[api.Limit]:
        return self._limit_defs

    def hold_shared(self, need: feasibility.Need) -> None:
        for name, amount in need.shared_usage:
            counter = feasibility.shared_counter(name)
            self._counters[counter] = self._counters.get(counter, 0) + amount

    def room(self, job: api.Job, most: int) -> int:
        """The most slots the job may take under its queue's slot limit and the configured limits
        (most if none)."""
        name = feasibility.queue_slots_counter(job.spec.queue)
        bound = self._limits.get(name)
        if bound is not None:
            most = max(0, bound - self.counter(name))
        if self._limit_defs:
            most = limits.room(feasibility.limit_demands(job, self._limit_defs, most), self.counter, most)
        return most

    def hold(self, job: api.Job, slots: int, need: feasibility.Need | None = None, hosts: int = 1) -> None:
        """The counters a placed job holds, counted for the rest of the pass (needed only
        where some bound exists)."""
        held = dict(feasibility.demands(job, slots))
        for demand in feasibility.limit_demands(job, self._limit_defs, slots, need, hosts):
            held[demand.counter] = demand.amount
        for name, amount in held.items():
            self._counters[name] = self._counters.get(name, 0) + amount

    def take_back(self, job: api.Job, index: HostIndex) -> bool:
        """A suspended victim resumes if what it gave back is free again on its hosts: taken."""
        for part in job.released:
            state = self.states.get(part.host)
            if state is None or not state.available or state.slots - state.used < part.slots or any(
                    state.totals.get(n, 0) - state.reserved.get(n, 0) < a for n, a in part.resources.items()):
                return False
        self.reserve(job.released, index)
        return True

    def reserve(self, parts: Iterable[api.HostAllocation], index: HostIndex) -> list[api.HostAllocation]:
        """Slots and consumables taken for the rest of the pass (a resume; what a waiting preemptor's
        victims gave back already, kept for it): as much as is free, never more. What was taken."""
        taken = []
        for part in parts:
            if part.host not in self.states:
                continue
            before = self.states[part.host]
            reserved = dict(before.reserved)
            resources = {}
            for name, amount in part.resources.items():
                reserved[name] = min(before.totals.get(name, 0), reserved.get(name, 0) + amount)
                resources[name] = reserved[name] - before.reserved.get(name, 0)
            after = before._replace(used=min(before.slots, before.used + part.slots), reserved=reserved)
            self._put(part.host, after)
            index.moved(part.host, before.slots - before.used, after.slots - after.used)
            taken.append(api.HostAllocation(host=part.host, slots=after.used - before.used,
                                            resources=resources))
        return taken

    def unreserve(self, parts: Iterable[api.HostAllocation], index: HostIndex) -> None:
        """What reserve took, given back (to the job it was kept for)."""
        for part in parts:
            before = self.states[part.host]
            reserved = dict(before.reserved)
            for name, amount in part.resources.items():
                reserved[name] -= amount
            after = before._replace(used=before.used - part.slots, reserved=reserved)
            self._put(part.host, after)
            index.moved(part.host, before.slots - before.used, after.slots - after.used)

    def take(self, parts: Sequence[feasibility.Allocation], need: feasibility.Need, index: HostIndex) -> None:
        """A placement: its slots and reserved consumables, taken on each of its hosts."""
        for part in parts:
            before = self.states[part.host]
            reserved = before.reserved
            if need.host_usage:
                reserved = dict(reserved)
                for resource, amount in need.host_usage:
                    reserved[resource] = reserved.get(resource, 0) + amount
            # An exclusive job takes the whole host: nothing else there in this pass either.
            used = before.slots if need.exclusive else before.used + part.slots
            after = before._replace(used=used, reserved=reserved)
            self._put(part.host, after)
            index.moved(part.host, before.slots - before.used, after.slots - after.used)


Entry = tuple[int, str]  # (-free slots, host name): most free first, then by name


def free_entry(name: str, state: feasibility.HostState) -> Entry | None:
    """The host's place in HostIndex's order, if it takes jobs and has a free slot."""
    if state.available and not state.closed and state.slots > state.used:
        return (state.used - state.slots, name)
    return None


MOVING_ALWAYS = feasibility.USAGE_NAMES | feasibility.LOAD_INDICES


@dataclass(frozen=True)
class Fleet:
    """What a pass makes of the hosts before it places anything, for a caller that keeps it between
    passes (scheduler/view.py: View.fleet): each host's feasibility state, HostIndex's order of the
    hosts with free slots, and the names whose values are not static (usage, load, consumables)."""

    states: dict[str, feasibility.HostState]  # (a pass changes it while it runs: run_pass)
    free: Sequence[Entry]  # sorted
    moving: frozenset[str]

    @classmethod
    def of(cls, states: dict[str, feasibility.HostState]) -> Fleet:
        moving = set(MOVING_ALWAYS)
        for state in states.values():
            moving.update(state.totals)
        free = sorted(e for e in (free_entry(n, s) for n, s in states.items()) if e is not None)
        return cls(states, free, frozenset(moving))


class HostIndex:
    """The available hosts with free slots, most free first (then by name), kept sorted as the
    pass places jobs (a plain sorted list: an update is a bisection and a move of pointers, fast
    at thousands of hosts). A job's candidates are read from it in that order, filtered by its
    requirement: the terms of its select[] that read static attributes only, and -m, are looked
    at once per host and pass and remembered (static attributes do not change in a pass; a job
    that takes the first host that passes reads no further); the terms on usage or load, and the
    rusage[] free, each time. scheduler/plans.py lays them out.

    A job with order[] reads its candidates from a ranking of the hosts by that order, made once
    a pass per order and kept sorted as placements move hosts (as the list by free slots is), so
    that a one-slot job takes the first host of the ranking that passes instead of ranking every
    host again: 18,000 jobs with order[] on 500 hosts were 9 million keys a pass. Hosts that refused
    the job's owner (its Need's `avoid`) are skipped."""

    def __init__(self, states: dict[str, feasibility.HostState], fleet: Fleet | None = None) -> None:
        """`fleet`: the same states' order and names, kept by the caller (else made here)."""
        self._states = states
        fleet = fleet or Fleet.of(states)
        self._all: list[Entry] = list(fleet.free)
        # Per static select[] term and -m: which hosts pass, each looked at once a pass (on first
        # need: a job that takes the first host that passes reads no further).
        self._passes: dict[tuple[resreq.Expr | None, frozenset[str]], dict[str, bool]] = {}
        self._moving = fleet.moving  # names whose value is not static
        self._splits: dict[resreq.Expr, tuple[resreq.Expr | None, resreq.Expr | None]] = {}
        self._rankings: dict[tuple[tuple[str, bool], ...], _Ranking] = {}

    def moved(self, name: str, free_before: int, free_after: int) -> None:
        """A placement changed the host's state (its new one is in the states already); or a
        reservation was given back to the job it was kept for (free again: listed again)."""
        state = self._states[name]
        if not state.available or state.closed:
            free_after = 0
        entries = self._all
        position = bisect.bisect_left(entries, (-free_before, name))
        if position < len(entries) and entries[position] == (-free_before, name):
            del entries[position]
        if free_after > 0:
            bisect.insort(entries, (-free_after, name))
        for ranking in self._rankings.values():
            ranking.moved(name, free_after)

    def plan(self, need: feasibility.Need, least: int, most: int) -> plans.Plan | None:
        """The job's allocation: the plan for the most slots in [least, most] that has one."""
        req = need.requirement
        by_free = not req.order
        candidates: Iterable[tuple[str, int]] = self.candidates(need)
        if not by_free and most == 1 and not req.same:  # one slot: the first host of its ranking
            best = next(iter(candidates), None)
            return (plans.Placement(best[0], 1),) if best is not None else None
        if by_free and least == most and not req.same and req.span_hosts in (0, 1) and (
                req.ptile == 0 or most <= req.ptile):
            # The first candidate has the most free slots: if it takes the job alone, that is the plan
            # of fewest hosts whatever the layout (plans.plans reads it first), without laying one out.
            first = next(iter(candidates), None)
            if first is None:
                return None
            if first[1] >= most >= 1:
                return (plans.Placement(first[0], most),)
            candidates = itertools.chain((first,), candidates)
        if req.same:
            candidates = list(candidates)
        groups = _same_groups(candidates, req.same, self._states) if req.same else [candidates]
        for group in groups:
            if least == most:
                plan = next(plans.plans(most, group, req.span_hosts, req.ptile, by_free), None)
            else:
                plan = plans.best(least, most, group, req.span_hosts, req.ptile, by_free)
            if plan is not None:
                return plan
        return None

    def reads_usage(self, need: feasibility.Need) -> bool:
        """Whether the job's select[] has terms on usage or load (not only static attributes)."""
        return need.requirement.select is not None and self._split(need.requirement.select)[1] is not None

    def candidates(self, need: feasibility.Need) -> Iterator[tuple[str, int]]:
        """Hosts with free slots that pass select[] and have the rusage[] free, most free first."""
        static, moving = self._split(need.requirement.select)
        asked = need.asked
        known = self._passes.setdefault((static, asked), {}) if static is not None or asked else None
        static_test = resreq.compiled(static) if static is not None else None
        usage = need.host_usage
        states = self._states
        test = resreq.compiled(moving) if moving is not None else None
        order = need.requirement.order
        hosts: Iterable[tuple[int, str]] = self._ranking(order).entries() if order else self._all
        if need.avoid:  # hosts that refused the job's owner (feasibility.refused_owner); rare: not per host
            hosts = [entry for entry in hosts if entry[1] not in need.avoid]
        for negative_free, name in hosts:
            if known is not None:
                passes = known.get(name)
                if passes is None:
                    state = states[name]
                    passes = known[name] = (static_test is None or static_test(state.static)) and \
                        (not asked or name in asked or bool(state.groups & asked))
                if not passes:
                    continue
            if need.exclusive and -negative_free < states[name].slots:
                continue  # not idle
            if test is not None or usage:
                state = states[name]
                if test is not None and not test(feasibility.attributes(state)):
                    continue
                if any(state.totals.get(r, 0) - state.reserved.get(r, 0) < a for r, a in usage):
                    continue
            yield name, -negative_free

    def _split(self, select: resreq.Expr | None) -> tuple[resreq.Expr | None, resreq.Expr | None]:
        """select[] as (the terms of its top-level && that read static attributes only, the rest)."""
        if select is None:
            return None, None
        if (known := self._splits.get(select)) is not None:
            return known
        static: list[resreq.Expr] = []
        moving: list[resreq.Expr] = []
        for term in _conjuncts(select):
            (moving if resreq.names(term) & self._moving else static).append(term)
        split = self._splits[select] = (_conjunction(static), _conjunction(moving))
        return split

    def _ranking(self, order: tuple[tuple[str, bool], ...]) -> _Ranking:
        ranking = self._rankings.get(order)
        if ranking is None:
            ranking = self._rankings[order] = _Ranking(self._states, order,
                                                       [(name, -negative) for negative, name in self._all])
        return ranking


class _Ranking:
    """The hosts with free slots in order[]'s preference: by each name, largest first for -name,
    smallest first otherwise; a host without the value last; then most free, then by name."""

    def __init__(self, states: Mapping[str, feasibility.HostState], order: tuple[tuple[str, bool], ...],
                 hosts: Iterable[tuple[str, int]]) -> None:
        self._states = states
        self._order = order
        self._keys = {name: self._key(name, free) for name, free in hosts}
        self._sorted = sorted(self._keys.values())

    def _key(self, name: str, free: int) -> tuple[object, ...]:
        state = self._states[name]
        parts: list[object] = []
        for attribute, descending in self._order:
            value = feasibility.value_of(state, attribute)
            number = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
            parts.append((1, 0.0) if number is None else (0, -number if descending else number))
        return (*parts, -free, name)

    def moved(self, name: str, free: int) -> None:
        old = self._keys.pop(name, None)
        if old is not None:
            position = bisect.bisect_left(self._sorted, old)
            invariant(self._sorted[position] == old, f"the ranking by {self._order} lost host {name}")
            del self._sorted[position]
        if free > 0:
            key = self._keys[name] = self._key(name, free)
            bisect.insort(self._sorted, key)

    def entries(self) -> Iterator[tuple[int, str]]:
        """(-free slots, name) in preference order, as HostIndex's own list gives them."""
        for key in self._sorted:
            yield key[-2], key[-1]  # type: ignore[misc]


def _conjuncts(expr: resreq.Expr) -> list[resreq.Expr]:
    if expr[0] == "and":
        return [*_conjuncts(expr[1]), *_conjuncts(expr[2])]
    return [expr]


def _conjunction(terms: list[resreq.Expr]) -> resreq.Expr | None:
    if not terms:
        return None
    result = terms[0]
    for term in terms[1:]:
        result = ("and", result, term)
    return result


def _same_groups(candidates: Iterable[tuple[str, int]], same: tuple[str, ...],
                 states: Mapping[str, feasibility.HostState]) -> list[list[tuple[str, int]]]:
    """same[]: the candidates by their values of those attributes, groups in the order of their
    first host. A host lacking one is a group of its own: it may take a job alone, never with
    others (the barrier's rule)."""
    groups: dict[object, list[tuple[str, int]]] = {}
    for candidate in candidates:
        static = states[candidate[0]].static
        values = tuple(static.get(name) for name in same)
        groups.setdefault(("alone", candidate[0]) if None in values else values, []).append(candidate)
    return list(groups.values())
