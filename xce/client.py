"""The client library: talks to any replica and follows the leader.

Theory of operation. Every call goes to the replica believed to lead. A
follower's FAILED_PRECONDITION with `x-xce-leader` moves the client there at
once; UNAVAILABLE (no leader yet, leader catching up, outcome unknown) or a
dead address moves it to the next replica after a jittered, capped backoff.
The request, and so its request id, is the same on every retry: a submit
retried across a failover creates exactly one job. Other errors are the
caller's (INVALID_ARGUMENT, NOT_FOUND, ...) and raise XceError at once.
Every call carries the caller's credentials (xce/credentials.py): the TLS
channel and the token or MUNGE metadata.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, TypeVar

import grpc
from google.protobuf.message import Message

from xce.credentials import Credentials
from xce.v1 import api_pb2 as api

LEADER_METADATA = "x-xce-leader"
M = TypeVar("M", bound=Message)
T = TypeVar("T")
# Outcomes unknown, so retried: every write carries a request id, which makes a repeat return the
# first answer. This client never cancels its own calls, so CANCELLED is the server's gRPC core
# giving up on one (seen once in a few runs while a leader of 5,000 worker streams stepped down).
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}


class XceError(Exception):
    """A call failed for good: the gRPC status code and the server's message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def new_request_id() -> str:
    return uuid.uuid4().hex


