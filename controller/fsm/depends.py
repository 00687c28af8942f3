"""Job dependencies (-w) in the state: refused at submit if unusable, kept current as the jobs read move.

Theory of operation (LSF's -w, evaluated by xce/rules/dependency_conditions.py). A job's
condition reads other jobs' states; apply keeps its verdict in the job
(`depend_state`: PENDING, SATISFIED, NEVER) so that the scheduler and the
commit barrier read one committed answer instead of each looking up the
jobs it names (the scheduler's view has no history, and a condition on a
cleaned job is read from history).

- At submit a condition must parse and every job it names must be known,
  live or in history (dependency_refs.check): a job that does not exist yet would be one
  submitted later, and LSF refuses that too. An element `17[3]` must be an
  index of array 17; `[*]`, counts and whole-array exit codes need an array.
- While a job with a condition is pending, the job index holds a key
  b"w" referenced(8) dependent(8) per job it reads (job_index.py), so a
  change of a referenced job finds its dependents without a scan.
- Every job write (Applier.put_job) notes the job, and for an element its
  array, as `touched` when what a condition reads of it changed (state and
  exit code; an array's per-state counts). At the end of the entry
  (`settle`, from applier.finish) each pending dependent of a touched job
  is evaluated again and written if its verdict moved; a job that becomes
  pending with a condition (submit, requeue) is evaluated too. A verdict of
  NEVER kills the job when its queue has `kill_invalid_depend` or the job
  asked (`kill_on_invalid_dep`); the kill is a write, so it may settle
  further jobs in the same loop.
- An array with a condition keeps its elements inside the record until the
  condition holds (arrays.py: _top_up); the elements carry no condition.

Facts read per job: its state and exit code; an array's per-state element
counts (so a million elements are a few groups); an element by its job, its
run in the record, or, once cleaned, by history's element key (history.py,
written from this format on). Pure: reads only the tables.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.fsm import arrays, dependency_refs, history, job_index, jobs
from controller.fsm.applier import Applier
from controller.fsm.records import PENDING, read_job, read_queue
from controller.tables import Tables
from xce.errors import ServiceError
from xce.rules import array_spec, dependency_conditions
from xce.v1 import api_pb2 as api

EXIT_REASON = "DEPENDENCY"
_STATE_NAMES = {value: name for name, value in api.JobState.items()}


# ---------------------------------------------------------------- at submit


# ---------------------------------------------------------------- what conditions read


def facts_moved(before: api.Job, job: api.Job) -> bool:
    """Whether what a condition reads of a job changed (its state, exit code, an array's counts):
    then its dependents are evaluated again. An array's counts are compared only for an array
    (reading a record's unset `array` makes a message: 1.5 us of every started report's apply)."""
    return before.state != job.state or before.exit_code != job.exit_code or (
        (before.HasField("array") or job.HasField("array")) and before.array.counts != job.array.counts)


def lookup(tables: Tables) -> dependency_conditions.Lookup:
    def find(job_id: int, index: int | str | None) -> Sequence[dependency_conditions.Group] | None:
        job = dependency_refs.find(tables, job_id)
        if job is None:
            return None
        if not arrays.is_array(job):
            return [(_facts(job.state, job.exit_code), 1)]
        if isinstance(index, int):
            element = _element(tables, job, index)
            return None if element is None else [element]
        return [(_facts(state, 0), count) for state, count in enumerate(job.array.counts) if count > 0]

    return find


def _facts(state: int, exit_code: int) -> dependency_conditions.Facts:
    return dependency_conditions.Facts(_STATE_NAMES[state], exit_code)


def _element(tables: Tables, record: api.Job, index: int) -> dependency_conditions.Group | None:
    job_id = arrays.element_id(tables, record.id, index)
    if job_id is None:
        job_id = history.element_id(tables, record.id, index)
    if job_id is not None:
        job = dependency_refs.find(tables, job_id)
        if job is not None:
            return _facts(job.state, job.exit_code), 1
    positions = array_spec.positions_of(record.spec.array, [api.IndexRange(start=index, end=index, step=1)])
    if not positions:
        return None
    position = positions[0][0]
    run = next((r for r in record.array.runs if r.first <= position <= r.last), None)
    return None if run is None else (_facts(run.state, 0), 1)


def verdict(tables: Tables, job: api.Job) -> api.DependState:
    if not job.spec.depend:
        return api.DEPEND_NONE
    try:
        expr = dependency_conditions.parse(job.spec.depend)
    except dependency_conditions.DependencyError:  # checked at submit; a job never holds a bad one
        return api.DEPEND_NEVER
    found = dependency_conditions.evaluate(expr, lookup(tables))
    verdict = dependency_conditions.Verdict
    return {verdict.SATISFIED: api.DEPEND_SATISFIED, verdict.PENDING: api.DEPEND_PENDING,
            verdict.NEVER: api.DEPEND_NEVER}[found]


# ---------------------------------------------------------------- following writes


def follow(applier: Applier, before: api.Job | None, job: api.Job, written: bytes) -> None:
    """After a job write: note what may move a condition."""
    if before is None or facts_moved(before, job):
        applier.depend_touched.add(job.id)
        if job.array_id:
            applier.depend_touched.add(job.array_id)
    if job.spec.depend and job.state in PENDING and (before is None or before.state not in PENDING):
        applier.depend_due.add(job.id)  # submitted or requeued: its own verdict is due


def settle(applier: Applier) -> None:
    """The end of an entry: every pending dependent of a touched job gets its verdict again."""
    tables = applier.tables
    while applier.depend_touched or applier.depend_due:
        due = set(applier.depend_due)
        if applier.depend_touched and job_index.any_waiting(tables):  # one look when no job waits on any
            for job_id in sorted(applier.depend_touched):
                due.update(job_index.dependents(tables, job_id))
        applier.depend_touched.clear()
        applier.depend_due.clear()
        for job_id in sorted(due):
            job = applier.arrays.get(job_id) or read_job(tables, job_id)
            if job is None or not job.spec.depend or job.state not in PENDING:
                continue
            _judge(applier, job)
        if applier.arrays:
            arrays.settle(applier)  # an array released or killed here; its writes may touch more


def _judge(applier: Applier, job: api.Job) -> None:
    found = verdict(applier.tables, job)
    if found == job.depend_state:
        return
    if arrays.is_array(job):
        record = arrays.load(applier, job.id)
        assert record is not None
        record.depend_state = found  # arrays.settle writes it, and tops it up once satisfied
        if found == api.DEPEND_NEVER and _kills(applier, record):
            try:
                jobs.kill_array(applier, record)
            except ServiceError:
                pass  # nothing left to kill
        return
    job.depend_state = found
    if found == api.DEPEND_NEVER and _kills(applier, job):
        job.state = api.EXIT
        job.end_time_ms = applier.stamp_ms
        job.exit_code = 128 + 9  # as a job killed before it ran (jobs.EXIT_KILLED)
        job.exit_reason = EXIT_REASON
        job.pending_reason = ""
        job.pending_code = api.PENDING_REASON_UNSPECIFIED
        job.modify_time_ms = applier.stamp_ms
    applier.put_job(job)


def _kills(applier: Applier, job: api.Job) -> bool:
    if job.spec.kill_on_invalid_dep:
        return True
    queue = read_queue(applier.tables, job.spec.queue)
    return queue is not None and queue.kill_invalid_depend
