"""How LSF's commands print jobs: states, times, hosts, columns, and bjobs -o's fields (pure).

Times are in the local time zone as LSF prints them (`Oct  2 13:51` in
tables, `Mon Oct  2 13:51:07` in long forms; the year added when it is
not this one). A column is as wide as LSF's, its value cut to fit with a
leading `*` (LSF's way for job names, used here for every text column);
`-w` cuts nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from xce.printable import shown
from xce.v1 import api_pb2 as api

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from client.channel import XceError

UNFINISHED = (api.PEND, api.PSUSP, api.RUN, api.USUSP, api.SSUSP, api.UNKWN)
FINISHED = (api.DONE, api.EXIT)


def state(job: api.Job) -> str:
    """LSF's STAT: a job waiting in a chunk (on its lead's slot) is WAIT."""
    if job.state == api.PEND and job.chunk_lead:
        return "WAIT"
    return api.JobState.Name(job.state) if job.state else "-"


def job_id(job: api.Job) -> str:
    """The JOBID column: an element shows its array's id (its index is in its name), as LSF's."""
    return str(job.array_id or job.id)


def job_ref(job: api.Job) -> str:
    """A job as LSF's messages name it: 17, or 17[3] for an element."""
    return f"{job.array_id}[{job.array_index}]" if job.array_id else str(job.id)


def job_name(job: api.Job) -> str:
    return job.spec.name or " ".join(job.spec.command)


def command_line(job: api.Job) -> str:
    """The command as bsub was given it: the line its shell runs, a script's lines joined with `; `
    (as LSF shows a job script), else the words."""
    command = list(job.spec.command)
    if command[:2] == ["/bin/sh", "-c"] and len(command) == 3:
        return command[2]
    script = next((word for word in command if "\n" in word), None)
    if script is not None:
        return "; ".join(line.strip() for line in script.splitlines() if line.strip())
    return " ".join(command)


def table_time(ms: int, now_s: float | None = None) -> str:
    if not ms:
        return "-"
    when = time.localtime(ms / 1000)
    this_year = time.localtime(now_s if now_s is not None else time.time()).tm_year
    text = time.strftime("%b %e %H:%M", when)
    return text if when.tm_year == this_year else f"{text} {when.tm_year}"


def long_time(ms: int, now_s: float | None = None) -> str:
    when = time.localtime(ms / 1000)
    this_year = time.localtime(now_s if now_s is not None else time.time()).tm_year
    text = time.strftime("%a %b %e %H:%M:%S", when)
    return text if when.tm_year == this_year else f"{text} {when.tm_year}"


def exec_hosts(job: api.Job) -> list[str]:
    """LSF's EXEC_HOST entries: host, or N*host for N slots there."""
    if job.state in (api.PEND, api.PSUSP) or not job.host:
        return []
    parts = [(a.host, a.slots) for a in job.allocation] or [(job.host, max(1, job.spec.slots))]
    return [f"{slots}*{host}" if slots > 1 else host for host, slots in parts]


def from_host(job: api.Job) -> str:
    return job.spec.env.get("LSB_SUB_HOST", "") or "-"


def cut(text: str, most: int) -> str:
    """A job name of at most `most` characters: cut to its end behind a `*` (LSF's TRUNC_STR)."""
    if len(text) <= most:
        return text
    return "*" + text[len(text) - most + 1:] if most > 1 else "*"[:most]


def exit_reason(job: api.Job) -> str:
    """LSF's TERM_* reason of a job that did not end by itself, or ''. A job killed with bkill (its
    kill asked while it ran, or killed before it started) is TERM_OWNER: XCE keeps no word of who
    asked (LSF says TERM_ADMIN for an administrator's)."""
    reason = job.exit_reason
    if not reason:
        killed = job.state == api.EXIT and (job.kill_requested or not job.start_time_ms)
        return "TERM_OWNER" if killed else ""
    if reason in ("COMMAND_NOT_FOUND", "NOT_EXECUTABLE"):
        return ""  # as LSF: the shell's exit code (127, 126) says it
    named = {"CWD_MISSING": "TERM_CWD_NOTEXIST", "PRE_EXEC_FAILED": "TERM_PRE_EXEC_FAIL"}
    return named.get(reason, reason if reason.startswith("TERM_") else f"TERM_{reason}")


