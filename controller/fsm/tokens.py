"""Bearer tokens: created and revoked through the log, stored by their SHA-256 only.

The client makes the token (256 random bits) and sends only its hash, so no
replica, log entry or backup ever holds a usable token. The tokens table is
written directly, not through the Applier's change list: token hashes never
go out on the Sync stream.
"""

from __future__ import annotations

import re

from controller.fsm.applier import Applier
from controller.fsm.requests import guarded
from controller.tables import Tables
from xce.errors import ServiceError, invalid
from xce.host_spec import MAX_STRING
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
ID_LENGTH = 16
MAX_NAME = 64
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$")


def token_id(sha256: str) -> str:
    return sha256[:ID_LENGTH]


def check_create(request: api.CreateTokenRequest) -> None:
    if not SHA256_HEX.match(request.sha256):
        raise invalid("sha256 must be 64 lowercase hex digits (the token's SHA-256)")
    if not request.user or len(request.user) > MAX_NAME or not NAME.match(request.user):
        raise invalid(f"user must be a name of at most {MAX_NAME} letters, digits and _.@-")
    if not request.role or len(request.role) > MAX_NAME or not NAME.match(request.role):
        raise invalid("role must be a role name")
    if request.expires_ms < 0:
        raise invalid("expires_ms must be >= 0 (0: never)")
    if len(request.description) > MAX_STRING:
        raise invalid(f"description longer than {MAX_STRING} characters")


def read_token(tables: Tables, sha256: str) -> api.TokenInfo | None:
    raw = tables.get("tokens", sha256.encode())
    return None if raw is None else api.TokenInfo.FromString(raw)


def find_by_id(tables: Tables, token_id_: str) -> tuple[str, api.TokenInfo] | None:
    for key, raw in tables.scan("tokens"):
        if token_id(key.decode()) == token_id_:
            return key.decode(), api.TokenInfo.FromString(raw)
    return None


def list_tokens(tables: Tables) -> list[api.TokenInfo]:
    return [api.TokenInfo.FromString(raw) for _, raw in tables.scan("tokens")]


def apply_token(applier: Applier) -> list[log.Result]:
    entry = applier.entry.token

    def body() -> log.Result:
        if entry.revoke:
            found = find_by_id(applier.tables, entry.revoke_id)
            if found is None:
                raise ServiceError(log.NOT_FOUND, f"no token {entry.revoke_id!r}")
            applier.tables.delete("tokens", found[0].encode())
            return log.Result(code=log.OK, message=found[0])
        check_create(api.CreateTokenRequest(sha256=entry.sha256, user=entry.info.user, role=entry.info.role,
                                            expires_ms=entry.info.expires_ms,
                                            description=entry.info.description))
        if applier.tables.get("tokens", entry.sha256.encode()) is not None:
            raise ServiceError(log.ALREADY_EXISTS, "a token with this hash exists")
        info = api.TokenInfo()
        info.CopyFrom(entry.info)
        info.id = token_id(entry.sha256)
        info.created_ms = applier.stamp_ms
        applier.tables.put("tokens", entry.sha256.encode(), info.SerializeToString(deterministic=True))
        return log.Result(code=log.OK, message=entry.sha256)

    return [guarded(entry.request_id, applier, body)]
