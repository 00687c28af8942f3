"""The OpenAPI document as the contract (gateway/openapi_doc.py, proto_schema.py) and the conditional
and blocking reads' rules (gateway/conditional.py): pure, no cluster. schemathesis drives the live
gateway against the same document in tests/cluster/test_gateway_contract.py."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from google.protobuf import json_format
from openapi_spec_validator import validate

from client.credentials import Credentials
from gateway import conditional, forms, openapi_doc, proto_schema, render
from gateway.app import make_app
from gateway.backend import Backend
from gateway.problems import Problem
from xce.v1 import api_pb2 as api


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    backend = Backend(["127.0.0.1:1"], Credentials(insecure=True))  # never called: the document only
    try:
        return make_app(backend).openapi()
    finally:
        backend.close()


def test_the_document_validates_and_describes_every_route(document: dict[str, Any]) -> None:
    validate(document)
    from fastapi.openapi.utils import get_openapi

    backend = Backend(["127.0.0.1:1"], Credentials(insecure=True))
    try:
        app = make_app(backend)
        assert openapi_doc.undescribed(get_openapi(title="t", version="1", routes=app.routes)) == []
    finally:
        backend.close()
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            codes = set(operation["responses"])
            assert "422" not in codes, (method, path)  # FastAPI's default, never sent: 400 is
            assert codes & {"200", "201"}, (method, path)
            assert ("security" in operation) == (path in openapi_doc.OPEN), (method, path)
            if method in ("post", "patch") and path != "/ui/session":
                assert "requestBody" in operation, (method, path)
    submit = document["paths"]["/xce/v1/jobs"]["post"]
    assert {p["name"] for p in submit["parameters"]} >= {"Idempotency-Key", "dry_run"}
    assert "links" in submit["responses"]["201"]
    assert any(p["name"] == "Last-Event-ID" for p in document["paths"]["/xce/v1/events"]["get"]["parameters"])
    assert any(p["name"] == "If-Match"
               for p in document["paths"]["/xce/v1/jobs/{job_id}/actions"]["post"]["parameters"])


def _validator(document: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                           "components": document["components"]})


def test_a_rendered_job_matches_its_schema_and_a_stray_field_does_not(document: dict[str, Any]) -> None:
    job = api.Job(id=12, readable_id="local-1-20261206-12", state=api.RUN, submit_time_ms=1 << 40,
                  host="h1", attempt=2)
    job.spec.command.extend(["sleep", "1"])
    job.spec.env["A"] = "b"
    job.timeline.add(time_ms=5, state=api.RUN, attempt=1)
    check = _validator(document, "Job")
    check.validate(render.message(job))
    assert render.message(job)["id"] == "12"  # 64-bit as a string, as the schema says
    with pytest.raises(jsonschema.ValidationError):
        check.validate({**render.message(job), "surprise": 1})
    with pytest.raises(jsonschema.ValidationError):
        check.validate({**render.message(job), "id": 12})  # a number where protobuf's JSON has a string
    hosts = api.ListHostsResponse(revision=9)
    hosts.hosts.add(spec=api.HostSpec(name="h1"), load={"r15s": float("nan")}, generation=3)
    _validator(document, "ListHostsResponse").validate(render.message(hosts))


def test_the_input_schema_takes_what_the_parser_takes() -> None:
    schemas = proto_schema.schemas([api.JobSpec.DESCRIPTOR], "in")
    check = jsonschema.Draft202012Validator({"$ref": "#/components/schemas/JobSpecInput",
                                            "components": {"schemas": schemas}})
    body = {"command": ["true"], "slots": "4", "priority": 3, "env": {"A": "1"}, "run_limit_s": 60}
    check.validate(body)
    json_format.ParseDict(body, api.JobSpec())
    assert not check.is_valid({"command": ["true"], "slots": True})
    assert not check.is_valid({"command": ["true"], "resourceReq": "x"})  # the alias: refused in both
    with pytest.raises(Problem, match="spelt 'resource_req'"):
        forms.job_spec({"command": ["true"], "resourceReq": "x"})
    with pytest.raises(Problem, match="slots is null"):
        forms.job_spec({"command": ["true"], "slots": None})
    with pytest.raises(Problem, match="null"):
        forms.new_key({"user": "a", "role": "user", "scope": {"queues": None}})


def test_etags_follow_what_is_shown_and_not_the_revision() -> None:
    a = conditional.etag({"jobs": [{"id": "1"}], "revision": "5"})
    assert a == conditional.etag({"revision": "9", "jobs": [{"id": "1"}]})
    assert a != conditional.etag({"jobs": [{"id": "2"}], "revision": "5"})
    assert a.startswith('"') and a.endswith('"')
    assert conditional.none_match(a, a) and conditional.none_match(f'"x", W/{a}', a)
    assert conditional.none_match("*", a) and not conditional.none_match('"x"', a)
    assert not conditional.none_match(None, a)
    assert conditional.match(None, a) and conditional.match(a, a) and conditional.match("*", a)
    assert not conditional.match(f"W/{a}", a)  # If-Match compares strongly
    assert not conditional.match('"stale"', a)
    with pytest.raises(Problem):
        conditional.match(" ", a)
    with pytest.raises(Problem):
        conditional.none_match("x" * (conditional.MAX_HEADER + 1), a)


@pytest.mark.parametrize(("wait", "index", "most", "expected"), [
    (None, None, 300.0, None), (None, 5, 300.0, 60.0), ("30s", 5, 300.0, 30.0), ("500ms", 5, 300.0, 0.5),
    ("5m", 5, 300.0, 300.0), ("10m", 5, 300.0, 300.0), ("7", 5, 2.0, 2.0), (None, 5, 2.0, 2.0)])
def test_a_blocking_read_waits_as_asked_within_the_bound(wait: str | None, index: int | None, most: float,
                                                          expected: float | None) -> None:
    assert conditional.wait_of(wait, index, most) == expected


@pytest.mark.parametrize(("wait", "index"), [("30s", None), ("soon", 1), ("1h", 1), ("30s", -1)])
def test_a_bad_blocking_read_is_refused(wait: str, index: int | None) -> None:
    with pytest.raises(Problem):
        conditional.wait_of(wait, index)
