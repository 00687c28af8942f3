"""A worker's refusal to start a job, by whose fault it is (controller/fsm/refusals.py, entry format 19):
apply's verdict, the barrier, and what the scheduler's planner makes of the job afterwards. Pure."""

from __future__ import annotations

import pytest

from controller import fsm
from controller.fsm import decisions
from controller.fsm.versions import REFUSALS_FORMAT
from controller.tables import MemoryTables
from scheduler import planner
from scheduler.decisions import Dispatch, Pend
from scheduler.planner import PassView, PlannerConfig, PlannerState
from xce import start_failures
from xce.rules import feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STAMP = 1_700_000_000_000
CONFIG = PlannerConfig()


class State:
    """An in-memory replica's state, entries stamped and formatted as a leader would."""

    def __init__(self, entry_format: int = REFUSALS_FORMAT, hosts: tuple[str, ...] = ("a", "b")) -> None:
        self.tables = MemoryTables()
        self.index = 0
        self.format = entry_format
        self.apply(log.Entry(init=log.InitCluster(cluster_id="c", config_digest="d",
                                                  queues=[api.Queue(name="normal")])))
        for name in hosts:
            self.join(name)

    def apply(self, entry: log.Entry, stamp: int = STAMP) -> log.Result:
        self.index += 1
        entry.stamp_ms, entry.format = stamp, self.format
        results = fsm.apply(self.tables, self.index, entry.SerializeToString())
        assert results is not None
        return results[0]

    def join(self, name: str) -> int:
        return self.apply(log.Entry(join_host=api.HostSpec(name=name, slots=4))).generation

    def submit(self, stdout_path: str = "") -> int:
        spec = api.JobSpec(command=["true"], user="u", stdout_path=stdout_path)
        request = api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[spec])
        return int(self.apply(log.Entry(submit=log.SubmitBatch(requests=[request]))).job_ids[0])

    def run(self, job_id: int, host: str) -> log.Result:
        """An operator's forced run (brun): it passes what a scheduler's dispatch may not."""
        attempt = self.job(job_id).attempt
        return self.apply(log.Entry(dispatch=log.Dispatch(job_id=job_id, host=host, attempt=attempt)))

    def refuse(self, job_id: int, code: int, reason: str = "no", stamp: int = STAMP) -> api.Job:
        job = self.job(job_id)
        host = self.host(job.host)
        report = api.JobReport(job_id=job_id, attempt=job.attempt,
                               dispatch_failed=api.DispatchFailed(code=code, reason=reason))
        assert self.apply(log.Entry(report=log.HostReport(host=host.spec.name, generation=host.generation,
                                                          report=report)), stamp).code == log.OK
        return self.job(job_id)

    def job(self, job_id: int) -> api.Job:
        job = fsm.read_job(self.tables, job_id)
        assert job is not None
        return job

    def host(self, name: str) -> api.Host:
        host = fsm.read_host(self.tables, name)
        assert host is not None
        return host

    def hosts(self) -> list[api.Host]:
        return [api.Host.FromString(raw) for _, raw in self.tables.scan("hosts")]

    def view(self, *job_ids: int) -> PassView:
        return self.view_of([self.job(j) for j in job_ids], self.hosts())

    def view_of(self, jobs: list[api.Job], hosts: list[api.Host]) -> PassView:
        return PassView(jobs, [api.Queue(name="normal")], hosts, {}, self.index)


@pytest.mark.parametrize(("code", "exit_code", "reason"), [
    (start_failures.COMMAND_NOT_FOUND, 127, "COMMAND_NOT_FOUND"),
    (start_failures.NOT_EXECUTABLE, 126, "NOT_EXECUTABLE"),
    (start_failures.CWD_MISSING, 2, "CWD_MISSING")])
def test_the_jobs_own_command_or_directory_ends_it_at_once(code: int, exit_code: int, reason: str) -> None:
    state = State()
    job_id = state.submit()
    state.run(job_id, "a")
    ended = state.refuse(job_id, code, "command not found: nope")
    assert (ended.state, ended.exit_code, ended.exit_reason, ended.attempt) == \
        (api.EXIT, exit_code, reason, 0)
    assert ended.start_error == "command not found: nope (on a)" and ended.end_time_ms == STAMP
    assert not ended.refused_host and ended.pending_code == api.PENDING_REASON_UNSPECIFIED
    assert state.host("a").slots_used == 0


def test_before_format_19_every_refusal_requeues_and_names_the_host_as_it_did() -> None:
    state = State(entry_format=REFUSALS_FORMAT - 1)
    job_id = state.submit()
    state.run(job_id, "a")
    again = state.refuse(job_id, start_failures.COMMAND_NOT_FOUND, "command not found: nope")
    assert (again.state, again.attempt, again.pending_code, again.refused_host) == \
        (api.PEND, 1, api.PEND_DISPATCH_REFUSED, "a")
    assert not again.start_error and not again.start_failures


def test_an_output_file_gets_bounded_tries_with_a_doubling_backoff_then_exit() -> None:
    state = State()
    job_id = state.submit(stdout_path="/root/forbidden/out")
    waits = []
    for attempt in range(start_failures.MAX_TRIES - 1):
        state.run(job_id, "a")
        stamp = STAMP + 100_000 * attempt
        job = state.refuse(job_id, start_failures.OUTPUT_FILE, "output file /root/forbidden/out: Permission "
                           "denied", stamp)
        assert (job.state, job.attempt, job.pending_code, job.refused_host) == \
            (api.PEND, attempt + 1, api.PEND_START_RETRY, "")
        assert job.pending_reason == start_failures.retry_words(job) and "Permission denied (on a)" in \
            job.pending_reason
        waits.append(job.not_before_ms - stamp)
    assert waits == [1_000, 2_000, 4_000]
    state.run(job_id, "a")
    ended = state.refuse(job_id, start_failures.OUTPUT_FILE, "output file /root/forbidden/out: denied")
    assert (ended.state, ended.exit_code, ended.exit_reason, ended.start_failures) == \
        (api.EXIT, 1, "OUTPUT_FILE", start_failures.MAX_TRIES)
    assert ended.start_error == "output file /root/forbidden/out: denied (on a)"
    # A requeue of the ended job is a fresh try (its owner fixed the directory, say).
    requeue = api.ControlJobRequest(job_id=str(job_id), action=api.REQUEUE)
    assert state.apply(log.Entry(control=requeue)).code == log.OK
    fresh = state.job(job_id)
    assert (fresh.state, fresh.start_failures, fresh.start_error, fresh.not_before_ms) == (api.PEND, 0, "", 0)


