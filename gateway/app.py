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
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.routing import Match

from client.channel import Client, XceError, new_request_id
from client.credentials import new_token
from gateway import blocking, conditional, dashboard_routes, forms, openapi_doc, problems, render, sse
from gateway.backend import Backend
from gateway.clusters.backend import OPERATIONS, ClusterBackend, Health
from gateway.clusters.relay import Callers, Relay, limiter_of
from gateway.event_hub import EventHub, follow, unavailable
from gateway.problems import Problem
from xce.v1 import api_pb2 as api

PREFIX = "/xce/v1"
KNOWN_METHODS = frozenset({"GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"})
JSON_TYPES = ("application/json", "application/problem+json")
T = TypeVar("T")
HEALTH_S = 10.0  # another cluster's health is asked at most this often
log = logging.getLogger("xce.gateway")


def api_key(request: Request) -> str:
    """The caller's key from `Authorization: Bearer KEY` (or the dashboard's HttpOnly cookie: for a
    write only with the session's CSRF token and this origin, dashboard_routes.py), or a 401 saying
    what to send."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    cookie = request.cookies.get(dashboard_routes.COOKIE, "")
    if not header and cookie:
        if request.method != "GET":  # a write on the cookie: only from the dashboard's own page
            dashboard_routes.check_write(request, cookie)
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


# The blocking reads' parameters, and the events' resume point, checked by FastAPI against these.
Wait = Annotated[str | None, Query(pattern=r"^[0-9]{1,9}(ms|s|m)?$", description=(
    "a blocking read's longest wait: 30s, 500ms, 5m, or seconds (default 60s; at most the gateway's "
    "--max-wait)"))]
Index = Annotated[int | None, Query(ge=0, le=(1 << 63) - 1, description=(
    "block until something this read covers changes after this revision (X-XCE-Index of an earlier answer)"))]
Since = Annotated[str | None, Query(pattern=r"^[0-9]{1,19}([.][0-9]{1,9})?$", description=(
    "resume after this event id (as Last-Event-ID)"))]


def known_query(request: Request) -> None:
    """Refuse a query parameter the route does not take (400, naming it), rather than ignore it: a
    misspelt filter must not answer as if there were none (`/jobs?state=RUN` listing every job)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params or not request.url.path.startswith(PREFIX + "/"):
        return  # (probes, /metrics and the dashboard's files may be sent what they ignore)
    taken = {param.alias for param in dependant.query_params}
    unknown = sorted({name for name in request.query_params if name not in taken})
    if unknown:
        shown = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise Problem(400, f"unknown query parameter{'s' * (len(unknown) > 1)} {shown}: this route takes "
                           f"{', '.join(sorted(taken)) or 'none'}")


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
    """Every write through the gateway asks for its audit row. How it came is the leader's to say
    (controller/audit_trail.py via_of: `rest` proven by the gateway's own key, `mcp` by an agent's
    role), never the request's, so the note names none."""
    return api.AuditRequest(dry_run=dry_run)


async def conditional_answer(request: Request, answer: dict[str, Any], revision: int) -> Response:
    """A read's answer with its ETag and X-XCE-Index; 304 for an If-None-Match that still holds."""
    tag = conditional.etag(answer)
    headers = {"ETag": tag}
    if revision:
        headers["X-XCE-Index"] = str(revision)
    if conditional.none_match(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers=headers)
    return JSONResponse(answer, headers=headers)


def written(answer: dict[str, Any], job_id: str) -> Response:
    """A write's answer; the job's ETag with it. Not a dry run's (nothing was written), nor an array
    element's: the answer is then its array's record, whose ETag is not the element's."""
    if "dry_run" in answer or "[" in job_id:
        return JSONResponse(answer)
    return JSONResponse(answer, headers={"ETag": conditional.etag(answer)})


def no_blocking(other: Relay, wait: str | None, index: int | None) -> None:
    if wait is not None or index is not None:
        raise other.backend.unsupported("answer a blocking read", "poll it instead")


def no_match(request: Request) -> None:
    if request.headers.get("if-match") is not None:
        raise Problem(400, "If-Match is taken on this gateway's own cluster only")


def job_answer(answer: api.JobResponse) -> dict[str, Any]:
    if answer.dry_run:
        return {"dry_run": answer.dry_run, "job": render.message(answer.job)}
    return render.message(answer.job)


