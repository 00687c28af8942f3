"""The MCP server's tools: each a few calls to the gateway with the caller's key, and a result of
the shape gateway/mcp_schema.py declares. Titles, annotations and who may call each are in
gateway/mcp_access.py; the tools are added in its order (an agent is shown reads first).

Every write takes `dry_run`: it shows what would happen and changes nothing but the audit trail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from gateway import agent_advice
from gateway.mcp_access import ANNOTATIONS
from gateway.mcp_client import Gateway, quoted
from gateway.mcp_schema import (
    Acted,
    Cluster,
    Clusters,
    ClusterStatus,
    Command,
    DryRun,
    EstimateCommand,
    Failure,
    Filters,
    HostList,
    JobId,
    JobList,
    JobName,
    JobOutput,
    JobRecord,
    JobRow,
    Limit,
    MemoryMb,
    NewQueue,
    PendingJobId,
    PendingReasons,
    Priority,
    QueueFilter,
    QueueList,
    QueueName,
    ResourceReq,
    RunLimitS,
    Slots,
    StateFilter,
    Stream,
    Submitted,
    Suggestion,
    TailBytes,
    Template,
    TimeoutS,
    UserName,
    Waited,
    WaitEstimate,
    WorkingDir,
)

POLL_S = 1.0            # scheduler_wait_job asks another cluster this often
WATCH_S = 20.0          # ... and waits at most this long in one blocking read of the gateway's own
ENDED = ("DONE", "EXIT")
CLUSTER_NOTE = " Takes `cluster` (scheduler_list_clusters); default XCE's own."

_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def add_tools(server: MCPServer, gateway: Gateway) -> None:
    """Every tool, in the order of mcp_access's table (a unit test holds the two to each other)."""
    for add in (_add_cluster_tools, _add_read_tools, _add_write_tools, _add_advanced_tools):
        add(server, gateway)


def _tool(server: MCPServer, name: str, description: str) -> Callable[[_Fn], _Fn]:
    notes = ANNOTATIONS[name]
    return server.tool(name=name, title=notes.title, description=description, annotations=notes)


def row(job: dict[str, Any]) -> JobRow:
    """A job in a list: who, where, what state and why."""
    spec = job.get("spec", {})
    out: JobRow = {"id": str(job.get("id", "")), "readable_id": str(job.get("readable_id", "")),
                   "name": spec.get("name", ""), "user": spec.get("user", ""), "queue": spec.get("queue", ""),
                   "slots": agent_advice.number(spec.get("slots"), 1), "state": job.get("state", "")}
    for key in ("pending_reason", "host", "exit_reason", "start_error", "cluster"):
        if job.get(key):
            out[key] = str(job[key])
    if job.get("exit_code"):
        out["exit_code"] = agent_advice.number(job["exit_code"])
    return out


def _add_cluster_tools(server: MCPServer, gateway: Gateway) -> None:

    @_tool(server, "scheduler_list_clusters",
           "The clusters this gateway serves (XCE's own, and Slurm or LSF clusters it relays to): each "
           "one's backend, health, what it can and cannot do, and whether this key may use it.")
    async def list_clusters() -> Clusters:
        return await gateway.get("/clusters")  # type: ignore[no-any-return]


