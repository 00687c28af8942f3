"""Request bodies and query parameters made into the service's requests, or refused with the reason.

A job spec is the JobSpec message in protobuf's JSON mapping (field names as in proto/xce/v1/api.proto:
"command", "slots", "resource_req", ...). As with `bsub -J`, a name may carry the indices of a job
array: "sweep[1-1000]%50". Anything unknown, mistyped or out of range is refused here with a message
that names it; the controllers check the rest (queues, requirements, limits) as they do for the CLI.
Pure: bytes and dicts in, messages out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from gateway import proto_schema
from gateway.problems import Problem
from xce.rules import array_spec
from xce.v1 import api_pb2 as api

MAX_BODY = 1 << 20          # bytes: a gRPC request may be no larger (client/grpc_transport.py)
MAX_JOBS = 10_000           # jobs in one submit: the controllers' max_jobs_per_request default
ACTIONS: dict[str, api.ControlAction] = {"kill": api.KILL, "stop": api.STOP, "resume": api.RESUME,
                                         "hold": api.HOLD, "release": api.RELEASE, "requeue": api.REQUEUE,
                                         "checkpoint": api.CHECKPOINT}
MODIFIABLE = ("priority", "queue", "resource_req")
MAX_JSON_DEPTH = 32         # arrays and objects inside one another: a job spec needs four
INT32 = (-(1 << 31), (1 << 31) - 1)


def json_body(raw: bytes) -> Any:
    if len(raw) > MAX_BODY:
        raise Problem(413, f"the body has {len(raw)} bytes; at most {MAX_BODY}")
    if not raw.strip():
        raise Problem(400, "the body is empty: send a JSON object")
    if nests_deeper(raw, MAX_JSON_DEPTH):
        raise Problem(400, f"the body nests arrays and objects more than {MAX_JSON_DEPTH} deep")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise Problem(400, f"the body is not JSON: {str(exc)[:200]}") from None


def nests_deeper(raw: bytes, most: int) -> bool:
    """Whether arrays and objects nest more than `most` deep in `raw`, brackets inside strings aside;
    read before the parser (whose recursion a deep body would exhaust). Malformed text is the
    parser's to refuse."""
    if raw.count(b"[") + raw.count(b"{") <= most:
        return False  # too few to nest deeper (the common case: no scan)
    depth = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", raw)):
        depth += 1 if bracket in (b"[", b"{") else -1
        if depth > most:
            return True
    return False


