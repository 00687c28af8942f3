"""The gateway's REST API as the MCP server's tools call it: every request with the caller's key.

`key`: the stdio caller's (the server's own). Without it, each call takes the key of the HTTP request
it serves (`get_access_token`: set by the SDK's bearer middleware from KeyVerifier). A refusal
becomes a ToolError carrying the gateway's own words, which the agent reads.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

import httpx
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.exceptions import ToolError

from gateway import agent_advice

PREFIX = "/xce/v1"
MAX_LISTED = 20_000     # jobs read for a status or an estimate (the rest is said to be left out)


class Gateway:
    """The gateway's REST API with the caller's key; a refusal becomes a ToolError with its detail."""

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

    async def watch(self, path: str, index: int, wait_s: float) -> tuple[Any, int]:
        """A blocking read of this gateway's own cluster (docs/GATEWAY.md): the answer once what it
        covers changed after `index` (0: at once), or after `wait_s`; and the index to give next."""
        params = {"index": index, "wait": f"{max(1, int(wait_s * 1000))}ms"} if index else {}
        answer = await self._send("GET", path, params=params)
        found = self._answer(answer)
        return found, int(answer.headers.get("x-xce-index", "0") or 0)

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
