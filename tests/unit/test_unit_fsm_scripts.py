"""The state machine's job transitions as golden scripts (testdata/fsm_*.txt; the format: golden.py).

Each script applies entries, in the newest format, to a fresh state in memory (the real
`controller.fsm.apply`) and prints what each one answered; `state` prints every job's state and
holdings and every host's use, so a transition that takes, keeps or gives back the wrong slots
shows in the text. Commands:

    init                       queues, one a line: `name key=value ...` (api.Queue's fields)
    join host=h1 slots=4       a host (memory=MB)
    submit queue=low           a job (slots=, rerunnable=true); prints its id
    dispatch job=1 host=h1     a DISPATCH through the commit barrier (parts=(a:2,b:2) for several)
    preempt job=3 victims=(1,2)
    report job=1 started       what the job's host says (started, suspended, finished exit=N),
                               of its current attempt unless attempt=N
    control job=1 action=requeue
    state
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from golden import Case, run

from controller.fsm.versions import ENTRY_FORMAT
from tests.unit.test_unit_allocation import State
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

TESTDATA = Path(__file__).with_name("testdata")
SCRIPTS = sorted(TESTDATA.glob("fsm_*.txt"))


def queue(line: str) -> api.Queue:
    """`high priority=50 preemptive=low`: a queue from its fields (lists comma separated)."""
    name, *fields = line.split()
    result = api.Queue(name=name)
    for key, value in (f.split("=", 1) for f in fields):
        descriptor = api.Queue.DESCRIPTOR.fields_by_name[key]
        if descriptor.is_repeated:
            getattr(result, key).extend(value.split(","))
        elif descriptor.type == descriptor.TYPE_BOOL:
            setattr(result, key, value == "true")
        else:
            setattr(result, key, int(value))
    return result


def outcome(result: api.DecisionOutcome) -> str:
    if result.code == api.DECISION_ACCEPTED:
        return "accepted"
    code, reason = api.DecisionRejection.Name(result.code), api.PendingReason.Name(result.reason)
    return f"{code} {reason}: {result.message}"


def answer(result: log.Result) -> str:
    return "ok" if result.code == log.OK else f"{log.Code.Name(result.code)}: {result.message}"


def allocation(parts: Iterable[api.HostAllocation]) -> str:
    return ",".join(f"{a.host}:{a.slots}" for a in parts)


def job_line(job: api.Job) -> str:
    words = [f"job {job.id}", api.JobState.Name(job.state), f"attempt={job.attempt}"]
    if job.host:
        words.append(f"host={job.host}")
    if job.allocation:
        words.append(f"allocation=({allocation(job.allocation)})")
    if job.released:
        words.append(f"released=({allocation(job.released)})")
    if job.preempting:
        words.append(f"preempting=({','.join(map(str, job.preempting))})")
    if job.requeue_requested:
        words.append("requeue_requested")
    if job.preempted_by:
        words.append(f"preempted_by={job.preempted_by}")
    if job.state == api.PEND and job.pending_code:
        words.append(api.PendingReason.Name(job.pending_code))
    if job.state in (api.DONE, api.EXIT):
        words.append(f"exit={job.exit_code}")
    return " ".join(words)


class Script(State):
    """A state the script's commands change; `handle` answers each with its output."""

    def __init__(self) -> None:
        self.jobs: list[int] = []
        self.hosts: list[str] = []

    def apply(self, entry: log.Entry, format_: int = ENTRY_FORMAT) -> log.Result:
        return super().apply(entry, format_)

    def dispatch(self, job_id: int, *parts: tuple[str, int],
                 format_: int = ENTRY_FORMAT) -> api.DecisionOutcome:
        return super().dispatch(job_id, *parts, format_=format_)

    def handle(self, case: Case) -> str:
        command = getattr(self, "do_" + case.command, None)
        assert command is not None, f"line {case.line}: no command {case.command}"
        return str(command(case))

    def do_init(self, case: Case) -> str:
        super().__init__([queue(line) for line in case.input])
        return "ok"

    def do_join(self, case: Case) -> str:
        self.join(case.arg("host"), case.number("slots"), memory_mb=case.number("memory", 0))
        self.hosts.append(case.arg("host"))
        return "ok"

    def do_submit(self, case: Case) -> str:
        spec = api.JobSpec(command=["x"], queue=case.arg("queue", ""), slots=case.number("slots", 1),
                           rerunnable=case.arg("rerunnable", "false") == "true")
        result = self.apply(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[spec])])))
        if result.code != log.OK:
            return answer(result)
        self.jobs.extend(int(j) for j in result.job_ids)
        return f"job {','.join(map(str, result.job_ids))}"

    def do_dispatch(self, case: Case) -> str:
        job_id = case.number("job")
        parts = [(h, int(n)) for h, n in (p.split(":") for p in case.items("parts"))]
        if not parts:
            parts = [(case.arg("host"), case.number("slots", self.job(job_id).spec.slots))]
        return outcome(self.dispatch(job_id, *parts))

    def do_preempt(self, case: Case) -> str:
        job_id = case.number("job")
        decision = api.PreemptDecision(job_id=job_id, attempt=self.job(job_id).attempt, victims=[
            api.Victim(job_id=int(v), attempt=self.job(int(v)).attempt) for v in case.items("victims")])
        batch = api.DecisionBatch(lease_epoch=self.epoch, scheduler_id="s")
        batch.decisions.add(preempt=decision)
        return outcome(self.apply(log.Entry(decisions=batch)).outcomes[0])

    def do_report(self, case: Case) -> str:
        job = self.job(case.number("job"))
        bodies: dict[str, dict[str, Any]] = {
            "started": {"started": api.JobStarted(pid=100 + job.id, time_ms=1)},
            "suspended": {"suspended": api.JobSuspended(time_ms=1)},
            "finished": {"finished": api.JobFinished(exit_code=case.number("exit", 0))}}
        (body,) = [bodies[kind] for kind in case.args if kind in bodies]
        host = job.host or self.hosts[0]
        attempt = case.number("attempt", job.attempt)
        report = log.HostReport(host=host, generation=self.host(host).generation,
                                report=api.JobReport(job_id=job.id, attempt=attempt, **body))
        return answer(self.apply(log.Entry(report=report)))

    def do_control(self, case: Case) -> str:
        action = api.ControlAction.Name(api.ControlAction.Value(case.arg("action").upper()))
        return answer(self.apply(log.Entry(control=api.ControlJobRequest(
            job_id=case.arg("job"), action=action, request_id=f"c{self.index}"))))

    def do_state(self, case: Case) -> str:
        jobs = [job_line(self.job(j)) for j in self.jobs]
        hosts = []
        for name in self.hosts:
            host = self.host(name)
            hosts.append(f"host {name} slots_used={host.slots_used}/{host.spec.slots} "
                         f"running_jobs={host.running_jobs}")
        return "\n".join(jobs + hosts)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_script(path: Path) -> None:
    run(path, Script().handle)