def exit_code(job: api.Job) -> str:
    """bjobs -o exit_code: the code of a job that exited non-zero, else '-'."""
    if job.state != api.EXIT:
        return "-"
    if job.term_signal and not job.exit_code:
        return str(128 + job.term_signal)
    return str(job.exit_code)


def exit_status(job: api.Job) -> int:
    """What bsub -K and -I exit with once the job ended: 0 for DONE, its exit code, else 128 + the
    signal that ended it (a shell's), else 255."""
    if job.state == api.DONE:
        return 0
    if 0 < job.exit_code < 256:
        return job.exit_code
    return 128 + job.term_signal if job.term_signal else 255


def _slots(job: api.Job) -> str:
    return str(sum(a.slots for a in job.allocation) or job.spec.slots or 1)


def _run_time(job: api.Job) -> str:
    if not job.start_time_ms:
        return "0 second(s)"
    end = job.end_time_ms or int(time.time() * 1000)
    return f"{max(0, (end - job.start_time_ms) // 1000)} second(s)"


def _mem(job: api.Job) -> str:
    used = job.usage if job.state in FINISHED else job.usage_now
    return f"{used.max_rss_kb / 1024:.0f} Mbytes" if used.max_rss_kb else "-"


def _cpu(job: api.Job) -> str:
    used = job.usage if job.state in FINISHED else job.usage_now
    seconds = used.user_cpu_s + used.system_cpu_s
    return f"{seconds:.1f} second(s)" if seconds else "-"


# bjobs -o fields: name -> (header, value). Aliases map to these names.
FIELDS: dict[str, tuple[str, Callable[[api.Job], str]]] = {
    "jobid": ("JOBID", job_id),
    "jobindex": ("JOBINDEX", lambda j: str(j.array_index if j.array_id else 0)),
    "stat": ("STAT", state),
    "user": ("USER", lambda j: j.spec.user or "-"),
    "queue": ("QUEUE", lambda j: j.spec.queue or "-"),
    "job_name": ("JOB_NAME", job_name),
    "proj_name": ("PROJ_NAME", lambda j: j.spec.project or "default"),
    "command": ("COMMAND", command_line),
    "from_host": ("FROM_HOST", from_host),
    "exec_host": ("EXEC_HOST", lambda j: ":".join(exec_hosts(j)) or "-"),
    "first_host": ("FIRST_HOST", lambda j: (exec_hosts(j) or ["-"])[0].rpartition("*")[2]),
    "nexec_host": ("NEXEC_HOST", lambda j: str(len(exec_hosts(j)))),
    "slots": ("SLOTS", _slots),
    "nreq_slot": ("NREQ_SLOT", lambda j: str(j.spec.slots or 1)),
    "nalloc_slot": ("NALLOC_SLOT", lambda j: _slots(j) if exec_hosts(j) else "0"),
    "submit_time": ("SUBMIT_TIME", lambda j: table_time(j.submit_time_ms)),
    "start_time": ("START_TIME", lambda j: table_time(j.start_time_ms)),
    "finish_time": ("FINISH_TIME", lambda j: table_time(j.end_time_ms) if j.state in FINISHED else "-"),
    "exit_code": ("EXIT_CODE", exit_code),
    "exit_reason": ("EXIT_REASON", lambda j: exit_reason(j) or "-"),
    "pend_reason": ("PEND_REASON", lambda j: j.pending_reason if j.state in (api.PEND, api.PSUSP) and
                    j.pending_reason else "-"),
    "sub_cwd": ("SUB_CWD", lambda j: j.spec.env.get("LSB_SUBCWD") or j.spec.cwd or "-"),
    "exec_cwd": ("EXEC_CWD", lambda j: j.spec.cwd or "-"),
    "output_file": ("OUTPUT_FILE", lambda j: j.spec.stdout_path or "-"),
    "error_file": ("ERROR_FILE", lambda j: j.spec.stderr_path or "-"),
    "priority": ("PRIORITY", lambda j: str(j.spec.priority)),
    "run_time": ("RUN_TIME", _run_time),
    "cpu_used": ("CPU_USED", _cpu),
    "mem": ("MEM", _mem),
    "max_mem": ("MAX_MEM", _mem),
    "memlimit": ("MEMLIMIT", lambda j: f"{j.spec.mem_limit_mb} M" if j.spec.mem_limit_mb else "-"),
    "runtimelimit": ("RUNTIMELIMIT",
                     lambda j: f"{j.spec.run_limit_s / 60:.1f}" if j.spec.run_limit_s else "-"),
    "dependency": ("DEPENDENCY", lambda j: j.spec.depend or "-"),
    "job_group": ("JOB_GROUP", lambda j: j.spec.job_group or "-"),
    "ugroup": ("UGROUP", lambda j: j.spec.user_group or "-"),
    "app": ("APP", lambda j: "-"),
}
ALIASES = {"id": "jobid", "name": "job_name", "proj": "proj_name", "project": "proj_name", "cmd": "command",
           "from": "from_host", "exec": "exec_host", "submit": "submit_time",
           "start": "start_time", "finish": "finish_time", "exit": "exit_code", "cpu": "cpu_used",
           "rtime": "run_time", "priority": "priority", "sub_cwd": "sub_cwd", "group": "job_group",
           "nreq_slot": "nreq_slot", "nalloc_slot": "nalloc_slot", "jobstat": "stat", "state": "stat"}


