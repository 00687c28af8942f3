"""The gRPC services of a replica: a thin adapter, and the one place errors become gRPC status.

Theory of operation. Requests arrive as raw bytes and are parsed here, so a
malformed message (bad protobuf, invalid UTF-8) is INVALID_ARGUMENT rather
than gRPC's INTERNAL. Writes go to the leader core through the replica
(`Replica.call`); reads are answered from the leader's applied state after its read barrier
(`Replica.read_barrier`: linearizable), or any replica's if the request says `stale`
(reads.py); the Sync stream follows sync_stream.SyncFeed; a worker's
Connect stream feeds the core its messages and sends what the core queues
for it, framed (xce/worker_wire.py). A ServiceError, wherever it was
raised, is mapped to its gRPC status by `abort`, with the leader's address
in the `x-xce-leader` trailing metadata when it names one.

Every call is authenticated first (authn.py: no credential, or a bad one,
UNAUTHENTICATED) and must hold the permission its method needs
(authz.METHOD_PERMISSION; else PERMISSION_DENIED naming it), before its
request is even parsed. Reads show each caller what it may see
(authz.visible, authz.redact); the leader checks the rest of a write.

Conventions (DESIGN.md): not the leader -> FAILED_PRECONDITION with
`x-xce-leader`; no leader -> UNAVAILABLE, after holding the call a while in
case one comes (Replica.leader_settled, within the caller's deadline); an
oversized request is refused by gRPC itself with RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import logging
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from controller import authz, backup, history_reads, reads, sync_reader, sync_stream
from controller.authn import Authenticator
from controller.authz import Principal
from controller.fsm import audit, membership, tokens
from controller.replica import Ended, Replica
from controller.replica_status import peer_status_full
from controller.store import StateStore
from xce import metrics, worker_wire
from xce.errors import ServiceError, invalid, unavailable
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 1 << 20
LEADER_METADATA = "x-xce-leader"
PROGRESS_S = 1.0  # a progress mark at least this often on an idle Sync stream
ANSWER_MARGIN_S = 0.1  # of a call's deadline, left for its answer when it is held for a leader

GRPC_STATUS: dict[int, grpc.StatusCode] = {
    log.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    log.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    log.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    log.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    log.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    log.OUT_OF_RANGE: grpc.StatusCode.OUT_OF_RANGE,
    log.INTERNAL: grpc.StatusCode.INTERNAL,
    log.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    log.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    log.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
}

M = TypeVar("M", bound=Message)
R = TypeVar("R")


async def abort(context: grpc.aio.ServicerContext, error: ServiceError) -> NoReturn:
    metadata = ((LEADER_METADATA, error.leader),) if error.leader else ()
    await context.abort(GRPC_STATUS.get(error.code, grpc.StatusCode.UNKNOWN), error.message,
                        trailing_metadata=metadata)
    raise AssertionError("context.abort returned")  # it raises


# Refusals a leader decides from a job's state before proposing: confirmed before they are answered.
STATE_REFUSALS = frozenset({log.NOT_FOUND, log.FAILED_PRECONDITION})
CONFIRMED_REFUSALS = frozenset({"ControlJob", "ModifyJob", "RunJob"})


def _peer_host(peer: str) -> str:
    """The host of a gRPC peer string (`ipv4:10.0.0.5:41234`, `ipv6:[::1]:41234`); "" for another kind."""
    kind, _, address = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return ""
    host = address.rpartition(":")[0]
    return urllib.parse.unquote(host).strip("[]")


def parse(message_class: type[M], raw: bytes) -> M:
    try:
        return message_class.FromString(raw)
    except DecodeError as exc:
        raise invalid(f"malformed {message_class.__name__} (bad protobuf or invalid UTF-8): {exc}") from None


def handlers(replica: Replica, authenticator: Authenticator) -> list[grpc.GenericRpcHandler]:
    services = _Services(replica, authenticator)
    unary = functools.partial(_unary_service, authenticator, replica.config.policy, replica.config.cluster_id)

    def write(method: str) -> Handler:
        async def call(request: Message, caller: Principal) -> Message:
            await replica.leader_settled(_HOLD_S.get())
            again = None
            if method in CONFIRMED_REFUSALS:
                again = type(request)()
                again.CopyFrom(request)  # as sent: the core makes the request id the caller's own key
            try:
                answer = await replica.call(method, request, caller)
            except ServiceError as exc:
                if again is None or exc.code not in STATE_REFUSALS or exc.leader:
                    raise
                # Refused from this leader's own state (no such job; not in a state for it), before
                # anything was proposed: a leader deposed unawares would answer from a stale state. So
                # the refusal is confirmed as a read is (ReadIndex: still the leader, with everything
                # committed until now applied) and the request decided again (docs/FAULTS.md).
                await replica.read_barrier()
                answer = await replica.call(method, again, caller)
            # A stored answer (a repeated request id, maybe another user's) shows what the caller may see.
            return services.shown(answer, caller)

        return call

    return [
        unary("xce.v1.JobService", {
            "SubmitJobs": (write("SubmitJobs"), api.SubmitJobsRequest),
            "GetJob": (services.get_job, api.GetJobRequest),
            "ListJobs": (services.list_jobs, api.ListJobsRequest),
            "ControlJob": (write("ControlJob"), api.ControlJobRequest),
            "ModifyJob": (write("ModifyJob"), api.ModifyJobRequest),
            "RunJob": (write("RunJob"), api.RunJobRequest),
            "ListHistory": (services.list_history, api.HistoryRequest),
            "Accounting": (services.accounting, api.AccountingRequest),
            "GetJobOutput": (write("GetJobOutput"), api.JobOutputRequest),  # the leader asks the worker
            "PutJobGroup": (write("PutJobGroup"), api.PutJobGroupRequest),
            "PutReservation": (write("PutReservation"), api.PutReservationRequest),
        }),
        unary("xce.v1.ClusterService", {
            "Status": (lambda request, caller: replica.status(request), api.StatusRequest),
            "ListHosts": (services.list_hosts, api.ListHostsRequest),
            "ControlHost": (write("ControlHost"), api.ControlHostRequest)}),
        grpc.method_handlers_generic_handler("xce.v1.SyncService", {
            "Sync": grpc.unary_stream_rpc_method_handler(services.sync)}),
        grpc.method_handlers_generic_handler("xce.v1.AdminService", {
            "SaveSnapshot": grpc.unary_stream_rpc_method_handler(services.save_snapshot)}),
        grpc.method_handlers_generic_handler("xce.v1.WorkerService", {
            "Connect": grpc.stream_stream_rpc_method_handler(services.worker_connect)}),
        unary("xce.v1.SchedulerService", {
            "AcquireLease": (write("AcquireLease"), api.LeaseRequest),
            "SubmitDecisions": (write("SubmitDecisions"), api.DecisionBatch),
        }),
        unary("xce.v1.AdminService", {
            "CreateQueue": (write("CreateQueue"), api.PutQueueRequest),
            "UpdateQueue": (write("UpdateQueue"), api.PutQueueRequest),
            "ListQueues": (services.list_queues, api.ListQueuesRequest),
            "CreateToken": (write("CreateToken"), api.CreateTokenRequest),
            "RevokeToken": (write("RevokeToken"), api.RevokeTokenRequest),
            "ListTokens": (services.list_tokens, api.ListTokensRequest),
            "WhoAmI": (services.who_am_i, api.WhoAmIRequest),
            "ListAudit": (services.list_audit, api.ListAuditRequest),
            "RecordAudit": (write("RecordAudit"), api.RecordAuditRequest),
            "AddMember": (services.add_member, api.AddMemberRequest),
            "RemoveMember": (write("RemoveMember"), api.RemoveMemberRequest),
            "ListMembers": (services.list_members, api.ListMembersRequest),
            "Reconfigure": (lambda request, caller: replica.reconfigure(request.dry_run),
                            api.ReconfigureRequest),
        }),
    ]


class _Services:
    def __init__(self, replica: Replica, authenticator: Authenticator) -> None:
        self.replica = replica
        self.authenticator = authenticator
        self.policy = replica.config.policy
        self._sync_streams: dict[tuple[str, str], int] = {}  # per principal (role, name): open Sync streams
        replica.sync_streams_open = lambda: sum(self._sync_streams.values())  # for its metrics
        # Per open stream whose daemon said where it serves its metrics (Sync, a worker's join): Status.
        self._daemons: dict[object, api.Daemon] = {}
        replica.daemons = lambda: sorted(self._daemons.values(), key=lambda d: (d.kind, d.name))

    async def _caller(self, context: grpc.aio.ServicerContext, permission: str) -> Principal:
        return await _authorized(self.authenticator, self.policy, self.replica.config.cluster_id, context,
                                 permission)

    # -------------------------------------------------------------- reads

    def _viewer(self, caller: Principal) -> reads.Viewer:
        policy = self.policy

        def view(job: api.Job) -> api.Job | None:  # (each job a read's own copy, parsed for it)
            return authz.redact(policy, caller, job, in_place=True) if authz.visible(policy, caller, job) \
                else None

        return view

    def shown(self, response: Message, caller: Principal) -> Message:
        """A write's answer with its jobs as the caller may see them (authz.visible, authz.redact)."""
        view = self._viewer(caller)
        if isinstance(response, api.SubmitJobsResponse):
            jobs = [shown for job in response.jobs if (shown := view(job)) is not None]
            return api.SubmitJobsResponse(jobs=jobs, revision=response.revision, dry_run=response.dry_run)
        if isinstance(response, api.JobResponse) and response.HasField("job"):
            shown = view(response.job)
            if shown is None:
                raise ServiceError(log.NOT_FOUND, f"no job {response.job.id}")
            return api.JobResponse(job=shown, revision=response.revision, dry_run=response.dry_run)
        return response

    async def _barrier(self, stale: bool) -> None:
        if not stale:
            await self.replica.leader_settled(_HOLD_S.get())
            await self.replica.read_barrier()

    async def get_job(self, request: api.GetJobRequest, caller: Principal) -> api.JobResponse:
        await self._barrier(request.stale)
        with self.replica.store.read() as tables:
            return reads.get_job(tables, request, self._viewer(caller))

    async def list_jobs(self, request: api.ListJobsRequest, caller: Principal) -> api.ListJobsResponse:
        listing = reads.JobListing(request, self._viewer(caller))
        await self._barrier(request.stale)
        return await asyncio.to_thread(self._read, listing.read)

    async def list_history(self, request: api.HistoryRequest, caller: Principal) -> api.HistoryResponse:
        listing = history_reads.HistoryListing(request, self._viewer(caller))
        await self._barrier(request.stale)
        return await asyncio.to_thread(self._read, listing.read)

    async def accounting(self, request: api.AccountingRequest, caller: Principal) -> api.AccountingResponse:
        # With private_jobs, a user's totals are as private as its jobs.
        only = None if not self.policy.private_jobs or self.policy.allows(caller, "jobs.read.all") \
            else caller.name
        await self._barrier(request.stale)
        return await asyncio.to_thread(self._read, functools.partial(history_reads.accounting,
                                                                     request=request, only_user=only))

    async def list_queues(self, request: api.ListQueuesRequest, caller: Principal) -> api.ListQueuesResponse:
        await self._barrier(request.stale)
        if not request.user_bounds:
            return self._read(reads.list_queues)
        policy = self.policy
        bounds = api.UserBounds(max_pend_jobs_per_user=policy.max_pend_jobs_per_user,
                                submit_rate_per_user=policy.submit_rate_per_user,
                                submit_burst_per_user=policy.submit_burst_per_user,
                                exempt_roles=sorted(policy.limits_exempt_roles),
                                max_jobs_per_request=policy.max_jobs_per_request,
                                max_array_size=policy.max_array_size, user=caller.name,
                                exempt=policy.exempt(caller))

        def read(tables: Any) -> api.ListQueuesResponse:
            answer = reads.list_queues(tables)
            # Counted as far as it matters: past the limit (a million, without one) the number says enough.
            enough = (policy.max_pend_jobs_per_user or 1_000_000) + 1
            bounds.pending = reads.pending_of(tables, caller.name, enough)
            answer.user_bounds.CopyFrom(bounds)
            return answer

        return self._read(read)

    async def list_hosts(self, request: api.ListHostsRequest, caller: Principal) -> api.ListHostsResponse:
        await self._barrier(request.stale)
        return self._read(reads.list_hosts)

    async def list_tokens(self, request: api.ListTokensRequest, caller: Principal) -> api.ListTokensResponse:
        await self._barrier(False)
        with self.replica.store.read() as tables:
            return api.ListTokensResponse(tokens=tokens.list_tokens(tables),
                                          revision=self.replica.store.meta().applied_index)

    async def list_audit(self, request: api.ListAuditRequest, caller: Principal) -> api.ListAuditResponse:
        """The audit trail, newest first: everyone's with audit.read, else one's own rows."""
        principal = request.principal
        if not self.policy.allows(caller, "audit.read"):
            if principal and principal != caller.name:
                raise authz.denied(caller, "audit.read", f"read {principal}'s audit trail")
            principal = caller.name
        size = request.page_size or 500
        if not 0 < size <= 5000:
            raise invalid("page_size is between 1 and 5000")
        await self._barrier(False)
        with self.replica.store.read() as tables:
            rows, token = audit.read(tables, principal, request.since_ms, size, request.page_token)
            return api.ListAuditResponse(records=rows, next_page_token=token,
                                         revision=self.replica.store.meta().applied_index)

    async def who_am_i(self, request: api.WhoAmIRequest, caller: Principal) -> api.WhoAmIResponse:
        return api.WhoAmIResponse(name=caller.name, role=caller.role, via=caller.via,
                                  kind=caller.role if caller.role in ("worker", "scheduler", "replica")
                                  else "user", permissions=sorted(self.policy.permissions(caller)),
                                  sees_every_job=self._sees_every_job(caller), scope=caller.scope,
                                  cluster_id=self.replica.config.cluster_id)

    def _sees_every_job(self, caller: Principal) -> bool:
        policy = self.policy
        return policy.allows(caller, "jobs.read") and (not policy.private_jobs
                                                       or policy.allows(caller, "jobs.read.all"))

    # -------------------------------------------------------------- membership

    async def add_member(self, request: api.AddMemberRequest, caller: Principal) -> api.MembersResponse:
        """The new replica must be running as a learner of this cluster already: it is asked first,
        and what it says of itself (its id, its Raft address) must agree with the request."""
        replica = self.replica
        await replica.leader_settled(_HOLD_S.get())
        if replica.core.serving_term() is None:
            raise replica.core.refusal()
        membership.check_address(request.grpc_address, "gRPC address")
        for member in replica.members():
            if request.grpc_address in (member.grpc_address, member.raft_address):
                raise ServiceError(log.ALREADY_EXISTS, f"address {request.grpc_address} is replica "
                                                       f"{member.id}'s")
        answer = await peer_status_full(replica.peer_credentials, request.grpc_address)
        if isinstance(answer, str):
            raise ServiceError(log.FAILED_PRECONDITION,
                               f"no replica answers at {request.grpc_address} ({answer}): start it first "
                               "with its bundle, `xce controller --config ... --id N --join`")
        new = answer.replicas[0]
        if answer.cluster_id != replica.config.cluster_id:
            raise ServiceError(log.FAILED_PRECONDITION, f"the replica at {request.grpc_address} is of "
                                                        f"cluster {answer.cluster_id!r}, not this one")
        if new.role != "learner":
            raise ServiceError(log.FAILED_PRECONDITION,
                               f"the replica at {request.grpc_address} is a {new.role}, not a learner: "
                               "start a new replica with --join on an empty data directory")
        for field, mine, theirs in (("id", request.id, new.id), ("Raft address", request.raft_address,
                                                                 new.raft_address)):
            if mine and mine != theirs:
                raise invalid(f"the replica at {request.grpc_address} says its {field} is {theirs}, "
                              f"not {mine}")
        request.id, request.raft_address = new.id, new.raft_address
        response = await replica.call("AddMember", request, caller)
        assert isinstance(response, api.MembersResponse)
        return response

    async def list_members(self, request: api.ListMembersRequest, caller: Principal) -> api.MembersResponse:
        await self._barrier(request.stale)
        replica = self.replica
        status = await replica.status(api.StatusRequest())
        return api.MembersResponse(members=status.members, bootstrap=status.bootstrap,
                                   revision=replica.store.meta().applied_index, replicas=status.replicas)

    def _read(self, read: Callable[[Any], R]) -> R:
        with self.replica.store.read() as tables:
            return read(tables)

    # -------------------------------------------------------------- Sync

    async def sync(self, raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """Leader only: snapshot or events from a revision, then a live tail (sync_stream.py)."""
        replica, clock = self.replica, self.replica.clock
        counted: tuple[str, str] | None = None  # the principal whose open streams this one counts in
        try:
            caller = await self._caller(context, "state.sync")
            who = (caller.role, caller.name)
            if self._sync_streams.get(who, 0) >= replica.config.max_sync_streams:
                raise ServiceError(log.RESOURCE_EXHAUSTED,
                                   f"{caller.name} has {replica.config.max_sync_streams} Sync streams open "
                                   "already ([auth] max_sync_streams)")
            if sum(self._sync_streams.values()) >= replica.config.max_sync_streams_total:
                raise ServiceError(log.RESOURCE_EXHAUSTED,
                                   f"this replica serves {replica.config.max_sync_streams_total} Sync "
                                   "streams already ([auth] max_sync_streams_total); retry later")
            self._sync_streams[who] = self._sync_streams.get(who, 0) + 1
            counted = who
            request = parse(log.SyncRequest, raw)
            self._announced(context, caller, request.metrics_address)
            # Held no longer than a progress mark's period: the scheduler takes a silent stream for dead.
            await replica.leader_settled(min(hold_s(context), PROGRESS_S))
            term = replica.core.serving_term()
            if term is None:
                raise replica.core.refusal()
            feed = sync_stream.SyncFeed(request, replica.config.cluster_id)
            # Read in a thread of its own, a chunk at a time (sync_reader.py); progress marks
            # meanwhile keep the watcher from taking the stream for dead.
            async for serialized in sync_reader.opening(
                    feed, replica.store.read,
                    lambda: log.SyncMessage(progress=replica.store.meta().applied_index).SerializeToString(),
                    PROGRESS_S / 2):
                yield serialized
            last_progress = float("-inf")
            while True:
                if replica.core.serving_term() != term:
                    refusal = replica.core.refusal()
                    raise refusal if refusal.leader else unavailable("leadership changed; reconnect")
                applied = replica.applied
                messages, more, revision = self._read(feed.next)
                for message in messages:
                    yield message.SerializeToString()
                if more:
                    continue
                if clock.monotonic_s() - last_progress >= PROGRESS_S:
                    last_progress = clock.monotonic_s()
                    yield log.SyncMessage(progress=revision).SerializeToString()
                try:
                    await asyncio.wait_for(applied.wait(), PROGRESS_S)
                except TimeoutError:
                    pass
        except ServiceError as exc:
            await abort(context, exc)
        finally:
            self._daemons.pop(context, None)
            if counted is not None:
                left = self._sync_streams[counted] - 1
                if left > 0:
                    self._sync_streams[counted] = left
                else:
                    del self._sync_streams[counted]

    def _announced(self, context: grpc.aio.ServicerContext, caller: Principal, address: str) -> None:
        """A daemon said, opening its stream, where it serves its metrics: shown in Status while the
        stream is open (a wildcard host is the connection's own, as this replica sees it)."""
        if address:
            reachable = metrics.reachable(address[:200], _peer_host(context.peer()))
            self._daemons[context] = api.Daemon(kind=caller.role, name=caller.name, metrics_address=reachable,
                                                replica=self.replica.me.id)

    # -------------------------------------------------------------- backups

    async def save_snapshot(self, raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """A consistent copy of the state (controller/backup.py): header, chunks, checksum."""
        replica = self.replica
        try:
            caller = await self._caller(context, "cluster.backup")
            parse(api.SaveSnapshotRequest, raw)
            await replica.leader_settled(hold_s(context))
            await replica.read_barrier()
            path = await asyncio.to_thread(backup.copy_state, replica.store, replica.data_dir)
        except ServiceError as exc:
            await abort(context, exc)
        try:
            header, _ = StateStore.read_snapshot_header(path)
            revision = int(header["applied_index"])
            yield api.BackupChunk(header=api.BackupHeader(
                cluster_id=str(header["cluster_id"]), revision=revision,
                size=path.stat().st_size)).SerializeToString()
            digest = hashlib.sha256()
            chunks = backup.chunks(path)
            while data := await asyncio.to_thread(next, chunks, b""):
                digest.update(data)
                yield api.BackupChunk(data=data).SerializeToString()
            yield api.BackupChunk(sha256=digest.digest()).SerializeToString()
            logger.info("snapshot at revision %d (%d bytes) saved by %s", revision, path.stat().st_size,
                        caller.name)
        finally:
            path.unlink(missing_ok=True)

    # -------------------------------------------------------------- workers

    async def worker_connect(self, requests: AsyncIterator[bytes],
                             context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """One worker's stream: its messages to the leader core, the core's to it, framed."""
        replica = self.replica
        try:
            caller = await self._caller(context, "worker.connect")
        except ServiceError as exc:
            await abort(context, exc)
        if await replica.leader_settled(hold_s(context)):  # held through an election: not all at once
            await asyncio.sleep(replica.rejoin_pause_s())
        stream, outgoing = replica.worker_opened(caller.name)
        reader = asyncio.get_running_loop().create_task(self._read_worker(stream, requests, context, caller))
        error: ServiceError | None = None
        try:
            while True:
                item = await outgoing.get()
                if isinstance(item, Ended):
                    error = item.error
                    break
                frame, ended = list(item), None
                while not outgoing.empty() and len(frame) < worker_wire.MAX_PER_FRAME:
                    queued = outgoing.get_nowait()
                    if isinstance(queued, Ended):
                        ended = queued
                        break
                    frame += queued
                for raw in worker_wire.controller_frames(frame):  # bounded by count and by bytes
                    yield raw
                if ended is not None:
                    error = ended.error
                    break
        finally:
            reader.cancel()
            self._daemons.pop(context, None)
            replica.worker_closed(stream)
        if error is not None:
            await abort(context, error)

    async def _read_worker(self, stream: int, requests: AsyncIterator[bytes],
                           context: grpc.aio.ServicerContext, caller: Principal) -> None:
        error: ServiceError | None = None
        try:
            async for raw in requests:
                message = parse(api.WorkerMessage, raw)
                if message.HasField("join") and message.join.metrics_address:
                    self._announced(context, caller, message.join.metrics_address)
                    message.join.ClearField("metrics_address")  # Status's, not the host record's
                self.replica.worker_message(stream, message)
        except ServiceError as exc:  # a malformed message ends the stream with that error
            error = exc
        except asyncio.CancelledError:
            raise
        except (grpc.aio.AioRpcError, ConnectionError):
            pass  # the call broke (the worker went away): the stream ends
        except Exception:  # a bug handling the message: say so; the worker re-joins
            logger.exception("a worker stream failed")
        self.replica.end_worker_stream(stream, error)  # None: the worker hung up


Handler = Callable[[Any, Principal], Awaitable[Message]]

# How long this call may wait for a leader (Replica.leader_settled), for the handlers that need one;
# set per call, each of which runs in a task (and a context) of its own.
_HOLD_S: contextvars.ContextVar[float] = contextvars.ContextVar("hold_s", default=0.0)


def hold_s(context: grpc.aio.ServicerContext) -> float:
    """What the caller's deadline leaves for waiting on a leader, less the time the answer takes back."""
    remaining = context.time_remaining()
    return float("inf") if remaining is None else max(0.0, remaining - ANSWER_MARGIN_S)


def _unary_service(authenticator: Authenticator, policy: authz.Policy, cluster_id: str, name: str,
                   methods: dict[str, tuple[Handler, type[Message]]]) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        name, {method: grpc.unary_unary_rpc_method_handler(
            _unary(authenticator, policy, cluster_id, authz.METHOD_PERMISSION.get(method), fn, cls,
                   write=method in LEADER_WRITES, anywhere=method in ANY_CLUSTER))
            for method, (fn, cls) in methods.items()})


# The writes the leader core takes (leader/writes.py: Writes.table): it checks what the gRPC layer leaves.
LEADER_WRITES = frozenset({"SubmitJobs", "ControlJob", "ModifyJob", "RunJob", "CreateQueue", "UpdateQueue",
                           "CreateToken", "RevokeToken", "RemoveMember", "ControlHost", "GetJobOutput",
                           "RecordAudit"})


# What a key scoped to other clusters (TokenScope.clusters) may still ask here: who it is (the gateway
# asks), and to leave the gateway's row of what it did on one of those.
ANY_CLUSTER = frozenset({"WhoAmI", "RecordAudit"})


def _unary(authenticator: Authenticator, policy: authz.Policy, cluster_id: str, permission: str | None,
           fn: Handler, request_class: type[Message], write: bool = False,
           anywhere: bool = False) -> Callable[..., Awaitable[bytes]]:
    async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            caller = await _authorized(authenticator, policy, "" if anywhere else cluster_id, context,
                                       permission, write)
            _HOLD_S.set(hold_s(context))
            response = await fn(parse(request_class, raw), caller)
        except ServiceError as exc:
            await abort(context, exc)
        return response.SerializeToString()

    return handle


async def _authorized(authenticator: Authenticator, policy: authz.Policy, cluster_id: str,
                      context: grpc.aio.ServicerContext, permission: str | None,
                      write: bool = False) -> Principal:
    """The proven caller, if it holds `permission` (None: any authenticated caller) and its key's
    scope takes `cluster_id` ("": any cluster will do). A write the leader decides on is let through
    to it when the leader checks its permission (the job writes), or holds a scoped key to its scope:
    either way a denial is recorded (controller/audit_trail.py)."""
    caller = await authenticator.principal(context)
    if caller.scope is not None:
        if cluster_id and caller.scope.clusters and cluster_id not in caller.scope.clusters:
            raise authz.out_of_scope(caller, f"this cluster, {cluster_id}, is not among its clusters "
                                             f"({', '.join(caller.scope.clusters)})")
        if write:
            return caller
        if permission is not None and permission not in authz.SCOPED_PERMISSIONS:
            raise authz.out_of_scope(caller, f"a scoped key may not read with {permission}")
    if permission is not None and not (write and permission in authz.LEADER_CHECKED):
        policy.require(caller, permission)
    return caller


def server_options(handshake_timeout_s: float = 10.0,
                   idle_connection_timeout_s: float = 600.0) -> list[tuple[str, Any]]:
    """The server's channel options. A connection that has not finished its TLS handshake within
    `handshake_timeout_s` is closed (gRPC's default waits 120 s: half-open handshakes from one local
    user held every descriptor), and one without a call for `idle_connection_timeout_s` is told to go
    (GOAWAY; clients reconnect as they need)."""
    return [
        ("grpc.server_handshake_timeout_ms", int(handshake_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(idle_connection_timeout_s * 1000)),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", 16 * MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        # Clients ping every client.grpc_transport.KEEPALIVE_MS without word, to notice a partition,
        # besides gRPC's own pings that size the flow-control window: never answer pings
        # with GOAWAY "too_many_pings" (which fails every call on the connection).
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 250),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.so_reuseport", 0),
    ]
