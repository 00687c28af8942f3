"""`xce jobs` (like bjobs, `-p` for pending reasons) and `xce job` (one job in full).

An array is one line, its summary, unless `-A` asks for its elements; the
pending view leaves arrays out (their elements say why they wait) and says
so when no scheduler decides anything at all.
"""

from __future__ import annotations

import argparse
import time

from cli.output import as_dict, emit, when
from cli.parser import STALE_HELP
from client.channel import Client
from xce.printable import shown
from xce.rules.array_spec import describe as array_describe
from xce.v1 import api_pb2 as api


def declare_jobs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", help="only these states, comma-separated (PEND,RUN,...)")
    p.add_argument("--queue", help="only this queue")
    p.add_argument("--filter", action="append", default=[], help="field:op:value, repeatable")
    p.add_argument("-p", "--pending", action="store_true",
                   help="pending and preempted (SSUSP) jobs with their reasons (like bjobs -p)")
    p.add_argument("-A", "--array-elements", action="store_true",
                   help="every element of each job array, not only the array's summary")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)


def run_jobs(client: Client, args: argparse.Namespace) -> int:
    filters = list(args.filter)
    if args.state:
        filters.append(f"state:in:{args.state.upper()}")
    if args.queue:
        filters.append(f"queue:eq:{args.queue}")
    if args.pending:
        filters.append("state:in:PEND,PSUSP,SSUSP")
    elif not args.array_elements:
        filters.append("array:eq:0")  # an array is one line, its summary
    jobs = client.list_jobs(filters, stale=args.stale)
    if args.pending:
        waiting = _no_scheduler(client.status())
        jobs = [j for j in jobs if not j.spec.HasField("array")]  # its elements say why they wait
        return emit(args, lambda: {"jobs": [as_dict(j) for j in jobs], "no_scheduler": waiting},
                    lambda: _pending_table(jobs, waiting))
    return emit(args, lambda: {"jobs": [as_dict(j) for j in jobs]}, lambda: _job_table(jobs))


def declare_job(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="a job id, a readable id, or one element of an array: 17[42]")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)


def run_job(client: Client, args: argparse.Namespace) -> int:
    job = client.get_job(args.id, stale=args.stale)
    return emit(args, lambda: as_dict(job), lambda: _job_long(job))


def job_label(job: api.Job) -> str:
    """A job as LSF names it: 17, or 17[42] for an element of array 17."""
    return f"{job.array_id}[{job.array_index}]" if job.array_id else str(job.id)


def job_name(job: api.Job) -> str:
    if job.spec.HasField("array"):
        return f"{job.spec.name}[{array_describe(job.spec.array)}]"
    return job.spec.name or "-"


def array_counts(job: api.Job) -> str:
    """An array's elements per state, as `bjobs -A` counts them."""
    found = [f"{n} {api.JobState.Name(state)}" for state, n in enumerate(job.array.counts) if n]
    return f"{job.array.size} elements: " + ", ".join(found)


def _job_table(jobs: list[api.Job]) -> None:
    print(f"{'JOBID':>8}  {'STAT':<6}{'QUEUE':<12}{'SLOTS':>5}  {'NAME':<20}COMMAND")
    for job in jobs:
        print(f"{job_label(job):>8}  {api.JobState.Name(job.state):<6}{shown(job.spec.queue):<12}"
              f"{job.spec.slots:>5}  {shown(job_name(job))[:19]:<20}{shown(' '.join(job.spec.command))[:60]}")
    arrays = [j for j in jobs if j.spec.HasField("array")]
    if arrays:
        names = [api.JobState.Name(s) for s in (api.PEND, api.PSUSP, api.RUN, api.USUSP, api.SSUSP, api.DONE,
                                                api.EXIT, api.UNKWN)]
        print(f"\n{'ARRAY':>8}  {'NJOBS':>8}" + "".join(f"{n:>8}" for n in names) + "  NAME")
        for job in arrays:
            counts = job.array.counts
            row = "".join(f"{counts[api.JobState.Value(n)] if len(counts) > api.JobState.Value(n) else 0:>8}"
                          for n in names)
            print(f"{job.id:>8}  {job.array.size:>8}{row}  {shown(job_name(job))[:40]}")


def _no_scheduler(status: api.StatusResponse) -> str:
    """Why no pass runs at all (waiting for the lease), or "" if a scheduler holds it."""
    if not status.scheduler_lease_holder:
        return "no scheduler holds the lease"
    if status.scheduler_lease_expires_ms < time.time() * 1000:  # the leader's clock against ours
        return f"the lease of {status.scheduler_lease_holder} expired"
    return ""


def pending_reason(job: api.Job, no_scheduler: str = "") -> str:
    """What `xce jobs -p` says: the committed reason, with the code, unless nothing decides at all."""
    held = job.pending_code == api.PEND_JOB_HELD or job.state == api.PSUSP
    if job.state == api.SSUSP:  # preempted: what it waits for (controller/fsm/preempt.py)
        return f"SUSPENDED: {job.pending_reason or 'suspended by the system'}"
    if no_scheduler and not held:
        code, words = api.PEND_WAITING_FOR_SCHEDULER, no_scheduler
        if job.pending_reason:
            words += f" (last: {job.pending_reason})"
    elif job.pending_code == api.PENDING_REASON_UNSPECIFIED and not job.pending_reason:
        code, words = api.PEND_WAITING_FOR_SCHEDULER, "waiting for the scheduler's next pass"
    else:
        code, words = job.pending_code, job.pending_reason
    name = api.PendingReason.Name(code).removeprefix("PEND_") if code else "-"
    return f"{name}: {words}"


