"""Preemption at the commit barrier (controller/fsm/preempt.py): a PREEMPT re-checked against
committed state, victims keeping their slots until their worker says they stopped, a preemptor placed
only then, a resume taking back exactly what was given, and a victim ending while suspended giving back
only what it still holds. Pure: in-memory tables."""

from __future__ import annotations

from controller import fsm
from tests.unit.test_unit_allocation import State, accepted
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

FORMAT = 12
QUEUES = (api.Queue(name="high", priority=50, preemptive=["low"]),
          api.Queue(name="low", priority=30, preemptable=True, preempt_min_run_s=10),
          api.Queue(name="normal", priority=30))


class Cluster(State):
    def __init__(self) -> None:
        super().__init__(QUEUES)
        self.join("h1", 4, memory_mb=8000)

    def apply(self, entry: log.Entry, format_: int = FORMAT) -> log.Result:
        return super().apply(entry, format_)

    def dispatch(self, job_id: int, *parts: tuple[str, int], format_: int = FORMAT) -> api.DecisionOutcome:
        return super().dispatch(job_id, *parts, format_=format_)

    def control(self, job_id: int, action: api.ControlAction) -> log.Result:
        return self.apply(log.Entry(control=api.ControlJobRequest(job_id=str(job_id), action=action,
                                                                  request_id=f"c{self.index}")))

    def run(self, queue: str, slots: int = 1, rerunnable: bool = False) -> int:
        spec = api.JobSpec(command=["x"], queue=queue, slots=slots, rerunnable=rerunnable)
        result = self.apply(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[spec])])))
        job_id = int(result.job_ids[0])
        if queue != "high":
            assert accepted(self.dispatch(job_id, ("h1", slots)))
            self.report(job_id, started=api.JobStarted(pid=100 + job_id, time_ms=1))
        return job_id

    def report(self, job_id: int, **body: object) -> log.Result:
        report = log.HostReport(host="h1", generation=self.host("h1").generation, report=api.JobReport(
            job_id=job_id, attempt=self.job(job_id).attempt, **body))
        return self.apply(log.Entry(report=report))

    def preempt(self, job_id: int, *victims: int, format_: int = FORMAT) -> api.DecisionOutcome:
        decision = api.PreemptDecision(job_id=job_id, attempt=self.job(job_id).attempt, victims=[
            api.Victim(job_id=v, attempt=self.job(v).attempt) for v in victims])
        batch = api.DecisionBatch(lease_epoch=self.epoch, scheduler_id="s")
        batch.decisions.add(preempt=decision)
        return self.apply(log.Entry(decisions=batch), format_).outcomes[0]


def test_victims_hold_their_slots_until_they_have_stopped_then_resume_on_them() -> None:
    cluster = Cluster()
    victims = [cluster.run("low") for _ in range(4)]
    urgent = cluster.run("high", slots=2)
    assert accepted(cluster.preempt(urgent, victims[0], victims[1]))
    assert [cluster.job(v).state for v in victims] == [api.SSUSP, api.SSUSP, api.RUN, api.RUN]
    assert cluster.job(urgent).pending_code == api.PEND_PREEMPTION_PENDING
    assert list(cluster.job(urgent).preempting) == victims[:2]
    assert cluster.host("h1").slots_used == 4
    refused = cluster.dispatch(urgent, ("h1", 2))  # not before the victims have stopped
    assert refused.code == api.REJECT_INFEASIBLE
    assert cluster.report(victims[0], suspended=api.JobSuspended(time_ms=5)).code == log.OK
    assert cluster.host("h1").slots_used == 3
    assert cluster.report(victims[0], suspended=api.JobSuspended(time_ms=6)).code == log.OK  # a repeat
    assert cluster.host("h1").slots_used == 3
    assert cluster.report(victims[1], suspended=api.JobSuspended(time_ms=5)).code == log.OK
    assert accepted(cluster.dispatch(urgent, ("h1", 2)))
    assert cluster.host("h1").slots_used == 4
    refused = cluster.dispatch(victims[0], ("h1", 1))  # no room to resume while the preemptor runs
    assert (refused.code, refused.reason) == (api.REJECT_INFEASIBLE, api.PEND_NO_FREE_SLOTS)
    cluster.finish(urgent, "h1")
    assert accepted(cluster.dispatch(victims[0], ("h1", 1)))
    resumed = cluster.job(victims[0])
    assert (resumed.state, resumed.preempted_by, list(resumed.released)) == (api.RUN, 0, [])
    assert cluster.host("h1").slots_used == 3
    # The other victim ends while suspended: it gives back only what it still holds (nothing).
    assert cluster.control(victims[1], api.KILL).code == log.OK
    cluster.report(victims[1], finished=api.JobFinished(exit_code=137, term_signal=9))
    assert cluster.job(victims[1]).state == api.EXIT and cluster.host("h1").slots_used == 3
    for job_id in (victims[0], victims[2], victims[3]):
        cluster.finish(job_id, "h1")
    assert cluster.host("h1").slots_used == 0


