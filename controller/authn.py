"""Who is calling: the proven principal of every request a replica serves.

Theory of operation. The TLS layer (mutual, against the cluster CA) has
already verified the peer's certificate when a call arrives. A certificate
of role worker, scheduler or replica names the caller (xce/pki.py). A
person shows a bearer token, looked up by its SHA-256 among the tokens in
the cluster file (`[[auth.tokens]]`, for bootstrap) and the replicated
tokens table, or a MUNGE credential, decoded by the local munged (`unmunge`),
which gives the uid and gid of the process that made it. Nothing else is
believed: not a user name in a request, not $USER.

How a person's request came (`Principal.route`, for the audit trail only):
`rest` when the gateway proves itself with its own key (role gateway) in
`x-xce-relay` beside the caller's; else `cli` when the client says it is the
command line (`x-xce-client: cli`: a claim, which any client can make and
which decides nothing); else `grpc`. An agent's key is recorded as mcp
whatever the route (controller/audit_trail.py).

A driver (it reads LMDB, the clock, the password and group databases, and
runs unmunge); the decisions on what a principal may do are authz.py's.
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
from collections import OrderedDict
from collections.abc import Callable, Mapping

import grpc

from client.credentials import AUTH_METADATA, CLIENT_METADATA, MUNGE_METADATA, RELAY_METADATA, token_hash
from controller.authz import Principal, StaticToken
from controller.fsm import tokens
from xce import pki
from xce.clock import Clock
from xce.errors import ServiceError
from xce.v1 import log_pb2 as log

CACHE_SIZE = 4096
GROUPS_TTL_S = 60.0
MUNGE_TIMEOUT_S = 5.0
MAX_CREDENTIAL = 4096  # bytes; a munge -n credential is about 150
RELAY_ROLE = "gateway"  # the role of a key that proves a request came through the gateway
STATIC_KEY = "a token of the cluster file ([[auth.tokens]])"  # a bootstrap token's description


class Unauthenticated(ServiceError):
    def __init__(self, message: str) -> None:
        super().__init__(log.UNAUTHENTICATED, message)


class Authenticator:
    def __init__(self, store: object, clock: Clock, static_tokens: Mapping[str, StaticToken],
                 munge_roles: Mapping[str, str], munge: bool, tls: bool, munge_socket: str = "",
                 replica_token: str = "",
                 not_authoritative: Callable[[], ServiceError | None] = lambda: None) -> None:
        """`not_authoritative`: None when this replica serves as the leader (its tokens table holds
        every committed token); else the refusal to answer an unknown token with (the leader's
        address, or UNAVAILABLE while there is none)."""
        self._store = store
        self._clock = clock
        self._not_authoritative = not_authoritative
        self._unmunge_slots = asyncio.Semaphore(8)  # a flood of credentials must not fork without bound
        self._static = dict(static_tokens)
        if replica_token:  # without TLS, replicas prove themselves to each other with this
            self._static[token_hash(replica_token)] = StaticToken("replica", "replica")
        self._munge_roles = dict(munge_roles)
        self._munge = munge
        self._munge_socket = munge_socket
        self._tls = tls
        self._certificates: OrderedDict[bytes, pki.Identity] = OrderedDict()
        self._groups: dict[str, tuple[frozenset[str], float]] = {}

    async def principal(self, context: grpc.aio.ServicerContext) -> Principal:
        """The caller, or Unauthenticated naming what is missing or wrong."""
        if self._tls:
            found = self._from_certificate(context)
            if found is not None:
                return found
        metadata = {key: value for key, value in (context.invocation_metadata() or ())}
        header = metadata.get(AUTH_METADATA)
        if isinstance(header, str) and header:
            return self._from_token(header, self._route(metadata))
        credential = metadata.get(MUNGE_METADATA)
        if isinstance(credential, str) and credential:
            return await self._from_munge(credential, self._route(metadata))
        raise Unauthenticated("no credential: give a token ($XCE_TOKEN, or a 0600 file ~/.config/xce/token)"
                              + (" or a MUNGE credential" if self._munge else ""))

    # ------------------------------------------------------------ certificates

    def _from_certificate(self, context: grpc.aio.ServicerContext) -> Principal | None:
        pems = context.auth_context().get("x509_pem_cert") or []
        if not pems:
            return None
        pem = pems[0]
        identity = self._certificates.get(pem)
        if identity is None:
            identity = pki.identity(pem)
            self._certificates[pem] = identity
            if len(self._certificates) > CACHE_SIZE:
                self._certificates.popitem(last=False)
        if identity.role in ("worker", "scheduler", "replica") and identity.name:
            return Principal(identity.name, identity.role, via="certificate")
        return None  # a client certificate admits the connection; the person proves who they are

    # ------------------------------------------------------------ tokens

    def _from_token(self, header: str, route: str = "grpc") -> Principal:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("the authorization header must be 'Bearer <token>'")
        digest = token_hash(token.strip())
        static = self._static.get(digest)
        if static is not None:
            return Principal(static.user, static.role, "token", self.groups(static.user),
                             key_id=tokens.token_id(digest), key_description=STATIC_KEY, route=route)
        with self._store.read() as tables:  # type: ignore[attr-defined]
            info = tokens.read_token(tables, digest)
        if info is None:
            refusal = self._not_authoritative()
            if refusal is not None:  # a token created a moment ago may not be applied here yet
                raise ServiceError(refusal.code, f"this replica does not know the token (yet): "
                                   f"{refusal.message}", refusal.leader)
            raise Unauthenticated("unknown or revoked token")
        if info.expires_ms and info.expires_ms <= self._clock.now_ms():
            raise Unauthenticated(f"token {info.id} expired")
        return Principal(info.user, info.role, "token", self.groups(info.user),
                         scope=info.scope if info.HasField("scope") else None, key_id=info.id,
                         key_description=info.description, route=route)

    def _route(self, metadata: Mapping[str, object]) -> str:
        """How the request came (the module's docstring): proven for rest, claimed for cli."""
        relay = metadata.get(RELAY_METADATA)
        if isinstance(relay, str) and relay and self._is_relay(relay):
            return "rest"
        return "cli" if metadata.get(CLIENT_METADATA) == "cli" else "grpc"

    def _is_relay(self, header: str) -> bool:
        try:
            relay = self._from_token(header)
        except ServiceError:  # a revoked or unknown key (or one not applied here yet) proves nothing
            return False
        return relay.role == RELAY_ROLE

    # ------------------------------------------------------------ MUNGE

    async def _from_munge(self, credential: str, route: str = "grpc") -> Principal:
        if not self._munge:
            raise Unauthenticated("MUNGE is not enabled on this cluster ([auth] munge = true)")
        async with self._unmunge_slots:
            fields = await _unmunge(credential, self._munge_socket)
        if fields.get("STATUS", "").split(" ")[0] != "Success":
            raise Unauthenticated(f"MUNGE credential refused: {fields.get('STATUS', 'no status')}")
        try:
            uid = int(fields["UID"].rsplit("(", 1)[1].rstrip(")"))
        except (KeyError, IndexError, ValueError):
            raise Unauthenticated("MUNGE credential without a uid") from None
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            raise Unauthenticated(f"uid {uid} has no account on this controller") from None
        # No cache: munged refuses a credential decoded twice (a replay); the client makes a new one
        # for every attempt of a call.
        return Principal(name, self._munge_roles.get(name, "user"), "munge", self.groups(name), route=route)

    # ------------------------------------------------------------ groups

    def groups(self, user: str) -> frozenset[str]:
        """The user's groups on this host (for queue USERS lists with @group); empty if unknown here."""
        now = self._clock.monotonic_s()
        cached = self._groups.get(user)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            entry = pwd.getpwnam(user)
            gids = os.getgrouplist(user, entry.pw_gid)
        except (KeyError, OSError):
            gids = []
        names = set()
        for gid in gids:
            try:
                names.add(grp.getgrgid(gid).gr_name)
            except KeyError:
                continue
        result = frozenset(names)
        self._groups[user] = (result, now + GROUPS_TTL_S)
        return result


async def _unmunge(credential: str, socket: str) -> dict[str, str]:
    """The credential's metadata as munged decoded it. The payload is the sender's own bytes: it
    goes to /dev/null, so nothing the sender wrote can pass for metadata (a payload of
    "UID: root (0)" would otherwise read like the real line); and it must be empty, as `munge -n`
    makes it."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "unmunge", *(["-S", socket] if socket else []), "--output=/dev/null",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise Unauthenticated(f"cannot run unmunge: {exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(credential.encode()[:MAX_CREDENTIAL]),
                                          MUNGE_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        raise Unauthenticated("unmunge timed out") from None
    fields: dict[str, str] = {}
    for line in out.decode(errors="replace").splitlines():
        if not line.strip():
            break  # the metadata is one block
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or key in fields:
            raise Unauthenticated("MUNGE credential refused: unexpected unmunge output")
        fields[key] = value.strip()
    if proc.returncode != 0:
        fields["STATUS"] = fields.get("STATUS") or err.decode(errors="replace").strip() \
            or f"unmunge exited {proc.returncode}"
    elif fields.get("LENGTH", "0") != "0":
        raise Unauthenticated("MUNGE credential refused: it carries a payload (make it with munge -n)")
    return fields
