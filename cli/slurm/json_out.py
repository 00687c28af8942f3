"""squeue --json and sacct --json: Slurm 22.05's JSON for XCE's jobs.

One document, `{"meta": ..., "errors": [], "jobs": [...]}`, as Slurm 22.05's
squeue prints it (openapi v0.0.38: a job's fields flat, times in seconds
since the epoch, `job_state`, `state_reason`, `exit_code` its wait status;
the fields, their order and their types those of a real Slurm's,
tests/golden/slurm22/cli/squeue_json.out) and its sacct (openapi dbv0.0.38:
`state: {current, reason}`, `time: {...}`, `exit_code: {status,
return_code[, signal]}`, `array: {job_id, task_id, ...}`). A field XCE has
no value for has Slurm's empty one (`""`, 0, null, []), so a reader finds
every name it expects. The owner's uid and group are this host's (pwd,
grp). An array's rest (its elements not yet jobs: cli/slurm/array_rest.py)
is the array's record with its indices in `array_task_string` (squeue) or
`array.task` (sacct).
"""

from __future__ import annotations

import json
import signal

from cli.slurm import array_rest, formats
from xce import hostlist
from xce.v1 import api_pb2 as api

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import Any

VERSION = {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}
SQUEUE_PLUGIN = {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"}
SACCT_PLUGIN = {"type": "openapi/dbv0.0.38", "name": "Slurm OpenAPI DB v0.0.38"}
CLUSTER = "xce"  # SLURM_CLUSTER_NAME (worker/spawn.py)
INFINITE = 0xFFFFFFFF  # Slurm's "no limit" in a 32-bit field


def document(plugin: dict[str, str], jobs: list[dict[str, Any]]) -> str:
    return json.dumps({"meta": {"plugin": plugin, "Slurm": VERSION}, "errors": [], "jobs": jobs}, indent=2)


def _seconds(ms: int) -> int:
    return ms // 1000 if ms else 0


def _hosts(job: api.Job) -> list[tuple[str, int]]:
    """(host, slots) of its allocation, first host first."""
    if job.allocation:
        return [(a.host, a.slots) for a in job.allocation]
    return [(job.host, job.spec.slots)] if job.host else []


def _tasks(job: api.Job) -> int:
    return int(job.spec.env.get("SLURM_NTASKS", "") or job.spec.slots or 1)


def _cpus_per_task(job: api.Job) -> int | None:
    text = job.spec.env.get("SLURM_CPUS_PER_TASK", "")
    return int(text) if text.isdecimal() else None


def wait_status(job: api.Job) -> int:
    """The job's exit as a wait status (code << 8, or the signal), as squeue's exit_code."""
    if job.state not in (api.DONE, api.EXIT):
        return 0
    return job.term_signal if job.term_signal else (job.exit_code & 0xFF) << 8


def exit_status(job: api.Job) -> dict[str, Any]:
    """sacct's exit_code: {status: PENDING|SUCCESS|FAILED|SIGNALED, return_code[, signal]}."""
    if job.state not in (api.DONE, api.EXIT):
        return {"status": "PENDING", "return_code": 0}
    if job.term_signal:
        try:
            name = signal.Signals(job.term_signal).name.removeprefix("SIG")
        except ValueError:
            name = str(job.term_signal)
        return {"status": "SIGNALED", "return_code": 0,
                "signal": {"signal_id": job.term_signal, "name": name}}
    return {"status": "SUCCESS" if job.exit_code == 0 else "FAILED", "return_code": job.exit_code}


def _time_limit(job: api.Job) -> int:
    return -(-job.spec.run_limit_s // 60) if job.spec.run_limit_s else INFINITE


def _flags(job: api.Job) -> list[str]:
    """slurmctld's job flags as a real Slurm 22.05 showed them (rest/job_*.json): JOB_WAS_RUNNING while
    it runs, TRES_STR_CALC once a job that ran has ended, none while it waits."""
    if not formats.started(job):
        return []
    return ["TRES_STR_CALC"] if job.state in (api.DONE, api.EXIT) else ["JOB_WAS_RUNNING"]


def _output(path: str, default: str) -> str:
    """standard_output/error as asked (unexpanded, as Slurm keeps them); "" for sbatch's default (Slurm
    keeps none: slurm-%j.out is its own), and stderr given no path of its own (it goes with stdout)."""
    return "" if path == default else path


def squeue_job(job: api.Job) -> dict[str, Any]:
    """One job as Slurm 22.05's squeue --json shows it (its fields in Slurm's order, null where Slurm's
    is: a waiting job's time_limit without -t, its billable_tres; no job_resources until it runs)."""
    spec, hosts = job.spec, _hosts(job)
    nodes = hostlist.compress([h for h, _ in hosts]) if hosts else ""
    rest = array_rest.is_rest(job)
    element = bool(job.array_id) and not rest
    uid, gid, group = _owner(spec.user)
    eligible = 0 if formats.held(job) else _seconds(spec.begin_time_ms or job.submit_time_ms)
    default_out = "slurm-%A_%a.out" if job.array_id else "slurm-%j.out"
    shown = {
        "account": spec.project, "accrue_time": eligible, "admin_comment": "",
        "array_job_id": job.array_id, "array_task_id": job.array_index if element else None,
        "array_max_tasks": (spec.array.limit if rest else job.array_limit) or 0,
        "array_task_string": array_rest.job_id(job, True).partition("_[")[2][:-1] if rest else "",
        "association_id": 0, "batch_features": "", "batch_flag": True,
        "batch_host": hosts[0][0] if hosts else "", "flags": _flags(job), "burst_buffer": "",
        "burst_buffer_state": "", "cluster": CLUSTER, "cluster_features": "",
        "command": formats.script_name(job)[:4096],
        "comment": spec.comment, "container": "", "contiguous": False, "core_spec": None, "thread_spec": None,
        "cores_per_socket": None, "billable_tres": float(spec.slots) if formats.started(job) else None,
        "cpus_per_task": _cpus_per_task(job),
        "cpu_frequency_minimum": None, "cpu_frequency_maximum": None, "cpu_frequency_governor": None,
        "cpus_per_tres": "", "deadline": 0, "delay_boot": 0, "dependency": formats.dependency(job),
        "derived_exit_code": 0,  # (the highest of its steps' exits: XCE's jobs have no steps, Slurm's 0)
        "eligible_time": eligible,
        "end_time": _seconds(formats.expected_end_ms(job)), "excluded_nodes": "",
        "exit_code": wait_status(job),
        "features": "", "federation_origin": "", "federation_siblings_active": "",
        "federation_siblings_viable": "", "gres_detail": [], "group_id": gid, "group_name": group,
        "job_id": job.id, "job_resources": _resources(hosts, nodes), "job_state": formats.state(job),
        "last_sched_evaluation": _seconds(job.start_time_ms or job.submit_time_ms), "licenses": "",
        "max_cpus": 0, "max_nodes": 0, "mcs_label": "",
        "memory_per_tres": "", "name": formats.name(job), "nodes": nodes, "nice": None,
        "tasks_per_core": None,
        "tasks_per_node": 0, "tasks_per_socket": None, "tasks_per_board": 0, "cpus": spec.slots,
        "node_count": max(1, len(hosts)), "tasks": _tasks(job), "het_job_id": 0, "het_job_id_set": "",
        "het_job_offset": 0, "partition": spec.queue, "prefer": "",
        "memory_per_node": spec.mem_limit_mb or None,
        "memory_per_cpu": None, "minimum_cpus_per_node": 1, "minimum_tmp_disk_per_node": 0, "preempt_time": 0,
        "pre_sus_time": 0, "priority": formats.priority(job), "profile": None, "qos": "", "reboot": False,
        "required_nodes": ",".join(spec.hosts), "requeue": spec.rerunnable, "resize_time": 0,
        "restart_cnt": job.attempt, "resv_name": "", "shared": None,
        "show_flags": ["SHOW_ALL", "SHOW_DETAIL", "SHOW_LOCAL"], "sockets_per_board": 0,
        "sockets_per_node": None, "start_time": _seconds(job.start_time_ms), "state_description": "",
        "state_reason": formats.state_reason(job),
        "standard_error": _output(spec.stderr_path, spec.stdout_path), "standard_input": "",
        "standard_output": _output(spec.stdout_path, default_out),
        "submit_time": _seconds(job.submit_time_ms), "suspend_time": 0,
        "system_comment": "", "time_limit": formats.limit_minutes(job), "time_minimum": 0,
        "threads_per_core": None,
        "tres_bind": "", "tres_freq": "", "tres_per_job": "", "tres_per_node": "", "tres_per_socket": "",
        "tres_per_task": "", "tres_req_str": _tres(job, max(1, len(hosts))),
        "tres_alloc_str": _tres(job, len(hosts)) if hosts else "", "user_id": uid, "user_name": spec.user,
        "wckey": "", "current_working_directory": spec.cwd,
    }
    if not hosts:  # (Slurm's has no job_resources until the job has some)
        del shown["job_resources"]
    return shown


def _resources(hosts: list[tuple[str, int]], nodes: str) -> dict[str, Any]:
    """job_resources: its hosts and the cores it holds on each (a job's that has hosts)."""
    return {"nodes": nodes, "allocated_cores": sum(s for _, s in hosts), "allocated_hosts": len(hosts),
            "allocated_nodes": [{"sockets": {"0": {"cores": {str(c): "allocated" for c in range(slots)}}},
                                 "nodename": host, "cpus_used": 0, "memory_used": 0, "memory_allocated": 0}
                                for host, slots in hosts]}


def _owner(user: str) -> tuple[int | None, int | None, str]:
    """(uid, gid, group name) of the job's owner as this host knows them; None and "" if it does not."""
    import grp
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except (KeyError, TypeError):
        return None, None, ""
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = ""
    return entry.pw_uid, entry.pw_gid, group


def _tres(job: api.Job, nodes: int) -> str:
    memory = f",mem={formats.memory(job.spec.mem_limit_mb)}" if job.spec.mem_limit_mb else ""
    return f"cpu={job.spec.slots}{memory},node={nodes},billing={job.spec.slots}"


def _tres_list(job: api.Job, nodes: int) -> list[dict[str, Any]]:
    items = [{"type": "cpu", "name": None, "id": 1, "count": job.spec.slots}]
    if job.spec.mem_limit_mb:
        items.append({"type": "mem", "name": None, "id": 2, "count": job.spec.mem_limit_mb})
    return [*items, {"type": "node", "name": None, "id": 4, "count": nodes},
            {"type": "billing", "name": None, "id": 5, "count": job.spec.slots}]


def sacct_job(job: api.Job, now_ms: int) -> dict[str, Any]:
    """One job as Slurm 22.05's sacct --json shows it."""
    spec, hosts = job.spec, _hosts(job)
    rest = array_rest.is_rest(job)
    cpu_s = job.usage.user_cpu_s + job.usage.system_cpu_s
    ended = job.state in (api.DONE, api.EXIT)
    return {
        "account": spec.project,
        "comment": {"administrator": None, "job": spec.comment or None, "system": None},
        "allocation_nodes": len(hosts),
        "array": {"job_id": job.array_id,
                  "limits": {"max": {"running": {"tasks": spec.array.limit if rest else job.array_limit}}},
                  "task": array_rest.indices_text(job) if rest else None,
                  "task_id": job.array_index if job.array_id and not rest else None},
        "association": {"account": spec.project, "cluster": CLUSTER, "partition": spec.queue,
                        "user": spec.user},
        "cluster": CLUSTER, "constraints": "", "container": "",
        "derived_exit_code": exit_status(job),
        "time": {"elapsed": formats.run_seconds(job, now_ms),
                 "eligible": _seconds(spec.begin_time_ms or job.submit_time_ms),
                 "end": _seconds(job.end_time_ms) if ended else 0, "start": _seconds(job.start_time_ms),
                 "submission": _seconds(job.submit_time_ms), "suspended": 0,
                 "system": _split(job.usage.system_cpu_s), "limit": _time_limit(job), "total": _split(cpu_s),
                 "user": _split(job.usage.user_cpu_s)},
        "exit_code": exit_status(job), "flags": [], "group": spec.user,
        "het": {"job_id": 0, "job_offset": None},
        "job_id": job.id, "name": formats.name(job), "mcs": {"label": ""},
        "nodes": hostlist.compress([h for h, _ in hosts]) if hosts else "None assigned",
        "partition": spec.queue, "priority": spec.priority, "qos": "normal",
        "required": {"CPUs": spec.slots, "memory": spec.mem_limit_mb},
        "kill_request_user": None, "reservation": {"id": 0, "name": 0},
        "state": {"current": formats.state(job), "reason": formats.reason(job)}, "steps": [],
        "tres": {"allocated": _tres_list(job, len(hosts)) if hosts else [],
                 "requested": _tres_list(job, max(1, len(hosts)))},
        "user": spec.user, "wckey": {"wckey": "", "flags": []}, "working_directory": spec.cwd,
    }


def _split(seconds: float) -> dict[str, int]:
    whole = int(seconds)
    return {"seconds": whole, "microseconds": int((seconds - whole) * 1_000_000)}