def _pending_table(jobs: list[api.Job], no_scheduler: str) -> None:
    print(f"{'JOBID':>8}  {'STAT':<6}{'QUEUE':<12}{'NAME':<20}PENDING REASON")
    for job in jobs:
        print(f"{job_label(job):>8}  {api.JobState.Name(job.state):<6}{shown(job.spec.queue):<12}"
              f"{shown(job_name(job))[:19]:<20}{shown(pending_reason(job, no_scheduler))}")
def _job_long(job: api.Job) -> None:
    if job.array_id:
        own = f"job {job.id}" if job.id else "not a job yet"
        print(f"Job <{job_label(job)}> ({shown(job.readable_id)}; {own})")
    else:
        print(f"Job <{job.id}> ({shown(job.readable_id)})")
    reason = f"  ({shown(pending_reason(job))})" if job.state in (api.PEND, api.PSUSP, api.SSUSP) and \
        not job.spec.HasField("array") else ""
    print(f"  state      {api.JobState.Name(job.state)}{reason}")
    if job.spec.HasField("array"):
        print(f"  array      {shown(job_name(job))}: {array_counts(job)}")
    print(f"  name       {shown(job_name(job))}")
    slots = str(job.spec.slots)
    if job.spec.HasField("min_slots"):
        slots = f"{job.spec.min_slots},{slots}"
    exclusive = "   exclusive (-x)" if job.spec.exclusive else ""
    print(f"  queue      {shown(job.spec.queue)}   priority {job.spec.priority}   slots {slots}{exclusive}")
    print(f"  command    {shown(' '.join(job.spec.command))}")
    project = f"   project {shown(job.spec.project)}" if job.spec.project else ""
    print(f"  cwd        {shown(job.spec.cwd or '-')}   user {shown(job.spec.user or '-')}{project}")
    print(f"  attempt    {job.attempt}   submitted {job.submit_time_ms} ms")
    if job.spec.resource_req:
        print(f"  resources  {shown(job.spec.resource_req)}")
    if job.host:
        print(f"  hosts      {_allocation(job)}")
    if job.spec.mem_limit_mb:
        print(f"  mem limit  {job.spec.mem_limit_mb} MB per host")
    if job.spec.run_limit_s or job.spec.estimate_s:
        estimate = f"   estimate {_hours_minutes(job.spec.estimate_s)}" if job.spec.estimate_s else ""
        limit = _hours_minutes(job.spec.run_limit_s) if job.spec.run_limit_s else "none"
        print(f"  run limit  {limit}{estimate}")
    if job.preemptions or job.preempting:
        victims = f"   preempting {', '.join(map(str, job.preempting))}" if job.preempting else ""
        print(f"  preempted  {job.preemptions} time{'s' if job.preemptions != 1 else ''}{victims}")
    if job.spec.depend:
        verdict = {api.DEPEND_PENDING: "not yet", api.DEPEND_SATISFIED: "satisfied",
                   api.DEPEND_NEVER: "never satisfied"}.get(job.depend_state, "not evaluated")
        kill = ", killed if it can never hold" if job.spec.kill_on_invalid_dep else ""
        print(f"  depends on {shown(job.spec.depend)}   ({verdict}{kill})")
    if job.usage_time_ms and job.state not in (api.DONE, api.EXIT):
        now = job.usage_now
        print(f"  usage      cpu {now.user_cpu_s + now.system_cpu_s:.1f} s, rss {now.max_rss_kb // 1024} MB, "
              f"running {now.wall_s:.0f} s (at {when(job.usage_time_ms)}, on {shown(job.host)})")
    _start_failures(job)
    if job.state in (api.DONE, api.EXIT):
        reason = f"   ({shown(job.exit_reason)})" if job.exit_reason else ""
        print(f"  exit code  {job.exit_code}{reason}")
        if job.usage.wall_s or job.usage.user_cpu_s:
            used = job.usage
            print(f"  usage      cpu {used.user_cpu_s + used.system_cpu_s:.1f} s, max rss "
                  f"{used.max_rss_kb // 1024} MB, ran {used.wall_s:.0f} s")


def _start_failures(job: api.Job) -> None:
    """What its workers' refusals left: the last start that failed for a reason of its own (and how often
    such a start failed, when the job may try again), the hosts that refused its owner."""
    if job.start_error:
        count = job.start_failures
        tries = f" {count} time{'s' if count != 1 else ''}" if count else ""
        print(f"  start      failed{tries}: {shown(job.start_error)}")
        if job.state == api.PEND and job.not_before_ms:
            print(f"  next try   not before {when(job.not_before_ms)}")
    if job.refused_owner:
        hosts = ", ".join(shown(h) for h in sorted(job.refused_owner))
        print(f"  refused    by {hosts} (its owner: no account there, or not allowed)")


def _hours_minutes(seconds: int) -> str:
    """LSF's [hour:]minute, as -W takes it."""
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}"


def _allocation(job: api.Job) -> str:
    """Where the attempt runs (or ran): host*slots, and what rusage[] reserved there."""
    if not job.allocation:
        return f"{shown(job.host)}*{job.spec.slots}"
    words = []
    for part in job.allocation:
        reserved = ",".join(f"{shown(name)}={amount}" for name, amount in sorted(part.resources.items()))
        words.append(f"{shown(part.host)}*{part.slots}" + (f" ({reserved})" if reserved else ""))
    return " ".join(words)
