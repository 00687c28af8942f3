"""`/xce/v1/`: the REST API over the replicas' gRPC services.

Every route takes the caller's API key (`Authorization: Bearer xce_...`: an identity token), makes the
matching gRPC call with it through backend.py, and answers JSON (render.py). Bad input is refused
before any call (forms.py) or by the controllers; either way the answer is a problem details document
(problems.py) and nothing changed. The gateway keeps no state between requests: any number can run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter as Tally
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import anyio
import anyio.to_thread
from fastapi import FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from client.channel import Client, XceError, new_request_id
from client.credentials import new_token
from gateway import dashboard_routes, forms, problems, render, sse
from gateway.backend import Backend
from gateway.clusters.backend import OPERATIONS, ClusterBackend, Health
from gateway.clusters.relay import Callers, Relay, limiter_of
from gateway.event_hub import EventHub, Gap, unavailable
from gateway.problems import Problem
from xce.v1 import api_pb2 as api

PREFIX = "/xce/v1"
KNOWN_METHODS = frozenset({"GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"})
JSON_TYPES = ("application/json", "application/problem+json")
T = TypeVar("T")
HEALTH_S = 10.0  # another cluster's health is asked at most this often
log = logging.getLogger("xce.gateway")


def api_key(request: Request) -> str:
    """The caller's key from `Authorization: Bearer KEY` (or, for a read, the dashboard's HttpOnly
    cookie: dashboard_routes.py), or a 401 saying what to send."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    cookie = request.cookies.get(dashboard_routes.COOKIE, "")
    if not header and cookie and request.method == "GET":
        header, scheme, key = f"Bearer {cookie}", "Bearer", cookie
    if not header:
        raise Problem(401, "no API key: send 'Authorization: Bearer <key>' (an XCE token; an admin "
                           "makes one with `xce token create` or POST /xce/v1/apikeys)")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise Problem(401, "the Authorization header must be 'Bearer <key>'")
    if not (key.isascii() and key.isprintable()) or len(key) > 512:
        raise Problem(401, "the key is not one XCE makes (printable ASCII, at most 512 characters)")
    return key


