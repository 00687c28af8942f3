"""Slurm 22.05's words for XCE's jobs: states, reasons, exit codes, times and host lists.

One table per thing, so squeue, sacct and the tests read the same words
(docs/SLURM.md lists them). Pure.
"""

from __future__ import annotations

import datetime
import re
import time

from cli.slurm import array_rest
from xce.v1 import api_pb2 as api

# XCE's state -> (Slurm's long state, its short code). A job ended by a signal, a kill or a limit
# is told apart from one that failed by its exit (`state`).
STATES = {api.PEND: ("PENDING", "PD"), api.PSUSP: ("PENDING", "PD"), api.RUN: ("RUNNING", "R"),
          api.USUSP: ("SUSPENDED", "S"), api.SSUSP: ("SUSPENDED", "S"), api.UNKWN: ("RUNNING", "R"),
          api.DONE: ("COMPLETED", "CD"), api.EXIT: ("FAILED", "F")}
SHORT = {"PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETED": "CD", "FAILED": "F",
         "CANCELLED": "CA", "TIMEOUT": "TO", "OUT_OF_MEMORY": "OOM", "NODE_FAIL": "NF", "DEADLINE": "DL"}
# Slurm's pending reasons for XCE's (squeue's NODELIST(REASON), sacct's Reason).
REASONS = {api.PEND_NO_FREE_SLOTS: "Resources", api.PEND_NO_FREE_RESOURCES: "Resources",
           api.PEND_DEPENDENCY: "Dependency", api.PEND_DEPENDENCY_NEVER: "DependencyNeverSatisfied",
           api.PEND_JOB_HELD: "JobHeldUser", api.PEND_BEGIN_TIME: "BeginTime",
           api.PEND_QUEUE_INACTIVE: "PartitionInactive", api.PEND_LIMIT_REACHED: "AssocGrpCpuLimit",
           api.PEND_NO_HOST_MATCHES: "BadConstraints", api.PEND_HOSTS_UNAVAILABLE: "ReqNodeNotAvail",
           api.PEND_HOST_CLOSED: "ReqNodeNotAvail", api.PEND_RESERVATION: "Priority",
           api.PEND_NO_HOSTS: "Resources", api.PEND_CHUNK_WAIT: "Priority"}


def state(job: api.Job) -> str:
    """Slurm's long state: CANCELLED for a job killed by its owner or an operator, TIMEOUT past its
    -t, OUT_OF_MEMORY past its memory, FAILED for another failure."""
    if job.state == api.EXIT:
        reason = job.exit_reason
        if reason == "RUNLIMIT":
            return "TIMEOUT"
        if reason == "MEMLIMIT":
            return "OUT_OF_MEMORY"
        if reason == "DEADLINE":
            return "DEADLINE"
        # (DEPENDENCY: killed as its condition can never hold, as Slurm's kill_invalid_depend cancels it)
        if reason in ("OWNER", "DEPENDENCY") or job.kill_requested or (not job.start_time_ms and not reason):
            return "CANCELLED"
        if job.exit_status_unknown:
            return "NODE_FAIL"
    return STATES.get(job.state, ("PENDING", "PD"))[0]


def short_state(job: api.Job) -> str:
    return SHORT[state(job)]


def reason(job: api.Job) -> str:
    """squeue's reason of a pending job (None for others, as Slurm's)."""
    if job.state == api.PSUSP:
        return "JobHeldUser"
    if job.state != api.PEND:
        return "None"
    if job.array_id and (job.array_limit or job.spec.array.limit) and (
            job.pending_code == api.PEND_LIMIT_REACHED or array_rest.is_rest(job) and _at_limit(job)):
        return "JobArrayTaskLimit"  # (the array's %limit)
    if array_rest.is_rest(job):  # (the array's record holds its condition; they become jobs as it holds)
        return {api.DEPEND_PENDING: "Dependency", api.DEPEND_NEVER: "DependencyNeverSatisfied"}.get(
            job.depend_state, "Priority")
    return REASONS.get(job.pending_code, "Priority" if job.pending_code else "None")


# Why a job ended, as Slurm 22.05's slurmctld says it (scontrol's Reason=, squeue's %r and %R, the
# JSON's state_reason): a time limit, memory, a deadline, a lost node; a failure by its exit code, or
# one that never got to run its script (a start XCE's worker refused for a reason of the job's own).
END_REASONS = {"TIMEOUT": "TimeLimit", "OUT_OF_MEMORY": "OutOfMemory", "DEADLINE": "DeadLine",
               "NODE_FAIL": "NodeDown"}
