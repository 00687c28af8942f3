"""The OpenAPI document as the contract: FastAPI's (paths and query parameters, from the routes'
signatures) completed with what it cannot know: request and response schemas (proto_schema.py, from
the messages themselves), every status the gateway sends, the bearer scheme, the headers. Every
operation must be described in OPERATIONS: one that is not fails the document's test. Pure.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gateway import proto_schema
from gateway.problems import TITLES
from gateway.proto_schema import REF, Schema
from xce.v1 import api_pb2 as api

PREFIX = "/xce/v1"
JSON = "application/json"
PROBLEM = "application/problem+json"
OPEN = ("/xce/v1/openapi.json", "/healthz", "/readyz")  # answered without a key


def _ref(name: str) -> Schema:
    return {"$ref": REF + name}


def _out(message: Any) -> Schema:
    return proto_schema.ref(message.DESCRIPTOR, "out")


def _obj(properties: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


REVISION: Schema = {"type": "string", "pattern": "^[0-9]+$", "description": "the revision (a decimal string)"}
TOKEN: Schema = {"type": "string", "description": "give it as page_token for the next page; empty at the end"}
JOB = _out(api.Job)
JOBS: Schema = {"type": "array", "items": JOB}
DRY_JOB = _obj({"dry_run": {"type": "string", "description": "what would happen"}, "job": JOB},
               ("dry_run", "job"))

# The extra schemas the routes answer with (beside the messages').
EXTRA: dict[str, Schema] = {
    "Problem": {
        "type": "object", "description": "RFC 9457 problem details",
        "required": ["type", "title", "status", "detail"],
        "properties": {"type": {"type": "string"}, "title": {"type": "string"},
                       "status": {"type": "integer", "minimum": 100, "maximum": 599},
                       "detail": {"type": "string"}, "instance": {"type": "string"},
                       "code": {"type": "string", "description": "the gRPC status code by name"}},
    },
    "JobList": _obj({"jobs": JOBS, "next_page_token": TOKEN, "revision": REVISION}, ("jobs",)),
    "Submitted": _obj({"jobs": JOBS, "revision": REVISION}, ("jobs",)),
    "SubmitDryRun": _obj({"dry_run": {"type": "string"}, "jobs": JOBS}, ("dry_run", "jobs")),
    "History": _obj({"jobs": JOBS, "next_page_token": TOKEN}, ("jobs",)),
    "AuditPage": _obj({"records": {"type": "array", "items": _ref("AuditRow")}, "next_page_token": TOKEN},
                      ("records",)),
    "Keys": _obj({"keys": {"type": "array", "items": _out(api.TokenInfo)}}, ("keys",)),
    "Clusters": _obj({"clusters": {"type": "array", "items": {"type": "object"}},
                      "default": {"type": "string"}}, ("clusters", "default")),
    "OtherStatus": {"type": "object", "description": "another cluster's health (gateway/clusters/)",
                    "required": ["cluster_id", "backend", "healthy"],
                    "properties": {"cluster_id": {"type": "string"}, "backend": {"type": "string"},
                                   "healthy": {"type": "boolean"}, "health": {"type": "string"}}},
    "Health": _obj({"ok": {"type": "boolean"}, "why": {"type": "string"}}, ("ok",)),
    "JobSpecs": _obj({"jobs": {"type": "array", "minItems": 1, "maxItems": 10_000,
                               "items": proto_schema.ref(api.JobSpec.DESCRIPTOR, "in")}}, ("jobs",)),
    "Action": _obj({"action": {"type": "string", "description": "what to do to the job",
                               "enum": ["kill", "stop", "resume", "hold", "release", "requeue",
                                        "checkpoint"]}}, ("action",)),
    "Modification": {**_obj({"priority": {"type": "integer", "minimum": -(1 << 31), "maximum": (1 << 31) - 1},
                             "queue": {"type": "string"}, "resource_req": {"type": "string"}}),
                     "minProperties": 1},
    "NewKey": _obj({"user": {"type": "string", "minLength": 1}, "role": {"type": "string", "minLength": 1},
                    "expires_ms": {"type": "integer", "minimum": 0, "maximum": (1 << 63) - 1,
                                   "description": "ms since the epoch; 0: never"},
                    "description": {"type": "string"},
                    "scope": proto_schema.ref(api.TokenScope.DESCRIPTOR, "in")}, ("user", "role")),
}

_COUNT: Schema = {"type": "integer", "minimum": 0}
_COUNTS: Schema = {"type": "object", "additionalProperties": _COUNT}
_BY_QUEUE: Schema = {"type": "object", "additionalProperties": _COUNTS}
_MINUTES: Schema = {"type": "array", "items": {"type": ["integer", "null"], "minimum": 0}}
_PER_QUEUE: Schema = {"type": "object", "additionalProperties": _MINUTES}
EXTRA["Stats"] = _obj({
    "as_of_ms": REVISION,
    "revision": {**REVISION, "description": "the last revision the gateway's event stream took"},
    "jobs_visible": {"type": "string", "enum": ["none", "all", "own"]},
    "jobs": _obj({"total": _COUNT, "by_state": _COUNTS, "by_queue": _BY_QUEUE},
                 ("total", "by_state", "by_queue")),
    "pending": {**_BY_QUEUE, "description": "pending jobs per queue and reason"},
    "series": _obj({"step_s": _COUNT, "times_ms": {"type": "array", "items": REVISION},
                    "estimated_until_ms": REVISION, "pending": _PER_QUEUE, "running": _PER_QUEUE,
                    "slots_used": _MINUTES, "slots_total": _MINUTES},
                   ("step_s", "times_ms", "estimated_until_ms", "pending", "running")),
    "slots": _obj({"used": _COUNT, "total": _COUNT}, ("used", "total")),
    "hosts": _obj({"by_status": _COUNTS, "grid": {"type": "array", "items": {
        "type": "array", "minItems": 6, "maxItems": 6, "items": {"type": ["string", "boolean", "number"]},
        "description": "name, status, closed (a boolean), slots, used, load"}}}, ("by_status", "grid")),
}, ("as_of_ms", "jobs_visible", "jobs", "pending", "series"))

EXTRA["Event"] = {
    "type": "object", "description": "one server-sent event; `data` is JSON (docs/GATEWAY.md)",
    "properties": {"event": {"type": "string", "enum": [
        "job.created", "job.updated", "job.finished", "job.deleted", "host.updated", "host.deleted",
        "queue.updated", "queue.deleted", "resync", "bookmark"]},
        "id": {"type": "string", "pattern": "^[0-9]+([.][0-9]+)?$"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "retry": {"type": "integer", "minimum": 0}},
}

# Messages the gateway answers with a field more (name -> (the message's schema, what it adds)).
WIDENED: dict[str, tuple[str, dict[str, Schema]]] = {
    "NewKeyMade": ("TokenInfo", {"key": {"type": "string", "description": "the key: shown only this once"}}),
    "AuditRow": ("AuditRecord", {"cluster": {"type": "string", "description": "the cluster it was done on"}}),
}


def _header(name: str, description: str, schema: Schema | None = None) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description,
            "schema": schema or {"type": "string", "maxLength": MAX_TAGS}}


MAX_TAGS = 1024  # conditional.MAX_HEADER
IDEMPOTENCY = _header("Idempotency-Key", "makes a retried submit one submit (the same key with another body "
                                         "is a 409)", {"type": "string", "maxLength": 128})
LAST_EVENT_ID = _header("Last-Event-ID", "resume right after this event id (what EventSource sends; "
                                         "empty: from now)",
                        {"type": "string", "pattern": "^([0-9]{1,19}([.][0-9]{1,9})?)?$"})
IF_MATCH = _header("If-Match", "the job's ETag (from GET /jobs/{job_id}): the write is made only if the "
                               "job has not changed since; else 412")
IF_NONE_MATCH = _header("If-None-Match", "an ETag from an earlier answer: 304 if nothing changed")
ETAG = {"ETag": {"description": "the representation's version (strong)", "schema": {"type": "string"}}}
INDEX = {"X-XCE-Index": {"description": "the revision this answer is as of: give it as `index` to block "
                                        "until something past it changes", "schema": {"type": "string"}}}


@dataclass(frozen=True)
class Operation:
    """What FastAPI cannot tell of one route: its body, its answers, its headers."""

    ok: dict[int, tuple[str, Schema | None]]           # status -> (media type, schema)
    errors: tuple[int, ...] = (400, 401, 403, 404, 429, 503, 504)
    body: Schema | None = None
    example: Any = None                                # of the body (schemathesis starts from it)
    headers: tuple[dict[str, Any], ...] = ()
    answer_headers: dict[str, Any] = field(default_factory=dict)
    open: bool = False                                 # no key needed
    links: dict[str, Any] = field(default_factory=dict)  # of its first 2xx answer (OpenAPI links)


def _job_link(path: str, method: str) -> dict[str, Any]:
    pointer = (PREFIX + path).replace("~", "~0").replace("/", "~1")
    return {"operationRef": f"#/paths/{pointer}/{method}",
            "parameters": {"job_id": "$response.body#/jobs/0/id"}}


JOB_LINKS = {"GetJob": _job_link("/jobs/{job_id}", "get"),
             "ActOnJob": _job_link("/jobs/{job_id}/actions", "post"),
             "ModifyJob": _job_link("/jobs/{job_id}", "patch"),
             "JobOutput": _job_link("/jobs/{job_id}/output", "get")}
WRITE = (400, 401, 403, 404, 409, 413, 415, 429, 503, 504)
OTHER = (501, 502)  # another cluster's: cannot do it there; answered what cannot be read
SPEC_IN = proto_schema.ref(api.JobSpec.DESCRIPTOR, "in")
READ_HEADERS = {**ETAG, **INDEX}

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("post", "/jobs"): Operation(
        {201: (JSON, _ref("Submitted")), 200: (JSON, _ref("SubmitDryRun"))}, WRITE + OTHER,
        body={"anyOf": [SPEC_IN, _ref("JobSpecs")]}, headers=(IDEMPOTENCY,), links=JOB_LINKS,
        example={"command": ["sleep", "60"], "name": "example", "queue": "normal", "hold": True}),
    ("get", "/jobs"): Operation({200: (JSON, _ref("JobList")), 304: ("", None)}, (400, 401, 403, 404, 429,
                                503, 504) + OTHER, headers=(IF_NONE_MATCH,), answer_headers=READ_HEADERS),
    ("get", "/jobs/{job_id}"): Operation({200: (JSON, JOB), 304: ("", None)}, (400, 401, 403, 404, 429, 503,
                                         504) + OTHER, headers=(IF_NONE_MATCH,), answer_headers=READ_HEADERS),
    ("post", "/jobs/{job_id}/actions"): Operation({200: (JSON, {"anyOf": [JOB, DRY_JOB]})},
                                                  WRITE + (412,) + OTHER, body=_ref("Action"),
                                                  example={"action": "release"},
                                                  headers=(IF_MATCH,), answer_headers=ETAG),
    ("patch", "/jobs/{job_id}"): Operation({200: (JSON, {"anyOf": [JOB, DRY_JOB]})}, WRITE + (412,) + OTHER,
                                           body=_ref("Modification"), headers=(IF_MATCH,),
                                           example={"priority": 5},
                                           answer_headers=ETAG),
    ("get", "/jobs/{job_id}/output"): Operation(
        {200: ("text/plain", {"type": "string"})}, (400, 401, 403, 404, 429, 503, 504) + OTHER,
        answer_headers={"X-XCE-Output-Size": {"schema": {"type": "string"}, "description": "the file's size"},
                        "X-XCE-Host": {"schema": {"type": "string"}, "description": "the host read"}}),
    ("get", "/audit"): Operation({200: (JSON, _ref("AuditPage"))}),
    ("get", "/hosts"): Operation({200: (JSON, _out(api.ListHostsResponse)), 304: ("", None)},
                                 (400, 401, 403, 404, 429, 503, 504) + OTHER, headers=(IF_NONE_MATCH,),
                                 answer_headers=READ_HEADERS),
    ("get", "/queues"): Operation({200: (JSON, _out(api.ListQueuesResponse)), 304: ("", None)},
                                  (400, 401, 403, 404, 429, 503, 504) + OTHER, headers=(IF_NONE_MATCH,),
                                  answer_headers=READ_HEADERS),
    ("get", "/status"): Operation({200: (JSON, {"anyOf": [_out(api.StatusResponse), _ref("OtherStatus")]})},
                                  (400, 401, 403, 404, 429, 503, 504) + OTHER),
    ("get", "/clusters"): Operation({200: (JSON, _ref("Clusters"))}),
    ("get", "/history"): Operation({200: (JSON, _ref("History"))},
                                   (400, 401, 403, 404, 429, 503, 504) + OTHER),
    ("get", "/whoami"): Operation({200: (JSON, _out(api.WhoAmIResponse))}),
    ("get", "/events"): Operation({200: ("text/event-stream", _ref("Event"))},
                                  (400, 401, 403, 404, 429, 503, 504, 501), headers=(LAST_EVENT_ID,)),
    ("post", "/apikeys"): Operation({201: (JSON, _ref("NewKeyMade"))}, WRITE, body=_ref("NewKey")),
    ("get", "/apikeys"): Operation({200: (JSON, _ref("Keys"))}),
    ("delete", "/apikeys/{key_id}"): Operation({200: (JSON, _out(api.TokenInfo))}),
    ("get", "/stats"): Operation({200: (JSON, _ref("Stats"))}, (400, 401, 403, 429, 503)),
    ("get", "/healthz"): Operation({200: (JSON, _ref("Health"))}, (), open=True),
    ("get", "/readyz"): Operation({200: (JSON, _ref("Health")), 503: (JSON, _ref("Health"))}, (), open=True),
}


VAGUE = Operation({200: (JSON, {"type": "object"})})  # what an operation not in OPERATIONS is said to answer


def document(generated: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document made the contract."""
    doc = copy.deepcopy(generated)
    components = doc.setdefault("components", {})
    found = {**proto_schema.schemas(_roots("out"), "out"), **proto_schema.schemas(_roots("in"), "in"),
             **EXTRA}
    for name, (base, more) in WIDENED.items():
        found[name] = copy.deepcopy(found[base])
        found[name]["properties"].update(more)
    found["NewKeyMade"]["required"] = ["key"]
    found["Job"]["properties"]["native"] = {  # another cluster's job: its own words beside XCE's
        "type": "object", "description": "another cluster's own words for the job (gateway/clusters/)"}
    components["schemas"] = dict(sorted(found.items()))
    components["securitySchemes"] = {"bearer": {
        "type": "http", "scheme": "bearer", "bearerFormat": "XCE API key",
        "description": "an XCE token: `xce token create` or POST /xce/v1/apikeys"}}
    components.pop("responses", None)
    doc["security"] = [{"bearer": []}]
    for path, methods in doc["paths"].items():
        short = path.removeprefix(PREFIX)
        for method, operation in methods.items():
            _complete(operation, OPERATIONS.get((method, short if path.startswith(PREFIX) else path), VAGUE))
    return doc


