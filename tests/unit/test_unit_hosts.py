"""Hosts in the state machine (join, status) and the leader's heartbeat bookkeeping."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from controller import fsm
from controller.host_liveness import Liveness
from controller.store import StateStore
from controller.tables import MemoryTables, Tables
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STAMP = 1_700_000_000_000


@pytest.fixture(params=["memory", "lmdb"])
def apply(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """apply(entry) -> result at the next index, over either store."""
    index = [0]
    if request.param == "memory":
        tables: Tables = MemoryTables()

        def run(entry: log.Entry) -> log.Result:
            index[0] += 1
            results = fsm.apply(tables, index[0], entry.SerializeToString())
            assert results is not None
            return results[0]

        run.read = lambda name: fsm.read_host(tables, name)  # type: ignore[attr-defined]
        run.job = lambda job_id: fsm.read_job(tables, job_id)  # type: ignore[attr-defined]
        return run
    store = StateStore(tmp_path / "state", "c")
    request.addfinalizer(store.close)

    def run_lmdb(entry: log.Entry) -> log.Result:
        index[0] += 1
        results = store.apply(index[0], entry.SerializeToString())
        assert results is not None
        return results[0]

    def read(name: str) -> api.Host | None:
        with store.read() as tables:
            return fsm.read_host(tables, name)

    def job(job_id: int) -> api.Job | None:
        with store.read() as tables:
            return fsm.read_job(tables, job_id)

    run_lmdb.read = read  # type: ignore[attr-defined]
    run_lmdb.job = job  # type: ignore[attr-defined]
    return run_lmdb


def _memory_apply() -> tuple[MemoryTables, Callable[[log.Entry], log.Result]]:
    """A fresh in-memory state and apply(entry) -> its first result, at the next index."""
    tables = MemoryTables()
    index = [0]

    def run(entry: log.Entry) -> log.Result:
        index[0] += 1
        results = fsm.apply(tables, index[0], entry.SerializeToString())
        assert results is not None
        return results[0]

    return tables, run


def join(name: str, slots: int, stamp: int = STAMP) -> log.Entry:
    return log.Entry(stamp_ms=stamp, join_host=api.HostSpec(name=name, slots=slots, tags=["t"]))


def status(name: str, generation: int, value: int = api.HOST_UNAVAIL, stamp: int = STAMP) -> log.Entry:
    return log.Entry(stamp_ms=stamp, host_status=log.SetHostStatus(name=name, generation=generation,
                                                                   status=value))


def test_join_creates_then_updates_in_place_with_generation_plus_one(apply) -> None:  # type: ignore[no-untyped-def]
    assert apply(join("n1", 0)).generation == 1
    assert apply(status("n1", 1, stamp=STAMP + 5)).code == log.OK
    assert apply.read("n1").status == api.HOST_UNAVAIL
    result = apply(join("n1", 8, stamp=STAMP + 9))
    assert (result.code, result.generation) == (log.OK, 2)
    got = apply.read("n1")
    assert (got.spec.slots, got.status, got.generation, got.status_time_ms) == (8, api.HOST_OK, 2, STAMP + 9)


def test_joins_of_many_workers_in_one_entry_each_get_their_generation() -> None:
    tables = MemoryTables()
    fsm.apply(tables, 1, join("n1", 4).SerializeToString())
    entry = log.Entry(stamp_ms=STAMP, joins=log.HostJoins(joins=[
        api.HostSpec(name="n1", slots=8), api.HostSpec(name="n2", slots=2), api.HostSpec(name="bad name")]))
    results = fsm.apply(tables, 2, entry.SerializeToString())
    assert results is not None
    assert [(r.code, r.generation) for r in results] == [(log.OK, 2), (log.OK, 1), (log.INVALID_ARGUMENT, 0)]
    n1 = fsm.read_host(tables, "n1")
    assert n1 is not None and n1.spec.slots == 8 and fsm.read_host(tables, "bad name") is None


def test_status_of_a_stale_generation_changes_nothing(apply) -> None:  # type: ignore[no-untyped-def]
    apply(join("n1", 2))
    apply(join("n1", 2))
    result = apply(status("n1", 1))
    assert result.code == log.FAILED_PRECONDITION and "generation 2" in result.message
    assert apply.read("n1").status == api.HOST_OK


@pytest.mark.parametrize("spec", [api.HostSpec(name="", slots=1), api.HostSpec(name="a b"),
                                  api.HostSpec(name="n", slots=-1), api.HostSpec(name="n", memory_mb=-5),
                                  api.HostSpec(name="n", resources={"gpu": -1.0}),
                                  api.HostSpec(name="n", resources={"gpu": float("nan")})])
def test_bad_host_spec_is_rejected_and_stores_nothing(apply, spec: api.HostSpec) -> None:  # type: ignore[no-untyped-def]
    assert apply(log.Entry(stamp_ms=STAMP, join_host=spec)).code == log.INVALID_ARGUMENT
    assert apply.read(spec.name) is None


def test_status_of_unknown_host_is_not_found(apply) -> None:  # type: ignore[no-untyped-def]
    assert apply(status("ghost", 1)).code == log.NOT_FOUND


def host(name: str, generation: int, value: int = api.HOST_OK) -> api.Host:
    return api.Host(spec=api.HostSpec(name=name), generation=generation, status=value)


def test_liveness_gives_every_host_one_timeout_from_the_leaders_start() -> None:
    liveness = Liveness(since_s=100.0, timeout_s=5.0)
    hosts = [host("a", 1), host("b", 3), host("c", 1, api.HOST_UNAVAIL)]
    assert liveness.overdue(hosts, 104.9) == []
    liveness.seen("a", 1, 104.0)
    assert liveness.overdue(hosts, 105.5) == [("b", 3)]  # never heard from: counted from 100
    assert liveness.overdue(hosts, 109.5) == [("a", 1), ("b", 3)]


def test_liveness_ignores_heartbeats_of_an_older_generation() -> None:
    liveness = Liveness(since_s=0.0, timeout_s=5.0)
    liveness.seen("a", 1, 50.0)  # the old connection's last heartbeat
    assert liveness.overdue([host("a", 2)], 50.0) == [("a", 2)]
    liveness.seen("a", 2, 50.0)
    assert liveness.overdue([host("a", 2)], 54.0) == []


def _setup_job(apply, slots: int = 2) -> int:  # type: ignore[no-untyped-def]
    apply(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                         queues=[api.Queue(name="normal")])))
    apply(join("n1", 4))
    spec = api.JobSpec(command=["true"], slots=slots)
    result = apply(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id=f"s{slots}", jobs=[spec])])))
    return int(result.job_ids[0])


def dispatch(job_id: int, host_name: str = "n1", attempt: int = 0) -> log.Entry:
    return log.Entry(stamp_ms=STAMP, dispatch=log.Dispatch(job_id=job_id, host=host_name, attempt=attempt))


def report(job_id: int, attempt: int = 0, generation: int = 1, **body: object) -> log.Entry:
    return log.Entry(stamp_ms=STAMP + 1, report=log.HostReport(host="n1", generation=generation,
                                                               report=api.JobReport(job_id=job_id,
                                                                                    attempt=attempt, **body)))


def test_dispatch_takes_slots_and_finish_gives_them_back(apply) -> None:  # type: ignore[no-untyped-def]
    job_id = _setup_job(apply)
    assert apply(dispatch(job_id)).code == log.OK
    assert (apply.read("n1").slots_used, apply.read("n1").running_jobs) == (2, 1)
    assert apply(dispatch(job_id)).code == log.FAILED_PRECONDITION  # not pending any more
    assert apply(report(job_id, started=api.JobStarted(pid=42, time_ms=5))).code == log.OK
    finished = api.JobFinished(term_signal=9, usage=api.Usage(user_cpu_s=1.5), time_ms=9)
    assert apply(report(job_id, finished=finished)).code == log.OK
    assert apply.read("n1").slots_used == 0


def test_dispatch_needs_free_slots_and_an_ok_host(apply) -> None:  # type: ignore[no-untyped-def]
    job_id = _setup_job(apply, slots=3)
    other = _setup_job(apply, slots=2)
    assert apply(dispatch(job_id)).code == log.OK
    result = apply(dispatch(other))
    assert result.code == log.FAILED_PRECONDITION and "1 free slots" in result.message
    assert apply(dispatch(other, "ghost")).code == log.NOT_FOUND
    apply(status("n1", apply.read("n1").generation))
    assert "unavailable" in apply(dispatch(other)).message


def test_only_a_negative_dispatch_failure_requeues(apply) -> None:  # type: ignore[no-untyped-def]
    job_id = _setup_job(apply)
    apply(dispatch(job_id))
    ok_code = api.DispatchFailed(code=0, reason="fine")
    assert apply(report(job_id, dispatch_failed=ok_code)).code == log.INVALID_ARGUMENT  # M3
    failed = api.DispatchFailed(code=-2, reason="working directory /x missing")
    assert apply(report(job_id, dispatch_failed=failed)).code == log.OK
    assert apply(dispatch(job_id, attempt=0)).code == log.FAILED_PRECONDITION  # stale attempt
    assert apply(dispatch(job_id, attempt=1)).code == log.OK
    assert apply.read("n1").slots_used == 2


def test_reports_of_stale_attempts_or_connections_change_nothing(apply) -> None:  # type: ignore[no-untyped-def]
    job_id = _setup_job(apply)
    apply(dispatch(job_id))
    apply(log.Entry(stamp_ms=STAMP, control=api.ControlJobRequest(job_id=str(job_id), action=api.REQUEUE)))
    killed = api.JobFinished(term_signal=15)
    assert apply(report(job_id, attempt=0, generation=7, finished=killed)).code == log.FAILED_PRECONDITION
    assert apply.read("n1").slots_used == 2  # held until the old instance is known to have ended
    assert apply(report(job_id, attempt=0, finished=killed)).code == log.OK
    assert apply.read("n1").slots_used == 0  # now the requeue gave them back
    done = api.JobFinished(exit_code=0)
    assert apply(report(job_id, attempt=0, finished=done)).code == log.FAILED_PRECONDITION
    apply(dispatch(job_id, attempt=1))
    assert apply(report(job_id, attempt=1, generation=7, finished=done)).code == log.FAILED_PRECONDITION
    assert apply(report(job_id, attempt=1, finished=done)).code == log.OK
    assert apply.read("n1").slots_used == 0


def control(job_id: int, action: api.ControlAction) -> log.Entry:
    return log.Entry(stamp_ms=STAMP, control=api.ControlJobRequest(job_id=str(job_id), action=action))


def test_requeue_of_a_running_job_waits_for_its_instance_to_end(apply) -> None:  # type: ignore[no-untyped-def]
    # Otherwise the next attempt could be dispatched beside the old instance,
    # on slots that instance still uses (found by the protocol simulation).
    job_id = _setup_job(apply)
    apply(dispatch(job_id))
    assert apply(control(job_id, api.REQUEUE)).code == log.OK
    job = apply.job(job_id)
    assert (job.state, job.kill_requested, job.requeue_requested) == (api.RUN, True, True)
    assert apply.read("n1").slots_used == 2
    assert apply(dispatch(job_id, attempt=1)).code == log.FAILED_PRECONDITION  # not pending yet
    assert apply(control(job_id, api.REQUEUE)).code == log.FAILED_PRECONDITION  # asked already
    assert apply(report(job_id, finished=api.JobFinished(term_signal=15))).code == log.OK
    job = apply.job(job_id)
    assert (job.state, job.attempt, job.host, job.pending_code) == (api.PEND, 1, "", api.PEND_REQUEUED)
    assert not (job.kill_requested or job.requeue_requested or job.term_signal)
    assert apply.read("n1").slots_used == 0
    assert apply(dispatch(job_id, attempt=1)).code == log.OK


def test_a_kill_after_a_requeue_ends_the_job(apply) -> None:  # type: ignore[no-untyped-def]
    job_id = _setup_job(apply)
    apply(dispatch(job_id))
    apply(control(job_id, api.REQUEUE))
    assert apply(control(job_id, api.KILL)).code == log.OK
    assert apply(control(job_id, api.KILL)).code == log.FAILED_PRECONDITION  # being killed
    apply(report(job_id, finished=api.JobFinished(term_signal=15)))
    job = apply.job(job_id)
    assert (job.state, job.attempt, job.term_signal) == (api.EXIT, 0, 15)


def test_unavailable_host_makes_its_jobs_unknown_and_a_report_brings_them_back(apply) -> None:  # type: ignore[no-untyped-def]
    job_id = _setup_job(apply)
    apply(dispatch(job_id))
    apply(log.Entry(stamp_ms=STAMP, control=api.ControlJobRequest(job_id=str(job_id), action=api.STOP)))
    apply(status("n1", 1))
    assert apply.job(job_id).state == api.UNKWN
    apply(join("n1", 4))
    assert apply(report(job_id, started=api.JobStarted(pid=5))).code == log.FAILED_PRECONDITION  # old gen
    assert apply.job(job_id).state == api.UNKWN  # until the worker says it still runs it
    assert apply(report(job_id, generation=2, started=api.JobStarted(pid=5))).code == log.OK
    assert apply.job(job_id).state == api.USUSP  # what it was before


def test_lost_host_requeues_rerunnable_jobs_and_ends_the_others(tmp_path: Path) -> None:
    tables, run = _memory_apply()

    run(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                       queues=[api.Queue(name="normal")])))
    run(join("n1", 4))
    specs = [api.JobSpec(command=["a"], rerunnable=True), api.JobSpec(command=["b"])]
    ids = list(run(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="r", jobs=specs)]))).job_ids)
    for job_id in ids:
        run(dispatch(job_id))
    assert run(log.Entry(stamp_ms=STAMP, resolve_host=log.SetHostStatus(name="n1", generation=1))).code \
        == log.FAILED_PRECONDITION  # the host is still OK: nothing to settle
    run(status("n1", 1))
    assert [fsm.read_job(tables, i).state for i in ids] == [api.UNKWN, api.UNKWN]
    result = run(log.Entry(stamp_ms=STAMP + 9, resolve_host=log.SetHostStatus(name="n1", generation=1)))
    assert sorted(result.job_ids) == sorted(ids)
    rerun, ended = (fsm.read_job(tables, i) for i in ids)
    assert (rerun.state, rerun.attempt, rerun.host) == (api.PEND, 1, "")
    assert "requeued" in rerun.pending_reason
    assert (ended.state, ended.exit_status_unknown) == (api.EXIT, True)
    assert fsm.read_host(tables, "n1").slots_used == 0


def test_a_job_being_killed_is_never_requeued(apply) -> None:  # type: ignore[no-untyped-def]
    apply(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                         queues=[api.Queue(name="normal")])))
    apply(join("n1", 4))
    specs = [api.JobSpec(command=["a"], rerunnable=True), api.JobSpec(command=["b"], rerunnable=True)]
    ids = list(apply(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="r", jobs=specs)]))).job_ids)
    for job_id in ids:
        apply(dispatch(job_id))
        apply(log.Entry(stamp_ms=STAMP, control=api.ControlJobRequest(job_id=str(job_id), action=api.KILL)))
    refused = api.DispatchFailed(code=-4, reason="draining")
    assert apply(report(ids[0], dispatch_failed=refused)).code == log.OK
    assert (apply.job(ids[0]).state, apply.job(ids[0]).kill_requested) == (api.EXIT, False)
    apply(status("n1", 1))
    apply(log.Entry(stamp_ms=STAMP, resolve_host=log.SetHostStatus(name="n1", generation=1)))
    assert (apply.job(ids[1]).state, apply.job(ids[1]).exit_code) == (api.EXIT, 137)
    assert apply.read("n1").slots_used == 0


def test_environment_names_must_be_proper() -> None:
    tables = MemoryTables()
    tables.put("queues", b"normal", api.Queue(name="normal").SerializeToString())
    meta = log.Meta()
    for bad in ("", "A=B"):
        with pytest.raises(ServiceError, match="environment name"):
            fsm.check_spec(tables, meta, api.JobSpec(command=["true"], env={bad: "x"}))


def test_reports_of_many_connections_in_one_entry_apply_in_order_each_with_its_result() -> None:
    tables = MemoryTables()
    index = [0]

    def run(entry: log.Entry) -> list[log.Result]:
        index[0] += 1
        results = fsm.apply(tables, index[0], entry.SerializeToString())
        assert results is not None
        return results

    run(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                       queues=[api.Queue(name="normal")])))
    run(join("n1", 4))
    run(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="s", jobs=[api.JobSpec(command=["true"], slots=2)])])))
    run(dispatch(1))

    def relayed(generation: int, **body: object) -> log.HostReport:
        return log.HostReport(host="n1", generation=generation, report=api.JobReport(job_id=1, **body))

    results = run(log.Entry(stamp_ms=STAMP + 1, reports=log.HostReports(reports=[
        relayed(1, started=api.JobStarted(pid=7)),
        relayed(1, finished=api.JobFinished(exit_code=0)),
        relayed(9, finished=api.JobFinished(exit_code=1)),  # a stale connection: changes nothing
    ])))
    assert [r.code for r in results] == [log.OK, log.OK, log.FAILED_PRECONDITION]
    job = fsm.read_job(tables, 1)
    assert job is not None and (job.state, job.pid, job.exit_code) == (api.DONE, 7, 0)
    host = fsm.read_host(tables, "n1")
    assert host is not None and host.slots_used == 0
    assert run(log.Entry(stamp_ms=STAMP, reports=log.HostReports()))[0].code == log.INVALID_ARGUMENT


def test_an_entry_s_changes_are_routed_to_the_sessions_of_the_hosts_they_touch() -> None:
    from controller.worker_session import route

    tables = MemoryTables()
    entries = [
        log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                       queues=[api.Queue(name="normal")])),
        join("n1", 4), join("n2", 4),
        log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id="s", jobs=[api.JobSpec(command=["true"])])])),
        dispatch(1, "n2"),
        log.Entry(stamp_ms=STAMP, control=api.ControlJobRequest(job_id="1", action=api.STOP)),
        log.Entry(stamp_ms=STAMP, control=api.ControlJobRequest(job_id="1", action=api.REQUEUE)),
        log.Entry(stamp_ms=STAMP, report=log.HostReport(host="n2", generation=1, report=api.JobReport(
            job_id=1, finished=api.JobFinished(term_signal=15)))),
    ]
    seen = []
    for index, entry in enumerate(entries, start=1):
        fsm.apply(tables, index, entry.SerializeToString())
        raw = tables.get("events", fsm.revision_key(index))
        assert raw is not None
        routed = route(log.Event.FromString(raw))
        seen.append(({h: [j.id for j in jobs] for h, jobs in routed.jobs.items()}, routed.hosts))
    assert seen == [
        ({}, set()),  # init
        ({}, {"n1"}), ({}, {"n2"}),  # joins write their host
        ({}, set()),  # submitted: on no host, never was
        ({"n2": [1]}, {"n2"}),  # dispatched: the job and the host's slots
        ({"n2": [1]}, set()),  # stopped: the job only
        ({"n2": [1]}, set()),  # requeue asked: the job, still on n2, is to be killed
        ({"n2": [1]}, {"n2"}),  # its instance ended: it left n2 (its host_jobs row went), slots back
    ]


def test_a_decision_batch_is_checked_against_committed_state_and_fenced_by_the_lease() -> None:
    tables, run = _memory_apply()

    run(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                       queues=[api.Queue(name="normal")])))
    run(join("n1", 1))
    run(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="s", jobs=[api.JobSpec(command=["true"])] * 3)])))
    lease = run(log.Entry(stamp_ms=STAMP, lease=log.LeaseEntry(scheduler_id="s1", duration_ms=10_000)))
    batch = api.DecisionBatch(lease_epoch=lease.lease_epoch, scheduler_id="s1")
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=1, attempt=0, host="n1"))
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=2, attempt=0, host="n1"))  # n1 is full now
    batch.decisions.add(pend=api.PendDecision(job_id=3, reason="no host with enough free slots",
                                              code=api.PEND_NO_FREE_SLOTS))
    result = run(log.Entry(stamp_ms=STAMP + 1, decisions=batch))
    applied = fsm.read_meta(tables).applied_index
    assert result.code == log.OK and result.revision == applied  # the scheduler's view waits for it
    assert result.rejections[0] == result.rejections[2] == "" and "0 free slots" in result.rejections[1]
    assert [(o.code, o.reason) for o in result.outcomes] == [(api.DECISION_ACCEPTED, 0),
                                                             (api.REJECT_INFEASIBLE, api.PEND_NO_FREE_SLOTS),
                                                             (api.DECISION_ACCEPTED, 0)]
    jobs = {j: fsm.read_job(tables, j) for j in (1, 2, 3)}
    assert [jobs[j].state for j in (1, 2, 3)] == [api.RUN, api.PEND, api.PEND]  # type: ignore[union-attr]
    assert jobs[3].pending_code == api.PEND_NO_FREE_SLOTS  # type: ignore[union-attr]
    # A batch of another epoch, or after the lease ran out, changes nothing.
    def visible() -> list[tuple[str, bytes, bytes]]:
        return [(t, k, v) for t in ("jobs", "hosts") for k, v in tables.scan(t)]

    before = visible()
    stale = api.DecisionBatch(lease_epoch=lease.lease_epoch + 1, scheduler_id="s1",
                              decisions=batch.decisions[2:])
    stale_result = run(log.Entry(stamp_ms=STAMP + 2, decisions=stale))
    assert [o.code for o in stale_result.outcomes] == [api.REJECT_STALE_LEASE]
    late = api.DecisionBatch(lease_epoch=lease.lease_epoch, scheduler_id="s1", decisions=batch.decisions[2:])
    assert run(log.Entry(stamp_ms=STAMP + 20_000, decisions=late)).code == log.FAILED_PRECONDITION
    assert visible() == before


def test_a_running_attempt_holds_its_queue_s_slots_and_gives_back_exactly_those() -> None:
    tables, run = _memory_apply()
    run(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                       queues=[api.Queue(name="normal", slot_limit=3)])))
    run(join("n1", 8))
    two = api.JobSpec(command=["true"], slots=2)
    run(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="s", jobs=[two, two])])))
    counter = "queue/normal/slots"
    assert run(dispatch(1)).code == log.OK
    assert fsm.read_counter(tables, counter) == 2
    assert dict(fsm.read_job(tables, 1).holds) == {}  # type: ignore[union-attr]  # the base is by rule
    lease = run(log.Entry(stamp_ms=STAMP, lease=log.LeaseEntry(scheduler_id="s1", duration_ms=10_000)))
    batch = api.DecisionBatch(lease_epoch=lease.lease_epoch, scheduler_id="s1")
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=2, attempt=0, host="n1"))
    result = run(log.Entry(stamp_ms=STAMP + 1, decisions=batch))
    assert [(o.code, o.reason) for o in result.outcomes] == [(api.REJECT_INFEASIBLE, api.PEND_LIMIT_REACHED)]
    # An operator's forced run (brun) passes the host checks only, not the queue's limit.
    assert run(dispatch(2)).code == log.OK and fsm.read_counter(tables, counter) == 4
    # The limit is lowered while both run; each end gives back exactly what it held.
    run(report(1, started=api.JobStarted(pid=5)))
    assert run(report(1, finished=api.JobFinished(exit_code=0))).code == log.OK
    assert fsm.read_counter(tables, counter) == 2
    assert run(report(2, finished=api.JobFinished(exit_code=0))).code == log.OK
    assert fsm.read_counter(tables, counter) == 0 and list(tables.scan("counters")) == []


def test_an_inactive_queue_refuses_a_scheduler_s_dispatch_at_apply_but_not_a_forced_run() -> None:
    tables, run = _memory_apply()
    run(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                       queues=[api.Queue(name="normal", inactive=True)])))
    run(join("n1", 8))
    run(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="s", jobs=[api.JobSpec(command=["true"])])])))
    lease = run(log.Entry(stamp_ms=STAMP, lease=log.LeaseEntry(scheduler_id="s1", duration_ms=10_000)))
    batch = api.DecisionBatch(lease_epoch=lease.lease_epoch, scheduler_id="s1")
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=1, attempt=0, host="n1"))
    outcome = run(log.Entry(stamp_ms=STAMP + 1, decisions=batch)).outcomes[0]
    assert (outcome.code, outcome.reason) == (api.REJECT_INFEASIBLE, api.PEND_QUEUE_INACTIVE)
    assert run(dispatch(1)).code == log.OK


def test_explain_counts_the_hosts_each_check_refused() -> None:
    from scheduler.pass_usage import PassUsage
    from xce.rules import feasibility

    shapes = (("a", 2, True, 0), ("b", 8, True, 7), ("c", 8, False, 0))
    hosts = [api.Host(spec=api.HostSpec(name=n, slots=s), status=api.HOST_OK if ok else api.HOST_UNAVAIL,
                      slots_used=u) for n, s, ok, u in shapes]
    usage = PassUsage(hosts, {"normal": api.Queue(name="normal")}, {})
    job = api.Job(id=1, state=api.PEND, spec=api.JobSpec(command=["true"], queue="normal", slots=4,
                                                         resource_req="span[hosts=1]"))
    explanation = feasibility.explain(job, usage, feasibility.job_need(job, usage))
    assert explanation.reason is not None and explanation.reason.code == api.PEND_NO_FREE_SLOTS
    assert explanation.reason.words == "0 of 3 hosts can take 4 slots; 1 host has fewer than 4 slots; " \
                                       "1 host lacks free slots; 1 unavailable"
    assert dict(explanation.counts) == {"host_large_enough": 1, "host_has_free_slots": 1, "host_available": 1}
    # Spread over hosts (no span[]), the free slots of a and b count together.
    spread = api.Job(id=2, state=api.PEND, spec=api.JobSpec(command=["true"], queue="normal", slots=4))
    explanation = feasibility.explain(spread, usage)
    assert explanation.reason is not None and explanation.reason.code == api.PEND_NO_FREE_SLOTS
    assert explanation.reason.words == "2 of 3 hosts can take a part (3 free slots together); " \
                                       "the job needs 4; 1 unavailable"
    assert feasibility.explain(job, PassUsage([], {}, {})).reason == feasibility.REASON_NO_HOSTS


@pytest.mark.parametrize(("format_", "rerunnable", "kill", "state"), [
    (2, True, False, api.PEND),    # fenced: requeued at the next attempt
    (2, False, False, api.EXIT),   # only rerunnable jobs are fenced; a report saying so is a plain end
    (2, True, True, api.EXIT),     # being killed anyway: it ends
    (1, True, False, api.EXIT),    # an older format does not read `fenced`: every replica ends it alike
])
def test_a_fenced_end_requeues_a_rerunnable_job_from_format_2(  # type: ignore[no-untyped-def]
        apply, format_: int, rerunnable: bool, kill: bool, state: int) -> None:
    apply(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                         queues=[api.Queue(name="normal")])))
    apply(join("n1", 4))
    spec = api.JobSpec(command=["true"], rerunnable=rerunnable)
    job_id = int(apply(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="r", jobs=[spec])]))).job_ids[0])
    assert apply(dispatch(job_id)).code == log.OK
    if kill:
        apply(log.Entry(stamp_ms=STAMP, control=api.ControlJobRequest(job_id=str(job_id), action=api.KILL)))
    entry = report(job_id, finished=api.JobFinished(term_signal=15, fenced=True, time_ms=9))
    entry.format = format_
    assert apply(entry).code == log.OK
    job = apply.job(job_id)
    assert job.state == state and apply.read("n1").slots_used == 0
    if state == api.PEND:
        assert job.attempt == 1 and "fence" in job.pending_reason and job.pending_code == api.PEND_REQUEUED