LAUNCH_FAILURES = frozenset({"COMMAND_NOT_FOUND", "NOT_EXECUTABLE", "CWD_MISSING", "INTERACTIVE_LOST",
                             "OUTPUT_FILE", "PRE_EXEC_FAILED"})  # (xce/start_failures.py)


def state_reason(job: api.Job) -> str:
    """The job's reason as Slurm's job records hold it: a pending job's (reason), and an ended job's
    (NonZeroExitCode for an exit code, JobLaunchFailure for a signal or a start that failed,
    TimeLimit, ...: slurmctld's _job_complete); None for the others, a cancelled job's too."""
    long = state(job)
    if long == "PENDING":
        return reason(job)
    if long == "FAILED":
        return "JobLaunchFailure" if job.term_signal or job.exit_reason in LAUNCH_FAILURES \
            else "NonZeroExitCode"
    if long == "CANCELLED" and job.exit_reason == "DEPENDENCY":
        return "DependencyNeverSatisfied"
    return END_REASONS.get(long, "None")


def _at_limit(rest: api.Job) -> bool:
    counts = list(rest.array.counts)
    running = sum(counts[state] for state in (api.RUN, api.USUSP, api.SSUSP, api.UNKWN)
                  if state < len(counts))
    return running >= rest.spec.array.limit


def exit_code(job: api.Job) -> str:
    """sacct's ExitCode: code:signal."""
    if job.state not in (api.DONE, api.EXIT):
        return "0:0"
    if job.term_signal:  # (ended by a signal: no exit code of its own)
        return f"0:{job.term_signal}"
    return f"{job.exit_code}:0"


def job_id(job: api.Job, with_limit: bool = False) -> str:
    """An array's element as Slurm names it: 17_3; its rest 17_[5-100] (`with_limit`, as squeue:
    17_[5-100%5])."""
    if array_rest.is_rest(job):
        return array_rest.job_id(job, with_limit)
    return f"{job.array_id}_{job.array_index}" if job.array_id else str(job.id)


def name(job: api.Job) -> str:
    """The job's name as Slurm's: an array's element has its array's (XCE names it `name[3]`)."""
    if job.array_id and not array_rest.is_rest(job):
        return job.spec.name.removesuffix(f"[{job.array_index}]")
    return job.spec.name


def elapsed(seconds: int) -> str:
    """Slurm's [D-]HH:MM:SS (squeue's TIME: M:SS under an hour, as Slurm's)."""
    seconds = max(0, seconds)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}" if days else f"{hours:02d}:{minutes:02d}:{secs:02d}"


def squeue_time(seconds: int) -> str:
    """squeue's TIME: M:SS, H:MM:SS, D-HH:MM:SS."""
    seconds = max(0, seconds)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


STANDARD_TIME = "%Y-%m-%dT%H:%M:%S"
time_format = STANDARD_TIME  # SLURM_TIME_FORMAT's, once the command has read it (use_time_format)


def use_time_format(text: str | None) -> None:
    """SLURM_TIME_FORMAT as Slurm's commands read it: `standard` (and unset, and `relative`, which
    XCE does not carry out) is ISO 8601; anything else is a strftime format."""
    global time_format
    time_format = STANDARD_TIME if not text or text in ("standard", "relative") else text


def timestamp(ms: int) -> str:
    """sacct's and squeue's times: 2026-12-06T03:04:05, local; Unknown when there is none."""
    if not ms:
        return "Unknown"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime(time_format)


def memory(mb: int) -> str:
    """MB as Slurm's convert_num_unit prints them exactly (MinMemoryNode=, TRES mem=): 1000M, 8G, 2T; 0."""
    units, unit = "MGTP", 0
    while mb and mb % 1024 == 0 and unit < len(units) - 1:
        mb, unit = mb // 1024, unit + 1
    return f"{mb}{units[unit]}" if mb else "0"


def now_ms() -> int:
    """The commands' clock (one, so that the tests can set it)."""
    return int(time.time() * 1000)


def started(job: api.Job) -> bool:
    return bool(job.start_time_ms)


YEAR_MINUTES = 365 * 24 * 60  # what Slurm makes a started job's INFINITE limit (MaxTime=INFINITE)