async def read_json(request: Request) -> Any:
    """The body as JSON, at most forms.MAX_BODY bytes (read no further), or a problem."""
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if kind not in JSON_TYPES:
        raise Problem(415, f"the body must be application/json, not {kind[:60]}")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > forms.MAX_BODY:
        raise Problem(413, f"the body has {length} bytes; at most {forms.MAX_BODY}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > forms.MAX_BODY:
            raise Problem(413, f"the body is larger than {forms.MAX_BODY} bytes")
        chunks.append(chunk)
    return forms.json_body(b"".join(chunks))


def audit_note(dry_run: bool) -> api.AuditRequest:
    """Every write through the gateway is audited, as relayed by rest. No header of the request's says
    otherwise: the leader records an agent's key (mcp_readonly, mcp_operator) as relayed by mcp, from
    the credential (controller/audit_trail.py)."""
    return api.AuditRequest(via="rest", dry_run=dry_run)


def job_answer(answer: api.JobResponse) -> dict[str, Any]:
    if answer.dry_run:
        return {"dry_run": answer.dry_run, "job": render.message(answer.job)}
    return render.message(answer.job)


def make_app(backend: Backend, max_event_streams: int = 16,
             others: dict[str, ClusterBackend] | None = None) -> FastAPI:
    """The app; `max_event_streams`: event streams one user (the keys' principal) may follow at once;
    `others`: the other clusters it relays to, by name (gateway/clusters/)."""
    hubs: list[EventHub] = []
    streams_of: Tally[str] = Tally()  # principal -> event streams open (event loop thread only)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        hub = EventHub(backend, backend.own, asyncio.get_running_loop())
        hub.start()
        hubs.append(hub)
        try:
            yield
        finally:
            hub.close()

    registry = CollectorRegistry()
    requests = Counter("xce_gateway_requests_total", "Requests by method, route and status",
                       ["method", "route", "status"], registry=registry)
    followers = Gauge("xce_gateway_event_clients", "Clients following /xce/v1/events", registry=registry)
    Gauge("xce_gateway_event_revision", "The last revision the event hub took", registry=registry
          ).set_function(lambda: float(hubs[0].revision) if hubs else 0.0)

    app = FastAPI(title="XCE", version="1", openapi_url=f"{PREFIX}/openapi.json", docs_url=None,
                  redoc_url=None, lifespan=lifespan,
                  description="The XCE batch workload manager's REST API. Every request carries an API key "
                  "(Authorization: Bearer); errors are RFC 9457 problem details.")

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        answer = await call_next(request)
        route = request.scope.get("route")
        method = request.method if request.method in KNOWN_METHODS else "other"  # a label's values are few
        requests.labels(method, getattr(route, "path", "unmatched"), str(answer.status_code)).inc()
        return answer

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """Prometheus metrics: counts only, no key needed (as a daemon's /metrics)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    call = Caller(backend, others or {})
    _add_problem_handlers(app)
    dashboard_routes.add_routes(app, backend, read_json)
    _add_job_routes(app, call)
    _add_job_detail_routes(app, call)
    _add_cluster_routes(app, call)
    _add_event_routes(app, backend, call, hubs, EventStreams(followers, streams_of, max_event_streams))
    _add_key_routes(app, call)
    return app


class Caller:
    """A request's work on a client of the cluster with the request's key, off the event loop; or,
    for another cluster of the gateway's (`other`), the relay to it."""

    def __init__(self, backend: Backend, others: dict[str, ClusterBackend]) -> None:
        self.backend = backend
        self.others = others
        self.callers = Callers()
        self._local_name = ""
        self._health: dict[str, tuple[float, Health]] = {}

    async def __call__(self, request: Request, work: Callable[[Client], T]) -> T:
        client = self.backend.client(api_key(request))
        try:
            return await run_in_threadpool(work, client)
        finally:
            self.backend.learned(client)

    async def local_name(self) -> str:
        """This cluster's name (its cluster id), as it says it to the gateway's own key."""
        if not self._local_name:
            client = self.backend.client(self.backend.own.token or "")
            try:
                self._local_name = (await run_in_threadpool(client.who_am_i)).cluster_id
            finally:
                self.backend.learned(client)
            if self.others.pop(self._local_name, None) is not None:
                log.error("the clusters file names a cluster %s, this cluster's own name: left out",
                          self._local_name)
        return self._local_name

    async def other(self, request: Request, cluster: str, job_id: str = "") -> tuple[Relay | None, str]:
        """(the relay to another cluster, or None for this one; the job id on its cluster). A job id may
        name its cluster (`hpc:17`); `cluster` (a query parameter) must then agree."""
        key = api_key(request)  # (no key, no word of which clusters there are)
        named, sep, native = job_id.partition(":")
        if sep:
            if cluster and cluster != named:
                raise Problem(400, f"job {job_id[:80]!r} is of cluster {named[:64]!r}, not {cluster[:64]!r}")
            cluster, job_id = named, native
        if not cluster or cluster == await self.local_name():  # (this cluster's name is its own)
            return None, job_id
        found = self.others.get(cluster)
        if found is None:
            known = ", ".join(sorted({await self.local_name(), *self.others}))
            raise Problem(404, f"no cluster {cluster[:64]!r} (the gateway's clusters: {known})")

        def local(work: Callable[[Client], Any]) -> Awaitable[Any]:
            return self(request, work)

        who = await self.callers.who(key, local)
        if who.scope is not None and who.scope.clusters and cluster not in who.scope.clusters:
            raise Problem(403, f"outside the scope of this key ({who.name}): cluster {cluster!r} is not "
                               f"among its clusters ({', '.join(who.scope.clusters)})", "PERMISSION_DENIED")
        return Relay(found, who, local, lambda: self.callers.who(key, local, fresh=True)), job_id

    async def health(self, backend: ClusterBackend) -> Health:
        """The cluster's health, asked at most every HEALTH_S (a request may not make every cluster
        be asked each time); a check that fails in any way is an unhealthy cluster, not a 500."""
        now = time.monotonic()
        known = self._health.get(backend.name)
        if known is not None and now - known[0] < HEALTH_S:
            return known[1]
        try:
            health = await anyio.to_thread.run_sync(backend.health, limiter=limiter_of(backend.name))
        except Exception as exc:  # noqa: BLE001 (whatever the other cluster answered)
            health = Health(False, f"its health check failed ({type(exc).__name__})")
        self._health[backend.name] = (now, health)
        return health


def problem_response(request: Request, problem: Problem) -> JSONResponse:
    return JSONResponse(problems.body(problem, request.url.path), problem.status,
                        problems.headers(problem), media_type=problems.PROBLEM_TYPE)


def _add_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(request, exc)

    @app.exception_handler(XceError)
    async def _service(request: Request, exc: XceError) -> JSONResponse:
        return problem_response(request, problems.of_code(exc.code_name, exc.message))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        detail = f"no such path: {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return problem_response(request, Problem(exc.status_code, detail))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(p) for p in error.get('loc', ()))}: {error.get('msg', '')}"
                 for error in exc.errors()[:5]]
        return problem_response(request, Problem(400, "; ".join(parts) or "bad request"))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return problem_response(request, Problem(500, f"internal error ({type(exc).__name__}); see the "
                                                      "gateway's log"))



