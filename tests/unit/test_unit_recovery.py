"""After a rollback (controller/fsm/recovery.py), pure: a restored state dispatches nothing until its
hosts have joined again and the fence's wait has passed; an instance a worker runs that the state does
not hold keeps its job from running again until it ended; apply reads only the entries' stamps."""

from __future__ import annotations

from controller import fsm
from controller.fsm import recovery
from controller.fsm.holdings import CommittedUsage
from controller.fsm.versions import RECOVERY_FORMAT
from controller.host_liveness import Liveness
from controller.tables import MemoryTables
from controller.watchdog import Watchdog
from xce.rules import feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STAMP = 1_800_000_000_000
MEMBERS = [api.Member(id=1, grpc_address="a:1", raft_address="a:2")]
CODE = log.Capabilities(kinds=sorted(fsm.HANDLERS), format=fsm.ENTRY_FORMAT)


class State:
    def __init__(self) -> None:
        self.tables = MemoryTables()
        self.index = 0

    def apply(self, entry: log.Entry, stamp_ms: int = STAMP) -> list[log.Result]:
        self.index += 1
        entry.stamp_ms, entry.format = stamp_ms, RECOVERY_FORMAT
        results = fsm.apply(self.tables, self.index, entry.SerializeToString())
        assert results is not None
        return results

    def job(self, job_id: int) -> api.Job:
        job = fsm.read_job(self.tables, job_id)
        assert job is not None
        return job

    def join(self, host: str, *running: tuple[int, int], stamp_ms: int = STAMP) -> None:
        keys = [api.InstanceKey(job_id=j, attempt=a) for j, a in running]
        spec = api.HostSpec(name=host, slots=4, running=keys)
        assert self.apply(log.Entry(joins=log.HostJoins(joins=[spec])), stamp_ms)[0].code == log.OK

    def report_end(self, host: str, job_id: int, attempt: int) -> log.Result:
        generation = fsm.read_host(self.tables, host).generation  # type: ignore[union-attr]
        report = log.HostReport(host=host, generation=generation, report=api.JobReport(
            job_id=job_id, attempt=attempt, finished=api.JobFinished(term_signal=15)))
        return self.apply(log.Entry(reports=log.HostReports(reports=[report])))[0]

    def refusal(self, job_id: int, host: str = "h1") -> feasibility.Reason | None:
        job = self.job(job_id)
        return feasibility.check(job, feasibility.Allocation(host, 1), CommittedUsage(self.tables))

    def forced_refusal(self, job_id: int, host: str = "h1") -> feasibility.Reason | None:
        job = self.job(job_id)
        return feasibility.check(job, feasibility.Allocation(host, 1), CommittedUsage(self.tables),
                                 forced=True)


def _cluster() -> State:
    state = State()
    init = log.InitCluster(cluster_id="c", config_digest="d", queues=[api.Queue(name="normal")])
    state.apply(log.Entry(init=init))
    state.join("h1")
    state.join("h2")
    state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="r", jobs=[api.JobSpec(command=["true"]) for _ in range(3)])])))
    state.apply(log.Entry(dispatch=log.Dispatch(job_id=3, host="h2", attempt=0)))
    return state


def test_a_restored_state_waits_for_every_known_host_and_the_fence() -> None:
    state = _cluster()
    awaited = recovery.prepare(state.tables, "c2", MEMBERS, "inc", wait_ms=3000, why="test",
                               capabilities=CODE, derived=fsm.DERIVED)
    assert awaited == 3  # h1, h2 and the wait
    meta = fsm.read_meta(state.tables)
    assert meta.cluster_id == "c2" and meta.incarnation == "inc" and list(meta.membership) == MEMBERS
    assert sorted(meta.recovery.hosts) == ["h1", "h2"] and not meta.lease_holder
    assert state.job(3).state == api.UNKWN and state.job(3).state_before_unknown == api.RUN
    # Nothing is dispatched meanwhile, not even by an operator's forced run.
    for check in (state.refusal, state.forced_refusal):
        reason = check(1)
        assert reason is not None and reason.code == api.PEND_RECOVERING
    state.join("h1", stamp_ms=STAMP + 1000)  # the first entry: the wait runs from here, to STAMP + 4000
    state.join("h2", stamp_ms=STAMP + 2000)
    assert fsm.read_counter(state.tables, recovery.RECOVERY_COUNTER) == 1
    assert state.refusal(1) == feasibility.REASON_RECOVERING
    state.apply(log.Entry(lease=log.LeaseEntry(scheduler_id="s", duration_ms=1000)), STAMP + 3999)
    assert state.refusal(1) == feasibility.REASON_RECOVERING
    state.apply(log.Entry(lease=log.LeaseEntry(scheduler_id="s", duration_ms=1000)), STAMP + 4000)
    assert fsm.read_counter(state.tables, recovery.RECOVERY_COUNTER) == 0
    assert state.refusal(1) is None