def make_app(backend: Backend, max_event_streams: int = 16,
             others: dict[str, ClusterBackend] | None = None,
             max_wait_s: float = conditional.MAX_WAIT_S) -> FastAPI:
    """The app; `max_event_streams`: event streams one user (the keys' principal) may follow at once;
    `others`: the other clusters it relays to, by name (gateway/clusters/); `max_wait_s`: the
    longest a blocking read waits."""
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
                  redoc_url=None, lifespan=lifespan, dependencies=[Depends(known_query)],
                  description="The XCE batch workload manager's REST API. Every request carries an API key "
                  "(Authorization: Bearer); errors are RFC 9457 problem details.")

    from xce.metrics import gateway_request_durations  # (with the one middleware that times requests)

    durations = gateway_request_durations(registry)

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        answer = await call_next(request)
        route = request.scope.get("route")
        method = request.method if request.method in KNOWN_METHODS else "other"  # a label's values are few
        path = getattr(route, "path", "unmatched")
        requests.labels(method, path, str(answer.status_code)).inc()
        durations.labels(method, path).observe(time.perf_counter() - started)
        return answer

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """Prometheus metrics: counts only, no key needed (as a daemon's /metrics)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    call = Caller(backend, others or {}, hubs, max_wait_s)
    _add_problem_handlers(app)
    dashboard_routes.add_routes(app, backend, read_json, api_key, hubs)
    _add_job_routes(app, call)
    _add_job_detail_routes(app, call)
    _add_cluster_routes(app, call)
    _add_event_routes(app, backend, call, hubs, EventStreams(followers, streams_of, max_event_streams))
    _add_key_routes(app, call)
    _add_health_routes(app, call)

    def contract() -> dict[str, Any]:
        if app.openapi_schema is None:
            generated = get_openapi(title=app.title, version=app.version, description=app.description,
                                    routes=app.routes)
            app.openapi_schema = openapi_doc.document(generated)
        return app.openapi_schema

    app.openapi = contract  # type: ignore[method-assign]
    return app


class Caller:
    """A request's work on a client of the cluster with the request's key, off the event loop; or,
    for another cluster of the gateway's (`other`), the relay to it."""

    def __init__(self, backend: Backend, others: dict[str, ClusterBackend], hubs: list[EventHub],
                 max_wait_s: float = conditional.MAX_WAIT_S) -> None:
        self.backend = backend
        self.max_wait_s = max_wait_s
        self.others = others
        self.hubs = hubs  # the event hub, once the app runs (blocking reads wait on it)
        self.blocked_now = 0  # blocking reads waiting (event loop thread only)
        self.blocked_of: Tally[str] = Tally()  # ... by principal
        self.callers = Callers()
        self._local_name = ""
        self._health: dict[str, tuple[float, Health]] = {}

    async def __call__(self, request: Request, work: Callable[[Client], T]) -> T:
        client = self.backend.client(api_key(request))
        try:
            return await run_in_threadpool(work, client)
        finally:
            self.backend.learned(client)

    async def blocked(self, request: Request, wait: str | None, index: int | None,
                      covers: Callable[[sse.Message], bool]) -> None:
        """A blocking read's wait (none without `index`); 503 while the event hub cannot tell. The key
        is proven first (a wait costs the gateway, so no one without a key may hold one), and waits
        are bounded per principal and in all."""
        wait_s = conditional.wait_of(wait, index, self.max_wait_s)
        if wait_s is None or index is None:
            return
        hub = self.hubs[0]
        if not hub.usable or hub.floor is None:
            raise unavailable(hub)
        who = (await self(request, lambda c: c.who_am_i())).name
        if self.blocked_now >= MAX_BLOCKED or self.blocked_of[who] >= MAX_BLOCKED_PER_USER:
            raise Problem(429, f"too many blocking reads wait already ({self.blocked_of[who]} of {who[:64]}, "
                               f"{self.blocked_now} in all; at most {MAX_BLOCKED_PER_USER} and {MAX_BLOCKED})"
                               ": poll, or wait and retry", "RESOURCE_EXHAUSTED")
        self.blocked_now += 1
        self.blocked_of[who] += 1
        try:
            await blocking.wait_past(hub, index, covers, wait_s)
        finally:
            self.blocked_now -= 1
            self.blocked_of[who] -= 1
            if self.blocked_of[who] <= 0:
                del self.blocked_of[who]

    async def check_match(self, request: Request, job_id: str, dry_run: bool) -> None:
        """`If-Match`: the job as the leader has it now must be the one the client last read, else 412.
        (Checked just before the write is sent: a change committed between the two is not caught.)"""
        header = request.headers.get("if-match")
        if header is None:
            return
        current = conditional.etag(render.message(await self(request, lambda c: c.get_job(job_id))))
        if not conditional.match(header, current):
            raise Problem(412, f"job {job_id[:80]} has changed since that ETag was read (If-Match "
                               f"{header[:80]}); it is {current} now: read it again", "FAILED_PRECONDITION",
                          etag=current)

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
            await self(request, lambda c: c.who_am_i())  # a key the cluster takes, before any name is said
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


