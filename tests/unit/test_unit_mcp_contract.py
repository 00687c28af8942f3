"""The MCP tools' contract, in process against a gateway that answers from memory: the tool list with
its schemas and annotations (a golden file: a change to any tool's contract shows in review), the
tools each key is shown and may call, and results that validate against their output schemas.

`XCE_REWRITE=1` rewrites tests/golden/mcp/tools.json with what the code gives (read the diff)."""

from __future__ import annotations

import asyncio
import json
import os
import typing
from pathlib import Path
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped]
import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from mcp_types import Tool as MCPTool

from gateway import agent_advice, mcp_access, mcp_schema
from gateway.mcp_client import Gateway
from gateway.mcp_server import KeyedServer, build

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "mcp" / "tools.json"
READS = ("cluster.read", "jobs.read", "jobs.read.all")
OPERATOR = {"name": "ann", "role": "mcp_operator",
            "permissions": [*READS, "jobs.submit", "jobs.control.all", "jobs.modify.all"]}
READONLY = {"name": "ann", "role": "mcp_readonly", "permissions": list(READS)}
WRITES = {"scheduler_submit", "scheduler_cancel", "scheduler_hold", "scheduler_release", "scheduler_modify"}

JOB = {"id": "12", "readable_id": "c-1-20261204120000-12", "state": "EXIT", "exit_code": 3, "host": "w1",
       "exit_reason": "MEMLIMIT", "start_time_ms": "1000", "end_time_ms": "5000",
       "usage": {"max_rss_kb": "204800"},
       "spec": {"command": ["python3", "grow.py"], "name": "grower", "user": "ann", "queue": "normal",
                "mem_limit_mb": 100}}
HOST = {"spec": {"name": "w1", "slots": 2, "memory_mb": "8192"}, "status": "HOST_OK", "slots_used": 1,
        "load": {"r1m": 0.5}}
ANSWERS: dict[tuple[str, str], Any] = {
    ("GET", "/clusters"): {"clusters": [{"name": "c", "backend": "xce", "local": True, "healthy": True,
                                         "health": "this gateway's own cluster", "supports": ["submit"],
                                         "cannot": [], "in_scope": True}], "default": "c"},
    ("GET", "/status"): {"cluster_id": "c", "scheduler_lease_holder": "sched-1",
                         "replicas": [{"id": 1, "role": "leader", "health": "ok"}]},
    ("GET", "/hosts"): {"hosts": [HOST]},
    ("GET", "/queues"): {"queues": [{"name": "normal", "priority": 30}], "default_queue": "normal"},
    ("GET", "/jobs"): {"jobs": [JOB, {**JOB, "id": "13", "state": "PEND", "pending_code": "PEND_JOB_HELD",
                                      "pending_reason": "held"}]},
    ("GET", "/jobs/12"): JOB,
    ("GET", "/jobs/12/output"): "grew\n",
    ("GET", "/history"): {"jobs": [JOB]},
    ("POST", "/jobs"): {"jobs": [{**JOB, "state": "PEND"}]},
    ("POST", "/jobs/12/actions"): {**JOB, "state": "PSUSP"},
    ("PATCH", "/jobs/12"): JOB,
}
CALLS: dict[str, dict[str, Any]] = {
    "scheduler_list_clusters": {}, "scheduler_cluster_status": {}, "scheduler_list_jobs": {"state": "PEND"},
    "scheduler_get_job": {"job_id": "12"}, "scheduler_list_hosts": {}, "scheduler_list_queues": {},
    "scheduler_pending_reasons": {}, "scheduler_job_output": {"job_id": "12", "stream": "stderr"},
    "scheduler_submit": {"command": ["true"], "template": "multi_core", "slots": 2},
    "scheduler_cancel": {"job_id": "12"}, "scheduler_hold": {"job_id": "12"},
    "scheduler_release": {"job_id": "12"}, "scheduler_modify": {"job_id": "12", "priority": 5},
    "scheduler_analyze_failure": {"job_id": "12"},
    "scheduler_suggest_resources": {"command": ["/usr/bin/python3"]},
    "scheduler_estimate_wait_time": {"slots": 2, "template": "parallel"},
}


