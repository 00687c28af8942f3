"""A job's timeline (controller/fsm/timeline.py, cli/lsf/bhist.py): apply keeps each state change with
the entry's stamp, from entry format 24 only; a long life keeps its first and last events; bhist -l tells
them in LSF's words and adds up the time in each state from them."""

from __future__ import annotations

from controller.fsm import timeline
from controller.fsm.versions import TIMELINE_FORMAT
from tests.unit.test_unit_allocation import STAMP, State
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


def life(format_: int) -> api.Job:
    """A job dispatched at +10 s, stopped at +20 s, resumed at +25 s, ended at +40 s."""
    state = State()
    state.join("h1", 2)
    job_id = state.submit()
    batch = api.DecisionBatch(lease_epoch=state.epoch, scheduler_id="s")
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=job_id, attempt=0, host="h1"))
    assert state.apply(log.Entry(stamp_ms=STAMP + 10_000, decisions=batch), format_).outcomes[0].code == \
        api.DECISION_ACCEPTED
    for at, action in ((20_000, api.STOP), (25_000, api.RESUME)):
        request = api.ControlJobRequest(job_id=str(job_id), action=action, request_id=f"c{at}")
        assert state.apply(log.Entry(stamp_ms=STAMP + at, control=request), format_).code == log.OK
    report = log.HostReport(host="h1", generation=state.host("h1").generation, report=api.JobReport(
        job_id=job_id, attempt=0, finished=api.JobFinished(exit_code=0, time_ms=STAMP + 40_000)))
    assert state.apply(log.Entry(stamp_ms=STAMP + 40_000, report=report), format_).code == log.OK
    return state.job(job_id)


def test_each_state_change_is_kept_with_the_entry_s_stamp_from_format_24() -> None:
    job = life(TIMELINE_FORMAT)
    assert [(e.time_ms - STAMP, api.JobState.Name(e.state), e.host) for e in job.timeline] == [
        (10_000, "RUN", "h1"), (20_000, "USUSP", "h1"), (25_000, "RUN", "h1"), (40_000, "DONE", "h1")]
    assert not life(TIMELINE_FORMAT - 1).timeline


def test_a_long_life_keeps_its_first_and_last_events() -> None:
    job = api.Job(state=api.PEND)
    for i in range(100):
        before = api.Job(state=job.state)
        job.state = api.RUN if job.state == api.PEND else api.PEND
        timeline.note(job, before, i, TIMELINE_FORMAT)
    times = [e.time_ms for e in job.timeline]
    assert times == [*range(timeline.MAX_HEAD), *range(100 - timeline.MAX_TAIL, 100)]


def test_bhist_l_tells_the_events_and_adds_up_the_time_in_each_state() -> None:
    from cli.lsf import bhist

    job = life(TIMELINE_FORMAT)
    job.submit_time_ms = STAMP
    job.end_time_ms = STAMP + 40_000
    text = bhist._long(job, STAMP + 99_000)
    lines = [line.split(": ", 1)[1] for line in text.splitlines()[1:] if ": " in line][1:]
    assert lines[:4] == ["Dispatched 1 Task(s) on Host(s) <h1>;", "Suspended by the user or administrator;",
                         "Resumed;", "Done successfully. The CPU time used is 0.0 seconds;"]
    summary = text.splitlines()[-1].split()
    assert summary == ["10", "0", "25", "5", "0", "0", "40"]  # PEND PSUSP RUN USUSP SSUSP UNKWN TOTAL


def test_a_job_killed_while_it_ran_ends_with_the_reason_owner_from_format_24() -> None:
    from controller.fsm.versions import KILLED_FORMAT

    for format_, reason in ((KILLED_FORMAT, "OWNER"), (KILLED_FORMAT - 1, "")):
        state = State()
        state.join("h1", 1)
        job_id = state.submit()
        batch = api.DecisionBatch(lease_epoch=state.epoch, scheduler_id="s")
        batch.decisions.add(dispatch=api.DispatchDecision(job_id=job_id, attempt=0, host="h1"))
        assert state.apply(log.Entry(decisions=batch), format_).outcomes[0].code == api.DECISION_ACCEPTED
        kill = api.ControlJobRequest(job_id=str(job_id), action=api.KILL, request_id="k")
        assert state.apply(log.Entry(control=kill), format_).code == log.OK
        report = log.HostReport(host="h1", generation=state.host("h1").generation, report=api.JobReport(
            job_id=job_id, attempt=0, finished=api.JobFinished(term_signal=15)))
        assert state.apply(log.Entry(report=report), format_).code == log.OK
        assert (state.job(job_id).state, state.job(job_id).exit_reason) == (api.EXIT, reason)