def limit_minutes(job: api.Job) -> int | None:
    """The job's time limit in minutes as Slurm's job record holds it: its -t (rounded up to a minute);
    without one, none while it waits (NO_VAL: UNLIMITED, null in JSON) and a year once it started (Slurm
    sets a job that starts without a limit, in a partition without MaxTime, to 365 days)."""
    if job.spec.run_limit_s:
        return -(-job.spec.run_limit_s // 60)
    return YEAR_MINUTES if started(job) else None


def limit_seconds(job: api.Job) -> int | None:
    minutes = limit_minutes(job)
    return job.spec.run_limit_s or (minutes * 60 if minutes is not None else None)


def expected_end_ms(job: api.Job) -> int:
    """A job's end: when it ended; while it runs, its start plus its limit (Slurm's EndTime); 0 for one
    that waits (XCE has no estimate of its start)."""
    if job.state in (api.DONE, api.EXIT):
        return job.end_time_ms
    limit = limit_seconds(job)
    return job.start_time_ms + limit * 1000 if started(job) and limit is not None else 0


def held(job: api.Job) -> bool:
    """Held (XCE's PSUSP): Slurm's priority 0, and no eligible time."""
    return job.state == api.PSUSP


def priority(job: api.Job) -> int:
    """Slurm's priority of a job: XCE's (higher runs first, as Slurm's), 0 while it is held."""
    return 0 if held(job) else job.spec.priority


def script_name(job: api.Job) -> str:
    """The batch script a job runs as Slurm names it (scontrol's Command=, squeue's %o): "" for one made
    by `sbatch --wrap` or read from stdin, which Slurm keeps none of; the script's name for one sbatch
    read from a file (XCE keeps its text, and its name as $0: cli/lsf/script.py); the command line for
    another job (xce submit, bsub)."""
    from cli.lsf import script

    command = list(job.spec.command)
    if len(command) >= 3 and command[1] in ("-c", "-e") and "\n" in command[2]:  # a script's text
        shell = script._family(command[0]) in script.SHELLS  # (a shell's $0 follows its text)
        name = command[3] if shell and len(command) > 3 else ""
        return "" if name in ("wrap", "sbatch") else name
    return " ".join(command)


DEPEND_KINDS = {"done": "afterok", "ended": "afterany", "exit": "afternotok", "started": "after"}


def dependency(job: api.Job) -> str:
    """A job's dependency in Slurm's words (scontrol's Dependency=, squeue's, the JSON's), as sbatch's -d
    was written (cli/slurm/sbatch.py makes XCE's condition of it): afterok:17(unfulfilled),
    afterany:18_3(unfulfilled), `?` between them for any of them; (failed) once it can never hold; ""
    when there is none or it holds (Slurm drops a dependency once it is satisfied). A condition Slurm
    has no words for (bsub's -w) is XCE's own."""
    depend = job.spec.depend
    if not depend or job.depend_state in (api.DEPEND_NONE, api.DEPEND_SATISFIED):
        return ""
    joiner = "?" if " || " in depend else ","
    status = "(failed)" if job.depend_state == api.DEPEND_NEVER else "(unfulfilled)"
    terms = []
    for term in re.split(r" (?:&&|\|\|) ", depend):
        found = re.fullmatch(r"(done|ended|exit|started)\((\d+)(?:\[(\d+)\])?\)", term.strip())
        if found is None:
            return depend
        ref = f"{found[2]}_{found[3]}" if found[3] else found[2]
        terms.append(f"{DEPEND_KINDS[found[1]]}:{ref}{status}")
    return joiner.join(terms)


def run_seconds(job: api.Job, now_ms: int) -> int:
    if not job.start_time_ms:
        return 0
    end = job.end_time_ms if job.state in (api.DONE, api.EXIT) and job.end_time_ms else now_ms
    return max(0, (end - job.start_time_ms) // 1000)


class TimeError(ValueError):
    pass


def minutes_of(text: str) -> int:
    """-t as Slurm takes it: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; the seconds of it
    (UNLIMITED: 0, no limit)."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return 0
    found = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if found is None:
        raise TimeError(f"Invalid time limit specification: {text[:40]}")
    days, first, second, third = found.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = int(days) * 86_400 + int(first) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # HH:MM:SS
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    elif second is not None:  # MM:SS
        seconds = int(first) * 60 + int(second)
    else:  # minutes
        seconds = int(first) * 60
    if seconds <= 0:
        raise TimeError(f"Invalid time limit specification: {text[:40]}")
    return seconds
