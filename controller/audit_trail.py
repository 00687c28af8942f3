"""What the leader does for the audit trail and for scoped keys (G6, G7).

Which writes are audited: from entry format 27, every write a person makes (the job writes, force-
runs, queues, hosts, tokens, members, job groups, reservations), whatever client sent it; before it,
the writes that asked for it (the gateway sets a note on every write) and every write of a scoped
key. An audited request gets its note filled in here before it is checked: its action and
parameters, how it came (`via_of`) and the caller's key. Then it is proposed as usual, and apply
writes its CONFIRMED row (controller/fsm/audit.py); or it is a dry run, and the leader proposes a
DRY_RUN row with what would happen in words instead; or the leader denies it (permission, scope:
PERMISSION_DENIED), and proposes a REFUSED row with the reason before it answers. Bad input
(INVALID_ARGUMENT, NOT_FOUND, ...) changes nothing, the trail included.

What a row says is proven, but for one word: the principal and the key are the credential's;
`mcp` is an agent's key (its role), `rest` the gateway's own key beside the caller's; `cli` is
the client's claim (any client may make it), and so decides nothing; `grpc` is any other client.

Pure but for `unfinished`, which reads the tables it is given.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from controller import authz
from controller.authz import Principal
from controller.fsm import arrays, audit, job_index
from controller.fsm.records import FINISHED, read_job
from controller.fsm.versions import KEYED_AUDIT_FORMAT, ZERO_INDEX_FORMAT
from controller.tables import Tables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

AUDITED = ("SubmitJobs", "ControlJob", "ModifyJob")  # the job writes: the note in the request
# The other writes of a person, audited from entry format 27 with the note in their entry.
NOTED = frozenset({"RunJob", "CreateQueue", "UpdateQueue", "CreateToken", "RevokeToken", "AddMember",
                   "RemoveMember", "ControlHost", "PutJobGroup", "PutReservation"})
AGENT_ROLE_PREFIX = "mcp_"  # an agent's key (mcp_readonly, mcp_operator, a [roles.mcp_...] of the file)
ROUTES = ("rest", "cli")  # the routes authn may find besides grpc (controller/authn.py)


def via_of(caller: Principal) -> str:
    """How the request came, as its row says, never from what the request names (any client may
    name anything): `mcp` for an agent's key, whatever route it took (its role is proven); else the
    route authn found: `rest` (proven by the gateway's own key), `cli` (the client's claim), `grpc`."""
    if caller.role.startswith(AGENT_ROLE_PREFIX):
        return "mcp"
    return caller.route if caller.route in ROUTES else "grpc"


def action_of(method: str, request: Any) -> str:
    if method == "ControlJob":
        return api.ControlAction.Name(request.action).lower() if request.action in \
            api.ControlAction.values() else "control"
    return {"SubmitJobs": "submit", "ModifyJob": "modify", "RunJob": "run"}.get(method, method.lower())


def params_of(request: Any) -> str:
    """The request as JSON, without its request id and audit; cut at audit.MAX_PARAMS characters."""
    shown = type(request)()
    shown.CopyFrom(request)
    for name in ("request_id", "audit", "sha256"):
        if name in shown.DESCRIPTOR.fields_by_name:
            shown.ClearField(name)
    for spec in getattr(shown, "jobs", ()):  # environment values stay out of the trail (keys kept)
        authz.blank_env(spec)
    text = json_format.MessageToJson(shown, preserving_proto_field_name=True, sort_keys=True, indent=None)
    if len(text) > audit.MAX_PARAMS:
        text = text[:audit.MAX_PARAMS - 40] + f"... ({len(text)} characters in all)"
    return text


def prepare(method: str, request: Any, caller: Principal, entry_format: int) -> api.AuditRequest | None:
    """The request's audit note filled in (a job write's is its request's own `audit`, which carries
    it to apply); None if it is not audited (the module's docstring: which are). Every write of a
    scoped key is (one outside job work only to record its refusal). The key is named from entry
    format 27; before, what a client put there is cleared (apply would not copy it)."""
    every = entry_format >= KEYED_AUDIT_FORMAT
    if method in AUDITED:
        if not (every or request.HasField("audit") or caller.scope is not None):
            return None
        note: api.AuditRequest = request.audit
    elif (every and method in NOTED) or (caller.scope is not None and method != "GetJobOutput"):
        note = api.AuditRequest()
    else:
        return None
    note.via = via_of(caller)
    note.action = action_of(method, request)
    note.params = params_of(request)
    note.key_id = caller.key_id if every else ""
    note.key_description = caller.key_description[:audit.MAX_KEY_DESCRIPTION] if every else ""
    return note


def entry(note: api.AuditRequest, caller: Principal, outcome: api.AuditOutcome, words: str) -> log.Entry:
    """The `audit` entry of a dry run or a refusal."""
    record = api.AuditRecord(via=note.via, action=note.action, params=note.params, outcome=outcome,
                             result=words[:1000], key_id=note.key_id, key_description=note.key_description)
    return log.Entry(audit=log.AuditEntry(record=record), by=caller.record())


def unfinished(tables: Tables, user: str, enough: int = 0) -> tuple[int, int]:
    """(jobs, slots) of `user`'s unfinished jobs; an array counts its unfinished elements. Stops
    counting jobs past `enough` (0: counts all)."""
    jobs = slots = 0
    for job_id in job_index.ids(tables, job_index.prefix("user", user)):
        job = read_job(tables, job_id)
        if job is None or job.array_id:  # an element is counted by its array's record
            continue
        if arrays.is_array(job):
            count = sum(n for state, n in enumerate(job.array.counts) if state not in FINISHED)
        else:
            count = 0 if job.state in FINISHED else 1
        jobs += count
        slots += count * max(1, job.spec.slots)
        if enough and jobs > enough:
            break
    return jobs, slots


def would_submit(specs: list[api.JobSpec]) -> str:
    parts = []
    for spec in specs:
        size = arrays.check_submit(spec, 1 << 62, ZERO_INDEX_FORMAT) if spec.HasField("array") else 0
        what = f"an array {spec.name or '(no name)'} of {size} elements" if size else \
            f"job {spec.name or ' '.join(spec.command)[:60]!r}"
        parts.append(f"{what} in queue {spec.queue}, {spec.slots} slot(s) each, pending until scheduled")
    return "would submit " + "; ".join(parts)


def would_control(job: api.Job, action: str, to: api.JobState | None, kill: bool) -> str:
    if to is None:  # an array: apply decides for each element
        return f"would {action} the elements of array {job.id} it applies to (now {_counts(job)})"
    words = f"would {action} job {job.id}: {api.JobState.Name(job.state)} -> {api.JobState.Name(to)}"
    if kill:
        words += " (its worker is told to kill it; it ends as its processes do)"
    return words


def would_modify(job: api.Job, request: api.ModifyJobRequest) -> str:
    changes = []
    for name in ("priority", "queue", "resource_req"):
        if request.HasField(name):
            changes.append(f"{name} {getattr(job.spec, name)!r} -> {getattr(request, name)!r}")
    return f"would modify job {job.id}: " + (", ".join(changes) or "nothing")


def _counts(record: api.Job) -> str:
    return ", ".join(f"{api.JobState.Name(s)} {n}" for s, n in enumerate(record.array.counts)
                     if n)
