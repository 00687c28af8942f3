"""Job arrays: one record however many elements, elements made jobs as the scheduler needs them.

Theory of operation (Slurm's meta record, LSF's syntax). Submitting
`sim[1-1000000]` stores one Job whose spec has `array` and whose `array`
state says where each element is, by position (xce/rules/array_spec.py):
either a job of its own (materialized: a Job with `array_id` and
`array_index`, dispatched, reported and requeued like any job), or still
inside the record as a run of positions, pending, held or killed before it
ran. The record keeps `window` elements as pending jobs ahead of the
scheduler (fewer with a running limit): whenever an entry leaves fewer of
them, the end of that entry (`settle`, from applier.finish) makes the next
pending positions jobs. So an array costs one log entry and a bounded
number of records to submit, the scheduler sees ordinary pending jobs, and
the commit barrier and the journals work on elements as on jobs.

The record's per-state `counts` cover jobs and runs together; every write of
an element (Applier.put_job) moves its count. The record's own state is
derived from the counts: PEND while any element waits, then RUN, PSUSP,
and once every element has finished EXIT if any exited, else DONE; a
finished array leaves the live tables like a job (history.py).

A running limit (`%50`) is a cluster-wide counter (`array/<id>/running`)
that each running element holds (xce/rules/feasibility.py): the planner and the
commit barrier refuse a dispatch that would pass it, by the same check.

Actions on an array or a selection (`17[200-400]`) reach the element jobs in
the selection that the action applies to in their state and the runs
inside the selection; elements in other states are left as they are, as
bkill does with an array. Pure, like the rest of fsm: no clock, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from controller.fsm import job_index
from controller.fsm.applier import Applier
from controller.fsm.records import FINISHED, PENDING, find_job, job_key, read_job
from controller.fsm.versions import ZERO_INDEX_FORMAT
from controller.tables import Tables
from xce.errors import ServiceError, invalid
from xce.rules import array_spec
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

WINDOW = 256  # elements kept as pending jobs ahead of the scheduler (a limit lowers it)
MAX_RUNS = 1_000  # runs one record may hold (8 KB or so): a request that would split it further is refused
MAX_MATERIALIZE = 10_000  # elements one modify of a selection may make jobs of
MAX_SIZE = 10_000_000  # apply's own bound; the leader's is [auth] max_array_size
_STATES = len(api.JobState.values())


def elements(tables: Tables, array_id: int, from_index: int = 0) -> Iterator[tuple[int, int]]:
    """(index, job id) of the array's element jobs still in the live tables, by index."""
    prefix = job_index.array_prefix(array_id)
    for key, _ in tables.scan(job_index.TABLE, prefix + struct.pack(">q", from_index)):
        if not key.startswith(prefix):
            return
        index, job_id = struct.unpack(">qQ", key[len(prefix):])
        yield index, job_id


def element_id(tables: Tables, array_id: int, index: int) -> int | None:
    for found, job_id in elements(tables, array_id, index):
        return job_id if found == index else None
    return None


def is_array(job: api.Job) -> bool:
    return job.spec.HasField("array")


# ---------------------------------------------------------------- submit


def submit(applier: Applier, job: api.Job) -> None:
    """`job` is a new array's record (id, spec, times set): its state, and the first elements as jobs."""
    spec = job.spec.array
    size = array_spec.size_of(spec)  # checked (check_submit) before the entry wrote anything
    state = job.array
    state.size = size
    state.window = min(WINDOW, spec.limit) if spec.limit else WINDOW
    state.runs.add(first=0, last=size - 1, state=api.PEND)
    state.counts.extend([0] * _STATES)
    state.counts[api.PEND] = size
    job.state = derived_state(state)
    applier.arrays[job.id] = job


def lowest_index(entry_format: int) -> int:
    """The first index an array may have: Slurm's 0 from entry format 24 (LSF's 1 before)."""
    return 0 if entry_format >= ZERO_INDEX_FORMAT else 1


def check_submit(spec: api.JobSpec, max_size: int, entry_format: int) -> int:
    """The check of an array in a submit (its size), the leader's and apply's; ServiceError."""
    try:
        return array_spec.check(spec.array, max_size, lowest_index(entry_format))
    except array_spec.ArraySpecError as exc:
        raise invalid(str(exc)) from None


# ---------------------------------------------------------------- following element writes


def follow(applier: Applier, before: api.Job | None, job: api.Job, written: bytes) -> None:
    """A job was written: if an element, its array's counts follow its state."""
    if not job.array_id:
        return
    if before is None:  # new, or back from history (requeued after it left the live tables)
        raw = applier.tables.get("history", job_key(job.id))
        before = None if raw is None else api.Job.FromString(raw)
    if before is not None and before.state == job.state:
        return
    record = load(applier, job.array_id)
    if record is None:
        # Its record left history before it did (pruning goes oldest first: the record's id is the
        # lowest): nothing is left to count in, and the element lives on as a job of its own.
        return
    counts = record.array.counts
    if before is not None:
        counts[before.state] -= 1
    counts[job.state] += 1


