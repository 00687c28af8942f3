"""A sequential model of XCE's job table, for the soak's client history (docs/LINEARIZABILITY.md).

Theory of operation. Each job is an independent object (partitioned by job
id, P-compositionality). Its abstract state is `Job`: the phase (a JobState
name, or ABSENT before it exists), the attempt, and the hidden flags that
decide what may happen next (kill_requested, requeue_requested, the state
kept while UNKWN). Clients move a job by submit and control; the system moves
it on its own (dispatch, the end report, requeue, preemption, a lost host):
those are internal transitions (`internal`, each citing the fsm code it
comes from) that may happen at any moment, so `step` first closes the state
over them and then checks the client's operation from every state reached.
The model is nondeterministic (a set of states; the checker's powerset).

The attempt only grows. A requeue may skip attempts (records.next_attempt),
so after one with no read since, the attempt is only bounded below: `open`
says the state stands for every attempt from `attempt` up; a read makes it
exact again.

Operations (`operations` turns the recorded history into the checker's):
- submit: creates the job PEND at attempt 0 (PSUSP if held at submission);
  the same request again (same request_id) finds it and changes nothing.
- get / list: observations (a list is split into one read per job: sound,
  see the doc). NOT_FOUND says the job does not exist.
- control: jobs.CONTROL and jobs.check_control: success applies the
  transition; FAILED_PRECONDITION says the action was refused in the
  state at its linearization point; NOT_FOUND says there was no job.
A job id seen that no acknowledged submit created (an unknown submit, or a
client the history does not record) gets a made-up unknown submit, invoked
before everything: it may appear at any time.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, NamedTuple

from soak.linear.checker import BaseModel, Operation
from soak.linear.history import Op

ABSENT = "ABSENT"
RUNNING = ("RUN", "USUSP", "SSUSP", "UNKWN")  # controller/fsm/records.py RUNNING
FINISHED = ("DONE", "EXIT")
PHASES = (ABSENT, "PEND", "PSUSP", *RUNNING, *FINISHED)
ACTIONS = ("KILL", "STOP", "RESUME", "HOLD", "RELEASE", "REQUEUE")
REFUSALS = ("FAILED_PRECONDITION", "NOT_FOUND")  # definite answers: observations of the state
READS = ("get", "list")


class Job(NamedTuple):
    phase: str
    attempt: int = 0
    open: bool = False  # the attempt is `attempt` or any later one
    kill: bool = False  # kill_requested
    requeue: bool = False  # requeue_requested
    before: str = ""  # state_before_unknown, while UNKWN
    depend: bool = False  # it may be ended by a dependency that can never hold


NOTHING = Job(ABSENT)
UNRECORDED = "unrecorded"  # the made-up submit's hold: either


def _ended(job: Job, phase: str) -> Job:
    return Job(phase, job.attempt, job.open, depend=job.depend)


def _requeued(job: Job) -> Job:
    """jobs.requeue_ended / refusals._pend_again: PEND at next_attempt (attempt + 1 or later)."""
    return Job("PEND", job.attempt + 1, True, depend=job.depend)


def internal(job: Job) -> list[Job]:
    """What the system may do to the job with no client asking, one transition."""
    phase, out = job.phase, []
    if phase == "PEND":
        out.append(job._replace(phase="RUN"))  # decisions._decide -> holdings.place
    if phase in ("PEND", "PSUSP") and job.depend:
        out.append(_ended(job, "EXIT"))  # depends._judge: DEPEND_NEVER with a kill
    if phase not in RUNNING:
        return out
    if not job.requeue:  # reports._finished, jobs.settle_lost, refusals._end, reports._dispatch_failed
        out += [_ended(job, "DONE"), _ended(job, "EXIT")]
    if job.requeue or not job.kill:  # reports._settled, settle_lost (rerunnable), refusals._pend_again
        out.append(_requeued(job))
    if phase == "UNKWN":
        out.append(job._replace(phase=job.before or "RUN", before=""))  # reports._started
        return out
    out.append(job._replace(phase="UNKWN", before=phase))  # hosts._mark_unknown
    if not job.kill:  # hosts._lose_part; preempt.take (requeue queue)
        out += [job._replace(kill=True, requeue=True), job._replace(kill=True, requeue=False)]
    if phase == "RUN" and not job.kill and not job.requeue:
        out.append(job._replace(phase="SSUSP"))  # preempt.take (suspend queue); rules eligible()
    if phase == "SSUSP" and not job.kill and not job.requeue:
        out.append(job._replace(phase="RUN"))  # preempt.resume; resume_refusal refuses one being killed
    return out


def _key(job: Job) -> tuple[str, bool, bool, str, bool]:
    return job.phase, job.kill, job.requeue, job.before, job.depend


@functools.lru_cache(maxsize=65536)
def closure(job: Job) -> tuple[Job, ...]:
    """Every state the internal transitions reach from `job` (itself included), without the ones an
    open state stands for already."""
    lowest_open: dict[tuple[str, bool, bool, str, bool], int] = {}
    seen: set[Job] = set()
    frontier = [job]
    while frontier:
        current = frontier.pop()
        floor = lowest_open.get(_key(current))
        if current in seen or (floor is not None and floor <= current.attempt):
            continue
        if current.open:
            lowest_open[_key(current)] = current.attempt
        seen.add(current)
        frontier.extend(internal(current))
    return tuple(sorted(s for s in seen if not _subsumed(s, lowest_open)))


def _subsumed(job: Job, lowest_open: dict[tuple[str, bool, bool, str, bool], int]) -> bool:
    floor = lowest_open.get(_key(job))
    return floor is not None and (floor < job.attempt or (floor == job.attempt and not job.open))


def _created(input: dict[str, Any]) -> list[Job]:
    hold, depend = input.get("hold", False), bool(input.get("depend", False))
    phases = ["PEND", "PSUSP"] if hold == UNRECORDED else (["PSUSP"] if hold else ["PEND"])
    return [Job(phase, 0, depend=depend) for phase in phases]


# jobs.CONTROL: action -> state -> (state after, kill_requested, requeue_requested); None: left as is.
_TO: dict[str, dict[str, str]] = {
    "KILL": {"PEND": "EXIT", "PSUSP": "EXIT", **{s: s for s in RUNNING}},
    "STOP": {"PEND": "PSUSP", "RUN": "USUSP", "SSUSP": "USUSP"},
    "RESUME": {"USUSP": "RUN", "PSUSP": "PEND"},
    "HOLD": {"PEND": "PSUSP"},
    "RELEASE": {"PSUSP": "PEND"},
    "REQUEUE": {"DONE": "PEND", "EXIT": "PEND", **{s: s for s in RUNNING}},
}


def refused(job: Job, action: str) -> bool:
    """jobs.check_control: not in the action's row, a kill or requeue of a job being killed, or a user's
    stop or resume of a preempted job (SSUSP is only ever set by preempt.take, with preempted_by)."""
    being_killed = job.phase in RUNNING and job.kill and (action == "REQUEUE" or not job.requeue)
    preempted = job.phase == "SSUSP" and action in ("STOP", "RESUME")
    return job.phase not in _TO[action] or (action in ("KILL", "REQUEUE") and being_killed) or preempted


def controlled(job: Job, action: str) -> Job:
    """jobs._control_one: the transition of an accepted action."""
    to = _TO[action][job.phase]
    if action == "REQUEUE" and job.phase in FINISHED:
        return _requeued(job)
    if job.phase in RUNNING and action in ("KILL", "REQUEUE"):
        return job._replace(kill=True, requeue=action == "REQUEUE")
    return job._replace(phase=to)


def _read(job: Job, seen: dict[str, Any]) -> list[Job]:
    """What a read that saw `seen` leaves (nothing: it cannot have seen it in `job`)."""
    if seen.get("error") == "NOT_FOUND":
        return [job] if job.phase == ABSENT else []
    if job.phase != seen.get("state"):
        return []
    attempt = seen.get("attempt")
    if attempt is None:
        return [job]
    if attempt == job.attempt or (job.open and attempt > job.attempt):
        return [job._replace(attempt=int(attempt), open=False)]
    return []


def _control(job: Job, action: str, output: dict[str, Any] | None) -> list[Job]:
    if job.phase == ABSENT:
        return [job] if output is None or output.get("error") == "NOT_FOUND" else []
    if refused(job, action):
        return [job] if output is None or output.get("error") == "FAILED_PRECONDITION" else []
    if output is None:
        return [job, controlled(job, action)]  # (never taking effect: as linearized last)
    return [controlled(job, action)] if not output.get("error") else []


class JobsModel(BaseModel):
    def init(self) -> Hashable:
        return NOTHING

    def step(self, state: Any, input: Any, output: Any) -> Sequence[Hashable]:
        kind = input["kind"]
        after: list[Job] = []
        for job in closure(state):
            if kind == "submit":
                if job.phase != ABSENT:
                    after.append(job)  # the same request again: it finds the job
                else:
                    after += _created(input) + ([job] if output is None else [])
            elif kind in READS:
                after += _read(job, output) if output is not None else [job]
            elif kind == "control":
                after += _control(job, input["action"], output)
            else:
                raise ValueError(f"unknown operation {kind!r}")
        return list(dict.fromkeys(after))

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        by_job: dict[int, list[Operation]] = {}
        acknowledged: dict[str, int] = {}  # request id -> job id, of acknowledged submits
        for op in ops:
            if op.kind == "submit" and op.output is not None and "id" in op.output:
                by_job.setdefault(int(op.output["id"]), []).append(op)
                if op.input.get("request_id"):
                    acknowledged[op.input["request_id"]] = int(op.output["id"])
        for op in ops:
            if op.kind == "submit" and op.output is None and op.input.get("request_id") in acknowledged:
                by_job[acknowledged[op.input["request_id"]]].append(op)  # an earlier try of the same
            elif op.kind != "submit":
                by_job.setdefault(int(op.input["id"]), []).append(op)
        parts = []
        for job_id in sorted(by_job):
            part = by_job[job_id]
            if not any(op.kind == "submit" and op.output is not None for op in part):
                part = [_made_up_submit(job_id), *part]
            parts.append(sorted(part, key=lambda op: (op.call, op.index)))
        return parts

    def describe_operation(self, input: Any, output: Any) -> str:
        kind = input["kind"]
        if kind == "submit":
            name = input.get("name", "")
            answer = "?" if output is None else f"id {output.get('id')}"
            return f"submit({name}) -> {answer}"
        if output is None:
            answer = "?"
        elif output.get("error"):
            answer = str(output["error"])
        elif kind in READS:
            answer = f"{output.get('state')}/{output.get('attempt', '?')}"
        else:
            answer = "ok"
        if kind == "control":
            return f"{input['action'].lower()}({input['id']}) -> {answer}"
        return f"{kind}({input['id']}) -> {answer}"

    def describe_state(self, state: Any) -> str:
        job: Job = state
        if job.phase == ABSENT:
            return "absent"
        flags = [name for name, on in (("kill", job.kill), ("requeue", job.requeue)) if on]
        attempt = f"{job.attempt}+" if job.open else str(job.attempt)
        return f"{job.phase}/{attempt}" + (f" [{', '.join(flags)}]" if flags else "")

    def read_only(self, input: Any) -> bool:
        return input["kind"] in READS


def _made_up_submit(job_id: int) -> Operation:
    return Operation(-1 - job_id, "(unrecorded)", {"kind": "submit", "hold": UNRECORDED, "depend": True,
                                                   "name": "(unrecorded submit)"},
                     None, -math.inf, math.inf, "submit")


def operations(history: Iterable[Op]) -> list[Operation]:
    """The recorded history as the checker's operations (module docstring): a failed operation is left
    out (no effect, nothing seen), unless it is a definite refusal (FAILED_PRECONDITION, NOT_FOUND),
    which is an observation; an unknown read is left out (no effect, nothing seen); a list becomes one
    read per job it shows."""
    ops: list[Operation] = []
    for op in history:
        output = op.output or {}
        # A refused submit observed nothing of any job (it has no id); a refused control or read did.
        observed = op.status == "ok" or (op.status == "fail" and output.get("error") in REFUSALS
                                         and op.kind != "submit")
        if not observed and (op.status == "fail" or op.kind in READS):
            continue
        call, ret = float(op.invoke_ns), float(op.complete_ns or 0)
        seen = output if observed else None
        if not observed:
            ret = math.inf
        if op.kind == "list":
            ops += _list_reads(op, output, call, ret)
            continue
        ops.append(Operation(op.index, op.client, {"kind": op.kind, **op.input}, seen, call, ret, op.kind))
    return ops


def _list_reads(op: Op, output: dict[str, Any], call: float, ret: float) -> list[Operation]:
    reads = []
    for job_id, shown in sorted((output.get("jobs") or {}).items(), key=lambda item: int(item[0])):
        seen = shown if isinstance(shown, dict) else {"state": shown}
        reads.append(Operation(op.index, op.client, {"kind": "list", "id": int(job_id), **op.input}, seen,
                               call, ret, "list"))
    return reads