def test_the_barrier_rechecks_each_victim() -> None:
    cluster = Cluster()
    peer = cluster.run("normal")  # a queue that is not preemptable
    low = cluster.run("low")
    urgent = cluster.run("high")
    refused = cluster.preempt(urgent, peer)
    assert refused.code == api.REJECT_INFEASIBLE and "may not preempt" in refused.message
    young = cluster.run("low")
    cluster.report(young, started=api.JobStarted(pid=9, time_ms=fsm.read_meta(cluster.tables).applied_index
                                                 + 1_700_000_000_000))  # started just now
    assert cluster.preempt(urgent, young).code == api.REJECT_INFEASIBLE  # inside its minimum run time
    assert cluster.preempt(urgent, low, low).code == api.REJECT_MALFORMED
    assert accepted(cluster.preempt(urgent, low))
    assert cluster.preempt(urgent, low).code == api.REJECT_INFEASIBLE  # it is being preempted already


def test_a_requeue_victim_is_killed_and_runs_again_at_the_next_attempt() -> None:
    cluster = Cluster()
    queue = api.Queue(name="low", priority=30, preemptable=True, preempt_action=api.PREEMPT_REQUEUE)
    assert cluster.apply(log.Entry(put_queue=log.PutQueueEntry(queue=queue))).code == log.OK
    plain = cluster.run("low", slots=2)
    again = cluster.run("low", slots=2, rerunnable=True)
    urgent = cluster.run("high", slots=2)
    assert cluster.preempt(urgent, plain).code == api.REJECT_INFEASIBLE  # not rerunnable
    assert accepted(cluster.preempt(urgent, again))
    victim = cluster.job(again)
    assert victim.kill_requested and victim.requeue_requested and victim.state == api.RUN
    cluster.report(again, finished=api.JobFinished(exit_code=143, term_signal=15))
    victim = cluster.job(again)
    assert (victim.state, victim.attempt, victim.preemptions) == (api.PEND, 1, 1)
    assert accepted(cluster.dispatch(urgent, ("h1", 2)))


def test_a_preemptor_preempts_again_only_once_its_victims_gave_back_their_slots() -> None:
    """Two passes on one stale view chose different victims for one job: the second is refused while
    the first victim still holds its slot (entry format 13; format 12 entries apply as they did)."""
    cluster = Cluster()
    first, second, third = (cluster.run("low") for _ in range(3))
    urgent = cluster.run("high")
    assert accepted(cluster.preempt(urgent, first, format_=13))
    refused = cluster.preempt(urgent, second, format_=13)
    assert (refused.code, refused.reason) == (api.REJECT_INFEASIBLE, api.PEND_PREEMPTION_PENDING)
    assert f"waits for job {first}" in refused.message and cluster.job(second).state == api.RUN
    assert accepted(cluster.preempt(urgent, second, format_=12))  # as committed before format 13
    cluster.report(first, suspended=api.JobSuspended(time_ms=5))
    cluster.report(second, suspended=api.JobSuspended(time_ms=5))
    assert accepted(cluster.preempt(urgent, third, format_=13))  # all given back: it may again


