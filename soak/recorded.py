"""A soak client whose every operation goes into the run's history, for the linearizability check.

Each call is invoked and completed in the history (soak/linear/history.py) as one sequential client
(one thread at a time per RecordedClient). What the outcome was, as the checker must see it:
- an answer: the operation took effect (a read's answer is what it observed);
- a refusal the controller decided (NOT_FOUND, FAILED_PRECONDITION on a control; a read of no such
  job): an observation too, recorded as the answer `{"error": CODE}`;
- a submit refused for good (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...): it did not take effect;
- anything else (UNAVAILABLE after the client's retries, a deadline): unknown. The controller
  deduplicates a retried write by its request id, so an unknown write took effect at most once.
Errors are raised as the plain Client raises them: the load generator goes on as before.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from client.channel import Client, XceError, new_request_id
from soak.linear.history import History, Op
from xce.v1 import api_pb2 as api

# Codes the controller answers after deciding, never for a write it may have committed.
DECIDED = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "PERMISSION_DENIED",
                     "UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "ALREADY_EXISTS", "OUT_OF_RANGE"})


class RecordedClient:
    def __init__(self, name: str, client: Client, history: History) -> None:
        self.name, self.client, self.history = name, client, history
        self._lock = threading.Lock()  # one operation at a time: a sequential client, as the checker assumes

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RecordedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, spec: api.JobSpec) -> api.Job:
        with self._lock:
            request_id = new_request_id()  # the client's retries carry it: the controller dedupes them
            op = self.history.invoke(self.name, "submit", {"name": spec.name, "slots": spec.slots,
                                                            "queue": spec.queue, "hold": spec.hold,
                                                            "request_id": request_id})
            try:
                job = self.client.submit([spec], request_id=request_id).jobs[0]
            except XceError as exc:
                if exc.code_name in DECIDED:
                    op.fail({"error": exc.code_name})
                else:
                    op.unknown(f"{exc.code_name}: {exc.message}"[:200])
                raise
            op.ok({"id": job.id, "state": api.JobState.Name(job.state)})
            return job

    def get(self, job_id: int) -> api.Job:
        with self._lock:
            op = self.history.invoke(self.name, "get", {"id": job_id})
            try:
                job = self.client.get_job(job_id)
            except XceError as exc:
                _observed(op, exc)
                raise
            op.ok({"state": api.JobState.Name(job.state), "attempt": job.attempt, "name": job.spec.name})
            return job

    def list(self, filters: Sequence[str]) -> list[api.Job]:
        with self._lock:
            op = self.history.invoke(self.name, "list", {"filters": list(filters)})
            try:
                jobs = self.client.list_jobs(filters)
            except XceError as exc:
                op.unknown(f"{exc.code_name}: {exc.message}"[:200])  # a read that saw nothing
                raise
            op.ok({"jobs": {str(j.id): api.JobState.Name(j.state) for j in jobs}})
            return jobs

    def control(self, job_id: int, action: api.ControlAction) -> None:
        with self._lock:
            op = self.history.invoke(self.name, "control", {"id": job_id,
                                                             "action": api.ControlAction.Name(action)})
            try:
                self.client.control(job_id, action)
            except XceError as exc:
                _observed(op, exc)
                raise
            op.ok({})


def _observed(op: Op, exc: XceError) -> None:
    """A refusal the controller decided on the job is what the operation observed; another decided
    refusal did not take effect; anything else is unknown."""
    if exc.code_name in ("NOT_FOUND", "FAILED_PRECONDITION"):
        op.ok({"error": exc.code_name})
    elif exc.code_name in DECIDED:
        op.fail({"error": exc.code_name})
    else:
        op.unknown(f"{exc.code_name}: {exc.message}"[:200])
