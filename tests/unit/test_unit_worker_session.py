"""The leader's worker session (controller/worker_session.py) over the real
state machine in memory: what it sends a worker after which committed change."""

from __future__ import annotations

from memory_state import MemoryState

from controller import fsm
from controller.worker_session import WorkerSession, hosts_of, route
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

S = 1_700_000_000_000


class _Replica:
    def __init__(self) -> None:
        self.store = MemoryState()


def _cluster() -> tuple[_Replica, int]:
    replica = _Replica()
    apply = replica.store.apply
    apply(log.Entry(stamp_ms=S, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                     queues=[api.Queue(name="normal")])))
    apply(log.Entry(stamp_ms=S, join_host=api.HostSpec(name="n1", slots=4)))
    job = apply(log.Entry(stamp_ms=S, submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="x", jobs=[api.JobSpec(command=["true"])])]))).job_ids[0]
    return replica, job


def _sent(session: WorkerSession) -> list[tuple[str, int, int, str]]:
    out = []
    for message in session.take():
        if message.HasField("run"):
            job = message.run.job
            out.append(("run", job.id, job.attempt, api.JobState.Name(job.state)))
        elif message.HasField("signal"):
            sig = message.signal
            out.append(("signal", sig.job_id, sig.attempt, api.SignalKind.Name(sig.kind)))
    return out


def _control(job: int, action: api.ControlAction) -> log.Entry:
    return log.Entry(stamp_ms=S, control=api.ControlJobRequest(job_id=str(job), action=action))


def _running() -> tuple[_Replica, int, WorkerSession]:
    """A job dispatched to n1, and n1's session, which has sent its RunJob."""
    replica, job = _cluster()
    replica.store.apply(log.Entry(stamp_ms=S, dispatch=log.Dispatch(job_id=job, host="n1", attempt=0)))
    session = WorkerSession(replica.store, "n1", 1)
    session.step(0.0)
    assert _sent(session) == [("run", job, 0, "RUN")]
    return replica, job, session


def _route(replica: _Replica, session: WorkerSession, first: int) -> None:
    """What the leader core routes to n1's session for entries first..last, as it applies them."""
    for index in range(first, replica.store.index + 1):
        raw = replica.store.tables.get("events", fsm.revision_key(index))
        assert raw is not None
        routed = route(log.Event.FromString(raw))
        session.changed(index, routed.jobs.get("n1", []), "n1" in routed.hosts)


def test_a_stopped_job_stays_stopped_when_its_host_comes_back_from_unavail() -> None:
    replica, job = _cluster()
    apply = replica.store.apply
    apply(log.Entry(stamp_ms=S, dispatch=log.Dispatch(job_id=job, host="n1", attempt=0)))
    apply(_control(job, api.STOP))
    apply(log.Entry(stamp_ms=S, host_status=log.SetHostStatus(name="n1", generation=1,
                                                              status=api.HOST_UNAVAIL)))
    apply(log.Entry(stamp_ms=S, join_host=api.HostSpec(name="n1", slots=4)))  # generation 2
    session = WorkerSession(replica.store, "n1", 2)
    session.step(0.0)
    # RunJob keeps UNKWN (the worker must not start one); no CONT may follow it.
    assert _sent(session) == [("run", job, 0, "UNKWN")]
    assert session.stopped[(job, 0)] is True


def test_changes_older_than_a_full_derivation_are_not_acted_on() -> None:
    replica, job, session = _running()
    apply = replica.store.apply
    first = replica.store.index + 1
    apply(_control(job, api.REQUEUE))
    apply(log.Entry(stamp_ms=S + 1, report=log.HostReport(host="n1", generation=1, report=api.JobReport(
        job_id=job, attempt=0, finished=api.JobFinished(term_signal=15)))))
    session._forget((job, 0))  # what the relay does once that report is committed
    apply(log.Entry(stamp_ms=S, dispatch=log.Dispatch(job_id=job, host="n1", attempt=1)))
    session.full = True
    session.step(1.0)  # a full look (the periodic one), before the loop routed those entries
    assert _sent(session) == [("run", job, 1, "RUN")]
    _route(replica, session, first)
    session.step(2.0)
    assert _sent(session) == []  # not RunJob (1, 0) again, and never a KILL of (1, 1)