def load(applier: Applier, array_id: int) -> api.Job | None:
    """The array's record as this entry has left it so far (written once, by `settle`)."""
    record = applier.arrays.get(array_id)
    if record is None:
        # An element requeued after its finished array left the live tables brings the record back.
        try:
            record = find_job(applier.tables, str(array_id), in_history=True)
        except ServiceError:
            return None
        if not is_array(record):
            return None
        applier.arrays[array_id] = record
        applier.arrays_read[array_id] = record.SerializeToString(deterministic=True)
    return record


def settle(applier: Applier) -> None:
    """The end of an entry: every array it touched tops up its pending jobs and is written once."""
    while applier.arrays:
        array_id = min(applier.arrays)
        record = applier.arrays.pop(array_id)
        if applier.arrays_read.pop(array_id, None) == record.SerializeToString(deterministic=True):
            continue  # read, not changed (a refused request): nothing to write, nothing to top up
        _top_up(applier, record)
        applier.arrays.pop(array_id, None)  # the top-up's own element writes loaded it again
        record.state = derived_state(record.array)
        if record.state not in PENDING:
            record.pending_reason = ""
            record.ClearField("pending_code")
        record.modify_time_ms = applier.stamp_ms
        applier.put_job(record)


def _top_up(applier: Applier, record: api.Job) -> None:
    if record.spec.depend and record.depend_state != api.DEPEND_SATISFIED:
        return  # its elements wait inside it until its -w condition holds (depends.py)
    state = record.array
    waiting = state.counts[api.PEND] - sum(r.last - r.first + 1 for r in state.runs if r.state == api.PEND)
    while waiting < state.window:
        run = next((r for r in state.runs if r.state == api.PEND), None)
        if run is None:
            return
        applier.arrays[record.id] = record  # element writes find this same record
        _materialize(applier, record, run.first, api.PEND)
        waiting += 1


def _materialize(applier: Applier, record: api.Job, position: int, state: api.JobState,
                 taken: bool = False) -> api.Job:
    """The element at `position` (inside a run of `state`, or already `taken` out of it) becomes a
    job in that state."""
    if not taken:
        _take(record.array, position)
    record.array.counts[state] -= 1  # put_job counts it again, as a job
    meta = applier.meta
    job_id = meta.next_job_id or 1
    meta.next_job_id = job_id + 1
    index = array_spec.index_at(record.spec.array, position)
    element = api.Job(id=job_id, state=state, submit_time_ms=record.submit_time_ms,
                      modify_time_ms=applier.stamp_ms, request_id=record.request_id,
                      readable_id=f"{record.readable_id}[{index}]", array_id=record.id, array_index=index,
                      array_limit=record.spec.array.limit)
    element.spec.CopyFrom(element_spec(record, index))
    if state == api.PSUSP:
        element.pending_reason, element.pending_code = "held by user", api.PEND_JOB_HELD
    record.array.materialized += 1
    applier.put_job(element)
    return element


def element_spec(record: api.Job, index: int) -> api.JobSpec:
    """An element's spec: the array's template, named name[index], without the array."""
    spec = api.JobSpec()
    spec.CopyFrom(record.spec)
    spec.ClearField("array")
    spec.ClearField("depend")  # the record waits for it (_top_up)
    spec.ClearField("kill_on_invalid_dep")
    spec.name = f"{record.spec.name}[{index}]"
    return spec


def _take(state: api.ArrayState, position: int) -> None:
    """Remove one position from its run (splitting the run if needed)."""
    for i, run in enumerate(state.runs):
        if run.first <= position <= run.last:
            pieces = [(run.first, position - 1), (position + 1, run.last)]
            kept = [api.ElementRun(first=a, last=b, state=run.state) for a, b in pieces if a <= b]
            del state.runs[i]
            for j, piece in enumerate(kept):
                state.runs.insert(i + j, piece)
            return
    raise AssertionError(f"position {position} is in no run")


def derived_state(state: api.ArrayState) -> api.JobState:
    counts = state.counts
    for waiting in (api.PEND, api.RUN, api.USUSP, api.SSUSP, api.UNKWN, api.PSUSP):
        if counts[waiting]:
            return waiting
    return api.EXIT if counts[api.EXIT] else api.DONE


# ---------------------------------------------------------------- selecting


Selection = list[api.IndexRange] | None  # None: the whole array