class FakeGateway:
    """The gateway's REST API from ANSWERS, for keys named in `keys` (their GET /whoami); records
    every request. A key's write without the permission is refused as the controllers would."""

    def __init__(self, keys: dict[str, dict[str, Any]]) -> None:
        self.keys = keys
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path.removeprefix("/xce/v1")
        who = self.keys.get(request.headers.get("authorization", "").removeprefix("Bearer "))
        if who is None:
            return httpx.Response(401, json={"title": "Unauthorized", "detail": "unknown key"})
        if path == "/whoami":
            return httpx.Response(200, json=who)
        if request.method != "GET" and "jobs.submit" not in who["permissions"]:
            return httpx.Response(403, json={"title": "Forbidden", "detail": f"role {who['role']} lacks it"})
        answer = ANSWERS[(request.method, path)]
        if isinstance(answer, str):
            return httpx.Response(200, text=answer, headers={"x-xce-output-size": "5", "x-xce-host": "w1"})
        if request.url.params.get("dry_run") == "true":
            answer = {"dry_run": "would do it", "job": JOB, "jobs": [JOB]}
        return httpx.Response(200, json=answer)

    def writes(self) -> list[str]:
        return [f"{r.method} {r.url.path} {r.url.query.decode()}" for r in self.requests
                if r.method != "GET"]


def serve(key: str, keys: dict[str, dict[str, Any]] | None = None) -> tuple[KeyedServer, FakeGateway]:
    fake = FakeGateway(keys if keys is not None else {"op": OPERATOR, "ro": READONLY})
    return build(Gateway("http://gateway.test", key, transport=httpx.MockTransport(fake))), fake


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def listed(server: KeyedServer) -> list[MCPTool]:
    return run(server.list_tools())  # type: ignore[no-any-return]


def contract(tools: list[MCPTool]) -> list[dict[str, Any]]:
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]


def test_the_tool_list_with_its_schemas_and_annotations_is_the_golden_one() -> None:
    got = json.dumps(contract(listed(serve("op")[0])), indent=1) + "\n"
    if os.environ.get("XCE_REWRITE"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), "a tool's contract changed: XCE_REWRITE=1 rewrites the golden file"


def test_every_parameter_is_described_with_an_example() -> None:
    for tool in listed(serve("op")[0]):
        properties = tool.input_schema.get("properties", {})
        for name, schema in properties.items():
            assert len(schema.get("description", "")) >= 20, (tool.name, name)
            assert schema.get("examples"), (tool.name, name)
        assert tool.description and tool.output_schema and tool.output_schema["type"] == "object"


