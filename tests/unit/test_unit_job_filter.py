"""Unit tests of ListJobs filters (xce/job_filter.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xce import job_filter
from xce.job_filter import FilterError
from xce.v1 import api_pb2 as api


def job(job_id: int = 1, state: int = api.PEND, queue: str = "normal", name: str = "", user: str = "",
        priority: int = 0, slots: int = 1, submit_time_ms: int = 0, attempt: int = 0) -> api.Job:
    return api.Job(id=job_id, state=state, submit_time_ms=submit_time_ms, attempt=attempt,
                   spec=api.JobSpec(command=["true"], queue=queue, name=name, user=user,
                                    priority=priority, slots=slots))


def matches(text: str, candidate: api.Job) -> bool:
    return job_filter.parse(text).matches(candidate)


# ---------------------------------------------------------------- parse errors


@pytest.mark.parametrize(("text", "message"), [
    ("state", "filter 'state' is not field:op:value"),
    ("state:eq", "filter 'state:eq' is not field:op:value"),
    ("", "filter '' is not field:op:value"),
    ("colour:eq:red", "unknown filter field 'colour' (fields: id, state, queue, name, user, priority"),
    ("State:eq:RUN", "unknown filter field 'State'"),
    ("id:like:5", "unknown filter op 'like' (ops: eq, ne, lt, le, gt, ge, in)"),
    ("id:EQ:5", "unknown filter op 'EQ'"),
    ("id:eq:five", "filter on id needs a number, got 'five'"),
    ("priority:gt:", "filter on priority needs a number, got ''"),
    ("slots:in:1,two", "filter on slots needs a number, got 'two'"),
    ("state:eq:RUNNING", "unknown state 'RUNNING'"),
    ("state:in:run,bogus", "unknown state 'bogus'"),
    ("state:eq:JOB_STATE_UNSPECIFIED", "unknown state 'JOB_STATE_UNSPECIFIED'"),
    ("state:eq:", "unknown state ''"),
])
def test_parse_error_names_the_wrong_part(text: str, message: str) -> None:
    with pytest.raises(FilterError) as caught:
        job_filter.parse(text)
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_value_may_contain_colons() -> None:
    parsed = job_filter.parse("name:eq:a:b:c")
    assert parsed == job_filter.Filter("name", "eq", "a:b:c")
    assert matches("name:eq:a:b:c", job(name="a:b:c"))


# ---------------------------------------------------------------- operators on fields


@pytest.mark.parametrize(("text", "expected"), [
    ("id:eq:7", True), ("id:eq:8", False), ("id:ne:8", True), ("id:ne:7", False),
    ("id:lt:8", True), ("id:lt:7", False), ("id:le:7", True), ("id:gt:6", True), ("id:gt:7", False),
    ("id:ge:7", True), ("id:ge:8", False), ("id:in:1,7,9", True), ("id:in:1,9", False),
    ("priority:lt:0", True), ("priority:eq:-3", True), ("priority:gt:-4", True),
    ("slots:in:4", True), ("slots:ge:5", False),
    ("queue:eq:gpu", True), ("queue:eq:GPU", False), ("queue:ne:normal", True),
    ("queue:in:normal,gpu", True), ("queue:in:normal", False),
    ("name:eq:train", True), ("name:lt:u", True), ("user:eq:alice", True), ("user:eq:", False),
    ("submit_time_ms:ge:1700000000000", True), ("submit_time_ms:lt:1700000000000", False),
    ("attempt:eq:2", True), ("attempt:in:0,1", False),
    ("state:eq:RUN", True), ("state:ne:RUN", False), ("state:in:PEND,RUN", True),
    ("state:in:PEND,DONE", False),
])
def test_operators_on_each_field(text: str, expected: bool) -> None:
    candidate = job(job_id=7, state=api.RUN, queue="gpu", name="train", user="alice", priority=-3,
                    slots=4, submit_time_ms=1_700_000_000_000, attempt=2)
    assert matches(text, candidate) is expected


def test_numbers_compare_as_numbers_not_text() -> None:
    assert matches("id:lt:10", job(job_id=9))
    assert not matches("id:lt:10", job(job_id=100))
    assert matches("priority:gt:9", job(priority=10))


@pytest.mark.parametrize("spelling", ["run", "RUN", "Run", "rUn"])
def test_state_names_are_case_insensitive(spelling: str) -> None:
    parsed = job_filter.parse(f"state:eq:{spelling}")
    assert parsed.value == "RUN"
    assert parsed.matches(job(state=api.RUN))
    assert not parsed.matches(job(state=api.PEND))
    assert job_filter.parse(f"state:in:pend,{spelling}").value == frozenset({"PEND", "RUN"})


def test_matches_all_requires_every_filter() -> None:
    filters = [job_filter.parse("state:eq:pend"), job_filter.parse("queue:eq:normal"),
               job_filter.parse("priority:ge:2")]
    assert job_filter.matches_all(filters, job(priority=2))
    assert not job_filter.matches_all(filters, job(priority=1))
    assert not job_filter.matches_all(filters, job(priority=5, state=api.RUN))
    assert job_filter.matches_all([], job())


@given(ids=st.lists(st.integers(0, 2**40), min_size=1, max_size=5), candidate=st.integers(0, 2**40))
def test_in_matches_exactly_the_listed_values(ids: list[int], candidate: int) -> None:
    text = "id:in:" + ",".join(str(i) for i in ids)
    assert matches(text, job(job_id=candidate)) is (candidate in ids)
    assert all(matches(text, job(job_id=i)) for i in ids)
