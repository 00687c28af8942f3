"""One controller replica: state store, Raft node and the gRPC services.

Theory of operation. Writes are served by the leader only. A follower
answers FAILED_PRECONDITION with trailing metadata `x-xce-leader: host:port`;
with no leader known, UNAVAILABLE. The leader checks a request against its
applied state first (bad input never reaches the log and changes nothing),
stamps time and its replica id into an entry, proposes it and waits for it
to be applied. Apply re-checks (the state may have moved) and records one
Result per request id; when the proposal's callback is lost or ambiguous,
the Result in the `requests` table is the answer, and if there is none the
client is told UNAVAILABLE and retries with the same request id.

A new leader serves writes only after the first entry of its term (Raft's
no-op) is applied, so every pre-check sees every earlier commit; then it
pushes the configuration file's queues and limits if they differ from the
committed ones.

Reads (GetJob, ListJobs, ListQueues, Status) are answered by any replica
from its own applied state; the response carries the revision it reflects.

Requests arrive as raw bytes and are parsed here, so a malformed message
(bad protobuf, invalid UTF-8) is INVALID_ARGUMENT rather than gRPC's INTERNAL.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from controller import fsm, job_filter, sync_stream
from controller.config import ClusterConfig
from controller.group_commit import GroupCommit
from controller.host_liveness import Liveness
from controller.raft import SUCCESS, RaftNode
from controller.store import StateStore
from controller.worker_session import WorkerSession, route
from xce import worker_wire
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 1 << 20
PROPOSAL_TIMEOUT_S = 10.0
SLOW_COMMIT_S = 1.0  # worth a warning in the log
LEADER_METADATA = "x-xce-leader"
PROGRESS_S = 1.0  # a progress mark at least this often on an idle Sync stream
MAX_DECISIONS = 10_000
MAX_REPORTS_PER_ENTRY = 4096
MAX_PAGE_SIZE = 5000
DEFAULT_PAGE_SIZE = 500


M = TypeVar("M", bound=Message)


class ApiError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str,
                 metadata: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.metadata = metadata


def _status_code(code: int) -> grpc.StatusCode:
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status
    return grpc.StatusCode.UNKNOWN


def _rejected(exc: fsm.Rejected) -> ApiError:
    return ApiError(_status_code(exc.code), exc.message)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Replica:
    def __init__(self, config: ClusterConfig, replica_id: int) -> None:
        self.config = config
        self.me = config.replica(replica_id)
        data_dir = config.replica_dir(replica_id)
        self.store = StateStore(data_dir / "state", config.cluster_id)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._push_task: asyncio.Task[None] | None = None
        self._configured = False  # this leadership pushed (or matched) the configuration
        self._liveness: Liveness | None = None  # this leadership's heartbeat bookkeeping
        self._liveness_task: asyncio.Task[None] | None = None
        self._applied = asyncio.Event()  # replaced and set after every applied entry
        self._sessions: dict[str, WorkerSession] = {}  # this leader's worker streams, by host
        self._applied_lock = threading.Lock()
        self._applied_indices: list[int] = []  # applied, not yet woken for (tick thread -> loop)
        self.raft = RaftNode(self.me.raft, [r.raft for r in config.replicas], data_dir,
                             config.password, self.store, config.raft,
                             on_role_change=self._role_changed, on_applied=self._entry_applied)
        self.batcher: GroupCommit[api.SubmitJobsRequest] = GroupCommit(
            self._propose_submits, config.group_commit_max_requests, config.group_commit_max_bytes,
            config.group_commit_max_in_flight)
        self.reports: GroupCommit[log.HostReport] = GroupCommit(self._propose_reports, MAX_REPORTS_PER_ENTRY)
        self.joins: GroupCommit[api.HostSpec] = GroupCommit(self._propose_joins, MAX_REPORTS_PER_ENTRY)

    # -------------------------------------------------------------- leadership

    def _entry_applied(self, index: int) -> None:  # tick thread
        if self._loop is None:
            return
        with self._applied_lock:
            self._applied_indices.append(index)
            if len(self._applied_indices) > 1:
                return  # a wake is scheduled already; it takes this index too
        self._loop.call_soon_threadsafe(self._wake_appliers)

    def _wake_appliers(self) -> None:
        with self._applied_lock:
            indices, self._applied_indices = self._applied_indices, []
        event, self._applied = self._applied, asyncio.Event()
        event.set()
        if self._sessions:
            self._route_to_sessions(indices)

    def _route_to_sessions(self, indices: list[int]) -> None:
        """Each session hears of the jobs the entries changed on its host (worker_session.py)."""
        with self.store.read() as tables:
            raws = [tables.get("events", fsm.revision_key(index)) for index in indices]
        if any(raw is None for raw in raws):  # pruned already: everyone derives from the state
            for each in self._sessions.values():
                each.changed_unknown()
            return
        for index, raw in zip(indices, raws, strict=True):
            assert raw is not None
            routed = route(log.Event.FromString(raw))
            for name in routed.jobs.keys() | routed.hosts:
                session = self._sessions.get(name)
                if session is not None:
                    session.changed(index, routed.jobs.get(name, []), host_record=name in routed.hosts)

    def _role_changed(self, role: str) -> None:  # tick thread
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_role, role)

    def _on_role(self, role: str) -> None:
        if role != "leader":
            self._configured = False
            self._liveness = None
            if self._liveness_task is not None:
                self._liveness_task.cancel()
            return
        loop = asyncio.get_running_loop()
        if self._push_task is None or self._push_task.done():
            self._push_task = loop.create_task(self._push_config())
        if self._liveness is None:
            self._liveness = Liveness(time.monotonic(), self.config.heartbeat_timeout_s)
            self._liveness_task = loop.create_task(self._watch_heartbeats(self._liveness))

    async def _watch_heartbeats(self, liveness: Liveness) -> None:
        """Leader only: commit UNAVAIL for hosts whose heartbeats stopped."""
        while self._liveness is liveness:
            await asyncio.sleep(self.config.heartbeat_s / 2)
            if not (self.raft.ready_to_serve() and self._configured):
                continue
            with self.store.read() as tables:
                hosts = [api.Host.FromString(raw) for _, raw in tables.scan("hosts")]
            for name, generation in liveness.overdue(hosts, time.monotonic()):
                change = log.SetHostStatus(name=name, generation=generation, status=api.HOST_UNAVAIL)
                results, err = await self.propose(log.Entry(host_status=change))
                if err == SUCCESS and results and results[0].code == log.OK:
                    logger.warning("host %s (generation %d) missed its heartbeats: UNAVAIL", name, generation)
            for host in self._lost_hosts(hosts):
                change = log.SetHostStatus(name=host.spec.name, generation=host.generation)
                results, err = await self.propose(log.Entry(resolve_host=change))
                if err == SUCCESS and results and results[0].code == log.OK:
                    logger.warning("host %s lost: jobs %s requeued or ended", host.spec.name,
                                   list(results[0].job_ids))

    def _lost_hosts(self, hosts: list[api.Host]) -> list[api.Host]:
        """Unavailable past the second timeout, with UNKWN jobs still to settle."""
        deadline_ms = int(time.time() * 1000) - int(self.config.unknown_timeout_s * 1000)
        lost = []
        with self.store.read() as tables:
            for host in hosts:
                if host.status != api.HOST_UNAVAIL or host.status_time_ms > deadline_ms:
                    continue
                jobs = (fsm.read_job(tables, i) for i in fsm.host_job_ids(tables, host.spec.name))
                if any(j is not None and j.state == api.UNKWN for j in jobs):
                    lost.append(host)
        return lost

    async def _push_config(self) -> None:
        """Propose the configuration once this leader serves, if it changed.

        Nothing is proposed when the committed state already matches, so a
        restart of the whole cluster leaves the revision where it was.
        """
        config = self.config
        init = log.InitCluster(cluster_id=config.cluster_id, default_queue=config.default_queue,
                               max_slots_per_job=config.max_slots_per_job,
                               config_digest=config.digest(), queues=config.queues,
                               events_kept=config.events_kept)
        while self.raft.is_leader():
            if not self.raft.ready_to_serve():
                await asyncio.sleep(0.01)
                continue
            meta = self.store.meta()
            if (meta.cluster_id, meta.default_queue, meta.max_slots_per_job, meta.config_digest) == (
                    init.cluster_id, init.default_queue, init.max_slots_per_job, init.config_digest):
                self._configured = True
                return
            results, err = await self.propose(log.Entry(init=init))
            if err == SUCCESS and results:
                if results[0].code != log.OK:
                    logger.error("configuration push rejected: %s", results[0].message)
                self._configured = True
                return
            await asyncio.sleep(0.05)

    def require_leader(self) -> None:
        if self.raft.is_leader():
            if not (self.raft.ready_to_serve() and self._configured):
                raise ApiError(grpc.StatusCode.UNAVAILABLE, "leader is catching up; retry")
            return
        leader = self.config.grpc_for_raft(self.raft.leader())
        if leader is None:
            raise ApiError(grpc.StatusCode.UNAVAILABLE, "no leader elected; retry")
        raise ApiError(grpc.StatusCode.FAILED_PRECONDITION, f"not the leader; the leader is {leader}",
                       ((LEADER_METADATA, leader),))

    # -------------------------------------------------------------- proposing

    async def propose(self, entry: log.Entry) -> tuple[list[log.Result] | None, int]:
        """Stamp, replicate, wait for apply: (results or None, pysyncobj error)."""
        loop = asyncio.get_running_loop()
        entry.stamp_ms = _now_ms()
        entry.proposer = self.me.id
        future: asyncio.Future[tuple[Any, int]] = loop.create_future()

        def done(result: Any, error: int) -> None:  # tick thread
            loop.call_soon_threadsafe(_resolve, future, (result, error))

        started = time.monotonic()
        self.raft.propose(entry.SerializeToString(), done)
        try:
            result, error = await asyncio.wait_for(future, PROPOSAL_TIMEOUT_S)
        except TimeoutError:
            logger.warning("a %s entry was not applied within %.0f s", entry.WhichOneof("body"),
                           PROPOSAL_TIMEOUT_S)
            return None, -1
        if (took := time.monotonic() - started) > SLOW_COMMIT_S:
            logger.warning("slow commit: a %s entry took %.1f s to apply", entry.WhichOneof("body"), took)
        return result, error

    async def _propose_reports(self, reports: list[log.HostReport]) -> list[log.Result | None]:
        results, err = await self.propose(log.Entry(reports=log.HostReports(reports=reports)))
        if err == SUCCESS and results is not None and len(results) == len(reports):
            return list(results)
        return [None] * len(reports)

    async def _propose_joins(self, joins: list[api.HostSpec]) -> list[log.Result | None]:
        results, err = await self.propose(log.Entry(joins=log.HostJoins(joins=joins)))
        if err == SUCCESS and results is not None and len(results) == len(joins):
            return list(results)
        return [None] * len(joins)

    async def _propose_submits(self, requests: list[api.SubmitJobsRequest]) -> list[log.Result | None]:
        results, err = await self.propose(log.Entry(submit=log.SubmitBatch(requests=requests)))
        if err == SUCCESS and results is not None:
            return list(results)
        return [None] * len(requests)

    def _settled(self, request_id: str, result: log.Result | None) -> log.Result:
        """The result, or the committed one if the callback was lost or ambiguous."""
        if result is None and request_id:
            with self.store.read() as tables:
                result = fsm.read_result(tables, request_id)
        if result is None:
            raise ApiError(grpc.StatusCode.UNAVAILABLE,
                           "the outcome is not known yet (leader change?); retry with the same request id")
        if result.code != log.OK:
            raise ApiError(_status_code(result.code), result.message)
        return result

    async def _propose_one(self, entry: log.Entry, request_id: str) -> log.Result:
        results, err = await self.propose(entry)
        return self._settled(request_id, results[0] if err == SUCCESS and results else None)

    # -------------------------------------------------------------- JobService

    async def submit_jobs(self, request: api.SubmitJobsRequest) -> api.SubmitJobsResponse:
        self.require_leader()
        _ensure_request_id(request)
        with self.store.read() as tables:
            earlier = fsm.read_result(tables, request.request_id)
            if earlier is None:
                if not request.jobs:
                    raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "no jobs in the request")
                meta = fsm.read_meta(tables)
                try:
                    for spec in request.jobs:
                        fsm.check_spec(tables, meta, spec)
                except fsm.Rejected as exc:
                    raise _rejected(exc) from None
        if earlier is None:
            earlier = await self.batcher.submit(request)
        result = self._settled(request.request_id, earlier)
        with self.store.read() as tables:
            jobs = [fsm.read_job(tables, job_id) for job_id in result.job_ids]
        return api.SubmitJobsResponse(jobs=[j for j in jobs if j is not None], revision=result.revision)

    async def get_job(self, request: api.GetJobRequest) -> api.JobResponse:
        with self.store.read() as tables:
            try:
                job = fsm.find_job(tables, request.job_id)
            except fsm.Rejected as exc:
                raise _rejected(exc) from None
            return api.JobResponse(job=job, revision=fsm.read_meta(tables).applied_index)

    async def list_jobs(self, request: api.ListJobsRequest) -> api.ListJobsResponse:
        try:
            filters = [job_filter.parse(f) for f in request.filters]
        except job_filter.FilterError as exc:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        if request.page_size < 0:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "page_size must not be negative")
        size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        token = request.page_token
        if token and not (token.isascii() and token.isdecimal() and len(token) <= 19
                          and int(token) < fsm.MAX_JOB_ID):
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "bad page_token")
        after = int(request.page_token or 0)
        return await asyncio.to_thread(self._list_jobs, filters, size, after)

    def _list_jobs(self, filters: list[job_filter.Filter], size: int, after: int) -> api.ListJobsResponse:
        response = api.ListJobsResponse()
        with self.store.read() as tables:
            response.revision = fsm.read_meta(tables).applied_index
            for _, raw in tables.scan("jobs", fsm.job_key(after + 1)):
                job = api.Job.FromString(raw)
                if not job_filter.matches_all(filters, job):
                    continue
                if len(response.jobs) == size:
                    response.next_page_token = str(response.jobs[-1].id)
                    break
                response.jobs.append(job)
        return response

    async def control_job(self, request: api.ControlJobRequest) -> api.JobResponse:
        self.require_leader()
        _ensure_request_id(request)
        with self.store.read() as tables:
            if fsm.read_result(tables, request.request_id) is None:
                try:
                    fsm.check_control(fsm.find_job(tables, request.job_id), request.action)
                except fsm.Rejected as exc:
                    raise _rejected(exc) from None
        result = await self._propose_one(log.Entry(control=request), request.request_id)
        return self._job_response(result)

    async def modify_job(self, request: api.ModifyJobRequest) -> api.JobResponse:
        self.require_leader()
        _ensure_request_id(request)
        with self.store.read() as tables:
            if fsm.read_result(tables, request.request_id) is None:
                try:
                    fsm.check_modify(tables, fsm.find_job(tables, request.job_id), request)
                except fsm.Rejected as exc:
                    raise _rejected(exc) from None
        result = await self._propose_one(log.Entry(modify=request), request.request_id)
        return self._job_response(result)

    def _job_response(self, result: log.Result) -> api.JobResponse:
        if len(result.job_ids) != 1:  # the id was first used by another kind of request
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "request id already used by another request")
        with self.store.read() as tables:
            job = fsm.read_job(tables, result.job_ids[0])
        return api.JobResponse(job=job, revision=result.revision)

    # -------------------------------------------------------------- AdminService

    async def create_queue(self, request: api.PutQueueRequest) -> api.QueueResponse:
        return await self._put_queue(request, create=True)

    async def update_queue(self, request: api.PutQueueRequest) -> api.QueueResponse:
        return await self._put_queue(request, create=False)

    async def _put_queue(self, request: api.PutQueueRequest, create: bool) -> api.QueueResponse:
        self.require_leader()
        _ensure_request_id(request)
        try:
            fsm.check_queue(request.queue)
        except fsm.Rejected as exc:
            raise _rejected(exc) from None
        with self.store.read() as tables:
            exists = fsm.read_queue(tables, request.queue.name) is not None
        if create and exists:
            raise ApiError(grpc.StatusCode.ALREADY_EXISTS, f"queue {request.queue.name!r} exists")
        if not create and not exists:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"no queue {request.queue.name!r}")
        entry = log.Entry(put_queue=log.PutQueueEntry(queue=request.queue, request_id=request.request_id,
                                                      create=create))
        result = await self._propose_one(entry, request.request_id)
        return api.QueueResponse(queue=request.queue, revision=result.revision)

    async def list_queues(self, request: api.ListQueuesRequest) -> api.ListQueuesResponse:
        with self.store.read() as tables:
            meta = fsm.read_meta(tables)
            queues = [api.Queue.FromString(raw) for _, raw in tables.scan("queues")]
        queues.sort(key=lambda q: (-q.priority, q.name))
        return api.ListQueuesResponse(queues=queues, default_queue=meta.default_queue,
                                      revision=meta.applied_index)

    # -------------------------------------------------------------- ClusterService

    def local_status(self) -> api.ReplicaStatus:
        raft = self.raft.status()
        meta = self.store.meta()
        leader = self.config.grpc_for_raft(raft.leader) or ""
        health = "ok" if leader else "no leader"
        return api.ReplicaStatus(id=self.me.id, grpc_address=self.me.grpc, raft_address=self.me.raft,
                                 role=raft.role, term=raft.term, commit_index=raft.commit_index,
                                 applied_index=meta.applied_index, revision=meta.applied_index,
                                 pid=os.getpid(), health=health, leader_grpc_address=leader,
                                 log_length=raft.log_length)

    async def status(self, request: api.StatusRequest) -> api.StatusResponse:
        meta = self.store.meta()
        response = api.StatusResponse(cluster_id=self.config.cluster_id,
                                      scheduler_lease_holder=meta.lease_holder,
                                      scheduler_lease_epoch=meta.lease_epoch,
                                      scheduler_lease_expires_ms=meta.lease_expires_ms)
        if request.local_only:
            response.replicas.append(self.local_status())
            return response
        peers = [r for r in self.config.replicas if r.id != self.me.id]
        answers = await asyncio.gather(*(_peer_status(r.grpc) for r in peers))
        response.replicas.append(self.local_status())
        for replica, answer in zip(peers, answers, strict=True):
            if isinstance(answer, api.ReplicaStatus):
                response.replicas.append(answer)
            else:
                response.replicas.append(api.ReplicaStatus(
                    id=replica.id, grpc_address=replica.grpc, raft_address=replica.raft,
                    role="unreachable", health=f"unreachable: {answer}"))
        response.replicas.sort(key=lambda r: r.id)
        return response

    async def list_hosts(self, request: api.ListHostsRequest) -> api.ListHostsResponse:
        with self.store.read() as tables:
            hosts = [api.Host.FromString(raw) for _, raw in tables.scan("hosts")]
            revision = fsm.read_meta(tables).applied_index
        return api.ListHostsResponse(hosts=hosts, revision=revision)

    # -------------------------------------------------------------- WorkerService

    async def worker_connect(self, requests: AsyncIterator[bytes],
                             context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """One worker's stream, leader only: join (committed), then worker_session."""
        try:
            self.require_leader()
            first = _parse(api.WorkerMessage, await anext(requests))
            if first.WhichOneof("body") != "join":
                raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be a join")
            try:
                fsm.check_host_spec(first.join)
            except fsm.Rejected as exc:
                raise _rejected(exc) from None
            result = self._settled("", await self.joins.submit(first.join))
        except StopAsyncIteration:
            return
        except ApiError as exc:
            await context.abort(exc.code, exc.message, trailing_metadata=exc.metadata)
        name, generation = first.join.name, result.generation
        liveness = self._liveness
        if liveness is not None:
            liveness.seen(name, generation, time.monotonic())
        logger.info("host %s joined, generation %d", name, generation)
        session = WorkerSession(self, self.reports.submit_many, name, generation, liveness)
        self._sessions[name] = session
        session.outbox.put_nowait(api.ControllerMessage(joined=api.Joined(
            generation=generation, heartbeat_s=self.config.heartbeat_s)))
        parsed = (_parse(api.WorkerMessage, raw) async for raw in requests)
        reader = asyncio.get_running_loop().create_task(session.read(parsed))
        commander = asyncio.get_running_loop().create_task(session.command())
        commander.add_done_callback(functools.partial(_session_task_ended, session))
        try:
            ended = False
            while not ended and (message := await session.outbox.get()) is not None:
                frame, size = [message], message.ByteSize()
                while not session.outbox.empty() and len(frame) < worker_wire.MAX_PER_FRAME \
                        and size < worker_wire.MAX_FRAME_BYTES:
                    if (queued := session.outbox.get_nowait()) is None:
                        ended = True
                        break
                    frame.append(queued)
                    size += queued.ByteSize()
                yield worker_wire.controller_frame(frame).SerializeToString()
            failure = reader.exception() if reader.done() and not reader.cancelled() else None
        finally:
            commander.cancel()
            reader.cancel()
            session.close()
            if self._sessions.get(name) is session:
                del self._sessions[name]
        if isinstance(failure, ApiError):
            await context.abort(failure.code, failure.message, trailing_metadata=failure.metadata)

    # -------------------------------------------------------------- SchedulerService

    async def acquire_lease(self, request: api.LeaseRequest) -> api.LeaseResponse:
        self.require_leader()
        if not request.scheduler_id or not 0 < request.duration_s <= 3600:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "a scheduler id and 0 < duration_s <= 3600")
        entry = log.Entry(lease=log.LeaseEntry(scheduler_id=request.scheduler_id[:128],
                                               duration_ms=int(request.duration_s * 1000)))
        results, err = await self.propose(entry)
        if err != SUCCESS or not results:
            raise ApiError(grpc.StatusCode.UNAVAILABLE, "the lease request's outcome is unknown; retry")
        result = results[0]
        if result.code not in (log.OK, log.FAILED_PRECONDITION):
            raise ApiError(_status_code(result.code), result.message)
        return api.LeaseResponse(granted=result.code == log.OK, epoch=result.lease_epoch,
                                 holder=result.lease_holder, expires_ms=result.lease_expires_ms,
                                 revision=result.revision)

    async def submit_decisions(self, request: api.DecisionBatch) -> api.DecisionBatchResponse:
        """One pass's decisions as one entry; outcomes are hints, the view is the truth."""
        self.require_leader()
        if len(request.decisions) > MAX_DECISIONS:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"at most {MAX_DECISIONS} decisions per batch")
        results, err = await self.propose(log.Entry(decisions=request))
        if err != SUCCESS or not results:
            raise ApiError(grpc.StatusCode.UNAVAILABLE, "the batch's outcome is unknown; the view will tell")
        return api.DecisionBatchResponse(rejections=results[0].rejections, revision=results[0].revision)

    # -------------------------------------------------------------- SyncService

    async def sync(self, raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """Leader only: snapshot or events from a revision, then a live tail (sync_stream.py)."""
        try:
            request = _parse(log.SyncRequest, raw)
            self.require_leader()
            leadership = self._liveness
            revision = request.from_revision
            # Out of the event loop: a snapshot of a large state takes a while to read;
            # progress marks meanwhile keep the watcher from taking the stream for dead.
            reading = asyncio.ensure_future(asyncio.to_thread(self._sync_opening, request))
            await asyncio.wait([reading], timeout=PROGRESS_S / 2)
            while not reading.done():
                yield log.SyncMessage(progress=self.store.meta().applied_index).SerializeToString()
                await asyncio.wait([reading], timeout=PROGRESS_S)
            opening = reading.result()
            if opening:
                revision = opening[-1].snapshot_end.revision
            for message in opening:
                yield message.SerializeToString()
            last_progress = 0.0
            while True:
                self.still_leading(leadership)
                applied = self._applied
                with self.store.read() as tables:
                    meta = fsm.read_meta(tables)
                    if not sync_stream.events_available(meta, revision) and revision < meta.applied_index:
                        raise ApiError(grpc.StatusCode.OUT_OF_RANGE,
                                       f"resync required: events after {revision} were compacted "
                                       f"(floor {meta.events_floor})")
                    events = sync_stream.events_after(tables, revision)
                for event in events:
                    yield log.SyncMessage(event=event).SerializeToString()
                    revision = event.revision
                if len(events) == sync_stream.EVENTS_PER_READ:
                    continue
                if time.monotonic() - last_progress >= PROGRESS_S:
                    last_progress = time.monotonic()
                    yield log.SyncMessage(progress=meta.applied_index).SerializeToString()
                try:
                    await asyncio.wait_for(applied.wait(), PROGRESS_S)
                except TimeoutError:
                    pass
        except ApiError as exc:
            await context.abort(exc.code, exc.message, trailing_metadata=exc.metadata)

    def _sync_opening(self, request: log.SyncRequest) -> list[log.SyncMessage]:
        """Nothing if the events after the request's revision are all there; else a snapshot."""
        with self.store.read() as tables:
            meta = fsm.read_meta(tables)
            if request.cluster_id == self.config.cluster_id and \
                    sync_stream.events_available(meta, request.from_revision):
                return []
            return list(sync_stream.snapshot(tables, self.config.cluster_id))

    def still_leading(self, liveness: Liveness | None) -> None:
        if not self.raft.is_leader() or self._liveness is not liveness:
            self.require_leader()  # raises with the new leader's address, if known
            raise ApiError(grpc.StatusCode.UNAVAILABLE, "leadership changed; reconnect")

    # -------------------------------------------------------------- JobService: force-run

    async def run_job(self, request: api.RunJobRequest) -> api.JobResponse:
        """Like LSF brun: a DISPATCH through the committed path, with the scheduler's checks."""
        self.require_leader()
        _ensure_request_id(request)
        with self.store.read() as tables:
            try:
                job = fsm.find_job(tables, request.job_id)
                fsm.check_dispatch(tables, job, request.host, job.attempt)
            except fsm.Rejected as exc:
                raise _rejected(exc) from None
        dispatch = log.Dispatch(job_id=job.id, host=request.host, attempt=job.attempt,
                                request_id=request.request_id)
        result = await self._propose_one(log.Entry(dispatch=dispatch), request.request_id)
        return self._job_response(result)

    # -------------------------------------------------------------- serving

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        return [
            _service("xce.v1.JobService", {
                "SubmitJobs": (self.submit_jobs, api.SubmitJobsRequest),
                "GetJob": (self.get_job, api.GetJobRequest),
                "ListJobs": (self.list_jobs, api.ListJobsRequest),
                "ControlJob": (self.control_job, api.ControlJobRequest),
                "ModifyJob": (self.modify_job, api.ModifyJobRequest),
                "RunJob": (self.run_job, api.RunJobRequest),
            }),
            _service("xce.v1.ClusterService", {"Status": (self.status, api.StatusRequest),
                                                "ListHosts": (self.list_hosts, api.ListHostsRequest)}),
            grpc.method_handlers_generic_handler("xce.v1.SyncService", {
                "Sync": grpc.unary_stream_rpc_method_handler(self.sync)}),
            grpc.method_handlers_generic_handler("xce.v1.WorkerService", {
                "Connect": grpc.stream_stream_rpc_method_handler(self.worker_connect)}),
            _service("xce.v1.SchedulerService", {
                "AcquireLease": (self.acquire_lease, api.LeaseRequest),
                "SubmitDecisions": (self.submit_decisions, api.DecisionBatch),
            }),
            _service("xce.v1.AdminService", {
                "CreateQueue": (self.create_queue, api.PutQueueRequest),
                "UpdateQueue": (self.update_queue, api.PutQueueRequest),
                "ListQueues": (self.list_queues, api.ListQueuesRequest),
            }),
        ]

    async def serve(self, stop: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        if self.raft.is_leader():
            self._on_role("leader")
        server = grpc.aio.server(options=server_options())
        server.add_generic_rpc_handlers(self.handlers())
        server.add_insecure_port(self.me.grpc)
        await server.start()
        logger.info("replica %d serving gRPC on %s, Raft on %s", self.me.id, self.me.grpc, self.me.raft)
        await stop.wait()
        await server.stop(grace=1.0)
        for task in (self._push_task, self._liveness_task):
            if task is not None:
                task.cancel()
        await self.batcher.close()
        await self.reports.close()
        await self.joins.close()
        self.raft.close()
        self.store.close()


def _session_task_ended(session: WorkerSession, task: asyncio.Task[None]) -> None:
    """A session's command task that died of a bug ends the stream (the worker
    re-joins) instead of leaving it attached and deaf."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("worker session %s failed", session.name, exc_info=task.exception())
        session.outbox.put_nowait(None)


def server_options() -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", 16 * MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.so_reuseport", 0),
    ]


def _ensure_request_id(request: Any) -> None:
    """Give a request without an id a fresh one; refuse one too long to store."""
    if not request.request_id:
        request.request_id = uuid.uuid4().hex
    try:
        fsm.check_request_id(request.request_id)
    except fsm.Rejected as exc:
        raise _rejected(exc) from None


def _parse(message_class: type[M], raw: bytes) -> M:
    try:
        return message_class.FromString(raw)
    except DecodeError as exc:
        raise ApiError(grpc.StatusCode.INVALID_ARGUMENT,
                       f"malformed {message_class.__name__} (bad protobuf or invalid UTF-8): {exc}") from None


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


Handler = Callable[[Any], Awaitable[Message]]


def _service(name: str, methods: dict[str, tuple[Handler, type[Message]]]) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        name, {method: grpc.unary_unary_rpc_method_handler(_unary(fn, cls))
               for method, (fn, cls) in methods.items()})


def _unary(fn: Handler, request_class: type[Message]) -> Callable[..., Awaitable[bytes]]:
    async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            response = await fn(_parse(request_class, raw))
        except ApiError as exc:
            await context.abort(exc.code, exc.message, trailing_metadata=exc.metadata)
        return response.SerializeToString()

    return handle


async def _peer_status(address: str) -> api.ReplicaStatus | str:
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.unary_unary("/xce.v1.ClusterService/Status",
                                       request_serializer=api.StatusRequest.SerializeToString,
                                       response_deserializer=api.StatusResponse.FromString)
            response: api.StatusResponse = await call(api.StatusRequest(local_only=True), timeout=1.0)
            return response.replicas[0]
    except grpc.aio.AioRpcError as exc:
        return str(exc.code().name).lower()