def test_a_change_routed_before_its_instance_ended_does_not_restate_it() -> None:
    """The session looks at routed changes after the instance's end was relayed: the older
    record in them (RUN) must not send RunJob (0) again, only the worker's journal would
    stop it running twice. (Trace validation against the spec found it: SendRun for a job
    committed state had finished.)"""
    replica, job, session = _running()
    apply = replica.store.apply
    first = replica.store.index + 1
    started = api.JobReport(job_id=job, attempt=0, started=api.JobStarted(pid=7))
    finished = api.JobReport(job_id=job, attempt=0, finished=api.JobFinished(exit_code=0))
    for report in (started, finished):
        apply(log.Entry(stamp_ms=S + 1, report=log.HostReport(host="n1", generation=1, report=report)))
    assert session.relayed([started, finished], [log.Result(code=log.OK)] * 2)
    _route(replica, session, first)
    session.step(1.0)
    assert _sent(session) == []  # neither RunJob (0) again nor a KILL of it


def test_every_host_of_a_parallel_job_gets_its_run_with_the_credential_and_is_killed_when_it_ends() -> None:
    """A job on n1 (its command) and n2 (its part): n2's session sends the RunJob that lets tasks
    start there, kills the part when the job is over, and forgets it once the part's end is
    acknowledged; n1's forgets the job at its end, as for any job."""
    replica = _Replica()
    apply = replica.store.apply
    apply(log.Entry(stamp_ms=S, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                     queues=[api.Queue(name="normal")])))
    for name in ("n1", "n2"):
        apply(log.Entry(stamp_ms=S, join_host=api.HostSpec(name=name, slots=2)))
    job = apply(log.Entry(stamp_ms=S, submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="x", jobs=[api.JobSpec(command=["true"], slots=4)])]))).job_ids[0]
    lease = apply(log.Entry(stamp_ms=S, lease=log.LeaseEntry(scheduler_id="s", duration_ms=10**9)))
    batch = api.DecisionBatch(lease_epoch=lease.lease_epoch, scheduler_id="s")
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=job, attempt=0, host="n1", hosts=[
        api.HostSlots(host="n1", slots=2), api.HostSlots(host="n2", slots=2)]))
    entry = log.Entry(stamp_ms=S, decisions=batch, format=8)
    assert apply(entry).outcomes[0].code == api.DECISION_ACCEPTED
    sessions = {name: WorkerSession(replica.store, name, 1, credential=lambda j: f"cred-{j.id}")
                for name in ("n1", "n2")}
    for session in sessions.values():
        session.step(0.0)
    runs = {name: [m.run for m in s.take() if m.HasField("run")] for name, s in sessions.items()}
    assert [(r.job.id, r.job.host, r.credential) for r in runs["n2"]] == [(job, "n1", f"cred-{job}")]
    assert [(r.job.id, r.credential) for r in runs["n1"]] == [(job, f"cred-{job}")]
    first = replica.store.index + 1
    report = log.HostReport(host="n1", generation=1, report=api.JobReport(
        job_id=job, attempt=0, finished=api.JobFinished(exit_code=0)))
    apply(log.Entry(stamp_ms=S, report=report, format=8))
    for index in range(first, replica.store.index + 1):
        raw = replica.store.tables.get("events", fsm.revision_key(index)) or b""
        routed = route(log.Event.FromString(raw))
        for name, session in sessions.items():
            session.changed(index, routed.jobs.get(name, []), name in routed.hosts)
    sessions["n2"].step(0.1)
    assert _sent(sessions["n2"]) == [("signal", job, 0, "SIGNAL_KILL")]  # its tasks end with the job
    part_ended = api.JobReport(job_id=job, attempt=0, part_ended=api.PartEnded(
        usage=api.Usage(user_cpu_s=2.5, max_rss_kb=900), tasks=2))
    result = apply(log.Entry(stamp_ms=S, report=log.HostReport(host="n2", generation=1, report=part_ended),
                             format=8))
    assert result.code == log.OK
    assert sessions["n2"].relayed([part_ended], [result]) and (job, 0) not in sessions["n2"].live
    ended = fsm.read_job(replica.store.tables, job)
    assert ended is not None and ended.state == api.DONE and ended.usage.user_cpu_s >= 2.5
    assert ended.usage.max_rss_kb >= 900