def undescribed(generated: dict[str, Any]) -> list[str]:
    """The operations FastAPI found that OPERATIONS does not describe (the test of the document
    refuses any: each would be answered with VAGUE's `{}`)."""
    return [f"{method.upper()} {path}" for path, methods in generated["paths"].items() for method in methods
            if (method, path.removeprefix(PREFIX) if path.startswith(PREFIX) else path) not in OPERATIONS]


def _roots(direction: str) -> list[Any]:
    if direction == "in":
        return [api.JobSpec.DESCRIPTOR, api.TokenScope.DESCRIPTOR]
    return [m.DESCRIPTOR for m in (api.Job, api.ListHostsResponse, api.ListQueuesResponse, api.StatusResponse,
                                   api.WhoAmIResponse, api.AuditRecord, api.TokenInfo)]


def _complete(operation: dict[str, Any], known: Operation) -> None:
    params = [p for p in operation.get("parameters", []) if p.get("in") != "header"]
    operation["parameters"] = params + list(known.headers)
    if not operation["parameters"]:
        del operation["parameters"]
    if known.body is not None:
        body: dict[str, Any] = {"schema": known.body}
        if known.example is not None:
            body["example"] = known.example
        operation["requestBody"] = {"required": True, "content": {JSON: body}}
    if known.open:
        operation["security"] = []
    responses: dict[str, Any] = {}
    for status, (media, schema) in sorted(known.ok.items()):
        answer: dict[str, Any] = {"description": TITLES.get(status, "OK")}
        if schema is not None:
            answer["content"] = {media: {"schema": schema}}
        if known.answer_headers and status < 300:
            answer["headers"] = known.answer_headers
        if known.links and status == (201 if 201 in known.ok else min(known.ok)):
            answer["links"] = known.links
        responses[str(status)] = answer
    for status in sorted(set(known.errors) | {405}):
        answer = {"description": TITLES.get(status, "Error"),
                  "content": {PROBLEM: {"schema": _ref("Problem")}}}
        if status == 401:
            answer["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
        if status in (429, 503):
            answer["headers"] = {"Retry-After": {"schema": {"type": "string"}}}
        if status == 405:
            answer["headers"] = {"Allow": {"schema": {"type": "string"}}}
        responses[str(status)] = answer
    operation["responses"] = responses
