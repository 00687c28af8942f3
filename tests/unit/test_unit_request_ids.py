"""Request ids made each caller's own (controller/request_ids.py), and what a job shows of one."""

from __future__ import annotations

from controller import authz, request_ids
from controller.fsm import records
from xce.v1 import api_pb2 as api


def test_keys_differ_by_caller_and_by_request_and_fit_what_apply_stores() -> None:
    request = api.SubmitJobsRequest(request_id="r", jobs=[api.JobSpec(command=["true"])])
    other = api.SubmitJobsRequest(request_id="r", jobs=[api.JobSpec(command=["false"])])
    ann, bob = request_ids.owned("ann", "r", request), request_ids.owned("bob", "r", request)
    assert ann != bob and ann.startswith(request_ids.prefix("ann", "r"))
    assert request_ids.owned("ann", "r", other) != ann
    assert request_ids.owned("ann", "r", other).startswith(request_ids.prefix("ann", "r"))
    request.audit.dry_run = True  # the id and the audit note are not the request's body
    request.request_id = "other"
    assert request_ids.owned("ann", "r", request) == ann
    longest = request_ids.owned("a" * 300, "x" * request_ids.MAX_CLIENT_ID_BYTES, request)
    assert len(longest.encode()) == records.MAX_REQUEST_ID_BYTES == request_ids.MAX_REQUEST_ID_BYTES


def test_a_job_shows_its_request_id_to_its_owner_as_sent_and_to_nobody_else() -> None:
    stored = request_ids.owned("ann", "mine-1", api.SubmitJobsRequest())
    job = api.Job(id=1, spec=api.JobSpec(user="ann", env={"SECRET": "x"}), request_id=stored)
    policy = authz.Policy()
    assert authz.redact(policy, authz.Principal("ann", "user"), job).request_id == "mine-1"
    theirs = authz.redact(policy, authz.Principal("bob", "user"), job)
    assert theirs.request_id == "" and theirs.spec.env["SECRET"] == ""
    admin = authz.redact(policy, authz.Principal("root", "cluster_admin"), job)
    assert admin.request_id == "" and admin.spec.env["SECRET"] == "x"
    assert job.request_id == stored  # the stored record is not changed
    legacy = api.Job(id=2, spec=api.JobSpec(user="ann"), request_id="before-keys-were-owned")
    assert authz.redact(policy, authz.Principal("ann", "user"), legacy).request_id == "before-keys-were-owned"
