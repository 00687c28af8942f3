"""The MCP server (`xce mcp`) driven by the official SDK's own client over stdio, against a real cluster
(three replicas, a scheduler, a worker) through a real gateway: every tool, and golden sequences with
fixed expected results. The tool list the server sends is the golden contract
(tests/golden/mcp/tools.json, held to the code by tests/unit/test_unit_mcp_contract.py), and every
structured result validates against its tool's output schema."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped]
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ops.local_cluster import LocalCluster, LocalGateway
from tests.conftest import FAST_HOSTS

pytestmark = pytest.mark.cluster

GROW = """
import time
print("grew", flush=True)
held = []
for _ in range(100):  # up to 500 MB, 5 MB every 20 ms: a 100 MB limit is met on the way
    held.append(bytearray(5 << 20))
    time.sleep(0.02)
time.sleep(30)
"""
TOOLS = {"scheduler_cluster_status", "scheduler_list_jobs", "scheduler_get_job", "scheduler_list_hosts",
         "scheduler_list_queues", "scheduler_pending_reasons", "scheduler_submit", "scheduler_cancel",
         "scheduler_hold", "scheduler_release", "scheduler_modify", "scheduler_wait_job",
         "scheduler_analyze_failure", "scheduler_suggest_resources", "scheduler_estimate_wait_time",
         "scheduler_job_output", "scheduler_list_clusters"}
WRITES = {"scheduler_submit", "scheduler_cancel", "scheduler_hold", "scheduler_release", "scheduler_modify"}
GOLDEN_TOOLS = Path(__file__).resolve().parents[1] / "golden" / "mcp" / "tools.json"


@pytest.fixture
def served(make_scheduled) -> Iterator[tuple[LocalCluster, LocalGateway, str]]:  # type: ignore[no-untyped-def]
    cluster, workers = make_scheduled(FAST_HOSTS)
    workers.start("w1", 2, "usage_report_s = 1\nmemory_poll_s = 0.2\n")
    gateway = LocalGateway(cluster)
    me = pwd.getpwuid(os.getuid()).pw_name  # jobs run as their owner: a real account
    key = cluster.new_token(me, "mcp_operator")
    try:
        gateway.start()
        yield cluster, gateway, key
    finally:
        gateway.kill()


class Agent:
    """An MCP client session; `call` returns a tool's structured result (checked against the tool's
    output schema, as listed), or its error text."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.progress: list[str] = []
        self.output_schemas: dict[str, Any] = {}

    async def call(self, tool: str, **arguments: Any) -> Any:
        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            self.progress.append(message or "")

        if not self.output_schemas:
            self.output_schemas = {t.name: t.output_schema for t in (await self.session.list_tools()).tools}
        result = await self.session.call_tool(tool, arguments, progress_callback=progressed)
        text = "".join(getattr(part, "text", "") for part in result.content)
        if result.is_error:
            return {"error": text}
        jsonschema.validate(result.structured_content, self.output_schemas[tool])
        return result.structured_content


def with_agent(gateway: LocalGateway, key: str, script: Any) -> Any:
    async def main() -> Any:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "cli", "mcp", "--gateway", gateway.url],
                                       env={**os.environ, "XCE_TOKEN": key})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await script(Agent(session))

    return asyncio.run(asyncio.wait_for(main(), 240))


def unwrap(value: Any) -> Any:
    """A tool's structured result: a dict returned by the tool comes as itself, or under "result"."""
    return value.get("result", value) if isinstance(value, dict) and set(value) == {"result"} else value


