"""Job chunks (xce/rules/chunks.py, scheduler/core.py Chunking, controller/fsm/chunks.py): a pass
dispatches a chunk queue's job with the next jobs alike waiting in its chunk; apply attaches them
(PEND_CHUNK_WAIT) and, as each ends, starts the next on its slot with no decision in between; a job
killed while waiting is skipped, a lead requeued or a host closed lets the chunk go, and an older
entry format attaches nothing."""

from __future__ import annotations

from controller.fsm.versions import CHUNK_FORMAT
from scheduler import core
from scheduler.decisions import Dispatch, Pend
from tests.unit.test_unit_allocation import State
from xce.rules import chunks
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CHUNKY = api.Queue(name="normal", chunk_job_size=3)


class Chunked(State):
    def __init__(self, queue: api.Queue = CHUNKY) -> None:
        super().__init__((queue,))
        self.join("h1", 1)

    def apply(self, entry: log.Entry, format_: int = CHUNK_FORMAT) -> log.Result:
        return super().apply(entry, format_)

    def submit_as(self, user: str = "alice", **spec: object) -> int:
        job = api.JobSpec(command=["true"], slots=1, queue="normal", user=user, **spec)  # type: ignore[arg-type]
        result = self.apply(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[job])])))
        assert result.code == log.OK, result.message
        return int(result.job_ids[0])

    def dispatch_chunk(self, lead: int, chunk: list[int], format_: int = CHUNK_FORMAT) -> api.DecisionOutcome:
        batch = api.DecisionBatch(lease_epoch=self.epoch, scheduler_id="s")
        batch.decisions.add(dispatch=api.DispatchDecision(job_id=lead, attempt=0, host="h1", chunk=chunk))
        return self.apply(log.Entry(decisions=batch), format_).outcomes[0]

    def end(self, job_id: int) -> None:
        job = self.job(job_id)
        report = log.HostReport(host="h1", generation=self.host("h1").generation, report=api.JobReport(
            job_id=job_id, attempt=job.attempt, finished=api.JobFinished(exit_code=0)))
        assert self.apply(log.Entry(report=report)).code == log.OK

    def states(self, *ids: int) -> list[tuple[str, int]]:
        return [(api.JobState.Name(self.job(i).state), self.job(i).chunk_lead) for i in ids]


def test_a_pass_dispatches_a_chunk_of_jobs_alike() -> None:
    state = Chunked()
    alice = [state.submit_as() for _ in range(5)]
    bob = state.submit_as("bob")
    jobs = [state.job(i) for i in (*alice, bob)]
    decisions = core.run_pass(jobs, [CHUNKY], [state.host("h1")], core.CoreConfig(), {}).decisions
    dispatched = [d for d in decisions if isinstance(d, Dispatch)]
    assert dispatched == [Dispatch(alice[0], 0, "h1", chunk=(alice[1], alice[2]))]
    assert {d.job_id for d in decisions if isinstance(d, Pend)} == {alice[3], alice[4], bob}
    unchunked = core.run_pass(jobs, [api.Queue(name="normal")], [state.host("h1")], core.CoreConfig(),
                              {}).decisions
    assert [d.chunk for d in unchunked if isinstance(d, Dispatch)] == [()]


def test_apply_runs_a_chunk_s_jobs_one_after_another_on_its_slot() -> None:
    state = Chunked()
    lead, second, third = (state.submit_as() for _ in range(3))
    theirs = state.submit_as("bob")
    assert state.dispatch_chunk(lead, [second, theirs, third]).code == api.DECISION_ACCEPTED
    assert state.job(lead).chunk == [second, third]  # bob's is not alike: not taken
    assert state.states(second, third, theirs) == [("PEND", lead), ("PEND", lead), ("PEND", 0)]
    assert state.job(second).pending_code == api.PEND_CHUNK_WAIT
    state.end(lead)
    assert state.states(second, third) == [("RUN", 0), ("PEND", second)]
    assert state.job(second).host == "h1" and list(state.job(second).chunk) == [third]
    assert state.host("h1").slots_used == 1
    state.end(second)
    assert state.states(third) == [("RUN", 0)]
    state.end(third)
    assert state.host("h1").slots_used == 0


def test_a_job_killed_while_waiting_is_skipped() -> None:
    state = Chunked()
    lead, second, third = (state.submit_as() for _ in range(3))
    assert state.dispatch_chunk(lead, [second, third]).code == api.DECISION_ACCEPTED
    kill = api.ControlJobRequest(job_id=str(second), action=api.KILL, request_id="k")
    assert state.apply(log.Entry(control=kill)).code == log.OK
    state.end(lead)
    assert state.states(second, third) == [("EXIT", lead), ("RUN", 0)]