class Client:
    def __init__(self, addresses: Sequence[str], credentials: Credentials, deadline_s: float = 30.0,
                 call_timeout_s: float = 5.0,
                 max_backoff_s: float = 0.1, rng: random.Random | None = None,
                 follow_leader: bool = True) -> None:
        if not addresses:
            raise ValueError("no controller addresses")
        self.addresses = list(addresses)
        self.credentials = credentials
        self.deadline_s = deadline_s
        self.call_timeout_s = call_timeout_s
        # Short: an election takes well under a second, and a client that
        # backs off for seconds turns a 0.7 s failover into a 2 s one.
        self.max_backoff_s = max_backoff_s
        self.follow_leader = follow_leader
        self._rng = rng or random.Random()
        self._target = self.addresses[0]
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[tuple[str, str], Any] = {}
        self._tls_stamp = credentials.stamp()
        self.redirects = 0
        self.retries = 0

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._stubs.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- calls

    def submit(self, specs: Sequence[api.JobSpec], request_id: str | None = None) -> api.SubmitJobsResponse:
        request = api.SubmitJobsRequest(request_id=request_id or new_request_id(), jobs=specs)
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

    def history(self, request: api.HistoryRequest, limit: int = 0) -> list[api.Job]:
        """Finished jobs, newest first, page by page up to `limit` (0: all)."""
        jobs: list[api.Job] = []
        page_request = api.HistoryRequest()
        page_request.CopyFrom(request)
        while True:
            if limit:
                page_request.page_size = min(limit - len(jobs), 5000)
            page = self.call("JobService", "ListHistory", page_request, api.HistoryResponse)
            jobs.extend(page.jobs)
            page_request.page_token = page.next_page_token
            if not page.next_page_token or (limit and len(jobs) >= limit):
                return jobs[:limit] if limit else jobs

    def accounting(self, request: api.AccountingRequest) -> api.AccountingResponse:
        return self.call("JobService", "Accounting", request, api.AccountingResponse)

    def control(self, job_id: str | int, action: api.ControlAction,
                request_id: str | None = None) -> api.Job:
        request = api.ControlJobRequest(job_id=str(job_id), action=action,
                                        request_id=request_id or new_request_id())
        return self.call("JobService", "ControlJob", request, api.JobResponse).job

    def run(self, job_id: str | int, host: str, request_id: str | None = None) -> api.Job:
        request = api.RunJobRequest(job_id=str(job_id), host=host, request_id=request_id or new_request_id())
        return self.call("JobService", "RunJob", request, api.JobResponse).job

    def modify(self, job_id: str | int, priority: int | None = None, queue: str | None = None,
               resource_req: str | None = None) -> api.Job:
        request = api.ModifyJobRequest(job_id=str(job_id), request_id=new_request_id())
        if priority is not None:
            request.priority = priority
        if queue is not None:
            request.queue = queue
        if resource_req is not None:
            request.resource_req = resource_req
        return self.call("JobService", "ModifyJob", request, api.JobResponse).job

    def status(self, local_only: bool = False) -> api.StatusResponse:
        return self.call("ClusterService", "Status", api.StatusRequest(local_only=local_only),
                         api.StatusResponse)

    def list_hosts(self, stale: bool = False) -> api.ListHostsResponse:
        return self.call("ClusterService", "ListHosts", api.ListHostsRequest(stale=stale),
                         api.ListHostsResponse)

    def list_queues(self, stale: bool = False) -> api.ListQueuesResponse:
        return self.call("AdminService", "ListQueues", api.ListQueuesRequest(stale=stale),
                         api.ListQueuesResponse)

    def put_queue(self, queue: api.Queue, create: bool) -> api.QueueResponse:
        request = api.PutQueueRequest(queue=queue, request_id=new_request_id())
        method = "CreateQueue" if create else "UpdateQueue"
        return self.call("AdminService", method, request, api.QueueResponse)

    def create_token(self, sha256: str, user: str, role: str, expires_ms: int = 0,
                     description: str = "") -> api.TokenResponse:
        request = api.CreateTokenRequest(sha256=sha256, user=user, role=role, expires_ms=expires_ms,
                                         description=description, request_id=new_request_id())
        return self.call("AdminService", "CreateToken", request, api.TokenResponse)

    def revoke_token(self, token_id: str) -> api.TokenResponse:
        request = api.RevokeTokenRequest(id=token_id, request_id=new_request_id())
        return self.call("AdminService", "RevokeToken", request, api.TokenResponse)

    def list_tokens(self) -> list[api.TokenInfo]:
        return list(self.call("AdminService", "ListTokens", api.ListTokensRequest(),
                              api.ListTokensResponse).tokens)

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

        def attempt(target: str, timeout: float) -> M:
            response: M = self._stub(target, path, response_class)(request, timeout=timeout,
                                                                    metadata=self.credentials.metadata())
            return response

        return self._retrying(attempt)

    def save_snapshot(self, out: BinaryIO) -> tuple[api.BackupHeader, bytes]:
        """Write the leader's snapshot (controller/backup.py's body) to `out`, checked against the
        checksum the leader sends last; its header and that SHA-256. The opening is retried like a
        call; a stream broken later is an error (start again)."""
        path = "/xce.v1.AdminService/SaveSnapshot"

        def opening(target: str, timeout: float) -> tuple[Any, api.BackupChunk]:
            stream = self._channel(target).unary_stream(
                path, request_serializer=_serialize, response_deserializer=api.BackupChunk.FromString)(
                api.SaveSnapshotRequest(), metadata=self.credentials.metadata())
            return stream, next(stream)  # the header comes once the copy is made

        stream, first = self._retrying(opening)
        if not first.HasField("header"):
            raise XceError(grpc.StatusCode.INTERNAL, "the snapshot stream did not start with its header")
        header, digest, size = first.header, hashlib.sha256(), 0
        try:
            for chunk in stream:
                if chunk.HasField("data"):
                    out.write(chunk.data)
                    digest.update(chunk.data)
                    size += len(chunk.data)
                elif chunk.HasField("sha256"):
                    if chunk.sha256 != digest.digest() or size != header.size:
                        raise XceError(grpc.StatusCode.DATA_LOSS, f"the snapshot arrived damaged ({size} of "
                                       f"{header.size} bytes, or a checksum that does not match)")
                    return header, digest.digest()
        except grpc.RpcError as exc:
            raise XceError(exc.code(), f"the snapshot stream broke after {size} bytes: "
                                       f"{exc.details()}") from None
        raise XceError(grpc.StatusCode.UNAVAILABLE, f"the snapshot stream ended after {size} bytes, "
                       "before its checksum")

    def _retrying(self, attempt: Callable[[str, float], T]) -> T:
        """attempt(target, timeout) until it returns, following leader hints, retrying what may pass."""
        deadline = time.monotonic() + self.deadline_s
        backoff = 0.02
        last = ""
        hops = 0  # redirects followed without a pause; bounded in case two replicas point at each other
        while True:
            target = self._target
            try:
                return attempt(target, min(self.call_timeout_s, max(0.1, deadline - time.monotonic())))
            except grpc.RpcError as exc:
                code, details = exc.code(), exc.details() or ""
                leader = leader_hint(exc)
                if code == grpc.StatusCode.FAILED_PRECONDITION and leader and self.follow_leader:
                    self._target = leader
                    self.redirects += 1
                    hops += 1
                    if leader != target and hops <= len(self.addresses):
                        continue
                    hops = 0
                elif code not in RETRYABLE:
                    raise XceError(code, details) from None
                else:
                    self._target = self._next(target)
                last = f"{code.name}: {details}"
            self.retries += 1
            if time.monotonic() + backoff > deadline:
                raise XceError(grpc.StatusCode.UNAVAILABLE, f"gave up after {self.deadline_s:.0f} s: {last}")
            time.sleep(backoff * (0.5 + self._rng.random()))
            backoff = min(backoff * 2, self.max_backoff_s)

    def prefer(self, address: str) -> None:
        """Send the next call to `address` (one known to lead, say), not to the last one tried."""
        self._target = address

    def _next(self, address: str) -> str:
        if address not in self.addresses:
            return self.addresses[0]
        return self.addresses[(self.addresses.index(address) + 1) % len(self.addresses)]

    def _stub(self, address: str, path: str, response_class: type[Message]) -> Any:
        self._fresh()
        stub = self._stubs.get((address, path))
        if stub is None:
            stub = self._channel(address).unary_unary(path, request_serializer=_serialize,
                                                      response_deserializer=response_class.FromString)
            self._stubs[(address, path)] = stub
        return stub

    def _fresh(self) -> None:
        """TLS files rotated (xce/credentials.py): connect again, presenting and trusting the new ones."""
        stamp = self.credentials.stamp()
        if stamp != self._tls_stamp:
            self._tls_stamp = stamp
            for old in self._channels.values():
                old.close()
            self._channels.clear()
            self._stubs.clear()

    def _channel(self, address: str) -> grpc.Channel:
        self._fresh()
        channel = self._channels.get(address)
        if channel is None:
            channel = self.credentials.channel(address, channel_options())
            self._channels[address] = channel
        return channel


