"""Job dependency conditions (xce/rules/dependency_conditions.py): LSF's -w syntax parsed with columns
in its refusals, evaluated three ways (satisfied, pending, never) from the jobs' facts. Pure."""

from __future__ import annotations

import pytest

from xce.rules import dependency_conditions
from xce.rules.dependency_conditions import DependencyError, Facts, Verdict

RUN, DONE = Facts("RUN"), Facts("DONE")
PEND = Facts("PEND")


def ex(code: int) -> Facts:
    return Facts("EXIT", exit_code=code)


def lookup(jobs: dict[int, list[Facts]]) -> dependency_conditions.Lookup:
    """Job id -> its facts (one, or one per element of an array); an index picks an element."""
    def find(job: int, index: int | str | None) -> list[dependency_conditions.Group] | None:
        facts = jobs.get(job)
        if facts is None:
            return None
        return [(facts[index], 1)] if isinstance(index, int) else [(f, 1) for f in facts]
    return find


@pytest.mark.parametrize("text, shown", [
    ("12", "done(12)"),
    ("done(12) && (exit(13, != 0) || ended(14))", "done(12) && (exit(13, != 0) || ended(14))"),
    ("exit(13, 3)", "exit(13, == 3)"),
    ("not started(5) or done(6[2])", "!started(5) || done(6[2])"),
    ("numdone(17, >= 100) || done(18[*])", "numdone(17, >= 100) || done(18[*])"),
    ("numended(17, *)", "numended(17, *)"),
    ("!(done(1) && done(2))", "!(done(1) && done(2))"),
])
def test_lsf_conditions_parse_to_one_canonical_form(text: str, shown: str) -> None:
    assert dependency_conditions.show(dependency_conditions.parse(text)) == shown
    assert dependency_conditions.show(dependency_conditions.parse(shown)) == shown


@pytest.mark.parametrize("text, column, words", [
    ("done(12", 8, "expected )"),
    ("done(12) &&", 12, "the end"),
    ("done(x)", 6, "unexpected 'x'"),
    ("done(12, 3)", 10, "done() takes no exit code"),
    ("numdone(17, >= -1)", 13, "never negative"),
    ("numdone(17, 3)", 13, "expected *, a comparison"),
    ("finished(12)", 1, "unexpected 'f'"),
    ("done(0)", 6, "unexpected '0'"),
    ("", 0, "empty"),
])
def test_a_bad_condition_is_refused_with_its_column(text: str, column: int, words: str) -> None:
    with pytest.raises(DependencyError) as caught:
        dependency_conditions.parse(text)
    assert caught.value.column == column and words in str(caught.value), str(caught.value)


def test_bounds_keep_hostile_input_cheap() -> None:
    with pytest.raises(DependencyError, match="characters"):
        dependency_conditions.parse("done(1) || " * 400 + "done(1)")
    with pytest.raises(DependencyError, match="nested"):
        dependency_conditions.parse("(" * 40 + "done(1)" + ")" * 40)
    with pytest.raises(DependencyError, match="references"):
        dependency_conditions.parse(" || ".join(f"done({i})" for i in range(1, 300)))


def test_each_condition_holds_waits_or_is_never_met() -> None:
    jobs = lookup({1: [DONE], 2: [ex(3)], 3: [RUN], 4: [PEND], 5: [ex(0)]})

    def verdict(text: str) -> Verdict:
        return dependency_conditions.evaluate(dependency_conditions.parse(text), jobs)

    assert verdict("done(1)") is Verdict.SATISFIED
    assert verdict("done(2)") is Verdict.NEVER  # it exited: never DONE
    assert verdict("done(3)") is Verdict.PENDING
    assert verdict("exit(2)") is verdict("exit(2, 3)") is verdict("exit(2, > 1)") is Verdict.SATISFIED
    assert verdict("exit(2, == 0)") is Verdict.NEVER and verdict("exit(1)") is Verdict.NEVER
    assert verdict("ended(1) && ended(2)") is Verdict.SATISFIED and verdict("ended(3)") is Verdict.PENDING
    assert verdict("started(3)") is Verdict.SATISFIED and verdict("started(4)") is Verdict.PENDING
    assert verdict("started(5)") is Verdict.SATISFIED  # LSF's started(): past pending, EXIT included
    # && fails for good on one operand that fails for good; || holds on one that holds.
    assert verdict("done(2) && done(3)") is Verdict.NEVER
    assert verdict("done(3) || done(1)") is Verdict.SATISFIED
    assert verdict("done(3) || done(2)") is Verdict.PENDING
    # ! reads the present, as LSF's: it holds while 3 runs, and is settled once a job has ended.
    assert verdict("!done(3)") is Verdict.SATISFIED
    assert verdict("!done(1)") is Verdict.NEVER
    assert verdict("done(99)") is Verdict.NEVER  # no longer known anywhere


def test_arrays_by_element_by_all_and_by_count() -> None:
    jobs = lookup({17: [DONE, DONE, ex(1), RUN, PEND], 18: [DONE, DONE]})

    def verdict(text: str) -> Verdict:
        return dependency_conditions.evaluate(dependency_conditions.parse(text), jobs)

    assert verdict("done(17[0])") is Verdict.SATISFIED and verdict("done(17[3])") is Verdict.PENDING
    assert verdict("done(18) && done(18[*])") is Verdict.SATISFIED
    assert verdict("done(17)") is Verdict.NEVER  # element 2 exited
    assert verdict("ended(17)") is Verdict.PENDING
    assert verdict("numdone(17, >= 2)") is Verdict.SATISFIED
    assert verdict("numdone(17, >= 4)") is Verdict.PENDING  # 2 done, 2 may still be
    assert verdict("numdone(17, >= 5)") is Verdict.NEVER  # at most 4 can end DONE
    assert verdict("numdone(17, == 1)") is Verdict.NEVER  # 2 already, and counts of ends only grow
    assert verdict("numexit(17, < 2)") is Verdict.SATISFIED
    assert verdict("numended(17, *)") is Verdict.PENDING and verdict("numended(18, *)") is Verdict.SATISFIED
    assert verdict("numrun(17, == 1)") is Verdict.SATISFIED  # holds now; runs come and go
    assert verdict("numpend(17, == 0)") is Verdict.PENDING
    assert verdict("numstart(17, >= 4)") is Verdict.SATISFIED


def test_references_name_every_job_read() -> None:
    expr = dependency_conditions.parse("done(12) && (exit(13, != 0) || numdone(17, *) || 14)")
    assert dependency_conditions.references(expr) == {
        12, 13, 14, 17}


def test_a_chain_of_not_is_bounded_when_asked() -> None:
    with pytest.raises(dependency_conditions.DependencyError, match="nested more than 64 levels deep"):
        dependency_conditions.parse("!" * 4000 + "done(1)", max_nesting=dependency_conditions.MAX_NESTING)
    deepest = dependency_conditions.MAX_NESTING
    assert dependency_conditions.parse("!!done(1) && !exit(2, != 0)", max_nesting=deepest) == \
        dependency_conditions.parse("!!done(1) && !exit(2, != 0)")
