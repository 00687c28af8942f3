"""Seeded runs of the whole-cluster protocol simulation (tests/protocol_sim).

Each seed runs a safety phase with faults (every invariant of
tla/XceBarrier.tla checked after every step) and then a liveness phase
without faults in which every job must end. The seed is printed first; a
failure prints the seed and the step sequence. CI runs a fixed budget;
`XCE_SIM_LONG=1` runs many more seeds (tla/README.md has the command).
"""

from __future__ import annotations

import os

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
