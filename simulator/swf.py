"""Standard Workload Format traces (the Parallel Workloads Archive's SWF), read for simulation.

A trace is header lines (`; MaxNodes: 256`) and one line per job of 18
whitespace-separated fields; the ones read here (1-based): 1 job id, 2 submit
time (s), 3 wait, 4 run time, 5 allocated processors, 8 requested processors,
9 requested time, 11 status, 12 user, 15 queue. -1 is "unknown".

Cleaning, by the conventions of the simulator whose figures are to be
reproduced (CONVENTIONS, `xce sim --conventions`):
- `rlscheduler` (the default; ../shared/traces/README.md, the rule behind the
  published figures, as the RLScheduler code base prepares jobs): a job's
  processors are max(allocated, requested); its estimate is the requested
  time, or its run time when that is unknown; a job whose run time is 0 is
  dropped, a negative run time becomes 10 s;
- `pyss` (as pyss prepares them): a job whose run time or requested time is 0
  or less is dropped; its run time is min(run, requested time) (a job is
  killed at its limit); its processors are the requested ones;
- `accasim` (as AccaSim 1.1.3's SWF reader does): its processors are the
  requested ones, else the allocated ones; its estimate is the requested
  time, else its run time (AccaSim keeps -1 there); and its events are
  ordered as AccaSim orders them (ORDERING). A job whose run time is 0 or
  less is dropped here, where AccaSim runs it (a 0 s job takes its
  processors for no time, a negative one "ends" before it starts).
Either way a job with no processor count (below 1) is skipped and reported
with its line, and jobs are sorted by id. A malformed line is an error naming
the file and the line, as is a trace with no job left.

Pure: a file in, records out.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

FIELDS = 18
NEGATIVE_RUN_S = 10  # what a negative run time becomes (the published protocol's rule)
CONVENTIONS = ("rlscheduler", "pyss", "accasim")  # how a trace's jobs are prepared (above)
# When the simulation's passes run, by the conventions (engine.Settings.ordering): after each event,
# arrivals before ends at equal times; or at each time once its every end and then every arrival is in.
ORDERING: dict[str, Literal["each", "time"]] = {"rlscheduler": "each", "pyss": "each", "accasim": "time"}


class SwfError(ValueError):
    pass


@dataclass(frozen=True)
class Job:
    id: int
    submit_s: int
    wait_s: int  # -1: unknown
    run_s: int
    procs: int
    estimate_s: int
    status: int  # -1: unknown
    user: int  # -1: unknown
    queue: int  # -1: unknown
    line: int  # where it was read (1-based)


@dataclass
class Trace:
    jobs: list[Job]
    header: dict[str, str] = field(default_factory=dict)  # "MaxNodes" -> "256"
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, why)
    dropped_zero_run: int = 0

    def max_nodes(self) -> int:
        """The machine's size: MaxNodes, else MaxProcs, else the widest job."""
        for key in ("MaxNodes", "MaxProcs"):
            value = self.header.get(key, "").split()
            if value and value[0].isdigit() and int(value[0]) > 0:
                return int(value[0])
        return max(job.procs for job in self.jobs)


def read(path: str | Path, conventions: str = "rlscheduler") -> Trace:
    """The trace in `path` (`.gz`: gzip), cleaned; SwfError naming the line for a malformed one."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as stream:
                text = stream.read()
        else:
            text = path.read_text(encoding="utf-8", errors="replace")
    except (OSError, EOFError) as exc:
        raise SwfError(f"{path}: cannot read: {exc}") from None
    return parse(text.splitlines(), str(path), conventions)


def parse(lines: Iterable[str], where: str = "<trace>", conventions: str = "rlscheduler") -> Trace:
    if conventions not in CONVENTIONS:
        raise SwfError(f"unknown conventions {conventions!r}: one of {', '.join(CONVENTIONS)}")
    trace = Trace([])
    seen: dict[int, int] = {}
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        if text.startswith(";"):
            key, colon, value = text[1:].partition(":")
            if colon and key.strip() and key.strip() not in trace.header:
                trace.header[key.strip()] = value.strip()
            continue
        parts = text.split()
        if len(parts) != FIELDS:
            raise SwfError(f"{where}:{number}: {len(parts)} fields, an SWF job line has {FIELDS}")
        try:
            values = [_number(part) for part in parts]
        except ValueError:
            bad = next(p for p in parts if not _is_number(p))
            raise SwfError(f"{where}:{number}: {bad[:40]!r} is not a number") from None
        job_id, submit, wait, run, allocated = (int(v) for v in values[:5])
        requested, requested_time, status, user, queue = (int(values[i]) for i in (7, 8, 10, 11, 14))
        if job_id in seen:
            raise SwfError(f"{where}:{number}: job {job_id} again (first on line {seen[job_id]})")
        seen[job_id] = number
        if submit < 0:
            raise SwfError(f"{where}:{number}: job {job_id} has a negative submit time ({submit})")
        procs = _procs(allocated, requested, conventions)
        if procs < 1:
            trace.skipped.append((number, f"job {job_id}: no processor count (allocated {allocated}, "
                                          f"requested {requested})"))
            continue
        kept = _run_time(run, requested_time, conventions)
        if kept is None:
            trace.dropped_zero_run += 1
            continue
        run = kept
        estimate = requested_time if requested_time > 0 else run
        trace.jobs.append(Job(job_id, submit, wait, run, procs, estimate, status, user, queue, number))
    if not trace.jobs:
        left = trace.dropped_zero_run + len(trace.skipped)
        left_out = f" ({left} left out by the {conventions} conventions)" if left else ""
        raise SwfError(f"{where}: no job in the trace{left_out}")
    trace.jobs.sort(key=lambda job: job.id)
    return trace


def lines(trace: Trace) -> list[str]:
    """The trace as SWF lines (its header, then one line per job: the fields read here, -1 for the
    others), for another simulator to read the very same jobs."""
    out = [f"; {key}: {value}" for key, value in trace.header.items()]
    for job in trace.jobs:
        fields = [-1] * FIELDS
        fields[0], fields[1], fields[2] = job.id, job.submit_s, job.wait_s
        fields[3], fields[4] = job.run_s, job.procs
        fields[7], fields[8], fields[10], fields[11], fields[14] = (job.procs, job.estimate_s, job.status,
                                                                   job.user, job.queue)
        out.append(" ".join(str(f) for f in fields))
    return out


def _procs(allocated: int, requested: int, conventions: str) -> int:
    if conventions == "pyss":
        return requested
    if conventions == "accasim":
        return requested if requested != -1 else allocated
    return max(allocated, requested)


def _run_time(run: int, requested_time: int, conventions: str) -> int | None:
    """The run time a job is simulated with, by the conventions; None: the job is left out."""
    if conventions == "pyss":
        return min(run, requested_time) if run > 0 and requested_time > 0 else None
    if conventions == "accasim":
        return run if run > 0 else None
    if run == 0:
        return None
    return NEGATIVE_RUN_S if run < 0 else run


def _number(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


def _is_number(text: str) -> bool:
    try:
        _number(text)
    except ValueError:
        return False
    return True
