"""Many messages in one frame on the worker stream.

A dispatch batch puts tens of jobs on one host at once, and their reports
come back together; one gRPC message each would cost the leader more than
the work itself. Both sides therefore send what is queued as one message
(`Commands` from the leader, `Reports` from the worker), in order, and
unpack what they receive. A lone message goes as itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from google.protobuf.message import Message

from xce.v1 import api_pb2 as api

MAX_PER_FRAME = 1000
MAX_FRAME_BYTES = 4 << 20  # a frame stops growing past this (the receive limit is 16 MiB)


def split(messages: Sequence[api.ControllerMessage]) -> list[list[api.ControllerMessage]]:
    """Consecutive runs of at most MAX_PER_FRAME messages and about MAX_FRAME_BYTES each (a
    frame stops growing once past it), in order: each becomes one frame."""
    return _runs(messages, api.ControllerMessage.ByteSize)


def controller_frames(messages: Sequence[api.ControllerMessage]) -> list[bytes]:
    """The frames of `split`, serialized: each message is serialized once and a frame of several is
    their bytes, each behind its field tag and length, behind the frame's (a `Commands` message is
    exactly that on the wire). Copying each message into a `Commands` and measuring each (ByteSize)
    cost the leader 7 % of a placement's CPU in its worker streams. What
    `controller_frame(part).SerializeToString()` gives, byte for byte where no map field leaves the
    order of its entries free (a test holds it)."""
    return [_commands(run) for run in _runs([m.SerializeToString() for m in messages], len)]


T = TypeVar("T")


def _runs(items: Sequence[T], size_of: Callable[[T], int]) -> list[list[T]]:
    runs: list[list[T]] = []
    run: list[T] = []
    size = 0
    for item in items:
        if run and (len(run) >= MAX_PER_FRAME or size >= MAX_FRAME_BYTES):
            runs.append(run)
            run, size = [], 0
        run.append(item)
        size += size_of(item)
    if run:
        runs.append(run)
    return runs


def _tag(message: type[Message], field: str) -> bytes:
    """The wire tag of a length-delimited field (a message) of `message`."""
    return _varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | 2)


def _commands(raws: list[bytes]) -> bytes:
    if len(raws) == 1:
        return raws[0]
    inner = b"".join(b"".join((_COMMAND_TAG, _varint(len(raw)), raw)) for raw in raws)
    return b"".join((_COMMANDS_TAG, _varint(len(inner)), inner))


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_COMMANDS_TAG = _tag(api.ControllerMessage, "commands")
_COMMAND_TAG = _tag(api.Commands, "commands")


def controller_frame(messages: Sequence[api.ControllerMessage]) -> api.ControllerMessage:
    if len(messages) == 1:
        return messages[0]
    return api.ControllerMessage(commands=api.Commands(commands=messages))


def controller_messages(frame: api.ControllerMessage) -> Sequence[api.ControllerMessage]:
    return frame.commands.commands if frame.WhichOneof("body") == "commands" else [frame]


def worker_frames(messages: Sequence[api.WorkerMessage]) -> list[api.WorkerMessage]:
    """Runs of reports become one `reports` message each; the order is kept."""
    frames: list[api.WorkerMessage] = []
    run: list[api.JobReport] = []
    for message in messages:
        if message.WhichOneof("body") == "report":
            run.append(message.report)
            continue
        frames += _reports_frame(run)
        run = []
        frames.append(message)
    return frames + _reports_frame(run)


def _reports_frame(run: list[api.JobReport]) -> list[api.WorkerMessage]:
    if not run:
        return []
    if len(run) == 1:
        return [api.WorkerMessage(report=run[0])]
    return [api.WorkerMessage(reports=api.Reports(reports=run))]


def worker_reports(frame: api.WorkerMessage) -> Sequence[api.JobReport]:
    kind = frame.WhichOneof("body")
    if kind == "reports":
        return frame.reports.reports
    return [frame.report] if kind == "report" else []