def _add_job_routes(app: FastAPI, call: Caller) -> None:

    @app.post(f"{PREFIX}/jobs", status_code=201, summary="Submit jobs (one spec, or {\"jobs\": [...]})")
    async def submit(request: Request, response: Response, dry_run: bool = False,
                     cluster: str = "") -> dict[str, Any]:
        """A JobSpec in protobuf JSON ("command": [...], "slots", "queue", "resource_req", ...); a name
        like "sweep[1-100]%5" makes a job array. `Idempotency-Key` makes a retried request one submit.
        `dry_run=true` checks everything and answers what would happen (200), submitting nothing.
        `cluster`: another cluster of the gateway's (one job per request there)."""
        api_key(request)
        specs = forms.submit(await read_json(request))
        other, _ = await call.other(request, cluster)
        if other is not None:
            if dry_run:
                response.status_code = 200
            return await other.submit(specs, dry_run)
        request_id = request.headers.get("idempotency-key") or new_request_id()
        if len(request_id) > 128:
            raise Problem(400, "Idempotency-Key is at most 128 characters")
        note = audit_note(dry_run)
        done = await call(request, lambda c: c.submit(specs, request_id, note))
        if dry_run:
            response.status_code = 200
            return {"dry_run": done.dry_run, "jobs": render.messages(done.jobs)}
        return {"jobs": render.messages(done.jobs), "revision": str(done.revision)}

    @app.get(f"{PREFIX}/jobs", summary="List jobs (filter=field:op:value, repeatable)")
    async def list_jobs(request: Request, filters: Annotated[list[str], Query(alias="filter")] = [],  # noqa: B006
                        page_size: int | None = None, page_token: str = "",
                        stale: bool = False, cluster: str = "") -> dict[str, Any]:
        size = forms.page_size(page_size)
        other, _ = await call.other(request, cluster)
        if other is not None:
            return await other.jobs(filters, size)
        wanted = api.ListJobsRequest(filters=filters, page_size=size, page_token=page_token, stale=stale)
        page = await call(request, lambda c: c.call("JobService", "ListJobs", wanted, api.ListJobsResponse))
        return {"jobs": render.messages(page.jobs), "next_page_token": page.next_page_token,
                "revision": str(page.revision)}

    @app.get(f"{PREFIX}/jobs/{{job_id}}", summary="One job: numeric id, readable id, or array element")
    async def get_job(request: Request, job_id: str, stale: bool = False,
                      cluster: str = "") -> dict[str, Any]:
        other, job_id = await call.other(request, cluster, job_id)
        if other is not None:
            return await other.job(job_id)
        return render.message(await call(request, lambda c: c.get_job(job_id, stale)))

    @app.post(f"{PREFIX}/jobs/{{job_id}}/actions", summary="kill, stop, resume, hold, release or requeue")
    async def act(request: Request, job_id: str, dry_run: bool = False, cluster: str = "") -> dict[str, Any]:
        """The job after the action; `dry_run=true`: {"dry_run": what would happen, "job": as it is}."""
        api_key(request)
        action = forms.action(await read_json(request))
        other, job_id = await call.other(request, cluster, job_id)
        if other is not None:
            return await other.control(job_id, api.ControlAction.Name(action).lower(), dry_run)
        note = audit_note(dry_run)
        return job_answer(await call(request, lambda c: c.control_job(job_id, action, audit=note)))


