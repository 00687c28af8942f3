"""`xce mcp`: the MCP server through which an agent (Claude Code, any MCP client) operates XCE.

A client of the gateway's REST API that makes every call with its caller's API key: the controllers
authenticate that key, apply its role and scope, and record every write in the audit trail under it
(as relayed by mcp when it is an agent's key: role mcp_readonly or mcp_operator). The server keeps no
state. Tools are `scheduler_`-prefixed; every write has `dry_run`, which shows what would happen and
changes nothing but the trail. Tools report state as it is, plainly.

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

import asyncio
import hashlib
import ipaddress
import sys
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from gateway import agent_advice
from gateway.http_limits import HttpLimits

PREFIX = "/xce/v1"
MAX_LISTED = 20_000     # jobs read for a status or an estimate (the rest is said to be left out)
POLL_S = 1.0            # scheduler_wait_job asks this often

INSTRUCTIONS = """XCE is a batch workload manager: jobs wait in queues (PEND) until the scheduler places
them on hosts (RUN), then end DONE (exit 0) or EXIT. Use the scheduler_ tools to see and act on the cluster.
- Start with scheduler_cluster_status; scheduler_list_jobs and scheduler_get_job show jobs;
  scheduler_pending_reasons says why jobs wait.
- Every write (scheduler_submit, scheduler_cancel, scheduler_hold, scheduler_release,
  scheduler_modify) takes dry_run: try it first; it shows what would happen and changes nothing.
- Every action is recorded in the cluster's audit trail under the caller's key, and the key may be
  scoped (queues, users, actions, job and slot limits): a refusal names the scope.
- scheduler_wait_job waits for a job to end; scheduler_analyze_failure explains why it failed;
  scheduler_suggest_resources and scheduler_estimate_wait_time help size and time a submission.