def allowed(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})  # any method: which paths match
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


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
        answer = problem_response(request, Problem(exc.status_code, detail))
        answer.headers.update(exc.headers or {})
        if exc.status_code == 405:  # every method of the path, not only its first route's (RFC 9110)
            answer.headers["Allow"] = ", ".join(allowed(request))
        return answer

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
                        page_size: int | None = None, page_token: str = "", stale: bool = False,
                        cluster: str = "", wait: Wait = None, index: Index = None) -> Response:
        """`index` (and `wait`, 30s by default 60s, at most 300s): answer once a job changed after that
        revision (X-XCE-Index of an earlier answer), or when the wait is over. `If-None-Match`: 304."""
        size = forms.page_size(page_size)
        other, _ = await call.other(request, cluster)
        if other is not None:
            no_blocking(other, wait, index)
            return await conditional_answer(request, await other.jobs(filters, size), 0)
        wanted = api.ListJobsRequest(filters=filters, page_size=size, page_token=page_token, stale=stale)
        await call.blocked(request, wait, index, blocking.of_jobs)
        page = await call(request, lambda c: c.call("JobService", "ListJobs", wanted, api.ListJobsResponse))
        return await conditional_answer(request, {"jobs": render.messages(page.jobs),
                                                  "next_page_token": page.next_page_token,
                                                  "revision": str(page.revision)}, page.revision)

    @app.get(f"{PREFIX}/jobs/{{job_id}}", summary="One job: numeric id, readable id, or array element")
    async def get_job(request: Request, job_id: str, stale: bool = False, cluster: str = "",
                      wait: Wait = None, index: Index = None) -> Response:
        """Its `ETag` goes in `If-Match` of a write that must find it unchanged; `If-None-Match`:
        304; `index` and `wait`: answer once the job changed after that revision (as /jobs)."""
        other, job_id = await call.other(request, cluster, job_id)
        if other is not None:
            no_blocking(other, wait, index)
            return await conditional_answer(request, await other.job(job_id), 0)

        def read(c: Client) -> api.JobResponse:
            return c.call("JobService", "GetJob", api.GetJobRequest(job_id=job_id, stale=stale),
                          api.JobResponse)

        if conditional.wait_of(wait, index) is not None:
            first = (await call(request, read)).job  # which job's changes to wait for
            await call.blocked(request, wait, index, blocking.of_job({first.id, first.array_id} - {0}))
        found = await call(request, read)
        return await conditional_answer(request, render.message(found.job), found.revision)

    @app.post(f"{PREFIX}/jobs/{{job_id}}/actions", summary="kill, stop, resume, hold, release or requeue")
    async def act(request: Request, job_id: str, dry_run: bool = False, cluster: str = "") -> Any:
        """The job after the action; `dry_run=true`: {"dry_run": what would happen, "job": as it is}."""
        api_key(request)
        action = forms.action(await read_json(request))
        other, job_id = await call.other(request, cluster, job_id)
        if other is not None:
            no_match(request)
            return await other.control(job_id, api.ControlAction.Name(action).lower(), dry_run)
        await call.check_match(request, job_id, dry_run)
        note = audit_note(dry_run)
        return written(job_answer(await call(request, lambda c: c.control_job(job_id, action, audit=note))),
                       job_id)


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
    async def modify(request: Request, job_id: str, dry_run: bool = False, cluster: str = "") -> Any:
        """The job after the change; `dry_run=true`: {"dry_run": what would happen, "job": as it is}."""
        api_key(request)
        change = forms.modification(await read_json(request))
        other, job_id = await call.other(request, cluster, job_id)
        if other is not None:
            raise other.backend.unsupported("modify a job", "the gateway relays no modification to it")
        await call.check_match(request, job_id, dry_run)
        note = audit_note(dry_run)
        return written(job_answer(await call(request, lambda c: c.modify_job(job_id, **change, audit=note))),
                       job_id)

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
    async def hosts(request: Request, stale: bool = False, cluster: str = "", wait: Wait = None,
                    index: Index = None) -> Response:
        """`ETag`, `If-None-Match`, and blocking with `index` and `wait`, as /jobs (on host changes)."""
        other, _ = await call.other(request, cluster)
        if other is not None:
            no_blocking(other, wait, index)
            return await conditional_answer(request, await other.hosts(), 0)
        await call.blocked(request, wait, index, blocking.of_hosts)
        found = await call(request, lambda c: c.list_hosts(stale))
        return await conditional_answer(request, render.message(found), found.revision)

    @app.get(f"{PREFIX}/queues", summary="Queues")
    async def queues(request: Request, stale: bool = False, cluster: str = "", wait: Wait = None,
                     index: Index = None) -> Response:
        """`ETag`, `If-None-Match`, and blocking with `index` and `wait`, as /jobs (on queue changes)."""
        other, _ = await call.other(request, cluster)
        if other is not None:
            no_blocking(other, wait, index)
            return await conditional_answer(request, await other.queues(), 0)
        await call.blocked(request, wait, index, blocking.of_queues)
        found = await call(request, lambda c: c.list_queues(stale))
        return await conditional_answer(request, render.message(found), found.revision)

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
                     job: Annotated[list[str], Query()] = [],  # noqa: B006
                     since: Since = None, cluster: str = "") -> StreamingResponse:
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
                                users=frozenset(user), queues=frozenset(queue), job_ids=sse.job_ids(job))
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


