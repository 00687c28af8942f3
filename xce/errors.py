"""One error type for every refusal a service gives, with codes independent of gRPC.

Theory of operation (h11's split of local and remote errors). Business code
(fsm's validation, the leader core, reads) raises `ServiceError` with a code
from `log.Code` and words for people; it never sees a transport. Exactly
one place maps the code to the transport's status: `controller/grpc_api.py`
to gRPC status codes (and, later, the gateway to HTTP). A refusal by a
follower carries the leader's address, which the gRPC mapping puts in the
`x-xce-leader` trailing metadata.

Programmer errors are not ServiceErrors: they raise (see xce/invariant.py),
and inside apply they stop the replica.
"""

from __future__ import annotations

from xce.v1 import log_pb2 as log


class ServiceError(Exception):
    """A request refused: `code` (a log.Code), `message`, and the leader's address if known."""

    def __init__(self, code: int, message: str, leader: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.leader = leader

    def __repr__(self) -> str:
        return f"ServiceError({log.Code.Name(self.code)}, {self.message!r})"

    def to_result(self) -> log.Result:
        return log.Result(code=self.code, message=self.message)  # type: ignore[arg-type]


def invalid(message: str) -> ServiceError:
    return ServiceError(log.INVALID_ARGUMENT, message)


def failed_precondition(message: str, leader: str = "") -> ServiceError:
    return ServiceError(log.FAILED_PRECONDITION, message, leader)


def unavailable(message: str) -> ServiceError:
    return ServiceError(log.UNAVAILABLE, message)


def from_result(result: log.Result) -> ServiceError:
    return ServiceError(result.code, result.message)
