"""`invariant(condition, message)`: an assertion that survives `python -O`.

A broken invariant is a bug, never bad input: it raises InvariantViolated
(an AssertionError). Inside apply that stops the replica (fail-stop) before
it applies anything else; elsewhere it crashes the task that found it.
"""

from __future__ import annotations


class InvariantViolated(AssertionError):
    pass


def invariant(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolated(message)
