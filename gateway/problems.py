"""Errors as RFC 9457 problem details, mapped from the service's gRPC codes in this one place.

The HTTP status of each code follows Google's API design guide (google.rpc.Code), which is what
gRPC-JSON gateways answer: INVALID_ARGUMENT 400, NOT_FOUND 404, FAILED_PRECONDITION 400, ...; a
refusal that names the leader (UNAVAILABLE while none serves) is 503 with Retry-After.
Pure: no HTTP server here, only the status and the body.
"""

from __future__ import annotations

from typing import Any

PROBLEM_TYPE = "application/problem+json"

STATUS_OF_CODE: dict[str, int] = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}

TITLES: dict[int, str] = {
    304: "Not Modified", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 409: "Conflict", 412: "Precondition Failed", 413: "Content Too Large",
    415: "Unsupported Media Type", 429: "Too Many Requests",
    499: "Client Closed Request", 500: "Internal Server Error", 501: "Not Implemented",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
}


class Problem(Exception):
    """A refusal the gateway makes itself (a malformed body, a missing key), before any call."""

    def __init__(self, status: int, detail: str, code: str = "", **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code or next((name for name, s in STATUS_OF_CODE.items() if s == status), "")
        self.extra = extra


def of_code(code: str, message: str) -> Problem:
    """The problem an XceError (a gRPC status code by name, and the server's message) becomes."""
    return Problem(STATUS_OF_CODE.get(code, 500), message, code)


def body(problem: Problem, instance: str = "") -> dict[str, Any]:
    """The problem's JSON: type, title, status, detail, instance, and the gRPC code by name."""
    out: dict[str, Any] = {"type": "about:blank", "title": TITLES.get(problem.status, "Error"),
                           "status": problem.status, "detail": problem.detail}
    if instance:
        out["instance"] = instance
    if problem.code:
        out["code"] = problem.code
    out.update(problem.extra)
    return out


def headers(problem: Problem) -> dict[str, str]:
    if problem.status == 401:
        return {"WWW-Authenticate": 'Bearer realm="xce"'}
    if problem.status == 503:
        return {"Retry-After": "1"}
    return {}