class FormatError(ValueError):
    """A bad bjobs -o: the message names the field."""


def parse_format(text: str) -> tuple[list[tuple[str, int, bool]], str]:
    """`-o "jobid stat:8 queue:-10 delimiter=','"` -> [(field, width (0: unlimited), right)], delimiter."""
    delimiter = " "
    fields: list[tuple[str, int, bool]] = []
    for word in _format_words(text):
        if word.startswith("delimiter="):
            value = word.removeprefix("delimiter=").strip("'\"")
            if len(value) != 1:
                raise FormatError(f"delimiter={value!r}: the delimiter is one character")
            delimiter = value
            continue
        name, _, width_text = word.partition(":")
        width_text = width_text.partition(":")[0]  # a unit prefix after a second colon: not used
        key = ALIASES.get(name.lower(), name.lower())
        if key not in FIELDS:
            raise FormatError(f"{name}: Illegal field name")
        right = width_text.startswith("-")
        digits = width_text.lstrip("-")
        if digits and not digits.isdigit():
            raise FormatError(f"{word}: the width is a number")
        fields.append((key, int(digits) if digits else 0, right))
    if not fields:
        raise FormatError("no field to show")
    return fields, delimiter


def _format_words(text: str) -> list[str]:
    words, word, quote = [], "", ""
    for char in text:
        if quote:
            word += char
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
            word += char
        elif char.isspace():
            if word:
                words.append(word)
            word = ""
        else:
            word += char
    if word:
        words.append(word)
    return words


def custom_rows(jobs: list[api.Job], fields: list[tuple[str, int, bool]], delimiter: str,
                header: bool) -> list[str]:
    rows = []
    if header:
        rows.append(delimiter.join(_fit(FIELDS[k][0], w, r) for k, w, r in fields).rstrip())
    for job in jobs:
        rows.append(delimiter.join(_fit(shown(FIELDS[k][1](job)), w, r, k == "job_name")
                                   for k, w, r in fields).rstrip())
    return rows


def _fit(text: str, width: int, right: bool, name: bool = False) -> str:
    if not width:
        return text
    if len(text) > width:
        text = cut(text, width) if name else text[:width]
    return text.rjust(width) if right else text.ljust(width)


def json_records(jobs: list[api.Job], fields: list[tuple[str, int, bool]]) -> dict[str, object]:
    return {"COMMAND": "bjobs", "JOBS": len(jobs),
            "RECORDS": [{FIELDS[k][0]: FIELDS[k][1](job) for k, _, _ in fields} for job in jobs]}


def wrap(text: str, width: int = 79, indent: int = 21) -> str:
    """LSF's long lines: cut at `width`, continued under an indent."""
    out, line = [], text
    while len(line) > width:
        out.append(line[:width])
        line = " " * indent + line[width:]
    out.append(line)
    return "\n".join(out)


def refusal_words(exc: XceError) -> str:
    """LSF's words for a refusal of one job."""
    words = exc.message.lower()
    if exc.code_name in ("NOT_FOUND", "INVALID_ARGUMENT") and any(w in words for w in ("not found", "no job",
                                                                                    "unknown")):
        return "No matching job found"
    if exc.code_name == "PERMISSION_DENIED":
        return "User permission denied"
    if exc.code_name == "FAILED_PRECONDITION" and (" DONE" in exc.message or " EXIT" in exc.message):
        return "Job has already finished"
    return shown(exc.message)
