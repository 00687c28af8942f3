"""The planner: passes over time. (view, planner state, now_ms, config) -> (decisions, planner state).

Theory of operation. One pass (core.py) decides on one view; the planner
carries what a pass must know of the passes before it, as an immutable
`PlannerState`, and applies the rules that span passes:
- decisions in flight: a DISPATCH sent but not yet visible in the view is
  not made again (for `in_flight_ms`, or until its batch says it was
  rejected), since the view would still show the job pending;
- refusal cool-down: a host whose worker refused a dispatch for a reason of
  the host's (draining, not ready; the job comes back with
  PEND_DISPATCH_REFUSED and `refused_host`) gets no dispatch for
  `refusal_cooldown_ms` after the planner first sees the refusal, instead of
  one refusal, and one more attempt, every pass (M1). A refusal that is the
  job's own or its owner's (entry format 19: controller/fsm/refusals.py)
  names no host and cools nothing: the pass itself leaves the job out until
  its backoff passed, and the hosts that refused its owner (core.py);
- a worker's refusal is the better pending reason: no PEND decision
  overwrites it;
- a pass waits until the view holds the previous batch's outcome (`ready`),
  or `await_view_ms` passed: a pass on an older view would hand out again
  the slots that batch took;
- reasons carry counts of hosts (xce/rules/feasibility.py: explain), which move
  with every job that starts or ends; a reason whose only change is in its
  numbers is sent at most every `recount_ms` (then for every job whose
  counts moved, up to `max_pends` a pass), a new code or wording at once;
- a batch stays under the message limit (`max_batch_bytes`) and the
  leader's `max_decisions`, dispatches first: free slots are filled whatever
  is pending elsewhere. PEND decisions (reason changes) are at most
  `max_pends` a pass; the rest follow in later passes, since their reasons
  still differ. 60,000 jobs in an inactive queue once made every batch too
  big to send, and nothing was dispatched at all.

The planner's time (`clock_ms`) is the scheduler's monotonic clock, so a
step of the wall clock (NTP) neither keeps a dispatch "in flight" for an
hour nor cools a host that long. Each batch records its pass's inputs: the
view's revision, the planner's clock, the wall clock, and the digest of the
planner state the pass started from. A re-run from a recorded planner state
(the record/replay of the simulation issue keeps them; the state also moves
in passes that make no batch) is checked against that digest and gives the
same decisions. Pure: no I/O, no clock (the time is passed in), no threads.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.backfill import Kept
from scheduler.core import WAITING, CoreConfig, run_pass
from scheduler.decisions import Decision, Dispatch, PassResult, Pend, Preempt
from scheduler.host_index import Fleet
from scheduler.job_digest import Digest, Digests
from scheduler.picker import PassContext, Picker
from scheduler.view import View
from xce.rules import feasibility
from xce.v1 import api_pb2 as api


@dataclass(frozen=True)
class PlannerConfig:
    core: CoreConfig = field(default_factory=CoreConfig)
    in_flight_ms: int = 5_000
    refusal_cooldown_ms: int = 2_000
    await_view_ms: int = 2_000
    max_batch_bytes: int = 768 << 10  # under gRPC's 1 MiB, with room for the batch's own fields
    max_decisions: int = 10_000       # what the leader takes in one batch (controller/leader/writes.py)
    max_pends: int = 2_000            # reason changes a pass sends; the rest wait for later passes
    recount_ms: int = 10_000          # reasons whose only change is in their counts: at most this often

    def settings(self, default_picker: str) -> api.PlannerSettings:
        """As recorded in each batch (with the default picker's name: pickers are code, named)."""
        core = self.core
        return api.PlannerSettings(
            default_picker=default_picker, max_dispatches=core.max_dispatches, in_flight_ms=self.in_flight_ms,
            refusal_cooldown_ms=self.refusal_cooldown_ms, await_view_ms=self.await_view_ms,
            max_batch_bytes=self.max_batch_bytes, max_decisions=self.max_decisions, max_pends=self.max_pends,
            recount_ms=self.recount_ms, max_explains=core.max_explains, max_preemptions=core.max_preemptions)


def configured(settings: api.PlannerSettings, queues: Sequence[api.Queue],
               pickers: Callable[[str], Picker]) -> PlannerConfig:
    """The configuration of a pass: the scheduler's settings, with the default picker and each
    queue's own (`job_pick_plugin`) resolved by name."""
    core = CoreConfig(picker=pickers(settings.default_picker),
                      queue_pickers={q.name: pickers(q.job_pick_plugin) for q in queues if q.job_pick_plugin},
                      max_dispatches=settings.max_dispatches, max_explains=settings.max_explains,
                      max_preemptions=settings.max_preemptions)
    return PlannerConfig(core, settings.in_flight_ms, settings.refusal_cooldown_ms, settings.await_view_ms,
                         settings.max_batch_bytes, settings.max_decisions, settings.max_pends,
                         settings.recount_ms)


# What json.dumps(..., separators=(",", ":")) makes for each call, made once: the digest's input.
_CANONICAL = json.JSONEncoder(separators=(",", ":"))


@dataclass(frozen=True)
class PlannerState:
    """What the planner remembers between passes; never changed in place."""

    in_flight: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # job -> (attempt, sent ms)
    cooldown: Mapping[str, int] = field(default_factory=dict)  # host -> no dispatch before (ms)
    refusals_seen: frozenset[tuple[int, int]] = frozenset()  # (job, attempt) refusals already counted
    await_revision: int = 0  # the last batch's revision: the next pass waits for the view to reach it
    await_until_ms: int = 0
    recounted_ms: int | None = None  # when reasons were last sent for their counts alone
    # end_before queues' heads: job -> its reservation, reckoned when it first waited (backfill.py)
    reservations: Mapping[int, Kept] = field(default_factory=dict)

    def digest(self) -> str:
        canonical = _CANONICAL.encode({
            "in_flight": sorted((j, a, t) for j, (a, t) in self.in_flight.items()),
            "cooldown": sorted(self.cooldown.items()),
            "refusals_seen": sorted(self.refusals_seen),
            "await": [self.await_revision, self.await_until_ms],
            **({} if self.recounted_ms is None else {"recounted": self.recounted_ms}),
            **({"reservations": sorted((j, k.at_ms, k.attempt, k.queue, k.capacity)
                                       for j, k in self.reservations.items())} if self.reservations else {}),
        })
        return hashlib.sha256(canonical.encode()).hexdigest()

    def to_proto(self) -> api.PlannerState:
        """The state as a batch records it (made once: read it, never change it)."""
        return self._proto

    @functools.cached_property
    def _proto(self) -> api.PlannerState:
        return api.PlannerState(
            in_flight=[api.InFlight(job_id=j, attempt=a, sent_ms=t)
                       for j, (a, t) in sorted(self.in_flight.items())],
            cooldown=[api.Cooldown(host=h, until_ms=u) for h, u in sorted(self.cooldown.items())],
            refusals_seen=[api.JobAttempt(job_id=j, attempt=a) for j, a in sorted(self.refusals_seen)],
            await_revision=self.await_revision, await_until_ms=self.await_until_ms,
            recounted=self.recounted_ms is not None, recounted_ms=self.recounted_ms or 0,
            reservations=[api.HeadReservation(job_id=j, at_ms=k.at_ms, attempt=k.attempt, queue=k.queue,
                                              capacity=k.capacity)
                          for j, k in sorted(self.reservations.items())])

    @staticmethod
    def from_proto(state: api.PlannerState) -> PlannerState:
        return PlannerState({f.job_id: (f.attempt, f.sent_ms) for f in state.in_flight},
                            {c.host: c.until_ms for c in state.cooldown},
                            frozenset((r.job_id, r.attempt) for r in state.refusals_seen),
                            state.await_revision, state.await_until_ms,
                            state.recounted_ms if state.recounted else None,
                            {r.job_id: Kept(r.at_ms, r.attempt, r.queue, r.capacity)
                             for r in state.reservations})


@dataclass(frozen=True)
class PassView:
    """What a pass reads of the scheduler's view."""

    jobs: Sequence[api.Job]
    queues: Sequence[api.Queue]
    hosts: Sequence[api.Host]
    counters: Mapping[str, int]
    revision: int
    shared: Mapping[str, int] = field(default_factory=dict)  # cluster-wide consumables: their totals
    limits: Sequence[api.Limit] = ()  # the configured limits (xce/rules/limits.py)
    share_usage: Mapping[str, Mapping[tuple[str, str], tuple[int, int]]] = field(default_factory=dict)
    now_ms: int = 0  # the wall clock of the pass (fair share decays committed usage to it); in the batch
    fleet: Fleet | None = None  # what a pass makes of the hosts, if the view keeps it (View.fleet)
    # The jobs a pass may act on (View.waiting: pending or suspended), by id, if the view keeps them.
    waiting: Sequence[api.Job] | None = None
    digests: Digests | None = None  # what a pass derives of each of them, if the view keeps it (View.digests)


@dataclass(frozen=True)
class Plan:
    decisions: list[Decision]
    state: PlannerState
    result: PassResult
    cooled: list[tuple[str, int]]  # (host, job) refusals first seen in this pass
    deferred: int = 0  # decisions left for later passes (over a bound of the batch)


def pass_view(view: View) -> PassView:
    """What a pass reads of a scheduler's view (the daemon, the simulations and a recording's re-run
    alike). Where no job waits, a pass decides nothing whatever the hosts and the running jobs are:
    they are left out (a pass keeps its bookkeeping all the same)."""
    waiting = view.waiting()
    if not waiting:
        return PassView([], view.queues(), [], view.counters(), view.revision, waiting=waiting)
    return PassView(view.jobs(), view.queues(), view.hosts(), view.counters(), view.revision, view.shared(),
                    view.limits(), view.share_usage(), fleet=view.fleet(), waiting=waiting,
                    digests=view.digests())


def idle(waiting: Sequence[api.Job], state: PlannerState, clock_ms: int, config: PlannerConfig) -> bool:
    """Whether a pass now may be left out with no effect on any later one, for a caller whose
    dispatches in flight were all accepted (after_reply drops the rejected ones; Decider.idle keeps
    out those of a batch with no answer): nothing waits, so it would decide nothing, and of its
    bookkeeping only the recount's stamp would not be done the same by the next pass. That pass drops
    in-flight dispatches, cooldowns and refusals seen by the same tests, each true for good once true:
    the time only grows, an accepted dispatch's job left PEND at that attempt for good (only a requeue
    makes it pending again, at the next attempt), and a refused attempt is not refused again. So the
    recount must not be due. The next batch records the state it started from, which may then still
    list what this pass would have dropped; its decisions are the same."""
    counted = state.recounted_ms
    return not waiting and counted is not None and clock_ms - counted < config.recount_ms


def ready(state: PlannerState, revision: int, clock_ms: int) -> bool:
    """The view holds the previous batch's outcome, or that is overdue."""
    return revision >= state.await_revision or clock_ms > state.await_until_ms


def plan(view: PassView, state: PlannerState, clock_ms: int, config: PlannerConfig,
         wall_ms: int | None = None) -> Plan:
    """`wall_ms`: the pass's wall clock, if not the view's `now_ms` (the decider's, without a copy of
    the view made for it)."""
    now_ms = clock_ms  # every time the planner keeps is on this clock
    # A dispatch stays in flight until the view shows it (the job no longer pending at that attempt),
    # at most in_flight_ms: what the view shows cannot come back, as attempts only grow.
    waiting = view.waiting if view.waiting is not None else [j for j in view.jobs if j.state in WAITING]
    digests = view.digests if view.digests is not None else Digests()
    pending_made, _ = digests.waiting(waiting)  # (what the pass reads of each: scheduler/job_digest.py)
    pending_at = {made.id: made.attempt for made in pending_made}
    in_flight = {j: (a, t) for j, (a, t) in state.in_flight.items()
                 if now_ms - t < config.in_flight_ms and pending_at.get(j) == a}
    cooldown, seen, cooled = _note_refusals(pending_made, state, now_ms, config)
    recount = state.recounted_ms is None or now_ms - state.recounted_ms >= config.recount_ms
    if not waiting:  # a pass decides nothing (run_pass: no job to act on); its bookkeeping all the same
        return Plan([], PlannerState(in_flight, cooldown, seen, state.await_revision, state.await_until_ms,
                                     now_ms if recount else state.recounted_ms), PassResult([]), cooled)
    # A cooling host is in the pass as unavailable: jobs that only it could take say so.
    cooling = {name for name, until in cooldown.items() if until > now_ms}
    usable = [_unavailable(h) if h.spec.name in cooling else h for h in view.hosts] if cooling else view.hosts
    fleet = view.fleet
    if fleet is not None and cooling:
        fleet = Fleet.of({**fleet.states, **{h.spec.name: feasibility.host_state(h, load=True)
                                            for h in usable if h.spec.name in cooling}})
    # (every job in flight is pending at the attempt sent: just above)
    pending = [j for j in waiting if j.id not in in_flight] if in_flight else waiting
    wall = view.now_ms if wall_ms is None else wall_ms
    result = run_pass(pending, view.queues, usable, config.core, view.counters, recount, view.shared,
                      view.limits, PassContext(view.jobs, view.share_usage, wall, state.reservations), fleet,
                      digests)
    refused = {made.id for made in pending_made
               if made.pending_code == api.PEND_DISPATCH_REFUSED and made.id not in in_flight}
    # A worker's refusal says more than what a pass without that host would say.
    decisions = [d for d in result.decisions if not (isinstance(d, Pend) and d.job_id in refused)] \
        if refused else list(result.decisions)
    decisions, deferred = _within_bounds(decisions, config, state.to_proto().ByteSize()) if decisions \
        else (decisions, 0)
    for decision in decisions:
        if isinstance(decision, Dispatch):
            in_flight[decision.job_id] = (decision.attempt, now_ms)
            for follower in decision.chunk:  # (pending still, until the view shows it in the chunk)
                in_flight[follower] = (pending_at.get(follower, 0), now_ms)
    next_state = PlannerState(in_flight, cooldown, seen, state.await_revision, state.await_until_ms,
                              now_ms if recount else state.recounted_ms, result.reservations)
    return Plan(decisions, next_state, result, cooled, deferred)


# A decision's serialized size is at most this plus its host or reason (tags, lengths, varints),
# and for each host of a parallel job's allocation, this plus the host's name.
DECISION_OVERHEAD_BYTES = 32
SETTINGS_BYTES = 128  # the batch's PlannerSettings, with room for a long picker name
HOST_SLOTS_OVERHEAD_BYTES = 12
CHUNK_ID_BYTES = 10  # a job id of a dispatch's chunk (a varint)


Decisions = list[Decision]


def _within_bounds(decisions: Decisions, config: PlannerConfig, recorded: int) -> tuple[Decisions, int]:
    """Dispatches first, then PREEMPTs, then PENDs, in the pass's order, while the batch (with the
    `recorded` bytes of its inputs) stays within its bounds."""
    ordered: Decisions = decisions
    if len(decisions) > 1:  # (most passes make one decision)
        ordered = [d for d in decisions if isinstance(d, Dispatch)]
        ordered += [d for d in decisions if isinstance(d, Preempt)]
        ordered += [d for d in decisions if isinstance(d, Pend)]
    kept: Decisions = []
    size, pends = recorded + SETTINGS_BYTES, 0
    for decision in ordered:
        is_pend = isinstance(decision, Pend)
        if len(kept) >= config.max_decisions or (is_pend and pends >= config.max_pends):
            break  # nothing more fits (PENDs come last): what is left comes next pass
        if isinstance(decision, Pend):
            cost = DECISION_OVERHEAD_BYTES + len(decision.reason.encode())
        elif isinstance(decision, Preempt):
            cost = DECISION_OVERHEAD_BYTES * (1 + len(decision.victims))
        else:
            cost = DECISION_OVERHEAD_BYTES + len(decision.host.encode()) + sum(
                HOST_SLOTS_OVERHEAD_BYTES + len(host.encode()) for host, _ in decision.hosts) + \
                CHUNK_ID_BYTES * len(decision.chunk)
        if size + cost > config.max_batch_bytes:
            continue  # a smaller one further on may still fit; what is left comes next pass
        kept.append(decision)
        size += cost
        pends += is_pend
    return kept, len(decisions) - len(kept)


def _unavailable(host: api.Host) -> api.Host:
    copy = api.Host()
    copy.CopyFrom(host)
    copy.status = api.HOST_UNAVAIL
    return copy


_NONE_SEEN: frozenset[tuple[int, int]] = frozenset()


def _note_refusals(pending: Sequence[Digest], state: PlannerState, now_ms: int, config: PlannerConfig,
                   ) -> tuple[dict[str, int], frozenset[tuple[int, int]], list[tuple[str, int]]]:
    cooldown = {h: until for h, until in state.cooldown.items() if until > now_ms}
    refused = {(made.id, made.attempt): made.job.refused_host for made in pending
               if made.pending_code == api.PEND_DISPATCH_REFUSED and made.job.refused_host}
    if not refused:  # (the common case: none seen, none to keep)
        return cooldown, _NONE_SEEN, []
    cooled = []
    for key in sorted(refused.keys() - state.refusals_seen):
        host = refused[key]
        cooldown[host] = max(cooldown.get(host, 0), now_ms + config.refusal_cooldown_ms)
        cooled.append((host, key[0]))
    return cooldown, frozenset(refused), cooled


def to_batch(plan_: Plan, started: PlannerState, epoch: int, scheduler_id: str, revision: int,
             clock_ms: int, now_ms: int, settings: api.PlannerSettings | None = None) -> api.DecisionBatch:
    """The pass as one DecisionBatch, with the inputs that let it be re-run: with the view at
    `revision`, the planner state it started from and the settings, a pass is a pure function."""
    batch = api.DecisionBatch(lease_epoch=epoch, base_revision=revision, scheduler_id=scheduler_id,
                              clock_ms=clock_ms, now_ms=now_ms, planner_digest=started.digest(),
                              planner_state=started.to_proto(), planner=settings)
    add = batch.decisions.add
    for decision in plan_.decisions:
        if isinstance(decision, Dispatch):
            # Set in place: a DispatchDecision made apart is copied into the batch (a third of the cost).
            dispatch = add().dispatch
            dispatch.SetInParent()
            dispatch.job_id, dispatch.attempt = decision.job_id, decision.attempt
            dispatch.host = decision.host
            for host, slots in decision.hosts:
                dispatch.hosts.add(host=host, slots=slots)
            if decision.chunk:
                dispatch.chunk.extend(decision.chunk)
        elif isinstance(decision, Preempt):
            batch.decisions.add(preempt=api.PreemptDecision(
                job_id=decision.job_id, attempt=decision.attempt,
                victims=[api.Victim(job_id=j, attempt=a) for j, a in decision.victims]))
        else:
            pend = add().pend
            pend.SetInParent()
            pend.job_id, pend.reason, pend.code = decision.job_id, decision.reason, decision.code
    return batch


def after_reply(state: PlannerState, batch: api.DecisionBatch, reply: api.DecisionBatchResponse,
                clock_ms: int, config: PlannerConfig) -> tuple[PlannerState, bool]:
    """The batch's outcome: wait for the view to hold it; rejected dispatches may be
    tried again at once. True when the lease was stale (the batch changed nothing)."""
    in_flight = dict(state.in_flight)
    codes = [o.code for o in reply.outcomes]
    if any(code != api.DECISION_ACCEPTED for code in codes):  # (the decisions are read only then)
        for decision, code in zip(batch.decisions, codes, strict=False):
            if code != api.DECISION_ACCEPTED and decision.HasField("dispatch"):
                in_flight.pop(decision.dispatch.job_id, None)
                for follower in decision.dispatch.chunk:
                    in_flight.pop(follower, None)
    stale = api.REJECT_STALE_LEASE in codes
    return PlannerState(in_flight, state.cooldown, state.refusals_seen, reply.revision,
                        clock_ms + config.await_view_ms, state.recounted_ms, state.reservations), stale
