"""What squeue and sacct share: the jobs a user asks for, and Slurm's %-format and field tables.

squeue's `-o "%.18i %.9P %.8j"`: `%[.][size]type`, `.` right-justifies, a
size pads and cuts; sacct's `--format=JobID,State%20,ExitCode`: names, each
with an optional `%size`. Each reads one job through the same functions
(cli/slurm/formats.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from cli.parser import UsageError
from cli.slurm import array_rest, formats
from xce import hostlist
from xce.v1 import api_pb2 as api

Field = Callable[[api.Job, int], str]


def _nodes(job: api.Job) -> str:
    parts = [a.host for a in job.allocation] or ([job.host] if job.host else [])
    return hostlist.compress(parts) if parts else ""


def _limit(job: api.Job) -> str:
    seconds = formats.limit_seconds(job)
    return formats.squeue_time(seconds) if seconds is not None else "UNLIMITED"


def _node_count(job: api.Job) -> str:
    return str(len(job.allocation) or 1)


# The states whose NODELIST(REASON) is the reason (squeue's _print_job_reason_list); the others' is
# their nodes (none for a job cancelled before it ran).
REASON_STATES = frozenset({"PENDING", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "FAILED"})


def _reason_or_nodes(job: api.Job, now_ms: int) -> str:
    if formats.state(job) in REASON_STATES:
        return f"({formats.state_reason(job)})"
    return _nodes(job)


def _end(job: api.Job) -> str:
    """%e: when it ended, or (running) when its limit ends it; N/A while it waits."""
    end = formats.expected_end_ms(job)
    return formats.timestamp(end) if end and job.state not in (api.PEND, api.PSUSP) else "N/A"


def _array_job(job: api.Job) -> str:
    return str(job.array_id or job.id)


def _array_task(job: api.Job) -> str:
    if array_rest.is_rest(job):
        return array_rest.job_id(job, True).partition("_[")[2][:-1]
    return str(job.array_index) if job.array_id else "N/A"


# squeue's letters.
SQUEUE: dict[str, Field] = {
    "i": lambda j, now: formats.job_id(j, True), "A": lambda j, now: _array_job(j),
    "a": lambda j, now: _array_task(j),
    "F": lambda j, now: _array_job(j), "K": lambda j, now: _array_task(j),
    "j": lambda j, now: formats.name(j), "u": lambda j, now: j.spec.user, "P": lambda j, now: j.spec.queue,
    "t": lambda j, now: formats.short_state(j), "T": lambda j, now: formats.state(j),
    "M": lambda j, now: formats.squeue_time(formats.run_seconds(j, now)), "l": lambda j, now: _limit(j),
    "D": lambda j, now: _node_count(j), "R": _reason_or_nodes, "N": lambda j, now: _nodes(j),
    "r": lambda j, now: formats.state_reason(j), "C": lambda j, now: str(j.spec.slots),
    "S": lambda j, now: formats.timestamp(j.start_time_ms) if j.start_time_ms else "N/A",
    "V": lambda j, now: formats.timestamp(j.submit_time_ms),
    "e": lambda j, now: _end(j),
    "Q": lambda j, now: str(formats.priority(j)), "Z": lambda j, now: j.spec.cwd,
    "o": lambda j, now: formats.script_name(j)[:200] or "(null)", "q": lambda j, now: "normal",
}
SQUEUE_HEADERS = {"i": "JOBID", "A": "ARRAY_JOB_ID", "a": "ARRAY_TASK_ID", "F": "ARRAY_JOB_ID",
                  "K": "ARRAY_TASK_ID", "j": "NAME", "u": "USER", "P": "PARTITION", "t": "ST", "T": "STATE",
                  "M": "TIME", "l": "TIME_LIMIT", "D": "NODES", "R": "NODELIST(REASON)", "N": "NODELIST",
                  "r": "REASON", "C": "CPUS", "S": "START_TIME", "V": "SUBMIT_TIME", "e": "END_TIME",
                  "Q": "PRIORITY", "Z": "WORK_DIR", "o": "COMMAND", "q": "QOS"}
SQUEUE_DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"

# squeue's -O/--Format names (matched without case), each the field of a letter's or one of its own,
# with its header; 20 characters wide unless given (`name:[.]size[suffix]`).
SQUEUE_NAMED: dict[str, tuple[str, str]] = {
    "jobarrayid": ("i", "JOBID"), "arrayjobid": ("F", "ARRAY_JOB_ID"), "arraytaskid": ("K", "ARRAY_TASK_ID"),
    "name": ("j", "NAME"), "username": ("u", "USER"), "state": ("T", "STATE"), "statecompact": ("t", "ST"),
    "partition": ("P", "PARTITION"), "numnodes": ("D", "NODES"), "nodelist": ("N", "NODELIST"),
    "reason": ("r", "REASON"), "reasonlist": ("R", "NODELIST(REASON)"), "timeused": ("M", "TIME"),
    "timelimit": ("l", "TIME_LIMIT"), "submittime": ("V", "SUBMIT_TIME"), "starttime": ("S", "START_TIME"),
    "endtime": ("e", "END_TIME"), "numcpus": ("C", "CPUS"), "priority": ("Q", "PRIORITY"),
    "workdir": ("Z", "WORK_DIR"), "command": ("o", "COMMAND"), "qos": ("q", "QOS"),
    "jobid": ("jobid", "JOBID"), "account": ("account", "ACCOUNT"), "comment": ("comment", "COMMENT"),
    "numtasks": ("numtasks", "TASKS"), "exitcode": ("exitcode", "EXIT_CODE"),
    "dependency": ("dependency", "DEPENDENCY"), "batchhost": ("batchhost", "EXEC_HOST"),
    "cpus-per-task": ("cpus-per-task", "CPUS_PER_TASK"), "minmemory": ("minmemory", "MIN_MEMORY"),
    "timeleft": ("timeleft", "TIME_LEFT"),
}
SQUEUE_NAMED_WIDTH = 20
SQUEUE.update({
    "jobid": lambda j, now: str(j.id), "account": lambda j, now: j.spec.project,
    "comment": lambda j, now: j.spec.comment, "numtasks": lambda j, now: j.spec.env.get("SLURM_NTASKS", "1"),
    "exitcode": lambda j, now: formats.exit_code(j),
    "dependency": lambda j, now: formats.dependency(j) or "(null)",
    "batchhost": lambda j, now: (_nodes(j).split(",")[0] if _nodes(j) else "n/a"),
    "cpus-per-task": lambda j, now: j.spec.env.get("SLURM_CPUS_PER_TASK", "1"),
    "minmemory": lambda j, now: f"{j.spec.mem_limit_mb}M" if j.spec.mem_limit_mb else "0",
    "timeleft": lambda j, now: _time_left(j, now),
})
SQUEUE_HEADERS.update({key: header for key, header in SQUEUE_NAMED.values()})

# sacct's fields (the names as Slurm spells them, matched without case).
SACCT: dict[str, Field] = {
    "JobID": lambda j, now: formats.job_id(j), "JobIDRaw": lambda j, now: str(j.id),
    "JobName": lambda j, now: formats.name(j), "User": lambda j, now: j.spec.user,
    "Partition": lambda j, now: j.spec.queue, "Account": lambda j, now: j.spec.project or "",
    "AllocCPUS": lambda j, now: str(j.spec.slots), "NCPUS": lambda j, now: str(j.spec.slots),
    "ReqCPUS": lambda j, now: str(j.spec.slots), "State": lambda j, now: formats.state(j),
    "ExitCode": lambda j, now: formats.exit_code(j), "Elapsed": lambda j, now: formats.elapsed(
        formats.run_seconds(j, now)),
    "ElapsedRaw": lambda j, now: str(formats.run_seconds(j, now)),
    "Start": lambda j, now: formats.timestamp(j.start_time_ms), "End": lambda j, now: formats.timestamp(
        j.end_time_ms) if j.state in (api.DONE, api.EXIT) else "Unknown",
    "Submit": lambda j, now: formats.timestamp(j.submit_time_ms),
    "NodeList": lambda j, now: _nodes(j) or "None assigned",
    "NNodes": lambda j, now: _node_count(j),
    "Timelimit": lambda j, now: formats.elapsed(j.spec.run_limit_s) if j.spec.run_limit_s else "UNLIMITED",
    "Reason": lambda j, now: formats.reason(j), "WorkDir": lambda j, now: j.spec.cwd,
    "MaxRSS": lambda j, now: f"{j.usage.max_rss_kb}K" if j.usage.max_rss_kb else "",
    "TotalCPU": lambda j, now: formats.elapsed(int(j.usage.user_cpu_s + j.usage.system_cpu_s)),
    "CPUTimeRAW": lambda j, now: str(formats.run_seconds(j, now) * j.spec.slots),
    "DerivedExitCode": lambda j, now: formats.exit_code(j), "Priority": lambda j, now: str(j.spec.priority),
    "Comment": lambda j, now: j.spec.comment,
}
SACCT_NAMES = {name.lower(): name for name in SACCT}
SACCT_DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
# sacct's default widths (a negative one: left-justified), from Slurm's sacct field table.
SACCT_WIDTHS = {"JobID": -12, "JobIDRaw": -12, "JobName": 10, "Partition": 10, "Account": 10,
                "AllocCPUS": 10, "State": 10, "ExitCode": 8, "Start": 19, "End": 19, "Submit": 19,
                "NodeList": 15, "User": 9, "Reason": 22, "WorkDir": 20, "NNodes": 8, "ReqCPUS": 8,
                "DerivedExitCode": 15, "Timelimit": 10}


def squeue_format(text: str) -> list[tuple[str, str, int, bool]]:
    """`%.18i %j|x` -> [(literal before, letter, size, right), ...]; a literal tail is a last item with
    no letter."""
    items, position = [], 0
    for found in re.finditer(r"%(\.?)(\d*)([A-Za-z])", text):
        letter = found[3]
        if letter not in SQUEUE:
            raise UsageError(f"Invalid job format specification: {letter}")
        items.append((text[position:found.start()], letter, int(found[2] or 0), bool(found[1])))
        position = found.end()
    items.append((text[position:], "", 0, False))
    return items


def squeue_named_format(text: str) -> list[tuple[str, str, int, bool]]:
    """-O `JobID:10,Name:.30|,State` -> the items squeue_format makes: each field 20 wide unless given
    (`.`: right-justified), a suffix after its size printed after it."""
    items: list[tuple[str, str, int, bool]] = []
    before = ""
    for word in text.split(","):
        if not word.strip():
            continue
        name, _, rest = word.strip().partition(":")
        known = SQUEUE_NAMED.get(name.lower())
        if known is None:
            raise UsageError(f"Invalid job format specification: {name}")
        found = re.fullmatch(r"(\.?)(\d*)(.*)", rest)
        assert found is not None
        size = int(found[2]) if found[2] else SQUEUE_NAMED_WIDTH
        items.append((before, known[0], size, bool(found[1])))
        before = found[3]
    if not items:
        raise UsageError("Invalid job format specification: no field")
    items.append((before, "", 0, False))
    return items


def _time_left(job: api.Job, now_ms: int) -> str:
    seconds = formats.limit_seconds(job)
    if seconds is None:
        return "UNLIMITED"
    return formats.squeue_time(seconds - formats.run_seconds(job, now_ms))


def fit(text: str, size: int, right: bool) -> str:
    if not size:
        return text
    text = text[:size]
    return text.rjust(size) if right else text.ljust(size)


def sacct_cell(text: str, width: int, left: bool) -> str:
    """A table cell: cut to the width with `+` at the end, padded (left or right)."""
    if len(text) > width:
        text = text[:width - 1] + "+"
    return text.ljust(width) if left else text.rjust(width)


def squeue_rows(jobs: list[api.Job], fmt: str, header: bool, named: bool = False,
                now_ms: int | None = None) -> list[str]:
    """squeue's table: `fmt` in -o's letters, or -O's names (`named`); times run to `now_ms` (now)."""
    items = squeue_named_format(fmt) if named else squeue_format(fmt)
    now = formats.now_ms() if now_ms is None else now_ms
    rows = []
    if header:
        rows.append("".join(before + (fit(SQUEUE_HEADERS.get(letter, letter), size, right) if letter else "")
                            for before, letter, size, right in items))
    for job in jobs:
        rows.append("".join(before + (fit(SQUEUE[letter](job, now), size, right) if letter else "")
                            for before, letter, size, right in items))
    return rows


def sacct_fields(text: str) -> list[tuple[str, int, bool]]:
    """`JobID,State%20,User%-9` -> [(JobID, 12, left), (State, 20, right), ...] (sacct's default widths,
    `%-N` left-justified), names without case."""
    fields = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, width = item.partition("%")
        known = SACCT_NAMES.get(name.lower())
        if known is None:
            raise UsageError(f"Invalid field requested: \"{name}\"")
        if width and not width.lstrip("-").isdecimal():
            raise UsageError(f"Invalid field width: \"{item}\"")
        size = int(width) if width else SACCT_WIDTHS.get(known, 10)
        fields.append((known, abs(size), size < 0))
    if not fields:
        raise UsageError("no fields to print")
    return fields
