"""Trace validation's machinery (tla/TraceXceBarrier.tla, tests/tla_trace.py): a recorded run
that the spec allows is accepted, and one it does not is rejected at its first wrong step."""

from __future__ import annotations

import re

import pytest
from tla_trace import OBSERVABLE, SetOf, Step, tla, validate
from tlc import TLA

pytestmark = pytest.mark.tlc

BATCH = {"type": "batch", "epoch": 1, "sched": "s1", "job": "j1", "attempt": 1, "host": "h1"}
RUN = {"h1": [{"type": "run", "job": "j1", "attempt": 1}], "h2": []}


def dispatch() -> list[Step]:
    """From the started cluster: j1 decided for h1, committed, sent, started."""
    return [
        Step("SchedulerPass", {"rpc": SetOf((BATCH,))}),
        Step("ProposeBatch"),
        Step("CommitApply", {"commit": 6}),
        Step("SendRun", {"down": RUN}),
        Step("WorkerStart", {"inst": SetOf(({"job": "j1", "attempt": 1, "host": "h1"},))}),
    ]


def test_tla_values() -> None:
    assert tla({"a": 1, "b": [True, "x"]}) == '[a |-> 1, b |-> <<TRUE, "x">>]'
    assert tla({1: {2, 3}}) == "(1 :> {2, 3})"
    assert tla([]) == "<<>>" and tla({}) == "<< >>"


def test_a_run_the_spec_allows_is_accepted() -> None:
    steps = dispatch()
    verdict = validate(steps)
    assert verdict.accepted, verdict.explain(steps)


def test_run_before_commit_is_rejected_at_the_send() -> None:
    steps = dispatch()
    steps[2], steps[3] = Step("SendRun", {"down": RUN}), Step("CommitApply", {"commit": 6})
    verdict = validate(steps)
    assert not verdict.accepted and verdict.first_rejected == 3 and verdict.action == "SendRun", \
        verdict.explain(steps)


def test_a_start_on_another_host_is_rejected() -> None:
    steps = dispatch()
    steps[4] = Step("WorkerStart", {"inst": SetOf(({"job": "j1", "attempt": 1, "host": "h2"},))})
    verdict = validate(steps)
    assert not verdict.accepted and verdict.first_rejected == 5, verdict.explain(steps)


def test_an_observation_the_module_would_not_compare_is_refused() -> None:
    with pytest.raises(ValueError, match="syncpos"):
        validate([Step("Resync", {"syncpos": {"s1": 5}})])


def test_the_module_compares_exactly_the_observable_variables() -> None:
    compared = set(re.findall(r'Seen\(e, "(\w+)"\)', (TLA / "TraceXceBarrier.tla").read_text()))
    assert compared == OBSERVABLE
