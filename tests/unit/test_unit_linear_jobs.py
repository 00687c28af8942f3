"""The job-table model (soak/linear/jobs_model.py): correct histories pass, each bug class is caught."""

from __future__ import annotations

from typing import Any

import pytest

from soak.linear import jobs_model
from soak.linear.checker import ILLEGAL, OK, check
from soak.linear.history import Op
from soak.linear.jobs_model import Job, JobsModel, closure

MODEL = JobsModel()


class Script:
    """A history written by hand: each operation at [t, t + 1] unless told otherwise."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t = 0

    def add(self, kind: str, input: dict[str, Any], output: dict[str, Any] | None, status: str = "ok",
            client: str = "c", at: int | None = None, until: int | None = None) -> Script:
        start = self.t if at is None else at
        end = start + 1 if until is None else until
        self.t = max(self.t, end) + 1
        self.ops.append(Op(client, kind, input, start, output, None if status == "unknown" else end, status,
                           index=len(self.ops)))
        return self

    def submit(self, job_id: int | None, status: str = "ok", **kw: Any) -> Script:
        return self.add("submit", {"name": "j", "slots": 1, **kw.pop("input", {})},
                        {"id": job_id} if job_id is not None else None, status, **kw)

    def get(self, job_id: int, state: str, attempt: int = 0, **kw: Any) -> Script:
        output = {"error": "NOT_FOUND"} if state == "NOT_FOUND" else {"state": state, "attempt": attempt}
        return self.add("get", {"id": job_id}, output, **kw)

    def control(self, job_id: int, action: str, error: str = "", status: str = "ok", **kw: Any) -> Script:
        output = {"error": error} if error else {}
        return self.add("control", {"id": job_id, "action": action}, output, status, **kw)

    def list(self, jobs: dict[int, str], **kw: Any) -> Script:
        return self.add("list", {"filters": []}, {"jobs": {str(k): v for k, v in jobs.items()}}, **kw)

    def verdict(self) -> str:
        return check(MODEL, jobs_model.operations(self.ops), budget_s=10.0, reduce_budget_s=2.0).verdict


def test_a_realistic_correct_history_is_linearizable() -> None:
    s = Script().submit(1).submit(2).submit(3)
    s.get(1, "PEND").get(1, "RUN").list({1: "RUN", 2: "PEND"}).get(1, "DONE")
    s.control(2, "HOLD").get(2, "PSUSP").control(2, "RELEASE").get(2, "RUN").get(2, "EXIT")
    s.get(3, "RUN").control(3, "KILL").get(3, "RUN").get(3, "EXIT").control(3, "KILL", "FAILED_PRECONDITION")
    s.control(1, "HOLD", "FAILED_PRECONDITION").get(9, "NOT_FOUND")
    assert s.verdict() == OK


def test_requeue_and_lost_host_are_allowed() -> None:
    s = Script().submit(1).get(1, "RUN").get(1, "UNKWN").get(1, "RUN").get(1, "PEND", 1).get(1, "RUN", 3)
    s.control(1, "STOP").get(1, "USUSP", 3).get(1, "UNKWN", 3).get(1, "USUSP", 3).control(1, "RESUME")
    s.get(1, "SSUSP", 3).control(1, "STOP", "FAILED_PRECONDITION").get(1, "RUN", 3).get(1, "DONE", 3)
    assert s.verdict() == OK


def test_concurrent_operations_may_linearize_either_way() -> None:
    s = Script().submit(1)
    s.control(1, "HOLD", client="a", at=10, until=20)
    s.get(1, "PEND", client="b", at=11, until=12)  # before the hold took effect
    s.get(1, "PSUSP", client="c", at=13, until=14)
    assert s.verdict() == OK


def test_an_unknown_submit_may_create_a_job_nobody_was_told_about() -> None:
    s = Script().submit(None, status="unknown").list({7: "PEND"}).get(7, "RUN")
    assert s.verdict() == OK


def test_unknown_control_may_take_effect_or_not() -> None:
    assert Script().submit(1).control(1, "HOLD", status="unknown").get(1, "PSUSP").verdict() == OK
    assert Script().submit(1).control(1, "HOLD", status="unknown").get(1, "RUN").verdict() == OK


def test_a_retried_submit_of_the_same_request_may_appear_before_its_acknowledgement() -> None:
    s = Script().submit(None, status="unknown", input={"request_id": "r1"}).get(4, "PEND")
    s.submit(4, input={"request_id": "r1"})
    assert s.verdict() == OK


def test_lost_write() -> None:
    assert Script().submit(1).get(1, "PEND").get(1, "NOT_FOUND").verdict() == ILLEGAL
    assert Script().submit(1).control(1, "KILL", "NOT_FOUND").verdict() == ILLEGAL


def test_job_seen_before_its_submit_was_invoked() -> None:
    assert Script().get(1, "PEND").submit(1).verdict() == ILLEGAL


def test_stale_read_done_then_run() -> None:
    assert Script().submit(1).get(1, "DONE").get(1, "RUN").verdict() == ILLEGAL


def test_stale_read_attempt_goes_down() -> None:
    assert Script().submit(1).get(1, "RUN", 2).get(1, "PEND", 1).verdict() == ILLEGAL


def test_stale_list_after_a_get() -> None:
    assert Script().submit(1).get(1, "EXIT").list({1: "PEND"}).verdict() == ILLEGAL


def test_hold_ignored() -> None:
    assert Script().submit(1).control(1, "HOLD").get(1, "PEND").verdict() == ILLEGAL
    assert Script().submit(1).control(1, "HOLD").get(1, "RUN").verdict() == ILLEGAL
    # the same with the release in between is fine
    assert Script().submit(1).control(1, "HOLD").control(1, "RELEASE").get(1, "RUN").verdict() == OK


def test_held_at_submission_does_not_run() -> None:
    assert Script().submit(1, input={"hold": True}).get(1, "RUN").verdict() == ILLEGAL


def test_killed_job_runs_again_in_a_new_attempt() -> None:
    s = Script().submit(1).get(1, "RUN").control(1, "KILL").get(1, "PEND", 1)
    assert s.verdict() == ILLEGAL
    assert Script().submit(1).control(1, "KILL").get(1, "EXIT").get(1, "RUN").verdict() == ILLEGAL


def test_refusal_that_the_state_does_not_explain() -> None:
    # refused, so not PEND then; and a job never goes back to PEND at the same attempt
    assert Script().submit(1).control(1, "HOLD", "FAILED_PRECONDITION").get(1, "PEND").verdict() == ILLEGAL
    assert Script().submit(1).control(1, "RELEASE").verdict() == ILLEGAL  # not held
    assert Script().submit(1).get(1, "DONE").control(1, "KILL").verdict() == ILLEGAL


def test_a_stopped_job_resumes_only_when_asked() -> None:
    s = Script().submit(1).get(1, "RUN").control(1, "STOP").get(1, "USUSP").get(1, "RUN")
    assert s.verdict() == ILLEGAL


def test_a_definite_refusal_recorded_as_fail_is_still_an_observation() -> None:
    s = Script().submit(1).control(1, "HOLD", "NOT_FOUND", status="fail")
    assert s.verdict() == ILLEGAL
    s = Script().submit(1).control(1, "HOLD", "INVALID_ARGUMENT", status="fail").get(1, "RUN")
    assert s.verdict() == OK


def test_a_refused_submit_observes_nothing_and_breaks_nothing() -> None:
    # FAILED_PRECONDITION (no leader, say) and NOT_FOUND (no such queue) on a submit: no job, no id.
    s = Script().submit(None, status="fail", input={"request_id": "r1"})
    s.ops[-1].output = {"error": "FAILED_PRECONDITION"}
    s.submit(None, status="fail").ops[-1].output = {"error": "NOT_FOUND"}
    s.submit(1).get(1, "PEND")
    assert s.verdict() == OK


def test_the_violation_is_reduced_to_the_ops_that_matter() -> None:
    s = Script().submit(1)
    for _ in range(10):
        s.get(1, "PEND")
    s.get(1, "RUN").get(1, "DONE")
    for _ in range(5):
        s.get(1, "DONE")
    s.get(1, "RUN")  # stale
    for _ in range(5):
        s.get(1, "DONE")
    result = check(MODEL, jobs_model.operations(s.ops), reduce_budget_s=5.0)
    assert result.verdict == ILLEGAL
    assert len(result.failing) < len(result.failing_partition)
    assert check(MODEL, result.failing).verdict == ILLEGAL
    assert [MODEL.describe_operation(o.input, o.output) for o in result.failing][-2:] == \
        ["get(1) -> DONE/0", "get(1) -> RUN/0"]


@pytest.mark.parametrize("phase", ["PEND", "RUN", "USUSP", "SSUSP", "UNKWN", "PSUSP", "DONE"])
def test_closure_never_lowers_the_attempt_and_terminates(phase: str) -> None:
    start = Job(phase, 3, before="RUN" if phase == "UNKWN" else "")
    reached = closure(start)
    assert start in reached or any(j.open and j.attempt <= 3 for j in reached)
    assert all(j.attempt >= 3 for j in reached)
    assert len(reached) < 100


def test_a_killed_running_job_never_requeues() -> None:
    killed = Job("RUN", 2, kill=True)
    assert all(j.phase in ("RUN", "USUSP", "SSUSP", "UNKWN", "DONE", "EXIT") and j.attempt == 2
               for j in closure(killed))
