"""The web dashboard, served by the gateway at /ui/: plain HTML, one script, no build step; and
`GET /xce/v1/stats`, the live counts its overview draws.

Sign-in posts the API key once (`POST /ui/session`, a JSON body, never a URL); the gateway checks it
with the controllers (WhoAmI) and keeps it in an HttpOnly, SameSite=Strict cookie, beside a second
one holding a random session id. Reads (GET) and the event stream carry the cookie. A write carries
it only with proof that this page made it (`check_write`, called by app.py's api_key): the header
X-XCE-CSRF with the session's token, HMAC-SHA256 keyed by the API key over the session id (so no
one without the key can make one, and it is bound to that session), and an Origin header naming
this gateway. Another site's form or fetch can send neither the header nor this Origin, and
SameSite=Strict keeps the cookies off its requests in the first place: three locks, each enough.
The page asks for its token at `GET /ui/session` (a same-origin read: no other site can read it).

Every page is sent with a Content-Security-Policy that allows only this origin's script and style,
never an inline one. Vendored libraries (vendor/README.md) are served from a fixed list, by name.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from gateway import stats
from gateway.backend import Backend
from gateway.event_hub import EventHub
from gateway.problems import Problem

FILES = Path(__file__).resolve().parent / "dashboard"
COOKIE = "xce_key"
SESSION_COOKIE = "xce_session"
CSRF_HEADER = "X-XCE-CSRF"
JS, CSS = "text/javascript; charset=utf-8", "text/css; charset=utf-8"
# Every file served, by its path under /ui/ (nothing else under dashboard/ is reachable).
CONTENT = {"index.html": "text/html; charset=utf-8", "app.js": JS, "app.css": CSS, "charts.js": JS,
           "vendor/uPlot.iife.min.js": JS, "vendor/uPlot.min.css": CSS}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
VENDOR_CACHE = "public, max-age=86400"  # a vendored file changes only with its version (and name)
SESSION_S = 12 * 3600  # the cookie's life; the key's own expiry and revocation still apply
STATS_WAIT_S = 15.0    # for the hub's first snapshot


def csrf_token(key: str, session: str) -> str:
    return hmac.new(key.encode(), b"xce dashboard csrf\0" + session.encode(), hashlib.sha256).hexdigest()


def check_write(request: Request, key: str) -> None:
    """A write carrying the dashboard's cookie instead of an Authorization header: refused (403)
    unless it comes from this gateway's own page (see the module's opening)."""
    origin = request.headers.get("origin", "")
    if not origin or urlsplit(origin).netloc != request.headers.get("host", ""):
        raise Problem(403, "a write with the dashboard's cookie must come from the dashboard's own page "
                           "(Origin): other sites may not write with it", "PERMISSION_DENIED")
    if request.headers.get("sec-fetch-site", "same-origin") != "same-origin":
        raise Problem(403, "a write with the dashboard's cookie must be same-origin", "PERMISSION_DENIED")
    session = request.cookies.get(SESSION_COOKIE, "")
    sent = request.headers.get(CSRF_HEADER, "")
    if not session or not sent or not hmac.compare_digest(sent.encode(), csrf_token(key, session).encode()):
        raise Problem(403, f"a write with the dashboard's cookie needs its {CSRF_HEADER} header (the "
                           "session's token, GET /ui/session); or send Authorization: Bearer <key>",
                      "PERMISSION_DENIED")


def add_routes(app: FastAPI, backend: Backend, read_json: Any, api_key: Callable[[Request], str],
               hubs: Sequence[EventHub]) -> None:
    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/ui/", include_in_schema=False)
    async def page() -> Response:
        return _file("index.html")

    _add_session_routes(app, backend, read_json)

    # After /ui/session: the first route that matches a path answers it.
    @app.get("/ui/{name:path}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in CONTENT or name == "index.html":  # a fixed list: no path reaches anything else
            raise Problem(404, f"no such path: /ui/{name[:60]}")
        return _file(name)

    _add_stats_route(app, backend, api_key, hubs)


def _add_session_routes(app: FastAPI, backend: Backend, read_json: Any) -> None:
    @app.post("/ui/session", include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        # Said, not assumed: another site's form can post without a type, never as application/json
        # (which a browser sends across sites only after a preflight this gateway does not answer).
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise Problem(415, "sign in with a JSON body: Content-Type: application/json")
        body = await read_json(request)
        key = body.get("key") if isinstance(body, dict) else None
        if not isinstance(key, str) or not key.strip() or not key.isascii() or len(key) > 512:
            raise Problem(400, "send {\"key\": \"<your API key>\"}")
        key = key.strip()
        client = backend.client(key)
        await run_in_threadpool(client.who_am_i)  # a wrong or revoked key: 401 from the controllers
        session = secrets.token_urlsafe(24)
        answer = Response(b'{"csrf":"%s"}' % csrf_token(key, session).encode(), media_type="application/json",
                          headers={"Cache-Control": "no-store"})
        for name, value in ((COOKIE, key), (SESSION_COOKIE, session)):
            answer.set_cookie(name, value, max_age=SESSION_S, httponly=True, samesite="strict",
                              secure=_https(request), path="/")
        return answer

    @app.get("/ui/session", include_in_schema=False)
    async def session_token(request: Request) -> Response:
        key, session = request.cookies.get(COOKIE, ""), request.cookies.get(SESSION_COOKIE, "")
        if not key or not session:
            raise Problem(401, "not signed in to the dashboard")
        return Response(b'{"csrf":"%s"}' % csrf_token(key, session).encode(), media_type="application/json",
                        headers={"Cache-Control": "no-store"})

    @app.delete("/ui/session", include_in_schema=False, status_code=204)
    async def sign_out() -> Response:
        answer = Response(status_code=204)
        for name in (COOKIE, SESSION_COOKIE):
            answer.delete_cookie(name, path="/", httponly=True, samesite="strict")
        return answer


def _add_stats_route(app: FastAPI, backend: Backend, api_key: Callable[[Request], str],
                     hubs: Sequence[EventHub]) -> None:
    @app.get("/xce/v1/stats", summary="Live counts: jobs per queue and state, pending reasons, slots, "
                                      "hosts; the last hour per minute")
    async def live_stats(request: Request) -> dict[str, Any]:
        """Counted by the gateway from the cluster's event stream (no job list is read). A caller sees
        what its key may read: jobs with jobs.read (only its own with private_jobs), slots, hosts and
        slot utilization with cluster.read. `series`: per minute mark of the last hour, null where
        the gateway was not following the stream; marks before `estimated_until_ms` are estimates
        from the live jobs' times. 503 when this gateway has no event stream (no key of its own)."""
        client = backend.client(api_key(request))
        try:
            me = await run_in_threadpool(client.who_am_i)
        finally:
            backend.learned(client)
        if me.HasField("scope") and me.scope.clusters and me.cluster_id not in me.scope.clusters:
            raise Problem(403, f"outside the scope of this key ({me.name}): this cluster, {me.cluster_id}, "
                               "is not among its clusters", "PERMISSION_DENIED")
        held = set(me.permissions)
        viewer = stats.Viewer(me.name, jobs=bool(held & {"jobs.read", "jobs.read.all"}),
                              every_job=me.sees_every_job, cluster="cluster.read" in held)
        if not viewer.jobs and not viewer.cluster:
            raise Problem(403, f"{me.name} (role {me.role}) may not read counts: needs jobs.read or "
                               "cluster.read", "PERMISSION_DENIED")
        hub = hubs[0] if hubs else None
        if hub is None or not hub.usable:
            raise Problem(503, "live counts are not available: " + (hub.error if hub else "starting"))
        await _ready(hub)
        return hub.live.answer(viewer)


async def _ready(hub: EventHub) -> None:
    deadline = time.monotonic() + STATS_WAIT_S
    while not hub.live.ready:
        if time.monotonic() > deadline:
            why = hub.live.error or hub.error or "the gateway has not read the cluster's state yet"
            raise Problem(503, f"live counts are not available: {why}")
        await asyncio.sleep(0.05)


def _file(name: str) -> Response:
    headers = dict(HEADERS)
    if name.startswith("vendor/"):
        headers["Cache-Control"] = VENDOR_CACHE
    return Response((FILES / name).read_bytes(), media_type=CONTENT[name], headers=headers)


def _https(request: Request) -> bool:
    """Whether the browser came over TLS: to the gateway, or to a proxy in front that says so. A
    client that says so falsely only gets a cookie its own browser keeps off plain HTTP."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"
