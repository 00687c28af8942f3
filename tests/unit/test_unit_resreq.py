"""The resource requirement language (xce/rules/resreq.py): what it reads, what it refuses and where, and
how a host is judged by it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xce.rules import resreq
from xce.rules.resreq import Requirement, RequirementError, matches, merge, parse

HOST = {"slots": 8.0, "maxmem": 64000.0, "mem": 12000.0, "ncpus": 8.0, "gpu": 2.0, "type": "X86_64",
        "ut": 0.25}


def test_every_section_as_lsf_writes_them() -> None:
    req = parse("select[type == X86_64 && mem > 4000 && defined(gpu)] order[-slots:mem] "
                "rusage[mem=4000:gpu=1] span[ptile=4] same[type]")
    assert req.order == (("slots", True), ("mem", False))
    assert req.usage() == {"mem": 4000.0, "gpu": 1.0}
    assert (req.ptile, req.span_hosts, req.same) == (4, 0, ("type",))
    assert matches(req, HOST)
    assert not matches(req, {**HOST, "mem": 3000.0})
    assert not matches(req, {k: v for k, v in HOST.items() if k != "gpu"})  # defined(gpu) fails


def test_a_bare_expression_is_a_select_and_empty_is_nothing() -> None:
    assert parse("mem > 4000") == Requirement(select=("cmp", ">", ("name", "mem"), ("num", 4000.0)))
    assert parse("") == parse("   ") == Requirement()
    assert matches(parse(""), {})
    assert parse("rusage[mem=1,gpu=2]").usage() == {"mem": 1.0, "gpu": 2.0}  # , as well as :
    assert parse("span[hosts=1]").span_hosts == 1


@pytest.mark.parametrize(("expression", "verdict"), [
    ("mem > 4000 && ncpus >= 8", True), ("mem > 4000 and ncpus > 8", False), ("!(gpu < 1)", True),
    ("not gpu", False), ("gpu == 2 || nothere > 1", True), ("nothere > 1", False), ("nothere < 1", False),
    ("!(nothere > 1)", True), ("type == X86_64", True), ('type == "X86_64"', True), ("type != ARM", True),
    ("type = X86_64", True), ("mem / 1000 >= 12", True), ("mem - 2 * 1000 == 10000", True),
    ("-ut < 0", True), ("mem / 0 > 1", False), ("type > 3", False), ("defined(type)", True),
    ("a || b && c", False), ("(gpu > 1 || ut > 1) && slots == 8", True), ("maxmem >= 6.4e4", True),
])
def test_select_judges_a_host(expression: str, verdict: bool) -> None:
    assert matches(parse(f"select[{expression}]"), HOST) is verdict


@pytest.mark.parametrize(("text", "column", "words"), [
    ("select[mem>]", 12, "expected"),
    ("select[mem > 4000", 18, "expected ]"),
    ("mem >> 3", 6, "unexpected '>'"),
    ("select[$x]", 8, "unexpected '$'"),
    ("select[x] select[y]", 11, "given twice"),
    ("span[hosts=2]", 12, "takes 1"),
    ("span[ptile=0]", 12, "whole number"),
    ("span[tiles=2]", 6, "hosts=1 or ptile=N"),
    ("rusage[mem=1:mem=2]", 14, "twice"),
    ("rusage[mem=1:duration=3]", 14, "not supported"),
    ("rusage[mem=x]", 12, "a number"),
    ("order[-]", 8, "a name"),
    ("select[a] bogus[b]", 11, "unexpected"),
])
def test_bad_requirements_name_the_column_and_what_was_expected(text: str, column: int, words: str) -> None:
    with pytest.raises(RequirementError) as refused:
        parse(text)
    assert refused.value.column == column, str(refused.value)
    assert str(refused.value).startswith(f"column {column}: ") and words in str(refused.value)


def test_hostile_sizes_are_refused_cheaply() -> None:
    with pytest.raises(RequirementError, match="longer than"):
        parse("a" * (resreq.MAX_CHARS + 1))
    with pytest.raises(RequirementError, match="nested parentheses"):
        parse("(" * 100 + "a" + ")" * 100)
    assert parse("(" * resreq.MAX_DEPTH + "a" + ")" * resreq.MAX_DEPTH).select == ("name", "a")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("selctordusagpnmhit[]()=<>!&|:,.-+*/\"' 0123456789xX_")),
               max_size=60))
def test_any_text_parses_or_is_refused_with_a_column(text: str) -> None:
    try:
        req = parse(text)
    except RequirementError as refused:
        assert refused.column >= 0 and str(refused)
    else:
        matches(req, HOST)  # whatever parses, evaluates


def test_a_queue_and_a_job_merge_as_lsf_merges_them() -> None:
    queue = parse("select[type == X86_64] order[-mem] rusage[mem=1000:license=1] span[ptile=2]")
    job = parse("select[gpu > 1] rusage[mem=4000]")
    both = merge(queue, job)
    assert both.select == ("and", queue.select, job.select)
    assert both.usage() == {"mem": 4000.0, "license": 1.0}
    assert (both.order, both.ptile) == ((("mem", True),), 2)
    one_host = merge(queue, parse("span[hosts=1]"))
    assert (one_host.span_hosts, one_host.ptile) == (1, 0)
    assert merge(Requirement(), job) == job and merge(job, Requirement()).select == job.select


@pytest.mark.parametrize("text", ["select[defined_x > 1]", "select_me > 2", "order > 1", "sameness == 3",
                                  "spanner > 1"])
def test_a_name_may_start_with_a_keyword_but_format_5_refused_it_as_its_replicas_did(text: str) -> None:
    assert parse(text).select is not None
    with pytest.raises(RequirementError, match=r"^column \d+: unexpected"):
        parse(text, resreq.GRAMMAR_5)


def test_both_grammars_read_every_requirement_format_5_took_the_same() -> None:
    for text in ("select[type == X86_64 && mem > 4000 && defined(gpu)] order[-slots:mem] "
                 "rusage[mem=4000:gpu=1] span[ptile=4] same[type]", "mem > 4000", "defined (gpu)",
                 "select [ a > 1 ] order [ b ]", "rusage[mem=1,gpu=2]"):
        assert parse(text) == parse(text, resreq.GRAMMAR_5)


HOSTS = [HOST, {}, {"type": "ARM", "gpu": 0.0, "mem": 100.0, "slots": 1.0},
         {"gpu": True, "x": "y", "ut": 0.9}]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("gpumemtypslotsut()!&|=<>+-*/ 0123\"XA_")), min_size=1,
               max_size=40))
def test_the_compiled_select_answers_as_the_evaluated_one(text: str) -> None:
    try:
        req = parse(f"select[{text}]")
    except RequirementError:
        return
    assert req.select is not None
    for host in HOSTS:
        assert resreq.compiled(req.select)(host) is (resreq.evaluate(req.select, host) is True), (text, host)


def test_nesting_is_bounded_when_asked_and_never_a_recursion_error() -> None:
    """The leader's bound (MAX_NESTING) refuses a chain of `!` or unary minus that has no parentheses;
    without it (apply's reading of what was taken) the same text that fits parses as before."""
    for text in ("select[" + "!" * 4000 + "gpu]", "select[mem > " + "-" * 3000 + "1]", "!" * 100 + "gpu"):
        with pytest.raises(resreq.RequirementError, match="nested more than 64 levels deep"):
            resreq.parse(text, max_nesting=resreq.MAX_NESTING)
    fits = "select[" + "(" * 31 + "!" * 20 + "gpu && mem > -(-4)" + ")" * 31 + "]"
    assert resreq.parse(fits, max_nesting=resreq.MAX_NESTING) == resreq.parse(fits)