def test_every_tool_against_a_live_cluster(served: tuple[LocalCluster, LocalGateway, str],
                                           tmp_path: Path) -> None:
    cluster, gateway, key = served

    async def script(agent: Agent) -> dict[str, Any]:
        listed = await agent.session.list_tools()
        names = {tool.name for tool in listed.tools}
        out: dict[str, Any] = {"names": names, "contract": [tool.model_dump(mode="json", by_alias=True,
                                                                            exclude_none=True)
                                                             for tool in listed.tools],
                               "instructions": agent.session._initialize_result.instructions}  # noqa: SLF001
        for name in ("scheduler_cluster_status", "scheduler_list_hosts", "scheduler_list_queues"):
            out[name] = unwrap(await agent.call(name))
        dry = unwrap(await agent.call("scheduler_submit", command=["sleep", "30"], name="try", dry_run=True,
                                      cwd=str(tmp_path)))
        out["dry"] = dry
        out["after_dry"] = unwrap(await agent.call("scheduler_list_jobs"))
        made = unwrap(await agent.call("scheduler_submit", command=["sleep", "30"], template="multi_core",
                                       slots=2, name="wide", cwd=str(tmp_path)))
        waiting = unwrap(await agent.call("scheduler_submit", command=["true"], name="later",
                                          cwd=str(tmp_path)))
        job, later = made["submitted"]["id"], waiting["submitted"]["id"]
        out["hold_dry"] = unwrap(await agent.call("scheduler_hold", job_id=later, dry_run=True))
        out["hold"] = unwrap(await agent.call("scheduler_hold", job_id=later))
        out["reasons"] = unwrap(await agent.call("scheduler_pending_reasons", job_id=later))
        out["all_reasons"] = unwrap(await agent.call("scheduler_pending_reasons"))
        out["modify"] = unwrap(await agent.call("scheduler_modify", job_id=later, priority=5))
        out["release"] = unwrap(await agent.call("scheduler_release", job_id=later))
        out["get"] = unwrap(await agent.call("scheduler_get_job", job_id=later))
        out["estimate"] = unwrap(await agent.call("scheduler_estimate_wait_time", command=["x"], slots=2,
                                                  template="multi_core"))
        out["cancel"] = unwrap(await agent.call("scheduler_cancel", job_id=job))
        out["wait"] = unwrap(await agent.call("scheduler_wait_job", job_id=later, timeout_s=60))
        out["suggest"] = unwrap(await agent.call("scheduler_suggest_resources", command=["/bin/true"]))
        said = unwrap(await agent.call("scheduler_submit", command=["sh", "-c", "echo out; echo err >&2"],
                                       name="talker", cwd=str(tmp_path)))
        await agent.call("scheduler_wait_job", job_id=said["submitted"]["id"], timeout_s=60)
        out["stdout"] = unwrap(await agent.call("scheduler_job_output", job_id=said["submitted"]["id"]))
        out["stderr"] = unwrap(await agent.call("scheduler_job_output", job_id=said["submitted"]["id"],
                                                stream="stderr"))
        out["bad"] = await agent.call("scheduler_submit", command=["x"], template="gpu_magic")
        out["unknown"] = await agent.call("scheduler_get_job", job_id="999999")
        out["progress"] = list(agent.progress)
        return out

    out = with_agent(gateway, key, script)
    assert out["names"] == TOOLS and out["contract"] == json.loads(GOLDEN_TOOLS.read_text())
    assert "dry_run" in out["instructions"] and "audit trail" in out["instructions"]
    status = out["scheduler_cluster_status"]
    assert [r["role"] for r in status["replicas"]].count("leader") == 1 and status["hosts"]["up"] == 1
    assert status["hosts"]["slots"] == 2 and status["scheduler"] == "sched-1"
    assert [h["name"] for h in out["scheduler_list_hosts"]["hosts"]] == ["w1"]
    assert "normal" in {q["name"] for q in out["scheduler_list_queues"]["queues"]}
    assert out["dry"]["dry_run"].startswith("would submit job 'try'") and out["after_dry"]["jobs"] == []
    assert out["hold_dry"]["dry_run"].endswith("PEND -> PSUSP") and out["hold"]["job"]["state"] == "PSUSP"
    assert out["reasons"]["pending_code"] == "PEND_JOB_HELD"
    held = [g for g in out["all_reasons"]["by_reason"] if g["code"] == "PEND_JOB_HELD"]
    assert [g["first"] for g in held] == [[out["get"]["id"]]] and held[0]["reason"]
    assert out["modify"]["job"]["state"] == "PSUSP" and out["get"]["spec"]["priority"] == 5
    assert out["release"]["job"]["state"] == "PEND"
    assert out["estimate"]["start_in_s"] is not None and out["estimate"]["assumed"]
    assert out["cancel"]["job"]["state"] in ("RUN", "EXIT")  # running: killed as its processes end
    assert out["wait"]["ended"] and out["wait"]["job"]["state"] == "DONE"
    assert any("DONE" in p for p in out["progress"])  # progress notifications as its state changed
    assert out["suggest"]["based_on"] >= 1 and out["suggest"]["program"] == "true"
    assert (out["stdout"]["text"], out["stdout"]["host"], out["stdout"]["size"]) == ("out\n", "w1", 4)
    assert out["stderr"]["text"] == "err\n" and not out["stderr"]["truncated"]
    templates = "Input should be 'general_serial', 'multi_core', 'parallel' or 'high_memory'"
    assert templates in out["bad"]["error"]  # the schema's enum, before anything is asked
    assert "Not Found" in out["unknown"]["error"] and "999999" in out["unknown"]["error"]

    # A read-only key is shown no write tool; one called anyway is refused, and the cluster records
    # the attempt (the server sends it as a dry run for that), changing nothing.
    me = pwd.getpwuid(os.getuid()).pw_name
    readonly = cluster.new_token(me, "mcp_readonly")

    async def looks(agent: Agent) -> dict[str, Any]:
        return {"names": {tool.name for tool in (await agent.session.list_tools()).tools},
                "submit": await agent.call("scheduler_submit", command=["true"], name="not-for-it",
                                           cwd=str(tmp_path)),
                "hold": await agent.call("scheduler_hold", job_id=out["get"]["id"]),
                "jobs": unwrap(await agent.call("scheduler_list_jobs", limit=500))}

    seen = with_agent(gateway, readonly, looks)
    assert seen["names"] == TOOLS - WRITES
    assert seen["submit"]["error"].startswith("refused: scheduler_submit needs jobs.submit, which role "
                                              "mcp_readonly"), seen["submit"]
    assert "Forbidden" in seen["submit"]["error"] and "needs jobs.control" in seen["hold"]["error"]
    assert "not-for-it" not in {j["name"] for j in seen["jobs"]["jobs"]} and seen["jobs"]["jobs"]
    admin = cluster.new_token("root", "cluster_admin")
    rows = httpx.get(f"{gateway.url}/xce/v1/audit", params={"principal": me, "page_size": 1000},
                     headers={"Authorization": f"Bearer {admin}"}, timeout=30).json()["records"]
    refused = [(r["action"], r["outcome"]) for r in rows if r["role"] == "mcp_readonly"]
    assert sorted(refused) == [("hold", "REFUSED"), ("submit", "REFUSED")], rows


