"""What the MCP server's advanced tools work out: job templates, why a job failed, what to
ask for next time, and how long a job would wait. Pure: the gateway's JSON in, plain data out (the
wait estimate runs the simulator, itself pure).

Jobs here are the gateway's JSON (protobuf's JSON mapping: 64-bit integers are strings, fields at
their default are left out).
"""

from __future__ import annotations

import math
import signal
from collections import Counter
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format

from xce.v1 import api_pb2 as api

TEMPLATES: dict[str, str] = {
    "general_serial": "one process on one slot",
    "multi_core": "several slots on one host (span[hosts=1]): threads, OpenMP",
    "parallel": "several slots on as many hosts as it takes: MPI",
    "high_memory": "one slot with memory reserved on its host (rusage[mem=...]); needs mem_mb",
}
DEFAULT_WAIT_RUN_S = 3600  # a job with neither estimate nor run limit is assumed to run this long


def number(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def job_spec(command: Sequence[str], template: str = "general_serial", slots: int | None = None,
             mem_mb: int | None = None, run_limit_s: int | None = None, queue: str = "", name: str = "",
             ) -> dict[str, Any]:
    """The JobSpec (as the gateway takes it) a template makes; ValueError naming what is wrong."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}: one of {', '.join(TEMPLATES)}")
    if not command or not all(isinstance(word, str) and word for word in command):
        raise ValueError("command is the argv: a non-empty list of non-empty strings")
    spec: dict[str, Any] = {"command": list(command)}
    count = slots or 1
    if template == "general_serial" and count != 1:
        raise ValueError("general_serial runs on one slot; use multi_core or parallel for more")
    if template == "multi_core":
        spec["resource_req"] = "span[hosts=1]"
    if template == "high_memory":
        if not mem_mb:
            raise ValueError("high_memory needs mem_mb")
        spec["resource_req"] = f"rusage[mem={mem_mb}]"
    if count != 1:
        spec["slots"] = count
    if mem_mb:
        spec["mem_limit_mb"] = mem_mb
    if run_limit_s:
        spec["run_limit_s"] = run_limit_s
    if queue:
        spec["queue"] = queue
    if name:
        spec["name"] = name
    return spec


# Exit reasons of a job its worker could not start, for a reason of its own (xce/start_failures.py).
NEVER_STARTED = {"COMMAND_NOT_FOUND": "its command was not found (exit 127)",
                 "NOT_EXECUTABLE": "its command could not be executed (exit 126)",
                 "CWD_MISSING": "its owner cannot enter its working directory (exit 2)",
                 "OUTPUT_FILE": "its owner cannot open its output file, however often it was tried"}


def explain_failure(job: dict[str, Any]) -> dict[str, Any]:
    """Why the job ended as it did, in words, with what to change; from its record alone."""
    state = job.get("state", "")
    code, sig = number(job.get("exit_code")), number(job.get("term_signal"))
    reason = job.get("exit_reason", "")
    rss_mb = number(job.get("usage", {}).get("max_rss_kb")) // 1024
    limit_mb = number(job.get("spec", {}).get("mem_limit_mb"))
    ran_s = max(0, number(job.get("end_time_ms")) - number(job.get("start_time_ms"))) / 1000 \
        if job.get("start_time_ms") else 0.0
    causes: list[str] = []
    advice: list[str] = []
    if state == "DONE":
        causes.append("it did not fail: it exited with code 0")
    elif state not in ("EXIT", "DONE"):
        causes.append(f"it has not ended: it is {state or 'unknown'}"
                      + (f" ({job['pending_reason']})" if job.get("pending_reason") else ""))
    elif reason == "MEMLIMIT":
        causes.append(f"killed for memory: its processes reached {rss_mb} MB, over its limit of "
                      f"{limit_mb or '?'} MB (-M)")
        advice.append(f"ask for more memory: mem_mb {max(limit_mb * 2, math.ceil(rss_mb * 1.5 / 100) * 100)}")
    elif reason == "RUNLIMIT":
        limit_s = number(job.get("spec", {}).get("run_limit_s"))
        causes.append(f"killed at its run limit: it ran {ran_s:.0f} s, its limit is {limit_s} s (-W)")
        advice.append(f"ask for a longer run limit: run_limit_s {max(limit_s * 2, 60)}")
    elif reason in NEVER_STARTED:
        causes.append(f"it never ran: {NEVER_STARTED[reason]} ({job.get('start_error', 'no words')})")
        advice.append("fix the path as its owner sees it on the execution hosts, then xce requeue it")
    elif reason == "DEPENDENCY":
        depend = job.get("spec", {}).get("depend", "")
        causes.append(f"killed because its dependency can never hold ({depend})")
    elif job.get("exit_status_unknown"):
        causes.append("its host was lost while it ran; how it ended is unknown")
        advice.append("make it rerunnable (rerunnable: true) to have it requeued when its host is lost")
    elif sig:
        name = _signal_name(sig)
        causes.append(f"ended by signal {sig} ({name})"
                      + (" after a kill (by a user, an operator or the scheduler)" if sig in (9, 15) else ""))
    elif code == 127:
        causes.append("exit code 127: the command was not found")
        advice.append("check the command's path and the job's environment (PATH)")
    elif code == 126:
        causes.append("exit code 126: the command is not executable")
    elif code > 128:
        causes.append(f"exit code {code}: most likely killed by signal {code - 128} "
                      f"({_signal_name(code - 128)})")
    else:
        causes.append(f"it exited with code {code}: its own error; see its output")
    return {"job": job.get("id", ""), "state": state, "exit_code": code, "signal": sig, "exit_reason": reason,
            "max_rss_mb": rss_mb, "ran_s": round(ran_s, 1), "causes": causes, "suggestions": advice}


def _signal_name(number_: int) -> str:
    try:
        return signal.Signals(number_).name
    except ValueError:
        return "unknown signal"


def suggest_resources(history: Sequence[dict[str, Any]], command: Sequence[str]) -> dict[str, Any]:
    """Slots, memory and a run limit for `command`, from the finished jobs of the same program: memory
    and run time at their 95th percentile with a margin (x1.25, x1.5), the slots most asked for. A job
    whose cluster keeps no command (slurmrestd's of a script) is of the program its name says."""
    program = command[0].rsplit("/", 1)[-1] if command else ""
    similar = [job for job in history if _program(job) == program and job.get("start_time_ms")]
    if not similar:
        return {"based_on": 0, "program": program, "slots": 1, "mem_mb": None, "run_limit_s": None,
                "why": f"no finished job of {program!r} in this user's history: start with one slot, and "
                       "set a memory and run limit once one has run"}
    rss = sorted(number(j.get("usage", {}).get("max_rss_kb")) / 1024 for j in similar)
    runs = sorted((number(j.get("end_time_ms")) - number(j.get("start_time_ms"))) / 1000 for j in similar)
    slots = Counter(number(j["spec"].get("slots"), 1) or 1 for j in similar).most_common(1)[0][0]
    mem_mb = max(100, math.ceil(_p95(rss) * 1.25 / 100) * 100)
    run_limit_s = max(60, math.ceil(_p95(runs) * 1.5 / 60) * 60)
    failed = sum(1 for j in similar if j.get("state") == "EXIT")
    return {"based_on": len(similar), "program": program, "slots": slots, "mem_mb": mem_mb,
            "run_limit_s": run_limit_s, "failed": failed,
            "why": f"from {len(similar)} finished job(s) of {program!r}: memory p95 {_p95(rss):.0f} MB "
                   f"x1.25, run time p95 {_p95(runs):.0f} s x1.5, {slots} slot(s) most often"}


def _program(job: dict[str, Any]) -> str:
    spec = job.get("spec", {})
    words = spec.get("command") or [spec.get("name", "")]
    return str(words[0]).rsplit("/", 1)[-1]


def _p95(values: Sequence[float]) -> float:
    return values[min(len(values) - 1, math.ceil(0.95 * len(values)) - 1)] if values else 0.0


def pending_summary(jobs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pending jobs grouped by why they wait (the scheduler's reason taxonomy)."""
    groups: dict[str, list[str]] = {}
    for job in jobs:
        if job.get("state") not in ("PEND", "PSUSP"):
            continue
        reason = job.get("pending_code") or "PENDING_REASON_UNSPECIFIED"
        groups.setdefault(reason, []).append(str(job.get("id")))
    return {"pending": sum(len(ids) for ids in groups.values()),
            "by_reason": [{"code": code, "jobs": len(ids), "first": ids[:10],
                           "reason": next((j.get("pending_reason", "") for j in jobs
                                           if str(j.get("id")) == ids[0]), "")}
                          for code, ids in sorted(groups.items(), key=lambda kv: -len(kv[1]))]}


def estimate_wait(hosts: Sequence[dict[str, Any]], queues: Sequence[dict[str, Any]],
                  jobs: Sequence[dict[str, Any]], spec: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """When a job of `spec` submitted now would start: the simulator run from the current state (the
    hosts, the running jobs with what is left of their time, the pending jobs, then this one)."""
    from simulator import engine, workload

    assumed = [f"a job with neither an estimate (-We) nor a run limit (-W) runs {DEFAULT_WAIT_RUN_S} s",
               "running jobs run out their estimate or limit from when they started",
               "no job arrives after this one and no host joins or leaves"]
    fleet = [api.HostSpec(name=h["spec"]["name"], slots=number(h["spec"].get("slots")),
                          memory_mb=number(h["spec"].get("memory_mb")))
             for h in hosts if h.get("status") == "HOST_OK" and not h.get("closed")]
    if not fleet:
        return {"start_in_s": None, "why": "no host is up and open: it would wait until one is",
                "assumed": assumed}
    sim_queues = [json_format.ParseDict(q, api.Queue(), ignore_unknown_fields=True) for q in queues]
    sim_jobs, key, arrays = [], 0, 0
    ordered = sorted(jobs, key=lambda j: (j.get("state") not in ("RUN", "USUSP", "SSUSP"),
                                          number(j.get("id"))))
    for job in ordered:
        state = job.get("state")
        if state not in ("PEND", "RUN", "USUSP", "SSUSP"):
            continue
        job_spec_ = json_format.ParseDict(job.get("spec", {}), api.JobSpec(), ignore_unknown_fields=True)
        if job_spec_.HasField("array"):
            arrays += 1  # its elements not yet made jobs are not simulated
            continue
        if not job_spec_.command:
            job_spec_.command.append("job")  # a caller who may not see commands: what runs does not matter
        run_s = number(job_spec_.estimate_s) or number(job_spec_.run_limit_s) or DEFAULT_WAIT_RUN_S
        if state != "PEND":
            run_s = max(1, run_s - (now_ms - number(job.get("start_time_ms"), now_ms)) // 1000)
        job_spec_.ClearField("depend")
        key += 1
        sim_jobs.append(workload.SimJob(key, key, run_s * 1000, job_spec_))  # in this order, a ms apart
    if arrays:
        assumed.append(f"the elements of {arrays} job array(s) not yet started are left out")
    mine = json_format.ParseDict(spec, api.JobSpec(), ignore_unknown_fields=True)
    mine.user = mine.user or "you"
    run_s = mine.estimate_s or mine.run_limit_s or DEFAULT_WAIT_RUN_S
    key += 1
    sim_jobs.append(workload.SimJob(key, key, run_s * 1000, mine))
    result = engine.simulate(workload.Workload(sim_jobs, fleet, sim_queues or [api.Queue(name="normal")],
                                               "the cluster now"))
    finished = {f.key: f for f in result.finished}
    ours = finished.get(key)
    if ours is None:
        return {"start_in_s": None, "why": "it would not start: no host could run it", "assumed": assumed}
    start_s = max(0.0, (ours.start_ms - ours.submit_ms) / 1000)
    return {"start_in_s": round(start_s), "ahead": key - 1, "hosts": len(fleet),
            "why": f"simulated {key - 1} job(s) now running or waiting, then this one, on {len(fleet)} "
                   "host(s)",
            "assumed": assumed}
