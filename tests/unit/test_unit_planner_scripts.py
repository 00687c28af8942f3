"""The planner's passes over time as golden scripts (testdata/planner_*.txt; the format: golden.py).

A script builds a view of plain records, runs `scheduler.planner.plan` on it at the times it names,
answers the batches, and prints each pass's decisions and the planner state it leaves: what spans
passes (dispatches in flight, a refusing host's cool-down, the wait for the view) shows in the text.
Commands:

    host name=a slots=4             a host (used=N slots taken by jobs the script does not list)
    job id=1                        a pending job (slots=, queue=, attempt=, refused=HOST: that host's
                                    worker refused its dispatch)
    run id=1 host=a                 the view shows the job running there (its slots taken)
    plan now=1000                   a pass at the planner's clock (revision= the view's, default 10)
    reply revision=11 rejected=(1)  the answer to the last pass's batch: these dispatches refused
    ready revision=11 now=1100      whether a pass may run on a view of that revision
"""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import Case, run

from scheduler import planner
from scheduler.decisions import Decision, Dispatch, Pend, Preempt
from scheduler.planner import PassView, PlannerConfig, PlannerState
from xce.v1 import api_pb2 as api

TESTDATA = Path(__file__).with_name("testdata")
SCRIPTS = sorted(TESTDATA.glob("planner_*.txt"))
CONFIG = PlannerConfig()
QUEUES = [api.Queue(name="normal", priority=30)]


def decision_line(decision: Decision) -> str:
    if isinstance(decision, Dispatch):
        hosts = f" ({','.join(f'{h}:{n}' for h, n in decision.hosts)})" if decision.hosts else ""
        return f"dispatch {decision.job_id} attempt={decision.attempt} -> {decision.host}{hosts}"
    if isinstance(decision, Pend):
        return f"pend {decision.job_id} {api.PendingReason.Name(decision.code)}: {decision.reason}"
    assert isinstance(decision, Preempt)
    victims = ",".join(f"{j}@{a}" for j, a in decision.victims)
    return f"preempt {decision.job_id} attempt={decision.attempt} victims=({victims})"


def state_line(state: PlannerState) -> str:
    in_flight = ",".join(f"{j}@{a}:{t}" for j, (a, t) in sorted(state.in_flight.items()))
    cooldown = ",".join(f"{h}<{u}" for h, u in sorted(state.cooldown.items()))
    return (f"state in_flight=({in_flight}) cooldown=({cooldown}) "
            f"await revision={state.await_revision} until={state.await_until_ms}")


class Script:
    """The view the script builds and the planner state its passes leave."""

    def __init__(self) -> None:
        self.hosts: dict[str, api.Host] = {}
        self.jobs: dict[int, api.Job] = {}
        self.state = PlannerState()
        self.last: tuple[planner.Plan, PlannerState, api.DecisionBatch] | None = None

    def handle(self, case: Case) -> str:
        command = getattr(self, "do_" + case.command, None)
        assert command is not None, f"line {case.line}: no command {case.command}"
        return str(command(case))

    def do_host(self, case: Case) -> str:
        name = case.arg("name")
        self.hosts[name] = api.Host(spec=api.HostSpec(name=name, slots=case.number("slots")),
                                    status=api.HOST_OK, slots_used=case.number("used", 0))
        return "ok"

    def do_job(self, case: Case) -> str:
        job_id, refused = case.number("id"), case.arg("refused", "")
        self.jobs[job_id] = api.Job(
            id=job_id, attempt=case.number("attempt", 0), state=api.PEND, submit_time_ms=job_id,
            pending_code=api.PEND_DISPATCH_REFUSED if refused else api.PENDING_REASON_UNSPECIFIED,
            pending_reason=f"dispatch to {refused} failed" if refused else "", refused_host=refused,
            spec=api.JobSpec(command=["true"], queue=case.arg("queue", "normal"),
                             slots=case.number("slots", 1)))
        return "ok"

    def do_run(self, case: Case) -> str:
        job, host = self.jobs[case.number("id")], self.hosts[case.arg("host")]
        job.state, job.host = api.RUN, host.spec.name
        job.pending_code, job.pending_reason = api.PENDING_REASON_UNSPECIFIED, ""
        host.slots_used += job.spec.slots
        host.running_jobs += 1
        return "ok"

    def do_plan(self, case: Case) -> str:
        now = case.number("now")
        view = PassView(list(self.jobs.values()), QUEUES, list(self.hosts.values()), {},
                        case.number("revision", 10))
        started = self.state
        result = planner.plan(view, started, now, CONFIG)
        batch = planner.to_batch(result, started, 1, "s", view.revision, now, 1_700_000_000_000 + now)
        self.state, self.last = result.state, (result, started, batch)
        cooled = [f"cooled {h} (job {j})" for h, j in result.cooled]
        return "\n".join([*map(decision_line, result.decisions), *cooled, state_line(self.state)])

    def do_reply(self, case: Case) -> str:
        assert self.last is not None, f"line {case.line}: reply before any plan"
        result, _, batch = self.last
        rejected = {int(j) for j in case.items("rejected")}
        outcomes = [api.DecisionOutcome(code=api.REJECT_INFEASIBLE, reason=api.PEND_NO_FREE_SLOTS)
                    if isinstance(d, Dispatch) and d.job_id in rejected else api.DecisionOutcome()
                    for d in result.decisions]
        reply = api.DecisionBatchResponse(revision=case.number("revision"), outcomes=outcomes)
        self.state, stale = planner.after_reply(self.state, batch, reply, case.number("now", 0), CONFIG)
        return "\n".join([*(["stale lease"] if stale else []), state_line(self.state)])

    def do_ready(self, case: Case) -> str:
        return str(planner.ready(self.state, case.number("revision"), case.number("now")))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_script(path: Path) -> None:
    run(path, Script().handle)