def test_a_suspended_victim_being_killed_does_not_resume() -> None:
    cluster = Cluster()
    victim = cluster.run("low")
    for _ in range(3):
        cluster.run("low")
    urgent = cluster.run("high")
    assert accepted(cluster.preempt(urgent, victim, format_=13))
    cluster.report(victim, suspended=api.JobSuspended(time_ms=5))
    assert cluster.control(urgent, api.KILL).code == log.OK  # the preemptor goes: the slot is free
    assert cluster.control(victim, api.KILL).code == log.OK
    refused = cluster.dispatch(victim, ("h1", 1), format_=13)
    assert refused.code == api.REJECT_NOT_PENDING and "being killed" in refused.message
    assert cluster.host("h1").slots_used == 3 and cluster.job(victim).state == api.SSUSP


def test_fair_share_charges_a_requeued_attempt_and_not_a_victim_s_time_suspended() -> None:
    """Entry format 13: an attempt requeued is charged until the requeue; the time a preempted job
    spent suspended with its slots given back is not charged to it."""
    t0 = 1_800_000_000_000

    class Fair(Cluster):
        def __init__(self) -> None:
            self.now = t0
            State.__init__(self, (api.Queue(name="high", priority=50, preemptive=["low"]),
                                  api.Queue(name="low", priority=30, preemptable=True,
                                            fairshare=api.FairShare(half_life_s=10**8))))
            self.join("h1", 4, memory_mb=8000)

        def apply(self, entry: log.Entry, format_: int = 13) -> log.Result:
            entry.stamp_ms = self.now  # every entry at the test's clock
            return super().apply(entry, 13)

        def worker(self, job_id: int, **body: object) -> None:
            report = log.HostReport(host="h1", generation=self.host("h1").generation, report=api.JobReport(
                job_id=job_id, attempt=self.job(job_id).attempt, **body))
            assert self.apply(log.Entry(report=report)).code == log.OK

        def submit_to(self, queue: str, slots: int) -> int:
            result = self.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
                request_id=f"r{self.index}", jobs=[api.JobSpec(command=["x"], queue=queue, slots=slots,
                                                               rerunnable=True)])])))
            assert result.code == log.OK, result.message
            return int(result.job_ids[0])

    cluster = Fair()
    victim = cluster.submit_to("low", 1)
    assert accepted(cluster.dispatch(victim, ("h1", 1)))
    cluster.worker(victim, started=api.JobStarted(pid=9, time_ms=t0))
    cluster.now = t0 + 1000
    urgent = cluster.submit_to("high", 4)
    assert accepted(cluster.preempt(urgent, victim))
    cluster.now = t0 + 2000
    cluster.worker(victim, suspended=api.JobSuspended(time_ms=cluster.now))  # its slot given back at 2 s
    cluster.now = t0 + 9000
    assert cluster.control(urgent, api.KILL).code == log.OK
    assert accepted(cluster.dispatch(victim, ("h1", 1)))  # resumed at 9 s
    assert cluster.job(victim).suspended_ms == 7000
    cluster.now = t0 + 20_000
    assert cluster.control(victim, api.REQUEUE).code == log.OK
    cluster.now = t0 + 21_000
    cluster.worker(victim, finished=api.JobFinished(exit_code=0, term_signal=15, time_ms=cluster.now))
    requeued = cluster.job(victim)
    assert (requeued.state, requeued.attempt, requeued.suspended_ms) == (api.PEND, 1, 0)
    raw = cluster.tables.get("share_usage", b"low\0default\0")
    assert raw is not None and api.ShareUsage.FromString(raw).slot_ms == 21_000 - 7000