Job ids are numbers (12) or readable ids (cluster-1-20261204120000-12); an array element is 12[3].
- The gateway may serve other clusters too (Slurm, LSF): scheduler_list_clusters names them, with what
  each can do. Every tool takes `cluster` (default: XCE's own); a job of another cluster is also named
  by its qualified id (hpc:17), which its answers carry as readable_id. States, reasons and exit codes
  are XCE's words on every cluster; `native` keeps the cluster's own."""


class Gateway:
    """The gateway's REST API with the caller's key; a refusal becomes a ToolError with its detail.
    `key`: the stdio caller's (the server's own); without it, each call takes the key of the HTTP
    request it serves (`get_access_token`: set by the SDK's bearer middleware from KeyVerifier)."""

    def __init__(self, url: str, key: str = "", timeout_s: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.key = key
        self.http = httpx.AsyncClient(base_url=url.rstrip("/") + PREFIX, timeout=timeout_s,
                                      transport=transport)

    def caller_key(self) -> str:
        if self.key:
            return self.key
        token = get_access_token()
        if token is None:  # the bearer middleware lets no request through without one
            raise ToolError("this request carries no key")
        return token.token

    async def get(self, path: str, cluster: str = "", **params: Any) -> Any:
        if cluster:
            params["cluster"] = cluster
        return self._answer(await self._send("GET", path, params=params))

    async def send(self, method: str, path: str, body: Any, dry_run: bool = False, cluster: str = "") -> Any:
        params = {"dry_run": "true"} if dry_run else {}
        if cluster:
            params["cluster"] = cluster
        return self._answer(await self._send(method, path, json=body, params=params))

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.caller_key()}"}
        try:
            return await self.http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise ToolError(f"the XCE gateway did not answer ({type(exc).__name__}): is it running?"
                            ) from None

    @staticmethod
    def _answer(answer: httpx.Response) -> Any:
        if answer.status_code < 400:
            return answer.json()
        try:
            problem = answer.json()
            detail = f"{problem.get('title', answer.status_code)}: {problem.get('detail', '')}"
        except ValueError:
            detail = f"HTTP {answer.status_code}"
        raise ToolError(detail)

    async def output(self, job_id: str, stream: str, tail_bytes: int, cluster: str = "") -> dict[str, Any]:
        params: dict[str, Any] = {"stream": stream, "tail": tail_bytes}
        if cluster:
            params["cluster"] = cluster
        answer = await self._send("GET", f"/jobs/{quoted(job_id)}/output", params=params)
        if answer.status_code >= 400:
            self._answer(answer)
        size = agent_advice.number(answer.headers.get("x-xce-output-size"))
        return {"job": job_id, "stream": stream, "host": answer.headers.get("x-xce-host", ""), "size": size,
                "text": answer.content.decode(errors="replace"), "truncated": size > len(answer.content)}

    async def all_jobs(self, filters: Sequence[str] = (),
                       cluster: str = "") -> tuple[list[dict[str, Any]], bool]:
        """Live jobs (up to MAX_LISTED), and whether some were left out."""
        jobs: list[dict[str, Any]] = []
        token = ""
        while True:
            page = await self.get("/jobs", cluster, filter=list(filters), page_size=5000, page_token=token)
            jobs.extend(page["jobs"])
            token = page.get("next_page_token", "")
            if not token:
                return jobs, False
            if len(jobs) >= MAX_LISTED or page.get("more"):
                return jobs, True

    async def close(self) -> None:
        await self.http.aclose()


def quoted(job_id: str) -> str:
    """A job id as one path segment: `12`, a readable id, `12[3]`; never a way to another endpoint."""
    if not job_id or len(job_id) > 256 or job_id in (".", ".."):
        raise ToolError("a job id is a number (12), a readable id, or an array element (12[3])")
    return urllib.parse.quote(job_id, safe="[]")


def row(job: dict[str, Any]) -> dict[str, Any]:
    """A job in a list: who, where, what state and why."""
    spec = job.get("spec", {})
    out = {"id": job.get("id"), "readable_id": job.get("readable_id"), "name": spec.get("name", ""),
           "user": spec.get("user", ""), "queue": spec.get("queue", ""), "slots": spec.get("slots", 1),
           "state": job.get("state", "")}
    for key in ("pending_reason", "host", "exit_code", "exit_reason", "start_error", "cluster"):
        if job.get(key):
            out[key] = job[key]
    return out


class KeyVerifier:
    """The SDK's TokenVerifier for `--http`: a bearer key is taken if the gateway takes it (GET /whoami
    with it), and is not `refused` (the server's own key). A taken key is remembered for
    `remember_s` (at most `max_remembered` of them, by digest), so a client's requests do not each
    cost a round trip; what a key may do is checked by the controllers at every call regardless."""

    def __init__(self, gateway: Gateway, refused: str = "", remember_s: float = 10.0,
                 max_remembered: int = 1024) -> None:
        self.gateway = gateway
        self.refused = digest(refused) if refused else ""
        self.remember_s = remember_s
        self.max_remembered = max_remembered
        self._taken: OrderedDict[str, tuple[float, AccessToken]] = OrderedDict()

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token or len(token) > 512 or not (token.isascii() and token.isprintable()):
            return None
        key_digest = digest(token)
        if key_digest == self.refused:
            return None
        now = time.monotonic()
        known = self._taken.get(key_digest)
        if known is not None and now - known[0] < self.remember_s:
            return known[1]
        try:
            answer = await self.gateway.http.get("/whoami", headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError:
            return None
        if answer.status_code != 200:
            return None
        me = answer.json()
        taken = AccessToken(token=token, client_id=f"key-{key_digest[:32]}", subject=str(me.get("name", "")),
                            scopes=[])
        self._taken[key_digest] = (now, taken)
        self._taken.move_to_end(key_digest)
        while len(self._taken) > self.max_remembered:
            self._taken.popitem(last=False)
        return taken


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def build(gateway: Gateway, verifier: KeyVerifier | None = None, url: str = "") -> MCPServer:
    auth = None if verifier is None else AuthSettings(issuer_url=url or "http://127.0.0.1",  # type: ignore[arg-type]
                                                      resource_server_url=None)
    server: MCPServer = MCPServer(name="xce", title="XCE batch workload manager", instructions=INSTRUCTIONS,
                                  version="1", token_verifier=verifier, auth=auth)
    # In this order: an agent is shown the tools as they were added, reads first.
    _add_cluster_tools(server, gateway)
    _add_read_tools(server, gateway)
    _add_write_tools(server, gateway)
    _add_advanced_tools(server, gateway)
    return server


CLUSTER = "cluster: which of the gateway's clusters (scheduler_list_clusters); default XCE's own."


def _add_cluster_tools(server: MCPServer, gateway: Gateway) -> None:

    @server.tool(name="scheduler_list_clusters",
                 description="The clusters this gateway serves (XCE's own, and Slurm or LSF clusters it "
                             "relays to): each one's backend, health, what it can and cannot do, and "
                             "whether this key may use it.")
    async def list_clusters() -> dict[str, Any]:
        return await gateway.get("/clusters")  # type: ignore[no-any-return]


def _add_read_tools(server: MCPServer, gateway: Gateway) -> None:

    @server.tool(name="scheduler_cluster_status",
                 description="The cluster at a glance: replicas and leader (or another cluster's backend "
                             "and health), hosts and slots, queues, jobs by state. " + CLUSTER)
    async def cluster_status(cluster: str = "") -> dict[str, Any]:
        status, hosts, queues = await asyncio.gather(gateway.get("/status", cluster),
                                                     gateway.get("/hosts", cluster),
                                                     gateway.get("/queues", cluster))
        jobs, partial = await gateway.all_jobs(cluster=cluster)
        states: dict[str, int] = {}
        for job in jobs:
            states[job.get("state", "")] = states.get(job.get("state", ""), 0) + 1
        up = [h for h in hosts.get("hosts", []) if h.get("status") == "HOST_OK"]
        return {
            "cluster": status.get("cluster_id"), "backend": status.get("backend", "xce"),
            "replicas": [{"id": r.get("id"), "role": r.get("role"), "health": r.get("health")}
                         for r in status.get("replicas", [])],
            "scheduler": status.get("scheduler_lease_holder", "") or "none holds the lease",
            "hosts": {"total": len(hosts.get("hosts", [])), "up": len(up),
                      "slots": sum(agent_advice.number(h["spec"].get("slots")) for h in up),
                      "slots_used": sum(agent_advice.number(h.get("slots_used")) for h in up)},
            "queues": [q.get("name") for q in queues.get("queues", [])],
            "jobs_by_state": states, "jobs_counted": len(jobs) if not partial else f"first {len(jobs)}"}

    @server.tool(name="scheduler_list_jobs",
                 description="Live jobs, by user, queue, state (PEND, RUN, DONE, EXIT...), "
                             "or filters of the form field:op:value (id, state, queue, name, user, priority, "
                             "slots; op eq ne lt le gt ge in). " + CLUSTER)
    async def list_jobs(user: str = "", queue: str = "", state: str = "", filters: list[str] | None = None,
                        limit: int = 50, cluster: str = "") -> dict[str, Any]:
        wanted = list(filters or [])
        wanted += [f"user:eq:{user}"] if user else []
        wanted += [f"queue:eq:{queue}"] if queue else []
        wanted += [f"state:eq:{state.upper()}"] if state else []
        page = await gateway.get("/jobs", cluster, filter=wanted, page_size=max(1, min(limit, 5000)))
        jobs = page["jobs"]
        more = bool(page.get("next_page_token") or page.get("more"))
        return {"jobs": [row(j) for j in jobs], "shown": len(jobs), "more": more}

    @server.tool(name="scheduler_get_job",
                 description="One job in full: its spec, state, times, host, usage. " + CLUSTER)
    async def get_job(job_id: str, cluster: str = "") -> dict[str, Any]:
        return await gateway.get(f"/jobs/{quoted(job_id)}", cluster)  # type: ignore[no-any-return]

    @server.tool(name="scheduler_list_hosts",
                 description="Hosts: status, slots and slots in use, memory, closed or open, load. "
                             + CLUSTER)
    async def list_hosts(cluster: str = "") -> dict[str, Any]:
        hosts = await gateway.get("/hosts", cluster)
        return {"hosts": [{"name": h["spec"]["name"], "status": h.get("status"),
                           "slots": h["spec"].get("slots", 0), "slots_used": h.get("slots_used", 0),
                           "memory_mb": h["spec"].get("memory_mb", "0"), "closed": h.get("closed", False),
                           "load": h.get("load", {})} for h in hosts.get("hosts", [])]}

    @server.tool(name="scheduler_list_queues",
                 description="Queues: priority, whether open and active, limits, policies (fair share, "
                             "preemption, backfill). " + CLUSTER)
    async def list_queues(cluster: str = "") -> dict[str, Any]:
        return await gateway.get("/queues", cluster)  # type: ignore[no-any-return]

    @server.tool(name="scheduler_pending_reasons",
                 description="Why jobs wait: for one job, its reason; else the pending jobs (of a user or "
                             "queue) grouped by reason. " + CLUSTER)
    async def pending_reasons(job_id: str = "", user: str = "", queue: str = "",
                              cluster: str = "") -> dict[str, Any]:
        if job_id:
            job = await gateway.get(f"/jobs/{quoted(job_id)}", cluster)
            return {"job": job.get("id"), "state": job.get("state"),
                    "pending_code": job.get("pending_code", ""),
                    "pending_reason": job.get("pending_reason", ""),
                    "depend_state": job.get("depend_state", "")}
        wanted = ["state:in:PEND,PSUSP"] + ([f"user:eq:{user}"] if user else []) + \
            ([f"queue:eq:{queue}"] if queue else [])
        jobs, partial = await gateway.all_jobs(wanted, cluster)
        return {**agent_advice.pending_summary(jobs), "partial": partial}

    @server.tool(name="scheduler_job_output",
                 description="The end of a job's output (stdout, or stderr), as its host's worker reads it; "
                             "the job's owner's key only. " + CLUSTER)
    async def job_output(job_id: str, stream: str = "stdout", tail_bytes: int = 4096,
                         cluster: str = "") -> dict[str, Any]:
        return await gateway.output(job_id, stream, tail_bytes, cluster)


def _add_write_tools(server: MCPServer, gateway: Gateway) -> None:

    @server.tool(name="scheduler_submit",
                 description="Submit a job from a template: general_serial (one slot), multi_core (slots on "
                             "one host), parallel (slots on any hosts), high_memory (memory reserved). "
                             "mem_mb is its memory limit (-M), run_limit_s its run limit (-W). dry_run: "
                             "check and show, submit nothing. " + CLUSTER)
    async def submit(command: list[str], template: str = "general_serial", slots: int | None = None,
                     mem_mb: int | None = None, run_limit_s: int | None = None, queue: str = "",
                     name: str = "", cwd: str = "", dry_run: bool = False,
                     cluster: str = "") -> dict[str, Any]:
        try:
            spec = agent_advice.job_spec(command, template, slots, mem_mb, run_limit_s, queue, name)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        if cwd:
            spec["cwd"] = cwd
        done = await gateway.send("POST", "/jobs", spec, dry_run, cluster)
        if dry_run:
            return {"dry_run": done["dry_run"], "job": done["jobs"][0]}
        return {"submitted": row(done["jobs"][0])}

    async def act(job_id: str, action: str, dry_run: bool, cluster: str) -> dict[str, Any]:
        done = await gateway.send("POST", f"/jobs/{quoted(job_id)}/actions", {"action": action}, dry_run,
                                  cluster)
        return {"dry_run": done["dry_run"], "job": row(done["job"])} if dry_run else {"job": row(done)}

    @server.tool(name="scheduler_cancel",
                 description="Kill a job (pending: it ends at once; running: its processes are killed). "
                             "dry_run: show what would happen. " + CLUSTER)
    async def cancel(job_id: str, dry_run: bool = False, cluster: str = "") -> dict[str, Any]:
        return await act(job_id, "kill", dry_run, cluster)

    @server.tool(name="scheduler_hold", description="Hold a pending job: it is not started until released. "
                                                    "dry_run: show what would happen. " + CLUSTER)
    async def hold(job_id: str, dry_run: bool = False, cluster: str = "") -> dict[str, Any]:
        return await act(job_id, "hold", dry_run, cluster)

    @server.tool(name="scheduler_release", description="Release a held job: it may be started again. "
                                                       "dry_run: show what would happen. " + CLUSTER)
    async def release(job_id: str, dry_run: bool = False, cluster: str = "") -> dict[str, Any]:
        return await act(job_id, "release", dry_run, cluster)

    @server.tool(name="scheduler_modify",
                 description="Change a job's priority, queue or resource requirement. dry_run: show the "
                             "change. " + CLUSTER)
    async def modify(job_id: str, priority: int | None = None, queue: str | None = None,
                     resource_req: str | None = None, dry_run: bool = False,
                     cluster: str = "") -> dict[str, Any]:
        change = {k: v for k, v in (("priority", priority), ("queue", queue), ("resource_req", resource_req))
                  if v is not None}
        if not change:
            raise ToolError("nothing to change: give priority, queue or resource_req")
        done = await gateway.send("PATCH", f"/jobs/{quoted(job_id)}", change, dry_run, cluster)
        return {"dry_run": done["dry_run"], "job": row(done["job"])} if dry_run else {"job": row(done)}


def _add_advanced_tools(server: MCPServer, gateway: Gateway) -> None:

    @server.tool(name="scheduler_wait_job",
                 description="Wait until a job ends (DONE or EXIT), up to timeout_s; reports progress as its "
                             "state changes. Says so if it has not ended by then. " + CLUSTER)
    async def wait_job(job_id: str, ctx: Context, timeout_s: float = 300.0,
                       cluster: str = "") -> dict[str, Any]:
        deadline = time.monotonic() + max(0.0, min(timeout_s, 3600.0))
        last = ""
        while True:
            job = await gateway.get(f"/jobs/{quoted(job_id)}", cluster)
            state = job.get("state", "")
            if state != last:
                await ctx.report_progress(1.0 if state in ("DONE", "EXIT") else 0.5, 1.0,
                                          f"job {job.get('id')} is {state}")
                last = state
            if state in ("DONE", "EXIT"):
                return {"ended": True, "job": row(job), "exit_code": job.get("exit_code", 0)}
            if time.monotonic() >= deadline:
                return {"ended": False, "job": row(job),
                        "note": f"not ended after {timeout_s:.0f} s; it is {state}"}
            await asyncio.sleep(POLL_S)

    @server.tool(name="scheduler_analyze_failure",
                 description="Why a job ended as it did: exit code, signal, memory or run limit, lost host; "
                             "with what to change. " + CLUSTER)
    async def analyze_failure(job_id: str, cluster: str = "") -> dict[str, Any]:
        job = await gateway.get(f"/jobs/{quoted(job_id)}", cluster)
        found = agent_advice.explain_failure(job)
        if job.get("native"):
            found["native"] = job["native"]
        if job.get("host"):  # what it printed last, if its host can be asked and this key may read it
            try:
                own_id = job.get("readable_id") if job.get("cluster") else str(job["id"])
                found["stderr_tail"] = (await gateway.output(str(own_id), "stderr", 2048))["text"]
            except ToolError as exc:
                found["stderr_tail"] = f"(not available: {exc})"
        return found

    @server.tool(name="scheduler_suggest_resources",
                 description="Slots, memory and run limit for a command, from the history of this key's "
                             "user's finished jobs of the same program. " + CLUSTER)
    async def suggest_resources(command: list[str], cluster: str = "") -> dict[str, Any]:
        me = await gateway.get("/whoami")
        history = await gateway.get("/history", cluster, user=me["name"], page_size=2000)
        return agent_advice.suggest_resources(history.get("jobs", []), command)

    @server.tool(name="scheduler_estimate_wait_time",
                 description="When a job would start if submitted now: the simulator run on the cluster's "
                             "current hosts and jobs; says what it assumed. " + CLUSTER)
    async def estimate_wait_time(command: list[str] | None = None, template: str = "general_serial",
                                 slots: int | None = None, mem_mb: int | None = None,
                                 run_limit_s: int | None = None, queue: str = "",
                                 cluster: str = "") -> dict[str, Any]:
        try:
            spec = agent_advice.job_spec(command or ["true"], template, slots, mem_mb, run_limit_s, queue)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        hosts, queues = await asyncio.gather(gateway.get("/hosts", cluster), gateway.get("/queues", cluster))
        jobs, partial = await gateway.all_jobs(["state:in:PEND,RUN,USUSP,SSUSP"], cluster)
        queue_list = queues.get("queues", [])
        spec.setdefault("queue", queues.get("default_queue", "normal"))
        estimate = await asyncio.to_thread(agent_advice.estimate_wait, hosts.get("hosts", []), queue_list,
                                           jobs, spec, int(time.time() * 1000))
        if partial:
            estimate["assumed"].append(f"only the first {len(jobs)} jobs were read")
        return estimate


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
    server = build(gateway, KeyVerifier(gateway, refused_key), f"{scheme}://{host}:{port}")
    # Stateless: each request stands alone, acting as its own key; no session outlives it, so none
    # is another key's to take over, and no caller can pile sessions up.
    app = server.streamable_http_app(host=host, stateless_http=True, max_request_body_size=1 << 20)
    tls = {"ssl_certfile": options.tls_cert, "ssl_keyfile": options.tls_key} if options.tls_cert else {}
    serve(app, host, port, options.limits, log_level="warning", access_log=False, server_header=False,
          log_config=None, **tls)
    return 0
