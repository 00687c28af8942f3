"""TLC model-checks tla/XceBarrier.tla (H6): the CI model exhaustively, liveness at the
smallest constants, and the five injected protocol bugs, each of which TLC must catch.

TLC is built from source on first use (tests/tlc.py); the whole file takes about
four minutes on 2 cores, most of it the exhaustive CI model. The three long
runs (tlc.AHEAD) start when this file is collected and run at nice +5 while
the other tests mostly wait on daemons; their tests pick up the results. A
failure prints TLC's counterexample one line per step.
"""

from __future__ import annotations

import re

import pytest
from test_tla_mapping import next_actions
from tlc import EXIT_INVARIANT, EXIT_PROPERTY, TLA, Run, run
from tlc import result as ahead

pytestmark = pytest.mark.tlc


def _explain(result: Run) -> str:
    return "\n".join([result.summary(), *result.trace(), result.output[-2000:]])


def test_the_model_lists_every_action_of_next_once_per_relation() -> None:
    text = (TLA / "MCXceBarrier.tla").read_text()
    for relation in ("MCNext", "LiveNext"):
        body = text[text.index(f"\n{relation} ==") + 1:].split("\n\n", 1)[0]
        assert sorted(re.findall(r"(?:Step|Fault)\((\w+)\)", body)) == sorted(next_actions()), relation


def test_ci_model_is_checked_exhaustively_and_takes_every_action() -> None:
    result = ahead("MCci", coverage=True)
    print(result.summary())
    assert result.passed, _explain(result)
    taken = result.coverage()
    assert sorted(a for a in next_actions() if taken.get(a, 0) == 0) == [], taken
    assert result.distinct and result.distinct > 100_000, result.summary()


def test_allocation_model_takes_parallel_and_gpu_jobs_all_or_nothing_and_gives_back_exactly() -> None:
    """MCAllocCI: a job over both hosts and GPUs one per host; CapacitySafe per resource, HeldExactly
    (MCAlloc, with a fault per behaviour, is `make tlc`'s: 1,455,856 states, 8 minutes)."""
    result = ahead("MCAllocCI")
    print(result.summary())
    assert result.passed, _explain(result)
    assert result.distinct and result.distinct > 10_000, result.summary()


def test_tlc_catches_a_barrier_that_checks_only_an_allocation_s_first_host() -> None:
    result = run("MCAllocCI", ("ApplyBatch <- MutApplyBatchFirstOnly",), quick=True)
    print(result.summary())
    print("\n".join(result.trace()))
    assert result.code == EXIT_INVARIANT and result.violated() == "CapacitySafe", _explain(result)


def test_preemption_model_never_runs_a_preemptor_beside_a_victim_not_yet_stopped() -> None:
    """MCPreemptCI: a low job preempted for a high one on a host of one slot keeps its slot until its
    worker says it stopped: CapacitySafe counts the instances not stopped. The preemption, the stop and
    its report are taken; the resume comes later than this model's log reaches (MCPreempt, `make tlc`)."""
    result = ahead("MCPreemptCI", coverage=True)
    print(result.summary())
    assert result.passed, _explain(result)
    taken = result.coverage()
    for action in ("SchedulerPreempt", "SendStop", "WorkerStop"):
        assert taken.get(action, 0) > 0, (action, taken)


def test_liveness_holds_at_the_smallest_constants() -> None:
    result = ahead("MCLive")
    print(result.summary())
    assert result.passed, _explain(result)


@pytest.mark.slow  # about 70 s on two busy cores: `make test-slow` (make test keeps its budget)
def test_liveness_fails_without_the_premise_that_sync_streams_stop_breaking() -> None:
    """The counterexample the premise answers: the lease holder's Sync stream breaks and
    is re-opened forever, so its view never shows the pending job."""
    result = run("MCLive", ("EventuallyDispatched <- EventuallyDispatchedAnyBreaks",))
    assert result.code == EXIT_PROPERTY and result.violated() == "EventuallyDispatched", \
        _explain(result)
    steps = "\n".join(result.trace())
    assert "back to state" in steps and "StreamBreak" in steps and "Resync" in steps, steps


def test_the_premise_does_not_excuse_a_stream_never_reopened() -> None:
    """The premise assumes the breaks stop, not that streams are up: a protocol that never
    re-opens a broken stream still fails EventuallyDispatched."""
    result = run("MCLive", ("Resync <- NoResync",), quick=True)
    assert result.code == EXIT_PROPERTY and result.violated() == "EventuallyDispatched", _explain(result)


# Each bug of tests/protocol_sim/bugs.py, the model and its variant in MCXceBarrier.tla, and the
# invariant that the simulation catches it with (tla/README.md, Injected bugs).
MUTATIONS = {
    "run_before_commit": ("MCci", "SendRun <- MutSendRun", {"DispatchAfterCommit"}),
    "requeue_on_success": ("MCci", "ApplyReport <- MutApplyReport", {"NoDoubleRun"}),
    "join_without_generation_bump": ("MCci", "ApplyJoin <- MutApplyJoin", {"FreshGeneration"}),
    "view_accepts_old_events": ("MCci", "SyncDeliver <- MutSyncDeliver", {"ViewConsistent"}),
    "stale_lease_accepted": ("MCci", "ApplyBatch <- MutApplyBatch", {"StaleLeaseNoEffect"}),
    # A PREEMPT that gives the victim's slots back before it stopped: the preemptor runs beside it.
    "preempt_gives_back_at_once": ("MCPreemptCI", "ApplyPreempt <- MutApplyPreemptEarly", {"CapacitySafe"}),
}


# Simulated bugs the spec has no action for: the refusal cool-down is a rate (time is not modelled),
# and Raft itself is below the spec, whose log is what Raft guarantees (tla/README.md).
BELOW_THE_SPEC = {"planner_ignores_refusal_cooldown", "pysyncobj_append_rule"}


def test_every_simulated_bug_has_a_spec_mutation() -> None:
    from protocol_sim.bugs import BUGS

    assert sorted(MUTATIONS) == sorted(b for b in BUGS if b not in BELOW_THE_SPEC)


# requeue_on_success takes TLC 70 s (the double run is deep in the model): `make test-slow` checks it.
@pytest.mark.parametrize("bug", [pytest.param(b, marks=pytest.mark.slow) if b == "requeue_on_success" else b
                                 for b in sorted(MUTATIONS)])
def test_tlc_catches_the_injected_bug(bug: str) -> None:
    model, override, caught_by = MUTATIONS[bug]
    result = run(model, (override,), quick=bug != "requeue_on_success")
    print(result.summary())
    print("\n".join(result.trace()))
    assert result.code == EXIT_INVARIANT and result.violated() in caught_by, _explain(result)
