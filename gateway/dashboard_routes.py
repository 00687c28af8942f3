"""The web dashboard, served by the gateway at /ui/: plain HTML, one script, no build step.

Sign-in posts the API key once (`POST /ui/session`, a JSON body, never a URL); the gateway checks it
with the controllers (WhoAmI) and keeps it in an HttpOnly, SameSite=Strict cookie, which the page's
reads and its event stream then carry (app.py takes the cookie for GET requests only: the dashboard
reads, and a write always needs the Authorization header, so no other site can make one with it).
Every page is sent with a Content-Security-Policy that allows only this origin's script and style,
never an inline one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from gateway.backend import Backend
from gateway.problems import Problem

FILES = Path(__file__).resolve().parent / "dashboard"
COOKIE = "xce_key"
CONTENT = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
           "app.css": "text/css; charset=utf-8"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
SESSION_S = 12 * 3600  # the cookie's life; the key's own expiry and revocation still apply


def add_routes(app: FastAPI, backend: Backend, read_json: Any) -> None:
    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/ui/", include_in_schema=False)
    async def page() -> Response:
        return _file("index.html")

    @app.get("/ui/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in CONTENT or name == "index.html":
            raise Problem(404, f"no such path: /ui/{name[:60]}")
        return _file(name)

    @app.post("/ui/session", include_in_schema=False, status_code=204)
    async def sign_in(request: Request) -> Response:
        body = await read_json(request)
        key = body.get("key") if isinstance(body, dict) else None
        if not isinstance(key, str) or not key.strip() or not key.isascii() or len(key) > 512:
            raise Problem(400, "send {\"key\": \"<your API key>\"}")
        client = backend.client(key.strip())
        await run_in_threadpool(client.who_am_i)  # a wrong or revoked key: 401 from the controllers
        answer = Response(status_code=204)
        answer.set_cookie(COOKIE, key.strip(), max_age=SESSION_S, httponly=True, samesite="strict",
                          secure=request.url.scheme == "https", path="/")
        return answer

    @app.delete("/ui/session", include_in_schema=False, status_code=204)
    async def sign_out() -> Response:
        answer = Response(status_code=204)
        answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return answer


def _file(name: str) -> Response:
    return Response((FILES / name).read_bytes(), media_type=CONTENT[name], headers=HEADERS)