def test_a_host_given_up_is_no_longer_awaited() -> None:
    state = _cluster()
    recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=0, why="test", capabilities=CODE,
                     derived=fsm.DERIVED)
    state.join("h1")
    generation = fsm.read_host(state.tables, "h2").generation  # type: ignore[union-attr]
    down = log.SetHostStatus(name="h2", generation=generation, status=api.HOST_UNAVAIL)
    state.apply(log.Entry(host_status=down))
    assert state.refusal(1) == feasibility.REASON_RECOVERING
    state.apply(log.Entry(resolve_host=down))
    assert fsm.read_counter(state.tables, recovery.RECOVERY_COUNTER) == 0 and state.refusal(1) is None
    assert state.job(3).state == api.EXIT  # not rerunnable: its instance was lost with the host


def test_an_instance_the_state_does_not_hold_keeps_its_job_pending_until_it_ended() -> None:
    state = _cluster()
    recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=0, why="test", capabilities=CODE,
                     derived=fsm.DERIVED)
    state.join("h1", (1, 0))  # job 1 ran on h1 after the backup
    state.join("h2", (3, 0))
    job = state.job(1)
    assert list(job.stray_hosts) == ["h1"] and job.attempt == 1  # attempt 0's number is taken
    assert state.job(3).state == api.UNKWN and not state.job(3).stray_hosts  # h2's own: not a stray
    for check in (state.refusal, state.forced_refusal):
        reason = check(1, "h2")
        assert reason is not None and reason.code == api.PEND_STRAY_INSTANCE and "h1" in reason.words
    assert state.refusal(2) is None  # the recovery wait is over: other jobs run
    assert state.report_end("h1", 1, 1).code == log.FAILED_PRECONDITION  # another attempt: still a stray
    assert state.job(1).stray_hosts == ["h1"]
    state.report_end("h1", 1, 0)  # the session killed it; its end is reported
    assert not state.job(1).stray_hosts and state.refusal(1, "h2") is None
    assert not list(state.tables.scan("strays"))


def test_a_stray_that_ended_while_its_worker_was_away_is_cleared_when_it_joins_again() -> None:
    state = _cluster()
    recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=60_000, why="test", capabilities=CODE,
                     derived=fsm.DERIVED)
    state.join("h1", (2, 0))
    assert state.job(2).stray_hosts == ["h1"]
    state.join("h1")
    assert not state.job(2).stray_hosts and not list(state.tables.scan("strays"))
    state.join("h1", (2, 1))
    generation = fsm.read_host(state.tables, "h1").generation  # type: ignore[union-attr]
    lost = log.SetHostStatus(name="h1", generation=generation, status=api.HOST_UNAVAIL)
    state.apply(log.Entry(host_status=lost))
    state.apply(log.Entry(resolve_host=lost))
    assert not state.job(2).stray_hosts and state.job(2).attempt == 2


def test_outside_a_recovery_a_join_holds_no_job_back() -> None:
    """A worker naming pending jobs in its join cannot keep them from running (a worker's word)."""
    state = _cluster()
    state.join("h1", (1, 0), (2, 5))
    assert not state.job(1).stray_hosts and state.job(1).attempt == 0 and state.refusal(1) is None


def test_a_join_naming_absurd_attempts_changes_nothing() -> None:
    state = _cluster()
    recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=60_000, why="test", capabilities=CODE,
                     derived=fsm.DERIVED)
    state.join("h1", (1, 2**31 - 1), (2, -1), (99, 0))  # would overflow attempt; negative; no such job
    assert state.job(1).attempt == 0 and not state.job(1).stray_hosts and not state.job(2).stray_hosts


