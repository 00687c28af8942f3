"""The client library: talks to any replica and follows the leader.

Theory of operation. Every call goes to the replica believed to lead. A
follower's FAILED_PRECONDITION with `x-xce-leader` moves the client there at
once; UNAVAILABLE (no leader yet, leader catching up, outcome unknown) or a
dead address moves it to the next replica after a jittered, capped backoff.
The request, and so its request id, is the same on every retry: a submit
retried across a failover creates exactly one job. Other errors are the
caller's (INVALID_ARGUMENT, NOT_FOUND, ...) and raise XceError at once.
Every call carries the caller's credentials (client/credentials.py): the TLS
channel and the token or MUNGE metadata.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence

from google.protobuf.message import Message

from client.credentials import Credentials
from client.http2 import RpcFailure
from client.leader_route import LeaderRoute
from xce.v1 import api_pb2 as api

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import Any, BinaryIO, TypeVar

    import grpc

    from client.leader_route import Draws
    from client.transport import Transport

    M = TypeVar("M", bound=Message)
    T = TypeVar("T")

LEADER_METADATA = "x-xce-leader"
# Outcomes unknown, so retried: every write carries a request id, which makes a repeat return the
# first answer. This client never cancels its own calls, so CANCELLED is the server's gRPC core
# giving up on one (seen once in a few runs while a leader of 5,000 worker streams stepped down).
RETRYABLE = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"}


class XceError(Exception):
    """A call failed for good: the gRPC status code (by name) and the server's message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code_name = code
        self.message = message

    @property
    def code(self) -> grpc.StatusCode:
        """The code as grpc's enum (imports grpc: not for the command line, which uses code_name)."""
        import grpc

        return grpc.StatusCode[self.code_name]


class UrandomDraws:
    """random.Random's `random()` (53 bits in [0, 1)) from os.urandom: a client's jitter source
    unless given one (importing random is ~1 ms of each command's start, and a command draws only
    when it backs off)."""

    def random(self) -> float:
        return (int.from_bytes(os.urandom(7), "big") >> 3) / (1 << 53)


def new_request_id() -> str:
    """128 random bits in hex (what uuid4().hex gave, without importing uuid and platform)."""
    return os.urandom(16).hex()


