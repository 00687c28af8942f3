"""Checkpoints (like bsub -k and bchkpnt): apply counts each one asked of a running job with
-k; the worker's session sends the job's signal once per checkpoint. Pure."""

from __future__ import annotations

import pytest

from controller import fsm
from controller.fsm.versions import CHECKPOINT_FORMAT
from controller.tables import MemoryTables
from controller.worker_session import WorkerSession
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STAMP = 1_700_000_000_000


class State:
    def __init__(self) -> None:
        self.tables, self.index = MemoryTables(), 0
        self.step(log.Entry(init=log.InitCluster(cluster_id="demo", config_digest="d", default_queue="normal",
                                                 queues=[api.Queue(name="normal")])))

    def step(self, entry: log.Entry, format_: int = CHECKPOINT_FORMAT) -> log.Result:
        self.index += 1
        entry.stamp_ms, entry.format = STAMP + self.index, format_
        results = fsm.apply(self.tables, self.index, entry.SerializeToString())
        assert results is not None
        return results[0]

    def running(self, job_id: int, signal: int = 10) -> None:
        spec = api.JobSpec(command=["x"], queue="normal", slots=1, user="ann", checkpoint_signal=signal)
        job = api.Job(id=job_id, state=api.RUN, attempt=0, host="n1", spec=spec)
        self.tables.put("jobs", fsm.job_key(job_id), job.SerializeToString(deterministic=True))

    def checkpoint(self, job_id: int, format_: int = CHECKPOINT_FORMAT) -> log.Result:
        return self.step(log.Entry(control=api.ControlJobRequest(job_id=str(job_id), action=api.CHECKPOINT,
                                                                 request_id=f"c{self.index}")), format_)

    def job(self, job_id: int) -> api.Job:
        found = fsm.read_job(self.tables, job_id)
        assert found is not None
        return found


def test_each_checkpoint_of_a_running_job_is_counted_and_stamped() -> None:
    state = State()
    state.running(1)
    assert state.checkpoint(1).code == log.OK
    assert state.checkpoint(1).code == log.OK
    job = state.job(1)
    assert (job.state, job.checkpoints, job.checkpoint_time_ms) == (api.RUN, 2, STAMP + state.index)


def test_what_cannot_be_checkpointed_is_refused() -> None:
    state = State()
    state.running(2, signal=0)
    refused = state.checkpoint(2)
    assert refused.code == log.FAILED_PRECONDITION and "not checkpointable" in refused.message
    state.running(3)
    for older in (15, 16):  # format 16 is the audit trail's, whose code knew no checkpoint
        refused = state.checkpoint(3, format_=older)
        assert refused.code == log.INVALID_ARGUMENT and "unknown control action 7" in refused.message
    spec = api.JobSpec(command=["x"], queue="normal", checkpoint_signal=10)
    pending = api.Job(id=4, state=api.PEND, spec=spec)
    state.tables.put("jobs", fsm.job_key(4), pending.SerializeToString(deterministic=True))
    assert state.checkpoint(4).code == log.FAILED_PRECONDITION
    assert state.job(3).checkpoints == 0


@pytest.mark.parametrize("signal, ok", [(10, True), (12, True), (1, True), (2, True), (9, False), (15, False),
                                         (19, False), (64, False)])
def test_the_checkpoint_signal_is_one_the_job_s_shim_outlives(signal: int, ok: bool) -> None:
    state = State()
    spec = api.JobSpec(command=["x"], checkpoint_signal=signal)
    result = state.step(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(request_id="s",
                                                                                          jobs=[spec])])))
    assert (result.code == log.OK) is ok, result.message


class Reader:
    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    def read(self):  # type: ignore[no-untyped-def]
        from contextlib import nullcontext

        return nullcontext(self.tables)


def test_the_session_sends_each_checkpoint_once_and_again_on_a_new_connection() -> None:
    state = State()
    state.running(5)
    state.checkpoint(5)
    session = WorkerSession(Reader(state.tables), "n1", 1)  # type: ignore[arg-type]

    def checkpoints() -> list[tuple[int, int]]:
        sent = [m.signal for m in session.take() if m.WhichOneof("body") == "signal"]
        return [(s.signal, s.checkpoint) for s in sent if s.kind == api.SIGNAL_CHECKPOINT]

    session._want(state.job(5))  # noqa: SLF001 - the derivation step a committed change leads to
    assert checkpoints() == [(10, 1)]
    session._want(state.job(5))  # noqa: SLF001
    assert checkpoints() == []  # the same checkpoint: not sent twice on one connection
    state.checkpoint(5)
    session._want(state.job(5))  # noqa: SLF001
    assert checkpoints() == [(10, 2)]
    fresh = WorkerSession(Reader(state.tables), "n1", 2)  # type: ignore[arg-type]
    fresh._want(state.job(5))  # noqa: SLF001
    said = [(m.signal.kind, m.signal.checkpoint) for m in fresh.take() if m.WhichOneof("body") == "signal"]
    assert said == [(api.SIGNAL_CHECKPOINT, 2)]  # a new connection says the latest; the worker signals once