def _add_job_detail_routes(app: FastAPI, call: Caller) -> None:

    @app.get(f"{PREFIX}/jobs/{{job_id}}/output", summary="The end of a job's stdout or stderr (its owner's)")
    async def output(request: Request, job_id: str, stream: str = "stdout", tail: int = 65536,
                     cluster: str = "") -> Response:
        """Read by the worker of the job's host and relayed to the leader (workers accept no
        connections); text/plain, with X-XCE-Output-Size (the whole file's) and X-XCE-Host."""
        if stream not in ("stdout", "stderr"):
            raise Problem(400, f"stream is stdout or stderr, not {stream[:20]!r}")
        if not 0 < tail <= 512 << 10:
            raise Problem(400, "tail is between 1 and 524288 bytes")
        other, job_id = await call.other(request, cluster, job_id)
        got = await other.output(job_id, stream == "stderr", tail) if other is not None else \
            await call(request, lambda c: c.job_output(job_id, stream == "stderr", tail))
        return Response(got.data, media_type="text/plain; charset=utf-8",
                        headers={"X-XCE-Output-Size": str(got.size), "X-XCE-Host": got.host,
                                 "X-Content-Type-Options": "nosniff"})

    @app.patch(f"{PREFIX}/jobs/{{job_id}}", summary="Modify priority, queue or resource requirement")
    async def modify(request: Request, job_id: str, dry_run: bool = False,
                     cluster: str = "") -> dict[str, Any]:
        """The job after the change; `dry_run=true`: {"dry_run": what would happen, "job": as it is}."""
        api_key(request)
        change = forms.modification(await read_json(request))
        other, job_id = await call.other(request, cluster, job_id)
        if other is not None:
            raise other.backend.unsupported("modify a job", "the gateway relays no modification to it")
        note = audit_note(dry_run)
        return job_answer(await call(request, lambda c: c.modify_job(job_id, **change, audit=note)))

    @app.get(f"{PREFIX}/audit", summary="The audit trail, newest first (everyone's with audit.read)")
    async def audit(request: Request, principal: str = "", since_ms: int = 0, page_size: int | None = None,
                    page_token: str = "") -> dict[str, Any]:
        if not 0 <= since_ms < 1 << 63:
            raise Problem(400, "since_ms must be a non-negative 64-bit integer")
        wanted = api.ListAuditRequest(principal=principal, since_ms=since_ms,
                                      page_size=forms.page_size(page_size), page_token=page_token)
        page = await call(request, lambda c: c.call("AdminService", "ListAudit", wanted,
                                                    api.ListAuditResponse))
        records = render.messages(page.records)
        local = await call.local_name()
        for record in records:  # a row of this cluster's own names it too (the others' name theirs)
            record.setdefault("cluster", local)
        return {"records": records, "next_page_token": page.next_page_token}


