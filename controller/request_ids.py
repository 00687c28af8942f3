"""Request ids are the caller's: one caller's id never finds another caller's request.

Theory of operation. A client names each write with a request id (`xce submit` draws one, REST's
`Idempotency-Key` is one) so that a retry finds the stored result instead of doing the write twice
(fsm/requests.guarded stores it under the id). Ids are chosen by clients, so they are not secret
and not unique across callers: stored as sent, a key another user used first would answer the
second user's submit with the first user's job, and create none. So the leader stores each under
the caller's own key, before it proposes anything:

    digest(caller name) 0x1f request id 0x1f digest(the request without its id)

A retry by the same caller with the same request finds its result; the same caller with another
request under the same id is refused (ALREADY_EXISTS: the gateway's 409); another caller's use of
the id is a different key and never meets it. Apply stores whatever key the entry carries, so this
changes no entry format. What a job shows of its request id is the caller's own id, to its owner
only (`shown`).

Pure: no tables, only keys.
"""

from __future__ import annotations

import hashlib
from typing import Any

MAX_REQUEST_ID_BYTES = 256  # what apply stores (fsm.records.MAX_REQUEST_ID_BYTES; a test holds them equal)
SEPARATOR = "\x1f"
NAME_CHARS = 16  # hex digits of the caller's digest
BODY_CHARS = 16  # of the request's
MAX_CLIENT_ID_BYTES = MAX_REQUEST_ID_BYTES - NAME_CHARS - BODY_CHARS - 2 * len(SEPARATOR)


def problem(request_id: str) -> str:
    """Why a client's request id cannot be taken ('' if it can)."""
    if len(request_id.encode()) > MAX_CLIENT_ID_BYTES:
        return f"request id longer than {MAX_CLIENT_ID_BYTES} bytes"
    if not request_id.isprintable():
        return "a request id is printable text (no control characters)"
    return ""


def body_digest(request: Any) -> str:
    """The request as it would be proposed, without its id and its audit note (a dry run and the
    write after it are the same request)."""
    bare = type(request)()
    bare.CopyFrom(request)
    for name in ("request_id", "audit"):
        if name in bare.DESCRIPTOR.fields_by_name:
            bare.ClearField(name)
    return hashlib.sha256(bare.SerializeToString(deterministic=True)).hexdigest()[:BODY_CHARS]


def prefix(caller: str, request_id: str) -> str:
    """What every key of this caller's id starts with, whatever the request."""
    name = hashlib.sha256(caller.encode()).hexdigest()[:NAME_CHARS]
    return f"{name}{SEPARATOR}{request_id}{SEPARATOR}"


def owned(caller: str, request_id: str, request: Any) -> str:
    return prefix(caller, request_id) + body_digest(request)


def shown(stored: str) -> str:
    """The client's own id from a stored key (an id stored before keys were the caller's: as is)."""
    parts = stored.split(SEPARATOR)
    return parts[1] if len(parts) == 3 and len(parts[0]) == NAME_CHARS else stored