class Client:
    def __init__(self, addresses: Sequence[str], credentials: Credentials, deadline_s: float = 30.0,
                 call_timeout_s: float = 5.0,
                 max_backoff_s: float = 0.1, rng: Draws | None = None,
                 follow_leader: bool = True, transport: Transport | None = None) -> None:
        self.route = LeaderRoute(addresses, rng or UrandomDraws(), max_backoff_s)
        self.addresses = self.route.addresses
        self.credentials = credentials
        self.deadline_s = deadline_s
        self.call_timeout_s = call_timeout_s
        self.follow_leader = follow_leader
        if transport is None:
            from client.grpc_transport import GrpcTransport

            transport = GrpcTransport(credentials)
        self.transport = transport
        self.redirects = 0
        self.retries = 0

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- calls

    def submit(self, specs: Sequence[api.JobSpec], request_id: str | None = None,
               audit: api.AuditRequest | None = None) -> api.SubmitJobsResponse:
        """`audit`: record it in the audit trail (and with dry_run, only check it)."""
        request = api.SubmitJobsRequest(request_id=request_id or new_request_id(), jobs=specs, audit=audit)
        return self.call("JobService", "SubmitJobs", request, api.SubmitJobsResponse)

    def get_job(self, job_id: str | int, stale: bool = False) -> api.Job:
        """`stale`: any replica answers from its state (else the leader, linearizable)."""
        response = self.call("JobService", "GetJob", api.GetJobRequest(job_id=str(job_id), stale=stale),
                             api.JobResponse)
        return response.job

    def list_jobs(self, filters: Sequence[str] = (), page_size: int = 0,
                  stale: bool = False) -> list[api.Job]:
        jobs: list[api.Job] = []
        token = ""
        while True:
            request = api.ListJobsRequest(filters=filters, page_size=page_size, page_token=token, stale=stale)
            page = self.call("JobService", "ListJobs", request, api.ListJobsResponse)
            jobs.extend(page.jobs)
            token = page.next_page_token
            if not token:
                return jobs

    def job_output(self, job_id: str | int, stderr: bool = False,
                   tail_bytes: int = 0) -> api.JobOutputResponse:
        """The end of a job's stdout (or stderr), read by its host's worker (like bpeek)."""
        request = api.JobOutputRequest(job_id=str(job_id), stderr=stderr, tail_bytes=tail_bytes)
        return self.call("JobService", "GetJobOutput", request, api.JobOutputResponse)

    def history(self, request: api.HistoryRequest, limit: int = 0) -> list[api.Job]:
        """Finished jobs, newest first, page by page up to `limit` (0: all)."""
        return self._paged("JobService", "ListHistory", request, api.HistoryResponse, "jobs", limit)

    def accounting(self, request: api.AccountingRequest) -> api.AccountingResponse:
        return self.call("JobService", "Accounting", request, api.AccountingResponse)

    def control(self, job_id: str | int, action: api.ControlAction,
                request_id: str | None = None) -> api.Job:
        return self.control_job(job_id, action, request_id).job

    def control_job(self, job_id: str | int, action: api.ControlAction, request_id: str | None = None,
                    audit: api.AuditRequest | None = None) -> api.JobResponse:
        request = api.ControlJobRequest(job_id=str(job_id), action=action,
                                        request_id=request_id or new_request_id(), audit=audit)
        return self.call("JobService", "ControlJob", request, api.JobResponse)

    def run(self, job_id: str | int, host: str, request_id: str | None = None) -> api.Job:
        request = api.RunJobRequest(job_id=str(job_id), host=host, request_id=request_id or new_request_id())
        return self.call("JobService", "RunJob", request, api.JobResponse).job

    def modify(self, job_id: str | int, priority: int | None = None, queue: str | None = None,
               resource_req: str | None = None) -> api.Job:
        return self.modify_job(job_id, priority, queue, resource_req).job

    def modify_job(self, job_id: str | int, priority: int | None = None, queue: str | None = None,
                   resource_req: str | None = None, audit: api.AuditRequest | None = None) -> api.JobResponse:
        request = api.ModifyJobRequest(job_id=str(job_id), request_id=new_request_id(), audit=audit)
        if priority is not None:
            request.priority = priority
        if queue is not None:
            request.queue = queue
        if resource_req is not None:
            request.resource_req = resource_req
        return self.call("JobService", "ModifyJob", request, api.JobResponse)

    def put_job_group(self, path: str, limit: int = 0, create: bool = False, delete: bool = False,
                      request_id: str | None = None) -> api.JobGroupResponse:
        """bgadd (create), bgmod, bgdel (delete): a job group's limit on running jobs (0: none)."""
        request = api.PutJobGroupRequest(path=path, limit=limit, create=create, delete=delete,
                                         request_id=request_id or new_request_id())
        return self.call("JobService", "PutJobGroup", request, api.JobGroupResponse)

    def put_reservation(self, reservation: api.Reservation, slots: int = 0, delete: bool = False,
                        request_id: str | None = None) -> api.ReservationResponse:
        """brsvadd (`slots`: taken from the reservation's hosts in their order), brsvdel (delete)."""
        request = api.PutReservationRequest(reservation=reservation, slots=slots, delete=delete,
                                            request_id=request_id or new_request_id())
        return self.call("JobService", "PutReservation", request, api.ReservationResponse)

    def status(self, local_only: bool = False) -> api.StatusResponse:
        return self.call("ClusterService", "Status", api.StatusRequest(local_only=local_only),
                         api.StatusResponse)

    def list_hosts(self, stale: bool = False) -> api.ListHostsResponse:
        return self.call("ClusterService", "ListHosts", api.ListHostsRequest(stale=stale),
                         api.ListHostsResponse)

    def control_host(self, name: str, close: bool, reason: str = "") -> api.HostResponse:
        request = api.ControlHostRequest(name=name, close=close, reason=reason, request_id=new_request_id())
        return self.call("ClusterService", "ControlHost", request, api.HostResponse)

    def list_queues(self, stale: bool = False, user_bounds: bool = False) -> api.ListQueuesResponse:
        wanted = api.ListQueuesRequest(stale=stale, user_bounds=user_bounds)
        return self.call("AdminService", "ListQueues", wanted, api.ListQueuesResponse)

    def put_queue(self, queue: api.Queue, create: bool) -> api.QueueResponse:
        request = api.PutQueueRequest(queue=queue, request_id=new_request_id())
        method = "CreateQueue" if create else "UpdateQueue"
        return self.call("AdminService", method, request, api.QueueResponse)

    def create_token(self, sha256: str, user: str, role: str, expires_ms: int = 0,
                     description: str = "", scope: api.TokenScope | None = None) -> api.TokenResponse:
        request = api.CreateTokenRequest(sha256=sha256, user=user, role=role, expires_ms=expires_ms,
                                         description=description, request_id=new_request_id(), scope=scope)
        return self.call("AdminService", "CreateToken", request, api.TokenResponse)

    def revoke_token(self, token_id: str) -> api.TokenResponse:
        request = api.RevokeTokenRequest(id=token_id, request_id=new_request_id())
        return self.call("AdminService", "RevokeToken", request, api.TokenResponse)

    def list_tokens(self) -> list[api.TokenInfo]:
        return list(self.call("AdminService", "ListTokens", api.ListTokensRequest(),
                              api.ListTokensResponse).tokens)

    def list_audit(self, request: api.ListAuditRequest, limit: int = 0) -> list[api.AuditRecord]:
        """The audit trail, newest first, page by page up to `limit` (0: all)."""
        return self._paged("AdminService", "ListAudit", request, api.ListAuditResponse, "records", limit)

    def _paged(self, service: str, method: str, request: Message, response_class: type[Message], items: str,
               limit: int) -> list[Any]:
        """Every page's `items` from `request` on (page_size, page_token), up to `limit` (0: all)."""
        found: list[Any] = []
        page_request = type(request)()
        page_request.CopyFrom(request)
        while True:
            if limit:
                page_request.page_size = min(limit - len(found), 5000)  # type: ignore[attr-defined]
            page = self.call(service, method, page_request, response_class)
            found.extend(getattr(page, items))
            page_request.page_token = page.next_page_token  # type: ignore[attr-defined]
            if not page.next_page_token or (limit and len(found) >= limit):  # type: ignore[attr-defined]
                return found[:limit] if limit else found

    def who_am_i(self) -> api.WhoAmIResponse:
        return self.call("AdminService", "WhoAmI", api.WhoAmIRequest(), api.WhoAmIResponse)

    def add_member(self, grpc_address: str, member_id: int = 0,
                   raft_address: str = "") -> api.MembersResponse:
        request = api.AddMemberRequest(id=member_id, grpc_address=grpc_address, raft_address=raft_address,
                                       request_id=new_request_id())
        return self.call("AdminService", "AddMember", request, api.MembersResponse)

    def remove_member(self, member_id: int) -> api.MembersResponse:
        request = api.RemoveMemberRequest(id=member_id, request_id=new_request_id())
        return self.call("AdminService", "RemoveMember", request, api.MembersResponse)

    def list_members(self, stale: bool = False) -> api.MembersResponse:
        return self.call("AdminService", "ListMembers", api.ListMembersRequest(stale=stale),
                         api.MembersResponse)

    # -------------------------------------------------------------- transport

    def call(self, service: str, method: str, request: Message, response_class: type[M]) -> M:
        path = f"/xce.v1.{service}/{method}"
        data = request.SerializeToString()

        def attempt(target: str, timeout: float) -> M:
            raw = self.transport.unary(target, path, data, self.credentials.metadata(), timeout)
            return response_class.FromString(raw)

        return self._retrying(attempt)

    def save_snapshot(self, out: BinaryIO) -> tuple[api.BackupHeader, bytes]:
        """Write the leader's snapshot (controller/backup.py's body) to `out`, checked against the
        checksum the leader sends last; its header and that SHA-256. The opening is retried like a
        call; a stream broken later is an error (start again)."""
        import hashlib

        path = "/xce.v1.AdminService/SaveSnapshot"
        request = api.SaveSnapshotRequest().SerializeToString()

        def opening(target: str, timeout: float) -> tuple[Iterator[bytes], api.BackupChunk]:
            # The header comes once the copy is made; the rest within the deadline of the whole.
            metadata = self.credentials.metadata()
            stream = self.transport.stream(target, path, request, metadata, self.deadline_s)
            return stream, api.BackupChunk.FromString(next(stream))

        stream, first = self._retrying(opening)
        if not first.HasField("header"):
            raise XceError("INTERNAL", "the snapshot stream did not start with its header")
        header, digest, size = first.header, hashlib.sha256(), 0
        try:
            for raw in stream:
                chunk = api.BackupChunk.FromString(raw)
                if chunk.HasField("data"):
                    out.write(chunk.data)
                    digest.update(chunk.data)
                    size += len(chunk.data)
                elif chunk.HasField("sha256"):
                    if chunk.sha256 != digest.digest() or size != header.size:
                        raise XceError("DATA_LOSS", f"the snapshot arrived damaged ({size} of "
                                       f"{header.size} bytes, or a checksum that does not match)")
                    return header, digest.digest()
        except RpcFailure as exc:
            raise XceError(exc.code, f"the snapshot stream broke after {size} bytes: {exc.details}") from None
        raise XceError("UNAVAILABLE", f"the snapshot stream ended after {size} bytes, before its checksum")

    def _retrying(self, attempt: Callable[[str, float], T]) -> T:
        """attempt(target, timeout) until it returns, following leader hints, retrying what may pass."""
        deadline = time.monotonic() + self.deadline_s
        route = self.route
        route.reset()
        last = ""
        while True:
            target = route.target
            try:
                return attempt(target, min(self.call_timeout_s, max(0.1, deadline - time.monotonic())))
            except (RpcFailure, StopIteration) as exc:
                failure = exc if isinstance(exc, RpcFailure) else RpcFailure("UNAVAILABLE", "no answer")
                code, details = failure.code, failure.details
                leader = hint(failure.trailers)
                if code == "FAILED_PRECONDITION" and leader and self.follow_leader:
                    self.redirects += 1
                    if route.redirected(target, leader):
                        continue
                elif code not in RETRYABLE:
                    raise XceError(code, details) from None
                else:
                    route.failed(target)
                last = f"{code}: {details}"
            self.retries += 1
            if time.monotonic() + route.next_pause_s() > deadline:
                raise XceError("UNAVAILABLE", f"gave up after {self.deadline_s:.0f} s: {last}")
            time.sleep(route.pause_s())

    def prefer(self, address: str) -> None:
        """Send the next call to `address` (one known to lead, say), not to the last one tried."""
        self.route.target = address

    @property
    def target(self) -> str:
        """The replica the next call goes to (the leader, once a call found it)."""
        return self.route.target


def hint(trailers: Sequence[tuple[str, str]]) -> str | None:
    """The leader's address a follower named in its refusal, if any."""
    for key, value in trailers:
        if key == LEADER_METADATA and value:
            return value
    return None


