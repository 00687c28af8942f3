"""`xce mcp`: the MCP server through which an agent (Claude Code, any MCP client) operates XCE.

A client of the gateway's REST API that makes every call with its caller's API key: the controllers
authenticate that key, apply its role and scope, and record every write in the audit trail under it
(as relayed by mcp when it is an agent's key: role mcp_readonly or mcp_operator). The server keeps no
state. Tools are `scheduler_`-prefixed; every write has `dry_run`, which shows what would happen and
changes nothing but the trail. Tools report state as it is, plainly.

Each key is shown only the tools it may call (gateway/mcp_access.py, from what GET /whoami says of
it), and a call to a tool it was not shown is refused: a write is first sent as a dry run, so that
the controllers refuse it too and record the attempt in the audit trail, as they record any write a
role denies (and a dry run changes nothing, should they take it). The parameters and results are
declared in gateway/mcp_schema.py, the tools themselves in gateway/mcp_tools.py.

Who the caller is:
- stdio (the default, for a local agent): the process that started the server, with the server's
  own key ($XCE_TOKEN or a token file).
- streamable HTTP (`--http [HOST:]PORT`): whoever sends the request. Every request carries its own
  key (`Authorization: Bearer`, the MCP authorization model); a request without a key the cluster
  takes is answered 401 with `WWW-Authenticate` and calls nothing, and each tool call acts as the
  key of its request (`KeyVerifier`; stateless: no session outlives its request). The key the
  server itself found is never taken over HTTP: it is the stdio caller's. The server binds 127.0.0.1
  unless told otherwise, and another address only with TLS (`--tls-cert`, `--tls-key`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, CallToolResult, InputRequiredResult
from mcp_types import Tool as MCPTool

from gateway import mcp_access
from gateway.http_limits import HttpLimits
from gateway.mcp_access import Caller
from gateway.mcp_client import Gateway
from gateway.mcp_tools import add_tools

INSTRUCTIONS = """XCE is a batch workload manager: jobs wait in queues (PEND) until the scheduler places
them on hosts (RUN), then end DONE (exit 0) or EXIT. Use the scheduler_ tools to see and act on the cluster.
- Start with scheduler_cluster_status; scheduler_list_jobs and scheduler_get_job show jobs;
  scheduler_pending_reasons says why jobs wait.
- Every write (scheduler_submit, scheduler_cancel, scheduler_hold, scheduler_release,
  scheduler_modify) takes dry_run: try it first; it shows what would happen and changes nothing.
- Every action is recorded in the cluster's audit trail under the caller's key, and the key may be
  scoped (queues, users, actions, job and slot limits): a refusal names the scope. Only the tools
  this key may call are listed.
- scheduler_wait_job waits for a job to end; scheduler_analyze_failure explains why it failed;
  scheduler_suggest_resources and scheduler_estimate_wait_time help size and time a submission.
