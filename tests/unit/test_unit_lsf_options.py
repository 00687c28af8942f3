"""LSF's scheduling options of a job (entry format 21): -H submits it held, -b keeps it from being
dispatched before its time (the scheduler's gate and the commit barrier), -t keeps a job whose time
passed from starting, a failed -E pre-exec pends the job again a bounded number of times; all refused
by a leader whose cluster does not run format 21 yet. bsub's time words as LSF reads them."""

from __future__ import annotations

import datetime

import pytest
from test_unit_refusals import STAMP, State

from cli.lsf import times
from controller.fsm import validation
from controller.fsm.versions import LSF_FORMAT
from scheduler import planner
from scheduler.decisions import Dispatch, Pend
from scheduler.planner import PlannerConfig, PlannerState
from xce import start_failures
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


def submit(state: State, **fields: object) -> log.Result:
    spec = api.JobSpec(command=["true"], user="u", **fields)  # type: ignore[arg-type]
    return state.apply(log.Entry(submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id=f"r{state.index}", jobs=[spec])])))


def decided(state: State, job_id: int, wall_ms: int) -> list[Dispatch | Pend]:
    """What a pass at `wall_ms` decides for the job."""
    plan = planner.plan(state.view(job_id), PlannerState(), 10_000, PlannerConfig(), wall_ms=wall_ms)
    return [d for d in plan.decisions if isinstance(d, (Dispatch, Pend))]


def test_a_held_submit_pends_held_until_released_an_array_s_elements_too() -> None:
    state = State(entry_format=LSF_FORMAT)
    job_id = submit(state, hold=True).job_ids[0]
    held = state.job(job_id)
    assert (held.state, held.pending_code, held.pending_reason) == \
        (api.PSUSP, api.PEND_JOB_HELD, "held at submission (bsub -H)")
    assert state.apply(log.Entry(control=api.ControlJobRequest(job_id=str(job_id), action=api.RESUME))).code \
        == log.OK
    assert state.job(job_id).state == api.PEND
    elements = api.ArraySpec(ranges=[api.IndexRange(start=1, end=500)])
    array = submit(state, hold=True, array=elements).job_ids[0]
    record = state.job(array)
    assert record.array.counts[api.PSUSP] == 500 and not record.array.counts[api.PEND]
    older = State(entry_format=LSF_FORMAT - 1)  # apply before format 21 never read the field
    assert older.job(submit(older, hold=True).job_ids[0]).state == api.PEND


def test_the_leader_refuses_the_options_while_the_cluster_runs_an_older_format() -> None:
    for fields in ({"hold": True}, {"begin_time_ms": STAMP}, {"term_time_ms": STAMP}, {"pre_exec": "true"},
                   {"post_exec": "true"}):
        spec = api.JobSpec(command=["true"], **fields)  # type: ignore[arg-type]
        with pytest.raises(ServiceError, match="need entry format 21"):
            validation.check_lsf_options_known(spec, LSF_FORMAT - 1)
        validation.check_lsf_options_known(spec, LSF_FORMAT)
    with pytest.raises(ServiceError, match="after the begin time"):
        validation.check_lsf_options(api.JobSpec(begin_time_ms=STAMP, term_time_ms=STAMP))


def test_the_begin_time_holds_back_the_scheduler_and_the_barrier_but_not_brun() -> None:
    state = State(entry_format=LSF_FORMAT)
    later = STAMP + 3_600_000
    job_id = submit(state, begin_time_ms=later).job_ids[0]
    pend = [d for d in decided(state, job_id, STAMP) if isinstance(d, Pend)]
    assert pend and pend[0].code == api.PEND_BEGIN_TIME and "2023-11-14 23:13:20 UTC" in pend[0].reason
    assert any(isinstance(d, Dispatch) for d in decided(state, job_id, later))
    lease = state.apply(log.Entry(lease=log.LeaseEntry(scheduler_id="s1", duration_ms=10_000)))
    batch = api.DecisionBatch(lease_epoch=lease.lease_epoch, scheduler_id="s1")
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=job_id, attempt=0, host="a"))
    outcome = state.apply(log.Entry(decisions=batch)).outcomes[0]
    assert (outcome.code, outcome.reason) == (api.REJECT_INFEASIBLE, api.PEND_BEGIN_TIME)  # a fast clock
    assert state.job(job_id).state == api.PEND
    assert state.run(job_id, "a").code == log.OK  # brun runs it now, as LSF's does


