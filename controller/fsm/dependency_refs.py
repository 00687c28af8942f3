"""The jobs a dependency condition (-w) names: checked at submit, looked up live or in history.

Apart from depends.py (which keeps verdicts current as jobs move) because submit's checks
(validation.py) need these and depends kills jobs through jobs.py, which validates submits.
Pure: reads only the tables.
"""

from __future__ import annotations

from collections.abc import Iterator

from controller.fsm import arrays, history
from controller.fsm.records import read_job
from controller.tables import Tables
from xce.errors import invalid
from xce.rules import array_spec, dependency_conditions
from xce.v1 import api_pb2 as api


def check(tables: Tables, spec: api.JobSpec) -> None:
    """A condition that parses and names only known jobs, used as they can be; else INVALID_ARGUMENT."""
    if not spec.depend:
        if spec.kill_on_invalid_dep:
            raise invalid("--kill-on-invalid-dep needs a dependency (-w)")
        return
    try:
        expr = dependency_conditions.parse(spec.depend)
    except dependency_conditions.DependencyError as exc:
        raise invalid(f"-w {spec.depend[:200]!r}: {exc}") from None
    for kind, job_id, index, code in uses(expr):
        job = find(tables, job_id)
        if job is None:
            raise invalid(UNKNOWN.format(job_id))
        is_array = arrays.is_array(job)
        if isinstance(index, int):
            if not is_array:
                raise invalid(f"-w: job {job_id} is not an array: {job_id}[{index}] names nothing")
            if not array_spec.positions_of(job.spec.array, [api.IndexRange(start=index, end=index, step=1)]):
                raise invalid(f"-w: array {job_id} has no index {index}")
        elif (index == "*" or kind.startswith("num")) and not is_array:
            raise invalid(f"-w: job {job_id} is not an array: {kind}({job_id}{'[*]' if index else ''}) "
                          "reads an array's elements")
        elif index == "*" and spec.HasField("array"):
            raise invalid(f"-w: {job_id}[*] from an array means element by element in LSF, which XCE does "
                          f"not do: write done({job_id}) for the whole array")
        if code is not None and is_array and not isinstance(index, int):
            raise invalid(f"-w: exit({job_id}, ...) with an exit code names one job or element, not a "
                          "whole array (numexit counts an array's exits)")


UNKNOWN = "-w: job {} is not known (neither live nor in history)"


def named(tables: Tables, spec: api.JobSpec) -> list[api.Job]:
    """The jobs a condition that `check` accepted names, live or in history."""
    found = (find(tables, job_id) for _, job_id, _, _ in uses(dependency_conditions.parse(spec.depend)))
    return [job for job in found if job is not None]


def uses(expr: dependency_conditions.Expr) -> Iterator[tuple[str, int, int | str | None, int | None]]:
    """(condition, job, index, exit code) of every job reference in the condition."""
    if expr[0] in ("or", "and"):
        yield from uses(expr[1])
        yield from uses(expr[2])
    elif expr[0] == "not":
        yield from uses(expr[1])
    elif expr[0] == "cond":
        yield expr[1], expr[2], expr[3], expr[5]
    else:
        yield "num" + expr[1], expr[2], None, None


def find(tables: Tables, job_id: int) -> api.Job | None:
    job = read_job(tables, job_id)
    return job if job is not None else history.read(tables, job_id)