def test_closed_sets_are_enums() -> None:
    tools = {tool.name: tool.input_schema["properties"] for tool in listed(serve("op")[0])}
    assert tools["scheduler_submit"]["template"]["enum"] == list(agent_advice.TEMPLATES)
    assert tools["scheduler_job_output"]["stream"]["enum"] == ["stdout", "stderr"]
    states = tools["scheduler_list_jobs"]["state"]["anyOf"][0]["enum"]
    assert states == ["PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "DONE", "EXIT", "UNKWN"]
    assert tools["scheduler_job_output"]["tail_bytes"]["maximum"] == mcp_schema.MAX_TAIL_BYTES
    assert typing.get_args(mcp_schema.TemplateName) == tuple(agent_advice.TEMPLATES)


def test_every_tool_is_annotated_as_what_it_does() -> None:
    tools = listed(serve("op")[0])
    assert [tool.name for tool in tools] == list(mcp_access.TOOL_NAMES)  # added in the table's order
    for tool in tools:
        notes = tool.annotations
        assert notes is not None and notes.title and tool.title == notes.title, tool.name
        assert notes.open_world_hint is False and notes.idempotent_hint is not None, tool.name
        assert notes.read_only_hint is (tool.name not in WRITES), tool.name
        assert notes.destructive_hint is (tool.name == "scheduler_cancel"), tool.name
    by_name = {tool.name: tool.annotations for tool in tools}
    assert by_name["scheduler_submit"].idempotent_hint is False  # type: ignore[union-attr]
    assert all(by_name[n].idempotent_hint for n in ("scheduler_hold", "scheduler_release",  # type: ignore[union-attr]
                                                      "scheduler_cancel", "scheduler_modify"))


def test_a_read_only_key_lists_no_write_tool_and_is_refused_one_after_a_dry_run() -> None:
    server, fake = serve("ro")
    names = {tool.name for tool in listed(server)}
    assert names == set(mcp_access.TOOL_NAMES) - WRITES
    with pytest.raises(ToolError) as refused:
        run(server.call_tool("scheduler_submit", {"command": ["true"]}))
    words = str(refused.value)
    assert words.startswith("refused: scheduler_submit needs jobs.submit, which role mcp_readonly")
    assert "The cluster says: Forbidden: role mcp_readonly lacks it" in words
    with pytest.raises(ToolError, match="needs jobs.control"):
        run(server.call_tool("scheduler_cancel", {"job_id": "12"}))
    # the cluster was asked only dry runs (and so could record the attempts): nothing changed
    assert fake.writes() == ["POST /xce/v1/jobs dry_run=true", "POST /xce/v1/jobs/12/actions dry_run=true"]
    assert isinstance(run(server.call_tool("scheduler_get_job", {"job_id": "12"})), CallToolResult)


def test_a_refused_tool_changes_nothing_even_when_the_cluster_would_take_it() -> None:
    """The rights the server read and the cluster's may differ for a moment (a role file re-read):
    a tool the key was not shown still does nothing but a dry run."""
    server, fake = serve("ro", {"ro": READONLY})
    fake.keys = {"ro": {**READONLY}}
    run(server.list_tools())  # rights remembered: read-only
    fake.keys["ro"]["permissions"] = [*READS, "jobs.submit", "jobs.control"]
    with pytest.raises(ToolError, match="not among this key's tools") as refused:
        run(server.call_tool("scheduler_hold", {"job_id": "12"}))
    assert "The cluster says" not in str(refused.value)
    assert fake.writes() == ["POST /xce/v1/jobs/12/actions dry_run=true"]


def test_a_scoped_key_is_shown_only_its_scope_s_actions() -> None:
    scoped = {**OPERATOR, "scope": {"actions": ["submit", "hold"], "queues": ["normal"]}}
    server, _ = serve("sc", {"sc": scoped})
    names = {tool.name for tool in listed(server)}
    assert names & WRITES == {"scheduler_submit", "scheduler_hold"}
    with pytest.raises(ToolError, match="kill, not among the actions of this key's scope"):
        run(server.call_tool("scheduler_cancel", {"job_id": "12"}))


def test_a_key_without_job_reads_is_shown_no_job_tool() -> None:
    hosts_only = {"name": "mon", "role": "monitor", "permissions": ["cluster.read"]}
    server, fake = serve("mon", {"mon": hosts_only})
    names = [tool.name for tool in listed(server)]
    assert names == ["scheduler_list_clusters", "scheduler_list_hosts", "scheduler_list_queues"]
    with pytest.raises(ToolError, match="needs jobs.read"):
        run(server.call_tool("scheduler_list_jobs", {}))
    assert [r.url.path for r in fake.requests] == ["/xce/v1/whoami"]  # a read it may not: not even asked


@pytest.mark.parametrize("keys", [{}, None], ids=["key-not-taken", "gateway-down"])
def test_without_the_key_s_rights_no_list_is_given(keys: dict[str, Any] | None) -> None:
    if keys is None:
        def down(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("refused", request=request)
        server = build(Gateway("http://gateway.test", "op", transport=httpx.MockTransport(down)))
        why = "did not answer"
    else:
        server, _ = serve("op", keys)
        why = "does not take this key"
    with pytest.raises(MCPError, match=why):
        listed(server)
    with pytest.raises(ToolError, match=why):
        run(server.call_tool("scheduler_list_jobs", {}))


def test_a_key_s_rights_are_asked_once_while_remembered() -> None:
    server, fake = serve("op")
    listed(server)
    listed(server)
    run(server.call_tool("scheduler_get_job", {"job_id": "12"}))
    assert [r.url.path for r in fake.requests].count("/xce/v1/whoami") == 1


def test_every_structured_result_validates_against_its_output_schema() -> None:
    server, _ = serve("op")
    schemas = {tool.name: tool.output_schema for tool in listed(server)}
    assert set(CALLS) == set(schemas) - {"scheduler_wait_job"}  # waiting needs a request's progress
    for name, arguments in CALLS.items():
        for dry_run in ((False, True) if name in WRITES else (False,)):
            result = run(server.call_tool(name, {**arguments, **({"dry_run": True} if dry_run else {})}))
            assert isinstance(result, CallToolResult) and not result.is_error, (name, result)
            jsonschema.validate(result.structured_content, schemas[name])
            assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    analyzed = run(server.call_tool("scheduler_analyze_failure", {"job_id": "12"})).structured_content
    assert analyzed["exit_reason"] == "MEMLIMIT" and analyzed["stderr_tail"] == "grew\n"
    hosts = run(server.call_tool("scheduler_list_hosts", {})).structured_content
    assert hosts["hosts"][0]["memory_mb"] == 8192  # a number, though the gateway's JSON has a string


def test_arguments_outside_the_schema_are_refused_by_it() -> None:
    server, fake = serve("op")
    bad: list[tuple[str, dict[str, Any], str]] = [
        ("scheduler_submit", {"command": ["x"], "template": "gpu_magic"}, "general_serial"),
        ("scheduler_submit", {"command": []}, "at least 1"),
        ("scheduler_list_jobs", {"state": "RUNNING"}, "PEND"),
        ("scheduler_job_output", {"job_id": "12", "tail_bytes": 10 << 20}, "less than or equal"),
        ("scheduler_wait_job", {"job_id": "12", "timeout_s": -1}, "greater than or equal"),
    ]
    for name, arguments, why in bad:
        with pytest.raises(ToolError, match=why):
            run(server.call_tool(name, arguments))
    assert fake.writes() == []
