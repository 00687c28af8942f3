"""Seeded runs of the whole-cluster protocol simulation (tests/protocol_sim).

Each seed runs a safety phase with faults (every invariant of
tla/XceBarrier.tla checked after every step) and then a liveness phase
without faults in which every job must end. The seed is printed first; a
failure prints the seed and the step sequence. CI runs a fixed budget;
`XCE_SIM_LONG=1` runs many more seeds (tla/README.md has the command).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from protocol_sim.runner import run_seed

LONG = os.environ.get("XCE_SIM_LONG") == "1"
SEEDS = int(os.environ.get("XCE_SIM_SEEDS", "400" if LONG else "60"))
STEPS = int(os.environ.get("XCE_SIM_STEPS", "3000" if LONG else "1500"))
CHUNK = 10  # seeds per test, so a failure names a small range



@pytest.mark.parametrize("first", range(1, SEEDS + 1, CHUNK))
def test_seeds_keep_every_invariant_and_end_every_job(first: int) -> None:
    for seed in range(first, min(first + CHUNK, SEEDS + 1)):
        result = run_seed(seed, STEPS)
        assert result.liveness_rounds >= 1 and result.jobs > 0


def test_the_same_seed_gives_the_same_run() -> None:
    first, second = run_seed(7, 600), run_seed(7, 600)
    assert first.digest == second.digest
    assert run_seed(8, 600).digest != first.digest


def test_the_runs_preempt_by_suspend_and_requeue_and_resume_victims() -> None:
    """The seeds meet preemption (tests/protocol_sim/leader.py's queues): victims suspended and
    requeued, stops that take effect late (a process in a system call), and resumes (rarer: the faults
    often end a suspended victim before its preemptor ends; these seeds have some)."""
    seen: Counter[str] = Counter()
    for seed in range(16, 20):
        seen.update(run_seed(seed, STEPS).stats)
    assert seen["suspend victims"] and seen["requeue victims"], seen
    assert seen["processes stopped"] and seen["processes stopped late"] and seen["processes continued"], seen