def _add_health_routes(app: FastAPI, call: Caller) -> None:
    """Health for load balancers and orchestrators, without a key (Kubernetes' probes carry none):
    they say whether the gateway serves, never what the cluster holds."""
    ready = Readiness(call)

    @app.get("/healthz", summary="Liveness: the gateway answers (no key)")
    async def healthz() -> dict[str, Any]:
        return {"ok": True}

    @app.get("/readyz", summary="Readiness: a leader answers and the event stream is caught up (no key)")
    async def readyz() -> JSONResponse:
        answer = await ready.check()
        shown = {"ok": answer["ok"]} if answer["ok"] else {"ok": False, "why": answer["why"]}
        return JSONResponse(shown, status_code=200 if answer["ok"] else 503,
                            headers={} if answer["ok"] else {"Retry-After": "1"})


class Readiness:
    """Whether the gateway can serve now: a linearizable read through it succeeds (so a leader is
    known and answers), and its event hub has reached what that read saw. Its answer says why not in
    words that tell nothing of the cluster (the log has the details). Asked of the cluster at
    most once a second, whoever calls: a probe without a key must not be a way to load the leader."""

    def __init__(self, call: Caller) -> None:
        self.call = call
        self._last: tuple[float, dict[str, Any]] | None = None
        self._lock = asyncio.Lock()

    async def check(self) -> dict[str, Any]:
        async with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < READY_CACHE_S:
                return self._last[1]
            answer = await self._ask()
            self._last = (time.monotonic(), answer)
            return answer

    async def _ask(self) -> dict[str, Any]:
        backend, hub = self.call.backend, self.call.hubs[0] if self.call.hubs else None
        if not backend.own.token:
            return {"ok": False, "why": "the gateway has no key of its own ($XCE_TOKEN, role gateway)"}
        client = backend.client(backend.own.token)
        try:
            status = await run_in_threadpool(client.status)
            queues = await run_in_threadpool(client.list_queues)  # linearizable: the leader answers
        except XceError as exc:
            log.warning("not ready: the cluster did not answer: %s: %s", exc.code_name, exc.message[:200])
            return {"ok": False, "why": f"the cluster did not answer ({exc.code_name})"}
        finally:
            backend.learned(client)
        leader = next((f"{r.id} ({r.grpc_address})" for r in status.replicas if r.role == "leader"), "")
        answer: dict[str, Any] = {"ok": True, "leader": leader, "revision": str(queues.revision)}
        if not leader:
            return {**answer, "ok": False, "why": "no replica says it leads"}
        if hub is None or hub.floor is None:
            return {**answer, "ok": False, "why": "the event stream has not started"}
        deadline = time.monotonic() + READY_CACHE_S
        while hub.revision < queues.revision and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        answer["event_revision"] = str(hub.revision)
        if hub.revision < queues.revision:
            log.warning("not ready: the event stream is at revision %d, the leader at %d", hub.revision,
                        queues.revision)
            return {**answer, "ok": False, "why": "the event stream is behind the leader"}
        return answer


READY_CACHE_S = 1.0
MAX_BLOCKED = 1024  # blocking reads waiting at once, whoever sends them
MAX_BLOCKED_PER_USER = 64  # ... of one principal's keys


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
