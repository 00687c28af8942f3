"""An array's elements that are not jobs yet, as Slurm lists them: one line for its pending rest.

XCE makes an array's elements jobs a window at a time (controller/fsm/arrays.py); the rest are runs
of positions kept inside the array's record: pending, held, or cancelled before they ran. Slurm
lists an array's pending rest as one line, `12_[5-100%5]` in squeue (with the array's `%` limit)
and `12_[5-100]` in sacct, its indices as Slurm formats a bitmap (ranges of consecutive indices,
comma-separated), cut at SLURM_BITSTR_LEN characters (64 by default) with `...`. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator

from xce.rules import array_spec
from xce.v1 import api_pb2 as api

REST_INDEX = -1  # the array_index of a line that stands for an array's rest
BITSTR_LEN = 64  # Slurm's default SLURM_BITSTR_LEN
LISTED = (api.PEND, api.PSUSP, api.EXIT)  # the states a rest may be in, in the order they are listed


def rest(record: api.Job) -> list[api.Job]:
    """The array's elements not yet jobs, a line for each state they are in (pending, held,
    cancelled before they ran): a copy of the record, its state that one, its array_id its own id
    and its array_index REST_INDEX, its runs those of that state alone."""
    if not record.spec.HasField("array") or record.array_id:
        return []
    lines = []
    for state in LISTED:
        runs = [run for run in record.array.runs if run.state == state]
        if not runs:
            continue
        line = api.Job()
        line.CopyFrom(record)
        line.state, line.array_id, line.array_index = state, record.id, REST_INDEX
        if state == api.PSUSP:
            line.pending_code = api.PEND_JOB_HELD
        del line.array.runs[:]
        line.array.runs.extend(runs)
        lines.append(line)
    return lines


def is_rest(job: api.Job) -> bool:
    return bool(job.array_id) and job.array_index == REST_INDEX


def _spans(record: api.Job) -> Iterator[tuple[int, int]]:
    """The rest's indices as spans of consecutive ones, in order, by arithmetic (a stepped range's
    indices are spans of one; a run of a million positions in a range of step 1 is one span)."""
    for run in record.array.runs:
        base = 0
        for r in record.spec.array.ranges:
            size, step = array_spec.range_size(r), r.step or 1
            first, last = max(run.first, base), min(run.last, base + size - 1)
            if first <= last:
                low, high = r.start + (first - base) * step, r.start + (last - base) * step
                if step == 1:
                    yield low, high
                else:
                    yield from ((index, index) for index in range(low, high + 1, step))
            base += size


def indices_text(record: api.Job, limit: int = BITSTR_LEN) -> str:
    """The rest's indices as Slurm prints a bitmap: `5-100`, `1,3,5-7`; past `limit` characters (0:
    none) cut, ending in `...`."""
    pieces: list[str] = []
    length = 0
    current: tuple[int, int] | None = None
    for span in [*_first_spans(record, limit), None]:
        if span is not None and current is not None and span[0] == current[1] + 1:
            current = (current[0], span[1])
            continue
        if current is not None:
            piece = str(current[0]) if current[0] == current[1] else f"{current[0]}-{current[1]}"
            length += len(piece) + (1 if pieces else 0)
            pieces.append(piece)
            if limit and length > limit:
                return ",".join(pieces)[:limit - 3] + "..."
        current = span
    return ",".join(pieces)


def _first_spans(record: api.Job, limit: int) -> list[tuple[int, int]]:
    """As many spans as can be printed within `limit` characters (each takes two at least), and one
    more to show they go on; all of them when there is no limit."""
    spans = []
    for span in _spans(record):
        spans.append(span)
        if limit and len(spans) > limit:
            break
    return spans


def job_id(line: api.Job, with_limit: bool, limit: int = BITSTR_LEN) -> str:
    """`12_[5-100%5]` (squeue: with the array's limit) or `12_[5-100]` (sacct)."""
    text = indices_text(line, limit)
    if with_limit and line.spec.array.limit:
        text += f"%{line.spec.array.limit}"
    return f"{line.array_id}_[{text}]"