def _add_cluster_routes(app: FastAPI, call: Caller) -> None:

    @app.get(f"{PREFIX}/hosts", summary="Hosts, host groups and shared resources")
    async def hosts(request: Request, stale: bool = False, cluster: str = "") -> dict[str, Any]:
        other, _ = await call.other(request, cluster)
        if other is not None:
            return await other.hosts()
        return render.message(await call(request, lambda c: c.list_hosts(stale)))

    @app.get(f"{PREFIX}/queues", summary="Queues")
    async def queues(request: Request, stale: bool = False, cluster: str = "") -> dict[str, Any]:
        other, _ = await call.other(request, cluster)
        if other is not None:
            return await other.queues()
        return render.message(await call(request, lambda c: c.list_queues(stale)))

    @app.get(f"{PREFIX}/status", summary="Every replica's role, term and indexes; the scheduler lease")
    async def status(request: Request, cluster: str = "") -> dict[str, Any]:
        other, _ = await call.other(request, cluster)
        if other is not None:
            health = await call.health(other.backend)
            return {"cluster_id": other.backend.name, "backend": other.backend.kind, "healthy": health.ok,
                    "health": health.detail, **health.extra}
        return render.message(await call(request, lambda c: c.status()))

    @app.get(f"{PREFIX}/clusters", summary="The clusters this gateway serves: backend, health, abilities")
    async def clusters(request: Request) -> dict[str, Any]:
        me = await call(request, lambda c: c.who_am_i())
        allowed = set(me.scope.clusters) if me.HasField("scope") and me.scope.clusters else None
        local = {"name": me.cluster_id, "backend": "xce", "local": True, "healthy": True,
                 "health": "this gateway's own cluster", "supports": list(OPERATIONS), "cannot": []}
        found = [local]
        for _, other in sorted(call.others.items()):
            health = await call.health(other)
            found.append({**other.describe(), "local": False, "healthy": health.ok, "health": health.detail})
        for entry in found:
            entry["in_scope"] = allowed is None or entry["name"] in allowed
        return {"clusters": found, "default": me.cluster_id}

    @app.get(f"{PREFIX}/history", summary="Finished jobs, newest first")
    async def history(request: Request, user: str = "", queue: str = "",
                      state: Annotated[list[str], Query()] = [],  # noqa: B006
                      since_ms: int | None = None, until_ms: int | None = None, exit_code: int | None = None,
                      page_size: int | None = None, page_token: str = "",
                      stale: bool = False, cluster: str = "") -> dict[str, Any]:
        other, _ = await call.other(request, cluster)
        if other is not None:
            kept = [f"user:eq:{user}"] * bool(user) + [f"queue:eq:{queue}"] * bool(queue)
            kept += [f"state:in:{','.join(state)}"] if state else []
            kept += [f"submit_time_ms:ge:{since_ms}"] if since_ms is not None else []
            kept += [f"submit_time_ms:le:{until_ms}"] if until_ms is not None else []
            return await other.jobs(kept, forms.page_size(page_size), finished=True)
        wanted = forms.history({"user": user, "queue": queue, "state": state, "since_ms": since_ms,
                                "until_ms": until_ms, "exit_code": exit_code, "page_size": page_size,
                                "page_token": page_token, "stale": stale})
        page = await call(request, lambda c: c.call("JobService", "ListHistory", wanted, api.HistoryResponse))
        return {"jobs": render.messages(page.jobs), "next_page_token": page.next_page_token}

    @app.get(f"{PREFIX}/whoami", summary="Who the cluster takes the key's holder for, and what they may do")
    async def whoami(request: Request) -> dict[str, Any]:
        return render.message(await call(request, lambda c: c.who_am_i()))


@dataclass
class EventStreams:
    """The event streams open: the gauge, each principal's count, and the bound on it."""

    followers: Gauge
    streams_of: Tally[str]
    max_per_user: int