# A replica cut off by a partition drops packets instead of refusing them. Without
# these a call to it waits for its whole timeout and a stream for its silence
# watchdog; with them the transport itself notices: a connection silent for
# KEEPALIVE_MS is pinged, and one whose ping is not answered within KEEPALIVE_MS
# more is closed (UNAVAILABLE); a connection attempt (TCP, TLS, HTTP/2 settings)
# not done within CONNECT_TIMEOUT_MS fails. Pings are answered by gRPC's own
# threads, so a leader busy in Python is not taken for a dead one. The server
# allows pings this often (controller/grpc_api.py server_options).
KEEPALIVE_MS = 500
CONNECT_TIMEOUT_MS = 500


def channel_options(keepalive_ms: int = KEEPALIVE_MS) -> list[tuple[str, Any]]:
    """`keepalive_ms`: the workers, thousands of them, ping less often; their heartbeats notice a
    silent leader (worker/daemon.py)."""
    return [
        ("grpc.max_send_message_length", 1 << 20),
        ("grpc.max_receive_message_length", 16 << 20),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.http2.ping_timeout_ms", keepalive_ms),  # a ping's answer (default 1 min)
        # Also the kernel's TCP_USER_TIMEOUT (bytes sent, not acknowledged): lenient, for lossy links.
        ("grpc.keepalive_timeout_ms", 4 * keepalive_ms),
        ("grpc.http2.max_pings_without_data", 0),  # a stream only read from must ping too
        ("grpc.enable_retries", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),  # gRPC's name for the connect timeout
    ]


def _serialize(message: Message) -> bytes:
    return bytes(message.SerializeToString())


def leader_hint(exc: grpc.RpcError) -> str | None:
    """The leader's address a follower named in its refusal, if any."""
    trailing = exc.trailing_metadata() if isinstance(exc, grpc.Call) else None
    for key, value in trailing or ():
        if key == LEADER_METADATA and value:
            return str(value)
    return None
