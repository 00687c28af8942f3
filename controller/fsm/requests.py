"""Request ids make retries safe: a request applied twice answers with its first result.

A client keeps the id across retries, and a command that pysyncobj applies
twice (a retried proposal after a lost callback) finds its first result in
the `requests` table and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.fsm.applier import Applier
from controller.fsm.records import read_result
from controller.fsm.validation import check_request_id
from xce.errors import ServiceError
from xce.v1 import log_pb2 as log


def guarded(request_id: str, applier: Applier, body: Callable[[], log.Result]) -> log.Result:
    """Run one request once: a repeat returns the stored result unchanged."""
    try:
        check_request_id(request_id)
    except ServiceError as exc:
        return exc.to_result()
    if request_id:
        earlier = read_result(applier.tables, request_id)
        if earlier is not None:
            return earlier
    applier.requests_run += 1  # (its audit row, if it has one, is written: audit.confirm_note)
    try:
        result = body()
    except ServiceError as exc:
        result = exc.to_result()
    applier.remember(request_id, result)
    return result
