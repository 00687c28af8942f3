"""Exclusive jobs (-x): placed only on idle hosts, and nothing else starts there while they run;
the pass and the commit barrier agree. Pure."""

from __future__ import annotations

from scheduler import core
from scheduler.decisions import Dispatch, Pend
from tests.unit.test_unit_allocation import State, accepted
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

FORMAT = 12


class Cluster(State):
    def apply(self, entry: log.Entry, format_: int = FORMAT) -> log.Result:
        return super().apply(entry, format_)

    def dispatch(self, job_id: int, *parts: tuple[str, int], format_: int = FORMAT) -> api.DecisionOutcome:
        return super().dispatch(job_id, *parts, format_=format_)

    def submit_x(self, slots: int = 1, exclusive: bool = True) -> int:
        spec = api.JobSpec(command=["x"], slots=slots, exclusive=exclusive)
        result = self.apply(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[spec])])))
        assert result.code == log.OK, result.message
        return int(result.job_ids[0])


def test_the_barrier_gives_an_exclusive_job_idle_hosts_and_nothing_else_beside_it() -> None:
    cluster = Cluster()
    cluster.join("h1", 8)
    cluster.join("h2", 8)
    other = cluster.submit_x(exclusive=False)
    assert accepted(cluster.dispatch(other, ("h1", 1)))
    alone = cluster.submit_x(slots=2)
    refused = cluster.dispatch(alone, ("h1", 2))  # h1 runs another job
    assert refused.code == api.REJECT_INFEASIBLE and "exclusive job (-x) takes idle hosts" in refused.message
    assert accepted(cluster.dispatch(alone, ("h2", 2)))
    assert cluster.host("h2").exclusive_job == alone
    late = cluster.submit_x(exclusive=False)
    refused = cluster.dispatch(late, ("h2", 1))  # 6 slots free, but an exclusive job runs there
    assert refused.code == api.REJECT_INFEASIBLE and refused.reason == api.PEND_NO_FREE_SLOTS
    cluster.finish(alone, "h2")
    assert cluster.host("h2").exclusive_job == 0
    assert accepted(cluster.dispatch(late, ("h2", 1)))


def test_the_pass_places_exclusive_jobs_on_idle_hosts_and_keeps_them() -> None:
    hosts = [api.Host(spec=api.HostSpec(name="busy", slots=8), slots_used=1, status=api.HOST_OK),
             api.Host(spec=api.HostSpec(name="idle", slots=8), status=api.HOST_OK)]
    jobs = [api.Job(id=1, state=api.PEND, submit_time_ms=1, spec=api.JobSpec(queue="normal", slots=2,
                                                                              exclusive=True)),
            api.Job(id=2, state=api.PEND, submit_time_ms=2, spec=api.JobSpec(queue="normal", slots=1)),
            api.Job(id=3, state=api.PEND, submit_time_ms=3, spec=api.JobSpec(queue="normal", slots=1,
                                                                              exclusive=True))]
    decisions = core.schedule(jobs, [api.Queue(name="normal")], hosts, 0, core.CoreConfig())
    placed = {d.job_id: d.host for d in decisions if isinstance(d, Dispatch)}
    assert placed == {1: "idle", 2: "busy"}  # 2 not beside 1; 3 finds no idle host
    reasons = {d.job_id: d.reason for d in decisions if isinstance(d, Pend)}
    assert "run other jobs (the job is exclusive, -x)" in reasons[3], reasons[3]


def test_the_leader_refuses_x_until_every_replica_reads_it() -> None:
    import pytest

    from controller.fsm.validation import check_min_slots_known
    from xce.errors import ServiceError

    with pytest.raises(ServiceError, match="-x needs every replica at entry format 12"):
        check_min_slots_known(api.JobSpec(command=["x"], exclusive=True), 11)


def test_only_a_queue_that_takes_exclusive_jobs_takes_x_from_format_13() -> None:
    """LSF's EXCLUSIVE = Y: else any user could keep whole hosts to itself."""
    cluster = Cluster()
    spec = api.JobSpec(command=["x"], exclusive=True)
    refused = cluster.apply(log.Entry(submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="x13", jobs=[spec])])), 13)
    assert refused.code == log.INVALID_ARGUMENT
    assert refused.message == "-x: queue normal does not take exclusive jobs (its `exclusive = true` would)"
    taking = State((api.Queue(name="normal", exclusive=True),))
    taken = taking.apply(log.Entry(submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="x13", jobs=[spec])])), 13)
    assert taken.code == log.OK, taken.message