def _add_read_tools(server: MCPServer, gateway: Gateway) -> None:

    @_tool(server, "scheduler_cluster_status",
           "The cluster at a glance: replicas and leader (or another cluster's backend and health), "
           "hosts and slots, queues, jobs by state. Start here." + CLUSTER_NOTE)
    async def cluster_status(cluster: Cluster = "") -> ClusterStatus:
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
            "queues": [str(q.get("name", "")) for q in queues.get("queues", [])],
            "jobs_by_state": states, "jobs_counted": len(jobs) if not partial else f"first {len(jobs)}"}

    @_tool(server, "scheduler_list_jobs",
           "Live jobs: by user, queue, state, or field:op:value filters; at most "
           "`limit` of them." + CLUSTER_NOTE)
    async def list_jobs(user: UserName = "", queue: QueueFilter = "", state: StateFilter = None,
                        filters: Filters = None, limit: Limit = 50, cluster: Cluster = "") -> JobList:
        wanted = list(filters or [])
        wanted += [f"user:eq:{user}"] if user else []
        wanted += [f"queue:eq:{queue}"] if queue else []
        wanted += [f"state:eq:{state}"] if state else []
        page = await gateway.get("/jobs", cluster, filter=wanted, page_size=limit)
        jobs = page["jobs"]
        more = bool(page.get("next_page_token") or page.get("more"))
        return {"jobs": [row(j) for j in jobs], "shown": len(jobs), "more": more}

    @_tool(server, "scheduler_get_job",
           "One job in full: its spec, state, times (ms since the epoch), host, usage." + CLUSTER_NOTE)
    async def get_job(job_id: JobId, cluster: Cluster = "") -> JobRecord:
        return await gateway.get(f"/jobs/{quoted(job_id)}", cluster)  # type: ignore[no-any-return]

    @_tool(server, "scheduler_list_hosts",
           "Hosts: status, slots and slots in use, memory, closed or open, load." + CLUSTER_NOTE)
    async def list_hosts(cluster: Cluster = "") -> HostList:
        hosts = await gateway.get("/hosts", cluster)
        return {"hosts": [{"name": h["spec"]["name"], "status": str(h.get("status", "")),
                           "slots": agent_advice.number(h["spec"].get("slots")),
                           "slots_used": agent_advice.number(h.get("slots_used")),
                           "memory_mb": agent_advice.number(h["spec"].get("memory_mb")),
                           "closed": bool(h.get("closed", False)), "load": h.get("load", {})}
                          for h in hosts.get("hosts", [])]}

    @_tool(server, "scheduler_list_queues",
           "Queues: priority, whether open and active, limits, policies (fair share, preemption, "
           "backfill)." + CLUSTER_NOTE)
    async def list_queues(cluster: Cluster = "") -> QueueList:
        return await gateway.get("/queues", cluster)  # type: ignore[no-any-return]

    @_tool(server, "scheduler_pending_reasons",
           "Why jobs wait: for one job, its reason; else the pending jobs (of a user or queue) grouped "
           "by reason, most first." + CLUSTER_NOTE)
    async def pending_reasons(job_id: PendingJobId = "", user: UserName = "", queue: QueueFilter = "",
                              cluster: Cluster = "") -> PendingReasons:
        if job_id:
            job = await gateway.get(f"/jobs/{quoted(job_id)}", cluster)
            return {"job": job.get("id"), "state": job.get("state"),
                    "pending_code": job.get("pending_code", ""),
                    "pending_reason": job.get("pending_reason", ""),
                    "depend_state": job.get("depend_state", "")}
        wanted = ["state:in:PEND,PSUSP"] + ([f"user:eq:{user}"] if user else []) + \
            ([f"queue:eq:{queue}"] if queue else [])
        jobs, partial = await gateway.all_jobs(wanted, cluster)
        summary = agent_advice.pending_summary(jobs)
        return {"pending": summary["pending"], "by_reason": summary["by_reason"], "partial": partial}

    @_tool(server, "scheduler_job_output",
           "The end of a job's output (stdout, or stderr), as its host's worker reads it; the job's "
           "owner's key only (or one that may see every job's environment)." + CLUSTER_NOTE)
    async def job_output(job_id: JobId, stream: Stream = "stdout", tail_bytes: TailBytes = 4096,
                         cluster: Cluster = "") -> JobOutput:
        return await gateway.output(job_id, stream, tail_bytes, cluster)  # type: ignore[return-value]


def _add_write_tools(server: MCPServer, gateway: Gateway) -> None:

    @_tool(server, "scheduler_submit",
           "Submit a job from a template: general_serial (one slot), multi_core (slots on one host), "
           "parallel (slots on any hosts), high_memory (memory reserved). Each call submits another "
           "job. dry_run: check and show, submit nothing." + CLUSTER_NOTE)
    async def submit(command: Command, template: Template = "general_serial", slots: Slots = None,
                     mem_mb: MemoryMb = None, run_limit_s: RunLimitS = None, queue: QueueName = "",
                     name: JobName = "", cwd: WorkingDir = "", dry_run: DryRun = False,
                     cluster: Cluster = "") -> Submitted:
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

    async def act(job_id: str, action: str, dry_run: bool, cluster: str) -> Acted:
        done = await gateway.send("POST", f"/jobs/{quoted(job_id)}/actions", {"action": action}, dry_run,
                                  cluster)
        return {"dry_run": done["dry_run"], "job": row(done["job"])} if dry_run else {"job": row(done)}

    @_tool(server, "scheduler_cancel",
           "Kill a job (pending: it ends at once; running: its processes are killed, and it ends as "
           "they do). Cannot be undone. dry_run: show what would happen." + CLUSTER_NOTE)
    async def cancel(job_id: JobId, dry_run: DryRun = False, cluster: Cluster = "") -> Acted:
        return await act(job_id, "kill", dry_run, cluster)

    @_tool(server, "scheduler_hold",
           "Hold a pending job: it is not started until released. dry_run: show what would happen."
           + CLUSTER_NOTE)
    async def hold(job_id: JobId, dry_run: DryRun = False, cluster: Cluster = "") -> Acted:
        return await act(job_id, "hold", dry_run, cluster)

    @_tool(server, "scheduler_release",
           "Release a held job: it may be started again. dry_run: show what would happen." + CLUSTER_NOTE)
    async def release(job_id: JobId, dry_run: DryRun = False, cluster: Cluster = "") -> Acted:
        return await act(job_id, "release", dry_run, cluster)

    @_tool(server, "scheduler_modify",
           "Change a job's priority, queue or resource requirement (give at least one). dry_run: show "
           "the change." + CLUSTER_NOTE)
    async def modify(job_id: JobId, priority: Priority = None, queue: NewQueue = None,
                     resource_req: ResourceReq = None, dry_run: DryRun = False,
                     cluster: Cluster = "") -> Acted:
        change = {k: v for k, v in (("priority", priority), ("queue", queue), ("resource_req", resource_req))
                  if v is not None}
        if not change:
            raise ToolError("nothing to change: give priority, queue or resource_req")
        done = await gateway.send("PATCH", f"/jobs/{quoted(job_id)}", change, dry_run, cluster)
        return {"dry_run": done["dry_run"], "job": row(done["job"])} if dry_run else {"job": row(done)}


