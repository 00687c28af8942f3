"""The property tests can fail: each deliberately injected bug is caught.

Every bug is built into the simulated processes through the simulation's
options (tests/protocol_sim/bugs.py: a broken apply handler, view, planner
configuration or commit barrier, or a follower's AppendEntries rule), never
by patching a production module; the seeded simulation then runs the same
seeds as tests/sim/test_protocol_sim.py until an invariant fails, and the test
prints the counterexample: the seed and the sequence of steps that led there.
"""

from __future__ import annotations

import pytest
from protocol_sim import bugs
from protocol_sim.cluster import Options
from protocol_sim.runner import SimFailure, run_seed

MAX_SEEDS = 30
STEPS = 1500

# bug -> the invariants that may be the first to notice it
EXPECTED = {
    # The leader reads proposed state as committed: RunJob, and answers, before the commit.
    # (A watchdog reading it may mark a host by a join that never committed: StaleConnectionNoEffect.)
    "run_before_commit": {"DispatchAfterCommit", "NoDoubleRun", "CapacitySafe", "NoLostJob",
                          "StaleConnectionNoEffect", "HeldExactly"},
    "requeue_on_success": {"NoDoubleRun", "CapacitySafe"},
    "join_without_generation_bump": {"FreshGeneration", "StaleConnectionNoEffect"},
    "view_accepts_old_events": {"ViewConsistent"},
    "stale_lease_accepted": {"StaleLeaseNoEffect"},
    "planner_ignores_refusal_cooldown": {"RefusalRespected"},
    # The preemptor starts while its victim still runs (before its stop took effect).
    "preempt_gives_back_at_once": {"CapacitySafe"},
    # A late or repeated AppendEntries cuts committed entries off a follower.
    "pysyncobj_append_rule": {"TypeOK"},
}



def test_every_injected_bug_has_an_expectation() -> None:
    assert set(EXPECTED) == set(bugs.BUGS)


# The slowest to catch (a minute and a half on two busy cores) waits for `make test-slow`: make test keeps
# its budget, and TLC catches the same bug in make test (test_tlc.py, the injected bugs).
SLOW = {"stale_lease_accepted"}


@pytest.mark.parametrize("bug", [pytest.param(b, marks=pytest.mark.slow) if b in SLOW else b
                                 for b in sorted(EXPECTED)])
def test_injected_bug_is_caught(bug: str) -> None:
    options = bugs.inject(bug, Options(max_jobs=STEPS // 100))  # as test_protocol_sim runs
    for seed in range(1, MAX_SEEDS + 1):
        try:
            run_seed(seed, STEPS, options)
        except SimFailure as failure:
            print(failure)  # the readable counterexample: seed and step sequence
            caught_by = str(failure.error).split(" violated", 1)[0]
            assert caught_by in EXPECTED[bug], f"{bug} caught by {caught_by}, expected {EXPECTED[bug]}"
            assert "step sequence" in str(failure) and f"seed {seed}" in str(failure)
            return
    pytest.fail(f"the injected bug {bug} went unnoticed through {MAX_SEEDS} seeds of {STEPS} steps")
