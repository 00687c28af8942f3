"""bhist: jobs' history as LSF 10.1 shows it: a summary of the time spent in each state, or, with
`-l`, each job's events (submitted, dispatched, suspended, resumed, requeued, ended) with their
times, then that summary.

By default the caller's unfinished jobs; `-a` adds finished ones (live
and in the replicated history), `-d` only those. The events are the job
record's timeline (every state change apply made, from entry format 24:
controller/fsm/timeline.py), and the times per state are added up from it;
a job older than that shows its submit, last start and end, and times
from those.
"""

from __future__ import annotations

import argparse
import sys
import time

from cli.lsf import formats
from cli.lsf.bjobs import name_matches
from cli.lsf.formats import wrap
from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

GETOPT = ("ladprswh", "uJqP", ())
STATES = ("PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "UNKWN")


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-l", dest="long", action="store_true", help="each job's events")
    p.add_argument("-a", dest="all_states", action="store_true", help="finished jobs too")
    p.add_argument("-d", dest="done", action="store_true", help="only finished jobs")
    p.add_argument("-p", dest="pending", action="store_true", help="pending jobs")
    p.add_argument("-r", dest="running", action="store_true", help="running jobs")
    p.add_argument("-s", dest="suspended", action="store_true", help="suspended jobs")
    p.add_argument("-w", dest="wide", action="store_true", help="wide")
    p.add_argument("-u", dest="user", metavar="user_name|all")
    p.add_argument("-J", dest="name", metavar="job_name")
    p.add_argument("-q", dest="queue", metavar="queue_name")
    p.add_argument("-P", dest="project", metavar="project_name")
    p.add_argument("ids", nargs="*", metavar="job_ID")


def _jobs(client: Client, args: argparse.Namespace) -> list[api.Job]:
    if args.ids:
        found = []
        for ref in args.ids:
            try:
                found.append(client.get_job(ref))
            except XceError as exc:
                if exc.code_name not in ("NOT_FOUND", "INVALID_ARGUMENT"):
                    raise
                print(f"Job <{shown(ref)}>: No matching job found", file=sys.stderr)
        return found
    user = args.user or client.who_am_i().name
    filters = [] if user == "all" else [f"user:eq:{user}"]
    if args.queue:
        filters.append(f"queue:eq:{args.queue}")
    jobs = [j for j in client.list_jobs(filters) if not j.spec.HasField("array")]
    if args.all_states or args.done:
        request = api.HistoryRequest(user="" if user == "all" else user, queue=args.queue or "")
        seen = {j.id for j in jobs}
        jobs.extend(j for j in client.history(request) if j.id not in seen)
    wanted: set[int] = set()
    if args.pending:
        wanted |= {api.PEND, api.PSUSP}
    if args.running:
        wanted.add(api.RUN)
    if args.suspended:
        wanted |= {api.USUSP, api.SSUSP, api.PSUSP}
    if args.done:
        wanted |= set(formats.FINISHED)
    if not wanted:
        wanted = set(formats.UNFINISHED) | (set(formats.FINISHED) if args.all_states else set())
    return [j for j in jobs if j.state in wanted and (not args.name or name_matches(args.name, j))
            and (not args.project or (j.spec.project or "default") == args.project)]


def _times(job: api.Job, now_ms: int) -> dict[str, int]:
    """Seconds in each state, and the total: from the timeline, else as far as the record says."""
    end = job.end_time_ms if job.state in formats.FINISHED and job.end_time_ms else now_ms
    if job.timeline:
        spent = dict.fromkeys(STATES, 0)
        state, since = api.PSUSP if job.spec.hold else api.PEND, job.submit_time_ms
        for event in job.timeline:
            name = api.JobState.Name(state)
            if name in spent:
                spent[name] += max(0, event.time_ms - since)
            state, since = event.state, event.time_ms
        name = api.JobState.Name(state)
        if name in spent:
            spent[name] += max(0, end - since)
        seconds = {k: v // 1000 for k, v in spent.items()}
        return {**seconds, "TOTAL": max(0, (end - job.submit_time_ms) // 1000)}
    start = job.start_time_ms or (end if job.state in formats.FINISHED else 0)
    pend = ((start or end) - job.submit_time_ms) // 1000
    suspended = job.suspended_ms // 1000
    run = max(0, (end - start) // 1000 - suspended) if start else 0
    return {"PEND": max(0, pend), "PSUSP": 0, "RUN": run,
            "USUSP": suspended if job.state == api.USUSP else 0,
            "SSUSP": suspended if job.state != api.USUSP else 0, "UNKWN": 0,
            "TOTAL": max(0, (end - job.submit_time_ms) // 1000)}


def run(client: Client, args: argparse.Namespace) -> int:
    jobs = sorted(_jobs(client, args), key=lambda j: j.id)
    if not jobs:
        if not args.ids:
            print("No matching job found", file=sys.stderr)
        return 255
    now_ms = int(time.time() * 1000)
    if args.long:
        print(("-" * 78 + "\n\n").join(_long(j, now_ms) for j in jobs))
        return 0
    print("Summary of time in seconds spent in various states:")
    print("JOBID   USER    JOB_NAME  PEND    PSUSP   RUN     USUSP   SSUSP   UNKWN   TOTAL")
    for job in jobs:
        spent = _times(job, now_ms)
        name = shown(formats.job_name(job))
        print(f"{formats.job_ref(job):<7} {shown(job.spec.user)[:7]:<7} {formats.cut(name, 9):<9} "
              + " ".join(f"{spent[k]:<7}" for k in STATES)
              + f" {spent['TOTAL']}")
    return 0


def _long(job: api.Job, now_ms: int) -> str:
    spec = job.spec
    lines = [wrap(shown(f"Job <{formats.job_ref(job)}>, Job Name <{formats.job_name(job)}>, "
                         f"User <{spec.user}>, "
                         f"Project <{spec.project or 'default'}>, Command <{formats.command_line(job)}>"))]
    lines.append(wrap(shown(f"{formats.long_time(job.submit_time_ms)}: Submitted from host "
                             f"<{formats.from_host(job)}>, to Queue <{spec.queue}>, CWD "
                             f"<{formats.FIELDS['sub_cwd'][1](job)}>;")))
    lines += [wrap(shown(f"{formats.long_time(at)}: {words}")) for at, words in _events(job)]
    spent = _times(job, now_ms)
    upto = job.end_time_ms if job.state in formats.FINISHED and job.end_time_ms else now_ms
    lines.append(f"\nSummary of time in seconds spent in various states by  {formats.long_time(upto)}")
    lines.append("  PEND     PSUSP    RUN      USUSP    SSUSP    UNKWN    TOTAL")
    lines.append("  " + " ".join(f"{spent[k]:<8}" for k in STATES)
                 + f" {spent['TOTAL']}")
    return "\n".join(lines) + "\n"


def _events(job: api.Job) -> list[tuple[int, str]]:
    """(time, LSF's words) of each event after the submit: the timeline's, else the record's."""
    hosts = "".join(f"<{h}>" for h in formats.exec_hosts(job)) or f"<{job.host}>"
    slots = formats.FIELDS["slots"][1](job)
    found: list[tuple[int, str]] = []
    if job.timeline:
        state = api.PSUSP if job.spec.hold else api.PEND
        for event in job.timeline:
            words = _change(state, event, slots)
            if words:
                found.append((event.time_ms, words))
            state = event.state
        if job.start_time_ms and job.pid and job.state not in (api.PEND, api.PSUSP):
            found.append((job.start_time_ms, f"Starting (Pid {job.pid});"))
            found.sort(key=lambda pair: pair[0])
    elif job.start_time_ms:
        found.append((job.start_time_ms, f"Dispatched {slots} Task(s) on Host(s) {hosts};"))
        found.append((job.start_time_ms, f"Starting (Pid {job.pid or '-'});"))
    if job.state in formats.FINISHED and job.end_time_ms:
        used = job.usage.user_cpu_s + job.usage.system_cpu_s
        ended = "Done successfully." if job.state == api.DONE else \
            f"Exited with exit code {formats.exit_code(job)}."
        found = [(at, words) for at, words in found if not words.startswith(("Done", "Exited"))]
        found.append((job.end_time_ms, f"{ended} The CPU time used is {used:.1f} seconds;"))
        if formats.exit_reason(job):
            found.append((job.end_time_ms, f"Exit reason: {formats.exit_reason(job)};"))
    return found


def _change(before: int, event: api.JobEvent, slots: str) -> str:
    """LSF's words for one state change of the timeline ("" for none worth a line)."""
    state = event.state
    if state == api.RUN:
        if before in (api.USUSP, api.SSUSP):
            return "Resumed;"
        return f"Dispatched {slots} Task(s) on Host(s) <{event.host}>;"
    if state == api.USUSP:
        return "Suspended by the user or administrator;"
    if state == api.SSUSP:
        return "Suspended: preempted;"
    if state == api.PSUSP:
        return "Suspended by the user or administrator while pending;"
    if state == api.PEND:
        if before == api.PSUSP:
            return "Resumed by the user or administrator (pending again);"
        return f"Pending: Job has been requeued (attempt {event.attempt});"
    if state == api.UNKWN:
        return f"Unknown: host <{event.host}> stopped answering;"
    if state == api.DONE:
        return "Done successfully."
    if state == api.EXIT:
        return "Exited."
    return ""


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"bhist: {shown(exc.message)}"
