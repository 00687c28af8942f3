"""The leader's side of every stream and call: controller/server.py without gRPC.

Theory of operation. A `Leadership` is what one replica keeps in memory
while it believes it leads one term, as controller/server.py's Replica does:
proposal callbacks, heartbeat bookkeeping (the real host_liveness.Liveness),
worker sessions, the report group commit, Sync streams and the
configuration push. It is dropped whole when the replica crashes or learns
it was deposed, and every stream it served ends with it.

What is real and what is replicated here:
- worker sessions are the real `WorkerSession`: its `read` and `command`
  coroutines run on the simulation's event loop (simloop.py), relay reports
  through the real `GroupCommit`, and derive RunJob / signals from the
  tables `store.read()` yields. Replicated from server.worker_connect: the
  join handshake, `_route_to_sessions` (with the real `route`), and the
  outbox-to-frames loop (with the real worker_wire framing);
- Sync streams: the real sync_stream.events_available / snapshot /
  events_after, sequenced like server.sync (snapshot or events, then the
  live tail, OUT_OF_RANGE once the next event was compacted);
- calls: submit (dedupe by request id, fsm.check_spec), lease and decision
  batches are proposed as server.py proposes them, and answered from the
  proposal's callback, i.e. after apply;
- entries are stamped with the simulated clock, as the leader stamps its own.

Commit before send: sessions see an entry only once it applied. The injected
bug `run_before_commit` makes `store.read()` yield the tables with every
proposed entry applied speculatively, and tells every session on each
proposal.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from controller import fsm, sync_stream
from controller.group_commit import GroupCommit
from controller.host_liveness import Liveness
from controller.tables import MemoryTables, Tables
from controller.worker_session import WorkerSession, route
from xce import worker_wire
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

from .network import Call, Reply, Stream
from .raft import LogEntry, Replica, copy_tables

if TYPE_CHECKING:
    from .cluster import Sim

CLUSTER = "sim"
QUEUE = "normal"
HEARTBEAT_S = 0.5
HEARTBEAT_TIMEOUT_S = 2.0
UNKNOWN_TIMEOUT_MS = 6_000
MAX_REPORTS_PER_ENTRY = 512

Ghost = tuple[str, int]  # (host, which join of it the generation stood for)


def init_entry(events_kept: int) -> log.Entry:
    return log.Entry(init=log.InitCluster(
        cluster_id=CLUSTER, default_queue=QUEUE, max_slots_per_job=4, config_digest="sim-1",
        queues=[api.Queue(name=QUEUE, priority=30)], events_kept=events_kept))


@dataclass
class SessionLink:
    stream: Stream
    session: WorkerSession
    ordinal: int  # ghost: which join of this host opened it (1, 2, ...)
    inbox: asyncio.Queue[api.WorkerMessage | None]
    reader: asyncio.Task[None] | None = None
    commander: asyncio.Task[None] | None = None
    ended: bool = False


@dataclass
class SyncLink:
    stream: Stream
    revision: int


class _Store:
    """What WorkerSession reads committed state through (StateStore.read)."""

    def __init__(self, leadership: Leadership) -> None:
        self._leadership = leadership

    @contextmanager
    def read(self) -> Iterator[Tables]:
        yield self._leadership.tables_for_sessions()


@dataclass
class Leadership:
    sim: Sim
    replica: Replica
    term: int
    noop_index: int
    liveness: Liveness
    configured: bool = False
    config_proposed: bool = False
    callbacks: dict[int, Callable[[list[log.Result] | None], None]] = field(default_factory=dict)
    joins: dict[int, Stream] = field(default_factory=dict)  # join proposed, not applied yet
    links: dict[int, SessionLink] = field(default_factory=dict)  # by stream id
    by_host: dict[str, WorkerSession] = field(default_factory=dict)  # server._sessions
    syncs: dict[int, SyncLink] = field(default_factory=dict)
    report_ghosts: dict[int, Ghost] = field(default_factory=dict)  # id(HostReport) -> ghost
    speculative: MemoryTables | None = None
    unavailable_proposed: set[tuple[str, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.store = _Store(self)
        self.reports: GroupCommit[log.HostReport] = GroupCommit(self._propose_reports, MAX_REPORTS_PER_ENTRY)
        self.join_commit: GroupCommit[api.HostSpec] = GroupCommit(self._propose_joins, MAX_REPORTS_PER_ENTRY)

    # -------------------------------------------------------------- the Leadership protocol

    def still_leading(self, liveness: Liveness | None) -> None:
        if not self.replica.leading or liveness is not self.liveness:
            raise ConnectionError("leadership changed; reconnect")

    def tables_for_sessions(self) -> Tables:
        if self.sim.options.run_before_commit and self.speculative is not None:
            return self.speculative  # the injected bug: what is proposed, not what is committed
        return self.replica.tables

    # -------------------------------------------------------------- proposing and applying

    def serving(self) -> bool:
        return self.replica.leading and self.replica.up and self.replica.applied >= self.noop_index \
            and self.configured

    def propose(self, entry: log.Entry, callback: Callable[[list[log.Result] | None], None] | None = None,
                ghosts: list[Ghost] | None = None) -> int:
        entry.stamp_ms = self.sim.now_ms
        entry.proposer = self.replica.rid
        self.replica.entries.append(LogEntry(self.term, entry.SerializeToString()))
        index = self.replica.last_index()
        if callback is not None:
            self.callbacks[index] = callback
        if ghosts:
            self.sim.ghosts[(index, self.term)] = ghosts
        if self.sim.options.run_before_commit:
            self._speculate()
        return index

    async def _propose_reports(self, reports: list[log.HostReport]) -> list[log.Result | None]:
        """server._propose_reports: one HostReports entry; results once it applied."""
        future: asyncio.Future[list[log.Result] | None] = asyncio.get_running_loop().create_future()
        ghosts = [self.report_ghosts.pop(id(r), (r.host, 0)) for r in reports]
        self.propose(log.Entry(reports=log.HostReports(reports=reports)), _resolver(future), ghosts)
        results = await future
        if results is not None and len(results) == len(reports):
            return list(results)
        return [None] * len(reports)

    async def _propose_joins(self, joins: list[api.HostSpec]) -> list[log.Result | None]:
        """server._propose_joins: one HostJoins entry."""
        future: asyncio.Future[list[log.Result] | None] = asyncio.get_running_loop().create_future()
        self.propose(log.Entry(joins=log.HostJoins(joins=joins)), _resolver(future))
        results = await future
        if results is not None and len(results) == len(joins):
            return list(results)
        return [None] * len(joins)

    def _speculate(self) -> None:
        tables = copy_tables(self.replica.tables)
        for index in range(self.replica.applied + 1, self.replica.last_index() + 1):
            data = self.replica.entry(index).data
            if data is not None:
                fsm.apply(tables, index, data)
        self.speculative = tables
        for session in self.by_host.values():
            session.changed_unknown()

    def on_applied(self, index: int, entry: LogEntry, results: list[log.Result] | None) -> None:
        callback = self.callbacks.pop(index, None)
        if callback is not None and entry.term == self.term:
            callback(results)
        self.maybe_configure()
        if entry.data is None or not self.replica.leading:
            return
        self._route_to_sessions(index)
        for link in list(self.syncs.values()):
            self.tail(link)

    def _route_to_sessions(self, index: int) -> None:
        """server._route_to_sessions for one applied entry."""
        raw = self.replica.tables.get("events", fsm.revision_key(index))
        if raw is None:
            for session in self.by_host.values():
                session.changed_unknown()
            return
        routed = route(log.Event.FromString(raw))
        for name in sorted(routed.jobs.keys() | routed.hosts):
            listener = self.by_host.get(name)
            if listener is not None:
                listener.changed(index, routed.jobs.get(name, []), host_record=name in routed.hosts)

    def maybe_configure(self) -> None:
        """server._push_config: propose InitCluster once the no-op applied, if it differs."""
        if self.configured or self.config_proposed or self.replica.applied < self.noop_index:
            return
        meta = fsm.read_meta(self.replica.tables)
        if meta.cluster_id == CLUSTER and meta.config_digest == "sim-1":
            self.configured = True
            return
        self.config_proposed = True

        def done(results: list[log.Result] | None) -> None:
            self.configured = True

        self.propose(init_entry(self.sim.options.events_kept), done)

    def step_down(self) -> None:
        """The leadership is over: every stream it serves ends, every waiter is released."""
        for stream in [*self.joins.values(), *(link.stream for link in self.links.values()),
                       *(link.stream for link in self.syncs.values())]:
            stream.close("UNAVAILABLE")
        self.joins.clear()
        self.syncs.clear()
        self.callbacks.clear()
        for link in list(self.links.values()):
            link.inbox.put_nowait(None)
        self.sim.loop.run_until_complete(self.reports.close())
        self.sim.loop.run_until_complete(self.join_commit.close())
        self.settle()

    # -------------------------------------------------------------- worker streams

    def on_worker_message(self, stream: Stream) -> str | None:
        """Take the head of a worker stream's up queue; None if it must wait."""
        link = self.links.get(stream.sid)
        if link is None and stream.sid in self.joins:
            return None  # the server reads nothing more until the join is committed
        message: api.WorkerMessage = stream.up.popleft()
        if link is None:
            return self._join(stream, message)
        link.inbox.put_nowait(message)
        kind = message.WhichOneof("body")
        reports = [f"{r.WhichOneof('body')} {r.job_id}.{r.attempt}"
                   for r in worker_wire.worker_reports(message)]
        return f"{stream.endpoint} {kind} {', '.join(reports)}".rstrip()

    def _join(self, stream: Stream, message: api.WorkerMessage) -> str:
        if message.WhichOneof("body") != "join" or not self.serving():
            stream.close("UNAVAILABLE")
            return f"join of {stream.endpoint} refused"
        fsm.check_host_spec(message.join)
        self.joins[stream.sid] = stream
        self.sim.loop.create_task(self._connect(stream, message.join))
        return f"join {message.join.name} queued for commit"

    async def _connect(self, stream: Stream, spec: api.HostSpec) -> None:
        """server.worker_connect: the join committed (group-committed), then a session
        with its reader and commander."""
        result = await self.join_commit.submit(spec)
        self.joins.pop(stream.sid, None)
        if result is None or result.code != log.OK or not stream.open:
            stream.close("UNAVAILABLE")  # _settled: outcome unknown, the worker retries
            return
        name, generation = spec.name, result.generation
        self.liveness.seen(name, generation, self.sim.now_s())
        inbox: asyncio.Queue[api.WorkerMessage | None] = asyncio.Queue()
        link = SessionLink(stream, cast(WorkerSession, None), self.sim.join_ordinal(name), inbox)
        session = WorkerSession(cast(Any, self), self._relay_for(link), name, generation, self.liveness)
        link.session = session
        self.links[stream.sid] = link
        self.by_host[name] = session
        session.outbox.put_nowait(api.ControllerMessage(joined=api.Joined(generation=generation,
                                                                          heartbeat_s=HEARTBEAT_S)))
        link.reader = self.sim.loop.create_task(session.read(_messages(inbox)))
        link.commander = self.sim.loop.create_task(session.command())

    def _relay_for(self, link: SessionLink) -> Callable[[list[log.HostReport]], Any]:
        async def relay(reports: list[log.HostReport]) -> list[log.Result | None]:
            for report in reports:
                self.report_ghosts[id(report)] = (report.host, link.ordinal)
            return await self.reports.submit_many(reports)

        return relay

    def settle(self) -> None:
        """Run the sessions' coroutines, then move their outboxes onto their streams."""
        self.sim.loop.run_idle()
        for link in list(self.links.values()):
            self._forward(link)

    def _forward(self, link: SessionLink) -> None:
        """server.worker_connect's loop: outbox -> frames; None (or a closed stream) ends it."""
        session, stream = link.session, link.stream
        frame: list[api.ControllerMessage] = []
        while not session.outbox.empty() and not link.ended:
            message = session.outbox.get_nowait()
            if message is None:
                link.ended = True
            else:
                frame.append(message)
        if frame:
            for start in range(0, len(frame), worker_wire.MAX_PER_FRAME):
                stream.send_down(worker_wire.controller_frame(frame[start:start + worker_wire.MAX_PER_FRAME]))
        if not stream.open and not link.ended:
            link.inbox.put_nowait(None)  # the worker hung up: its read loop ends, then the outbox
        if link.ended:
            self._end(link)

    def _end(self, link: SessionLink) -> None:
        for task in (link.commander, link.reader):
            if task is not None:
                task.cancel()
        link.session.close()
        link.stream.close("UNAVAILABLE")
        if self.by_host.get(link.session.name) is link.session:
            del self.by_host[link.session.name]
        self.links.pop(link.stream.sid, None)
        self.sim.loop.run_idle()

    def overdue(self) -> list[tuple[str, int]]:
        hosts = [api.Host.FromString(raw) for _, raw in self.replica.tables.scan("hosts")]
        return self.liveness.overdue(hosts, self.sim.now_s())

    def mark_unavailable(self, name: str, generation: int) -> None:
        change = log.SetHostStatus(name=name, generation=generation, status=api.HOST_UNAVAIL)
        ordinal = self.sim.join_ordinal_at(name, self.replica.applied)
        self.propose(log.Entry(host_status=change), ghosts=[(name, ordinal)])

    def lost_hosts(self) -> list[api.Host]:
        """server._lost_hosts: unavailable past the second timeout, with UNKWN jobs."""
        lost = []
        tables = self.replica.tables
        for _, raw in tables.scan("hosts"):
            host = api.Host.FromString(raw)
            if host.status != api.HOST_UNAVAIL or host.status_time_ms > self.sim.now_ms - UNKNOWN_TIMEOUT_MS:
                continue
            jobs = (fsm.read_job(tables, i) for i in fsm.host_job_ids(tables, host.spec.name))
            if any(j is not None and j.state == api.UNKWN for j in jobs):
                lost.append(host)
        return lost

    def resolve(self, host: api.Host) -> None:
        change = log.SetHostStatus(name=host.spec.name, generation=host.generation)
        ordinal = self.sim.join_ordinal_at(host.spec.name, self.replica.applied)
        self.propose(log.Entry(resolve_host=change), ghosts=[(host.spec.name, ordinal)])

    # -------------------------------------------------------------- Sync streams

    def open_sync(self, stream: Stream, request: log.SyncRequest) -> str:
        if not self.serving():
            stream.close("UNAVAILABLE")
            return "refused: not serving"
        tables = self.replica.tables
        meta = fsm.read_meta(tables)
        revision = request.from_revision
        resume = request.cluster_id == CLUSTER and sync_stream.events_available(meta, revision)
        if not resume:
            opening = list(sync_stream.snapshot(tables, CLUSTER))
            for message in opening:
                stream.send_down(message)
            revision = opening[-1].snapshot_end.revision
        link = SyncLink(stream, revision)
        self.syncs[stream.sid] = link
        self.tail(link)
        return f"{'events after' if resume else 'snapshot at'} {revision}"

    def tail(self, link: SyncLink) -> None:
        if not link.stream.open:
            self.syncs.pop(link.stream.sid, None)
            return
        tables = self.replica.tables
        while True:
            meta = fsm.read_meta(tables)
            if not sync_stream.events_available(meta, link.revision) and link.revision < meta.applied_index:
                link.stream.close("OUT_OF_RANGE")  # resync required: the events it needs were compacted
                self.syncs.pop(link.stream.sid, None)
                return
            events = sync_stream.events_after(tables, link.revision)
            for event in events:
                link.stream.send_down(log.SyncMessage(event=event))
                link.revision = event.revision
            if len(events) < sync_stream.EVENTS_PER_READ:
                return

    def repeat_event(self, link: SyncLink, back: int) -> int | None:
        """Send an already sent event again (a catch-up read overlapping the live tail)."""
        revision = link.revision - back
        raw = self.replica.tables.get("events", fsm.revision_key(revision)) if revision > 0 else None
        if raw is None or not link.stream.open:
            return None
        link.stream.send_down(log.SyncMessage(event=log.Event.FromString(raw)))
        return revision

    # -------------------------------------------------------------- calls

    def on_call(self, call: Call) -> str:
        if not self.serving():
            self.sim.replies.append(Reply(call, None))
            return f"{call.kind} from {call.caller} refused: not serving"
        if call.kind == "submit":
            return self._submit(call)
        if call.kind == "lease":
            request: api.LeaseRequest = call.request
            entry = log.Entry(lease=log.LeaseEntry(scheduler_id=request.scheduler_id,
                                                   duration_ms=int(request.duration_s * 1000)))

            def leased(results: list[log.Result] | None) -> None:
                if not results:  # outcome unknown: the scheduler asks again
                    self.sim.replies.append(Reply(call, None))
                    return
                result = results[0]
                self.sim.replies.append(Reply(call, api.LeaseResponse(
                    granted=result.code == log.OK, epoch=result.lease_epoch, holder=result.lease_holder,
                    expires_ms=result.lease_expires_ms, revision=result.revision)))

            index = self.propose(entry, leased)
            return f"lease for {request.scheduler_id} proposed at {index}"
        batch: api.DecisionBatch = call.request

        def decided(results: list[log.Result] | None) -> None:
            if results:
                self.sim.replies.append(Reply(call, api.DecisionBatchResponse(
                    rejections=results[0].rejections, revision=results[0].revision)))

        index = self.propose(log.Entry(decisions=batch), decided)
        return f"batch of {batch.scheduler_id} epoch {batch.lease_epoch} proposed at {index}"

    def _submit(self, call: Call) -> str:
        request: api.SubmitJobsRequest = call.request
        earlier = fsm.read_result(self.replica.tables, request.request_id)
        if earlier is not None:
            self.sim.replies.append(Reply(call, earlier))
            return f"submit {request.request_id} answered from its stored result"
        fsm.check_spec(self.replica.tables, fsm.read_meta(self.replica.tables), request.jobs[0])

        def submitted(results: list[log.Result] | None) -> None:
            if results:
                self.sim.replies.append(Reply(call, results[0]))

        index = self.propose(log.Entry(submit=log.SubmitBatch(requests=[request])), submitted)
        return f"submit {request.request_id} proposed at {index}"


def _resolver(future: asyncio.Future[list[log.Result] | None]) -> Callable[[list[log.Result] | None], None]:
    """A proposal callback that hands the results to a coroutine waiting on `future`."""
    def resolve(results: list[log.Result] | None) -> None:
        if not future.done():
            future.set_result(results)

    return resolve


async def _messages(inbox: asyncio.Queue[api.WorkerMessage | None]) -> AsyncIterator[api.WorkerMessage]:
    """The request stream as the session's read loop sees it; None: the worker hung up."""
    while (message := await inbox.get()) is not None:
        yield message
