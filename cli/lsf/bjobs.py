"""bjobs: jobs as LSF 10.1 shows them.

By default the caller's unfinished jobs; `-a` adds those finished within
the clean period (an hour by default, as LSF's CLEAN_PERIOD; older ones are
in `bhist`/`xce history`), `-d` shows only those, `-r` running, `-p`
pending (with reasons), `-s` suspended. `-u user|all`, `-q`, `-m`, `-P`,
`-J name` (`*` matches any text), job ids (`17`, an array's elements;
`17[3]` one). Formats: LSF's table (openlava's widths: a job name cut to its
last characters behind `*`), `-w` (nothing cut), `-l` (long), `-o "fields"`
with `-noheader` and `-json`. An array's elements are listed as LSF lists
them: the array's id, the element's name `name[3]`. When nothing matches it
says so on stderr (`No unfinished job found`) and exits 255, as LSF does.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable

from cli.lsf import formats
from client.channel import Client, XceError
from xce.printable import shown
from xce.rules import job_groups
from xce.v1 import api_pb2 as api

GETOPT = ("VladpsrwWAhX", "Jqumg", ("-noheader", "-json", "-sum", "-UF", "-hms"))


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-a", dest="all_states", action="store_true", help="also jobs finished recently")
    p.add_argument("-d", dest="done", action="store_true", help="only jobs finished recently")
    p.add_argument("-r", dest="running", action="store_true", help="running jobs")
    p.add_argument("-p", dest="pending", action="store_true", help="pending jobs, with their reasons")
    p.add_argument("-s", dest="suspended", action="store_true", help="suspended jobs")
    p.add_argument("-u", dest="user", metavar="user_name|all", help="this user's jobs, or all users'")
    p.add_argument("-J", dest="name", metavar="job_name", help="jobs of this name (* matches any text)")
    p.add_argument("-q", dest="queue", metavar="queue_name", help="jobs of this queue")
    p.add_argument("-m", dest="host", metavar="host_name", help="jobs running on this host")
    p.add_argument("-P", dest="project", metavar="project_name", help="jobs of this project")
    p.add_argument("-g", dest="group", metavar="job_group_name", help="jobs of this group and those under it")
    p.add_argument("-w", dest="wide", action="store_true", help="wide: nothing cut")
    p.add_argument("-W", dest="wide", action="store_true", help="wide")
    p.add_argument("-l", dest="long", action="store_true", help="long format")
    p.add_argument("-A", dest="arrays", action="store_true", help="one line per job array: its counts")
    p.add_argument("-o", dest="format", metavar='"field[:[-]width] ... [delimiter=\'c\']"',
                   help="these fields (jobid stat user queue job_name exec_host submit_time ...)")
    p.add_argument("-noheader", dest="noheader", action="store_true", help="no header line")
    p.add_argument("-json", dest="json", action="store_true", help="JSON (with -o: those fields)")
    p.add_argument("-X", dest="uncompressed", action="store_true", help="hosts not compressed (as here)")
    p.add_argument("-V", dest="version", action="store_true", help="the version")
    p.add_argument("ids", nargs="*", metavar="job_ID", help='job ids: 17, or "17[3]"')


def prepare(args: argparse.Namespace) -> bool:
    if args.version:
        print("XCE's bjobs: the commands of IBM Spectrum LSF 10.1 over an XCE cluster", file=sys.stderr)
        return False
    if args.wide and args.long:
        raise ValueError("-w and -l cannot be used together")
    args.fields, args.delimiter = formats.parse_format(args.format) if args.format else (None, " ")
    return True


def _states(args: argparse.Namespace) -> tuple[int, ...] | None:
    """The states asked for; None: any."""
    chosen: list[int] = []
    if args.running:
        chosen.append(api.RUN)
    if args.pending:
        chosen.extend((api.PEND, api.PSUSP))
    if args.suspended:
        chosen.extend((api.USUSP, api.SSUSP, api.PSUSP))
    if args.done:
        chosen.extend(formats.FINISHED)
    if args.all_states or args.ids:
        return tuple(dict.fromkeys(chosen)) or None
    return tuple(dict.fromkeys(chosen)) or formats.UNFINISHED


def name_matches(pattern: str, job: api.Job) -> bool:
    """-J as LSF matches it: `*` any text; an array's elements also match by the array's name."""
    expression = re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)
    name = formats.job_name(job)
    if expression.fullmatch(name):
        return True
    return bool(job.array_id) and bool(expression.fullmatch(name.rpartition("[")[0]))


def _selected(client: Client, args: argparse.Namespace) -> tuple[list[api.Job], list[str]]:
    """The jobs to show, and the ids asked for that are not found."""
    missing: list[str] = []
    if args.ids:
        jobs: list[api.Job] = []
        for ref in args.ids:
            found = _by_id(client, ref)
            if not found:
                missing.append(ref)
            jobs.extend(found)
    else:
        filters = ["array:eq:0"] if args.arrays else []
        user = args.user or client.who_am_i().name
        if user != "all":
            filters.append(f"user:eq:{user}")
        if args.queue:
            filters.append(f"queue:eq:{args.queue}")
        jobs = [j for j in client.list_jobs(filters) if args.arrays or not j.spec.HasField("array")]
    states = _states(args)
    return [j for j in jobs if _keep(j, args, states)], missing


def _by_id(client: Client, ref: str) -> list[api.Job]:
    """A job, an element, or every element of an array (its record when it has none left)."""
    try:
        job = client.get_job(ref)
    except XceError as exc:
        if exc.code_name in ("NOT_FOUND", "INVALID_ARGUMENT"):
            return []
        raise
    if job.spec.HasField("array") and not job.array_id:
        elements = client.list_jobs([f"array:eq:{job.id}"])
        return elements or [job]
    return [job]


def _keep(job: api.Job, args: argparse.Namespace, states: Iterable[int] | None) -> bool:
    if states is not None and job.state not in states and not (args.arrays and job.spec.HasField("array")):
        return False
    if args.ids and args.user and args.user != "all" and job.spec.user != args.user:
        return False
    if args.name and not name_matches(args.name, job):
        return False
    if args.project and (job.spec.project or "default") != args.project:
        return False
    if args.group and not job_groups.within(job.spec.job_group, args.group):
        return False
    return not args.host or any(a.host == args.host for a in job.allocation) or job.host == args.host and \
        job.state not in (api.PEND, api.PSUSP)


def run(client: Client, args: argparse.Namespace) -> int:
    jobs, missing = _selected(client, args)
    jobs.sort(key=_order)
    for ref in missing:
        print(f"Job <{shown(ref)}> is not found", file=sys.stderr)
    if not jobs:
        if not missing:
            print(_nothing(args), file=sys.stderr)
        return 255
    if args.json:
        import json

        fields = args.fields or [(k, 0, False) for k in DEFAULT_FIELDS]
        print(json.dumps(formats.json_records(jobs, fields), indent=2))
    elif args.fields:
        for row in formats.custom_rows(jobs, args.fields, args.delimiter, header=not args.noheader):
            print(row)
    elif args.long:
        print("\n" + ("-" * 78 + "\n\n").join(long_form(j) for j in jobs))
    elif args.arrays:
        _array_table(jobs, args)
    else:
        _table(jobs, args)
    return 255 if missing else 0


DEFAULT_FIELDS = ("jobid", "user", "stat", "queue", "from_host", "exec_host", "job_name", "submit_time")


def _order(job: api.Job) -> tuple[int, int, int, int]:
    """LSF lists running jobs first, then pending, then finished; by id within each."""
    rank = 0 if job.state in (api.RUN, api.USUSP, api.SSUSP, api.UNKWN) else 1 if job.state in \
        (api.PEND, api.PSUSP) else 2
    return rank, job.array_id or job.id, job.array_index, job.id


def _nothing(args: argparse.Namespace) -> str:
    if args.name:
        return f"Job <{shown(args.name)}> is not found"
    if args.done and not (args.running or args.pending or args.suspended):
        return "No done job found"
    if args.pending and not (args.running or args.suspended or args.done):
        return "No pending job found"
    if args.running and not (args.pending or args.suspended or args.done):
        return "No running job found"
    if args.suspended and not (args.running or args.pending or args.done):
        return "No suspended job found"
    if args.all_states or args.done:
        return "No job found"
    return "No unfinished job found"


def _table(jobs: list[api.Job], args: argparse.Namespace) -> None:
    pending_view = args.pending and not (args.running or args.suspended or args.done or args.all_states)
    if pending_view:
        print("JOBID   USER    STAT  QUEUE       FROM_HOST      JOB_NAME           SUBMIT_TIME")
    else:
        print("JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME")
    for job in jobs:
        user, queue, origin = shown(job.spec.user), shown(job.spec.queue), shown(formats.from_host(job))
        name, submitted = shown(formats.job_name(job)), formats.table_time(job.submit_time_ms)
        hosts = [shown(h) for h in formats.exec_hosts(job)]
        state = formats.state(job)
        if pending_view:
            print(f"{formats.job_id(job):<7} {user[:7]:<7} {state:<5.5} {queue[:11]:<11} {origin[:14]:<14} "
                  f"{formats.cut(name, 20)[:18]:<18} {submitted}")
            if job.state in (api.PEND, api.PSUSP):
                print(f" {shown(job.pending_reason or 'waiting for the scheduler')};")
        elif args.wide:
            waiting = job.state in (api.PEND, api.PSUSP)
            exec_host = ":".join(hosts) if hosts else ("   -    " if waiting else "")
            print(f"{formats.job_id(job):<7} {user:<7} {state:<5.5} {queue:<10} {origin:<11} {exec_host:<11} "
                  f"{name:<10} {submitted}")
        else:
            print(f"{formats.job_id(job):<7} {user[:7]:<7} {state:<5.5} {queue[:10]:<10} {origin[:11]:<11} "
                  f"{(hosts[0] if hosts else '')[:11]:<11} {formats.cut(name, 10):<10} {submitted}")
            for host in hosts[1:]:
                print(f"{'':45}{host}")


def _array_table(jobs: list[api.Job], args: argparse.Namespace) -> None:
    print("JOBID    ARRAY_SPEC  OWNER   NJOBS PEND DONE  RUN EXIT SSUSP USUSP PSUSP")
    for job in (j for j in jobs if j.spec.HasField("array")):
        counts = list(job.array.counts) + [0] * 10
        from xce.rules.array_spec import describe

        spec = shown(f"{job.spec.name}[{describe(job.spec.array)}]")
        owner = shown(job.spec.user)
        if not args.wide:
            spec, owner = spec[:8], owner[:8]
        print(f"{job.id:<7}  {spec:<8} {owner:>8}   {job.array.size:5d} {counts[api.PEND]:4d} "
              f"{counts[api.DONE]:4d} {counts[api.RUN]:4d} {counts[api.EXIT]:4d} {counts[api.SSUSP]:5d} "
              f"{counts[api.USUSP]:5d} {counts[api.PSUSP]:5d}")


def long_form(job: api.Job) -> str:
    """bjobs -l: who, what and where, then the job's events with their times."""
    spec = job.spec
    command = formats.command_line(job)
    groups = (f"User Group <{spec.user_group}>, " if spec.user_group else "") + \
        (f"Job Group <{spec.job_group}>, " if spec.job_group else "")
    head = (f"Job <{formats.job_ref(job)}>, Job Name <{formats.job_name(job)}>, User <{spec.user}>, "
            f"Project <{spec.project or 'default'}>, {groups}Status <{formats.state(job)}>, "
            f"Queue <{spec.queue}>, Command <{command}>")
    lines = [formats.wrap(shown(head))]
    submitted = f"{formats.long_time(job.submit_time_ms)}: Submitted from host <{formats.from_host(job)}>, " \
                f"CWD <{formats.FIELDS['sub_cwd'][1](job)}>"
    if spec.stdout_path:
        submitted += f", Output File <{spec.stdout_path}>"
    if spec.stderr_path and spec.stderr_path != spec.stdout_path:
        submitted += f", Error File <{spec.stderr_path}>"
    if spec.slots > 1:
        submitted += f", {spec.slots} Task(s)"
    if spec.resource_req:
        submitted += f", Requested Resources <{spec.resource_req}>"
    if spec.depend:
        submitted += f", Dependency Condition <{spec.depend}>"
    lines.append(formats.wrap(shown(submitted + ";")))
    if job.state in (api.PEND, api.PSUSP):
        lines.append(" PENDING REASONS:")
        lines.append(f" {shown(job.pending_reason or 'waiting for the scheduler')};")
    elif job.start_time_ms:
        hosts = formats.exec_hosts(job)
        slots = formats.FIELDS["slots"][1](job)
        lines.append(formats.wrap(f"{formats.long_time(job.start_time_ms)}: Started {slots} "
                           f"Task(s) on Host(s) {''.join(f'<{h}>' for h in hosts)}, Allocated "
                           f"{slots} Slot(s) on Host(s) "
                           f"{''.join(f'<{h}>' for h in hosts)}, Execution CWD <{shown(spec.cwd)}>;"))
    if job.state in formats.FINISHED and job.end_time_ms:
        used = job.usage.user_cpu_s + job.usage.system_cpu_s
        if job.state == api.DONE:
            ended = "Done successfully."
        else:
            ended = f"Exited with exit code {formats.exit_code(job)}."
        lines.append(formats.wrap(f"{formats.long_time(job.end_time_ms)}: {ended} The CPU time used is "
                           f"{used:.1f} seconds."))
        if formats.exit_reason(job):
            lines.append(formats.wrap(f"{formats.long_time(job.end_time_ms)}: Exit reason: "
                               f"{formats.exit_reason(job)}."))
    return "\n".join(lines) + "\n"


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"bjobs: {shown(exc.message)}"