_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Problem(400, f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def job_spec(value: Any, where: str = "the job") -> api.JobSpec:
    """One JobSpec from its JSON; a name like "sweep[1-100]%5" makes it an array (as bsub -J)."""
    fields = dict(_object(value, where))
    name = fields.get("name")
    array = None
    if isinstance(name, str) and ("[" in name or "]" in name) and "array" not in fields:
        try:
            fields["name"], array = array_spec.parse_name(name)
        except array_spec.ArraySpecError as exc:
            raise Problem(400, f"{where}: {exc}") from None
    proto_schema.strict_names(fields, api.JobSpec.DESCRIPTOR, where)
    spec = api.JobSpec()
    try:
        json_format.ParseDict(fields, spec)
    except (json_format.ParseError, ValueError, TypeError, OverflowError) as exc:
        raise Problem(400, f"{where}: {str(exc)[:300]}") from None
    if array is not None:
        spec.array.CopyFrom(array)
    if not spec.command:
        raise Problem(400, f"{where}: \"command\" (the argv, a list of strings) is required")
    return spec


def submit(value: Any) -> list[api.JobSpec]:
    """A body of one job spec, or {"jobs": [spec, ...]}."""
    body = _object(value, "the body")
    if "jobs" not in body:
        return [job_spec(body)]
    if set(body) != {"jobs"}:
        raise Problem(400, f"with \"jobs\", the body has no other keys (found: {', '.join(sorted(body))})")
    jobs = body["jobs"]
    if not isinstance(jobs, list) or not jobs:
        raise Problem(400, "\"jobs\" must be a non-empty list of job specs")
    if len(jobs) > MAX_JOBS:
        raise Problem(400, f"{len(jobs)} jobs in one request; at most {MAX_JOBS}")
    return [job_spec(job, f"jobs[{i}]") for i, job in enumerate(jobs)]


def action(value: Any) -> api.ControlAction:
    body = _object(value, "the body")
    name = body.get("action")
    extra = sorted(set(body) - {"action"})
    if extra:
        raise Problem(400, f"unknown keys {', '.join(extra)}: the body is {{\"action\": NAME}}")
    if not isinstance(name, str) or name.lower() not in ACTIONS:
        raise Problem(400, f"unknown action {str(name)[:40]!r}: one of {', '.join(ACTIONS)}")
    return ACTIONS[name.lower()]


def modification(value: Any) -> dict[str, Any]:
    """{"priority": int, "queue": str, "resource_req": str}, any of them, at least one."""
    body = _object(value, "the body")
    unknown = sorted(set(body) - set(MODIFIABLE))
    if unknown:
        raise Problem(400, f"cannot modify {', '.join(unknown)}: only {', '.join(MODIFIABLE)}")
    if not body:
        raise Problem(400, f"nothing to modify: give any of {', '.join(MODIFIABLE)}")
    priority = body.get("priority")
    if "priority" in body and (not isinstance(priority, int) or isinstance(priority, bool)
                               or not INT32[0] <= priority <= INT32[1]):
        raise Problem(400, f"priority must be a 32-bit integer, not {str(priority)[:40]!r}")
    for key in ("queue", "resource_req"):
        if key in body and not isinstance(body[key], str):
            raise Problem(400, f"{key} must be a string")
    return body


def new_key(value: Any) -> dict[str, Any]:
    """{"user": str, "role": str, "expires_ms": int, "description": str}: user and role required."""
    body = _object(value, "the body")
    known = {"user", "role", "expires_ms", "description", "scope"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise Problem(400, f"unknown keys {', '.join(unknown)}: known are {', '.join(sorted(known))}")
    for key in ("user", "role"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise Problem(400, f"\"{key}\" is required (a string)")
    expires = body.get("expires_ms", 0)
    if not isinstance(expires, int) or isinstance(expires, bool) or not 0 <= expires < 1 << 63:
        raise Problem(400, "expires_ms must be a non-negative integer (ms since the epoch; 0: never)")
    if not isinstance(body.get("description", ""), str):
        raise Problem(400, "description must be a string")
    if "scope" in body:  # {"queues": [...], "users": [...], "actions": [...], "max_jobs": N, "max_slots": N}
        scope = api.TokenScope()
        proto_schema.strict_names(body["scope"], api.TokenScope.DESCRIPTOR, "scope")
        try:
            json_format.ParseDict(_object(body["scope"], "scope"), scope)
        except (json_format.ParseError, ValueError, TypeError, OverflowError) as exc:
            raise Problem(400, f"scope: {str(exc)[:300]}") from None
        body = {**body, "scope": scope}
    return body


def page_size(value: int | None) -> int:
    if value is None:
        return 0
    if not 0 <= value <= 5000:
        raise Problem(400, f"page_size must be between 0 and 5000, not {value}")
    return value


def history(query: Mapping[str, Any]) -> api.HistoryRequest:
    request = api.HistoryRequest(user=query.get("user") or "", queue=query.get("queue") or "",
                                 page_size=page_size(query.get("page_size")),
                                 page_token=query.get("page_token") or "", stale=bool(query.get("stale")))
    for state in query.get("state") or ():
        if state not in ("DONE", "EXIT"):
            raise Problem(400, f"state must be DONE or EXIT, not {state[:20]!r}")
        request.states.append(api.DONE if state == "DONE" else api.EXIT)
    for key in ("since_ms", "until_ms"):
        value = query.get(key)
        if value is not None:
            if not 0 <= value < 1 << 63:
                raise Problem(400, f"{key} must be a non-negative integer")
            setattr(request, key, value)
    if query.get("exit_code") is not None:
        if not INT32[0] <= query["exit_code"] <= INT32[1]:
            raise Problem(400, "exit_code must be a 32-bit integer")
        request.exit_code = query["exit_code"]
    return request