async def _wait_job(gateway: Gateway, job_id: str, ctx: Context, timeout_s: float, cluster: str) -> Waited:
    deadline = time.monotonic() + timeout_s
    last, index = "", 0
    while True:
        if cluster:  # another cluster's: asked again every POLL_S
            job = await gateway.get(f"/jobs/{quoted(job_id)}", cluster)
        else:  # this one's: a blocking read answers at the job's next change, at no cost meanwhile
            left = max(0.001, min(WATCH_S, deadline - time.monotonic()))
            job, index = await gateway.watch(f"/jobs/{quoted(job_id)}", index, left)
        state = job.get("state", "")
        if state != last:
            await ctx.report_progress(1.0 if state in ENDED else 0.5, 1.0, f"job {job.get('id')} is {state}")
            last = state
        if state in ENDED:
            return {"ended": True, "job": row(job), "exit_code": agent_advice.number(job.get("exit_code"))}
        if time.monotonic() >= deadline:
            return {"ended": False, "job": row(job),
                    "note": f"not ended after {timeout_s:.0f} s; it is {state}"}
        if cluster or not index:
            await asyncio.sleep(POLL_S)


def _add_advanced_tools(server: MCPServer, gateway: Gateway) -> None:

    @_tool(server, "scheduler_wait_job",
           "Wait until a job ends (DONE or EXIT), up to timeout_s; reports progress as its state "
           "changes. Says so if it has not ended by then." + CLUSTER_NOTE)
    async def wait_job(job_id: JobId, ctx: Context, timeout_s: TimeoutS = 300.0,
                       cluster: Cluster = "") -> Waited:
        return await _wait_job(gateway, job_id, ctx, timeout_s, cluster)

    @_tool(server, "scheduler_analyze_failure",
           "Why a job ended as it did: exit code, signal, memory or run limit, lost host, dependency; "
           "with what to change, and the end of its stderr." + CLUSTER_NOTE)
    async def analyze_failure(job_id: JobId, cluster: Cluster = "") -> Failure:
        job = await gateway.get(f"/jobs/{quoted(job_id)}", cluster)
        found: Failure = agent_advice.explain_failure(job)  # type: ignore[assignment]
        if job.get("native"):
            found["native"] = job["native"]
        if job.get("host"):  # what it printed last, if its host can be asked and this key may read it
            try:
                own_id = job.get("readable_id") if job.get("cluster") else str(job["id"])
                found["stderr_tail"] = (await gateway.output(str(own_id), "stderr", 2048))["text"]
            except ToolError as exc:
                found["stderr_tail"] = f"(not available: {exc})"
        return found

    @_tool(server, "scheduler_suggest_resources",
           "Slots, memory (MB) and run limit (s) for a command, from this key's user's finished jobs of "
           "the same program (95th percentile, with a margin)." + CLUSTER_NOTE)
    async def suggest_resources(command: Command, cluster: Cluster = "") -> Suggestion:
        me = await gateway.get("/whoami")
        history = await gateway.get("/history", cluster, user=me["name"], page_size=2000)
        return agent_advice.suggest_resources(history.get("jobs", []), command)  # type: ignore[return-value]

    @_tool(server, "scheduler_estimate_wait_time",
           "When a job would start if submitted now: the simulator run on the cluster's current hosts "
           "and jobs; says what it assumed." + CLUSTER_NOTE)
    async def estimate_wait_time(command: EstimateCommand = None, template: Template = "general_serial",
                                 slots: Slots = None, mem_mb: MemoryMb = None, run_limit_s: RunLimitS = None,
                                 queue: QueueName = "", cluster: Cluster = "") -> WaitEstimate:
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
        return estimate  # type: ignore[return-value]