def test_golden_submit_wait_analyze_a_job_out_of_memory(served: tuple[LocalCluster, LocalGateway, str],
                                                       tmp_path: Path) -> None:
    """submit -> wait -> output -> analyze on a job killed for memory: fixed results (ids, times and
    sizes aside)."""
    cluster, gateway, key = served
    (tmp_path / "grow.py").write_text(GROW)

    async def script(agent: Agent) -> list[Any]:
        grow = [sys.executable, str(tmp_path / "grow.py")]
        made = unwrap(await agent.call("scheduler_submit", command=grow, mem_mb=100, name="grower",
                                       cwd=str(tmp_path)))
        job = made["submitted"]["id"]
        waited = unwrap(await agent.call("scheduler_wait_job", job_id=job, timeout_s=120))
        output = unwrap(await agent.call("scheduler_job_output", job_id=job, stream="stdout"))
        analysis = unwrap(await agent.call("scheduler_analyze_failure", job_id=job))
        return [made, waited, output, analysis]

    made, waited, output, analysis = with_agent(gateway, key, script)
    assert {k: made["submitted"][k] for k in ("name", "queue", "slots", "state")} == {
        "name": "grower", "queue": "normal", "slots": 1, "state": "PEND"}
    ended = (waited["ended"], waited["job"]["state"], waited["job"]["exit_reason"])
    assert ended == (True, "EXIT", "MEMLIMIT")
    shown = (output["stream"], output["host"], output["text"], output["truncated"])
    assert shown == ("stdout", "w1", "grew\n", False)
    assert analysis["exit_reason"] == "MEMLIMIT" and analysis["state"] == "EXIT"
    assert analysis["causes"][0].startswith("killed for memory: its processes reached ")
    assert analysis["causes"][0].endswith("over its limit of 100 MB (-M)")
    assert analysis["suggestions"][0].startswith("ask for more memory: mem_mb ")
    assert int(analysis["suggestions"][0].rsplit(" ", 1)[1]) >= 200
    assert "stderr_tail" in analysis and not analysis["stderr_tail"].startswith("(not available")