def test_a_job_read_for_its_hosts_is_the_job_s_fields_of_the_same_numbers() -> None:
    """route parses a changed job as log.JobHosts (its id, host and allocation only): the same field
    numbers and types as api.Job's, and the same hosts as the whole record gives, first host first."""
    job_fields = api.Job.DESCRIPTOR.fields_by_number
    for one in log.JobHosts.DESCRIPTOR.fields:
        same = job_fields[one.number]
        assert (same.name, same.type, same.is_repeated, getattr(same.message_type, "full_name", None)) == \
            (one.name, one.type, one.is_repeated, getattr(one.message_type, "full_name", None))
    spec = api.JobSpec(command=["sleep", "1"], user="u", env={"A": "b"}, slots=3)
    records = [api.Job(id=1, state=api.PEND, spec=spec),
               api.Job(id=2, state=api.RUN, host="n7", spec=spec),
               api.Job(id=3, state=api.RUN, host="n2", spec=spec, allocation=[
                   api.HostAllocation(host="n2", slots=2), api.HostAllocation(host="n1", slots=1,
                                                                              resources={"gpu": 1})])]
    for record in records:
        read = log.JobHosts.FromString(record.SerializeToString())
        assert (read.id, hosts_of(read)) == (record.id, hosts_of(record))
    assert [hosts_of(r) for r in records] == [[], ["n7"], ["n2", "n1"]]


def _start(replica: _Replica, job: int, pid: int, time_ms: int, generation: int = 1) -> None:
    replica.store.apply(log.Entry(stamp_ms=S + 1, report=log.HostReport(host="n1", generation=generation,
                                                                         report=_started(job, pid, time_ms))))


def _started(job: int, pid: int, time_ms: int, again: bool = True, attempt: int = 0) -> api.JobReport:
    started = api.JobStarted(pid=pid, time_ms=time_ms, again=again)
    return api.JobReport(job_id=job, attempt=attempt, started=started)


def test_a_start_said_again_is_answered_from_the_state_only_when_the_state_holds_it_so() -> None:
    replica, job, session = _running()
    # Not yet started in the state: the report is news, relayed (even if the worker says "again").
    assert session.restated([_started(job, 7, S + 5)]) == [False]
    _start(replica, job, 7, S + 5)
    restated = session.restated([
        _started(job, 7, S + 5),                    # as committed: answered at once
        _started(job, 7, S + 5, again=False),       # not said again: relayed (a first report is never read)
        _started(job, 8, S + 5),                    # another pid
        _started(job, 7, S + 6),                    # another start time
        _started(job, 7, 0),                        # no time: its entry would stamp one
        _started(job, 7, S + 5, attempt=1),         # another attempt
        api.JobReport(job_id=job, started=api.JobStarted(pid=7, time_ms=S + 5, again=True, part=True)),
        api.JobReport(job_id=job, attempt=0, finished=api.JobFinished(exit_code=0)),
    ])
    assert restated == [True, False, False, False, False, False, False, False]
    # Another host's session may not answer for this host's job, however exactly it says it.
    replica.store.apply(log.Entry(stamp_ms=S, join_host=api.HostSpec(name="n2", slots=4)))
    assert WorkerSession(replica.store, "n2", 1).restated([_started(job, 7, S + 5)]) == [False]
    # Its host went UNAVAIL: the job is UNKWN, and the same start is news again (it restores RUN).
    replica.store.apply(log.Entry(stamp_ms=S, host_status=log.SetHostStatus(name="n1", generation=1,
                                                                            status=api.HOST_UNAVAIL)))
    assert session.restated([_started(job, 7, S + 5)]) == [False]
    replica.store.apply(log.Entry(stamp_ms=S, join_host=api.HostSpec(name="n1", slots=4)))  # generation 2
    rejoined = WorkerSession(replica.store, "n1", 2)
    assert rejoined.restated([_started(job, 7, S + 5)]) == [False]  # UNKWN: relayed
    _start(replica, job, 7, S + 5, generation=2)
    record = fsm.read_job(replica.store.tables, job)
    assert record is not None and record.state == api.RUN  # the relayed start restored it
    assert rejoined.restated([_started(job, 7, S + 5)]) == [True]
    assert session.restated([_started(job, 7, S + 5)]) == [False]  # a superseded connection's: relayed
    # Once it finished, its start said again is relayed (refused there: the session kills a stray).
    finished = api.JobReport(job_id=job, attempt=0, finished=api.JobFinished(exit_code=0))
    relayed = log.HostReport(host="n1", generation=2, report=finished)
    replica.store.apply(log.Entry(stamp_ms=S + 9, report=relayed))
    assert rejoined.restated([_started(job, 7, S + 5)]) == [False]