def _add_event_routes(app: FastAPI, backend: Backend, call: Caller, hubs: list[EventHub],
                      open_streams: EventStreams) -> None:
    streams_of, max_event_streams = open_streams.streams_of, open_streams.max_per_user


    @app.get(f"{PREFIX}/events", summary="Server-sent events: job, host and queue changes as they commit",
             response_class=StreamingResponse)
    async def events(request: Request, user: Annotated[list[str], Query()] = [],  # noqa: B006
                     queue: Annotated[list[str], Query()] = [],  # noqa: B006
                     job: Annotated[list[int], Query()] = [],  # noqa: B006
                     since: str | None = None, cluster: str = "") -> StreamingResponse:
        """`Last-Event-ID` (or `since`) resumes after that message, without a gap or a repeat; without
        it, the stream starts now. `user`, `queue` and `job` keep only those (repeatable). A caller
        is sent only what its key may read (hosts and queues: cluster.read; jobs: jobs.read, only
        its own with private_jobs)."""
        key = api_key(request)
        other, _ = await call.other(request, cluster)
        if other is not None:
            raise other.backend.unsupported("stream events", "poll GET /xce/v1/jobs?cluster=... instead")
        me = await call(request, lambda c: c.who_am_i())
        if me.HasField("scope") and me.scope.clusters and me.cluster_id not in me.scope.clusters:
            raise Problem(403, f"outside the scope of this key ({me.name}): this cluster, {me.cluster_id}, "
                               f"is not among its clusters ({', '.join(me.scope.clusters)})",
                          "PERMISSION_DENIED")
        held = set(me.permissions)
        audience = sse.Audience(me.name, jobs=bool(held & {"jobs.read", "jobs.read.all"}),
                                every_job=me.sees_every_job, cluster="cluster.read" in held,
                                users=frozenset(user), queues=frozenset(queue), job_ids=frozenset(job))
        if not audience.jobs and not audience.cluster:
            raise Problem(403, f"{me.name} (role {me.role}) may not follow events: needs jobs.read or "
                               "cluster.read", "PERMISSION_DENIED")
        if streams_of[me.name] >= max_event_streams:
            raise Problem(429, f"{me.name} follows {streams_of[me.name]} event streams already (at most "
                               f"{max_event_streams} at once: the gateway's --max-event-streams)",
                          "RESOURCE_EXHAUSTED")
        last = request.headers.get("last-event-id") or since
        position = sse.parse_position(last) if last else None
        hub = hubs[0]
        if not hub.usable:
            raise unavailable(hub)
        deadline = time.monotonic() + HUB_WAIT_S
        while hub.floor is None or position is not None and position.revision > hub.revision:
            if time.monotonic() > deadline:
                if hub.floor is None:
                    raise unavailable(hub)
                break  # an id from ahead of this cluster (another one, or restored): resync below
            await asyncio.sleep(0.05)
        stream = follow(hub, audience, position, backend.client(key))
        return StreamingResponse(counted(open_streams.followers, stream, streams_of, me.name),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _add_key_routes(app: FastAPI, call: Caller) -> None:

    @app.post(f"{PREFIX}/apikeys", status_code=201, summary="Make an API key (admins); shown only here")
    async def create_key(request: Request) -> dict[str, Any]:
        api_key(request)
        wanted = forms.new_key(await read_json(request))
        key, digest = new_token()
        made = await call(request, lambda c: c.create_token(
            digest, wanted["user"], wanted["role"], wanted.get("expires_ms", 0),
            wanted.get("description", ""), wanted.get("scope")))
        return {"key": key, **render.message(made.token)}

    @app.get(f"{PREFIX}/apikeys", summary="The API keys (ids, users, roles; never the keys)")
    async def list_keys(request: Request) -> dict[str, Any]:
        return {"keys": render.messages(await call(request, lambda c: c.list_tokens()))}

    @app.delete(f"{PREFIX}/apikeys/{{key_id}}", summary="Revoke an API key by id")
    async def revoke_key(request: Request, key_id: str) -> dict[str, Any]:
        return render.message((await call(request, lambda c: c.revoke_token(key_id))).token)


async def counted(gauge: Gauge, stream: AsyncGenerator[bytes, None], streams_of: Tally[str],
                  principal: str) -> AsyncIterator[bytes]:
    gauge.inc()
    streams_of[principal] += 1
    try:
        async for chunk in stream:
            yield chunk
    finally:
        gauge.dec()
        streams_of[principal] -= 1
        if streams_of[principal] <= 0:
            del streams_of[principal]
        await stream.aclose()  # its catch-up thread stops now, not when collected


HUB_WAIT_S = 15.0      # for the event hub's first snapshot, or to reach a client's revision
KEEPALIVE_S = 15.0     # a comment line on an idle stream, so that proxies and clients see it alive
RECHECK_S = 30.0       # the caller's key is asked about again this often: a revoked key's stream ends


async def follow(hub: EventHub, audience: sse.Audience, position: sse.Position | None,
                 caller: Client) -> AsyncGenerator[bytes, None]:
    """One client's stream: from the buffer, or from a catch-up first; a keepalive when idle."""
    yield b"retry: 1000\n\n"
    if position is not None and position.revision > hub.revision:
        yield sse.resync(f"event id {position} is ahead of this cluster's revision", hub.revision)
        position = None
    place = position or hub.head() or sse.Position(hub.revision)
    recheck = time.monotonic() + RECHECK_S
    while True:
        waiter = hub.waiter()
        items = hub.after(place)
        if items is None:
            async for item in hub.catch_up(place, lambda p: hub.after(p) is not None):
                if isinstance(item, Gap):
                    floor = hub.floor or place
                    yield sse.resync(f"the events after {place} are no longer kept: {item.reason}",
                                     floor.revision)
                    place = floor
                    break
                if audience.admits(item):
                    yield item.frame()
                place = sse.Position(item.revision, -1 if item.last else item.index)
            continue
        for item in items:
            if isinstance(item, Gap):
                yield sse.resync(item.reason, item.revision)
                place = sse.Position(item.revision)
                continue
            if audience.admits(item):
                yield item.frame()
            place = sse.Position(item.revision, -1 if item.last else item.index)
        if items:
            continue
        if time.monotonic() > recheck:
            try:
                await run_in_threadpool(caller.who_am_i)
            except XceError as exc:
                if exc.code_name in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
                    return  # the key was revoked or expired: the stream ends
            recheck = time.monotonic() + RECHECK_S
        try:
            await asyncio.wait_for(waiter.wait(), KEEPALIVE_S)
        except TimeoutError:
            yield b": keepalive\n\n"