def find_target(tables: Tables, text: str, in_history: bool = True,
                entry_format: int = ZERO_INDEX_FORMAT) -> tuple[api.Job, Selection]:
    """`17`, `17[42]`, `17[1-100]`: the job (an array's record for a selection) and the selection."""
    try:
        head, wanted = array_spec.parse_job_ref(text, lowest_index(entry_format))
    except array_spec.ArraySpecError as exc:
        raise invalid(str(exc)) from None
    job = find_job(tables, head, in_history)
    if wanted is not None and not is_array(job):
        raise invalid(f"job {job.id} is not an array: {text[:80]!r} selects nothing")
    return job, wanted


def one_job(tables: Tables, text: str, check: Callable[[api.Job], object]) -> str:
    """`17`, a readable id, or `17[42]` as the id of one job record: an element's own job (live or in
    history). An element that has not been made a job has no record of its own: it has not run.
    `check` is given the job or array first (it raises for one the caller may not see)."""
    record, wanted = find_target(tables, text)
    check(record)
    if wanted is None:
        return text
    if len(wanted) != 1 or wanted[0].start != wanted[0].end:
        raise invalid(f"one element at a time: {record.id}[42], not {text[:80]!r}")
    if not array_spec.positions_of(record.spec.array, wanted):
        raise ServiceError(log.NOT_FOUND, f"array {record.id} has no index {wanted[0].start}")
    job_id = element_id(tables, record.id, wanted[0].start)
    if job_id is None:
        raise ServiceError(log.FAILED_PRECONDITION, f"element {record.id}[{wanted[0].start}] has not run: "
                                                    "it has no output yet")
    return str(job_id)


def element_view(tables: Tables, record: api.Job, index: int) -> api.Job:
    """One element as `xce job 17[42]` shows it: its job, or what its run says of it."""
    job_id = element_id(tables, record.id, index)
    if job_id is not None:
        job = read_job(tables, job_id)
        if job is not None:
            return job
    positions = array_spec.positions_of(record.spec.array, [api.IndexRange(start=index, end=index, step=1)])
    if not positions:
        raise ServiceError(log.NOT_FOUND, f"array {record.id} has no index {index}")
    position = positions[0][0]
    run = next((r for r in record.array.runs if r.first <= position <= r.last), None)
    if run is None:  # it was a job, which has finished and left the live tables
        raise ServiceError(log.NOT_FOUND, f"element {record.id}[{index}] has finished and left the live "
                                          "tables (xce history)")
    shown = api.Job(id=0, state=run.state, submit_time_ms=record.submit_time_ms, request_id=record.request_id,
                    readable_id=f"{record.readable_id}[{index}]", array_id=record.id, array_index=index)
    shown.spec.CopyFrom(element_spec(record, index))
    if run.state == api.PEND:
        shown.pending_reason = "not yet a job: waiting for the array's earlier elements"
    elif run.state == api.PSUSP:
        shown.pending_reason, shown.pending_code = "held by user", api.PEND_JOB_HELD
    else:
        shown.exit_code = 128 + 9
    return shown


def _positions(record: api.Job, wanted: list[api.IndexRange]) -> list[tuple[int, int]]:
    try:
        return array_spec.positions_of(record.spec.array, wanted)
    except array_spec.ArraySpecError as exc:  # a rejection, never an exception out of apply
        raise invalid(str(exc)) from None


def selected_jobs(tables: Tables, record: api.Job, wanted: Selection, finished: bool) -> list[api.Job]:
    """The selected elements that are jobs in the live tables, by index: the scan seeks to each
    selected range (never the whole array for `17[5]`), and finished ones are skipped unread unless
    `finished` (their state is in job_index's keys)."""
    spans = [(1, array_spec.MAX_INDEX)] if wanted is None else \
        array_spec.merge([(w.start, w.end) for w in wanted])
    chosen = selected(wanted)
    found = []
    for first, last in spans:
        for index, job_id in elements(tables, record.id, first):
            if index > last:
                break
            if not chosen(index):
                continue
            if not finished and any(tables.get(job_index.TABLE, job_index.state_key(s, job_id)) is not None
                                    for s in FINISHED):
                continue
            job = read_job(tables, job_id)
            if job is not None:
                found.append(job)
    return found


def selected(wanted: list[api.IndexRange] | None) -> Callable[[int], bool]:
    if wanted is None:
        return lambda index: True
    return lambda index: any(w.start <= index <= w.end and (index - w.start) % (w.step or 1) == 0
                             for w in wanted)


# ---------------------------------------------------------------- actions on runs

# action -> (from states, to state) for the elements still inside the record
RUN_ACTIONS: dict[int, tuple[frozenset[int], api.JobState]] = {
    api.KILL: (frozenset({api.PEND, api.PSUSP}), api.EXIT),
    api.HOLD: (frozenset({api.PEND}), api.PSUSP),
    api.STOP: (frozenset({api.PEND}), api.PSUSP),
    api.RELEASE: (frozenset({api.PSUSP}), api.PEND),
    api.RESUME: (frozenset({api.PSUSP}), api.PEND),
    api.REQUEUE: (frozenset({api.EXIT}), api.PEND),  # killed before they ran: pending again (brequeue)
}