def test_a_job_whose_termination_time_passed_does_not_start() -> None:
    state = State(entry_format=LSF_FORMAT)
    job_id = submit(state, term_time_ms=STAMP + 1000).job_ids[0]
    assert any(isinstance(d, Dispatch) for d in decided(state, job_id, STAMP))
    pend = [d for d in decided(state, job_id, STAMP + 1000) if isinstance(d, Pend)]
    assert pend and pend[0].code == api.PEND_TERM_TIME_PASSED


def test_a_failed_pre_exec_pends_the_job_again_a_bounded_number_of_times() -> None:
    state = State(entry_format=LSF_FORMAT)
    job_id = submit(state, pre_exec="test -d /data").job_ids[0]
    for attempt in range(start_failures.MAX_TRIES - 1):
        state.run(job_id, "a")
        job = state.refuse(job_id, start_failures.PRE_EXEC_FAILED, "pre-exec (-E): exited 1")
        assert (job.state, job.attempt, job.pending_code, job.refused_host) == \
            (api.PEND, attempt + 1, api.PEND_START_RETRY, "")
    state.run(job_id, "a")
    ended = state.refuse(job_id, start_failures.PRE_EXEC_FAILED, "pre-exec (-E): exited 1")
    assert (ended.state, ended.exit_reason) == (api.EXIT, "PRE_EXEC_FAILED")
    older = State(entry_format=LSF_FORMAT - 1)  # the code was unknown: the host's, as before
    other = int(submit(older).job_ids[0])
    older.run(other, "a")
    assert older.refuse(other, start_failures.PRE_EXEC_FAILED).refused_host == "a"


NOW = datetime.datetime(2026, 12, 5, 23, 30)


@pytest.mark.parametrize(("text", "expected"), [
    ("23:45", datetime.datetime(2026, 12, 5, 23, 45)),     # later today
    ("08:00", datetime.datetime(2026, 12, 6, 8, 0)),       # passed today: tomorrow
    ("5:23:00", datetime.datetime(2027, 1, 5, 23, 0)),     # the 5th passed this month: next month's
    ("12:24:9:30", datetime.datetime(2026, 12, 24, 9, 30)),
    ("1:2:9:30", datetime.datetime(2027, 1, 2, 9, 30)),    # a month and day passed: next year's
    ("2027:3:1:0:0", datetime.datetime(2027, 3, 1, 0, 0)),
    ("27:3:1:0:0", datetime.datetime(2027, 3, 1, 0, 0)),
])
def test_lsf_s_time_words(text: str, expected: datetime.datetime) -> None:
    assert times.parse(text, NOW) == expected


@pytest.mark.parametrize("text", ["10", "25:00", "10:61", "2:30:10:00", "a:b", "1:2:3:4:5:6", "31:9:30"])
def test_bad_time_words_are_refused(text: str) -> None:
    with pytest.raises(times.TimeError):
        times.parse(text, datetime.datetime(2026, 11, 5, 23, 30))


def test_a_start_failure_code_is_the_host_s_before_the_format_that_knows_it() -> None:
    from controller.fsm import versions

    assert start_failures.KNOWN_FROM == {start_failures.PRE_EXEC_FAILED: versions.LSF_FORMAT,
                                         start_failures.INTERACTIVE_LOST: versions.INTERACTIVE_FORMAT}
    lost = start_failures.INTERACTIVE_LOST
    assert start_failures.kind(lost, versions.INTERACTIVE_FORMAT - 1) is start_failures.Kind.HOST
    assert start_failures.kind(lost, versions.INTERACTIVE_FORMAT) is start_failures.Kind.JOB
    state = State(entry_format=versions.INTERACTIVE_FORMAT)
    job_id = int(submit(state).job_ids[0])
    state.run(job_id, "a")
    ended = state.refuse(job_id, lost, "reaching its submitter at 10.0.0.1:4000: Connection refused")
    assert (ended.state, ended.exit_code, ended.exit_reason) == (api.EXIT, 1, "INTERACTIVE_LOST")


