"""Deliberately injected bugs, to show the checks can fail.

Each bug is a variant of the `Options` a simulation runs with: a handler
table for apply with one handler wrapped (as controller/faults.py builds
its broken tables), a View subclass, a planner configuration, the leader
reading proposed rather than committed state, or a follower's rule for
AppendEntries. Nothing is monkeypatched: the
production modules are untouched, and each simulated process is built with
the broken part, as a broken build would be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from controller import fsm
from controller.fsm import preempt
from controller.fsm.holdings import release
from controller.raft_append import Accept, AppendEntries, Log, Plan, RemovesApplied, plan_append
from scheduler.planner import PlannerConfig
from scheduler.view import View
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

from .cluster import Options


def run_before_commit(options: Options) -> Options:
    """The leader reads proposed state as committed: it sends RunJob for a batch as soon as it
    proposes it (no commit barrier), and answers from state that may never commit."""
    return replace(options, run_before_commit=True)


def requeue_on_success(options: Options) -> Options:
    """The seed's bug-1512: a success ack (a `started` report) puts the job back to PEND."""
    original = options.handlers["reports"]

    def buggy(applier: fsm.Applier) -> list[log.Result]:
        results = original(applier)
        for relayed, result in zip(applier.entry.reports.reports, results, strict=False):
            if result.code == log.OK and relayed.report.WhichOneof("body") == "started":
                job = fsm.read_job(applier.tables, relayed.report.job_id)
                assert job is not None
                if job.state in fsm.RUNNING:
                    release(applier, job)
                    job.state, job.host, job.pending_reason = api.PEND, "", "requeued on a success ack"
                    job.attempt += 1
                    applier.put_job(job)
        return results

    return replace(options, handlers={**options.handlers, "reports": buggy})


def join_without_generation_bump(options: Options) -> Options:
    """A re-join is accepted but the host keeps its generation."""
    original = options.handlers["joins"]

    def buggy(applier: fsm.Applier) -> list[log.Result]:
        before = {spec.name: fsm.read_host(applier.tables, spec.name) for spec in applier.entry.joins.joins}
        results = original(applier)
        for spec, result in zip(applier.entry.joins.joins, results, strict=False):
            old = before[spec.name]
            if old is not None and old.generation > 0 and result.code == log.OK:
                host = fsm.read_host(applier.tables, spec.name)
                assert host is not None
                host.generation = old.generation
                applier.put_host(host)
                result.generation = old.generation
        return results

    return replace(options, handlers={**options.handlers, "joins": buggy})


class _ViewAcceptingOldEvents(View):
    def _apply_event(self, event: log.Event) -> None:
        if event.revision <= self.revision:
            self.revision = event.revision - 1  # so the real check lets the repeat through
        super()._apply_event(event)


def view_accepts_old_events(options: Options) -> Options:
    """The scheduler's view applies an event whose revision is not newer than its own."""
    return replace(options, view_factory=_ViewAcceptingOldEvents)


def stale_lease_accepted(options: Options) -> Options:
    """Apply takes a decision batch without checking its lease epoch and holder."""
    original = options.handlers["decisions"]

    def buggy(applier: fsm.Applier) -> list[log.Result]:
        meta, batch = applier.meta, applier.entry.decisions
        saved = (meta.lease_epoch, meta.lease_holder, meta.lease_expires_ms)
        meta.lease_epoch, meta.lease_holder = batch.lease_epoch, batch.scheduler_id
        meta.lease_expires_ms = max(meta.lease_expires_ms, applier.entry.stamp_ms + 1)
        try:
            return original(applier)
        finally:  # the lease itself is left as it was: only the check is skipped
            meta.lease_epoch, meta.lease_holder, meta.lease_expires_ms = saved

    return replace(options, handlers={**options.handlers, "decisions": buggy})


def preempt_gives_back_at_once(options: Options) -> Options:
    """A PREEMPT gives its suspended victims' slots back when it commits, not when their workers
    report them stopped (tla/XceBarrier.tla's MutApplyPreemptEarly): a preemptor may start beside a
    victim still running."""
    original = options.handlers["decisions"]

    def buggy(applier: fsm.Applier) -> list[log.Result]:
        results = original(applier)
        for decision in applier.entry.decisions.decisions:
            if decision.HasField("preempt"):
                for named in decision.preempt.victims:
                    victim = fsm.read_job(applier.tables, named.job_id)
                    if victim is not None and preempt.stopped(applier, victim):
                        applier.put_job(victim)
        return results

    return replace(options, handlers={**options.handlers, "decisions": buggy})


def planner_ignores_refusal_cooldown(options: Options) -> Options:
    """The planner forgets a worker's refusal at once: a draining host costs an attempt
    every pass (a bug only the real planner can show: the old simulation had no cool-down)."""
    return replace(options, planner=replace(PlannerConfig(), refusal_cooldown_ms=0))


def _pysyncobj_append(log: Log, message: AppendEntries, last_applied: int) -> Plan:
    """pysyncobj 0.3.17's own rule: once the previous entry matches, everything after it goes and
    the message's entries are appended, matching or not; the commit index is the leader's, bounded by
    the log's end (which is then the message's last entry)."""
    plan = plan_append(log, message, last_applied)
    if not isinstance(plan, Accept | RemovesApplied):
        return plan  # refused alike
    longer = log.last_index() > message.prev_index
    return Accept(present=0, prev_index=message.prev_index, prev_term=message.prev_term,
                  truncate_from=message.prev_index + 1 if longer else None,
                  commit_index=min(message.leader_commit, message.last_index),
                  last_verified=message.last_index)


def pysyncobj_append_rule(options: Options) -> Options:
    """Followers take AppendEntries as pysyncobj does without the Raft adapter's plan: a delayed or
    repeated message cuts entries the follower stored, committed ones included."""
    return replace(options, append_rule=_pysyncobj_append)


BUGS: dict[str, Callable[[Options], Options]] = {
    f.__name__: f for f in (run_before_commit, requeue_on_success, join_without_generation_bump,
                            view_accepts_old_events, stale_lease_accepted, planner_ignores_refusal_cooldown,
                            preempt_gives_back_at_once, pysyncobj_append_rule)}


def inject(name: str, options: Options | None = None) -> Options:
    return BUGS[name](options or Options())


__all__ = ["BUGS", "inject"]
