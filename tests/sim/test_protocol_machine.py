"""Hypothesis explores the protocol simulation through the actions of tla/XceBarrier.tla.

`XceBarrierMachine` has one rule per action of the spec (same names), plus
the simulation-only steps (time passing, follower crashes, network faults),
and one `@invariant` per invariant of the spec (same names), checked after
every step. Each rule takes an integer `pick` that chooses among what the
action could do (which replica, stream, message), so hypothesis shrinks a
failure to a short sequence of named steps; the simulation's own trace of
what each step did is in the failure message. Every example ends with the
liveness phase (no faults, everything delivered): every job must end.

CI runs a fixed, derandomized budget; `XCE_SIM_LONG=1` explores with fresh
randomness and many more examples (tla/README.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from protocol_sim.cluster import SIM_ACTIONS, SPEC_ACTIONS, Options, Sim
from protocol_sim.invariants import INVARIANTS, check_all
from protocol_sim.runner import SimFailure, settle, start

LONG = os.environ.get("XCE_SIM_LONG") == "1"
CI_EXAMPLES, CI_STEPS = 60, 150  # (make test's budget; XCE_SIM_LONG=1: 2,000 examples of 400 steps)
PICKS = st.integers(min_value=0, max_value=(1 << 30) - 1)



class XceBarrierMachine(RuleBasedStateMachine):
    options = Options()

    def __init__(self) -> None:
        super().__init__()
        self.sim = Sim(0, self.options)
        self.sim.check = check_all
        start(self.sim)

    def _step(self, name: str, pick: int) -> None:
        try:
            self.sim.step(name, pick)
        except AssertionError as exc:
            raise SimFailure(self.sim.seed, exc, self.sim.trace) from None

    def _check(self, name: str) -> None:
        try:
            INVARIANTS[name](self.sim)
        except AssertionError as exc:
            error = AssertionError(f"{name} violated: {exc}")
            raise SimFailure(self.sim.seed, error, self.sim.trace) from None

    def teardown(self) -> None:
        try:
            settle(self.sim)  # the liveness phase: every job ends once the faults stop
        except AssertionError as exc:
            raise SimFailure(self.sim.seed, exc, self.sim.trace) from None
        finally:
            self.sim.close()


def _action_rule(name: str) -> Callable[..., None]:
    def step(self: XceBarrierMachine, pick: int) -> None:
        self._step(name, pick)

    step.__name__ = step.__qualname__ = name
    return precondition(lambda self: self.sim.enabled(name))(rule(pick=PICKS)(step))


def _invariant(name: str) -> Callable[[XceBarrierMachine], None]:
    def check(self: XceBarrierMachine) -> None:
        self._check(name)

    check.__name__ = check.__qualname__ = name
    return invariant()(check)


for _name in (*SPEC_ACTIONS, *SIM_ACTIONS):
    setattr(XceBarrierMachine, _name, _action_rule(_name))
for _name in INVARIANTS:
    setattr(XceBarrierMachine, _name, _invariant(_name))

MACHINE_SETTINGS = settings(
    max_examples=2000 if LONG else CI_EXAMPLES, stateful_step_count=400 if LONG else CI_STEPS,
    derandomize=not LONG, deadline=None, database=None, print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

TestXceBarrier = XceBarrierMachine.TestCase
TestXceBarrier.settings = MACHINE_SETTINGS