Job ids are numbers (12) or readable ids (cluster-1-20261204120000-12); an array element is 12[3].
- The gateway may serve other clusters too (Slurm, LSF): scheduler_list_clusters names them, with what
  each can do. Every tool takes `cluster` (default: XCE's own); a job of another cluster is also named
  by its qualified id (hpc:17), which its answers carry as readable_id. States, reasons and exit codes
  are XCE's words on every cluster; `native` keeps the cluster's own."""


class Callers:
    """What each key may do, as the gateway's GET /whoami says. A key the gateway takes is remembered
    for `remember_s` (at most `max_remembered` of them, by digest), so neither an HTTP client's
    requests nor its tool lists each cost a round trip; the controllers check every call regardless."""

    def __init__(self, gateway: Gateway, remember_s: float = 10.0, max_remembered: int = 1024) -> None:
        self.gateway = gateway
        self.remember_s = remember_s
        self.max_remembered = max_remembered
        self._taken: OrderedDict[str, tuple[float, Caller]] = OrderedDict()

    async def of(self, key: str) -> Caller | None:
        """The key's holder and rights; None if the gateway does not take the key. Raises
        httpx.HTTPError if the gateway does not answer."""
        key_digest = digest(key)
        now = time.monotonic()
        known = self._taken.get(key_digest)
        if known is not None and now - known[0] < self.remember_s:
            return known[1]
        answer = await self.gateway.http.get("/whoami", headers={"Authorization": f"Bearer {key}"})
        if answer.status_code != 200:
            return None
        caller = Caller.of(answer.json())
        self._taken[key_digest] = (now, caller)
        self._taken.move_to_end(key_digest)
        while len(self._taken) > self.max_remembered:
            self._taken.popitem(last=False)
        return caller


class KeyVerifier:
    """The SDK's TokenVerifier for `--http`: a bearer key is taken if the gateway takes it (GET /whoami
    with it, remembered by `callers`), and is not `refused` (the server's own key)."""

    def __init__(self, callers: Callers, refused: str = "") -> None:
        self.callers = callers
        self.refused = digest(refused) if refused else ""

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token or len(token) > 512 or not (token.isascii() and token.isprintable()):
            return None
        key_digest = digest(token)
        if key_digest == self.refused:
            return None
        try:
            caller = await self.callers.of(token)
        except httpx.HTTPError:
            return None
        if caller is None:
            return None
        return AccessToken(token=token, client_id=f"key-{key_digest[:32]}", subject=caller.name, scopes=[])


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyedServer(MCPServer):
    """An MCPServer that lists each key only the tools it may call, and refuses it the others.

    The SDK asks `list_tools` and `call_tool` within the request (stdio: the server's key; HTTP: the
    key its bearer middleware took), so each answer is the caller's own."""

    def __init__(self, gateway: Gateway, callers: Callers, **settings: Any) -> None:
        super().__init__(**settings)
        self.gateway = gateway
        self.callers = callers

    async def caller(self) -> Caller:
        """The calling key's rights, or ToolError saying why they cannot be known."""
        try:
            caller = await self.callers.of(self.gateway.caller_key())
        except httpx.HTTPError as exc:
            raise ToolError(f"cannot tell what this key may do: the XCE gateway did not answer "
                            f"({type(exc).__name__}): is it running?") from None
        if caller is None:
            raise ToolError("the XCE gateway does not take this key (revoked, expired or mistyped?)")
        return caller

    async def list_tools(self) -> list[MCPTool]:
        try:
            caller = await self.caller()
        except ToolError as exc:  # shown, rather than a list that is not the key's
            raise MCPError(INTERNAL_ERROR, str(exc)) from None
        return [tool for tool in await super().list_tools() if not mcp_access.refusal(tool.name, caller)]

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> CallToolResult | InputRequiredResult:
        if name not in mcp_access.NEEDS:
            return await super().call_tool(name, arguments, context)
        why = mcp_access.refusal(name, await self.caller())
        if not why:
            return await super().call_tool(name, arguments, context)
        said = ""
        if mcp_access.writes(name):  # for the audit trail: the controllers refuse it and record that
            try:
                await super().call_tool(name, {**arguments, "dry_run": True}, context)
            except ToolError as exc:
                said = " The cluster says: " + str(exc).removeprefix(f"Error executing tool {name}: ")
        raise ToolError(f"refused: {why}, so it is not among this key's tools.{said}")


def build(gateway: Gateway, verifier: KeyVerifier | None = None, url: str = "",
          callers: Callers | None = None) -> KeyedServer:
    auth = None if verifier is None else AuthSettings(issuer_url=url or "http://127.0.0.1",  # type: ignore[arg-type]
                                                      resource_server_url=None)
    callers = callers or (verifier.callers if verifier is not None else Callers(gateway))
    server = KeyedServer(gateway, callers, name="xce", title="XCE batch workload manager",
                         instructions=INSTRUCTIONS, version="1", token_verifier=verifier, auth=auth,
                         # each key's own list: no cache may hand it to another key
                         cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")})
    add_tools(server, gateway)
    return server


def run_stdio(gateway_url: str, key: str) -> int:
    build(Gateway(gateway_url, key)).run("stdio")
    return 0


@dataclass(frozen=True)
class HttpOptions:
    listen: str  # [HOST:]PORT
    tls_cert: str = ""
    tls_key: str = ""
    limits: HttpLimits = field(default_factory=HttpLimits)


def http_address(options: HttpOptions) -> tuple[str, int]:
    """Where to listen, or ValueError: 127.0.0.1 unless a host is given; an address that is not
    loopback only with TLS (keys travel in every request)."""
    host, _, port = options.listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http wants [HOST:]PORT, not {options.listen!r}")
    if bool(options.tls_cert) != bool(options.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    if not options.tls_cert and not _loopback(host):
        raise ValueError(f"{host} is not a loopback address: callers' keys would cross the network in clear; "
                         "give --tls-cert and --tls-key, or listen on 127.0.0.1")
    return host, int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_http(gateway_url: str, options: HttpOptions, refused_key: str = "") -> int:
    """Serve streamable HTTP at `options.listen`, each request acting as the key it carries."""
    from gateway.http_guard import serve
    from xce import daemon_logging

    try:
        host, port = http_address(options)
        options.limits.check()
    except ValueError as exc:
        print(f"xce mcp: {exc}", file=sys.stderr)
        return 2
    daemon_logging.setup("mcp")
    gateway = Gateway(gateway_url)
    scheme = "https" if options.tls_cert else "http"
    server = build(gateway, KeyVerifier(Callers(gateway), refused_key), f"{scheme}://{host}:{port}")
    # Stateless: each request stands alone, acting as its own key; no session outlives it, so none
    # is another key's to take over, and no caller can pile sessions up.
    app = server.streamable_http_app(host=host, stateless_http=True, max_request_body_size=1 << 20)
    tls = {"ssl_certfile": options.tls_cert, "ssl_keyfile": options.tls_key} if options.tls_cert else {}
    serve(app, host, port, options.limits, log_level="warning", access_log=False, server_header=False,
          log_config=None, **tls)
    return 0
