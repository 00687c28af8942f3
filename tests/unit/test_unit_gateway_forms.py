"""The gateway's pure parts: bodies made into requests or refused, and codes made into problems."""

from __future__ import annotations

import json

import pytest

from gateway import forms, problems
from gateway.problems import Problem
from xce.v1 import api_pb2 as api


def refused(call, *args) -> Problem:  # type: ignore[no-untyped-def]
    with pytest.raises(Problem) as caught:
        call(*args)
    return caught.value


def test_one_spec_or_a_list_of_specs() -> None:
    [one] = forms.submit({"command": ["sleep", "1"], "slots": 4, "resource_req": "select[mem>1]"})
    assert list(one.command) == ["sleep", "1"] and one.slots == 4 and one.resource_req == "select[mem>1]"
    many = forms.submit({"jobs": [{"command": ["a"]}, {"command": ["b"], "queue": "q"}]})
    assert [list(s.command) for s in many] == [["a"], ["b"]] and many[1].queue == "q"


def test_a_name_with_indices_makes_an_array_as_bsub_j_does() -> None:
    [spec] = forms.submit({"command": ["x"], "name": "sweep[1-10:3]%2"})
    assert spec.name == "sweep" and spec.array.limit == 2
    assert [(r.start, r.end, r.step) for r in spec.array.ranges] == [(1, 10, 3)]
    # The same array in protobuf's own JSON is taken as it is.
    [same] = forms.submit({"command": ["x"], "name": "sweep",
                           "array": {"ranges": [{"start": 1, "end": 10, "step": 3}], "limit": 2}})
    assert same == spec


@pytest.mark.parametrize("body, words", [
    ([], "must be a JSON object"),
    ({"command": []}, '"command"'),
    ({"name": "x"}, '"command"'),
    ({"command": ["x"], "colour": "red"}, "colour"),
    ({"command": "x y"}, "command"),
    ({"command": ["x"], "slots": 2 ** 40}, "out of range"),          # an integer too wide for its field
    ({"command": ["x"], "slots": "four"}, "slots"),
    ({"command": ["x"], "name": "a[1-99999999999999999999]"}, "bad job array"),
    ({"command": ["x"], "name": "a[1-2"}, "bad job array"),
    ({"jobs": []}, "non-empty list"),
    ({"jobs": [{"command": ["x"]}], "queue": "q"}, "no other keys"),
    ({"jobs": [{"command": ["x"]}, {"command": ["y"], "oops": 1}]}, "jobs[1]"),
])
def test_a_bad_job_spec_is_refused_naming_what_is_wrong(body: object, words: str) -> None:
    problem = refused(forms.submit, body)
    assert problem.status == 400 and words in problem.detail


def test_too_many_jobs_or_bytes() -> None:
    assert refused(forms.submit, {"jobs": [{"command": ["x"]}] * (forms.MAX_JOBS + 1)}).status == 400
    assert refused(forms.json_body, b" " * (forms.MAX_BODY + 1)).status == 413
    assert refused(forms.json_body, b"{").status == 400
    assert refused(forms.json_body, b"").status == 400
    assert refused(forms.json_body, b"[" * 100_000 + b"]" * 100_000).status == 400  # too deep: no crash
    assert forms.json_body(json.dumps({"a": 1}).encode()) == {"a": 1}


def test_actions_and_modifications() -> None:
    assert forms.action({"action": "HOLD"}) == api.HOLD
    assert "one of kill" in refused(forms.action, {"action": "explode"}).detail
    assert "unknown keys" in refused(forms.action, {"action": "kill", "now": True}).detail
    assert forms.modification({"priority": 3, "queue": "q"}) == {"priority": 3, "queue": "q"}
    assert "only priority" in refused(forms.modification, {"user": "eve"}).detail
    assert "nothing to modify" in refused(forms.modification, {}).detail
    for bad in (2 ** 31, "3", True, 1.5):
        assert "32-bit" in refused(forms.modification, {"priority": bad}).detail


def test_keys_and_queries() -> None:
    assert forms.new_key({"user": "a", "role": "user"})["role"] == "user"
    assert "role" in refused(forms.new_key, {"user": "a"}).detail
    assert "expires_ms" in refused(forms.new_key, {"user": "a", "role": "r", "expires_ms": -1}).detail
    assert refused(forms.page_size, 5001).status == 400
    history = forms.history({"user": "u", "state": ["EXIT"], "since_ms": 5, "exit_code": 1})
    assert history.user == "u" and list(history.states) == [api.EXIT] and history.exit_code == 1
    assert "DONE or EXIT" in refused(forms.history, {"state": ["RUN"]}).detail


def test_codes_become_http_statuses_and_problem_bodies() -> None:
    expected = {"INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401,
                "FAILED_PRECONDITION": 400, "UNAVAILABLE": 503, "RESOURCE_EXHAUSTED": 429,
                "ALREADY_EXISTS": 409, "DEADLINE_EXCEEDED": 504, "INTERNAL": 500}
    for code, status in expected.items():
        problem = problems.of_code(code, "why")
        assert problem.status == status and problem.code == code
    body = problems.body(problems.of_code("NOT_FOUND", "no job 9"), "/xce/v1/jobs/9")
    assert body == {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no job 9",
                    "instance": "/xce/v1/jobs/9", "code": "NOT_FOUND"}
    assert problems.of_code("SOMETHING_NEW", "x").status == 500
    assert "WWW-Authenticate" in problems.headers(Problem(401, "no key"))
    assert problems.headers(Problem(503, "no leader")) == {"Retry-After": "1"}


def test_a_body_nested_too_deep_is_refused_before_the_parser_meets_it() -> None:
    from gateway.forms import MAX_JSON_DEPTH, nests_deeper

    with pytest.raises(Problem, match=f"more than {MAX_JSON_DEPTH} deep"):
        forms.json_body(b"[" * 100_000 + b"]" * 100_000)
    assert not nests_deeper(b'{"a": "' + b"[" * 100 + b'"}', MAX_JSON_DEPTH)  # brackets in a string
    assert not nests_deeper(b'{"a": "\\"' + b"{" * 100 + b'"}', MAX_JSON_DEPTH)  # after an escaped quote
    assert nests_deeper(b"[" * 33 + b"]" * 33, MAX_JSON_DEPTH) and not nests_deeper(b"[" * 32 + b"]" * 32, 32)
