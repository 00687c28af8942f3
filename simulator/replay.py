"""A recording's passes re-run (`xce sim --replay` and `--verify`; F5).

Theory of operation. Each committed decision batch of a recording carries
every input of the pass that made it (entry format 15): the revision of the
view it read, the planner state it started from (checked against its
digest), the planner's clock, the wall clock and the scheduler's settings.
The view at that revision is the recording's baseline with every event up
to it applied, as the scheduler's own view applies them (scheduler/view.py).
So a pass is re-run by the same pure function the scheduler ran
(planner.plan, then planner.to_batch), and with the same code and settings
its decisions come out byte for byte the same. The passes are re-run in the
order of their views (a pass on an older view, after a leader change, is
re-run on that older view); a pass whose view is older than the baseline
cannot be, and is counted as skipped.

A what-if (simulator/whatif.py) changes the queues the pass sees or the
settings it runs with: the first pass whose decisions differ is where the
change first made a difference, on the views the cluster really had.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from scheduler import picker, planner
from scheduler.view import View
from simulator.recording_file import Recording, RecordingError
from simulator.whatif import WhatIf
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


@dataclass(frozen=True)
class Pass:
    number: int     # 1-based, in the order the batches committed
    revision: int   # the revision that committed the batch
    batch: api.DecisionBatch


@dataclass(frozen=True)
class Divergence:
    number: int
    revision: int
    base_revision: int
    index: int  # the first decision that differs
    recorded: str
    replayed: str


@dataclass
class Replayed:
    passes: int = 0
    checked: int = 0
    skipped: int = 0  # passes on views older than the baseline
    identical: int = 0
    decisions: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    batches: list[tuple[Pass, api.DecisionBatch]] = field(default_factory=list)

    @property
    def first(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None


def passes(recording: Recording) -> list[Pass]:
    found = [(e.revision, e.batch) for e in recording.events if e.HasField("batch")]
    return [Pass(n, revision, batch) for n, (revision, batch) in enumerate(found, 1)]


def replay(recording: Recording, whatif: WhatIf | None = None,
           pickers: Callable[[str], picker.Picker] = picker.load, first_only: bool = False) -> Replayed:
    """Every recorded pass re-run on its view; with `first_only`, stop at the first divergence."""
    whatif = whatif or WhatIf()
    out = Replayed()
    todo = passes(recording)
    out.passes = len(todo)
    for each, view in _on_their_views(recording, todo):
        if view is None:
            out.skipped += 1
            continue
        again = rerun(each, view, whatif, pickers)
        out.checked += 1
        out.decisions += len(each.batch.decisions)
        out.batches.append((each, again))
        divergence = compare(each, again)
        if divergence is None:
            out.identical += 1
            continue
        out.divergences.append(divergence)
        if first_only:
            break
    return out


def rerun(each: Pass, view: View, whatif: WhatIf,
          pickers: Callable[[str], picker.Picker]) -> api.DecisionBatch:
    batch = each.batch
    if not batch.HasField("planner_state") or not batch.HasField("planner"):
        raise RecordingError(f"pass {each.number} (revision {each.revision}) records no planner state: "
                             "it was committed before entry format 15")
    state = planner.PlannerState.from_proto(batch.planner_state)
    if state.digest() != batch.planner_digest:
        raise RecordingError(f"pass {each.number} (revision {each.revision}): its planner state does not "
                             "match its digest (a damaged recording)")
    settings = whatif.settings(batch.planner)
    seen = planner.pass_view(view)
    seen = replace(seen, revision=batch.base_revision, now_ms=batch.now_ms,
                   queues=[whatif.queue(q) for q in seen.queues])
    config = planner.configured(settings, seen.queues, pickers)
    plan = planner.plan(seen, state, batch.clock_ms, config)
    return planner.to_batch(plan, state, batch.lease_epoch, batch.scheduler_id, batch.base_revision,
                            batch.clock_ms, batch.now_ms, settings)


def compare(each: Pass, again: api.DecisionBatch) -> Divergence | None:
    recorded = [d.SerializeToString(deterministic=True) for d in each.batch.decisions]
    replayed = [d.SerializeToString(deterministic=True) for d in again.decisions]
    if recorded == replayed:
        return None
    index = next((i for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)) if a != b),
                 min(len(recorded), len(replayed)))
    return Divergence(each.number, each.revision, each.batch.base_revision, index,
                      _at(each.batch.decisions, index), _at(again.decisions, index))


def _on_their_views(recording: Recording, todo: list[Pass]) -> Iterator[tuple[Pass, View | None]]:
    """Each pass with the view at its base revision (None: older than the baseline)."""
    view = View()
    view.restore(recording.baseline, recording.from_revision)
    events = recording.events
    at = 0
    for each in sorted(todo, key=lambda p: (p.batch.base_revision, p.number)):
        base = each.batch.base_revision
        if base < recording.from_revision:
            yield each, None
            continue
        while at < len(events) and events[at].revision <= base:
            view.apply(log.SyncMessage(event=events[at]))
            at += 1
        yield each, view


def describe(decision: api.Decision) -> str:
    kind = decision.WhichOneof("body")
    if kind == "dispatch":
        d = decision.dispatch
        where = ", ".join(f"{h.host}:{h.slots}" for h in d.hosts) or d.host
        chunk = f", its chunk {', '.join(map(str, d.chunk))}" if d.chunk else ""
        return f"DISPATCH job {d.job_id} attempt {d.attempt} to {where}{chunk}"
    if kind == "preempt":
        p = decision.preempt
        victims = ", ".join(f"{v.job_id}.{v.attempt}" for v in p.victims)
        return f"PREEMPT for job {p.job_id} attempt {p.attempt}: victims {victims}"
    if kind == "pend":
        return f"PEND job {decision.pend.job_id} ({api.PendingReason.Name(decision.pend.code)}): " \
               f"{decision.pend.reason}"
    return "an empty decision"


def _at(decisions: object, index: int) -> str:
    listed = list(decisions)  # type: ignore[call-overload]
    return describe(listed[index]) if index < len(listed) else "(none: the batch ends before it)"
