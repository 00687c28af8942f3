"""`python tests/cluster/mcp_call.py URL CALLS_JSON`: an MCP client over streamable HTTP (the official
SDK's), run by the tests as any uid. The key is $MCP_KEY (none if unset). CALLS_JSON is a list of [tool,
arguments]; it prints one JSON object: {"tools": [the names the key is shown], "results": [...]} (each a
tool's structured result, or {"error": text}), or {"refused": status, "www_authenticate": header} when the
server refused the session itself."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def session_calls(url: str, key: str, calls: list[list[Any]]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http, \
            streamable_http_client(url, http_client=http) as (read, write, *_), \
            ClientSession(read, write) as session:
        await session.initialize()
        tools = [tool.name for tool in (await session.list_tools()).tools]
        results = []
        for tool, arguments in calls:
            result = await session.call_tool(tool, arguments)
            text = "".join(getattr(part, "text", "") for part in result.content)
            if result.is_error:
                results.append({"error": text})
            else:
                value = result.structured_content
                value = json.loads(text) if value is None else value
                results.append(value.get("result", value) if set(value) == {"result"} else value)
        return {"tools": tools, "results": results}


def main(url: str, calls_json: str) -> int:
    key = os.environ.get("MCP_KEY", "")
    # The server's answer to the opening request, as a client without the SDK sees it first.
    opening = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "probe", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    probe = httpx.post(url, json=opening, headers=headers, timeout=30)
    if probe.status_code in (401, 403):
        print(json.dumps({"refused": probe.status_code,
                          "www_authenticate": probe.headers.get("www-authenticate", "")}))
        return 0
    print(json.dumps(asyncio.run(asyncio.wait_for(session_calls(url, key, json.loads(calls_json)), 120))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