def test_the_planner_waits_out_the_backoff_without_cooling_the_host_or_rewording_the_reason() -> None:
    state = State(hosts=("a",))
    impossible, other = state.submit(stdout_path="/x"), state.submit()
    state.run(impossible, "a")
    state.refuse(impossible, start_failures.OUTPUT_FILE, "output file /x: Permission denied")
    wall = STAMP + 500  # before the first backoff ends
    plan = planner.plan(state.view(impossible, other), PlannerState(), 10_000, CONFIG, wall_ms=wall)
    assert [(d.job_id, d.host) for d in plan.decisions if isinstance(d, Dispatch)] == [(other, "a")]
    assert not [d for d in plan.decisions if isinstance(d, Pend)]  # apply's words are the pass's words
    assert plan.cooled == [] and plan.state.cooldown == {}  # the host is not cooled for anyone
    later = planner.plan(state.view(impossible), plan.state, 11_000, CONFIG, wall_ms=STAMP + 1_000)
    assert [(d.job_id, d.host) for d in later.decisions if isinstance(d, Dispatch)] == [(impossible, "a")]


def test_a_hosts_refusal_still_cools_that_host() -> None:
    state = State(hosts=("a",))
    drained, other = state.submit(), state.submit()
    state.run(drained, "a")
    job = state.refuse(drained, start_failures.DRAINING, "worker draining")
    assert (job.state, job.pending_code, job.refused_host) == (api.PEND, api.PEND_DISPATCH_REFUSED, "a")
    plan = planner.plan(state.view(drained, other), PlannerState(), 10_000, CONFIG, wall_ms=STAMP)
    assert plan.cooled == [("a", drained)] and not [d for d in plan.decisions if isinstance(d, Dispatch)]


@pytest.mark.parametrize("code", [start_failures.UNKNOWN_USER, start_failures.USER_NOT_ALLOWED])
def test_a_host_that_refused_the_owner_gets_the_job_again_only_once_it_joined_anew(code: int) -> None:
    state = State()
    job_id, other = state.submit(), state.submit()
    state.run(job_id, "a")
    job = state.refuse(job_id, code, "user u has no account on host a")
    assert (job.state, job.attempt, job.pending_code, job.refused_host) == \
        (api.PEND, 1, api.PEND_OWNER_REFUSED, "")
    assert dict(job.refused_owner) == {"a": state.host("a").generation}
    # The scheduler places it elsewhere at once, and cools nothing: a (first by name) takes the other.
    plan = planner.plan(state.view(job_id, other), PlannerState(), 10_000, CONFIG, wall_ms=STAMP)
    assert sorted((d.job_id, d.host) for d in plan.decisions if isinstance(d, Dispatch)) == \
        [(job_id, "b"), (other, "a")]
    assert plan.state.cooldown == {}
    # The barrier refuses a scheduler's dispatch there; an operator's forced run may (brun).
    usage = fsm.CommittedUsage(state.tables)
    refusal = decisions.dispatch_refusal(usage, state.job(job_id), "a", 1, entry_format=state.format)
    assert refusal is not None and refusal.reason == api.PEND_OWNER_REFUSED
    assert decisions.dispatch_refusal(usage, state.job(job_id), "a", 1, forced=True,
                                      entry_format=state.format) is None
    # With no other host, the job says why it waits; once `a` joins anew, it is placed there.
    only_a = state.view_of([state.job(job_id)], [state.host("a")])
    pend = planner.plan(only_a, PlannerState(), 10_000, CONFIG, wall_ms=STAMP).decisions
    assert [d.code for d in pend if isinstance(d, Pend)] == [api.PEND_OWNER_REFUSED] and len(pend) == 1
    state.join("a")
    assert decisions.dispatch_refusal(fsm.CommittedUsage(state.tables), state.job(job_id), "a", 1,
                                      entry_format=state.format) is None
    rejoined = state.view_of([state.job(job_id)], [state.host("a")])
    again = planner.plan(rejoined, PlannerState(), 10_000, CONFIG, wall_ms=STAMP)
    assert [(d.job_id, d.host) for d in again.decisions if isinstance(d, Dispatch)] == [(job_id, "a")]


def test_codes_are_sorted_by_whose_fault_they_are() -> None:
    kinds = {code: start_failures.kind(code) for code in sorted(start_failures.CODES)}
    assert {c for c, k in kinds.items() if k is start_failures.Kind.HOST} == \
        {start_failures.DRAINING, start_failures.START_FAILED}
    assert {c for c, k in kinds.items() if k is start_failures.Kind.OWNER} == \
        {start_failures.UNKNOWN_USER, start_failures.USER_NOT_ALLOWED}
    assert start_failures.kind(-99) is start_failures.Kind.HOST  # an unknown code: as before
    avoiding = feasibility.Need(feasibility.NO_NEED.requirement, avoid=frozenset({"a"}))
    assert avoiding.forced().avoid == frozenset() and not avoiding.plain
