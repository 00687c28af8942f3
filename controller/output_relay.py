"""A job's output, relayed from its worker: the leader's book of requests in flight.

Workers accept no connections, so `GetJobOutput` goes to the leader, which asks the worker of the
job's host over that worker's stream (an OutputRequest) and answers the caller when the worker's
OutputAnswer comes back on the same stream; or with a refusal when the worker hangs up, the
leadership ends, or TIMEOUT_S passes. Nothing is committed.

Pure: the time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from xce.errors import ServiceError, failed_precondition, invalid
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

TIMEOUT_S = 10.0
DEFAULT_TAIL = 64 << 10
MAX_TAIL = 512 << 10  # a worker's message is at most 1 MiB (controller/grpc_api.py)
MAX_WAITING = 256  # requests in flight at once, over all workers


@dataclass
class Waiting:
    token: int        # the caller's
    stream: int       # the worker stream asked
    host: str
    deadline_s: float


class OutputRelay:
    def __init__(self, first: int = 0) -> None:
        """`first`: where this leadership's request numbers start (its start time, shifted: no two
        leaderships use the same numbers, besides the worker answering only on the asking stream)."""
        self._last = first
        self.waiting: dict[int, Waiting] = {}

    def ask(self, token: int, stream: int, host: str, now_s: float) -> int:
        """A request number for a new question to `stream`'s worker."""
        if len(self.waiting) >= MAX_WAITING:
            raise ServiceError(log.RESOURCE_EXHAUSTED,
                               f"{MAX_WAITING} output requests are in flight; retry in a moment")
        self._last += 1
        self.waiting[self._last] = Waiting(token, stream, host, now_s + TIMEOUT_S)
        return self._last

    def answered(self, stream: int, answer: api.OutputAnswer) -> tuple[Waiting, api.JobOutputResponse |
                                                                         ServiceError] | None:
        """The caller and its answer; None for an answer nobody waits for (late, or from another
        stream: a worker answers only what it was asked)."""
        waiting = self.waiting.get(answer.request)
        if waiting is None or waiting.stream != stream:
            return None
        del self.waiting[answer.request]
        if answer.error:
            return waiting, failed_precondition(f"host {waiting.host} could not read the output: "
                                                f"{answer.error[:300]}")
        return waiting, api.JobOutputResponse(data=answer.data[:MAX_TAIL], size=answer.size,
                                              host=waiting.host, path=answer.path[:4096])

    def expired(self, now_s: float) -> list[Waiting]:
        gone = [n for n, w in self.waiting.items() if w.deadline_s <= now_s]
        return [self.waiting.pop(n) for n in gone]

    def closed(self, stream: int) -> list[Waiting]:
        gone = [n for n, w in self.waiting.items() if w.stream == stream]
        return [self.waiting.pop(n) for n in gone]

    def drain(self) -> list[Waiting]:
        gone, self.waiting = list(self.waiting.values()), {}
        return gone

    def next_deadline_s(self) -> float | None:
        return min((w.deadline_s for w in self.waiting.values()), default=None)


def tail_of(request: api.JobOutputRequest) -> int:
    tail = request.tail_bytes or DEFAULT_TAIL
    if not 0 < tail <= MAX_TAIL:
        raise invalid(f"tail_bytes is between 1 and {MAX_TAIL}")
    return tail


def asked(request_number: int, job: api.Job, request: api.JobOutputRequest,
          tail: int) -> api.ControllerMessage:
    """What the worker is sent: the job without its environment (it needs only where the output is)."""
    shown = api.Job()
    shown.CopyFrom(job)
    shown.spec.ClearField("env")
    return api.ControllerMessage(output=api.OutputRequest(request=request_number, job=shown,
                                                         stderr=request.stderr, tail_bytes=tail))
