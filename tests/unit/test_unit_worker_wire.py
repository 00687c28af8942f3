"""Framing on the worker stream: many messages in one, order kept."""

from __future__ import annotations

from xce import worker_wire
from xce.v1 import api_pb2 as api


def _report(job_id: int) -> api.WorkerMessage:
    return api.WorkerMessage(report=api.JobReport(job_id=job_id, started=api.JobStarted(pid=job_id)))


def test_runs_of_reports_share_a_frame_and_other_messages_keep_their_place() -> None:
    heartbeat = api.WorkerMessage(heartbeat=api.Heartbeat(generation=3))
    frames = worker_wire.worker_frames([_report(1), _report(2), heartbeat, _report(3)])
    assert [f.WhichOneof("body") for f in frames] == ["reports", "heartbeat", "report"]
    unpacked = [r.job_id for f in frames for r in worker_wire.worker_reports(f)]
    assert unpacked == [1, 2, 3]
    assert worker_wire.worker_reports(heartbeat) == []


def test_commands_frame_unpacks_in_order_and_a_lone_message_goes_as_itself() -> None:
    runs = [api.ControllerMessage(run=api.RunJob(job=api.Job(id=i))) for i in (5, 6, 7)]
    frame = worker_wire.controller_frame(runs)
    assert frame.WhichOneof("body") == "commands"
    assert [m.run.job.id for m in worker_wire.controller_messages(frame)] == [5, 6, 7]
    assert worker_wire.controller_frame(runs[:1]) is runs[0]
    assert list(worker_wire.controller_messages(runs[0])) == [runs[0]]


def test_frames_are_bounded_in_count_and_in_bytes_and_keep_the_order() -> None:
    small = [api.ControllerMessage(ack=api.ReportAck(job_id=i, attempt=0, kind="started"))
             for i in range(worker_wire.MAX_PER_FRAME + 5)]
    parts = worker_wire.split(small)
    assert [len(p) for p in parts] == [worker_wire.MAX_PER_FRAME, 5]
    big_spec = api.JobSpec(command=["x" * 1000], env={f"K{i}": "v" * 1000 for i in range(400)})  # ~400 kB
    big = [api.ControllerMessage(run=api.RunJob(job=api.Job(id=i, spec=big_spec))) for i in range(30)]
    parts = worker_wire.split(big)
    assert len(parts) > 1 and all(sum(m.ByteSize() for m in p[:-1]) < worker_wire.MAX_FRAME_BYTES
                                  for p in parts)
    assert [m.run.job.id for p in parts for m in p] == list(range(30))


def test_frames_as_bytes_are_the_frames_serialized() -> None:
    """controller_frames (the leader's stream) writes a frame's wire bytes by hand: the same frames as
    the messages split, framed and serialized (byte for byte where no map field makes the order of
    its entries free), a lone message as itself, in order."""
    big_spec = api.JobSpec(command=["x" * 1000], env={f"K{i}": "v" * 1000 for i in range(400)})  # ~400 kB
    cases = [
        ([api.ControllerMessage(ack=api.ReportAck(job_id=1, attempt=0, kind="started"))], True),
        ([api.ControllerMessage(run=api.RunJob(job=api.Job(id=i, host="h1"), credential="c" * 64))
          for i in range(3)], True),
        ([api.ControllerMessage(ack=api.ReportAck(job_id=i, attempt=i % 3, kind="started"))
          for i in range(2 * worker_wire.MAX_PER_FRAME + 7)], True),
        ([api.ControllerMessage(signal=api.SignalJob(job_id=1 << 40, attempt=2, kind=api.SIGNAL_KILL)),
          api.ControllerMessage(run=api.RunJob(job=api.Job(id=9, spec=api.JobSpec(command=["y" * 200]))))],
         True),
        ([api.ControllerMessage(run=api.RunJob(job=api.Job(id=i, spec=big_spec))) for i in range(25)], False),
    ]
    for messages, exact in cases:
        parts = worker_wire.split(messages)
        frames = worker_wire.controller_frames(messages)
        if exact:
            assert frames == [worker_wire.controller_frame(part).SerializeToString() for part in parts]
        assert len(frames) == len(parts)
        for raw, part in zip(frames, parts, strict=True):
            assert list(worker_wire.controller_messages(api.ControllerMessage.FromString(raw))) == part
