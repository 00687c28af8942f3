"""-w by job name (cli/lsf/depend.py): names become the ids of the submitter's jobs of that name."""

from __future__ import annotations

import pytest

from cli.lsf.depend import DependError, has_names, resolve

JOBS = {"prep": ["12"], "sweep": ["20"], "twice": ["30", "31"]}


def ids_of(name: str) -> list[str]:
    if name.endswith("*"):
        return sorted(i for n, ids in JOBS.items() if n.startswith(name[:-1]) for i in ids)
    return JOBS.get(name, [])


@pytest.mark.parametrize(("expression", "resolved"), [
    ("done(prep)", "done(12)"),
    ('ended("prep") && exit(sweep[3], != 0)', "ended(12) && exit(20[3], != 0)"),
    ("done(twice)", "(done(30) && done(31))"),
    ("numdone(sweep, >= 10) || started(7)", "numdone(20, >= 10) || started(7)"),
    ("prep", "done(12)"),
    ("done(tw*) && !done(prep)", "(done(30) && done(31)) && !done(12)"),
    ("done(12) && exit(13, 2)", "done(12) && exit(13, 2)"),
    ("12", "12"),
])
def test_names_become_ids(expression: str, resolved: str) -> None:
    assert resolve(expression, ids_of) == resolved
    assert has_names(expression) == (expression != resolved)


def test_a_name_no_job_has_or_an_ambiguous_count_is_refused() -> None:
    with pytest.raises(DependError, match="nope: No matching job found"):
        resolve("done(prep) && done(nope)", ids_of)
    with pytest.raises(DependError, match="2 jobs are named 'twice'"):
        resolve("numdone(twice, *)", ids_of)