def test_a_page_of_jobs_is_bounded_in_bytes_as_well_as_in_jobs() -> None:
    """bsub copies environments: 500 jobs of 33 KB would pass the 16 MiB a gRPC message may be."""
    from controller.reads import MAX_PAGE_BYTES, JobListing

    state = State(entry_format=LSF_FORMAT)
    big = {"MODULES": "x" * 100_000}
    ids = [int(submit(state, env=big).job_ids[0]) for _ in range(60)]
    seen: list[int] = []
    token = ""
    while True:
        page = JobListing(api.ListJobsRequest(page_token=token)).read(state.tables)
        assert sum(j.ByteSize() for j in page.jobs) <= MAX_PAGE_BYTES + 110_000
        seen += [j.id for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == ids and len(seen) > len(page.jobs)  # every job, over several pages


def test_a_job_group_s_limit_bounds_its_jobs_and_its_subgroups_at_the_barrier() -> None:
    from controller.fsm import versions
    from controller.fsm.holdings import CommittedUsage
    from xce.rules import job_groups, limits

    state = State(entry_format=versions.JOB_GROUP_FORMAT)

    def group(path: str, limit: int = 0, create: bool = False, delete: bool = False) -> log.Result:
        request = api.PutJobGroupRequest(path=path, limit=limit, create=create, delete=delete)
        return state.apply(log.Entry(job_group=request, by=log.Principal(name="alice", role="user")))

    assert group("/sims", 1, create=True).code == log.OK
    assert group("/sims", 1, create=True).code == log.ALREADY_EXISTS
    assert group("/nope", 2).code == log.NOT_FOUND
    assert group("bad path", 1, create=True).code == log.INVALID_ARGUMENT
    first, second, other = (int(submit(state, job_group=g).job_ids[0])
                            for g in ("/sims/a", "/sims/b", "/other"))
    defs = CommittedUsage(state.tables).limit_defs()
    found = [limit for limit in defs if job_groups.is_group_limit(limit)]
    assert [(limit.name, list(limit.groups), limit.jobs, limit.owner) for limit in found] == \
        [("group::sims", ["/sims"], 1, "alice")]
    assert limits.consumer(found[0], state.job(first)) and not limits.consumer(found[0], state.job(other))
    assert state.run(first, "a").code == log.OK
    lease = state.apply(log.Entry(lease=log.LeaseEntry(scheduler_id="s1", duration_ms=10_000)))
    batch = api.DecisionBatch(lease_epoch=lease.lease_epoch, scheduler_id="s1")
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=second, attempt=0, host="b"))
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=other, attempt=0, host="b"))
    outcomes = state.apply(log.Entry(decisions=batch)).outcomes
    assert (outcomes[0].code, outcomes[0].reason) == (api.REJECT_INFEASIBLE, api.PEND_LIMIT_REACHED)
    assert not outcomes[1].code, outcomes[1]  # another group: taken
    # A push of the cluster file (a reconfig) keeps the group's limit; bgdel takes it away.
    state.apply(log.Entry(init=log.InitCluster(cluster_id="c", config_digest="d2", limits_digest="x",
                                               queues=[api.Queue(name="normal")])))
    assert [limit.name for limit in CommittedUsage(state.tables).limit_defs()] == ["group::sims"]
    assert group("/sims", delete=True).code == log.OK
    assert CommittedUsage(state.tables).limit_defs() == []


def test_the_leader_refuses_a_job_group_before_format_23() -> None:
    from controller.fsm import versions

    spec = api.JobSpec(command=["true"], job_group="/sims")
    with pytest.raises(ServiceError, match="needs entry format 23"):
        validation.check_lsf_options_known(spec, versions.JOB_GROUP_FORMAT - 1)
    validation.check_lsf_options_known(spec, versions.JOB_GROUP_FORMAT)
