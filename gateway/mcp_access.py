"""Which MCP tools a key may call, and what each tool tells a client about itself.

A key is shown only the tools it may call: `refusal(tool, caller)` says why a tool is not for it
(empty when it is), from what GET /whoami says of the key: its role's permissions, and its scope's
actions. A permission is held by itself or by its ".all" form (jobs.control.all is jobs.control too),
as the controllers decide (controller/authz.py). The list is advice to the agent, not the boundary:
the controllers check every call again, and the server refuses a call to a tool it did not show.

`ANNOTATIONS` are the MCP tool annotations (hints a client uses to decide what to confirm with its
user): reads are read-only and idempotent; a submit adds a job each time; a kill cannot be undone;
hold, release and modify leave the job as asked however often they are repeated. Every tool acts
on the clusters the gateway serves and nothing else: a closed world.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_types import ToolAnnotations


@dataclass(frozen=True)
class Needs:
    """What a key must hold to be shown a tool: every permission, and the scope action if any."""

    permissions: tuple[str, ...] = ()
    action: str = ""   # a scope's action (submit, kill, hold, release, modify); empty: none


@dataclass(frozen=True)
class Caller:
    """A key as GET /whoami describes it."""

    name: str
    role: str
    permissions: frozenset[str]
    actions: frozenset[str]  # its scope's actions; empty: any its role allows

    @classmethod
    def of(cls, whoami: Mapping[str, Any]) -> Caller:
        scope = whoami.get("scope") or {}
        return cls(name=str(whoami.get("name", "")), role=str(whoami.get("role", "")),
                   permissions=frozenset(whoami.get("permissions", ())),
                   actions=frozenset(scope.get("actions", ())))

    def holds(self, permission: str) -> bool:
        return permission in self.permissions or f"{permission}.all" in self.permissions


def _read(title: str, *permissions: str) -> tuple[Needs, ToolAnnotations]:
    return Needs(permissions), ToolAnnotations(title=title, read_only_hint=True, destructive_hint=False,
                                               idempotent_hint=True, open_world_hint=False)


def _write(title: str, permission: str, action: str, *, destructive: bool,
           idempotent: bool) -> tuple[Needs, ToolAnnotations]:
    return Needs((permission,), action), ToolAnnotations(
        title=title, read_only_hint=False, destructive_hint=destructive, idempotent_hint=idempotent,
        open_world_hint=False)


# In the order an agent is shown them: the clusters, reads, writes, then the helpers.
_TOOLS: dict[str, tuple[Needs, ToolAnnotations]] = {
    "scheduler_list_clusters": _read("List clusters"),
    "scheduler_cluster_status": _read("Cluster status", "cluster.read", "jobs.read"),
    "scheduler_list_jobs": _read("List jobs", "jobs.read"),
    "scheduler_get_job": _read("Get job", "jobs.read"),
    "scheduler_list_hosts": _read("List hosts", "cluster.read"),
    "scheduler_list_queues": _read("List queues", "cluster.read"),
    "scheduler_pending_reasons": _read("Why jobs wait", "jobs.read"),
    "scheduler_job_output": _read("Job output", "jobs.read"),
    "scheduler_submit": _write("Submit job", "jobs.submit", "submit", destructive=False, idempotent=False),
    "scheduler_cancel": _write("Kill job", "jobs.control", "kill", destructive=True, idempotent=True),
    "scheduler_hold": _write("Hold job", "jobs.control", "hold", destructive=False, idempotent=True),
    "scheduler_release": _write("Release job", "jobs.control", "release", destructive=False, idempotent=True),
    "scheduler_modify": _write("Modify job", "jobs.modify", "modify", destructive=False, idempotent=True),
    "scheduler_wait_job": _read("Wait for job", "jobs.read"),
    "scheduler_analyze_failure": _read("Why a job failed", "jobs.read"),
    "scheduler_suggest_resources": _read("Suggest resources", "jobs.read"),
    "scheduler_estimate_wait_time": _read("Estimate wait", "cluster.read", "jobs.read"),
}

TOOL_NAMES: tuple[str, ...] = tuple(_TOOLS)
NEEDS: Mapping[str, Needs] = {name: needs for name, (needs, _) in _TOOLS.items()}
ANNOTATIONS: Mapping[str, ToolAnnotations] = {name: notes for name, (_, notes) in _TOOLS.items()}


def refusal(tool: str, caller: Caller) -> str:
    """Why `caller` may not call `tool`, in words; empty if it may."""
    needs = NEEDS.get(tool)
    if needs is None:
        return f"there is no tool {tool}"
    missing = [p for p in needs.permissions if not caller.holds(p)]
    if missing:
        return f"{tool} needs {' and '.join(missing)}, which role {caller.role} of this key lacks"
    if needs.action and caller.actions and needs.action not in caller.actions:
        return (f"{tool} is {needs.action}, not among the actions of this key's scope "
                f"({', '.join(sorted(caller.actions))})")
    return ""


def writes(tool: str) -> bool:
    return bool(NEEDS[tool].action)
