"""Trace validation: a recorded run, written as a TLA+ module, checked by TLC against the spec.

A recording is a start (MCXceBarrier's started cluster, or a full state) and a
list of steps, each a spec action and the variables observed after it. TLC
runs tla/TraceXceBarrier.tla over it: the run is accepted when some
behaviour of the spec matches every step, and otherwise the first step that
no behaviour matches is named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tlc import Run, run

IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelValue:
    """A constant of the spec by name (None), written bare."""
    name: str


NONE = ModelValue("None")


@dataclass(frozen=True)
class SetOf:
    """A TLA+ set of values Python cannot hash (records)."""
    items: tuple[Any, ...]


def tla(value: Any) -> str:
    """A Python value as a TLA+ expression: dicts with identifier keys are records, other
    dicts functions (`k :> v @@ ...`), lists and tuples sequences, sets sets."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, ModelValue):
        return value.name
    if isinstance(value, Mapping):
        if value and all(isinstance(k, str) and IDENTIFIER.match(k) for k in value):
            return "[" + ", ".join(f"{k} |-> {tla(v)}" for k, v in value.items()) + "]"
        if not value:
            return "<< >>"
        return "(" + " @@ ".join(f"{tla(k)} :> {tla(v)}" for k, v in value.items()) + ")"
    if isinstance(value, list | tuple):
        return "<<" + ", ".join(tla(v) for v in value) + ">>"
    if isinstance(value, set | frozenset | SetOf):
        items = value.items if isinstance(value, SetOf) else value
        return "{" + ", ".join(sorted(tla(v) for v in items)) + "}"
    raise TypeError(f"no TLA+ form for {value!r}")


@dataclass
class Step:
    action: str
    observed: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # where it came from (the simulation's step), for the reader of a rejection


@dataclass
class Verdict:
    accepted: bool
    first_rejected: int | None  # 1-based index into the steps
    action: str | None
    run: Run

    def explain(self, steps: list[Step]) -> str:
        if self.accepted:
            return f"accepted: {len(steps)} steps"
        if self.first_rejected is None:
            return "TLC failed:\n" + self.run.output[-3000:]
        shown = steps[self.first_rejected - 1]
        before = [f"  {n}: {s.action} {s.note}" for n, s in
                  enumerate(steps[max(0, self.first_rejected - 8):self.first_rejected - 1],
                            start=max(1, self.first_rejected - 7))]
        where = f", {shown.note}" if shown.note else ""
        return "\n".join([f"step {self.first_rejected} ({shown.action}{where}) is not a step of the spec "
                          f"from where the {self.first_rejected - 1} before it lead; "
                          f"observed: {shown.observed}",
                          "the steps before it:", *before])


Start = Mapping[str, Any] | str | None  # a full state; "init" (the spec's Init); None: the started cluster


def trace_module(steps: list[Step], start: Start) -> str:
    rows = ",\n    ".join(f'[action |-> "{s.action}", vars |-> {tla(s.observed) if s.observed else "<< >>"}]'
                           for s in steps)
    origin = "setup" if start is None else "init" if start == "init" else "recorded"
    lines = ["---- MODULE TraceData ----", "EXTENDS XceBarrier, TLC",
             f"TraceFrom == {tla(origin)}",
             f"TraceStart == {tla(start) if isinstance(start, Mapping) else tla({'none': 0})}",
             f"Trace == <<\n    {rows}\n>>", "===="]
    return "\n".join(lines) + "\n"


def trace_config(constants: Mapping[str, str]) -> str:
    defined = "\n".join(f"    {k} = {v}" for k, v in constants.items())
    return (f"SPECIFICATION TraceSpec\nCONSTANTS\n{defined}\n    EntryBound <- CIEntries\n"
            "POSTCONDITION TraceAccepted\nCHECK_DEADLOCK FALSE\n")


# The started cluster of MCci.cfg: the constants a recording from SetupInit is checked with.
# Jobs, hosts and schedulers are strings (model values of a .cfg cannot be named in the data).
SETUP_CONSTANTS = {
    "Jobs": '{"j1", "j2"}', "Hosts": '{"h1", "h2"}', "Schedulers": '{"s1"}', "Cap": "1",
    "Wide": "{}", "Gpu": "{}", "GCap": "0", "Low": "{}",
    "None": "None", "MaxTerm": "3", "MaxLog": "100", "MaxFaults": "0", "Submitted": '{"j1"}',
    "MaxSyncQueue": "100", "MaxBatches": "100", "MaxDown": "100",
}


# The variables tla/TraceXceBarrier.tla's Agrees compares: an observation of any other name
# would be silently unchecked, so it is refused here.
OBSERVABLE = frozenset({
    "log", "commit", "term", "leaderUp", "ready", "st", "acked", "floor", "view", "sync", "syncPos",
    "belief", "rpc", "inst", "journal", "up", "conn", "joining", "down", "upq", "unacked", "known",
    "op", "logLen", "batch", "viewOf",
})


def validate(steps: list[Step], start: Start = None,
             constants: Mapping[str, str] = SETUP_CONSTANTS) -> Verdict:
    unknown = sorted({k for step in steps for k in step.observed} - OBSERVABLE)
    if unknown:
        raise ValueError(f"observations TraceXceBarrier does not compare: {unknown}")
    result = run("TraceXceBarrier", module="TraceXceBarrier", workers=1, quick=True, files={
        "TraceData.tla": trace_module(steps, start),
        "TraceXceBarrier.cfg": trace_config(constants),
    })
    rejected = re.search(r'<<"TRACE REJECTED at step", (\d+), "(\w+)">>', result.output)
    accepted = result.code == 0 and rejected is None and "Error" not in result.output
    if rejected:
        return Verdict(False, int(rejected.group(1)), rejected.group(2), result)
    return Verdict(accepted, None, None, result)