def test_a_stray_of_a_job_the_state_holds_elsewhere_reserves_its_attempt() -> None:
    state = _cluster()  # job 3 runs on h2 at attempt 0
    recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=60_000, why="test", capabilities=CODE,
                     derived=fsm.DERIVED)
    state.join("h1", (3, 1))  # after the backup, it was requeued and ran on h1 as attempt 1
    state.join("h2")  # h2 has no record of attempt 0: lost, requeued only if rerunnable
    job = state.job(3)
    generation = fsm.read_host(state.tables, "h2").generation  # type: ignore[union-attr]
    report = log.HostReport(host="h2", generation=generation, report=api.JobReport(
        job_id=3, attempt=0, dispatch_failed=api.DispatchFailed(code=-5, reason="no record")))
    state.apply(log.Entry(reports=log.HostReports(reports=[report])))
    job = state.job(3)
    assert job.state == api.EXIT and job.exit_status_unknown  # not rerunnable: never run again
    assert job.stray_hosts == ["h1"] and job.next_attempt == 2


def test_prepared_hosts_are_timed_afresh_and_the_code_is_announced() -> None:
    state = _cluster()
    generation = fsm.read_host(state.tables, "h2").generation  # type: ignore[union-attr]
    state.apply(log.Entry(host_status=log.SetHostStatus(name="h2", generation=generation,
                                                        status=api.HOST_UNAVAIL)))
    recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=0, why="test", capabilities=CODE,
                     derived=fsm.DERIVED)
    assert fsm.read_host(state.tables, "h2").status == api.HOST_OK  # type: ignore[union-attr]
    meta = fsm.read_meta(state.tables)
    assert meta.members[1].format == fsm.ENTRY_FORMAT and meta.lease_epoch >= recovery.LEASE_EPOCH_JUMP


def test_replicas_that_apply_the_same_entries_agree() -> None:
    a, b = _cluster(), _cluster()
    for state in (a, b):
        recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=500, why="test", capabilities=CODE,
                         derived=fsm.DERIVED)
        state.join("h1", (1, 0), stamp_ms=STAMP + 10)
        state.join("h2", stamp_ms=STAMP + 900)
        state.report_end("h1", 1, 0)
    assert b"".join(fsm.canonical_dump(a.tables)) == b"".join(fsm.canonical_dump(b.tables))


def test_the_watchdog_gives_up_an_awaited_host_with_no_jobs_there() -> None:
    """Without it, a host of the backup that never comes back would hold every dispatch back forever."""
    state = _cluster()
    recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=0, why="test", capabilities=CODE,
                     derived=fsm.DERIVED)
    state.join("h2")  # h1 never comes back; nothing of the state runs there
    generation = fsm.read_host(state.tables, "h1").generation  # type: ignore[union-attr]
    state.apply(log.Entry(host_status=log.SetHostStatus(name="h1", generation=generation,
                                                        status=api.HOST_UNAVAIL)), STAMP)
    dog = Watchdog(Liveness(0.0, 1.5), 0.1, unknown_timeout_ms=10_000)
    assert not [c for c in dog.proposals(state.tables, 1.0, batched=True) if c.what == "lost"]
    early = dog.proposals(state.tables, 10.0, batched=True)  # seen UNAVAIL 9 s: not yet
    assert not [c for c in early if c.what == "lost"]
    [lost] = [c for c in dog.proposals(state.tables, 11.0, batched=True) if c.what == "lost"]
    assert lost.hosts == (("h1", generation),)
    state.apply(lost.entry)
    assert fsm.read_counter(state.tables, recovery.RECOVERY_COUNTER) == 0 and state.refusal(1, "h2") is None


def test_ResolveHost_waits_unknown_timeout_by_the_leaders_monotonic_clock_whatever_the_stamps_say() -> None:
    """A host marked UNAVAIL by a leader whose wall clock was 10 minutes behind this one's (or this
    leader's clock jumped 10 minutes ahead since): the committed status time says "unavailable for
    10 minutes", but the worker may have been cut off for seconds and not fenced yet. Giving it up
    then would requeue its rerunnable jobs while they still run there (a double run)."""
    state = _cluster()
    recovery.prepare(state.tables, "c", MEMBERS, "inc", wait_ms=0, why="test", capabilities=CODE,
                     derived=fsm.DERIVED)
    state.join("h2")
    generation = fsm.read_host(state.tables, "h1").generation  # type: ignore[union-attr]
    state.apply(log.Entry(host_status=log.SetHostStatus(name="h1", generation=generation,
                                                        status=api.HOST_UNAVAIL)), STAMP - 600_000)
    dog = Watchdog(Liveness(100.0, 1.5), 0.1, unknown_timeout_ms=10_000)
    for now_s in (100.0, 105.0, 109.9):
        assert not [c for c in dog.proposals(state.tables, now_s, batched=True) if c.what == "lost"]
    [lost] = [c for c in dog.proposals(state.tables, 110.0, batched=True) if c.what == "lost"]
    assert lost.hosts == (("h1", generation),)