def test_a_requeued_lead_or_a_closed_host_lets_the_chunk_go() -> None:
    state = Chunked()
    lead, second = state.submit_as(), state.submit_as()
    assert state.dispatch_chunk(lead, [second]).code == api.DECISION_ACCEPTED
    requeue = api.ControlJobRequest(job_id=str(lead), action=api.REQUEUE, request_id="q")
    assert state.apply(log.Entry(control=requeue)).code == log.OK
    job = state.job(lead)
    if job.state != api.PEND:  # a requeue of a running job waits for its end: it ends here
        state.end(lead)
    assert state.states(second) == [("PEND", 0)] and state.job(second).pending_code != api.PEND_CHUNK_WAIT
    other = Chunked()
    lead, second = other.submit_as(), other.submit_as()
    assert other.dispatch_chunk(lead, [second]).code == api.DECISION_ACCEPTED
    close = api.ControlHostRequest(name="h1", close=True, request_id="c")
    assert other.apply(log.Entry(host_control=close)).code == log.OK
    other.end(lead)
    assert other.states(second) == [("PEND", 0)]


def test_an_older_format_or_a_job_unlike_a_chunk_attaches_nothing() -> None:
    state = Chunked()
    lead, second = state.submit_as(), state.submit_as()
    assert state.dispatch_chunk(lead, [second], format_=CHUNK_FORMAT - 1).code == api.DECISION_ACCEPTED
    assert state.states(second) == [("PEND", 0)] and not state.job(lead).chunk
    queue = api.Queue(name="normal", chunk_job_size=3, chunk_job_duration_s=60)
    assert not chunks.chunkable(api.Job(spec=api.JobSpec(slots=1, run_limit_s=600)), queue)
    assert chunks.chunkable(api.Job(spec=api.JobSpec(slots=1, run_limit_s=60)), queue)
    assert not chunks.chunkable(api.Job(spec=api.JobSpec(slots=2)), CHUNKY)
    assert not chunks.chunkable(api.Job(spec=api.JobSpec(slots=1, exclusive=True)), CHUNKY)


def test_an_array_s_elements_in_a_chunk_end_the_array() -> None:
    state = Chunked()
    spec = api.JobSpec(command=["true"], slots=1, queue="normal", user="alice",
                       array=api.ArraySpec(ranges=[api.IndexRange(start=1, end=3)]))
    result = state.apply(log.Entry(submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="a", jobs=[spec])])))
    array = int(result.job_ids[0])
    made = (state.job(i) for i in range(array + 1, array + 4))
    elements = sorted(j.id for j in made if j.array_id == array)
    assert len(elements) == 3
    assert state.dispatch_chunk(elements[0], elements[1:]).code == api.DECISION_ACCEPTED
    for element in elements:
        state.end(element)
    record = state.job(array)
    assert (api.JobState.Name(record.state), list(record.array.counts)[api.RUN]) == ("DONE", 0), record.array


def test_a_job_out_of_its_chunk_never_stays_in_wait() -> None:
    state = Chunked()
    lead, follower = state.submit_as(), state.submit_as()
    assert state.dispatch_chunk(lead, [follower]).code == api.DECISION_ACCEPTED
    refused = state.dispatch(follower, ("h1", 1), format_=CHUNK_FORMAT)  # a pass on a stale view
    assert refused.code == api.REJECT_INFEASIBLE and "waits in the chunk" in refused.message
    kill = api.ControlJobRequest(job_id=str(follower), action=api.KILL, request_id="k")
    assert state.apply(log.Entry(control=kill)).code == log.OK
    state.end(lead)
    again = api.ControlJobRequest(job_id=str(follower), action=api.REQUEUE, request_id="q")
    assert state.apply(log.Entry(control=again)).code == log.OK
    assert state.states(follower) == [("PEND", 0)]


def test_the_next_job_starts_only_if_a_dispatch_would_take_it() -> None:
    state = Chunked()
    first = state.submit_as()
    lead = state.submit_as()
    waiter = state.submit_as(depend=f"done({first})")
    assert accepted_by(state, first)
    state.end(first)  # done: waiter's condition holds
    assert state.job(waiter).depend_state == api.DEPEND_SATISFIED
    assert state.dispatch_chunk(lead, [waiter]).code == api.DECISION_ACCEPTED
    assert state.states(waiter) == [("PEND", lead)]
    requeue = api.ControlJobRequest(job_id=str(first), action=api.REQUEUE, request_id="rq")
    assert state.apply(log.Entry(control=requeue)).code == log.OK  # done(first) holds no more
    state.end(lead)
    assert state.states(waiter) == [("PEND", 0)], state.job(waiter)  # not started: out of the chunk


def accepted_by(state: Chunked, job_id: int) -> bool:
    return state.dispatch_chunk(job_id, []).code == api.DECISION_ACCEPTED