def plan_runs(record: api.Job, action: api.ControlAction, wanted: Selection,
              ) -> tuple[list[api.ElementRun], dict[int, int]]:
    """What the action does to the positions still inside the record: the new runs and the count
    moves (state -> delta). Computed before anything changes: too many runs raises here, with
    nothing written. Sorted runs against sorted spans, so O(runs + spans)."""
    rule = RUN_ACTIONS.get(action)
    state = record.array
    if rule is None:
        return list(state.runs), {}
    sources, target = rule
    spans = [(0, state.size - 1)] if wanted is None else _positions(record, wanted)
    moves: dict[int, int] = {}
    runs: list[api.ElementRun] = []
    i = 0
    for run in state.runs:
        if run.state not in sources:
            runs.append(run)
            continue
        while i < len(spans) and spans[i][1] < run.first:
            i += 1
        cut, j = run.first, i
        while j < len(spans) and spans[j][0] <= run.last:
            lo, hi = max(spans[j][0], run.first), min(spans[j][1], run.last)
            if cut < lo:
                runs.append(api.ElementRun(first=cut, last=lo - 1, state=run.state))
            runs.append(api.ElementRun(first=lo, last=hi, state=target))
            moves[run.state] = moves.get(run.state, 0) - (hi - lo + 1)
            moves[target] = moves.get(target, 0) + hi - lo + 1
            cut = hi + 1
            j += 1
        if cut <= run.last:
            runs.append(api.ElementRun(first=cut, last=run.last, state=run.state))
    merged = _merge_runs(runs)
    if len(merged) > MAX_RUNS:
        raise ServiceError(log.RESOURCE_EXHAUSTED, f"the selection would split array {record.id} into "
                                                   f"{len(merged)} parts; at most {MAX_RUNS}")
    return merged, moves


def commit_runs(record: api.Job, planned: tuple[list[api.ElementRun], dict[int, int]]) -> int:
    """Apply what plan_runs computed; how many elements moved."""
    runs, moves = planned
    del record.array.runs[:]
    record.array.runs.extend(runs)
    for state, delta in moves.items():
        record.array.counts[state] += delta
    return sum(delta for delta in moves.values() if delta > 0)


def _merge_runs(runs: list[api.ElementRun]) -> list[api.ElementRun]:
    merged: list[api.ElementRun] = []
    for run in sorted(runs, key=lambda r: r.first):
        if merged and merged[-1].state == run.state and merged[-1].last + 1 == run.first:
            merged[-1].last = run.last
        else:
            merged.append(api.ElementRun(first=run.first, last=run.last, state=run.state))
    return merged


def materialize_selection(applier: Applier, record: api.Job, wanted: Selection) -> None:
    """The selected elements still inside the record, pending or held, become jobs (a modify of part
    of an array changes jobs, never the record's template). Planned first: too many elements or runs
    raise with nothing written; the runs are cut in one pass."""
    spans = [(0, record.array.size - 1)] if wanted is None else _positions(record, wanted)
    todo: list[tuple[int, api.JobState]] = []
    runs: list[api.ElementRun] = []
    i = 0
    for run in record.array.runs:
        if run.state not in (api.PEND, api.PSUSP):
            runs.append(run)
            continue
        while i < len(spans) and spans[i][1] < run.first:
            i += 1
        cut, j = run.first, i
        while j < len(spans) and spans[j][0] <= run.last:
            lo, hi = max(spans[j][0], run.first), min(spans[j][1], run.last)
            if len(todo) + hi - lo + 1 > MAX_MATERIALIZE:
                raise ServiceError(log.FAILED_PRECONDITION,
                                   f"the selection holds more than {MAX_MATERIALIZE} elements that are not "
                                   "jobs yet; modify the whole array, or a smaller selection")
            if cut < lo:
                runs.append(api.ElementRun(first=cut, last=lo - 1, state=run.state))
            todo.extend((p, run.state) for p in range(lo, hi + 1))
            cut = hi + 1
            j += 1
        if cut <= run.last:
            runs.append(api.ElementRun(first=cut, last=run.last, state=run.state))
    if len(runs) > MAX_RUNS:
        raise ServiceError(log.RESOURCE_EXHAUSTED, f"the selection would split array {record.id} into "
                                                   f"{len(runs)} parts; at most {MAX_RUNS}")
    del record.array.runs[:]
    record.array.runs.extend(runs)
    for position, state in todo:
        applier.arrays[record.id] = record
        _materialize(applier, record, position, state, taken=True)
